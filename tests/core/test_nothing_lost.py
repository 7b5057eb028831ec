"""--dumpref-report never destroys a write-up: it replaces the file and its figures only when
the run completed, and a run of some claims updates those claims in place, keeping the rest."""
import pytest
import writeup_files

CLAIM = '''
import os
import pytest

@pytest.mark.claim("{sentence}")
@pytest.mark.provenance(dtype="f32", shapes={{"x": (2,)}}, method="m")
def test_{name}(evidence, tmp_path):
    value = int(os.environ.get("VALUE_{name}", "1"))
    evidence.number("n", value)
    p = tmp_path / "plot.png"
    p.write_bytes(b"\\x89PNG {name}")
    evidence.figure("plot of {name}", p, data=[{{"x": 1, "y": value}}])
    assert value > 0
'''


def claim(name, sentence=None):
    return CLAIM.format(name=name, sentence=sentence or f"Claim {name} holds")


@pytest.fixture
def project(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\ntitle = "Kept"\n')
    pytester.makepyfile(test_one=claim("a") + claim("b"), test_two=claim("c"))
    pytester.runpytest("--dumpref-report=docs/w.md").assert_outcomes(passed=3)
    return pytester


def snapshot(pytester):
    root = pytester.path / "docs"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_write_up_has_its_figures(project):
    files = snapshot(project)
    assert set(files) == {"w.md", "w.dumpref.json", "w.assets/test_a-plot-of-a.png", "w.assets/test_b-plot-of-b.png",
                          "w.assets/test_c-plot-of-c.png"}
    assert "| x | y |" in files["w.md"].decode()  # a figure's plotted data is evidence, shown folded or not


@pytest.mark.parametrize("breakage", [
    "unknown section",
    "claim marker without a sentence",
    "collection error",
    "internal error",
    "ctrl-c",
])
def test_a_run_that_did_not_complete_leaves_the_write_up_byte_identical(project, breakage):
    before = snapshot(project)
    if breakage == "unknown section":
        project.makepyfile(test_three=claim("d").replace('@pytest.mark.claim("Claim d holds")',
                                                         '@pytest.mark.claim("Claim d", section="elsewhere")'))
    elif breakage == "claim marker without a sentence":
        project.makepyfile(test_three=claim("d").replace('@pytest.mark.claim("Claim d holds")', "@pytest.mark.claim()"))
    elif breakage == "collection error":
        project.makepyfile(test_three="def test_broken(:\n")
    elif breakage == "internal error":
        project.makeconftest("def pytest_collection_finish(session):\n    raise RuntimeError('crash')\n")
    else:
        project.makepyfile(test_three=claim("d").replace("assert value > 0", "raise KeyboardInterrupt"))
    # pytester's in-process run would hand Ctrl-C on to this test run: that one runs apart
    run = project.runpytest_subprocess if breakage == "ctrl-c" else project.runpytest
    res = run("--dumpref-report=docs/w.md")
    assert res.ret in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
    assert snapshot(project) == before
    assert not [p for p in (project.path / "docs").iterdir() if p.name.startswith(".")]  # no temporary left
    if breakage in ("collection error", "ctrl-c"):
        res.stdout.fnmatch_lines(["*did not write docs/w.md: the run did not complete; the existing "
                                  "write-up and its figures are unchanged*"])


@pytest.mark.parametrize("narrowing", [["-k", "test_a"], ["test_one.py::test_a"], ["--deselect", "test_one.py::test_b"]])
def test_a_narrowed_run_updates_its_claims_in_place(project, monkeypatch, narrowing):
    monkeypatch.setenv("VALUE_a", "2")
    monkeypatch.setenv("VALUE_b", "5")  # b and c are not run: their old values stay
    res = project.runpytest(*narrowing, "--dumpref-report=docs/w.md")
    assert res.ret == 0
    text = (project.path / "docs/w.md").read_text()
    assert "3 claims established" in text and "Claim b holds" in text and "Claim c holds" in text
    assert (project.path / "docs/w.assets/test_c-plot-of-c.png").read_bytes() == b"\x89PNG c"
    res.stdout.fnmatch_lines(["*claims this run did not run are kept as the existing write-up has them*"])
    # the same as a full render with a's new value
    monkeypatch.delenv("VALUE_b")
    project.runpytest("--dumpref-report=docs/full.md")
    full = (project.path / "docs/full.md").read_text()
    assert text.replace("w.assets", "full.assets").replace("w.md", "full.md").replace(
        "w.dumpref.json", "full.dumpref.json") == full
    assert (project.path / "docs/w.dumpref.json").read_text() == (project.path / "docs/full.dumpref.json").read_text()


def test_a_check_draws_figures_afresh_without_touching_the_committed_ones(project):
    before = snapshot(project)
    res = project.runpytest("--dumpref-check=docs/w.md", "-v")
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["  figure 'plot of a': drawn afresh at *plot.png"])
    assert snapshot(project) == before


