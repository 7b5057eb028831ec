"""Timing compiled XLA variants against each other, and the memory bandwidth they run at.

The method, in one place, because a timing claim is only as good as its method:

* **Pinned, single-threaded XLA.**  Timings run in a fresh subprocess, pinned to one CPU
  (``sched_setaffinity`` before jax is imported, so XLA sizes its thread pools and its
  loop partitioning for one CPU) with ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``
  and ``JAX_PLATFORMS=cpu``.  On a shared two-core machine two threads spread up to
  ~50 %, one pinned thread ~1 %.  The flags must be set before jax initialises, which is
  why this cannot run inside an already-running pytest process.
* **Interleaved rounds.**  Every round times each variant once (a batch of calls, each
  call timed on its own; the round's sample is its fastest call), in a freshly shuffled
  order (seeded, recorded).  Drift in the machine's load then hits all variants alike,
  and differences are taken per round (paired), not between two separate runs.
* **An A/A control.**  A plan names one variant twice (same program, same options); the
  paired difference between the two copies is the noise floor of the method.  jax caches
  executables by program and options, so a second ``jit(fn).lower(x).compile()`` with the
  same options returns the *same* executable; the copy is therefore compiled with one inert
  option added (``xla_dump_max_hlo_modules``, which matters only when dumping, and nothing is
  dumped), and the worker checks that it got a distinct executable with identical HLO.
* **One malloc arena, its heap kept.**  XLA:CPU allocates each call's temporaries with
  malloc from the thread that runs the executable, and glibc gives that thread an arena of
  its own: a block that needs a new heap there is unmapped again when it is freed, so every
  call faults its temporaries in afresh (gelu_grad without the fusion pass: 7,169 faults and
  ~15 ms of its ~25 ms per call), or not, if the thread happened to share the main arena.
  Which of the two a run got changed from run to run (mlp's extra time measured 3,561 us
  in one run and 20,492 us in another).  The worker therefore runs with one arena, blocks
  under 32 MiB from its heap and that heap never trimmed (:data:`ALLOCATOR_ENV`): each call
  reuses the pages of the call before.  Blocks of 32 MiB and more are mapped per call, as
  glibc always does for them (the claims state the faults per call).
* **One timing at a time on a machine.**  :func:`run_plan` holds an exclusive lock
  (:func:`one_timing_at_a_time`, a ``flock`` on a file in the temporary folder) while its
  subprocess runs.  Every timing pins itself to the same CPU (the last one allowed), so two at
  once (a render beside a check, two pytest runs, xdist workers) share one core and evict each
  other's working sets between time slices, which the process's CPU time does not show: with
  two such runs beside each other and two CPU burners, the kernel cost model priced softmax's
  extra time at 379-421 us where quiet runs gave 302-310 (its measured/model ratio 0.84-0.89
  against 0.94-0.99), because its calibration kernels slowed more than the program did.  CPU
  burners alone take time slices and no cache.
* **Bandwidth measured the same way.**  Calibration kernels are timed in the same rounds:
  a streaming kernel (``y = 2 * x`` over an array the size the plan names: one read stream,
  one write stream) and two dispatch kernels, the same over 8 elements and over 2,048: the
  per-call cost of launching an executable on the calling thread, and on PJRT's worker
  thread, where its CPU client runs a program of more than about a thousand flops, the
  stream among them.  Bandwidth is the streaming kernel's bytes (XLA's own cost analysis)
  over its time less the worker's dispatch time: less the calling thread's, the stream's
  extra thread switch was counted as traffic (on a TPU host under gVisor 40 and 74-78 us a
  call, the stream 269-278 us; on an AMD EPYC 8 and 16, the stream 120).

Nothing here imports pytest: ``claims/test_fusion.py`` and ``benchmarks/`` call it.
"""
from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .claims import measured as measured_cell
from .provenance import CPU_CLOCK_MAX_STEP_NS, call_timer, cpu_clock_step_ns
from .provenance import cpu_caches  # noqa: F401 - the claims read the caches through timing

SINGLE_THREAD_XLA_FLAGS = ["--xla_cpu_multi_thread_eigen=false"]
# glibc's malloc, read when the process starts: one arena for every thread; blocks under
# 32 MiB (its largest mmap threshold) from the heap; the heap never given back (see above).
ALLOCATOR_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(32 * 2 ** 20),
                 "MALLOC_TRIM_THRESHOLD_": str(2 ** 30)}

# Names of the calibration kernels, timed in the same rounds as the plan's variants.
STREAM = "calibration: stream y=2x"
DISPATCH = "calibration: dispatch y=2x over 8 elements"
# The same over enough elements (2,048 flops) that PJRT runs it on its worker thread, as it
# runs the stream: the dispatch that the bandwidth takes out of the stream's time.
WORKER_ELEMENTS = 2048
DISPATCH_WORKER = f"calibration: dispatch y=2x over {WORKER_ELEMENTS} elements (worker thread)"
# The same stream kernel, each call on the next of enough distinct input arrays to exceed
# the last-level cache several times over: the bandwidth of data that is not in cache.
STREAM_COLD = "calibration: stream y=2x, inputs not in cache"
COLD_INPUT_BYTES = 128 * 2 ** 20
CALIBRATION_KERNELS = (STREAM, DISPATCH, DISPATCH_WORKER, STREAM_COLD)


class TimingError(RuntimeError):
    """A timing run failed; the message names the program and what went wrong."""


