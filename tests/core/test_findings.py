"""The write-up opens with its findings: one line a claim, under its section, with the numbers
its ``finding=`` quotes (checked like the claim's own), linked to the claim."""
import pytest

CLAIMS = '''
import pytest
P = dict(dtype="f32", shapes={"x": (1,)}, method="m")

@pytest.mark.passes
@pytest.mark.claim("The pass halves the bytes.", title="Bytes halve",
                   finding="the bytes fall from {before} to {after}, a ratio of {ratio}")
@pytest.mark.provenance(**P)
def test_bytes(evidence):
    evidence.number("before", 4096, unit="B")
    evidence.number("after", 2048, unit="B")
    evidence.number("ratio", 2.0)
    assert True

@pytest.mark.fusion
@pytest.mark.claim("A claim with no finding line.", title="Plain")
@pytest.mark.provenance(**P)
def test_plain(evidence):
    evidence.number("n", 1)
    assert True
'''

PYPROJECT = '''
[tool.dumpref]
sections = ["passes", "fusion"]
[tool.dumpref.section_titles]
passes = "Study 1"
fusion = "Study 2"
'''


def test_findings_come_first_with_their_numbers(pytester):
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_claims=CLAIMS)
    pytester.runpytest("--dumpref-report=writeup.md").assert_outcomes(passed=2)
    text = (pytester.path / "writeup.md").read_text()
    lines = text.splitlines()
    assert lines.index("## Findings") < lines.index("## Environment")
    assert ("- [Bytes halve](#claim-test-claims-py-test-bytes): the bytes fall from 4,096 B (4.00 KiB) "
            "to 2,048 B (2.00 KiB), a ratio of 2") in lines
    assert "- [Plain](#claim-test-claims-py-test-plain)" in lines
    # the findings are the contents: each section's title links to it, and one line to the rest
    assert lines.index("**[Study 1](#study-1)**") < lines.index("**[Study 2](#study-2)**") \
        < lines.index("Also: [Environment](#environment) · [Not established](#not-established)") \
        < lines.index("## Environment")
    assert "## Contents" not in lines
    assert pytester.runpytest("--dumpref-check=writeup.md").ret == 0
    # an edit of a finding's number is caught like any other
    cut = text.index("<!-- dumpref-data")
    (pytester.path / "writeup.md").write_text(text[:cut].replace("a ratio of 2", "a ratio of 3", 1) + text[cut:])
    res = pytester.runpytest("--dumpref-check=writeup.md")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*claim test_claims.py::test_bytes*a ratio of 3*"])


def test_a_finding_naming_a_number_the_claim_did_not_record_fails_the_claim(pytester):
    pytester.makepyfile(test_claims='''
import pytest
@pytest.mark.claim("Something.", finding="it is {missing}")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="m")
def test_x(evidence):
    evidence.number("present", 1)
    assert True
''')
    res = pytester.runpytest()
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*its finding names 'missing', which it recorded no number of (recorded: 'present')*"])


def test_claims_without_a_finding_share_one_line_of_their_titles(pytester):
    """A run of claims with no finding= (ten "Rank N" titles in this repository's write-up)
    takes one line of the first screen, their titles linked in order; a claim with a finding
    between them breaks the run."""
    claim = '''
@pytest.mark.claim("{t}.", title="{t}"{f})
@pytest.mark.provenance(dtype="f32", shapes={{"x": (1,)}}, method="m")
def test_{n}(evidence):
    evidence.number("n", 1)
    assert True
'''
    body = "import pytest\n" + "".join(claim.format(t=t, n=t.lower(), f=f) for t, f in (
        ("A", ""), ("B", ""), ("C", ', finding="c is {n}"'), ("D", "")))
    pytester.makepyfile(test_claims=body)
    pytester.runpytest("--dumpref-report=writeup.md").assert_outcomes(passed=4)
    lines = (pytester.path / "writeup.md").read_text().splitlines()
    assert "- [A](#claim-test-claims-py-test-a) · [B](#claim-test-claims-py-test-b)" in lines
    assert "- [C](#claim-test-claims-py-test-c): c is 1" in lines
    assert "- [D](#claim-test-claims-py-test-d)" in lines
    assert lines.index("- [C](#claim-test-claims-py-test-c): c is 1") < lines.index("- [D](#claim-test-claims-py-test-d)")
    assert pytester.runpytest("--dumpref-check=writeup.md").ret == 0
