"""A check that tells a tampered write-up from a different machine: on another machine than the
file's (its environment's machine fields differ), a claim whose measured conclusion does not
hold is a finding about that machine, reported with both machines' figures, and the file's
record stands; a claim the file does not establish that fails again reproduces the file.  A
claim without measured evidence that fails, or a measured conclusion that fails on the file's
own machine, still fails the check."""
import os
import re

import writeup_files

CLAIM = '''
import os
import pytest

@pytest.mark.claim("The machine is fast enough")
@pytest.mark.provenance(dtype="f32", shapes={"x": (4,)}, method="a measured value and a bar")
def test_fast_enough(evidence):
    t = float(os.environ["DUMPREF_TEST_TIME"])
    evidence.number("time", t, unit="us", noise=0.01 * t)
    assert t < 10, f"time {t} us, over 10"

@pytest.mark.claim("Two and two make four")
@pytest.mark.provenance(dtype="s32", shapes={"x": (1,)}, method="arithmetic")
def test_exact(evidence):
    n = int(os.environ.get("DUMPREF_TEST_SUM", "4"))
    evidence.number("sum", n)
    assert n == 4
'''


def _render(pytester, monkeypatch, time):
    pytester.makepyprojecttoml("[tool.dumpref]\n")
    pytester.makepyfile(test_claims=CLAIM)
    monkeypatch.setenv("DUMPREF_TEST_TIME", str(time))
    return pytester.runpytest("--dumpref-report=writeup.md", "-p", "no:cacheprovider")


def _another_machine(pytester):
    """The file as if rendered on a machine with 96 CPUs: its table and its data alike."""
    md = pytester.path / "writeup.md"
    n = os.cpu_count()
    cpu_count = re.search(r"^\| cpu_count \| (\d+) \|$", md.read_text(), re.M).group(1)
    writeup_files.edit_data(md, f'"cpu_count": {cpu_count}', '"cpu_count": 96')
    md.write_text(md.read_text().replace(f"| cpu_count | {cpu_count} |", "| cpu_count | 96 |"))
    assert n != 96


def _check(pytester):
    return pytester.runpytest("--dumpref-check=writeup.md", "-p", "no:cacheprovider")


def test_a_measured_conclusion_that_fails_on_another_machine_is_a_finding(pytester, monkeypatch):
    _render(pytester, monkeypatch, 5).assert_outcomes(passed=2)
    _another_machine(pytester)
    monkeypatch.setenv("DUMPREF_TEST_TIME", "20")
    res = _check(pytester)
    assert res.ret == 0, res.stdout.str()
    res.assert_outcomes(passed=1, skipped=1)
    out = res.stdout.str()
    assert "judged by the write-up's record" in out
    assert "test_fast_enough: its measured conclusion does not hold on this machine" in out
    assert "cpu_count" in out and "time: 5 | 20" in out


def test_the_same_failure_on_the_files_machine_fails_the_check(pytester, monkeypatch):
    _render(pytester, monkeypatch, 5).assert_outcomes(passed=2)
    monkeypatch.setenv("DUMPREF_TEST_TIME", "20")
    res = _check(pytester)
    assert res.ret != 0
    res.assert_outcomes(passed=1, failed=1)


def test_evidence_that_no_longer_derives_fails_on_any_machine(pytester, monkeypatch):
    _render(pytester, monkeypatch, 5).assert_outcomes(passed=2)
    _another_machine(pytester)
    monkeypatch.setenv("DUMPREF_TEST_SUM", "5")
    res = _check(pytester)
    assert res.ret != 0
    res.assert_outcomes(passed=1, failed=1)


def test_a_claim_the_file_does_not_establish_reproduces_by_failing_again(pytester, monkeypatch):
    _render(pytester, monkeypatch, 20).assert_outcomes(passed=1, failed=1)
    res = _check(pytester)
    assert res.ret == 0, res.stdout.str()
    res.assert_outcomes(passed=1, skipped=1)
    assert "test_fast_enough: not established in this run, as writeup.md says" in res.stdout.str()


def test_a_claim_the_file_does_not_establish_that_holds_on_another_machine_is_a_finding(pytester, monkeypatch):
    _render(pytester, monkeypatch, 20).assert_outcomes(passed=1, failed=1)
    _another_machine(pytester)
    monkeypatch.setenv("DUMPREF_TEST_TIME", "5")
    res = _check(pytester)
    assert res.ret == 0, res.stdout.str()
    assert "test_fast_enough: holds on this machine" in res.stdout.str()


CHIPS = '''
import pytest

@pytest.mark.claim("Here")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="counting")
def test_here(evidence):
    evidence.number("n", 1)
    assert True

@pytest.mark.claim("There")
@pytest.mark.provenance(dtype="f32", shapes={"x": (1,)}, method="counting")
def test_there(evidence):
    evidence.observe(chip="TPU v5 lite")      # as a replayed recording says where it was made
    evidence.number("n", 2)
    assert True
'''


def test_the_environment_names_each_chip_the_evidence_came_from(pytester):
    pytester.makepyprojecttoml("[tool.dumpref]\n")
    pytester.makepyfile(test_claims=CHIPS)
    pytester.runpytest("--dumpref-report=writeup.md", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    md = (pytester.path / "writeup.md").read_text()
    here = re.search(r"^\| chip \| (.+) \|$", md, re.M).group(1)
    table = md[md.index("| chip | claims |"):].split("\n\n")[0].splitlines()
    assert sorted(table[2:]) == sorted([f"| {here} | 1 |", "| TPU v5 lite | 1 |"])
    check = pytester.runpytest("--dumpref-check=writeup.md", "-p", "no:cacheprovider")
    assert check.ret == 0, check.stdout.str()