@dataclass(frozen=True)
class TimingPlan:
    """What to time.

    program:  ``"module:function"``, importable in a fresh interpreter.
    args:     the program's arguments as ``(dtype, shape)``; filled deterministically
              (standard normal from ``seed``).
    variants: variant name -> compiler options (``xla_disable_hlo_passes`` etc.).
              Name one configuration twice to get the A/A control.
    programs: variant name -> ``(program, args)`` for variants of another program than
              ``program`` (one run can time several programs, each with its own A/A pair,
              against one calibration); variants of one program share its input arrays.
    stream_shape: shape of the f32 array the streaming calibration kernel reads and
              writes; the same size as the traffic being predicted, so that both sit at
              the same level of the memory hierarchy.
    passes:   a round's ``calls_per_round`` are made in this many passes through the
              round's order, each pass one untimed call then its share of the timed calls
              (the worker says why); 1: all of a variant's calls of a round in a row.
    """
    program: str
    args: tuple
    variants: dict
    stream_shape: tuple = (1024, 1024)
    rounds: int = 30
    calls_per_round: int = 20
    warmup_calls: int = 20
    seed: int = 0
    cpu: int | None = None
    timeout_s: float = 300.0
    programs: dict = field(default_factory=dict)
    cold_stream: bool = False
    passes: int = 1

    def program_of(self, variant: str) -> tuple:
        """(program, args) of ``variant``."""
        return self.programs.get(variant, (self.program, self.args))

    def to_json(self) -> dict:
        d = asdict(self)
        d["args"] = _args_json(self.args)
        d["stream_shape"] = list(self.stream_shape)
        d["programs"] = {k: [prog, _args_json(args)] for k, (prog, args) in self.programs.items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TimingPlan":
        d = dict(d)
        d["args"] = _args_tuple(d["args"])
        d["stream_shape"] = tuple(d["stream_shape"])
        d["programs"] = {k: (prog, _args_tuple(args)) for k, (prog, args) in d.get("programs", {}).items()}
        return cls(**d)


def _args_json(args) -> list:
    return [[str(dt), list(shape)] for dt, shape in args]


def _args_tuple(args) -> tuple:
    return tuple((dt, tuple(shape)) for dt, shape in args)


# Added to the options of an A/A copy so that jax compiles it afresh instead of returning the
# cached executable of its twin: it bounds how many modules a dump may hold, and nothing is
# dumped.  Copy k gets -2-k (the default is -1).
AA_INERT_OPTION = "xla_dump_max_hlo_modules"


@dataclass
class VariantTiming:
    """One variant's times: ``samples`` holds, per round, the seconds of its fastest call."""
    name: str
    options: dict
    bytes_accessed: float
    samples: list
    minor_faults_per_call: float
    hlo_text: str = field(default="", repr=False)
    flops: float = 0.0
    transcendentals: float = 0.0
    compiled_options: dict = field(default_factory=dict)   # as compiled (A/A copy: + the inert option)
    wall_samples: list = field(default_factory=list)       # per round, the fastest call's wall-clock seconds

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def noise(self) -> float:
        """Standard uncertainty (seconds) of :attr:`median`, from the spread of the rounds."""
        return median_noise(self.samples)


@dataclass
class TimingResult:
    """One timing run: every variant's per-round times, the calibration kernels, the plan.

    The ``timing`` fixture returns one (and records ``table()`` and ``method()`` as the claim's
    evidence); ``time_variants(fn, args, variants)`` makes one anywhere.  Times are seconds,
    each with its noise (one standard uncertainty, from the rounds' spread).

    Example (in a claim)::

        run = timing(scale, x, variants={"fused": {}, "unfused": {"xla_disable_hlo_passes": "fusion"}})
        run.variants["fused"].median, run.variants["fused"].noise
        extra = run.difference("fused", "unfused")          # median of paired rounds
        evidence.number("extra time", extra * 1e6, unit="us",
                        noise=run.difference_noise("fused", "unfused") * 1e6)
        run.bandwidth                                       # bytes/s, measured in the same rounds
    """
    plan: TimingPlan
    variants: dict            # name -> VariantTiming, plan variants and calibration kernels
    orders: list              # the shuffled order of each round
    cpu: int
    xla_flags: str
    jax_version: str
    timer: str = "process CPU time"    # what timed each call (provenance.call_timer)
    cpu_clock_step_ns: int = 0         # the step of the process's CPU clock it was chosen by

    # -- the numbers a claim states ------------------------------------------------------
    def paired_differences(self, base: str, other: str) -> list:
        """Per round: seconds per call of ``other`` minus ``base``, from the same round."""
        a, b = self.variants[base].samples, self.variants[other].samples
        return [y - x for x, y in zip(a, b)]

    def difference(self, base: str, other: str) -> float:
        """Median over rounds of the paired difference (seconds per call)."""
        return statistics.median(self.paired_differences(base, other))

    def difference_noise(self, base: str, other: str) -> float:
        """Standard uncertainty (seconds) of :meth:`difference`, from the rounds' spread."""
        return median_noise(self.paired_differences(base, other))

    @property
    def bandwidth_noise(self) -> float:
        """Standard uncertainty (bytes/s) of :attr:`bandwidth`: its time's, carried over."""
        return (self.bandwidth * self.difference_noise(DISPATCH_WORKER, STREAM)
                / self.difference(DISPATCH_WORKER, STREAM))

    @property
    def cold_bandwidth_noise(self) -> float:
        """Standard uncertainty (bytes/s) of :attr:`cold_bandwidth`."""
        return (self.cold_bandwidth * self.difference_noise(DISPATCH_WORKER, STREAM_COLD)
                / self.difference(DISPATCH_WORKER, STREAM_COLD))

    def predicted_noise(self, extra_bytes: float, *, cold: bool = False) -> float:
        """Standard uncertainty (seconds) of :meth:`predicted_seconds`: the bandwidth's."""
        if cold:
            return self.predicted_seconds(extra_bytes, cold=True) * self.cold_bandwidth_noise / self.cold_bandwidth
        return self.predicted_seconds(extra_bytes) * self.bandwidth_noise / self.bandwidth

    @property
    def dispatch_seconds(self) -> float:
        """Seconds of a call that PJRT runs on the calling thread (the 8-element kernel)."""
        return self.variants[DISPATCH].median

    @property
    def bandwidth(self) -> float:
        """Bytes per second of the streaming kernel, the worker's dispatch cost removed (paired
        per round)."""
        return self._bandwidth_of(STREAM, "streaming kernel")

    @property
    def cold_bandwidth(self) -> float:
        """Bytes per second of the stream kernel on inputs not in cache (plans with
        ``cold_stream``), the worker's dispatch cost removed (paired per round)."""
        if STREAM_COLD not in self.variants:
            raise TimingError("this run timed no cold stream (TimingPlan(cold_stream=True))")
        return self._bandwidth_of(STREAM_COLD, "cold streaming kernel")

    def _bandwidth_of(self, stream: str, what: str) -> float:
        seconds = statistics.median(self.paired_differences(DISPATCH_WORKER, stream))
        if seconds <= 0:
            raise TimingError(f"the {what} ({self.variants[stream].median * 1e6:.1f} us) was not slower than "
                              f"the worker's dispatch kernel ({self.variants[DISPATCH_WORKER].median * 1e6:.1f} "
                              "us): no bandwidth to measure")
        return (self.variants[stream].bytes_accessed - self.variants[DISPATCH_WORKER].bytes_accessed) / seconds

    def predicted_seconds(self, extra_bytes: float, *, cold: bool = False) -> float:
        """The time ``extra_bytes`` take at the bandwidth measured in this run."""
        return extra_bytes / (self.cold_bandwidth if cold else self.bandwidth)

    def table(self) -> list:
        """Rows for evidence.table: one per variant; per round its fastest call, then the
        median over rounds and its noise (claims.measured: the check judges it by that).  The
        calibration kernels' times are rulers: they measure the machine, and when they agree
        that a re-run's machine ran slower or faster as a whole, the check judges the other
        times at that speed."""
        return [{"variant": v.name,
                 "us/call": measured_cell(v.median * 1e6, v.noise * 1e6, unit="us",
                                          ruler=v.name in CALIBRATION_KERNELS),
                 "bytes accessed": int(v.bytes_accessed)}
                for v in self.variants.values()]

    def record(self, evidence) -> None:
        """This run as a claim's evidence: the per-call table (each time with its noise) and
        the method, in words."""
        evidence.table(f"per-call times of {self.plan.program}, pinned single thread", self.table())
        evidence.note("Method: " + self.method() + ".")

    def method(self) -> str:
        p = self.plan
        return (f"pinned to CPU {self.cpu}, XLA_FLAGS={self.xla_flags}, {p.rounds} interleaved rounds "
                f"(order shuffled per round, seed {p.seed}) of {p.calls_per_round} separately timed calls "
                f"per variant" + (f" in {p.passes} passes through the round's order (each pass one untimed "
                                  f"call, then {max(1, p.calls_per_round // p.passes)} timed)"
                                  if p.passes > 1 else "")
                + f" after {p.warmup_calls} warm-up calls; per round the fastest call, across "
                f"rounds the median of paired differences; "
                f"A/A control; malloc with {', '.join(f'{k}={v}' for k, v in ALLOCATOR_ENV.items())}; "
                f"bandwidth from a y=2x stream over f32{list(p.stream_shape)} "
                f"less the dispatch cost of the same kernel over {WORKER_ELEMENTS} elements (as the stream, "
                f"on PJRT's worker thread)")


# The recorders of a run's numbers are functions, not TimingResult methods: statistic.py, the
# write-up's listing of the statistic, holds TimingResult's source whole (statistic_listing).

def record_prediction(evidence, run: TimingResult, extra_bytes: float, what: str) -> float:
    """Record what ``run`` predicts of ``extra_bytes`` (``what`` they are, in words): the bytes,
    the stream's bandwidth measured in the run and the time the bytes take at it, each with
    its noise.  Returns the predicted seconds per call."""
    evidence.number(f"extra bytes ({what})", extra_bytes, unit="B")
    evidence.number("measured bandwidth (stream kernel, pinned single thread)", run.bandwidth / 1e9,
                    unit="GB/s", noise=run.bandwidth_noise / 1e9)
    predicted = run.predicted_seconds(extra_bytes)
    evidence.number("predicted extra time per call", predicted * 1e6, unit="us",
                    noise=run.predicted_noise(extra_bytes) * 1e6)
    return predicted


def record_difference(evidence, run: TimingResult, name: str, base: str, other: str) -> float:
    """Record the measured time of ``other`` less ``base`` per call (median of paired rounds),
    in microseconds with its noise, as the number ``name``.  Returns it in seconds."""
    measured = run.difference(base, other)
    evidence.number(name, measured * 1e6, unit="us", noise=run.difference_noise(base, other) * 1e6)
    return measured


def median_noise(samples: list) -> float:
    """The standard error of a median of ``samples``: 1.2533 sigma / sqrt(n) (the median's
    asymptotic efficiency), sigma read from the interquartile range (IQR / 1.349), which the
    few slow rounds a busy machine leaves do not inflate the way they would a deviation."""
    if len(samples) < 4:
        return abs(statistics.median(samples))   # too few rounds to tell: all of it
    q = statistics.quantiles(samples, n=4)
    return 1.2533 * ((q[2] - q[0]) / 1.349) / math.sqrt(len(samples))


def worker_env(pythonpath: tuple = ()) -> dict:
    """The environment of a process that runs programs as the timing worker does: XLA single
    threaded, the CPU backend, one malloc arena whose heap is kept (ALLOCATOR_ENV)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    # The caller's flags are kept, except any that set what the method fixes.
    fixed = {f.split("=")[0] for f in SINGLE_THREAD_XLA_FLAGS}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f.split("=")[0] not in fixed]
    flags += SINGLE_THREAD_XLA_FLAGS
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"          # never a plugin device that happens to claim priority
    env["PYTHONHASHSEED"] = "0"
    env.update(ALLOCATOR_ENV)
    return env


WORKER_COMMAND = (sys.executable, "-m", "pytest_dumpref.timing")


def run_plan(plan: TimingPlan, pythonpath: tuple = (), *, command: tuple = WORKER_COMMAND) -> TimingResult:
    """Run ``plan`` in a pinned, single-threaded subprocess and return its timings.
    ``pythonpath``: folders the subprocess imports the plan's programs from; ``command``: the
    worker's command line, which reads the plan on its standard input and prints the result
    (kernel_perf.profile_run's runs :func:`serve` under ``perf record``)."""
    env = worker_env(pythonpath)
    try:
        with one_timing_at_a_time():
            proc = subprocess.run(list(command),
                                  input=json.dumps(plan.to_json()), capture_output=True, text=True,
                                  env=env, timeout=plan.timeout_s)
    except subprocess.TimeoutExpired as e:
        raise TimingError(f"timing {plan.program} took longer than {plan.timeout_s:.0f} s "
                          f"({plan.rounds} rounds x {plan.calls_per_round} calls)") from e
    if proc.returncode != 0:
        raise TimingError(f"timing {plan.program} failed in its subprocess (exit {proc.returncode}):\n"
                          + proc.stderr[-3000:])
    try:
        raw = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise TimingError(f"timing {plan.program}: the subprocess printed no result:\n{proc.stdout[-2000:]}"
                          f"\n{proc.stderr[-2000:]}") from e
    variants = {name: VariantTiming(**v) for name, v in raw["variants"].items()}
    return TimingResult(plan=plan, variants=variants, orders=raw["orders"], cpu=raw["cpu"],
                        xla_flags=raw["xla_flags"], jax_version=raw["jax_version"],
                        timer=raw["timer"], cpu_clock_step_ns=raw["cpu_clock_step_ns"])


TIMING_LOCK = "pytest-dumpref-timing.lock"


@contextmanager
def one_timing_at_a_time():
    """Wait for, then hold, the machine's timing lock (see the module docstring): a file in
    the temporary folder, locked with ``flock`` (released by the kernel if the holder dies).
    A lock file another user owns is left alone: this user's timings then lock one of their own."""
    import fcntl
    path = os.path.join(tempfile.gettempdir(), TIMING_LOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        fd = os.open(f"{path}.{os.getuid()}", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock


def aa_name(variant: str) -> str:
    return f"{variant}, compiled again (A/A)"


def time_variants(fn, args, variants: dict, *, aa: bool = True, **plan) -> TimingResult:
    """Time ``fn`` compiled once per variant (name -> compiler options), with this module's
    method, on inputs of the shapes and dtypes of ``args`` (filled afresh in the subprocess).
    ``aa``: the first variant is compiled twice, and the copy is timed too (:func:`aa_name`).
    ``plan``: further :class:`TimingPlan` fields (rounds, calls_per_round, stream_shape...).

    ``fn`` must be a module-level function of an importable module (the subprocess imports
    it by name): a claim file's own functions qualify."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    qualname = getattr(fn, "__qualname__", "")
    if module is None or "<" in qualname or getattr(module, qualname.split(".")[0], None) is None:
        raise TimingError(f"time_variants: {fn!r} is not a module-level function of an importable module; "
                          "the timing subprocess imports it by name (define it at the top of a module)")
    root = Path(inspect.getsourcefile(module) or ".").resolve().parent
    for _ in range(module.__name__.count(".")):
        root = root.parent
    shapes = tuple((str(getattr(a, "dtype", "float32")), tuple(getattr(a, "shape", ()))) for a in args)
    variants = dict(variants)
    if not variants:
        raise TimingError("time_variants: name at least one variant (name -> compiler options)")
    if aa:
        first = next(iter(variants))
        variants[aa_name(first)] = dict(variants[first])
    tp = TimingPlan(program=f"{module.__name__}:{qualname}", args=shapes, variants=variants, **plan)
    return run_plan(tp, pythonpath=(root,))


def plan_block(plan: TimingPlan) -> str:
    """The plan as plan_listing writes it: a plain namespace of its fields, one a line."""
    def value(v) -> str:   # a dict one entry a line: the variants of a plan can be many
        if isinstance(v, dict) and len(v) > 1:
            return "{\n" + "".join(f"        {k!r}: {x!r},\n" for k, x in v.items()) + "    }"
        return repr(v)

    fields = "".join(f"    {name}={value(v)},\n" for name, v in asdict(plan).items() if name != "timeout_s")
    return "plan = types.SimpleNamespace(\n" + fields + ")"


def run_command(script: str = "timed.py", out: str = "run.json") -> str:
    """The shell line that runs the worker's listing as run_plan runs the worker: its XLA
    flags, the CPU platform, a fixed hash seed and glibc's malloc settings."""
    return (f"XLA_FLAGS={' '.join(SINGLE_THREAD_XLA_FLAGS)} JAX_PLATFORMS=cpu PYTHONHASHSEED=0 "
            f"{' '.join(f'{k}={v}' for k, v in ALLOCATOR_ENV.items())} python {script} > {out}")


# The listing's resolve_program: timed.py runs without pytest-dumpref, so it takes the
# programs from program.py beside it (program_listing), not from their module by name.
LISTED_RESOLVE_PROGRAM = '''def resolve_program(ref):
    """'module:function' -> the function of that name in program.py, beside this file (the
    worker of pytest-dumpref imports the module itself: timing.resolve_program)."""
    import program
    fn = program
    for part in ref.partition(':')[2].split('.'):
        fn = getattr(fn, part)
    return fn
'''


def plan_listing(plan: TimingPlan, program_file: str = "program.py") -> str:
    """Python that defines every name the worker's source (``_worker``) uses besides jax and
    numpy, with the values ``plan`` ran with: the imports, this module's constants, the plan
    as a plain namespace, and the helper that turns a program reference into a function
    (``LISTED_RESOLVE_PROGRAM``: from program.py, the listing ``program_file`` shown with this
    one, saved beside it).  A reader who pastes it above the worker's source has the timing
    loop as it ran."""
    constants = "\n".join(f"{name} = {globals()[name]!r}" for name in (
        "SINGLE_THREAD_XLA_FLAGS", "ALLOCATOR_ENV", "STREAM", "DISPATCH", "DISPATCH_WORKER", "WORKER_ELEMENTS",
        "STREAM_COLD", "COLD_INPUT_BYTES",
        "AA_INERT_OPTION", "CPU_CLOCK_MAX_STEP_NS"))
    import jax
    save = ("the listing program.py" if program_file == "program.py"
            else f"the listing {program_file} (its programs) as program.py")
    return (f"# timed.py needs plain jax: pip install jax=={jax.__version__} jaxlib=={jax.__version__} numpy\n"
            f"# and {save} beside this file.\n"
            "# Run it as\n"
            f"#   XLA_FLAGS={' '.join(SINGLE_THREAD_XLA_FLAGS)} JAX_PLATFORMS=cpu PYTHONHASHSEED=0 \\\n"
            f"#   {' '.join(f'{k}={v}' for k, v in ALLOCATOR_ENV.items())} python timed.py > run.json\n"
            "# (pytest-dumpref's run_plan starts it so: a fresh python, the flags and the pin before\n"
            "# jax starts); it prints _worker(plan) as JSON, for statistic.py.\n"
            "# The MALLOC_ variables give glibc's malloc one arena and keep its heap, so each call\n"
            "# reuses the pages of the last; without them XLA's execution thread may get an arena\n"
            "# of its own and fault its temporaries in afresh on every call, by chance of the run.\n"
            "# plan.program, 'module:function', is taken from program.py by resolve_program when the\n"
            "# worker starts, after _pin (jax must not be imported before the pin); pytest-dumpref's\n"
            "# worker imports the module itself, the only line that differs from the run.\n"
            "from __future__ import annotations\n\n"
            "import json, os, random, resource, time, types\n\n"
            "# pytest_dumpref/timing.py's constants\n" + constants + "\n\n"
            "# the plan this claim ran\n"
            + plan_block(plan) + "\n"
            "plan.program_of = lambda variant: plan.programs.get(variant, (plan.program, plan.args))\n\n"
            "class TimingError(RuntimeError):\n    pass\n\n\n"
            + LISTED_RESOLVE_PROGRAM + "\n\n"
            "# The tables' 'us/call' of a variant: the median of its samples (per round, its fastest\n"
            "# call's CPU time, or wall time where call_timer says so) ± median_noise(samples)\n"
            "# (statistic.py lists it).\n")


def program_listing(plan: TimingPlan) -> str:
    """program.py: the functions ``plan`` times, as they ran, with the module-level functions
    and constants they use from their own modules and those modules' imports (a package's
    relative imports left out: what the programs use is listed whole), so that
    ``worker_listing``'s worker runs them without the package they live in."""
    by_module: dict = {}
    for variant in plan.variants:
        module, _, name = plan.program_of(variant)[0].partition(":")
        by_module.setdefault(module, [])
        if name not in by_module[module]:
            by_module[module].append(name)
    imports, bodies, heads = [], [], []
    for module_name, names in by_module.items():
        module_imports, body = _module_programs(module_name, names)
        imports += [i for i in module_imports if i not in imports]
        bodies += body
        heads.append(f"{', '.join(names)} from {module_name}")
    return (f"# program.py: {'; '.join(heads)}, as they ran, with what they use\n"
            + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(bodies) + "\n")


def _module_programs(module_name: str, names: list) -> tuple:
    """(import lines, top-level definitions) of ``module_name`` that ``names`` need."""
    import ast

    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    tree = ast.parse(source)
    defined: dict[str, ast.stmt] = {}                  # top-level name -> its statement
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = node
    needed, todo = set(), list(names)
    while todo:                                        # what the programs use, transitively
        name = todo.pop()
        if name in needed or name not in defined:
            continue
        needed.add(name)
        todo += [n.id for n in ast.walk(defined[name]) if isinstance(n, ast.Name)]
    lines = source.splitlines()

    def text(node) -> str:                             # decorators and comments above it kept
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "\n".join(lines[start - 1:node.end_lineno])

    imports = [text(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
               and getattr(n, "module", None) != "__future__" and not getattr(n, "level", 0)]
    body = [text(n) for n in tree.body if any(defined.get(x) is n for x in needed)]
    return imports, body


def worker_listing(plan: TimingPlan, program_file: str = "program.py") -> str:
    """The timed subprocess as one script that runs with plain jax: ``plan_listing(plan)``,
    then the source of the worker and the functions it calls, then the line that runs it.
    ``program_file``: the name of the listing of its programs shown with it."""
    return (plan_listing(plan, program_file) + "\n\n" + "\n\n".join(
                inspect.getsource(f) for f in (_pin, fill, _stream, cpu_clock_step_ns, call_timer, _worker))
            + "\n\nprint(json.dumps(_worker(plan)))\n")


def record_listings(evidence, plan: TimingPlan, comparisons: list, across: dict | None = None) -> None:
    """Record the timing method as it ran, as three scripts a reader runs with plain jax: the
    programs (program_listing), the timed subprocess (worker_listing: the plan's values, then
    the source of the worker) and the statistic (statistic_listing: the source of its
    classes, fed the worker's JSON), then the method in words."""
    evidence.excerpt("program.py, the timed programs as they ran (timing.program_listing: "
                     "pytest_dumpref/examples.py's functions the plan times and what they use)",
                     program_listing(plan), lang="python")
    evidence.excerpt("timed.py, the timed subprocess as it ran (timing.worker_listing): how to run "
                     "it, the plan, pinning, inputs, both variants compiled in one process, the A/A "
                     "copy compiled afresh, the calibration kernels, the timed call, interleaved rounds",
                     worker_listing(plan), lang="python")
    evidence.excerpt("statistic.py, the statistic and the prediction as they ran (timing."
                     "statistic_listing, pytest_dumpref/timing.py's classes): fed timed.py's output "
                     "on stdin, it prints the numbers this claim states",
                     statistic_listing(comparisons, across), lang="python")
    evidence.note(
        "In words: each variant is compiled in the timing subprocess by jax.jit(fn).lower(*args)"
        ".compile(compiler_options=...), the unfused one with xla_disable_hlo_passes=fusion; an A/A copy "
        f"gets the inert option {AA_INERT_OPTION} (nothing is dumped) because jax would otherwise "
        "return its twin's cached executable, and the worker checks that the executable is distinct and "
        "its HLO identical. One timed call is the process's CPU time (time.process_time_ns) around "
        "jax.block_until_ready(compiled(*args)), which a neighbour preempting the pinned process does not add to; "
        f"where that clock steps by more than {CPU_CLOCK_MAX_STEP_NS // 1000} us (gVisor's ticks 10 ms), the wall "
        "clock (time.perf_counter_ns): the environment's call_timer row says which, and why. "
        "A round runs every variant's batch of calls in a shuffled order and keeps each batch's fastest "
        "call; a difference is the median over rounds of the per-round (paired) differences. The ± beside "
        "a time is the standard error of that median, 1.2533 x (IQR / 1.349) / sqrt(rounds) of the samples "
        "or paired differences it is the median of (timing.median_noise), carried through a ratio. Bandwidth "
        f"is the stream kernel's XLA bytes accessed minus those of the dispatch kernel over {WORKER_ELEMENTS} "
        "elements (which PJRT runs, as it runs the stream, on its worker thread), over the median paired "
        "difference of their times; GB is 1e9 bytes. The predicted extra time is the extra bytes over "
        "that bandwidth.")


def spearman(a: list, b: list) -> float:
    """Spearman's rank correlation of ``a`` and ``b``: the Pearson correlation of their ranks
    (0 for the smallest; exact values, so that ties, if any, rank in order of appearance)."""
    def ranks(x: list) -> list:
        r = [0] * len(x)
        for rank, i in enumerate(sorted(range(len(x)), key=lambda i: x[i])):
            r[i] = rank
        return r
    return statistics.correlation(ranks(a), ranks(b))


def statistic_listing(comparisons: list, across: dict | None = None) -> str:
    """The statistic and the prediction as one script for plain Python: it reads the JSON the
    worker printed (``worker_listing``) on stdin and prints, per comparison, the numbers a
    claim states, computed by this module's own classes (their source, as it ran).

    ``comparisons``: dicts with ``label``, ``base`` and ``other`` (variant names: measured
    extra time is other - base), ``aa`` (the A/A twin of base) and ``extra_bytes`` (the bytes
    the prediction divides by the bandwidth; None: XLA's bytes accessed, other - base); with
    ``factor`` and ``aa_limit``, the script also says whether the claim's condition holds
    (1/factor <= measured/predicted <= factor, |A/A| <= aa_limit x predicted).

    ``across`` (``rank_correlation``, ``aa_limit``): the comparisons are programs, and the
    script also prints the numbers a claim across them states, by :func:`spearman` and the
    medians, and whether its condition holds (every measured extra time above zero, the rank
    correlation of predicted and measured at least rank_correlation, the median |A/A| /
    measured at most aa_limit)."""
    rows = "".join(f"    {c!r},\n" for c in comparisons)
    summary = "" if across is None else (
        "\n# across the programs: the claim's summary numbers and its condition\n"
        f"ACROSS = {across!r}\n"
        "errors = sorted(abs(m / p - 1) for m, p in zip(meas, pred))\n"
        "rho = spearman(pred, meas)\n"
        "aa_share = statistics.median(abs(x) / m for x, m in zip(aas, meas))\n"
        "if STREAM_COLD in r.variants:\n"
        "    print(f'cold-stream bandwidth {r.cold_bandwidth / 1e9:.2f} GB/s')\n"
        "print(f'median |measured/predicted - 1| {statistics.median(errors):.4g}, worst {errors[-1]:.4g}')\n"
        "print(f'Spearman rank correlation, predicted against measured {rho:.4f}')\n"
        "print(f'median |A/A| / measured {aa_share:.4g}')\n"
        "holds = min(meas) > 0 and rho >= ACROSS['rank_correlation'] and aa_share <= ACROSS['aa_limit']\n"
        "print(f\"every extra time > 0, rank correlation >= {ACROSS['rank_correlation']:g}, median |A/A| / \"\n"
        "      f\"measured <= {ACROSS['aa_limit']:g}: {'holds' if holds else 'does not hold'}\")\n")
    return ("# statistic.py: run it as  python statistic.py < run.json  (plain Python, no jax needed)\n"
            "from __future__ import annotations\n\n"
            "import json, math, statistics, sys\n"
            "from dataclasses import dataclass, field\n\n"
            + "\n".join(f"{name} = {globals()[name]!r}" for name in ("STREAM", "DISPATCH", "DISPATCH_WORKER",
                                                                    "STREAM_COLD", "CALIBRATION_KERNELS",
                                                                    "ALLOCATOR_ENV"))
            + "\n\n\nclass TimingError(RuntimeError):\n    pass\n\n\n"
            "def measured_cell(value, noise, unit=None, ruler=False):   # pytest_dumpref.claims.measured\n"
            "    return {'value': value, 'noise': noise, 'unit': unit, 'ruler': ruler}\n\n\n"
            + inspect.getsource(median_noise) + "\n\n"
            + inspect.getsource(VariantTiming) + "\n\n" + inspect.getsource(TimingResult)
            + ("\n\n" + inspect.getsource(spearman) if across is not None else "")
            + "\n\n# the comparisons the claim states\nCOMPARISONS = [\n" + rows + "]\n\n"
            "out = json.loads(sys.stdin.read().strip().splitlines()[-1])\n"
            "r = TimingResult(plan=None, variants={n: VariantTiming(**v) for n, v in out['variants'].items()},\n"
            "                 orders=out['orders'], cpu=out['cpu'], xla_flags=out['xla_flags'],\n"
            "                 jax_version=out['jax_version'])\n"
            "print(f'bandwidth {r.bandwidth / 1e9:.2f} GB/s (GB = 1e9 bytes)')\n"
            "pred, meas, aas = [], [], []   # per comparison, in seconds\n"
            "for c in COMPARISONS:\n"
            "    extra = c['extra_bytes']\n"
            "    if extra is None:\n"
            "        extra = r.variants[c['other']].bytes_accessed - r.variants[c['base']].bytes_accessed\n"
            "    predicted = r.predicted_seconds(extra)\n"
            "    measured = r.difference(c['base'], c['other'])\n"
            "    aa = r.difference(c['base'], c['aa'])\n"
            "    pred.append(predicted)\n"
            "    meas.append(measured)\n"
            "    aas.append(aa)\n"
            "    print(f\"{c['label']}: extra bytes {extra:,.0f}, predicted {predicted * 1e6:.1f} us, \"\n"
            "          f\"measured {measured * 1e6:.1f} us, measured/predicted {measured / predicted:.3f}, \"\n"
            "          f\"A/A {aa * 1e6:.2f} us\")\n"
            "    if 'at_least' in c:   # the claim's own condition, with its constants\n"
            "        low, bound = c['at_least'], c['aa_limit'] * predicted\n"
            "        holds = measured / predicted >= low and abs(aa) <= bound\n"
            "        print(f\"  measured/predicted >= {low:g} and |A/A| <= {bound * 1e6:.1f} us \"\n"
            "              f\"({c['aa_limit']:g} x predicted): {'holds' if holds else 'does not hold'}\")\n"
            "for row in r.table():   # the per-call table\n"
            "    print(row)\n" + summary)


def plot_prediction(result: TimingResult, base: str, other: str, predicted_seconds: float,
                    path, *, aa: str | None = None, title: str = "") -> Path:
    """A two-panel PNG: left, per-call times of ``base``, its A/A copy and ``other``; right,
    the extra time per call of ``other`` over ``base``, predicted against measured (median of
    the paired rounds, whiskers at its quartiles), with the A/A difference for scale.

    Written without timestamps or version strings: equal numbers give equal bytes.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    us = 1e6
    v = result.variants
    left_names = [base] + ([aa] if aa else []) + [other]
    colors = {base: "#4c72b0", other: "#c44e52", aa: "#8da0cb"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.6), dpi=100)
    heights = [v[n].median * us for n in left_names]
    left.bar(range(len(left_names)), heights, color=[colors[n] for n in left_names])
    labels = {base: _short(base), other: _short(other), aa: "A/A copy"}
    left.set_xticks(range(len(left_names)), [labels[n] for n in left_names], fontsize=8)
    for i, h in enumerate(heights):
        left.text(i, h, f"{h:.0f}", ha="center", va="bottom", fontsize=9)
    left.set_ylabel("microseconds per call")
    left.set_title("per call (median over rounds of the fastest call)", fontsize=9)

    def bar(a, b):
        diffs = [d * us for d in result.paired_differences(a, b)]
        mid = statistics.median(diffs)
        q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [mid, mid, mid]
        return mid, (max(mid - q[0], 0.0), max(q[2] - mid, 0.0))

    bars = [("predicted", predicted_seconds * us, None, "#dd8452"),
            ("measured", *bar(base, other), colors[other])]
    if aa:
        bars.append(("A/A", *bar(base, aa), colors[aa]))
    for i, (_, h, err, color) in enumerate(bars):
        right.bar(i, h, color=color, capsize=4,
                  yerr=None if err is None else [[err[0]], [err[1]]])
        right.text(i + 0.05, max(h, 0.0), f"{h:.0f}", ha="left", va="bottom", fontsize=9)
    right.set_xticks(range(len(bars)), [b[0] for b in bars])
    right.axhline(0, color="black", linewidth=0.5)
    right.set_ylabel("extra microseconds per call")
    right.set_title(f"{_short(other)} - {_short(base)}; bandwidth {result.bandwidth / 1e9:.1f} GB/s",
                    fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def _short(name: str) -> str:
    return name if len(name) <= 16 else name[:14] + "…"


# ---- the subprocess side ---------------------------------------------------------------------

def resolve_program(ref: str):
    """``"package.module:function"`` -> the function, with an error that names the reference."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not attr:
        raise TimingError(f"program {ref!r} must be written 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise TimingError(f"program {ref!r}: cannot import {module_name}: {e}") from e
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise TimingError(f"program {ref!r}: {module_name} has no {attr}")
    return fn


def _pin(cpu: int | None) -> int:
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu is None else cpu
    if chosen not in allowed:
        raise TimingError(f"cannot pin to CPU {chosen}: this process may use {allowed}")
    os.sched_setaffinity(0, {chosen})
    return chosen


def _stream(x):
    return x * 2.0


def fill(rng, dtype: str, shape: tuple):
    """A program's argument: standard normal for floats; for integer types (indices such as
    labels) uniform in [0, 1000)."""
    import numpy as np
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _worker(plan: TimingPlan, on_compiled=None, call_log: list | None = None) -> dict:
    # on_compiled: called once every kernel is compiled; call_log: where each timed call's
    # (variant, start, end, ns by the run's timer) is appended (start and end on
    # perf_counter's clock).
    # Both for kernel_perf.profile_run, which samples the run with perf.
    # glibc reads these when the process starts: too late to set them here, so refuse
    wrong = [f"{k}={v}" for k, v in ALLOCATOR_ENV.items() if os.environ.get(k) != v]
    if wrong:
        raise TimingError("start the timing process with " + " ".join(wrong) + " in its environment "
                          "(one malloc arena, its heap kept: each call then reuses the pages of the last)")
    cpu = _pin(plan.cpu)                       # before jax exists: XLA sizes its pools from this
    import jax
    import numpy as np

    rng = np.random.default_rng(plan.seed)
    inputs = {}    # (program, args) -> (function, arrays): variants of one program share them
    for name in plan.variants:
        key = plan.program_of(name)
        if key not in inputs:
            ref, shapes = key
            inputs[key] = (resolve_program(ref),
                           [jax.device_put(fill(rng, dtype, shape)) for dtype, shape in shapes])
    stream_x = jax.device_put(rng.standard_normal(plan.stream_shape).astype(np.float32))
    tiny_x = jax.device_put(np.ones(8, np.float32))

    kernels: dict = {}   # name -> (compiled, args, options as compiled)
    twins: dict = {}     # (program, args, options) -> the first variant compiled with them
    copies: dict = {}    # ... -> how many A/A copies of it so far
    for name, options in plan.variants.items():
        key = plan.program_of(name)
        fn, args = inputs[key]
        options = dict(options)
        twin_key = (key, json.dumps(options, sort_keys=True))
        twin = twins.setdefault(twin_key, name)
        if twin != name:   # an A/A copy: the same program compiled again, not fetched from the cache
            copies[twin_key] = copies.get(twin_key, 0) + 1
            options[AA_INERT_OPTION] = -1 - copies[twin_key]
        compiled = jax.jit(fn).lower(*args).compile(compiler_options=options or None)
        if twin != name:
            first = kernels[twin][0]
            if compiled.runtime_executable() is first.runtime_executable():
                raise TimingError(f"{name}: jax returned the cached executable of {twin}; the A/A "
                                  f"copy would time the same executable twice")
            if compiled.as_text() != first.as_text():
                raise TimingError(f"{name}: compiled again, it is not the program of {twin}")
        kernels[name] = (compiled, args, options)
    stream = jax.jit(_stream).lower(stream_x).compile()
    kernels[STREAM] = (stream, [stream_x], {})
    if plan.cold_stream:
        n_cold = max(2, min(256, COLD_INPUT_BYTES // max(1, stream_x.nbytes)))
        cold = [jax.device_put(rng.standard_normal(plan.stream_shape).astype(np.float32))
                for _ in range(n_cold)]
        kernels[STREAM_COLD] = (stream, cold, {})
    kernels[DISPATCH] = (jax.jit(_stream).lower(tiny_x).compile(), [tiny_x], {})
    worker_x = jax.device_put(np.ones(WORKER_ELEMENTS, np.float32))
    kernels[DISPATCH_WORKER] = (jax.jit(_stream).lower(worker_x).compile(), [worker_x], {})
    if on_compiled is not None:
        on_compiled()

    turn = {STREAM_COLD: 0}
    clock_step = cpu_clock_step_ns()
    timer = call_timer(clock_step)
    by_cpu_time = timer == "process CPU time"

    def run(name, n, timed=False) -> tuple:
        """Seconds of each of ``n`` calls; each call finishes before the next starts.  The
        cold stream takes its inputs in turn, so that no call finds its input in cache."""
        compiled, a, _ = kernels[name]
        times, walls = [], []
        for _ in range(n):
            if name == STREAM_COLD:
                a = [kernels[STREAM_COLD][1][turn[name] % len(kernels[STREAM_COLD][1])]]
                turn[name] += 1
            # The process's CPU time, not the wall clock: on a core it shares with another
            # process a call of more than a time slice is preempted every time, and its wall
            # time counts the neighbour's slices; the CPU time this (pinned) process spent
            # does not.  On a quiet core the two agree to within 1 %.  Where the CPU clock
            # cannot time a call (by_cpu_time: gVisor's ticks 10 ms), the wall clock does.
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            jax.block_until_ready(compiled(*a))
            cpu_ns, t1 = time.process_time_ns() - c0, time.perf_counter_ns()
            timed_ns = cpu_ns if by_cpu_time else t1 - t0
            times.append(timed_ns * 1e-9)
            walls.append((t1 - t0) * 1e-9)
            if call_log is not None and timed:
                call_log.append((name, t0, t1, timed_ns))
        return times, walls

    for name in kernels:
        run(name, plan.warmup_calls)

    samples: dict[str, list] = {name: [] for name in kernels}
    wall_samples: dict[str, list] = {name: [] for name in kernels}
    faults = {name: 0 for name in kernels}
    orders = []
    shuffle = random.Random(plan.seed)
    names = list(kernels)
    # A round's calls of a variant are spread over ``passes`` passes through the round's
    # order, each pass one untimed call (it brings the variant's buffers back into cache
    # after the other variants evicted them) and then its share of the timed calls.  Why
    # spread: this machine's vector units run at two speeds (an AVX loop over 16 KiB took
    # 70 us or 100-110 us a call, in stretches of a few ms to a few hundred ms set by
    # whatever shares the physical core, not by this machine's own load), so ten calls in a
    # row all fall in one stretch, and whether a compute-bound kernel's round was fast was a
    # coin toss: exp over f32[128,1024] measured 61-65 us in some rounds and 89-98 in others
    # of one run, and the median over rounds landed on either.  Calls spread over the round
    # meet several stretches, and the round's fastest call is one of a fast stretch.
    per_pass = max(1, plan.calls_per_round // max(1, plan.passes))
    for _ in range(plan.rounds):
        order = names[:]
        shuffle.shuffle(order)
        orders.append(order)
        best = {name: (float("inf"), float("inf")) for name in order}
        for _pass in range(max(1, plan.passes)):
            for name in order:
                if plan.passes > 1:
                    run(name, 1)
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                times, walls = run(name, per_pass, timed=True)
                faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
                # The round's sample is its fastest call, the one least disturbed by the
                # neighbours.  Under load (load average 4.6 on 2 cores of the Intel Xeon this
                # project first ran on) the median call swung the fusion claim's measured/predicted
                # ratio between 0.92 and 1.65 from run to run; the fastest call kept it within 0.95-0.97.
                k = min(range(len(times)), key=times.__getitem__)
                if times[k] < best[name][0]:
                    best[name] = (times[k], walls[k])
        for name in order:
            samples[name].append(best[name][0])
            wall_samples[name].append(best[name][1])

    calls = plan.rounds * per_pass * max(1, plan.passes)   # the timed ones (faults are counted around them)
    variants = {}
    for name, (compiled, _, options) in kernels.items():
        raw = compiled.cost_analysis()
        cost = raw[0] if isinstance(raw, (list, tuple)) else raw
        if not cost:
            raise RuntimeError(f"variant {name}: XLA gave no cost analysis")
        variants[name] = {"name": name, "options": plan.variants.get(name, {}),
                          "compiled_options": options,
                          "bytes_accessed": float(cost["bytes accessed"]),
                          "flops": float(cost.get("flops", 0.0)),
                          "transcendentals": float(cost.get("transcendentals", 0.0)),
                          "samples": samples[name], "wall_samples": wall_samples[name],
                          "minor_faults_per_call": faults[name] / calls,
                          "hlo_text": compiled.as_text()}
    return {"variants": variants, "orders": orders, "cpu": cpu,
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "jax_version": jax.__version__,
            "timer": timer, "cpu_clock_step_ns": clock_step}


def serve(**worker) -> int:
    """The worker's process: the plan from standard input, the result printed as JSON on its
    last line; ``worker``: :func:`_worker`'s hooks."""
    plan = TimingPlan.from_json(json.loads(sys.stdin.read()))
    missing = [f for f in SINGLE_THREAD_XLA_FLAGS if f not in os.environ.get("XLA_FLAGS", "").split()]
    if missing:
        print(f"pytest_dumpref.timing: run through run_plan(); XLA_FLAGS lacks {missing}", file=sys.stderr)
        return 2
    result = _worker(plan, **worker)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    return 0


def main() -> int:
    return serve()


if __name__ == "__main__":
    sys.exit(main())


# Offsets (points) tried for a point's label, nearest first: beside it, then above and below,
# then further out with a leader line.  Where a label goes depends on where the measured
# points fall, which no fixed offset can foresee (two programs with equal times overlapped).
_LABEL_DIRECTIONS = ((5, -3), (-5, -3), (5, 7), (-5, 7), (5, -12), (-5, -12), (0, 12), (0, -16))
_LABEL_OFFSETS = [(dx * r, dy * r) for r in (1, 2, 3.5, 5) for dx, dy in _LABEL_DIRECTIONS]


def _place_labels(fig, ax, names: list, xs: list, ys: list) -> list:
    """Annotate each point with its name where the label overlaps no other label, no point and
    not the legend, and stays inside the axes: the first free offset of ``_LABEL_OFFSETS`` (in
    display space, measured with the figure's own renderer); a label that finds none takes the
    last offset.  Returns the labels' boxes, in display space."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    pad = 3.0
    dots = [Bbox.from_extents(px - pad, py - pad, px + pad, py + pad)
            for px, py in ax.transData.transform(list(zip(xs, ys)))]
    legend = ax.get_legend()
    if legend is not None:
        dots.append(legend.get_window_extent(renderer))
    placed: list = []
    for i in sorted(range(len(names)), key=lambda k: (-ys[k], xs[k])):
        for n, (dx, dy) in enumerate(_LABEL_OFFSETS):
            far = n >= len(_LABEL_DIRECTIONS)   # beyond the first ring: a leader line
            text = ax.annotate(names[i], (xs[i], ys[i]), fontsize=7, xytext=(dx, dy), textcoords="offset points",
                               ha="left" if dx > 0 else ("right" if dx < 0 else "center"), va="center",
                               arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.5} if far else None)
            box = text.get_window_extent(renderer).expanded(1.05, 1.15)
            clear = (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                     and not any(box.overlaps(b) for b in placed)
                     and not any(box.overlaps(d) for j, d in enumerate(dots) if j != i))
            if clear or n == len(_LABEL_OFFSETS) - 1:
                placed.append(box)
                break
            text.remove()
    return placed


def plot_across_programs(points: list, path, *, title: str = "") -> Path:
    """Predicted against measured extra time per call, one point per program, on log axes,
    with the line measured = predicted and the band of a factor ``band`` around it.
    ``points``: dicts with ``name``, ``predicted_us``, ``measured_us``, ``aa_us``.
    Written without timestamps or version strings: equal numbers give equal bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=100)
    xs = [p["predicted_us"] for p in points]
    ys = [max(p["measured_us"], 1e-3) for p in points]
    lo, hi = min(xs + ys) / 1.5, max(xs + ys) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="measured = predicted")
    ax.fill_between([lo, hi], [lo / 1.25, hi / 1.25], [lo * 1.25, hi * 1.25], color="#dddddd",
                    label="within 25 %")
    ax.errorbar(xs, ys, yerr=[abs(p["aa_us"]) for p in points], fmt="o", color="#c44e52",
                ecolor="#8da0cb", capsize=3, label="program (whisker: its A/A difference)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted extra us per call (extra bytes / measured bandwidth)")
    ax.set_ylabel("measured extra us per call (median of paired rounds)")
    ax.legend(fontsize=7, loc="upper left")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    _place_labels(fig, ax, [p["name"] for p in points], xs, ys)
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path
