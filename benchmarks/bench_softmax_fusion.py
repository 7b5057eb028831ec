"""softmax f32[1024,1024] with XLA's fusion pass on and off, side by side in pytest-benchmark.

The fusion study's own times (the numbers in writeup.md) come from timing.py's pinned,
interleaved subprocess with an A/A control: pytest-benchmark times one function per test, so
it can neither interleave variants nor pin threads in a process whose jax is already running.
This pair exists for the side-by-side view against a saved run:

    python -m pytest benchmarks/bench_softmax_fusion.py --benchmark-autosave
    python -m pytest benchmarks/bench_softmax_fusion.py --benchmark-compare

Each variant is compiled single-partition (cpu-parallel-task-assigner off) with Eigen
single-threaded, the nearest in-process match to the claim's pinned subprocess.
"""
from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from pytest_dumpref.examples import softmax

X_SHAPE = (1024, 1024)
BENCH_OPTIONS = {"xla_cpu_multi_thread_eigen": False, "xla_disable_hlo_passes": "cpu-parallel-task-assigner"}


@pytest.mark.parametrize("variant", ["fused", "unfused"])
def test_benchmark_softmax_fusion(benchmark, variant):
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(np.random.default_rng(0).standard_normal(X_SHAPE).astype(np.float32), cpu)
    options = dict(BENCH_OPTIONS)
    if variant == "unfused":
        options["xla_disable_hlo_passes"] += ",fusion"
    compiled = jax.jit(softmax).lower(x).compile(compiler_options=options)
    benchmark.group = "softmax f32[1024,1024]: fusion pass on/off"
    benchmark.extra_info.update(variant=variant, options=options,
                                bytes_accessed=compiled.cost_analysis()["bytes accessed"])
    out = benchmark.pedantic(lambda: compiled(x).block_until_ready(), rounds=50, iterations=5,
                             warmup_rounds=5)
    assert out.shape == X_SHAPE and math.isclose(float(out.sum()), X_SHAPE[0], rel_tol=1e-3)
