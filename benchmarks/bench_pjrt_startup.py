"""Start-up of ``jax.devices("dumpref")`` against ``jax.devices("cpu")``, side by side.

Each sample is a fresh Python (a backend initialises once per process), with only the
platform under test enabled (JAX_PLATFORMS), so neither pays for the other.  The benchmark
times the whole process (interpreter + ``import jax`` + the devices() call); extra_info keeps
the devices() call alone, timed inside the process.  Run:
    pytest benchmarks/bench_pjrt_startup.py --benchmark-group-by=group
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest

SNIPPET = ("import time\nt0 = time.perf_counter()\nimport jax\nt1 = time.perf_counter()\n"
           "d = jax.devices({platform!r})\nt2 = time.perf_counter()\n"
           "assert d and d[0].platform == {platform!r}\nprint(t1 - t0, t2 - t1)\n")


@pytest.mark.parametrize("platform", ["cpu", "dumpref"])
def test_devices_startup(benchmark, _pjrt_built, platform):
    env = dict(os.environ, JAX_PLATFORMS=platform, DUMPREF_PJRT_LIBRARY=str(_pjrt_built.path))
    env.pop("DUMPREF_PJRT_TRACE", None)
    inside = []

    def start():
        out = subprocess.run([sys.executable, "-c", SNIPPET.format(platform=platform)], env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        inside.append((float(out[0]), float(out[1])))

    benchmark.group = "jax.devices() start-up"
    benchmark.pedantic(start, rounds=7, warmup_rounds=1)
    benchmark.extra_info["import_jax_median_s"] = statistics.median(i for i, _ in inside)
    benchmark.extra_info["devices_call_median_s"] = statistics.median(d for _, d in inside)
