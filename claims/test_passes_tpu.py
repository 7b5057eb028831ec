"""Study 1 on the TPU: the same transformer block, compiled for a TPU v5e ("TPU v5 lite").

The program and its inputs are Study 1's (``examples.transformer_block`` on x: f32[4, 128, 256],
4 heads, MLP width 1024), compiled where jax's default backend is a TPU, with a snapshot after
every pass that changed it.  The claim is marked ``platform("tpu")``: measured and recorded on
the chip (recordings/claims/test_passes_tpu/), replayed from that recording anywhere else,
where every figure below is recomputed from the recorded files and nothing is compiled.

Bytes are the TPU's: every array at its tiled size (``f32[]{:T(128)}`` is 512 B), split by
memory space (HBM, and VMEM for arrays a layout marks ``S(1)``), by the rules of
``pytest_dumpref/xla/tpu/counting.py``, which give the TPU's own "bytes accessed" exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

from pytest_dumpref.examples import transformer_block, transformer_params
from pytest_dumpref.xla import plain_jax
from pytest_dumpref.xla.dump import DumpSession
from pytest_dumpref.xla.passes import tour
from pytest_dumpref.xla.plain_jax import PARAMS_SEED, PROVENANCE, X_SEED, B, D, F, H, S
from pytest_dumpref.xla.traffic import module_traffic, xla_float32_total

pytestmark = [pytest.mark.passes, pytest.mark.platform("tpu")]

METHOD = (f"XLA every-pass dump (xla_dump_hlo_pass_re=.*) of the forward pass "
          f"transformer_block(x, params, n_heads={H}) compiled for the TPU (jax's default backend a "
          f"TPU v5e), recorded on the chip and replayed elsewhere; bytes at tiled sizes by memory "
          f"space (pytest_dumpref/xla/tpu/counting.py), checked against the TPU's own cost analysis; "
          f"passes ranked by the tour's score (python -m pytest_dumpref tour)")


def block_inputs_for_the_default_backend() -> tuple:
    """Study 1's (x, params), as numpy arrays: jit places them on jax's default backend."""
    x = np.random.default_rng(X_SEED).standard_normal((B, S, D)).astype(np.float32)
    return x, transformer_params(D, F, seed=PARAMS_SEED)


@pytest.mark.claim(
    "Compiled for a TPU v5e, the block is changed most by tpu_fusion, and among its ten passes by "
    "others XLA:CPU's pipeline never runs on it (the TPU's broadcast rewriter, its flash-attention "
    "rewrite); its optimized "
    "program reads and writes under half the HBM bytes the traced one would, and the TPU's own cost "
    "analysis counts the same bytes as the tiled rules.",
    title="The same block on a TPU", section="passes",
    finding="the traced program's {kernels traced} kernels become {kernels optimized}, with {HBM bytes optimized} through HBM")
@pytest.mark.provenance(**PROVENANCE, method=METHOD, chip="TPU v5 lite")
def test_the_block_on_a_tpu_pass_by_pass(dump, evidence, tmp_path):
    x, params = block_inputs_for_the_default_backend()
    d = dump(transformer_block, x, params, H)
    d.check_complete()
    (m,) = tour(d.folder, top=10, xla=False)["modules"]
    evidence.number("snapshots", len(d.snapshots))
    evidence.number("kernels traced", m["input"]["kernels"])
    evidence.number("kernels optimized", m["optimized"]["kernels"])
    rows = [{"rank": p["rank"], "pass": p["pass"], "pipeline": p["pipeline"] or "-",
             "step": "-" if p["step"] is None else f"{p['step']:04d}", "score": round(p["score"], 3),
             "kernels": f"{p['kernels']['before']} -> {p['kernels']['after']}",
             "bytes read": f"{p['bytes_read']['before']:,} -> {p['bytes_read']['after']:,}",
             "bytes written": f"{p['bytes_written']['before']:,} -> {p['bytes_written']['after']:,}"}
            for p in m["passes"]]
    evidence.table("the ten steps that changed the TPU compile most (the tour's score; tiled bytes)", rows)
    top = m["passes"][0]
    evidence.excerpt(f"before {top['pass']} (step {top['step']:04d})", top["excerpt"]["before"], lang="hlo", fold=True)
    evidence.excerpt(f"after {top['pass']} (step {top['step']:04d})", top["excerpt"]["after"], lang="hlo", fold=True)

    before, after = module_traffic(d.before_optimizations), d.traffic_report
    evidence.number("HBM bytes optimized", after.hbm_bytes, unit="B")
    spaces = after.bytes_by_memory_space()
    evidence.table("the optimized program's bytes by memory space (read and written by its kernels)",
                   [{"memory": space, "read": f"{r:,}", "written": f"{w:,}"} for space, (r, w) in spaces.items()])
    # the traced program has no layouts yet: every array is where XLA puts it by default, HBM
    traced_bytes = before.bytes_accessed
    evidence.number("bytes traced (untiled, all in HBM)", traced_bytes, unit="B")
    assert top["pass"] == "tpu_fusion"
    # The same program compiled for XLA:CPU here, live on any machine (it is Study 1's own
    # compile): which of the TPU's ten passes its pipeline never runs.
    cpu = DumpSession(tmp_path / "cpu").dump(transformer_block, *plain_jax.block_inputs(), H)
    cpu_passes = cpu.passes_seen()
    tpu_only = [p["pass"] for p in m["passes"] if p["step"] is not None and p["pass"] not in cpu_passes]
    evidence.table("the TPU's ten passes that XLA:CPU's every-pass dump of the same program never names",
                   [{"pass": p, "its rank on the TPU": next(x["rank"] for x in m["passes"] if x["pass"] == p)}
                    for p in dict.fromkeys(tpu_only)])
    assert {"tpu_fusion", "tpu-broadcast-rewriter", "flash_attention"} <= set(tpu_only)
    assert "fusion" in cpu_passes and "layout-assignment" in cpu_passes
    assert after.hbm_bytes < traced_bytes / 2
    assert m["optimized"]["kernels"] < m["input"]["kernels"] / 2
    cost = d.compiled.cost_analysis()["bytes accessed"]
    evidence.number("bytes accessed, the TPU's cost analysis", cost, unit="B")
    assert xla_float32_total(d.optimized) == cost
