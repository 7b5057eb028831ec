"""The claim contract, as a user meets it: real claim files run by pytester."""
import pytest

HEADER = "import pytest\n"
GOOD_PROV = '@pytest.mark.provenance(dtype="f32", shapes={"x": (2, 3)}, method="arithmetic")\n'


def run(pytester, body, *args):
    pytester.makepyfile(test_claims=HEADER + body)
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_claim_without_evidence_fails_and_says_so(pytester):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
              "def test_c():\n    assert True\n")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*claim test_claims.py::test_c fails: it recorded no evidence*"])


def test_a_claim_with_no_evidence_and_no_assertion_names_both(pytester):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n' + GOOD_PROV + "def test_c():\n    pass\n")
    res.assert_outcomes(failed=1)
    assert "it asserts nothing" in res.stdout.str() and "it recorded no evidence" in res.stdout.str()


def test_claim_without_provenance_fails(pytester):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n'
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*it has no @pytest.mark.provenance*"])


def test_provenance_missing_fields_are_named(pytester):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n'
              '@pytest.mark.provenance(dtype="f32")\n'
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*its provenance lacks shapes, method*"])


def test_wrong_chip_fails(pytester):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n'
              '@pytest.mark.provenance(dtype="f32", shapes={"x": (2,)}, method="m", chip="TPU v9 imaginary")\n'
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*declares chip 'TPU v9 imaginary' but the evidence came from*"])


def test_right_chip_passes(pytester):
    from pytest_dumpref.provenance import cpu_model_name
    res = run(pytester, '@pytest.mark.claim("a sentence")\n'
              f'@pytest.mark.provenance(dtype="f32", shapes={{"x": (2,)}}, method="m", chip={cpu_model_name()!r})\n'
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    res.assert_outcomes(passed=1)


def test_declared_shapes_are_checked_against_observed_parameters(pytester):
    body = ('@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
            "def test_c(evidence):\n"
            "    evidence.observe(backend='cpu', params={'x': ('float32', (2, 4))})\n"
            "    evidence.number('n', 1)\n    assert 1 == 1\n")
    res = run(pytester, body)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*declares x: (2, 3) but parameter x is (2, 4)*"])


def test_declared_dtype_is_checked_against_observed_parameters(pytester):
    body = ('@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
            "def test_c(evidence):\n"
            "    evidence.observe(backend='cpu', params={'x': ('bfloat16', (2, 3))})\n"
            "    evidence.number('n', 1)\n    assert 1 == 1\n")
    res = run(pytester, body)
    res.assert_outcomes(failed=1)
    assert "declares dtype f32 but the program's parameters are ['bf16']" in res.stdout.str()


def test_a_failing_assertion_still_fails_normally(pytester):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 2\n")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*assert 1 == 2*"])


def test_ordinary_tests_are_untouched(pytester):
    res = run(pytester, "def test_plain():\n    assert True\n\n"
              "def test_plain_with_evidence(evidence):\n    evidence.number('x', 1)\n",
              "--dumpref-report=w.md")
    res.assert_outcomes(passed=2)
    text = (pytester.path / "w.md").read_text()
    assert "test_plain" not in text
    assert "0 claims established, 0 not established" in text


@pytest.mark.parametrize("marker, message", [
    ('@pytest.mark.claim()', "claim takes exactly one sentence"),
    ('@pytest.mark.claim("s", colour="red")', "unknown arguments ['colour']"),
    ('@pytest.mark.claim("s")\n@pytest.mark.provenance("f32")', "takes keywords only"),
    ('@pytest.mark.claim("s")\n@pytest.mark.provenance(dtype="f32", shapes=(3,), method="m")', "shapes must map names"),
    ('@pytest.mark.claim("s")\n@pytest.mark.provenance(dtyp="f32")', "unknown arguments ['dtyp']"),
])
def test_marker_with_wrong_arguments_is_a_usage_error_naming_the_test(pytester, marker, message):
    res = run(pytester, marker + "\ndef test_c(evidence):\n    evidence.number('n', 1)\n")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "test_claims.py::test_c" in err and message in err, err


