"""The write-up and the gate: render, re-prove, and fail loudly when something drifted."""
import json
import re

import pytest
import writeup_files

CLAIMS = '''
import pytest, os
from pathlib import Path

PROV = dict(dtype="f32", shapes={"x": (1024, 1024)}, method="counting")

@pytest.mark.passes
@pytest.mark.claim("A megabyte of f32 is 262,144 elements", title="A megabyte in elements")
@pytest.mark.provenance(**PROV)
def test_bytes(evidence, tmp_path):
    evidence.number("bytes", 4 * 262144, unit="B")
    evidence.number("elements", 262144)
    evidence.excerpt("HLO", "ROOT add.1 = f32[1024,1024]{1,0} add(p0, p1)", lang="hlo")
    evidence.table("sizes", [{"dtype": "f32", "bytes": 4}, {"dtype": "bf16", "bytes": 2}])
    f = tmp_path / "dump.txt"
    f.write_text(os.environ.get("DUMP_CONTENT", "HloModule m"))
    evidence.file("the dump", f)
    assert f.stat().st_size > 0

@pytest.mark.fusion
@pytest.mark.claim("Timing is noisy but within its tolerance")
@pytest.mark.provenance(**PROV)
def test_time(evidence):
    evidence.number("time", float(os.environ.get("MEASURED", "1.0")), unit="ms", tolerance=0.25)
    assert float(os.environ.get("MEASURED", "1.0")) > 0

@pytest.mark.fusion
@pytest.mark.claim("This one is not true")
@pytest.mark.provenance(**PROV)
def test_false(evidence):
    evidence.number("n", 1)
    assert 1 == 2, "the dump disagrees"

def test_ordinary():
    assert True
'''

PYPROJECT = '''
[tool.dumpref]
title = "A small write-up"
sections = ["passes", "fusion"]
[tool.dumpref.section_titles]
passes = "Pass by pass"
fusion = "Fusion"
'''


@pytest.fixture
def project(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_claims=CLAIMS)
    return pytester


