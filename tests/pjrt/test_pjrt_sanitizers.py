"""The C sources under AddressSanitizer and UndefinedBehaviorSanitizer.

The cffi tests run again, in a subprocess, against a sanitized build.  Python itself is not
instrumented, so the ASan runtime is preloaded; leak detection is off because the interpreter
keeps memory until exit (our own leaks are measured by the device's memory counters instead).
Any ASan report or UB finding aborts the subprocess, which fails this test.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dumpref.pjrt.build import BuildError, build_plugin, find_compiler

CFFI_TESTS = Path(__file__).with_name("test_pjrt_cffi.py")


def _runtime(name: str) -> str | None:
    try:
        out = subprocess.run([*find_compiler().split(), f"-print-file-name={name}"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (BuildError, subprocess.CalledProcessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def test_cffi_tests_pass_under_asan_and_ubsan(tmp_path):
    libasan = _runtime("libasan.so")
    if libasan is None:
        pytest.skip("the compiler has no AddressSanitizer runtime (libasan.so)")
    built = build_plugin(tmp_path, sanitize=True)
    env = dict(os.environ,
               DUMPREF_PJRT_TEST_LIBRARY=str(built.path),
               LD_PRELOAD=libasan,
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:verify_asan_link_order=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    # --noconftest: tests/conftest.py imports jax, which the cffi tests do not need, and
    # jaxlib 0.12's extension trips a CHECK of GCC's AddressSanitizer runtime when it throws
    # its first C++ exception (in __cxa_throw's interceptor): the process aborts on import
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--noconftest", str(CFFI_TESTS)],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert "AddressSanitizer" not in report and "runtime error:" not in report, report
    assert done.returncode == 0, report
    assert " passed" in done.stdout
