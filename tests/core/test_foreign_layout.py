"""Somebody else's project, laid out differently: claims under docs/claims/, the write-up in
docs/, one study of their own.  The commands the write-up prints are run as printed."""
import re
import shlex
import sys

import pytest

CLAIM = '''
import pytest

@pytest.mark.gelu
@pytest.mark.claim("GELU of zero is zero.", title="GELU at zero")
@pytest.mark.provenance(dtype="f32", shapes={"x": (3,)}, method="arithmetic")
def test_gelu_at_zero(evidence, tmp_path):
    value = 0.0 * 0.5
    evidence.number("gelu(0)", value)
    out = tmp_path / "values.txt"
    out.write_text(repr(value))
    evidence.file("the value", out)
    assert value == 0.0
'''


@pytest.fixture
def foreign(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\ntitle = "GELU notes"\nsections = ["gelu"]\n'
                               '[tool.dumpref.section_titles]\ngelu = "Notes on GELU"\n')
    (pytester.path / "docs" / "claims").mkdir(parents=True)
    (pytester.path / "docs" / "claims" / "test_gelu.py").write_text(CLAIM)
    res = pytester.runpytest("docs/claims", "--dumpref-report=docs/gelu.md")
    res.assert_outcomes(passed=1)
    return pytester


def _commands(text: str) -> dict[str, list[str]]:
    found = {}
    for kind, pattern in (("reproduce", r"Reproduce: `([^`]+)`"),
                          ("reprove", r"re-prove this whole file with `([^`]+)`"),
                          ("rerender", r"Re-render this file with `([^`]+)`")):
        m = re.search(pattern, text)
        assert m, f"no {kind} command in the write-up"
        found[kind] = shlex.split(m.group(1))
    return found


def test_the_printed_commands_name_the_real_paths(foreign):
    text = (foreign.path / "docs" / "gelu.md").read_text()
    cmds = _commands(text)
    assert cmds["reprove"] == ["python", "-m", "pytest", "docs/claims/test_gelu.py", "--dumpref-check=docs/gelu.md"]
    assert cmds["rerender"] == ["python", "-m", "pytest", "docs/claims/test_gelu.py", "--dumpref-report=docs/gelu.md"]
    assert cmds["reproduce"][:4] == ["python", "-m", "pytest", "docs/claims/test_gelu.py::test_gelu_at_zero"]
    assert "--dumpref-check=docs/gelu.md" in cmds["reproduce"]
    assert "## Notes on GELU" in text and "### GELU at zero" in text
    assert "claims/" not in text.replace("docs/claims/", "")  # nothing of this repository's layout


@pytest.mark.parametrize("kind", ["reproduce", "reprove", "rerender"])
def test_the_printed_commands_run_as_printed(foreign, kind):
    argv = _commands((foreign.path / "docs" / "gelu.md").read_text())[kind]
    assert argv[0] == "python"
    res = foreign.run(sys.executable, *argv[1:], timeout=300)
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    if kind == "reproduce":
        res.stdout.fnmatch_lines(["  gelu(0): 0.0  (write-up: 0.0)",
                                  "*every line of docs/gelu.md reproduces (1 claim ran)*"])
        assert (foreign.path / "dumpref-evidence" / "test_gelu_at_zero").is_dir()
    elif kind == "reprove":
        res.stdout.fnmatch_lines(["*every line of docs/gelu.md reproduces (1 claim ran)*"])


def test_the_study_marker_selects_the_claims_when_configured(foreign):
    # with [tool.dumpref] claims, `pytest -m gelu` from the root searches the claims as well
    foreign.makepyprojecttoml('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                              '[tool.dumpref]\nsections = ["gelu"]\nclaims = ["docs/claims"]\n')
    (foreign.path / "tests").mkdir()
    (foreign.path / "tests" / "test_unit.py").write_text("def test_unit():\n    assert True\n")
    res = foreign.runpytest("-m", "gelu")
    res.assert_outcomes(passed=1, deselected=1)
    res = foreign.runpytest()  # no -m: testpaths as configured
    res.assert_outcomes(passed=1)
    res = foreign.runpytest("tests", "-m", "gelu")  # paths given: just those
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    res = foreign.runpytest("-m", "not gelu")  # not a selection by study: testpaths as configured
    res.assert_outcomes(passed=1)
    assert "test_gelu" not in res.stdout.str()
