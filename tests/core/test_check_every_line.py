"""--dumpref-check gates every line a reader sees: each hand edit of a rendered write-up fails
the check, naming the line, what the file says and what the run produced; a clean re-render on
the same machine passes, and measured values move within their declared tolerance."""
import json
import re

import pytest
import writeup_files

CLAIMS = '''
import os
import pytest

PROV = dict(dtype="f32", shapes={"x": (4, 4)}, method="counting")

@pytest.mark.study
@pytest.mark.claim("Fusion is not profitable here, by the bytes it would save.", title="Profitability")
@pytest.mark.provenance(**PROV)
def test_profit(evidence, tmp_path):
    evidence.number("measured extra bytes written", 4198400, unit="B")
    evidence.number("time", float(os.environ.get("MEASURED", "2.0")), unit="ms", tolerance=0.25)
    evidence.table("decisions", [{"pair": "exp -> add", "verdict": "Fusion is not profitable."},
                                 {"pair": "mul -> sub", "verdict": "fused"}])
    evidence.table("per-call times", [{"variant": v, "us/call": float(os.environ.get("MEASURED", "2.0")) * k}
                                      for k, v in ((1, "fused"), (1.5, "unfused"))],
                   tolerances={"us/call": 0.3})
    evidence.excerpt("the fusion", "fused = f32[4,4] fusion(p0, p1)\\nROOT r = f32[4,4] add(fused, p0)", lang="hlo")
    evidence.excerpt("the whole module", "\\n".join(f"line{i} = f32[4] add(a, b)" for i in range(40)), lang="hlo")
    evidence.table("a trace", [{"call": f"PJRT_Call_{i}", "n": i} for i in range(20)])
    evidence.note("The note explains the table above.")
    f = tmp_path / "dump.txt"
    f.write_text("HloModule m")
    evidence.file("the dump", f)
    assert True
'''

PYPROJECT = '''
[tool.dumpref]
title = "Tampering"
sections = ["study"]
'''


@pytest.fixture
def rendered(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_claims=CLAIMS)
    pytester.runpytest("--dumpref-report=writeup.md").assert_outcomes(passed=1)
    return pytester


def _edit(path, old, new, count=1):
    """Replace the first ``count`` visible occurrences (never in the data line); returns
    the 1-based line of the first."""
    text = path.read_text()
    cut = text.index("<!-- dumpref-data")
    visible = text[:cut]
    assert old in visible, old
    line = visible[:visible.index(old)].count("\n") + 1
    path.write_text(visible.replace(old, new, count) + text[cut:])
    return line


def _check(pytester):
    return pytester.runpytest("--dumpref-check=writeup.md")


def test_a_clean_rerender_on_the_same_machine_passes(rendered):
    res = _check(rendered)
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["dumpref: every line of writeup.md reproduces (1 claim ran)"])


@pytest.mark.parametrize("old, new", [
    ("| exp -> add | Fusion is not profitable. |", "| exp -> add | fused |"),                 # a table cell
    ("### Profitability", "### Profitable"),                                                   # a heading
    ("Fusion is not profitable here, by the bytes it would save.", "Fusion pays here."),       # the sentence
    ("fused = f32[4,4] fusion(p0, p1)", "fused = f32[4,4] fusion(p1, p0)"),                    # an excerpt line
    ("The note explains the table above.", "The note explains nothing."),                      # a note
    ("| measured extra bytes written | 4,198,400 B", "| measured extra bytes written | 3,198,400 B"),  # a number
    ("line17 = f32[4] add(a, b)", "line17 = f32[4] sub(a, b)"),                                # folded excerpt
    ("| PJRT_Call_7 | 7 |", "| PJRT_Call_7 | 8 |"),                                           # folded table
    ("| method | counting |", "| method | guessing |"),                                      # a provenance row
    ("| dtype | f32 |", "| dtype | bf16 |"),
    ("2 claims established", "3 claims established"),
    ("- [Profitability](#claim-", "- [Profit](#claim-"),                                      # the contents
])
def test_each_hand_edit_fails_the_check_naming_the_line(rendered, old, new):
    path = rendered.path / "writeup.md"
    if old == "2 claims established":
        old, new = "1 claim established", "2 claims established"
    line = _edit(path, old, new)
    res = _check(rendered)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    out = res.stdout.str()
    assert "dumpref check FAILED against writeup.md:" in out
    said = next(ln for ln in path.read_text().splitlines() if new in ln)
    assert re.search(rf"line {line} \(.*\): .*the file says {re.escape(repr(said))}; this run produced ", out), out


def test_an_edited_number_names_the_claim_and_both_values(rendered):
    path = rendered.path / "writeup.md"
    line = _edit(path, "4,198,400 B", "3,198,400 B")
    out = _check(rendered).stdout.str()
    assert (f"line {line} (claim test_claims.py::test_profit): differs: the file says "
            "'| measured extra bytes written | 3,198,400 B (4.00 MiB) | exact |'; this run produced "
            "'| measured extra bytes written | 4,198,400 B (4.00 MiB) | exact |'") in out


