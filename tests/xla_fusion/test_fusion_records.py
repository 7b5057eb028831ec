"""What the fusion study records about its evidence, recorded by the objects that made it:
ModuleFusion's decision table and queries, the bytes of undoing the pass (predicted and
measured), the softmax's normalisation found by structure, an entry computation as dumped
(passes.record_entry) and XLA's own byte count of a dump (Dump.xla_bytes_accessed)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from pytest_dumpref.claims import Evidence
from pytest_dumpref.examples import softmax
from pytest_dumpref.xla.dump import Dump, DumpError, DumpSession
from pytest_dumpref.xla.cpu.fusion import (fused_opcodes, module_fusion, record_undo_measured,
                                       record_undo_prediction, softmax_normalisation, undo_prediction)
from pytest_dumpref.xla.hlo import parse_module
from pytest_dumpref.xla.passes import AS_DUMPED, record_entry

# the study's size: at it the library rewriter leaves the normalisation to the fusion pass
X = jax.device_put(np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32),
                   jax.devices("cpu")[0])


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    s = DumpSession(tmp_path_factory.mktemp("fusion-records"))
    return s.dump(softmax, X), s.unfused(softmax, X, passes=["fusion"])


def _items(ev: Evidence, kind: str) -> list:
    return [i for i in ev.items if i["kind"] == kind]


def test_the_normalisation_is_found_by_structure(dumps):
    d, _ = dumps
    divide, bcast, multiply = softmax_normalisation(d.around_pass("fusion")[0].module)
    assert (divide.opcode, bcast.opcode, multiply.opcode) == ("divide", "broadcast", "multiply")
    assert bcast.operands == [divide.name] and bcast.name in multiply.operands
    assert bcast.shape.element_count == 1024 * divide.shape.element_count


def test_a_module_without_the_normalisation_is_named():
    m = parse_module("HloModule m\n\nENTRY %main (x: f32[4]) -> f32[4] {\n"
                     "  %x = f32[4]{0} parameter(0)\n  ROOT %e = f32[4]{0} exponential(%x)\n}\n")
    with pytest.raises(ValueError, match="root of m is exponential, not multiply"):
        softmax_normalisation(m)


def test_decisions_are_queried_by_producer_consumer_origin_and_verdict(dumps):
    d, _ = dumps
    mf = module_fusion(d)
    divide, bcast, multiply = softmax_normalisation(mf.before.module)
    (fused,) = mf.decisions(producer=bcast.name, origin=multiply.name, fused=True)
    assert mf.kernel_of(multiply.name) == fused.fusion
    (refused,) = mf.decisions(producer=divide.name, consumer=fused.fusion, fused=False)
    assert refused.reason.startswith("Fusion is not profitable.")
    assert mf.decisions() == mf.log
    assert len(mf.decisions(fused=True)) + len(mf.decisions(fused=False)) == len(mf.log)
    with pytest.raises(KeyError, match="fused nothing into x"):
        mf.kernel_of("x")        # the parameter: nothing grows from it


def test_the_decision_table_is_recorded_with_its_counts(dumps):
    d, _ = dumps
    mf = module_fusion(d)
    ev = Evidence()
    mf.record(ev, "decisions")
    assert [i["kind"] for i in ev.items] == ["table"]
    mf.record(ev, "decisions again", counts=True)
    (first, second) = _items(ev, "table")
    assert first["fold"] and len(first["rows"]) == len(mf.log) == len(second["rows"])
    numbers = {i["name"]: i["value"] for i in _items(ev, "number")}
    assert numbers == {"decisions of the fusion pass": len(mf.log), "decisions the restated rules predict": mf.agreed}


def test_the_bytes_of_undoing_the_pass_are_recorded_predicted_and_measured(dumps):
    d, plain = dumps
    ev = Evidence()
    predicted = record_undo_prediction(ev, d)
    assert predicted == undo_prediction(d)[1:]
    measured = record_undo_measured(ev, d, plain)
    assert measured == predicted          # the claim's result, on the study's program
    assert [i["title"] for i in _items(ev, "table")] == [
        "prediction: what each fusion the pass made keeps out of memory",
        "traffic per kernel, fused (default)", "traffic per kernel, without the fusion pass"]
    numbers = {i["name"]: i["value"] for i in _items(ev, "number")}
    assert numbers["measured extra bytes written"] == plain.traffic_report.bytes_written - d.traffic_report.bytes_written
    assert numbers["XLA bytes accessed, fused"] == d.xla_bytes_accessed == d.traffic
    assert numbers["XLA bytes accessed, without fusion"] == plain.xla_bytes_accessed == plain.traffic


def test_xla_bytes_accessed_needs_the_executable(dumps):
    d, _ = dumps
    assert d.xla_bytes_accessed == d.compiled.cost_analysis()["bytes accessed"]
    with pytest.raises(DumpError, match="no executable"):
        Dump.from_folder(d.folder).xla_bytes_accessed


def test_fused_opcodes_are_those_inside_the_kernel(dumps):
    d, _ = dumps
    root = d.optimized.entry.root
    assert root.opcode == "fusion"
    assert fused_opcodes(d.optimized, root) == {i.opcode for i in d.optimized.computations[root.called[0]].instructions}
    assert {"broadcast", "multiply"} <= fused_opcodes(d.optimized, root)


def test_an_entry_computation_is_recorded_as_dumped_with_its_file(dumps):
    d, _ = dumps
    before, _ = d.around_pass("fusion")
    ev = Evidence()
    record_entry(ev, "before", before)
    record_entry(ev, "optimized", d)
    a, b = ev.items
    assert a["title"].startswith(f"before, {AS_DUMPED} (module_NNNN.") and a["title"].endswith(".txt)")
    assert b["title"] == f"optimized, {AS_DUMPED} (module_NNNN.jit_softmax.cpu_after_optimizations.txt)"
    assert (a["lang"], a["fold"]) == ("hlo", True)
    # every instruction's line, metadata elided, between the header and the closing brace
    lines = b["text"].splitlines()
    assert lines[0] == d.optimized.entry.header and lines[-1] == "}"
    assert len(lines) == len(d.optimized.entry.instructions) + 2
    assert "metadata={...}" in b["text"] and "source_file=" not in b["text"]