def test_a_file_run_keeps_the_other_files_claims_and_drops_its_own_removed_ones(project):
    project.makepyfile(test_one=claim("a"))  # b removed from test_one.py
    project.runpytest("test_one.py", "--dumpref-report=docs/w.md").assert_outcomes(passed=1)
    text = (project.path / "docs/w.md").read_text()
    assert "Claim c holds" in text          # another file: kept
    assert "Claim b holds" not in text      # its own file was run whole: b is gone
    assert not (project.path / "docs/w.assets/test_b-plot-of-b.png").exists()


def test_last_failed_keeps_the_claims_that_passed(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\ntitle = "Kept"\n')
    pytester.makepyfile(test_one=claim("a") + claim("b"))
    pytester.runpytest("--dumpref-report=w.md")
    pytester.makepyfile(test_one=claim("a") + claim("b").replace("assert value > 0", "assert value > 1"))
    pytester.runpytest("--dumpref-report=w.md").assert_outcomes(passed=1, failed=1)
    pytester.makepyfile(test_one=claim("a") + claim("b"))
    pytester.runpytest("--lf", "--dumpref-report=w.md").assert_outcomes(passed=1)
    text = (pytester.path / "w.md").read_text()
    assert "2 claims established, 0 not established" in text and "Claim a holds" in text


def test_a_file_that_is_not_a_write_up_is_never_overwritten(pytester):
    pytester.makepyfile(test_one=claim("a"))
    (pytester.path / "README.md").write_text("# my project\n")
    res = pytester.runpytest("--dumpref-report=README.md")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dumpref-report=README.md: the file exists and is not a write-up made by --dumpref-report" in res.stderr.str()
    assert (pytester.path / "README.md").read_text() == "# my project\n"


def test_a_narrowed_run_refuses_to_update_an_unreadable_write_up(project):
    path = project.path / "docs/w.md"
    writeup_files.embed(path)
    path.write_text(path.read_text().replace('"format": 2', '"format": 1'))
    before = snapshot(project)
    res = project.runpytest("-k", "test_a", "--dumpref-report=docs/w.md")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    assert "did not update docs/w.md in place" in res.stdout.str()
    assert "Run every claim to render it whole, or name another file" in res.stdout.str()
    assert snapshot(project) == before
    # a full run renders it whole
    project.runpytest("--dumpref-report=docs/w.md").assert_outcomes(passed=3)
    assert writeup_files.data(path)["format"] == 3


def test_an_exception_while_the_files_move_puts_the_old_pair_back(project, monkeypatch):
    """The data moves first and the Markdown last; should the last move fail, the old data
    and figures are put back: the write-up and its data still belong together."""
    import os
    before = snapshot(project)
    real = os.replace

    def failing(src, dst):
        if os.fspath(dst).endswith("w.md"):
            raise OSError("disk full")
        return real(src, dst)
    with monkeypatch.context() as m:   # pytester's own chdir is on the fixture: left alone
        m.setattr(os, "replace", failing)
        m.setenv("VALUE_a", "2")
        res = project.runpytest("--dumpref-report=docs/w.md")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR and "disk full" in res.stdout.str() + res.stderr.str()
    assert snapshot(project) == before
    assert not [p for p in (project.path / "docs").iterdir() if p.name.startswith(".")]
    assert project.runpytest("--dumpref-check=docs/w.md").ret == 0


# in the subprocess of the run only: its os.replace dies when the Markdown's turn comes
KILL_BEFORE_THE_MARKDOWN = """
import os

real = os.replace

def replace(src, dst):
    if os.fspath(dst).endswith("w.md"):
        os._exit(9)   # killed between the two files: no finally, no clean-up
    return real(src, dst)

os.replace = replace
"""


def test_a_write_killed_between_its_two_files_loses_nothing_and_says_what_to_move(project, monkeypatch):
    """A process killed after the data moved and before the Markdown did: the old Markdown
    stands, the new data beside it; the check refuses the mixed pair naming both files and the
    folder that holds the other half of each pair, and either pair moved into place checks."""
    docs = project.path / "docs"
    old_md, old_data = (docs / "w.md").read_bytes(), (docs / "w.dumpref.json").read_bytes()
    project.makeconftest(KILL_BEFORE_THE_MARKDOWN)
    monkeypatch.setenv("VALUE_a", "2")
    res = project.runpytest_subprocess("--dumpref-report=docs/w.md")
    assert res.ret == 9
    (project.path / "conftest.py").unlink()
    assert (docs / "w.md").read_bytes() == old_md and (docs / "w.dumpref.json").read_bytes() != old_data
    [left] = [p for p in docs.iterdir() if p.name.startswith(".w.md.dumpref-")]
    assert (left / "old-data").read_bytes() == old_data          # nothing lost
    res = project.runpytest("--dumpref-check=docs/w.md")
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "docs/w.md and docs/w.dumpref.json do not belong together" in err, err
    assert f"docs/{left.name}/old-data is the data w.md was rendered with" in err, err
    assert f"docs/{left.name}/writeup is the write-up w.dumpref.json was rendered for" in err, err
    # roll forward: the new Markdown into place, and the new pair checks (with a's new value)
    (left / "writeup").replace(docs / "w.md")
    assert project.runpytest("--dumpref-check=docs/w.md").ret == 0

