"""Knock-out: what the measured map says each level needs, checked against fresh runs."""
from __future__ import annotations

import pytest

from pytest_dumpref.pjrt.pjrt_map import ERROR_CHANNEL, LEVELS, level_passed


@pytest.mark.parametrize("number", [lv.number for lv in LEVELS])
def test_map_is_consistent_with_the_trace(pjrt_map, number):
    m = pjrt_map.level(number)
    assert m.needed, "a level that needs nothing measured nothing"
    for need in m.needed:
        assert need.entry_point in m.calls and need.why
        assert need.entry_point in pjrt_map.implemented
    firsts = [m.calls.index(n) for n in m.needed_names]
    assert firsts == sorted(firsts)  # order of first need follows the call order


@pytest.mark.parametrize("number", [lv.number for lv in LEVELS])
def test_needed_set_alone_suffices(pjrt_map, number):
    assert pjrt_map.level(number).sufficient, pjrt_map.level(number).sufficiency_why


@pytest.mark.parametrize("number", [lv.number for lv in LEVELS])
def test_removing_the_last_needed_entry_point_breaks_the_level_again(_pjrt_built, pjrt_map, number):
    """Re-measures one knock-out per level outside the map's own runs."""
    m = pjrt_map.level(number)
    last = m.needed[-1].entry_point
    run = _pjrt_built.run_jax(m.level.code, disable=[last], trace=False)
    assert not level_passed(run)


def test_level2_needs_what_level1_needs(pjrt_map):
    """Level 2 starts by listing the device, so what level 1 cannot do without, neither can it."""
    one, two = set(pjrt_map.level(1).needed_names), set(pjrt_map.level(2).needed_names)
    assert one <= two | set(ERROR_CHANNEL), one - two


def test_a_failure_at_exit_is_kept_apart_from_a_failure_of_the_level(pjrt_map):
    """Knocking out PJRT_Client_Destroy lets every check of level 1 pass; the process dies at exit."""
    m = pjrt_map.level(1)
    assert [n.entry_point for n in m.needed if n.at_exit] == ["PJRT_Client_Destroy"]
    assert m.tier("PJRT_Client_Destroy") == "needed"


@pytest.mark.parametrize("number", [lv.number for lv in LEVELS])
def test_every_called_entry_point_has_one_tier(pjrt_map, number):
    m = pjrt_map.level(number)
    rows = m.tier_table()
    assert sorted(r["entry point"] for r in rows) == sorted(m.called)
    needed = {r["entry point"] for r in rows if r["tier"].startswith("needed")}
    assert needed == set(m.needed_names) | (set(ERROR_CHANNEL) & set(m.called))
    fill = m.fill_table()
    assert sorted(r["entry point"] for r in fill) == sorted(m.called) and all(r["calls"] for r in fill)
