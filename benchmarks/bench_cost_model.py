"""What the kernel cost model (xla/cpu/cost_model.py) costs to calibrate and to use.

- Calibration: ``calibrate.calibrate()`` at its defaults (10 interleaved rounds of 5 calls of
  every micro-kernel in timing.py's pinned worker, compiles included).  Goal (issue 18):
  under 30 s.
- Prediction: the optimized module of the every-pass dump that ``bench_dump_analysis.py``
  analyses (``examples.block_stack`` forward and backward, 1, 4 and 16 layers), with its
  buffer assignment: ``cost_model.analyse`` (kernels, operation counts, reuse distances) and
  ``predict`` at the calibrated rates.  Goal: a small share of that dump's pass analysis,
  which is timed here too.  A module with operations the model has no rate for is refused;
  the benchmark then records which (``refused``), and times the analysis alone.

Run: ``pytest benchmarks/bench_cost_model.py --benchmark-only``.  A smoke run
(``--benchmark-disable``) calibrates with 2 rounds and skips the 16-layer size.
"""
from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from pytest_dumpref.examples import block_stack, transformer_params
from pytest_dumpref.xla import hlo
from pytest_dumpref.xla.cpu import calibrate, cost_model
from pytest_dumpref.xla.dump import DumpSession
from pytest_dumpref.xla.passes import pass_changes

D_MODEL, D_FF, HEADS = 64, 256, 4


def forward_backward(x, layers):
    return jax.grad(lambda x, layers: jnp.sum(block_stack(x, layers, HEADS)), argnums=(0, 1))(x, layers)


@pytest.fixture(scope="module")
def rates(request):
    smoke = request.config.getoption("benchmark_disable", False)
    r, _, seconds = calibrate.calibrate(rounds=2 if smoke else 10)
    r.machine["calibration_s"] = seconds
    return r


def test_calibration(benchmark, rates):
    timed = []

    def run():
        t0 = time.perf_counter()
        r, checks, _ = calibrate.calibrate(rounds=2 if benchmark.disabled else 10)
        timed.append(time.perf_counter() - t0)
        return r, checks

    r, checks = benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    seconds = timed[-1]
    # every class measured, or left out with why where this XLA compiles its kernel otherwise
    assert set(r.compute) | set(r.unmeasured) == set(cost_model.OP_CLASSES)
    benchmark.extra_info.update({
        "calibration_s": round(seconds, 2), "goal_under_30_s": seconds < 30,
        "load_average": list(r.machine.get("load average", [])),
        "checks_measured_over_predicted": [c["measured/predicted"] for c in checks],
    })
    assert seconds < 60, f"calibration took {seconds:.1f} s"


@pytest.mark.parametrize("n_layers", [1, 4, 16])
def test_prediction_of_an_every_pass_dump(benchmark, tmp_path: Path, rates, n_layers):
    if benchmark.disabled and n_layers == 16:
        pytest.skip("the 16-layer dump is only made when benchmarks are measured")
    layers = [transformer_params(D_MODEL, D_FF, seed=i) for i in range(n_layers)]
    x = jnp.linspace(-1, 1, 2 * 32 * D_MODEL, dtype=jnp.float32).reshape(2, 32, D_MODEL)
    d = DumpSession(tmp_path).dump(forward_backward, x, layers)
    text, ba = d.optimized_text, d.buffer_assignment
    mb = sum(p.stat().st_size for p in tmp_path.rglob("*.txt")) / 1e6

    hlo.clear_cache()
    t0 = time.perf_counter()
    pass_changes(d)
    pass_analysis_s = time.perf_counter() - t0

    timed, refused = [], []

    def predict():
        hlo.clear_cache()
        t0 = time.perf_counter()
        program = cost_model.analyse(text, ba)
        if program.refused:
            refused[:] = program.refused
            out = None
        else:
            out = cost_model.predict(program, rates)
        timed.append(time.perf_counter() - t0)
        return program, out

    program, prediction = benchmark.pedantic(predict, rounds=3, iterations=1, warmup_rounds=0)
    seconds = min(timed)
    assert program.kernels
    benchmark.extra_info.update({
        "layers": n_layers, "dump_mb": round(mb, 1), "kernels": len(program.kernels),
        "prediction_s": round(seconds, 4), "pass_analysis_s": round(pass_analysis_s, 3),
        "share_of_pass_analysis": round(seconds / pass_analysis_s, 4),
        "refused": refused[:5], "predicted_us": None if prediction is None else round(prediction.total_s * 1e6, 1),
    })
    assert seconds < pass_analysis_s, (seconds, pass_analysis_s)
