# timed.py needs plain jax: pip install jax==0.10.2 jaxlib==0.10.2 numpy
# and the listing model_program.py (its programs) as program.py beside this file.
# Run it as
#   XLA_FLAGS=--xla_cpu_multi_thread_eigen=false JAX_PLATFORMS=cpu PYTHONHASHSEED=0 \
#   MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 python timed.py > run.json
# (pytest-dumpref's run_plan starts it so: a fresh python, the flags and the pin before
# jax starts); it prints _worker(plan) as JSON, for statistic.py.
# The MALLOC_ variables give glibc's malloc one arena and keep its heap, so each call
# reuses the pages of the last; without them XLA's execution thread may get an arena
# of its own and fault its temporaries in afresh on every call, by chance of the run.
# plan.program, 'module:function', is taken from program.py by resolve_program when the
# worker starts, after _pin (jax must not be imported before the pin); pytest-dumpref's
# worker imports the module itself, the only line that differs from the run.
from __future__ import annotations

import json, os, random, resource, time, types

# pytest_dumpref/timing.py's constants
SINGLE_THREAD_XLA_FLAGS = ['--xla_cpu_multi_thread_eigen=false']
ALLOCATOR_ENV = {'MALLOC_ARENA_MAX': '1', 'MALLOC_MMAP_THRESHOLD_': '33554432', 'MALLOC_TRIM_THRESHOLD_': '1073741824'}
STREAM = 'calibration: stream y=2x'
DISPATCH = 'calibration: dispatch y=2x over 8 elements'
DISPATCH_WORKER = 'calibration: dispatch y=2x over 2048 elements (worker thread)'
WORKER_ELEMENTS = 2048
STREAM_COLD = 'calibration: stream y=2x, inputs not in cache'
COLD_INPUT_BYTES = 134217728
AA_INERT_OPTION = 'xla_dump_max_hlo_modules'
CPU_CLOCK_MAX_STEP_NS = 10000

