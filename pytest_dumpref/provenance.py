"""What ran where: the core's part of it (Python, the OS, the processor and its caches, the
commit), with no compiler.

Captured, never typed.  What a compiler knows (its platform, the chip behind a backend, its
versions and flags) comes from the plugins implementing :mod:`pytest_dumpref.hookspec`: the
jax one is :mod:`pytest_dumpref.jax_fixtures`.  Without one, the chip is the processor's model
name.
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import time
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


# The core's rows of the environment table: (name, rule, rank), as the hook
# pytest_dumpref_environment_fields gives an extension's.
CORE_FIELDS = [("python", "machine", 50), ("os", "machine", 60), ("cpu_count", "machine", 70),
               ("caches", "machine", 80), ("call_timer", "machine", 90), ("commit", "varies", 100),
               ("dirty", "varies", 110)]


# A timed call is the process's CPU time where that clock can time one: on Linux it steps by
# about a microsecond (a read is a system call: 1.0-1.2 us on the AMD EPYC of these sessions).
# gVisor (runsc, the sandbox of a TPU host) advances it in 10 ms ticks and reports a
# resolution of 1 ns: every call under 10 ms then read 0 us, and a claim failed with "the
# streaming kernel (0.0 us) was not slower than the dispatch kernel (0.0 us)".  Where it steps
# by more than this, calls are timed by the wall clock (time.perf_counter_ns), whose step
# there is 0.4 us.
CPU_CLOCK_MAX_STEP_NS = 10_000


def cpu_clock_step_ns(clock=time.process_time_ns, spin_s: float = 0.05, steps: int = 16) -> int:
    """The smallest step of ``clock`` (the process's CPU clock) seen while spinning until it
    has stepped ``steps`` times or ``spin_s`` seconds of wall time have passed; a clock that
    never stepped gives the time spun (its step is at least that).  Measured, because the
    resolution the system reports is not the step (gVisor reports 1 ns and steps 10 ms)."""
    seen: list[int] = []
    last = clock()
    t0 = elapsed = time.perf_counter_ns()
    while len(seen) < steps and elapsed - t0 <= spin_s * 1e9:
        now = clock()
        if now != last:
            seen.append(now - last)
            last = now
        elapsed = time.perf_counter_ns()
    return min(seen) if seen else elapsed - t0


def call_timer(step_ns: int) -> str:
    """What times a call, for a process CPU clock stepping ``step_ns``: the CPU time where that
    clock can time one (CPU_CLOCK_MAX_STEP_NS), else the wall clock."""
    return "process CPU time" if step_ns <= CPU_CLOCK_MAX_STEP_NS else "wall clock"


def call_timer_text(step_ns: int) -> str:
    """The environment's row: what times a call, and why.  The same text on the same machine
    (a machine row that differs says the machine differs): a step under the bound is not given,
    since it wobbles from run to run (1.0-1.2 us here); a coarse one is a tick, and is."""
    if call_timer(step_ns) == "process CPU time":
        return f"process CPU time (its clock steps under {CPU_CLOCK_MAX_STEP_NS // 1000} us)"
    return f"wall clock (the process CPU clock steps {step_ns / 1000:,.0f} us)"


def schedulable_cpus() -> int:
    """The CPUs this process may run on (its affinity), not the machine's: XLA:CPU sizes its
    parallel task assigner by them (tsl::port::NumSchedulableCPUs), so the same program
    dumped under ``taskset -c 1`` on a two-core machine goes through one pass snapshot fewer
    (cpu-parallel-task-assigner changes nothing) than with both cores."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):          # no affinity on this platform
        return os.cpu_count() or 1


def environment(root: Path, ignore: tuple[str, ...] = ()) -> dict:
    """The core's rows of the run's environment (the write-up's table, every claim's provenance)."""
    env = {
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "cpu_count": schedulable_cpus(),
        "caches": caches_text(0),
        "call_timer": call_timer_text(cpu_clock_step_ns()),
    }
    env.update(git_state(root, ignore))
    return env
