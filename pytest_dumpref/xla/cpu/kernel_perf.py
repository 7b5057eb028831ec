"""Each kernel's time in a running XLA:CPU program, from Linux ``perf`` samples.

A program's time says by how much the cost model missed, not where.  This module says where:
it runs the program as ``timing`` runs it (a subprocess pinned to one CPU, single-threaded
XLA, one malloc arena) and samples it with ``perf record -e cpu-clock``, so that each kernel's
share of the program's time is read from where the CPU was, kernel by kernel.

* **Names of the loop kernels.**  XLA:CPU compiles its loop kernels at run time with LLVM, so
  ``perf`` sees anonymous JIT code.  LLVM registers every object it loads with the GDB JIT
  interface (``__jit_debug_descriptor``, a symbol of ``libjax_common.so``'s symbol table, not
  exported); the worker reads those in-memory ELF objects, whose sections carry their load
  addresses, and writes their functions to ``/tmp/perf-PID.map``, the file ``perf`` reads the
  names of JIT code from.  A function is named after its kernel (``wrapped_multiply``,
  ``broadcast_multiply_fusion``); kernels XLA emitted once for several identical fusions share
  one function, so :func:`by_kernel` groups the loop kernels by name without their ``.N``.
* **Library kernels** (YNNPACK's, through slinky) are named by their primitives
  (``ynn::exp_fp32...``), shared between kernels; they are summed as the library's time.
* **Which calls.**  A machine shared with other tenants runs a program's calls at several
  speeds (the timing worker's docstring: stretches of milliseconds to hundreds); the timing
  method takes each round's fastest call.  Here each call's start and end (CLOCK_MONOTONIC,
  the clock ``perf record -k CLOCK_MONOTONIC`` stamps its samples with) and its CPU time are
  logged, and the samples of the calls of the fastest stretches are kept: those whose
  *neighbours* took the least CPU time.  Not the calls fastest by their own time: a sample
  costs the call it lands in some microseconds, so those are the calls with the fewest
  samples, and the kernels that run last came out short (the softmax's row sum at 8 us a call where it runs 60).
* **What a sample costs.**  At 4 kHz the sampled time per call came out 1-4 % above the calls'
  CPU time (the interrupts'), spread over the kernels.  Beside two CPU burners, one on the
  profiled core, the unfused softmax's kernels came out near a quiet profile's: its
  multiply 160 us against 158, its broadcast 78 against 61, its library kernels 615
  against 576.

* **A whole timing run** (:func:`profile_run`): timing's own worker, run under ``perf
  record`` through this module's entry point, names its kernels once compiled and logs each
  timed call; each variant's measured time is spread over its kernels by their samples.  A
  profile taken apart from the rates compares a kernel with rates of another minute: on an
  AMD EPYC the stream's cost at 24 MiB was 33.9 ps a byte in a calibration and 21.3 in a run
  five minutes later, and the same kernels came out at 0.7 of their price against the one
  and 1.2-1.9 against the other.  In the run itself both are measured in the same rounds.
* **Outside the kernels** is what a call runs besides XLA's and the library's kernels: the
  runtime, the allocator, Python, the system's interrupts.  It grows with the call's time, as
  the calibration kernels show (in one run the stream over 16 rows spent 19 us a call outside
  its kernel, over 4,096 rows 100 us: about a tenth of a kernel bound by memory, 3-5 % of one
  bound by compute), so the model's rates, measured on whole calls, carry that share inside
  every kernel's price, and a profile sets it apart.

Measured on an AMD EPYC (32 MiB L3; 2026-12-06): the sampled time of a call agreed with its
CPU time to 0.1 % over all calls (19,878 samples against 19,902 expected).  Nothing here
imports pytest; ``perf`` must be installed and allowed (``perf_event_paranoid`` at most 2
for one's own processes).
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ... import timing

FREQUENCY = 4000          # samples a second of CPU time
SHARE = 0.2               # the share of calls kept: those of the fastest stretches
NEIGHBOURS = 3            # on each side: a call's stretch is the median of their times
LIBRARY = ("ynn::", "ynn_", "slinky::", "xnn", "std::_Function_handler<long (slinky")
# against_model's rows beside the loop kernels' groups
LIBRARY_KERNELS, OUTSIDE = "library kernels", "outside the kernels"


class PerfError(RuntimeError):
    """perf is missing or refused, or the profiled program failed; the message says which."""


# ---- the names of XLA:CPU's JIT code (in the profiled process) --------------------------------

def _sections(read, head: bytes) -> list:
    """(type, address, offset, size, link, entsize) of each section of an ELF64 image."""
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        raise PerfError("not a 64-bit little-endian ELF image")
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", head, 0x3A)
    out = []
    for i in range(shnum):
        _, typ, _, addr, offset, size, link, _, _, entsize = struct.unpack(
            "<IIQQQQIIQQ", read(shoff + i * shentsize, shentsize))
        out.append((typ, addr, offset, size, link, entsize))
    return out


def object_functions(data: bytes) -> list:
    """(name, address, size) of the defined functions of a relocatable ELF64 object whose
    sections carry their load addresses (an object LLVM loaded, as its GDB JIT interface
    holds it): a symbol's address is its section's address plus its value."""
    secs = _sections(lambda o, k: data[o:o + k], data[:64])
    out = []
    for typ, _, offset, size, link, entsize in secs:
        if typ != 2 or not entsize:              # SHT_SYMTAB
            continue
        strtab = data[secs[link][2]:secs[link][2] + secs[link][3]]
        for j in range(size // entsize):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, offset + j * entsize)
            if st_info & 0xF != 2 or st_shndx == 0 or st_shndx >= len(secs) or not st_size:   # STT_FUNC
                continue
            name = strtab[st_name:strtab.index(b"\0", st_name)].decode("utf-8", "replace")
            out.append((name, secs[st_shndx][1] + st_value, st_size))
    return out


def symbol_value(path: str, name: str) -> int:
    """The value (address from the load base) of ``name`` in the symbol table (``.symtab``,
    not only the exported ones) of the shared library at ``path``."""
    import numpy as np
    with open(path, "rb") as f:
        def read(offset: int, n: int) -> bytes:
            f.seek(offset)
            return f.read(n)
        secs = _sections(read, read(0, 64))
        for typ, _, offset, size, link, entsize in secs:
            if typ != 2 or entsize != 24:
                continue
            strtab = read(secs[link][2], secs[link][3])
            at = strtab.find(b"\0" + name.encode() + b"\0")
            if at < 0:
                continue
            table = np.frombuffer(read(offset, size), dtype=np.dtype(
                [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]))
            hit = table[(table["name"] == at + 1) & (table["shndx"] != 0)]
            if len(hit):
                return int(hit["value"][0])
    raise PerfError(f"{path} has no {name} in its symbol table (a stripped library?)")


def _library() -> tuple[int, str]:
    """(load address, path) of libjax_common.so in this process."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5].endswith("/libjax_common.so") and int(parts[2], 16) == 0:
            return int(parts[0].split("-")[0], 16), parts[5]
    raise PerfError("libjax_common.so is not loaded: import jax and compile a program first")


