"""A machine that runs slower or faster as a whole between the render and the check: a claim's
rulers (times that measure the machine, the timing fixture's calibration kernels) give the
re-run's speed, and its times are judged at that speed; a value edited alone, a ruler edited
alone, or a speed beyond the rule's resolution still fails."""
import pytest
from scripted_runs import READER, script

from pytest_dumpref import measured

# The claim reads its times from a file beside it (scripted_runs.py says why).
CLAIMS = '''
import pytest
from pytest_dumpref.claims import measured
''' + READER + '''
@pytest.mark.claim("Without fusion the program is slower.", title="Extra time")
@pytest.mark.provenance(dtype="f32", shapes={"x": (512, 512)}, method="timing")
def test_extra(evidence):
    m = _measured()
    evidence.table("per-call times", [
        {"variant": "fused", "us/call": measured(m["fused"], 1.0, unit="us")},
        {"variant": "unfused", "us/call": measured(m["unfused"], 1.5, unit="us")},
        {"variant": "stream", "us/call": measured(m["stream"], 0.2, unit="us", ruler=True)},
        {"variant": "dispatch", "us/call": measured(m["dispatch"], 0.03, unit="us", ruler=True)},
    ])
    evidence.number("extra time per call", m["unfused"] - m["fused"], unit="us", noise=1.8)
    evidence.number("stream bandwidth", 1e6 / m["stream"], unit="MB/s", noise=0.01 * 1e6 / m["stream"])
    assert m["unfused"] > m["fused"]
'''

# The README's timing example as a CI run rendered it in a slow stretch (fused 58, unfused
# 169.9, dispatch 11.83 us) and checked it 10 s later, every time at 0.65 of the file's.
WRITTEN = {"fused": 58.0, "unfused": 169.9, "stream": 40.0, "dispatch": 11.83}


def times(factor: float = 1.0, **edits) -> dict:
    run = {k: v * factor for k, v in WRITTEN.items()}
    run.update(edits)
    return run


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_claims=CLAIMS)
    return pytester


def render_then_check(project, written: dict, *now: dict):
    script(project.path, [written])
    project.runpytest("--dumpref-report=writeup.md", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    script(project.path, now)
    return project.runpytest("--dumpref-check=writeup.md", "-p", "no:cacheprovider")


def test_a_machine_at_065_of_its_speed_passes_at_the_speed_its_rulers_give(project):
    res = render_then_check(project, WRITTEN, times(0.65))
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "its rulers ran at 0.65 of the file's time (the geometric mean of 2" in out, out
    assert "re-run" not in out, out   # decided at once, not by fresh-process re-runs


def test_without_rulers_the_same_run_fails_as_it_did(project):
    """The same 0.65 with the rulers' ruler mark taken away: every time is judged as written,
    and the check fails (after its fresh-process re-runs, which see the same machine)."""
    project.makepyfile(test_claims=CLAIMS.replace(", ruler=True", ""))
    res = render_then_check(project, WRITTEN, times(0.65))
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "extra time per call" in out and "incompatible" in out, out


def test_a_value_that_moved_alone_fails_though_the_machine_sped_up(project):
    res = render_then_check(project, WRITTEN, times(0.65, unfused=2 * 0.65 * 169.9 - 0.65 * 58.0))
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "number 'extra time per call' does not reproduce" in out, out
    assert "its rulers ran at 0.65 of the file's time" in out, out


def test_a_ruler_that_moved_alone_gives_no_speed(project):
    """A ruler edited by hand (here: re-measured at double) disagrees with the other ruler:
    no speed is applied, the report says why, and the doubled ruler fails as a value."""
    res = render_then_check(project, WRITTEN, times(dispatch=2 * 11.83))
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "no speed applied, its rulers disagree" in out, out
    assert "us/call" in out and "does not reproduce" in out, out


def test_a_speed_beyond_the_resolution_is_not_applied(project):
    """Every time at 0.45 of the file's: a run that cannot be told from a file whose times
    were all doubled by hand, so it is judged as written, and fails."""
    res = render_then_check(project, WRITTEN, times(0.45))
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "beyond a factor of 2" in out, out


def test_a_rate_is_judged_at_the_inverse_of_the_speed():
    speed, _ = measured.common_speed([(40.0, 0.2, 26.0, 0.2), (11.83, 0.03, 7.69, 0.03)])
    assert speed is not None and speed.factor == pytest.approx(0.65, rel=1e-3)
    rule = measured.Rule(speed=speed)
    # a bandwidth measured at 1/0.65 of the file's is what that machine gives
    assert measured.judge(25.0, 0.1, 25.0 / 0.65, 0.1, rule, "MB/s").outcome == measured.COMPATIBLE
    assert measured.judge(25.0, 0.1, 25.0 / 0.65, 0.1, measured.Rule(), "MB/s").outcome == measured.INCOMPATIBLE
    # a ratio, a count, bytes: not scaled
    assert measured.judge(1.0, 0.01, 0.65, 0.01, rule, None).outcome == measured.INCOMPATIBLE
    assert measured.judge(1.0, 0.01, 0.65, 0.01, rule, "B").outcome == measured.INCOMPATIBLE
    # a time doubled by hand against that machine still fails
    assert measured.judge(2 * 169.9, 1.5, 0.65 * 169.9, 1.5, rule, "us").outcome == measured.INCOMPATIBLE


def test_the_speed_needs_two_agreeing_positive_rulers():
    one = [(40.0, 0.2, 26.0, 0.2)]
    assert measured.common_speed(one)[0] is None and "at least 2" in measured.common_speed(one)[1]
    assert measured.common_speed(one + [(0.0, 0.1, 1.0, 0.1)])[0] is None
    disagree = one + [(11.83, 0.03, 2 * 11.83, 0.03)]
    assert measured.common_speed(disagree)[0] is None and "disagree" in measured.common_speed(disagree)[1]


def test_a_speed_within_the_rulers_noise_is_not_applied():
    """Rulers at 0.92 of the file's time with 5-10 % noise each (a quiet check of the README's
    timing example gave that): they do not show that the machine's speed changed, and applied,
    the speed would only widen every value's allowance by its noise."""
    speed, why = measured.common_speed([(59.68, 3.0, 64.74, 5.8), (12.37, 1.2, 9.624, 1.6)])
    assert speed is None and "within their noise" in why, why


def test_a_ruler_is_a_time():
    from pytest_dumpref.claims import measured as cell
    from pytest_dumpref.kinds import ClaimError
    with pytest.raises(ClaimError, match="a ruler is a time"):
        cell(1.0, 0.1, unit="GB/s", ruler=True)
    assert cell(1.0, 0.1) == {"value": 1.0, "noise": 0.1}   # a cell of before keeps its data
