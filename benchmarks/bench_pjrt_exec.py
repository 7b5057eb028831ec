"""Level 3 speed: jitted programs on the dumpref device (the C interpreter of plugin_c/prog*.c)
against jax's CPU backend and numpy, ratios measured in one run.

- dispatch: a tiny jitted op (f32 scalar + 1), dumpref against jax's CPU backend;
- elementwise: x + 1 over 1M f32, dumpref against numpy (goal: at least half numpy's
  throughput, i.e. ratio numpy_time / dumpref_time >= 0.5);
- matmul: f32[256,256] @ f32[256,256], dumpref against numpy (reported, no goal: a
  cache-blocked C loop, plugin_c/prog_ops_matmul.c, against a tuned BLAS).  The interpreter
  runs on one thread; for a like-for-like ratio run with OPENBLAS_NUM_THREADS=1 (on shared
  cores a threaded BLAS fights the other processes and its time swings by 10x).

pytest-benchmark times the dumpref side; the comparison is timed in the same process,
interleaved with dumpref calls (median of rounds), and lands in extra_info with the ratio.
The plugin is the one jax's `jax_plugins` entry point registers (built from plugin_c/).
Run: ``pytest benchmarks/bench_pjrt_exec.py --benchmark-only``.
"""
from __future__ import annotations

import os
import statistics
import time

# The device is opt-in (pytest_dumpref/pjrt/jax_plugin.py); ask for it before jax first looks
# for backends, which happens after collection.
os.environ.setdefault("DUMPREF_PJRT", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(scope="module")
def device():
    try:
        return jax.devices("dumpref")[0]
    except RuntimeError as exc:  # the entry point could not build/register the plugin
        pytest.skip(f"dumpref device unavailable: {exc}")


def interleaved(fns: dict, rounds: int) -> dict:
    """Median seconds of each callable, calls alternating so drift hits all alike."""
    for fn in fns.values():
        fn()  # warm-up (compile, first-touch)
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def test_dispatch_tiny_op(benchmark, device):
    f = jax.jit(lambda x: x + 1)
    on_dumpref = jax.device_put(np.float32(1), device)
    on_cpu = jax.device_put(np.float32(1), jax.devices("cpu")[0])
    run_dumpref = lambda: f(on_dumpref).block_until_ready()  # noqa: E731
    t = interleaved({"dumpref": run_dumpref, "cpu": lambda: f(on_cpu).block_until_ready()}, 2000)
    benchmark.extra_info.update(dumpref_us=t["dumpref"] * 1e6, jax_cpu_us=t["cpu"] * 1e6,
                                dumpref_over_cpu=t["dumpref"] / t["cpu"])
    benchmark(run_dumpref)
    assert float(f(on_dumpref)) == 2.0


def test_elementwise_1m_f32(benchmark, device):
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    f = jax.jit(lambda x: x + 1)
    xd = jax.device_put(x, device)
    run_dumpref = lambda: f(xd).block_until_ready()  # noqa: E731
    t = interleaved({"dumpref": run_dumpref, "numpy": lambda: x + 1}, 60)
    ratio = t["numpy"] / t["dumpref"]
    benchmark.extra_info.update(dumpref_ms=t["dumpref"] * 1e3, numpy_ms=t["numpy"] * 1e3,
                                throughput_vs_numpy=ratio, goal=0.5, meets_goal=ratio >= 0.5,
                                dumpref_gb_per_s=2 * x.nbytes / t["dumpref"] / 1e9)
    benchmark(run_dumpref)
    np.testing.assert_array_equal(np.asarray(f(xd)), x + 1)


def test_matmul_256_f32(benchmark, device):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    f = jax.jit(jnp.matmul)
    ad, bd = jax.device_put(a, device), jax.device_put(b, device)
    run_dumpref = lambda: f(ad, bd).block_until_ready()  # noqa: E731
    t = interleaved({"dumpref": run_dumpref, "numpy": lambda: a @ b}, 15)
    benchmark.extra_info.update(dumpref_ms=t["dumpref"] * 1e3, numpy_ms=t["numpy"] * 1e3,
                                throughput_vs_numpy=t["numpy"] / t["dumpref"],
                                dumpref_gflops=2 * 256 ** 3 / t["dumpref"] / 1e9,
                                openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"))
    benchmark.pedantic(run_dumpref, rounds=10, iterations=1)
    got = np.asarray(f(ad, bd))
    assert np.max(np.abs(got - a @ b)) <= 1e-4 * np.max(np.abs(a @ b))