def jit_functions() -> list[tuple[str, int, int]]:
    """(name, address, size) of every function of the objects LLVM loaded in this process."""
    base, path = _library()
    descriptor = base + symbol_value(path, "__jit_debug_descriptor")
    # struct jit_descriptor { uint32_t version, action_flag; jit_code_entry *relevant, *first; }
    entry = ctypes.c_uint64.from_address(descriptor + 16).value
    out = []
    while entry:
        # struct jit_code_entry { next, prev; const char *symfile_addr; uint64_t symfile_size; }
        nxt, _, image, size = struct.unpack("<QQQQ", ctypes.string_at(entry, 32))
        out += object_functions(ctypes.string_at(image, size))
        entry = nxt
    return out


def write_perf_map(pid: int | None = None) -> Path:
    """Write ``/tmp/perf-PID.map`` (this process) for ``perf report`` and ``perf script``."""
    path = Path(f"/tmp/perf-{pid or os.getpid()}.map")
    path.write_text("".join(f"{a:x} {s:x} {n}\n" for n, a, s in jit_functions()))
    return path


# ---- the profiled subprocess ------------------------------------------------------------------

def _worker(req: dict) -> int:
    timing._pin(None)                            # before jax exists, as the timing worker does
    import jax
    import numpy as np
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    fn = timing.resolve_program(req["program"])
    rng = np.random.default_rng(req["seed"])
    args = [jax.device_put(timing.fill(rng, d, tuple(s))) for d, s in req["args"]]
    compiled = jax.jit(fn).lower(*args).compile(compiler_options=req["options"] or None)
    for _ in range(req["warmup"]):
        jax.block_until_ready(compiled(*args))
    write_perf_map()
    Path(req["ready"]).write_text("ready")
    while not Path(req["go"]).exists():         # perf is attached
        time.sleep(0.01)
    import gc
    gc.disable()                                 # the log grows; no collection inside a call
    calls = []
    mono, cpu = time.monotonic_ns, time.process_time_ns
    end = mono() + int(req["seconds"] * 1e9)
    while mono() < end:
        a, c = mono(), cpu()
        jax.block_until_ready(compiled(*args))
        calls.append((a, mono(), cpu() - c))
    Path(req["log"]).write_text(json.dumps(calls))
    return 0