# the plan this claim ran
plan = types.SimpleNamespace(
    program='pytest_dumpref.xla.cpu.calibrate:k_scale',
    args=(('float32', (16, 1024)),),
    variants={
        'stream 16': {},
        'stream 32': {},
        'stream 64': {},
        'stream 128': {},
        'stream 256': {},
        'stream 512': {},
        'stream 1024': {},
        'stream 1536': {},
        'stream 2048': {},
        'stream 3072': {},
        'stream 4096': {},
        'fill 256': {},
        'fill 1024': {},
        'fill 2048': {},
        'fill 4096': {},
        'fill 6144': {},
        'mul 256': {},
        'exp 256': {},
        'cheap 256': {},
        'mul 1024': {},
        'exp 1024': {},
        'cheap 1024': {},
        'mul 2048': {},
        'exp 2048': {},
        'cheap 2048': {},
        'fill 8192': {},
        'short-run 1024': {},
        'short-run 1536': {},
        'short-run 2048': {},
        'short-run 3072': {},
        'short-run 4096': {},
        'short-run 6144': {},
        'age': {},
        'age spin': {},
        'age base': {},
        'age base spin': {},
        'chain fused': {},
        'chain unfused': {'xla_disable_hlo_passes': 'fusion,fusion-wrapper,dot-library-rewriter'},
        'compute cheap': {},
        'compute exp': {},
        'compute tanh': {},
        'compute log': {},
        'compute divide': {},
        'compute sqrt': {},
        'compute rsqrt': {},
        'compute select': {},
        'compute integer': {},
        'compute rowsum': {},
        'compute colsum': {},
        'compute transpose': {},
        'compute transpose alone': {'xla_disable_hlo_passes': 'fusion'},
        'compute fill scalar': {},
        'compute cheap scalar': {},
        'compute tanh scalar': {},
        'compute cheap 1024': {},
        'compute exp 1024': {},
        'compute tanh 1024': {},
        'compute log 1024': {},
        'compute divide 1024': {},
        'compute sqrt 1024': {},
        'compute rsqrt 1024': {},
        'compute select 1024': {},
        'compute integer 1024': {},
        'compute rowsum 1024': {},
        'compute colsum 1024': {},
        'compute transpose 1024': {},
        'compute transpose alone 1024': {'xla_disable_hlo_passes': 'fusion'},
        'compute fill scalar 1024': {},
        'compute cheap scalar 1024': {},
        'compute tanh scalar 1024': {},
        'one-op 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op ragged 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op unary 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op select 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op compare 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op exp alone 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op tanh alone 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op divide alone 8': {'xla_disable_hlo_passes': 'fusion,algsimp'},
        'one-op sqrt alone 8': {'xla_disable_hlo_passes': 'fusion'},
        'one-op 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op ragged 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op unary 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op select 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op compare 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op exp alone 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op tanh alone 32': {'xla_disable_hlo_passes': 'fusion'},
        'one-op divide alone 32': {'xla_disable_hlo_passes': 'fusion,algsimp'},
        'one-op sqrt alone 32': {'xla_disable_hlo_passes': 'fusion'},
        'compute dot': {},
        'compute conv': {},
        'fused': {},
        'fused, compiled again (A/A)': {},
        'without fusion': {'xla_disable_hlo_passes': 'fusion'},
    },
    stream_shape=(1024, 1024),
    rounds=20,
    calls_per_round=10,
    warmup_calls=3,
    seed=0,
    cpu=None,
    programs={
        'stream 16': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (16, 1024)),)),
        'stream 32': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (32, 1024)),)),
        'stream 64': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (64, 1024)),)),
        'stream 128': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (128, 1024)),)),
        'stream 256': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (256, 1024)),)),
        'stream 512': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (512, 1024)),)),
        'stream 1024': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (1024, 1024)),)),
        'stream 1536': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (1536, 1024)),)),
        'stream 2048': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (2048, 1024)),)),
        'stream 3072': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (3072, 1024)),)),
        'stream 4096': ('pytest_dumpref.xla.cpu.calibrate:k_scale', (('float32', (4096, 1024)),)),
        'fill 256': ('pytest_dumpref.xla.cpu.calibrate:k_fill', (('float32', (256,)),)),
        'fill 1024': ('pytest_dumpref.xla.cpu.calibrate:k_fill', (('float32', (1024,)),)),
        'fill 2048': ('pytest_dumpref.xla.cpu.calibrate:k_fill', (('float32', (2048,)),)),
        'fill 4096': ('pytest_dumpref.xla.cpu.calibrate:k_fill', (('float32', (4096,)),)),
        'fill 6144': ('pytest_dumpref.xla.cpu.calibrate:k_fill', (('float32', (6144,)),)),
        'mul 256': ('pytest_dumpref.xla.cpu.calibrate:k_mul', (('float32', (256, 1024)), ('float32', (256, 1024)))),
        'exp 256': ('pytest_dumpref.xla.cpu.calibrate:k_exp_alone', (('float32', (256, 1024)),)),
        'cheap 256': ('pytest_dumpref.xla.cpu.calibrate:k_cheap', (('float32', (256, 1024)),)),
        'mul 1024': ('pytest_dumpref.xla.cpu.calibrate:k_mul', (('float32', (1024, 1024)), ('float32', (1024, 1024)))),
        'exp 1024': ('pytest_dumpref.xla.cpu.calibrate:k_exp_alone', (('float32', (1024, 1024)),)),
        'cheap 1024': ('pytest_dumpref.xla.cpu.calibrate:k_cheap', (('float32', (1024, 1024)),)),
        'mul 2048': ('pytest_dumpref.xla.cpu.calibrate:k_mul', (('float32', (2048, 1024)), ('float32', (2048, 1024)))),
        'exp 2048': ('pytest_dumpref.xla.cpu.calibrate:k_exp_alone', (('float32', (2048, 1024)),)),
        'cheap 2048': ('pytest_dumpref.xla.cpu.calibrate:k_cheap', (('float32', (2048, 1024)),)),
        'fill 8192': ('pytest_dumpref.xla.cpu.calibrate:k_fill', (('float32', (8192,)),)),
        'short-run 1024': ('pytest_dumpref.xla.cpu.calibrate:k_short_run', (('float32', (1024, 256)), ('float32', (1024, 256)), ('float32', (1024, 256)), ('float32', (1024, 256)))),
        'short-run 1536': ('pytest_dumpref.xla.cpu.calibrate:k_short_run', (('float32', (1536, 256)), ('float32', (1536, 256)), ('float32', (1536, 256)), ('float32', (1536, 256)))),
        'short-run 2048': ('pytest_dumpref.xla.cpu.calibrate:k_short_run', (('float32', (2048, 256)), ('float32', (2048, 256)), ('float32', (2048, 256)), ('float32', (2048, 256)))),
        'short-run 3072': ('pytest_dumpref.xla.cpu.calibrate:k_short_run', (('float32', (3072, 256)), ('float32', (3072, 256)), ('float32', (3072, 256)), ('float32', (3072, 256)))),
        'short-run 4096': ('pytest_dumpref.xla.cpu.calibrate:k_short_run', (('float32', (4096, 256)), ('float32', (4096, 256)), ('float32', (4096, 256)), ('float32', (4096, 256)))),
        'short-run 6144': ('pytest_dumpref.xla.cpu.calibrate:k_short_run', (('float32', (6144, 256)), ('float32', (6144, 256)), ('float32', (6144, 256)), ('float32', (6144, 256)))),
        'age': ('pytest_dumpref.xla.cpu.calibrate:k_age', (('float32', (32, 1024)), ('float32', (1024, 1024)))),
        'age spin': ('pytest_dumpref.xla.cpu.calibrate:k_age_spin', (('float32', (32, 1024)),)),
        'age base': ('pytest_dumpref.xla.cpu.calibrate:k_age_base', (('float32', (32, 1024)), ('float32', (1024, 1024)))),
        'age base spin': ('pytest_dumpref.xla.cpu.calibrate:k_age_base_spin', (('float32', (32, 1024)),)),
        'chain fused': ('pytest_dumpref.xla.cpu.calibrate:k_chain', (('float32', (4, 1024)),)),
        'chain unfused': ('pytest_dumpref.xla.cpu.calibrate:k_chain', (('float32', (4, 1024)),)),
        'compute cheap': ('pytest_dumpref.xla.cpu.calibrate:k_cheap', (('float32', (128, 1024)),)),
        'compute exp': ('pytest_dumpref.xla.cpu.calibrate:k_exp', (('float32', (128, 1024)),)),
        'compute tanh': ('pytest_dumpref.xla.cpu.calibrate:k_tanh', (('float32', (128, 1024)),)),
        'compute log': ('pytest_dumpref.xla.cpu.calibrate:k_log', (('float32', (128, 1024)),)),
        'compute divide': ('pytest_dumpref.xla.cpu.calibrate:k_divide', (('float32', (128, 1024)), ('float32', (128, 1024)))),
        'compute sqrt': ('pytest_dumpref.xla.cpu.calibrate:k_sqrt', (('float32', (128, 1024)),)),
        'compute rsqrt': ('pytest_dumpref.xla.cpu.calibrate:k_rsqrt', (('float32', (128, 1024)),)),
        'compute select': ('pytest_dumpref.xla.cpu.calibrate:k_select', (('float32', (128, 1024)), ('float32', (128, 1024)))),
        'compute integer': ('pytest_dumpref.xla.cpu.calibrate:k_integer', (('int32', (128, 1024)), ('int32', (128, 1024)))),
        'compute rowsum': ('pytest_dumpref.xla.cpu.calibrate:k_rowsum', (('float32', (128, 1024)),)),
        'compute colsum': ('pytest_dumpref.xla.cpu.calibrate:k_colsum', (('float32', (128, 1024)),)),
        'compute transpose': ('pytest_dumpref.xla.cpu.calibrate:k_transpose', (('float32', (128, 1024)), ('float32', (1024, 128)))),
        'compute transpose alone': ('pytest_dumpref.xla.cpu.calibrate:k_transpose_alone', (('float32', (128, 1024)),)),
        'compute fill scalar': ('pytest_dumpref.xla.cpu.calibrate:k_fill_scalar', (('float32', (32,)), ('float32', (4096, 32)))),
        'compute cheap scalar': ('pytest_dumpref.xla.cpu.calibrate:k_cheap_scalar', (('float32', (4096, 32)), ('float32', (32,)))),
        'compute tanh scalar': ('pytest_dumpref.xla.cpu.calibrate:k_tanh_scalar', (('float32', (128, 1024)),)),
        'compute cheap 1024': ('pytest_dumpref.xla.cpu.calibrate:k_cheap', (('float32', (1024, 1024)),)),
        'compute exp 1024': ('pytest_dumpref.xla.cpu.calibrate:k_exp', (('float32', (1024, 1024)),)),
        'compute tanh 1024': ('pytest_dumpref.xla.cpu.calibrate:k_tanh', (('float32', (1024, 1024)),)),
        'compute log 1024': ('pytest_dumpref.xla.cpu.calibrate:k_log', (('float32', (1024, 1024)),)),
        'compute divide 1024': ('pytest_dumpref.xla.cpu.calibrate:k_divide', (('float32', (1024, 1024)), ('float32', (1024, 1024)))),
        'compute sqrt 1024': ('pytest_dumpref.xla.cpu.calibrate:k_sqrt', (('float32', (1024, 1024)),)),
        'compute rsqrt 1024': ('pytest_dumpref.xla.cpu.calibrate:k_rsqrt', (('float32', (1024, 1024)),)),
        'compute select 1024': ('pytest_dumpref.xla.cpu.calibrate:k_select', (('float32', (1024, 1024)), ('float32', (1024, 1024)))),
        'compute integer 1024': ('pytest_dumpref.xla.cpu.calibrate:k_integer', (('int32', (1024, 1024)), ('int32', (1024, 1024)))),
        'compute rowsum 1024': ('pytest_dumpref.xla.cpu.calibrate:k_rowsum', (('float32', (1024, 1024)),)),
        'compute colsum 1024': ('pytest_dumpref.xla.cpu.calibrate:k_colsum', (('float32', (1024, 1024)),)),
        'compute transpose 1024': ('pytest_dumpref.xla.cpu.calibrate:k_transpose', (('float32', (1024, 1024)), ('float32', (1024, 1024)))),
        'compute transpose alone 1024': ('pytest_dumpref.xla.cpu.calibrate:k_transpose_alone', (('float32', (1024, 1024)),)),
        'compute fill scalar 1024': ('pytest_dumpref.xla.cpu.calibrate:k_fill_scalar', (('float32', (32,)), ('float32', (32768, 32)))),
        'compute cheap scalar 1024': ('pytest_dumpref.xla.cpu.calibrate:k_cheap_scalar', (('float32', (32768, 32)), ('float32', (32,)))),
        'compute tanh scalar 1024': ('pytest_dumpref.xla.cpu.calibrate:k_tanh_scalar', (('float32', (1024, 1024)),)),
        'one-op 8': ('pytest_dumpref.xla.cpu.calibrate:k_mul_chain', (('float32', (8, 1024)), ('float32', (8, 1024)))),
        'one-op ragged 8': ('pytest_dumpref.xla.cpu.calibrate:k_mul_chain', (('float32', (8, 1032)), ('float32', (8, 1032)))),
        'one-op unary 8': ('pytest_dumpref.xla.cpu.calibrate:k_unary_chain', (('float32', (8, 1024)),)),
        'one-op select 8': ('pytest_dumpref.xla.cpu.calibrate:k_select_chain', (('bool', (8, 1024)), ('bool', (8, 1024)), ('float32', (8, 1024)), ('float32', (8, 1024)))),
        'one-op compare 8': ('pytest_dumpref.xla.cpu.calibrate:k_compare_chain', (('float32', (8, 1024)), ('float32', (8, 1024)), ('float32', (8, 1024)))),
        'one-op exp alone 8': ('pytest_dumpref.xla.cpu.calibrate:k_exp_chain', (('float32', (8, 1024)),)),
        'one-op tanh alone 8': ('pytest_dumpref.xla.cpu.calibrate:k_tanh_chain', (('float32', (8, 1024)),)),
        'one-op divide alone 8': ('pytest_dumpref.xla.cpu.calibrate:k_divide_chain', (('float32', (8, 1024)), ('float32', (8, 1024)))),
        'one-op sqrt alone 8': ('pytest_dumpref.xla.cpu.calibrate:k_sqrt_chain', (('float32', (8, 1024)),)),
        'one-op 32': ('pytest_dumpref.xla.cpu.calibrate:k_mul_chain', (('float32', (32, 1024)), ('float32', (32, 1024)))),
        'one-op ragged 32': ('pytest_dumpref.xla.cpu.calibrate:k_mul_chain', (('float32', (32, 1032)), ('float32', (32, 1032)))),
        'one-op unary 32': ('pytest_dumpref.xla.cpu.calibrate:k_unary_chain', (('float32', (32, 1024)),)),
        'one-op select 32': ('pytest_dumpref.xla.cpu.calibrate:k_select_chain', (('bool', (32, 1024)), ('bool', (32, 1024)), ('float32', (32, 1024)), ('float32', (32, 1024)))),
        'one-op compare 32': ('pytest_dumpref.xla.cpu.calibrate:k_compare_chain', (('float32', (32, 1024)), ('float32', (32, 1024)), ('float32', (32, 1024)))),
        'one-op exp alone 32': ('pytest_dumpref.xla.cpu.calibrate:k_exp_chain', (('float32', (32, 1024)),)),
        'one-op tanh alone 32': ('pytest_dumpref.xla.cpu.calibrate:k_tanh_chain', (('float32', (32, 1024)),)),
        'one-op divide alone 32': ('pytest_dumpref.xla.cpu.calibrate:k_divide_chain', (('float32', (32, 1024)), ('float32', (32, 1024)))),
        'one-op sqrt alone 32': ('pytest_dumpref.xla.cpu.calibrate:k_sqrt_chain', (('float32', (32, 1024)),)),
        'compute dot': ('pytest_dumpref.xla.cpu.calibrate:k_dot', (('float32', (512, 512)), ('float32', (512, 512)))),
        'compute conv': ('pytest_dumpref.xla.cpu.calibrate:k_conv', (('float32', (4, 32, 32, 64)), ('float32', (3, 3, 64, 64)))),
        'fused': ('pytest_dumpref.examples:softmax', (('float32', (1024, 1024)),)),
        'fused, compiled again (A/A)': ('pytest_dumpref.examples:softmax', (('float32', (1024, 1024)),)),
        'without fusion': ('pytest_dumpref.examples:softmax', (('float32', (1024, 1024)),)),
    },
    cold_stream=True,
    passes=5,
)
plan.program_of = lambda variant: plan.programs.get(variant, (plan.program, plan.args))

class TimingError(RuntimeError):
    pass


def resolve_program(ref):
    """'module:function' -> the function of that name in program.py, beside this file (the
    worker of pytest-dumpref imports the module itself: timing.resolve_program)."""
    import program
    fn = program
    for part in ref.partition(':')[2].split('.'):
        fn = getattr(fn, part)
    return fn


# The tables' 'us/call' of a variant: the median of its samples (per round, its fastest
# call's CPU time, or wall time where call_timer says so) ± median_noise(samples)
# (statistic.py lists it).


def _pin(cpu: int | None) -> int:
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu is None else cpu
    if chosen not in allowed:
        raise TimingError(f"cannot pin to CPU {chosen}: this process may use {allowed}")
    os.sched_setaffinity(0, {chosen})
    return chosen


def fill(rng, dtype: str, shape: tuple):
    """A program's argument: standard normal for floats; for integer types (indices such as
    labels) uniform in [0, 1000)."""
    import numpy as np
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(0, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _stream(x):
    return x * 2.0


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


print(json.dumps(_worker(plan)))
