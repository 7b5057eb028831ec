"""Study 2 on the TPU: the same softmax decision where the seed's question lives, HBM.

On a TPU v5e ("TPU v5 lite") a softmax row (f32[8192]) fits in VMEM, the TensorCore's vector
memory: the fusion pass ``tpu_fusion`` can keep the row maxima and sums there, and what crosses
HBM is x, read by each of the three kernels, and the result.  The claim counts each kernel's HBM
and VMEM bytes from the optimized module (``pytest_dumpref/xla/tpu/counting.py``: tiled sizes,
``S(1)`` is VMEM), fused and with ``tpu_fusion`` disabled, and reads the pass's own log for why
the row max stays out of both fusions.  Time on the chip is the next study's.

Marked ``platform("tpu")``: measured and recorded on the chip, replayed from its recording
(recordings/claims/test_fusion_tpu/) anywhere else, every figure recomputed from its files.
"""
from __future__ import annotations

import numpy as np
import pytest

from pytest_dumpref.examples import softmax
from pytest_dumpref.xla.fusion_log import refusals, refusals_by_reason
from pytest_dumpref.xla.traffic import parse_buffer_assignment

pytestmark = [pytest.mark.fusion, pytest.mark.platform("tpu")]

X = np.ones((8192, 8192), np.float32)
METHOD = ("bytes each kernel of the optimized module reads and writes, at tiled sizes, by memory space "
          "(pytest_dumpref/xla/tpu/counting.py); the tpu_fusion pass's log (xla_dump_fusion_visualization); "
          "compiled for a TPU v5e, recorded on the chip, replayed elsewhere")


def kernel_rows(traffic) -> list[dict]:
    return [{"kernel": k.name, "kind": k.fusion_kind or k.opcode,
             **{f"{space} {rw}": f"{k.spaces.get(space, (0, 0))[i]:,}" for space in ("HBM", "VMEM")
                for i, rw in enumerate(("read", "written"))}}
            for k in traffic.kernels if k.bytes_accessed]


@pytest.mark.claim(
    "On a TPU v5e, tpu_fusion keeps softmax's row maxima and sums in VMEM: over f32[8192,8192] the "
    "fused program moves 1 GiB through HBM (x read by each of its three kernels, the result written "
    "once, and a 512 B constant), and without the pass three times that. The pass's log keeps the row "
    "max out of both fusions by two rules of the TPU's own fusion policy, each with its source line.",
    title="Softmax on a TPU: what stays in VMEM", section="fusion",
    finding="{HBM bytes, fused} through HBM fused, {HBM bytes, without tpu_fusion} without the pass")
@pytest.mark.provenance(dtype="f32", shapes={"x": X.shape}, method=METHOD, chip="TPU v5 lite")
def test_softmax_on_a_tpu_keeps_its_rows_in_vmem(dump, unfused, evidence):
    fused = dump(softmax, X)
    plain = unfused(softmax, X, passes=["tpu_fusion"])
    t, u = fused.traffic_report, plain.traffic_report
    evidence.number("HBM bytes, fused", t.hbm_bytes, unit="B")
    evidence.number("HBM bytes, without tpu_fusion", u.hbm_bytes, unit="B")
    evidence.table("the fused program's kernels: bytes by memory space", kernel_rows(t))
    evidence.table("without tpu_fusion: bytes by memory space", kernel_rows(u), fold=True)
    assert len(t.kernels) == 3 and len(u.kernels) > len(t.kernels)
    assert t.hbm_bytes == 4 * X.nbytes + 512
    assert 2.9 < u.hbm_bytes / t.hbm_bytes < 3.1
    # the 512 B: the reduce's -inf, a scalar in its 128-element tile, allocated in the default
    # memory space (no color in the buffer assignment); the row vectors are allocated in color 1
    allocations = parse_buffer_assignment(fused.buffer_assignment)
    constant = [a for a in allocations if any(v.name.startswith("constant") for v in a.values)]
    evidence.table("where the buffer assignment puts the fused program's constants",
                   [{"allocation": a.index, "size": a.size, "values": ", ".join(v.name for v in a.values),
                     "kind": ", ".join(a.kinds), "color (memory space)": a.color} for a in constant])
    assert constant and all(a.size == 512 and a.color == 0 for a in constant)
    row_vectors = {k.name for k in t.kernels} - {fused.optimized.entry.root.name}   # the max, the sum
    rows = [a for a in allocations if row_vectors & {v.name for v in a.values}]
    assert len(row_vectors) == 2 and rows and all(a.color == 1 for a in rows)

    decisions = fused.fusion_decisions()
    groups = refusals_by_reason(decisions)
    evidence.table("tpu_fusion's refusals by reason (each edge once; a refusal with two reasons is under both)",
                   [{"reason": c.text, "source line": c.source or "-",
                     "producer -> consumer": ", ".join(f"{d.producer} -> {d.consumer}" for d in g)}
                    for c, g in groups.items()])
    row_max = [d for d in refusals(decisions) if d.producer.startswith("reduce_max")]
    assert {d.consumer for d in row_max} >= {k.name for k in t.kernels if k.name.startswith("fusion")}
    assert all("Not fusing MOF" in d.reason and "Not allowed" in d.reason for d in row_max)
