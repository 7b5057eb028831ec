"""fusion_policy: XLA's CPU fusion pass restated; its decisions against the compiler's log."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from pytest_dumpref import examples
from pytest_dumpref.xla.dump import DumpSession
from pytest_dumpref.xla.cpu.fusion import FusionDecision, compare, module_fusion
from pytest_dumpref.xla.cpu.fusion_policy import (Prediction, installed_xla_has_coupled_softmax_rule,
                                              predict, undo_fusion_bytes)
from pytest_dumpref.xla.hlo import parse_module

MOF = " ; multi-output fusion not supported by this pass"

# exp has two users (a reduce and a multiply): expensive, so never duplicated; the reduce's
# result is broadcast back, so the divide that reads it would be recomputed per element.
_TEXT = """HloModule m, entry_computation_layout={(f32[4,8]{1,0})->f32[4,8]{1,0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %e = f32[4,8]{1,0} exponential(%x)
  %zero = f32[] constant(0)
  %sum = f32[4]{0} reduce(%e, %zero), dimensions={1}, to_apply=%add
  %one = f32[] constant(1)
  %ones = f32[4]{0} broadcast(%one), dimensions={}
  %r = f32[4]{0} divide(%ones, %sum)
  %rb = f32[4,8]{1,0} broadcast(%r), dimensions={0}
  %table = f32[4,8]{1,0} constant({ {1,2,3,4,5,6,7,8}, {1,2,3,4,5,6,7,8}, {1,2,3,4,5,6,7,8}, {1,2,3,4,5,6,7,8} })
  %t = f32[4,8]{1,0} multiply(%e, %table)
  ROOT %out = f32[4,8]{1,0} multiply(%t, %rb)
}
"""


def test_rules_on_a_written_module():
    # Worked by hand from the rules: the queue is the reverse of the post order
    # x e table t one ones zero sum r rb out; a consumer's operands go latest-first.
    (entry,) = predict(parse_module(_TEXT, source="test"))
    got = [(p.producer, p.consumer_origin, p.verdict.replace(MOF, ""), p.rule) for p in entry.decisions]
    assert got == [
        ("rb", "out", "fused", "ShouldFuse: consumer is loop-fusible"),
        # the fusion now reuses r through the broadcast, and a float divide is expensive
        ("r", "out", "Fusion is not profitable.", "IsExpensive and ReusesOperandElements"),
        ("t", "out", "fused", "ShouldFuse: consumer is a loop fusion"),
        ("r", "out", "Fusion is not profitable.", "IsExpensive and ReusesOperandElements"),
        ("table", "out", "Don't fuse non-scalar constants.", "ShouldFuse: non-scalar constant"),
        # exp is read by the fusion and by the reduce: fusing it would compute it twice
        ("e", "out", "expensive producer would be duplicated", "FusionWouldDuplicate and IsExpensive"),
        # a reduce is loop-fusible, and the (elementwise) divide does not reuse its elements
        ("sum", "r", "fused", "ShouldFuse: consumer is loop-fusible"),
        ("zero", "r", "fused", "ShouldFuse: consumer is a loop fusion"),
        ("ones", "r", "fused", "ShouldFuse: consumer is a loop fusion"),
        ("one", "r", "fused", "ShouldFuse: consumer is a loop fusion"),
        ("e", "r", "expensive producer would be duplicated", "FusionWouldDuplicate and IsExpensive"),
    ]
    # every refusal carries the second reason, as Decision::Or joins them
    assert all(p.fused or p.reason.endswith(MOF) for p in entry.decisions)
    # what is left: exp, the multiply's fusion and the divide's (which took the reduce)
    kinds = sorted(n.opcode for n in entry.nodes if n.opcode not in ("parameter", "constant"))
    assert kinds == ["exponential", "fusion", "fusion"]


def test_leaving_a_rule_out_changes_its_decisions():
    m = parse_module(_TEXT, source="test")
    full = [p.verdict for r in predict(m) for p in r.decisions]
    for rule in ("IsExpensive and ReusesOperandElements", "FusionWouldDuplicate and IsExpensive",
                 "ShouldFuse: non-scalar constant"):
        assert [p.verdict for r in predict(m, without=[rule]) for p in r.decisions] != full, rule
    with_all = predict(m, without=["ShouldSkip"])    # no custom fusion here: nothing changes
    assert [p.verdict for r in with_all for p in r.decisions] == full


def _cpu(*arrays):
    return [jax.device_put(a, jax.devices("cpu")[0]) for a in arrays]


def _r(*shape, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


PROGRAMS = {   # small sizes: the decisions do not depend on them, except where the library rewriter steps in
    "softmax": lambda: (examples.softmax, _cpu(_r(64, 128))),
    "layernorm": lambda: (examples.layernorm, _cpu(_r(64, 128), _r(128), _r(128))),
    "gelu_grad": lambda: (examples.gelu_grad, _cpu(_r(64, 128))),
    "adam_update": lambda: (examples.adam_update, _cpu(*[_r(64, 128)] * 4)),
    "cross_entropy": lambda: (examples.cross_entropy,
                              _cpu(_r(64, 128), np.arange(64, dtype=np.int32))),
    "rope": lambda: (examples.rope, _cpu(_r(64, 32))),
    "scan_rnn": lambda: (examples.scan_rnn, _cpu(_r(8, 32), _r(4, 8, 32), _r(32, 32))),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_model_predicts_every_logged_decision(name, tmp_path):
    fn, args = PROGRAMS[name]()
    d = DumpSession(tmp_path).dump(fn, *args)
    mf = module_fusion(d)
    assert mf.log, name
    bad = [r for r in mf.rows if not r["agree"]]
    assert not bad, bad[:3]
    assert mf.agreed == len(mf.log) == len(mf.rows)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "gelu_grad", "rope"])
def test_bytes_of_undoing_the_pass_are_predicted_exactly(name, tmp_path):
    fn, args = PROGRAMS[name]()
    s = DumpSession(tmp_path)
    d = s.dump(fn, *args)
    unfused_b, fused_b = undo_fusion_bytes(module_fusion(d).before.module)
    plain = s.unfused(fn, *args, passes=["fusion"])
    assert (unfused_b, fused_b) == (plain.traffic, d.traffic)


def _decision(p, c, reason=None):
    return FusionDecision(p, c, reason is None, reason or f"Fused |{p}|", "fusion", c, None, "f", "main")


def _prediction(p, c, reason=None):
    return Prediction("main", p, c, c, reason, "rule")


def test_compare_costs_one_row_per_wrong_prediction():
    log = [_decision("a", "x"), _decision("b", "x", "no"), _decision("c", "y")]
    # the model refuses a where the pass fused it, and adds a decision the log lacks
    model = [_prediction("a", "x", "no"), _prediction("b", "x", "no"), _prediction("z", "y"),
             _prediction("c", "y")]
    rows = compare(log, model)
    assert [(r["producer"], r["agree"]) for r in rows] == [("a", False), ("b", True), ("z", False), ("c", True)]
    assert rows[2]["compiler"] is None and rows[0]["predicted"] == "no"


def test_the_model_follows_this_xlas_rule_for_the_scaled_logits_of_a_softmax(tmp_path):
    # XLA's main branch (July 2026) keeps a producer read by a row max and by the exp shift
    # from being duplicated (IsCoupledReductionShiftExpProducer); the XLA of jaxlib 0.10.2
    # and 0.11.0 still duplicate it, that of 0.12 does not, and the model follows the XLA
    # that runs here: with the other setting it gets the same decision wrong.
    here = installed_xla_has_coupled_softmax_rule()
    x = _cpu(_r(64, 128))[0]
    d = DumpSession(tmp_path).dump(lambda x: jax.nn.softmax(x * 0.125, axis=-1), x,
                                   xla_disable_hlo_passes="dot-library-rewriter")
    assert all(r["agree"] for r in module_fusion(d).rows)
    other = module_fusion(d, coupled_softmax_rule=not here)
    refused, fused = ("compiler", "predicted") if here else ("predicted", "compiler")
    assert any(r[refused] and r[refused].startswith("operand can not be duplicated")
               and r[fused] == "fused" for r in other.rows)
