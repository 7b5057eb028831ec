"""What ran where: chip, backend, versions, XLA flags, commit.

Captured, never typed: the chip is read from the device the evidence came from (on CPU,
the processor's model name, since jax calls every CPU just "cpu").
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path


@functools.lru_cache(maxsize=None)
def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@functools.lru_cache(maxsize=None)
def observed_chip(backend: str | None = None) -> str:
    """The chip behind ``backend`` (JAX's default backend when None)."""
    import jax

    name = backend or jax.default_backend()
    if name == "cpu":
        return cpu_model_name()
    try:
        return str(jax.devices(name)[0].device_kind)
    except RuntimeError as e:  # backend not available in this process
        return f"unavailable ({name}: {e})"


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(root: Path, ignore: tuple[str, ...] = ()) -> dict:
    """Commit and dirty flag.  ``ignore`` are paths (the write-up being written) that do
    not count as dirt, so rendering the write-up twice gives the same text."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    excludes = [f":(exclude){p}" for p in ignore]
    status = _git(root, "status", "--porcelain", "--", ".", *excludes) or ""
    return {"commit": commit, "dirty": bool(status)}


@functools.lru_cache(maxsize=None)
def _versions() -> dict:
    import jax
    import jaxlib
    import numpy   # the claims' inputs are numpy arrays: its generators and printing are numpy's

    return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", jaxlib.version.__version__),
            "numpy": numpy.__version__}


def cpu_caches(cpu: int) -> list:
    """The data caches of ``cpu`` as Linux reports them (sysfs): level, size in bytes and the
    CPUs sharing each; empty where sysfs does not say.  Tells a reader at which level of the
    memory hierarchy a measured "bandwidth" lives."""
    out = []
    for d in sorted(Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*")):
        try:
            kind = (d / "type").read_text().strip()
            if kind == "Instruction":
                continue
            size = (d / "size").read_text().strip()
            scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
            out.append({"level": int((d / "level").read_text()), "type": kind,
                        "bytes": int(size.rstrip("KMG")) * scale,
                        "shared with CPUs": (d / "shared_cpu_list").read_text().strip()})
        except (OSError, ValueError):
            continue
    return out


def caches_text(cpu: int = 0) -> str:
    """The data caches of ``cpu`` in one line, ``L1d 32 KiB, L2 1 MiB, L3 32 MiB``: a fact of
    the machine (a timing depends on it), shown with the environment and never compared as
    a claim's evidence."""
    def size(n: int) -> str:
        return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n // 1024} KiB"
    parts = [f"L{c['level']}{'d' if c['type'] == 'Data' else ''} {size(c['bytes'])}" for c in cpu_caches(cpu)]
    return ", ".join(parts) or "(not reported)"


def environment(root: Path, ignore: tuple[str, ...] = ()) -> dict:
    """The run's environment, for the write-up's table and every claim's provenance."""
    import jax

    env = {
        "platform": jax.default_backend(),
        "chip": observed_chip(None),
        **_versions(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "cpu_count": os.cpu_count(),
        "caches": caches_text(0),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
    }
    env.update(git_state(root, ignore))
    return env


def benchmark_machine_info() -> dict:
    """What pytest-benchmark's machine_info gains (pytest_benchmark_update_machine_info)."""
    import jax

    return {"dumpref": {"chip": observed_chip(None), "platform": jax.default_backend(),
                        **_versions(), "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
                        "python_executable": sys.executable}}
