"""A long note that several claims record is said once, under the first; the others point to it
(and a note every claim of a section records is said once at the head of the section)."""

LONG = ("Each compile a claim makes gets a sub-folder of the test's dump folder, numbered in compile "
        "order; dump file names begin with the compile counter of the process, so the titles show "
        "it as NNNN and a serial and a parallel run name the same files.")

CLAIMS = f'''
import pytest
P = dict(dtype="f32", shapes={{"x": (1,)}}, method="m")
LONG = {LONG!r}

@pytest.mark.claim("First claim.", title="First")
@pytest.mark.provenance(**P)
def test_first(evidence):
    evidence.number("n", 1)
    evidence.note(LONG)
    assert True

@pytest.mark.claim("Second claim.", title="Second")
@pytest.mark.provenance(**P)
def test_second(evidence):
    evidence.number("n", 2)
    evidence.note(LONG)
    assert True

@pytest.mark.claim("Third claim, with no such note.", title="Third")
@pytest.mark.provenance(**P)
def test_third(evidence):
    evidence.number("n", 3)
    evidence.note("A short note.")
    assert True
'''


def test_a_long_note_is_said_once_and_pointed_to(pytester):
    pytester.makepyfile(test_claims=CLAIMS)
    pytester.runpytest("--dumpref-report=writeup.md").assert_outcomes(passed=3)
    visible = (pytester.path / "writeup.md").read_text().split("<!-- dumpref-data")[0]
    assert visible.count(LONG.split(";")[0]) == 1
    first = visible.index("### First")
    second = visible.index("### Second")
    assert first < visible.index(LONG.split(";")[0]) < second
    assert ("*The note “Each compile a claim makes gets a sub-folder …” under "
            "[First](#claim-test-claims-py-test-first) holds for this claim too.*") in visible[second:]
    assert pytester.runpytest("--dumpref-check=writeup.md").ret == 0