def test_a_visible_sha256_is_checked(rendered):
    path = rendered.path / "writeup.md"
    digest = re.search(r"sha256 `([0-9a-f]{16})…`", path.read_text()).group(1)
    line = _edit(path, digest, "0" * 16)
    out = _check(rendered).stdout.str()
    assert f"line {line} (claim test_claims.py::test_profit): differs: the file says 'leaves the evidence kept by hash: file **the dump** at `dumpref-evidence/test_profit/" in out


def test_a_hand_added_claim_fails_the_check(rendered):
    path = rendered.path / "writeup.md"
    line = _edit(path, "## Not established",
                 "### A claim nobody tested\n\nEverything is fast.\n\n## Not established")
    res = _check(rendered)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    out = res.stdout.str()
    assert f"line {line} " in out and "the file has a line this run did not produce: '### A claim nobody tested'" in out
    assert "the file has a line this run did not produce: 'Everything is fast.'" in out


def test_the_environment_table_is_checked(rendered):
    path = rendered.path / "writeup.md"
    # a field of the machine edited by hand: the file no longer says what its data says
    line = _edit(path, "| platform | cpu |", "| platform | tpu |")
    out = _check(rendered).stdout.str()
    assert (f"line {line} (environment): differs: the file says '| platform | tpu |'; its data "
            "(writeup.dumpref.json) produced '| platform | cpu |'") in out
    _edit(path, "| platform | tpu |", "| platform | cpu |")
    line = _edit(path, "| XLA_FLAGS | (not set) |", "| XLA_FLAGS | --xla_cpu_use_thunk_runtime=false |")
    out = _check(rendered).stdout.str()
    assert f"line {line} (environment): differs" in out


def test_a_changed_section_title_or_intro_fails_the_check(rendered):
    rendered.makepyprojecttoml(PYPROJECT + '[tool.dumpref.section_intros]\nstudy = "A new intro."\n')
    out = _check(rendered).stdout.str()
    assert "the file lacks a line this run produced here: 'A new intro.'" in out
    rendered.makepyprojecttoml(PYPROJECT + '[tool.dumpref.section_titles]\nstudy = "Renamed"\n')
    out = _check(rendered).stdout.str()
    line = next(i for i, ln in enumerate((rendered.path / "writeup.md").read_text().splitlines(), 1)
                if ln == "## study")
    assert f"line {line} (section 'study'): differs: the file says '## study'; this run produced '## Renamed'" in out


def test_a_measured_value_moves_within_its_tolerance_in_tables_too(rendered, monkeypatch):
    monkeypatch.setenv("MEASURED", "2.4")  # +20%: inside the number's ±25% and the column's ±30%
    res = _check(rendered)
    assert res.ret == 0, res.stdout.str()
    assert "number 'time'" in res.stdout.str() and "column 'us/call'" in res.stdout.str()
    monkeypatch.setenv("MEASURED", "2.7")  # +35%: outside both
    out = _check(rendered).stdout.str()
    path = rendered.path / "writeup.md"
    table_line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("| fused | 2 |"))
    assert (f"line {table_line} (claim test_claims.py::test_profit): table 'per-call times', column 'us/call' "
            "does not reproduce within its tolerance (±30%): the file says '| fused | 2 |'; this run "
            "produced '| fused | 2.7 |'") in out
    assert "number 'time' does not reproduce within its tolerance (±25%)" in out


def test_a_passing_check_names_the_values_nearest_their_tolerance(rendered, monkeypatch):
    """2.0 -> 2.4: the number used 0.4 of its 0.5 (+ rounding slack), the unfused row 0.6 of its
    0.9: each line says how much, where, and both values, the nearest first."""
    monkeypatch.setenv("MEASURED", "2.4")
    res = _check(rendered)
    assert res.ret == 0, res.stdout.str()
    lines = res.stdout.lines
    head = lines.index("dumpref: the measured values nearest their tolerance (share of it used):")
    named = [ln for ln in lines[head + 1:head + 6] if ln.startswith("  ")]
    text = (rendered.path / "writeup.md").read_text().splitlines()
    time_line = next(i for i, ln in enumerate(text, 1) if ln.startswith("| time |"))
    assert named[0].startswith(f"  number 'time' (line {time_line}): 80% of ±25% (the file says 2 ms, "
                               "this run 2.4 ms)"), named
    shares = [int(re.search(r": (\d+)% of", ln).group(1)) for ln in named]
    assert shares == sorted(shares, reverse=True) and len(named) >= 3, named   # number + two rows
    monkeypatch.setenv("MEASURED", "2.0")
    same = _check(rendered).stdout.str()
    assert "nearest their tolerance" not in same      # nothing moved: nothing to name