# ---- the parent side ---------------------------------------------------------------------------

@dataclass
class KernelProfile:
    """One program's profile: per symbol, microseconds a call (of the kept calls)."""
    program: str
    options: dict
    calls: int                   # calls made while sampled
    kept: int                    # calls of the fastest stretches, whose samples are counted
    call_us: float               # median CPU time of the kept calls (the process's, as timing's)
    symbols: dict = field(default_factory=dict)

    @property
    def sampled_us(self) -> float:
        return sum(self.symbols.values())


def _stem(name: str) -> str:
    return re.sub(r"\.\d+$", "", name)


def by_kernel(profile: KernelProfile, kernel_names) -> dict:
    """``{"loop": {stem: us}, "library": us, "outside": us}``: the profile's loop kernels by
    name without their ``.N`` (identical fusions share one function), the library's
    primitives summed, and the rest (the runtime, the allocator, Python, the samples' own
    cost) outside the kernels.  ``kernel_names``: the optimized program's kernels, so that a
    JIT function that is not one of them (none seen so far) counts outside."""
    stems = {_stem(n) for n in kernel_names}
    loop: dict = {}
    library = outside = 0.0
    for sym, us in profile.symbols.items():
        if sym.startswith(LIBRARY):
            library += us
        elif _stem(sym) in stems:
            loop[_stem(sym)] = loop.get(_stem(sym), 0.0) + us
        else:
            outside += us
    return {"loop": loop, "library": library, "outside": outside}


def against_model(profile: KernelProfile, prediction) -> list[dict]:
    """Rows of the model's price against the profile: one per loop kernel (kernels of one
    name without ``.N`` together, as :func:`by_kernel` groups them), one for the library's
    kernels together, one for what runs outside the kernels (the model: its dispatch).
    ``prediction``: cost_model.predict's, of the same optimized program."""
    measured = by_kernel(profile, [k.name for k in prediction.kernels])
    groups: dict = {}
    library = 0.0
    for k in prediction.kernels:
        if k.kind == "library":
            library += k.seconds * 1e6
            continue
        g = groups.setdefault(_stem(k.name), {"kernels": _stem(k.name), "count": 0, "regimes": set(), "model us": 0.0,
                                              "model us by regime": {}})
        g["count"] += 1
        g["regimes"].add(k.regime)
        g["model us"] += k.seconds * 1e6
        g["model us by regime"][k.regime] = g["model us by regime"].get(k.regime, 0.0) + k.seconds * 1e6
    rows = []
    for stem, g in groups.items():
        rows.append(dict(g, regimes=sorted(g["regimes"]), **{"measured us": measured["loop"].get(stem, 0.0)}))
    rows.sort(key=lambda r: -max(r["model us"], r["measured us"]))
    rows.append({"kernels": LIBRARY_KERNELS, "count": sum(k.kind == "library" for k in prediction.kernels),
                 "regimes": [], "model us": library, "measured us": measured["library"]})
    rows.append({"kernels": OUTSIDE, "count": 0, "regimes": [],
                 "model us": prediction.dispatch_s * 1e6, "measured us": measured["outside"]})
    return rows


