"""traffic.OPCODE_RULES is the one place an opcode's byte rules live: an entry added to it (here
a test-only one, put in with monkeypatch) reaches every walker (XLA's restated rules, their
float32 replay, the spill-style kernels, the reasons for differences, inside a loop too) and
the rule prose the write-up prints (passes.DEFINITIONS["kernels"]), with no other change."""
from __future__ import annotations

from pytest_dumpref.xla import passes, traffic
from pytest_dumpref.xla.hlo import parse_module
from pytest_dumpref.xla.traffic import (
    OpcodeRule,
    Runs,
    module_traffic,
    xla_float32_total,
    xla_rule_bytes,
)

MODULE = parse_module("""HloModule m
body {
  p = (s32[], f32[256]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[256]{0} get-tuple-element(p), index=1
  r = f32[256]{0} reverse(x), dimensions={0}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[256]{0}) tuple(j, r)
}
cond {
  p = (s32[], f32[256]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[256]{0} parameter(0)
  r = f32[256]{0} reverse(x), dimensions={0}
  c = f32[256]{0} copy(r)
  z = s32[] constant(0)
  t = (s32[], f32[256]{0}) tuple(z, c)
  ROOT w = (s32[], f32[256]{0}) while(t), condition=cond, body=body, backend_config={"known_trip_count":{"n":"3"}}
}""")
WHY = "a test-only rule: XLA counts the result only"


def _test_rule(rules, comp, inst):
    return [inst.shape.byte_size]


def test_a_new_opcode_entry_reaches_every_walker(monkeypatch):
    before = xla_rule_bytes(MODULE)
    assert before["r"] == 2048          # the default rule: 1024 B result + 1024 B operand
    monkeypatch.setitem(traffic.OPCODE_RULES, "reverse", OpcodeRule(xla=_test_rule, reason=WHY))
    rules = xla_rule_bytes(MODULE)
    assert rules["r"] == 1024
    assert rules["w"] == before["w"] - 1024     # the body's reverse, counted once by XLA
    assert xla_float32_total(MODULE) == sum(rules.values())
    report = module_traffic(MODULE)
    found = {d.instruction: d.reason for d in report.compare_with_xla()}
    assert found["r"] == f"reverse: {WHY}"
    assert f"r (ours 2048, XLA 1024: reverse: {WHY})" in found["w"]
    # the spill-style model still runs it as a kernel: 3 trips of the body, one at the entry
    assert [k.path for k in report.kernels if k.opcode == "reverse"] == ["r", "w/r"]
    assert [k.executions for k in report.kernels if k.opcode == "reverse"] == [1, 3]


def test_a_new_entry_that_moves_nothing_or_runs_computations_reaches_the_prose(monkeypatch):
    monkeypatch.setitem(traffic.OPCODE_RULES, "copy", OpcodeRule(moves_nothing=True))
    assert [k.name for k in module_traffic(MODULE).kernels if k.opcode == "copy"] == []
    text = passes._kernels_text()
    assert text != passes.DEFINITIONS["kernels"]
    assert "Not kernels: add-dependency, after-all, bitcast, constant, copy, domain," in text
    monkeypatch.setitem(traffic.OPCODE_RULES, "map", OpcodeRule(
        runs=Runs(lambda inst: inst.called, words="a map's computation once per element")))
    text = passes._kernels_text()
    assert "A call, while, conditional or map is not itself a kernel" in text
    assert "the one XLA's rules give the most bytes; a map's computation once per element." in text


def test_the_prose_is_the_tables():
    """Without a test entry the prose the write-up prints is what the table gives."""
    assert passes.DEFINITIONS["kernels"] == passes._kernels_text()
    assert "Not kernels: " + ", ".join(sorted(traffic.FREE_OPCODES)) + ", and a transpose" \
        in passes.DEFINITIONS["kernels"]