def test_an_edit_of_the_data_alone_fails_naming_both_files(rendered):
    path = rendered.path / "writeup.md"
    data = writeup_files.data_path(path)
    data.write_text(data.read_text().replace('"fused"]', '"not fused"]'))
    res = _check(rendered)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert ("writeup.md and writeup.dumpref.json do not belong together: writeup.md was rendered with data "
            "of sha256 " in res.stderr.str()), res.stderr.str()


def test_an_edit_of_the_data_and_of_its_hash_fails_on_the_line_it_renders(rendered):
    path = rendered.path / "writeup.md"
    writeup_files.edit_data(path, '"fused"]', '"not fused"]')
    out = _check(rendered).stdout.str()
    assert "its data (writeup.dumpref.json) produced '| mul -> sub | not fused |'" in out, out


def test_a_missing_data_file_is_an_error_naming_both_files(rendered):
    path = rendered.path / "writeup.md"
    data = writeup_files.data_path(path)
    data.unlink()
    res = _check(rendered)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "writeup.md: its data is in writeup.dumpref.json, which does not exist" in res.stderr.str(), res.stderr.str()


def test_a_write_up_of_format_2_with_its_data_embedded_is_still_checked(rendered):
    path = rendered.path / "writeup.md"
    writeup_files.embed(path, compress=True)
    assert '"test_claims.py::test_profit": "zlib:' in path.read_text()
    assert _check(rendered).ret == 0
    line = _edit(path, "| PJRT_Call_7 | 7 |", "| PJRT_Call_7 | 8 |")
    out = _check(rendered).stdout.str()
    assert f"line {line} (claim test_claims.py::test_profit): differs" in out


def test_folded_evidence_renders_for_github(rendered):
    text = (rendered.path / "writeup.md").read_text()
    # long excerpts and tables fold; a blank line after <summary> and before </details>
    assert "<details><summary>the whole module (40 lines)</summary>\n\n```hlo\nline0" in text
    assert "line39 = f32[4] add(a, b)\n```\n\n</details>" in text
    assert "<details><summary>a trace (20 rows)</summary>\n\n| call | n |" in text
    # short ones stay in view
    assert "**decisions**\n\n| pair | verdict |" in text
    assert "**per-call times** (measured: us/call ±30%)" in text
    assert "**the fusion**\n\n```hlo\nfused = " in text


def test_a_claim_can_keep_long_evidence_in_view_or_fold_short_evidence(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_claims=CLAIMS.replace(
        'evidence.table("decisions", [', 'evidence.table("decisions", fold=True, rows=[').replace(
        'range(40)), lang="hlo")', 'range(40)), lang="hlo", fold=False)'))
    pytester.runpytest("--dumpref-report=writeup.md").assert_outcomes(passed=1)
    text = (pytester.path / "writeup.md").read_text()
    assert "<details><summary>decisions (2 rows)</summary>" in text
    assert "**the whole module**\n\n```hlo\nline0" in text
    assert _check(pytester).ret == 0


def test_a_different_jax_version_is_named_first(rendered):
    path = rendered.path / "writeup.md"
    import jax
    # as if the write-up came from another jax: both files say 0.0.1
    writeup_files.edit_data(path, f'"jax": "{jax.__version__}"', '"jax": "0.0.1"')
    path.write_text(path.read_text().replace(f"| jax | {jax.__version__} |", "| jax | 0.0.1 |").replace(
        f"| jax / jaxlib | {jax.__version__} /", "| jax / jaxlib | 0.0.1 /"))
    res = rendered.runpytest("--dumpref-check=writeup.md", "-v")
    out = res.stdout.str()
    assert res.ret == 0, out
    first = out.index("dumpref: this run's machine is not the write-up's")
    assert out.index(f"jax: write-up '0.0.1', this run '{jax.__version__}'") > first
    assert first < out.index("measured extra bytes written: 4198400")


def test_the_data_keeps_one_claim_a_line_beside_the_markdown(rendered):
    md = rendered.path / "writeup.md"
    assert md.read_text().splitlines()[-1].startswith("<!-- dumpref-data writeup.dumpref.json sha256=")
    text = (rendered.path / "writeup.dumpref.json").read_text()
    assert list(json.loads(text)["claims"]) == ["test_claims.py::test_profit"]
    assert sum(1 for ln in text.splitlines() if ln.startswith('"test_claims.py::test_profit"')) == 1


def test_a_long_line_is_shown_where_it_differs(rendered):
    path = rendered.path / "writeup.md"
    long_note = "The note explains the table above." + " More words." * 40
    rendered.makepyfile(test_claims=CLAIMS.replace('"The note explains the table above."', repr(long_note)))
    rendered.runpytest("--dumpref-report=writeup.md")
    text = path.read_text()
    at = text.index("More words.", text.index("The note explains the table above.") + 300)
    path.write_text(text[:at] + "More wards." + text[at + len("More words."):])
    out = _check(rendered).stdout.str()
    assert "More wards." in out and "the file says '…" in out