def extra_time_miss(fused_rows: list, unfused_rows: list) -> list[dict]:
    """Where the model's miss of a program's extra time lies: for each kernel group of either
    variant (:func:`against_model`'s rows, fused and unfused), its share of the miss, (measured
    - model) unfused less (measured - model) fused, in microseconds, largest first.  The shares
    add up to the miss of the extra time when each profile spreads its variant's measured time
    (``profile_run``'s do).  A group only one variant has is named with that variant."""
    fused = {r["kernels"]: r for r in fused_rows}
    unfused = {r["kernels"]: r for r in unfused_rows}
    out = []
    for name in dict.fromkeys([*unfused, *fused]):
        u, f = unfused.get(name), fused.get(name)
        miss = (u["measured us"] - u["model us"] if u else 0.0) - (f["measured us"] - f["model us"] if f else 0.0)
        only = "" if (u and f) or name in (OUTSIDE, LIBRARY_KERNELS) else (" (unfused)" if u else " (fused)")
        r: dict = u or f or {}
        out.append({"kernels": name + only, "count": r["count"], "regimes": r["regimes"], "miss us": miss,
                    "model us by regime": r.get("model us by regime", {}),
                    "measured us": r["measured us"] if not (u and f) else None,
                    "model us": r["model us"] if not (u and f) else None})
    out.sort(key=lambda r: -abs(r["miss us"]))
    return out


def _cpu_ns(call: tuple) -> int:
    """A call's time: its third field where logged (by the run's timer: its CPU time where
    that clock can time a call), else its wall time.  The CPU time, as the timing method's: a
    process sharing its core with another is preempted inside its calls, and their wall time
    counts the other's slices (beside a CPU burner on the same core, the unfused softmax's
    calls took 3,026 us of wall time for 1,103 of samples)."""
    return call[2] if len(call) > 2 else call[1] - call[0]


def _kept(calls: list, share: float) -> list:
    """The calls of the fastest stretches: those whose neighbours' median time is in the
    fastest ``share`` (see the module docstring: not a call's own time)."""
    d = [_cpu_ns(c) for c in calls]
    speed = [statistics.median(d[max(0, i - NEIGHBOURS):i] + d[i + 1:i + 1 + NEIGHBOURS] or [d[i]])
             for i in range(len(d))]
    cut = sorted(speed)[max(0, int(len(speed) * share) - 1)]
    return [c for c, s in zip(calls, speed) if s <= cut]


def attribute(calls: list, samples: list, frequency: float, share: float = SHARE) -> tuple[list, dict]:
    """(kept calls, {symbol: microseconds a kept call}) from the calls' (start, end[, CPU
    time]) and the samples' (time, symbol), in nanoseconds (start, end and the samples' times
    on CLOCK_MONOTONIC)."""
    kept = _kept(calls, share)
    counts = _symbol_counts(sorted(samples), kept)
    per_sample_us = 1e6 / frequency
    return kept, {s: n * per_sample_us / len(kept) for s, n in counts.items()}