def _line(path, start):
    """The 1-based number of the first line of ``path`` that starts with ``start``."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith(start))


def data_block(path):
    return writeup_files.data(path)


def test_report_renders_passing_claims_and_lists_the_rest(project):
    res = project.runpytest("--dumpref-report=writeup.md")
    res.assert_outcomes(passed=3, failed=1)
    text = (project.path / "writeup.md").read_text()
    assert text.startswith("# A small write-up\n")
    assert text.index("## Pass by pass") < text.index("## Fusion") < text.index("## Not established")
    assert "### A megabyte in elements\n\nA megabyte of f32 is 262,144 elements\n" in text
    assert "### Time\n\nTiming is noisy but within its tolerance\n" in text  # title from the test's name
    # the findings list links every claim, by an anchor made from its node id
    assert "[A megabyte in elements](#claim-test-claims-py-test-bytes)" in text[:text.index("## Environment")]
    assert '<a id="claim-test-claims-py-test-bytes"></a>' in text
    # provenance is stated once per study
    assert text.count("| method | counting |") == 2 and "| provenance | of every claim in this study |" in text
    assert "| bytes | 1,048,576 B (1.00 MiB) | exact |" in text
    assert "| time | 1 ms | ±25% |" in text
    assert "```hlo\nROOT add.1 = f32[1024,1024]{1,0} add(p0, p1)\n```" in text
    assert "| dtype | bytes |" in text and "| bf16 | 2 |" in text
    assert ("Reproduce: `python -m pytest 'test_claims.py::test_bytes' --dumpref-check=writeup.md "
            "--basetemp=dumpref-evidence/test_bytes -v`") in text
    # hashed evidence says where a reproduction leaves it
    assert ("--basetemp=dumpref-evidence/test_bytes -v`\nleaves the evidence kept by hash: "
            "file **the dump** at `dumpref-evidence/test_bytes/test_bytes0/dump.txt`, sha256") in text
    # the false claim is never presented as established
    established = text[:text.index("## Not established")]
    assert "This one is not true" not in established
    assert re.search(r"- \*\*failed\*\*: This one is not true .*the dump disagrees", text)
    assert "test_ordinary" not in text
    data = data_block(project.path / "writeup.md")
    bytes_ = next(i for i in data["claims"]["test_claims.py::test_bytes"]["evidence"] if i.get("name") == "bytes")
    assert (bytes_["value"], bytes_["unit"], bytes_["effective_tolerance"]) == (1048576, "B", None)
    assert data["claims"]["test_claims.py::test_false"]["outcome"] == "failed"


def test_a_note_every_claim_of_a_study_records_is_said_once_at_its_head(pytester):
    pytester.makepyfile(test_notes='''
import pytest
P = dict(dtype="f32", shapes={"x": (1,)}, method="m")
@pytest.fixture
def built(evidence):
    evidence.note("Built with: cc -O2 plugin.c")
@pytest.mark.claim("First")
@pytest.mark.provenance(**P)
def test_one(built, evidence):
    evidence.number("n", 1)
    evidence.note("Only the first says this.")
    assert True
@pytest.mark.claim("Second")
@pytest.mark.provenance(**P)
def test_two(built, evidence):
    evidence.number("n", 2)
    assert True
''')
    pytester.runpytest("--dumpref-report=w.md").assert_outcomes(passed=2)
    text = (pytester.path / "w.md").read_text().split("<!-- dumpref-data")[0]
    assert text.count("Built with: cc -O2 plugin.c") == 1
    assert text.index("Built with") < text.index("### One") < text.index("Only the first says this.")
    assert pytester.runpytest("--dumpref-check=w.md").ret == 0


def test_two_runs_give_the_same_markdown(project):
    project.runpytest("--dumpref-report=writeup.md")
    first = (project.path / "writeup.md").read_text()
    project.runpytest("--dumpref-report=writeup.md")
    assert (project.path / "writeup.md").read_text() == first


def test_xdist_gives_the_same_writeup_as_a_serial_run(project):
    project.runpytest_subprocess("--dumpref-report=writeup.md")
    serial = (project.path / "writeup.md").read_text()
    res = project.runpytest_subprocess("-n", "2", "--dumpref-report=writeup.md")
    res.assert_outcomes(passed=3, failed=1)
    assert (project.path / "writeup.md").read_text() == serial


def test_check_passes_on_an_unchanged_run(project):
    project.runpytest("--dumpref-report=writeup.md")
    res = project.runpytest("--dumpref-check=writeup.md")
    # the false claim fails as it did: it was never established, and failing again reproduces
    # the write-up, which lists it as not established; its test is skipped with that finding
    res.assert_outcomes(passed=3, skipped=1)
    res.stdout.fnmatch_lines(["*test_claims.py::test_false: not established in this run, as writeup.md says*",
                              "*every line of writeup.md reproduces (3 claims ran)*"])
    assert res.ret == pytest.ExitCode.OK


def test_check_accepts_a_measured_number_within_tolerance(project, monkeypatch):
    project.runpytest("--dumpref-report=writeup.md")
    monkeypatch.setenv("MEASURED", "1.2")
    project.runpytest("--dumpref-check=writeup.md").assert_outcomes(passed=3, skipped=1)
    monkeypatch.setenv("MEASURED", "1.3")
    res = project.runpytest("--dumpref-check=writeup.md")
    res.assert_outcomes(passed=3, skipped=1)
    assert res.ret != pytest.ExitCode.OK
    line = _line(project.path / "writeup.md", "| time |")
    assert (f"line {line} (claim test_claims.py::test_time): number 'time' does not reproduce within its "
            "tolerance (±25%): the file says '| time | 1 ms | ±25% |'; this run produced '| time | 1.3 ms | ±25% |'"
            ) in res.stdout.str()


def test_a_tampered_number_fails_the_check_and_is_named(project):
    project.runpytest("--dumpref-report=writeup.md")
    path = project.path / "writeup.md"
    writeup_files.edit_data(path, '"value": 1048576', '"value": 1048577')  # the data, and its hash
    res = project.runpytest("--dumpref-check=writeup.md")
    out = res.stdout.str()
    line = _line(path, "| bytes |")
    assert (f"line {line} (claim test_claims.py::test_bytes): differs: the file says '| bytes | 1,048,576 B "
            "(1.00 MiB) | exact |'; its data (writeup.dumpref.json) produced '| bytes | 1,048,577 B (1.00 MiB) | exact |'") in out
    assert "dumpref check FAILED against writeup.md" in out and res.ret == pytest.ExitCode.TESTS_FAILED


def test_a_changed_file_hash_fails_the_check(project, monkeypatch):
    project.runpytest("--dumpref-report=writeup.md")
    monkeypatch.setenv("DUMP_CONTENT", "HloModule m, changed")
    res = project.runpytest("--dumpref-check=writeup.md")
    line = _line(project.path / "writeup.md", "leaves the evidence kept by hash")
    assert f"line {line} (claim test_claims.py::test_bytes): differs: the file says 'leaves the evidence" in res.stdout.str()
    assert res.ret == pytest.ExitCode.TESTS_FAILED


def test_a_removed_claim_fails_the_check(project):
    project.runpytest("--dumpref-report=writeup.md")
    project.makepyfile(test_claims=CLAIMS.replace("def test_time", "def _gone"))
    res = project.runpytest("--dumpref-check=writeup.md")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*claim test_claims.py::test_time is established in the write-up but did not run*"])


def test_a_claim_missing_from_the_writeup_fails_the_check(project):
    project.runpytest("--dumpref-report=writeup.md")
    project.makepyfile(test_more='''
import pytest
@pytest.mark.passes
@pytest.mark.claim("A new claim")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="m")
def test_new(evidence):
    evidence.number("n", 1)
    assert True
''')
    res = project.runpytest("--dumpref-check=writeup.md")
    assert "claim test_more.py::test_new ran but is not in the write-up" in res.stdout.str()
    assert "the file lacks a line this run produced here: '### New'" in res.stdout.str()
    assert res.ret == pytest.ExitCode.TESTS_FAILED


def test_a_changed_sentence_fails_the_check(project):
    project.runpytest("--dumpref-report=writeup.md")
    project.makepyfile(test_claims=CLAIMS.replace("262,144 elements", "262,145 elements"))
    res = project.runpytest("--dumpref-check=writeup.md")
    line = _line(project.path / "writeup.md", "A megabyte of f32 is 262,144 elements")
    assert (f"line {line} (claim test_claims.py::test_bytes): differs: the file says 'A megabyte of f32 is "
            "262,144 elements'; this run produced 'A megabyte of f32 is 262,145 elements'") in res.stdout.str()


@pytest.mark.parametrize("content, message", [
    (None, "no such write-up"),
    ("# just markdown\n", "no '<!-- dumpref-data' block"),
    ("<!-- dumpref-data\n{not json\n-->\n", "the data block is not valid JSON"),
    ("<!-- dumpref-data\n{\"claims\": {}}\n", "the data block is not closed"),
    ('<!-- dumpref-data\n{"format": 2, "environment": {}, "claims": {"t.py::test_a": {"nodeid": "t.py::test_a", '
     '"text": "s", "outcome": "passed", "section": "s", "observed": {}, "environment": {}, '
     '"evidence": [{"kind": "number", "name": "n", "unit": null}]}}}\n-->\n',
     "claim 't.py::test_a' in the data block has number evidence without 'value'"),
    ('<!-- dumpref-data\n{"format": 1, "claims": {}}\n-->\n', "a write-up of format 1"),
])
def test_a_missing_or_malformed_writeup_is_a_usage_error_naming_the_file(project, content, message):
    if content is not None:
        (project.path / "bad.md").write_text(content)
    res = project.runpytest("--dumpref-check=bad.md")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "bad.md" in err and message in err, err


@pytest.mark.parametrize("toml, message", [
    ('titel = "typo"', "[tool.dumpref] has unknown keys ['titel']"),
    ("default_tolerances = 0.1", "[tool.dumpref] default_tolerances must be a table"),
    ("title = 3", "[tool.dumpref] title must be a string"),
])
def test_a_malformed_config_is_a_usage_error_naming_the_file(pytester, toml, message):
    pytester.makepyprojecttoml(f"[tool.dumpref]\n{toml}\n")
    pytester.makepyfile(test_x="def test_x(): pass\n")
    res = pytester.runpytest()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "pyproject.toml: " + message in res.stderr.str()


def test_a_report_path_that_is_a_folder_is_a_usage_error(pytester):
    (pytester.path / "out").mkdir()
    pytester.makepyfile(test_x="def test_x(): pass\n")
    res = pytester.runpytest("--dumpref-report=out")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dumpref-report=out: is a folder" in res.stderr.str()


def test_figures_are_copied_beside_the_writeup(pytester):
    pytester.makepyfile(test_fig='''
import pytest
@pytest.mark.claim("A figure")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="m")
def test_fig(evidence, tmp_path):
    p = tmp_path / "plot.png"
    p.write_bytes(b"\\x89PNG fake")
    evidence.figure("bytes per pass", p)
    assert p.is_file()
''')
    pytester.runpytest("--dumpref-report=out/w.md").assert_outcomes(passed=1)
    text = (pytester.path / "out/w.md").read_text()
    m = re.search(r"!\[bytes per pass\]\((w\.assets/[^)]+\.png)\)", text)
    assert m, text
    assert (pytester.path / "out" / m.group(1)).read_bytes() == b"\x89PNG fake"


def test_benchmark_statistics_become_evidence_and_machine_info_names_the_chip(pytester, monkeypatch):
    from pytest_dumpref.provenance import cpu_model_name
    # Under `pytest -n 2` this test runs in an xdist worker; the run it makes is a serial run,
    # but pytest-benchmark would read the worker's variable and switch itself off.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_bench='''
import pytest
@pytest.mark.claim("Summing a small list is fast")
@pytest.mark.provenance(dtype="f32", shapes={"x": (100,)}, method="pytest-benchmark")
def test_sum(benchmark):
    benchmark.group = "sums"
    assert benchmark(sum, range(100)) == 4950
''')
    res = pytester.runpytest("--dumpref-report=w.md", "--benchmark-json=b.json", "--benchmark-max-time=0.01")
    res.assert_outcomes(passed=1)
    text = (pytester.path / "w.md").read_text()
    assert "| pytest-benchmark median, sums | " in text and "pytest-benchmark run, sums (not compared" in text
    assert "| rounds | iterations per round |" in text
    info = json.loads((pytester.path / "b.json").read_text())["machine_info"]["dumpref"]
    assert info["chip"] == cpu_model_name() and info["jax"] and "XLA_FLAGS" in info


def test_claims_appear_in_the_order_they_are_written(pytester):
    pytester.makepyfile(test_order='''
import pytest
P = dict(dtype="f32", shapes={"x": (1,)}, method="m")
@pytest.mark.claim("Zebra comes first")
@pytest.mark.provenance(**P)
def test_z(evidence):
    evidence.number("n", 1)
    assert True
@pytest.mark.claim("Aardvark comes second")
@pytest.mark.provenance(**P)
def test_a(evidence):
    evidence.number("n", 2)
    assert True
''')
    pytester.runpytest("-p", "xdist", "-n", "2", "--dumpref-report=w.md").assert_outcomes(passed=2)
    text = (pytester.path / "w.md").read_text()
    assert text.index("### Z\n\nZebra comes first") < text.index("### A\n\nAardvark comes second")


def test_checking_one_claim_does_not_call_the_others_gone(project):
    project.runpytest("--dumpref-report=writeup.md")
    res = project.runpytest("test_claims.py::test_bytes", "--dumpref-check=writeup.md")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*every line of writeup.md reproduces (1 claim ran)*"])
    assert res.ret == 0
    # a whole file is expected whole: a claim missing from it is gone
    project.makepyfile(test_claims=CLAIMS.replace("def test_time", "def _gone"))
    res = project.runpytest("test_claims.py", "--dumpref-check=writeup.md")
    res.stdout.fnmatch_lines(["*claim test_claims.py::test_time is established in the write-up but did not run*"])


def test_the_reproduce_line_of_a_claim_works_as_written(project):
    project.runpytest("--dumpref-report=writeup.md")
    text = (project.path / "writeup.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Reproduce: ") and "test_bytes" in ln)
    import shlex
    argv = shlex.split(line[len("Reproduce: `"):-1])
    assert argv[:3] == ["python", "-m", "pytest"]
    res = project.runpytest(*argv[3:])
    res.assert_outcomes(passed=1)
    assert (project.path / "dumpref-evidence" / "test_bytes" / "test_bytes0" / "dump.txt").is_file()
    # -v shows each number beside the write-up's
    res.stdout.fnmatch_lines(["dumpref: test_claims.py::test_bytes (passed)",
                              "  bytes: 1048576 B  (write-up: 1048576 B)"])


def test_intro_file_is_rendered_after_the_findings(pytester):
    """The first screen states the findings: under the title, the count of claims and the
    Findings; the introduction follows them."""
    pytester.makepyprojecttoml('[tool.dumpref]\ntitle = "T"\nintro_file = "docs/intro.md"\n')
    (pytester.path / "docs").mkdir()
    (pytester.path / "docs" / "intro.md").write_text("How to read this.\n")
    pytester.makepyfile(test_x='''
import pytest
@pytest.mark.claim("Two and two make four", finding="two and two make {sum}")
@pytest.mark.provenance(dtype="i32", shapes={"x": (1,)}, method="arithmetic")
def test_sum(evidence):
    evidence.number("sum", 2 + 2)
    assert 2 + 2 == 4
''')
    pytester.runpytest("--dumpref-report=w.md").assert_outcomes(passed=1)
    text = (pytester.path / "w.md").read_text()
    assert text.startswith("# T\n\n1 claim established, 0 not established.")
    assert text.index("## Findings") < text.index("two and two make 4") < text.index("How to read this.\n") \
        < text.index("## Environment")
    pytester.makepyprojecttoml('[tool.dumpref]\nintro_file = "missing.md"\n')
    res = pytester.runpytest()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "intro_file 'missing.md'" in res.stderr.str()


BENCH_CLAIM = '''
import pytest
@pytest.mark.claim("Summing a small list is fast")
@pytest.mark.provenance(dtype="f32", shapes={"x": (100,)}, method="pytest-benchmark")
def test_sum(benchmark):
    assert benchmark(sum, range(100)) == 4950
'''


def test_a_benchmark_claim_under_xdist_fails_saying_why_and_what_to_do(pytester):
    pytester.makepyfile(test_bench=BENCH_CLAIM)
    res = pytester.runpytest("-p", "xdist", "-n", "2", "--dumpref-report=w.md")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*claim test_bench.py::test_sum fails: its evidence is a pytest-benchmark "
                              "measurement, and pytest-benchmark switches itself off under pytest-xdist*"])
    assert "run this claim without -n" in res.stdout.str()


def test_benchmark_compare_with_no_saved_run_says_so_in_one_line(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_bench=BENCH_CLAIM)
    res = pytester.runpytest("--benchmark-compare", "--benchmark-max-time=0.01")
    res.assert_outcomes(passed=1)
    out = res.stdout.str()
    assert sum("no saved pytest-benchmark run" in ln for ln in out.splitlines()) == 1, out
    assert "Can't compare" not in out and "PytestBenchmarkWarning" not in out


def test_provenance_is_stated_once_per_study_and_a_claim_shows_what_differs(pytester):
    pytester.makepyfile(test_prov='''
import pytest
@pytest.mark.claim("First")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="counting")
def test_one(evidence):
    evidence.number("n", 1)
    assert True
@pytest.mark.claim("Second")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="measuring")
def test_two(evidence):
    evidence.number("n", 2)
    assert True
''')
    pytester.runpytest("--dumpref-report=w.md").assert_outcomes(passed=2)
    text = (pytester.path / "w.md").read_text().split("<!-- dumpref-data")[0]
    head = text[text.index("## Claims"):text.index("### One")]
    assert "| provenance | of every claim in this study |" in head and "| dtype | f32 |" in head
    assert "| method |" not in head
    assert "First\n\n*Provenance of this claim, where it differs from the study's:* **method** counting\n" in text
    assert "*Provenance of this claim, where it differs from the study's:* **method** measuring" in text
    assert text.count("| dtype | f32 |") == 1
    assert pytester.runpytest("--dumpref-check=w.md").ret == 0
