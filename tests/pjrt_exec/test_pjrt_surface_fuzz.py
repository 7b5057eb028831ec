"""The PJRT surface, fuzzed (pjrt_surface_fuzz.py): every bad argument a PJRT_Error, never a
crash; in-process on the plain build, then in a subprocess under AddressSanitizer + UBSan.
Fixed seeds and counts: every machine tries the same calls."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pjrt_surface_fuzz as sf
from pytest_dumpref.pjrt.build import BuildError, build_plugin, find_compiler

SEEDS = [(1, 400), (2, 400), (3, 400)]


@pytest.mark.parametrize("seed,count", SEEDS)
def test_surface_fuzz(_pjrt_built, seed, count):
    counts = sf.fuzz(_pjrt_built.path, seed, count)
    assert counts["error"] > count // 4, counts  # the bad arguments reach the refusals
    assert counts["ok"] > count, counts          # ...and good ones still work


def _libasan():
    try:
        out = subprocess.run([*find_compiler().split(), "-print-file-name=libasan.so"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (BuildError, subprocess.CalledProcessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def test_surface_fuzz_under_asan_and_ubsan(tmp_path):
    libasan = _libasan()
    if libasan is None:
        pytest.skip("the compiler has no AddressSanitizer runtime (libasan.so)")
    built = build_plugin(tmp_path, sanitize=True)
    env = dict(os.environ, LD_PRELOAD=libasan,
               # allocator_may_return_null: a huge buffer's malloc must fail as it would unsanitized,
               # for the plugin to answer RESOURCE_EXHAUSTED, instead of ASan aborting
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:verify_asan_link_order=0:"
                            "allocator_may_return_null=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    for seed, count in SEEDS:
        done = subprocess.run([sys.executable, str(Path(sf.__file__)), str(built.path), str(seed),
                               str(count)], capture_output=True, text=True, env=env, timeout=300)
        report = done.stdout[-3000:] + done.stderr[-5000:]
        # (this fuzz found buffer.c's dense_strides multiplying the dims of a zero-element
        # buffer with a huge dimension, [0, 2**63-1], in int64: signed overflow; now unsigned)
        # ASan's "failed to allocate" WARNINGs are the huge mallocs failing as they should
        # (allocator_may_return_null): the plugin answers RESOURCE_EXHAUSTED; errors are ERRORs
        assert "ERROR: AddressSanitizer" not in report and "runtime error:" not in report, report
        assert done.returncode == 0, report