def test_unknown_section_is_a_usage_error(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["passes", "fusion"]\n')
    res = run(pytester, '@pytest.mark.claim("s", section="pases")\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*test_claims.py::test_c: section 'pases' is not one of the sections*"])


def test_study_marker_gives_the_default_section(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["fusion"]\n'
                               '[tool.dumpref.section_titles]\nfusion = "The fusion study"\n')
    res = run(pytester, '@pytest.mark.fusion\n@pytest.mark.claim("s")\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n", "--dumpref-report=w.md")
    res.assert_outcomes(passed=1)
    assert "## The fusion study" in (pytester.path / "w.md").read_text()


def test_markers_are_the_configured_sections(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["alpha", "beta"]\n'
                               '[tool.dumpref.section_titles]\nalpha = "Study A"\n')
    res = pytester.runpytest("--markers")
    for name in ("claim: claim(text, *, title=None, section=None)", "provenance: provenance(*",
                 "alpha: study: Study A", "beta: study: beta"):
        res.stdout.fnmatch_lines([f"@pytest.mark.{name}*"])
    # the generic plugin knows nothing of any repository's studies
    assert "@pytest.mark.passes" not in res.stdout.str() and "@pytest.mark.pjrt" not in res.stdout.str()


def test_with_no_sections_configured_claims_go_to_the_default_section(pytester):
    res = run(pytester, '@pytest.mark.claim("s")\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n", "--dumpref-report=w.md")
    res.assert_outcomes(passed=1)
    assert "## Claims\n" in (pytester.path / "w.md").read_text()
    res = run(pytester, '@pytest.mark.claim("s", section="other")\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "section 'other' is not one of the sections allowed with no [tool.dumpref] sections" in res.stderr.str()


def test_a_claim_without_section_among_configured_sections_is_a_usage_error(pytester):
    pytester.makepyprojecttoml('[tool.dumpref]\nsections = ["alpha", "beta"]\n')
    res = run(pytester, '@pytest.mark.claim("s")\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_claims.py::test_c: the claim names no section" in res.stderr.str()
    assert "@pytest.mark.alpha" in res.stderr.str()


# -- a claim must assert -------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    "def test_c(dump):\n    import jax.numpy as jnp\n    dump(lambda x: x * 2, jnp.ones((2, 3), jnp.float32))\n",
    "def test_c(evidence):\n    evidence.number('n', 1)\n",
    "def test_c(evidence):\n    evidence.number('n', 1)\n    if False:\n        assert 1 == 2\n",
])
def test_a_claim_that_asserts_nothing_fails(pytester, body):
    res = run(pytester, '@pytest.mark.claim("a sentence")\n' + GOOD_PROV + body, "--dumpref-report=w.md")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*claim test_claims.py::test_c fails: it asserts nothing*"])
    text = (pytester.path / "w.md").read_text()
    assert "0 claims established, 1 not established" in text


def test_a_claim_with_a_passing_assertion_stands(pytester):
    body = ("def helper(n):\n    assert n > 0\n\n"
            '@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
            "def test_c(evidence):\n    evidence.number('n', 1)\n    helper(1)\n")
    run(pytester, body).assert_outcomes(passed=1)  # an assert in a helper of the claim's file counts
    body = ('@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
            "def test_c(evidence):\n    evidence.number('n', 0.1 + 0.2)\n    assert 0.1 + 0.2 == pytest.approx(0.3)\n")
    run(pytester, body).assert_outcomes(passed=1)


def test_assertions_in_a_fixture_do_not_count_for_the_claim(pytester):
    body = ("@pytest.fixture\ndef checked():\n    assert True\n    return 1\n\n"
            '@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
            "def test_c(evidence, checked):\n    evidence.number('n', checked)\n")
    run(pytester, body).assert_outcomes(failed=1)


# -- titles --------------------------------------------------------------------------------

def test_a_claim_heading_is_its_title_and_its_sentence_the_first_paragraph(pytester):
    body = ('@pytest.mark.claim("A long sentence that says what holds.", title="Short title")\n' + GOOD_PROV +
            "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1\n\n"
            '@pytest.mark.claim("Another sentence.")\n' + GOOD_PROV +
            "def test_07_bytes_fall_after_fusion(evidence):\n    evidence.number('n', 1)\n    assert 1\n")
    run(pytester, body, "--dumpref-report=w.md").assert_outcomes(passed=2)
    text = (pytester.path / "w.md").read_text()
    assert "### Short title\n\nA long sentence that says what holds.\n" in text
    assert "### Bytes fall after fusion\n\nAnother sentence.\n" in text  # the default: the test's name


@pytest.mark.parametrize("marker", ['title=""', "title=3", 'title="two\\nlines"'])
def test_a_bad_title_is_a_usage_error(pytester, marker):
    res = run(pytester, f'@pytest.mark.claim("s", {marker})\n' + GOOD_PROV +
              "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1\n")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_claims.py::test_c: @pytest.mark.claim title must be a one-line string" in res.stderr.str()


def test_a_module_cached_without_the_assertion_pass_hook_is_named(pytester, monkeypatch):
    # A .pyc that pytest's assertion rewriting wrote in a run without this plugin has no
    # assertion-pass calls: the claim cannot be judged, and the failure says what to do.
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    pytester.makepyfile(test_claims=HEADER + '@pytest.mark.claim("a sentence")\n' + GOOD_PROV +
                        "def test_c(evidence):\n    evidence.number('n', 1)\n    assert 1 == 1\n")
    pytester.runpytest_subprocess("-p", "no:dumpref", "-p", "no:cacheprovider")
    assert list((pytester.path / "__pycache__").glob("test_claims*pytest*.pyc"))
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*cannot be judged: its module was loaded from a .pyc*delete that folder's "
                              "__pycache__ and run again*"])


def test_the_cpu_count_is_the_cpus_the_run_may_use(tmp_path):
    """XLA:CPU's parallel task assigner sizes itself by the CPUs the process may run on, so
    the environment's cpu_count is those, not the machine's: one under taskset -c 0."""
    import shutil
    import subprocess
    import sys
    if shutil.which("taskset") is None:
        pytest.skip("no taskset on this machine")
    code = "from pytest_dumpref.provenance import environment as e; from pathlib import Path; print(e(Path('.'))['cpu_count'])"
    one = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    assert one.stdout.strip() == "1"
