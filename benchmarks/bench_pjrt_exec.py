"""Level 3 speed: jitted programs on the dumpref device (the C interpreter of plugin_c/prog*.c)
against jax's CPU backend and numpy, ratios measured in one run.

- dispatch: a tiny jitted op (f32 scalar + 1), dumpref against jax's CPU backend;
- elementwise: x + 1 over 1M f32, dumpref against numpy (goal: at least half numpy's
  throughput, i.e. ratio numpy_time / dumpref_time >= 0.5);
- matmul: f32[n,n] @ f32[n,n] at n = 256 and 1024, dumpref (plugin_c/prog_ops_matmul.c, a
  packed GEMM in plain C) against numpy's BLAS on one thread, measured in a fresh process
  with every BLAS thread count at 1; both pinned to one core, CPU times compared (goal:
  numpy_time / dumpref_time >= 0.7).

pytest-benchmark times the dumpref side; the comparison is timed in the same process,
interleaved with dumpref calls (median of rounds), and lands in extra_info with the ratio.
The plugin is the one jax's `jax_plugins` entry point registers (built from plugin_c/).
Run: ``pytest benchmarks/bench_pjrt_exec.py --benchmark-only``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
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


NUMPY_MATMUL = r'''
import json, statistics, sys, time
import numpy as np
n, rounds = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(1)
a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
a @ b
cpu, wall = [], []
for _ in range(rounds):
    c0, w0 = time.process_time(), time.perf_counter()
    a @ b
    cpu.append(time.process_time() - c0)
    wall.append(time.perf_counter() - w0)
print(json.dumps({"cpu_ms": statistics.median(cpu) * 1e3, "wall_ms": statistics.median(wall) * 1e3}))
'''

#: every threading knob numpy's BLAS may read (OpenBLAS, MKL, OpenMP, BLIS)
ONE_THREAD = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


def numpy_single_threaded(n: int, rounds: int, core: int) -> dict:
    """numpy's a @ b in a fresh process with its BLAS on one thread, pinned to `core` (the
    BLAS reads the thread counts when it loads, so this process's numpy cannot be changed)."""
    done = subprocess.run([sys.executable, "-c", NUMPY_MATMUL, str(n), str(rounds)],
                          env=dict(os.environ, **ONE_THREAD), capture_output=True, text=True,
                          timeout=600, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("n", [256, 1024])
def test_matmul_f32_vs_single_threaded_numpy(benchmark, device, n):
    """f32[n,n] @ f32[n,n], the device (one thread: the interpreter's) against numpy's BLAS on
    one thread, both pinned to one core; the ratio is of CPU times per product (goal: numpy's
    time / dumpref's >= 0.7)."""
    rounds = 30 if n == 256 else 8
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    f = jax.jit(jnp.matmul)
    ad, bd = jax.device_put(a, device), jax.device_put(b, device)
    run_dumpref = lambda: f(ad, bd).block_until_ready()  # noqa: E731
    core = max(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        run_dumpref()
        cpu, wall = [], []
        for _ in range(rounds):
            c0, w0 = time.process_time(), time.perf_counter()
            run_dumpref()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        numpy = numpy_single_threaded(n, rounds, core)
        dumpref = {"cpu_ms": statistics.median(cpu) * 1e3, "wall_ms": statistics.median(wall) * 1e3}
        ratio = numpy["cpu_ms"] / dumpref["cpu_ms"]
        benchmark.extra_info.update(n=n, core=core, dumpref=dumpref, numpy_single_threaded=numpy,
                                    throughput_vs_numpy=ratio, goal=0.7, meets_goal=ratio >= 0.7,
                                    dumpref_gflops=2 * n ** 3 / (dumpref["cpu_ms"] * 1e-3) / 1e9)
        benchmark.pedantic(run_dumpref, rounds=5, iterations=1)
    finally:
        os.sched_setaffinity(0, before)
    print(f"\nmatmul {n}: dumpref {dumpref['cpu_ms']:.3f} ms, numpy single-threaded "
          f"{numpy['cpu_ms']:.3f} ms (CPU time): numpy/dumpref {ratio:.2f}")
    got = np.asarray(f(ad, bd))
    assert np.max(np.abs(got - a @ b)) <= 1e-4 * np.max(np.abs(a @ b))