def _symbol_counts(samples: list, calls) -> dict:
    """{symbol: samples} of the (time, symbol) ``samples``, sorted by time, that fall inside
    the calls' (start, end, ...) windows."""
    times = [t for t, _ in samples]
    counts: dict = {}
    for a, b, *_ in calls:
        for k in range(bisect.bisect_left(times, a), bisect.bisect_right(times, b)):
            counts[samples[k][1]] = counts.get(samples[k][1], 0) + 1
    return counts


def parse_script(text: str) -> list:
    """(time ns, symbol) of ``perf script -F time,ip,sym --ns`` lines."""
    out = []
    for line in text.splitlines():
        stamp, sep, rest = line.strip().partition(":")
        if not sep:
            continue
        try:
            t = int(round(float(stamp) * 1e9))
        except ValueError:
            continue
        parts = rest.split(None, 1)
        out.append((t, parts[1].strip() if len(parts) > 1 else "[unknown]"))
    return out


@functools.lru_cache(maxsize=1)
def perf_available() -> str | None:
    """None when ``perf record`` can sample this user's processes, else why not (asked of
    perf once a process: every profile needs the answer)."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: linux-perf)"
    try:
        proc = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", os.devnull, "--", "true"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"perf record did not run: {e}"
    return None if proc.returncode == 0 else f"perf record refused: {proc.stderr.strip()[-300:]}"


def profile(program: str, args: tuple, options: dict | None = None, *, seconds: float = 5.0,
            frequency: int = FREQUENCY, share: float = SHARE, warmup: int = 30, seed: int = 0,
            pythonpath: tuple = ()) -> KernelProfile:
    """Profile ``program`` (``"module:function"``) on ``args`` ((dtype, shape) pairs, filled
    as the timing worker fills them), compiled with ``options``, for ``seconds`` of calls."""
    why = perf_available()
    if why:
        raise PerfError(why)
    options = dict(options or {})
    with tempfile.TemporaryDirectory(prefix="dumpref-perf-") as tmp:
        t = Path(tmp)
        req = {"program": program, "args": [[str(d), list(s)] for d, s in args], "options": options,
               "seconds": seconds, "warmup": warmup, "seed": seed,
               "ready": str(t / "ready"), "go": str(t / "go"), "log": str(t / "calls.json")}
        with timing.one_timing_at_a_time():
            (t / "request.json").write_text(json.dumps(req))
            errors = t / "stderr.txt"
            with open(errors, "w") as err_file:
                worker = subprocess.Popen([sys.executable, "-m", __name__, str(t / "request.json")],
                                          stdout=subprocess.DEVNULL, stderr=err_file,
                                          env=timing.worker_env(pythonpath))
            deadline = time.monotonic() + 600
            while not (t / "ready").exists():
                if worker.poll() is not None or time.monotonic() > deadline:
                    worker.kill()
                    raise PerfError(f"profiling {program}: the program did not start "
                                    f"(exit {worker.wait()}):\n{errors.read_text()[-2000:]}")
                time.sleep(0.02)
            data = t / "perf.data"
            recorder = subprocess.Popen(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-F", str(frequency),
                                         "-e", "cpu-clock", "-p", str(worker.pid), "-o", str(data)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)                      # perf attaches before the calls start
            (t / "go").write_text("go")
            try:
                worker.wait(timeout=seconds + 600)
            except subprocess.TimeoutExpired:
                worker.kill()
                recorder.kill()
                raise PerfError(f"profiling {program} took longer than {seconds + 600:.0f} s") from None
            recorder.wait(timeout=60)
            if worker.returncode != 0:
                raise PerfError(f"profiling {program} failed (exit {worker.returncode}):\n"
                                f"{errors.read_text()[-2000:]}")
            script = subprocess.run(["perf", "script", "-i", str(data), "-F", "time,ip,sym", "--ns"],
                                    capture_output=True, text=True)
            Path(f"/tmp/perf-{worker.pid}.map").unlink(missing_ok=True)
        calls = [tuple(c) for c in json.loads((t / "calls.json").read_text())]
    if len(calls) < 20:
        raise PerfError(f"profiling {program}: {len(calls)} calls in {seconds:g} s, too few to choose from")
    kept, symbols = attribute(calls, parse_script(script.stdout), frequency, share)
    return KernelProfile(program, options, len(calls), len(kept),
                         statistics.median(_cpu_ns(c) / 1e3 for c in kept), symbols)


def profile_run(plan, pythonpath: tuple = (), *, frequency: int = FREQUENCY) -> tuple:
    """Run a ``timing.TimingPlan`` as ``timing.run_plan`` does, its worker sampled by perf, and
    attribute the samples of each variant's timed calls to its kernels: ``(TimingResult,
    {variant: KernelProfile})``.  A variant's profile spreads the run's measured time of it
    (the median of its rounds' fastest calls, what the claims compare) over its kernels in
    proportion to their samples in all its timed calls: choosing calls by their own time would
    keep those with the fewest samples (the module docstring), and a round's fastest call
    alone holds a sample or two.  So the kernels' times add up to the variant's time, and the
    cost model's miss of it splits into its kernels' misses, all from the rounds in which the
    model's rates were measured."""
    why = perf_available()
    if why:
        raise PerfError(why)
    clock = time.get_clock_info("perf_counter").implementation
    if "CLOCK_MONOTONIC" not in clock:
        raise PerfError(f"the timing worker's clock is {clock}, not perf's CLOCK_MONOTONIC")
    with tempfile.TemporaryDirectory(prefix="dumpref-perf-") as tmp:
        data, log = Path(tmp) / "perf.data", Path(tmp) / "calls.json"
        run = timing.run_plan(plan, pythonpath, command=(
            "perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-F", str(frequency), "-e", "cpu-clock", "-o", str(data),
            "--", sys.executable, "-m", __name__, TIMING_WORKER, str(log)))
        logged = json.loads(log.read_text())
        if logged.get("error"):
            raise PerfError(logged["error"])
        try:
            script = subprocess.run(["perf", "script", "-i", str(data), "-F", "time,ip,sym", "--ns"],
                                    capture_output=True, text=True, timeout=600)
        finally:
            Path(f"/tmp/perf-{logged['pid']}.map").unlink(missing_ok=True)
    if script.returncode != 0:
        raise PerfError(f"perf script failed: {script.stderr.strip()[-1000:]}")
    samples = sorted(parse_script(script.stdout))
    windows: dict = {}                             # variant -> its timed calls' (start, end)
    for name, a, b, _cpu in logged["calls"]:
        windows.setdefault(name, []).append((a, b))
    profiles = {}
    for name, v in run.variants.items():
        per = _symbol_counts(samples, windows.get(name, []))
        total = sum(per.values())
        us = v.median * 1e6
        n = len(windows.get(name, []))
        profiles[name] = KernelProfile(name, dict(v.options), n, n, us,
                                       {sym: us * k / total for sym, k in per.items()} if total else {})
    return run, profiles


TIMING_WORKER = "--timing-worker"


def _timing_worker(log: str) -> int:
    """timing's worker, naming its JIT kernels for perf once they are compiled and logging its
    timed calls (on perf_counter's clock, CLOCK_MONOTONIC on Linux: perf's ``-k``) into ``log``."""
    calls: list = []
    failed: list = []

    def name_kernels():
        try:
            write_perf_map()
        except (OSError, ValueError, PerfError) as e:   # the run goes on; profile_run says why
            failed.append(f"the JIT kernels could not be named for perf: {e}")

    rc = timing.serve(on_compiled=name_kernels, call_log=calls)
    Path(log).write_text(json.dumps({"pid": os.getpid(), "calls": calls, "error": failed[0] if failed else None}))
    return rc


def main() -> int:
    if sys.argv[1] == TIMING_WORKER:
        return _timing_worker(sys.argv[2])
    return _worker(json.loads(Path(sys.argv[1]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
