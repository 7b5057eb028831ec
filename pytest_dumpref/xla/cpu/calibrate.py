"""This machine's rates for the kernel cost model (``cost_model.py``), measured once.

``calibrate()`` times a set of micro-kernels in one run of ``pytest_dumpref.timing``'s pinned,
single-threaded, interleaved worker (the same method, the same malloc settings and the same
process setup as the timing claims, so that the rates are those the timed programs run at),
and turns the times into the rates of :class:`cost_model.Rates`:

* **dispatch**: ``timing``'s 8-element kernel is the cost of a call that PJRT's CPU client
  runs on the calling thread.  A program with more than a few hundred flops is handed to
  its worker thread instead, which on one pinned core costs a thread switch: ``x * 2`` over
  256 elements took 6 us a call, over 1,024 elements 15 us, while ``exp`` (0 flops in XLA's
  count, transcendentals only) over 16,384 elements stayed near the 8-element kernel's time
  plus its exps.  That dispatch is ``timing``'s worker-thread kernel, ``x * 2`` over 2,048
  elements (``timing.DISPATCH_WORKER``).
* **launch**: one more kernel in a program: a chain of 16 unfused elementwise kernels over
  f32[4, 1024] against the same chain fused into one (all in L1).
* **the memory curve**: ``y = 2 * x`` over f32[rows, 1024] at rows 16 to 4096.  Called again
  and again on the same input, each byte it reads or writes was last touched 2 x (array
  bytes) ago: the point ``(reuse distance 2s, seconds per byte)``.  Reads and writes cost the
  same per byte at the same reuse distance within the measurements' noise (a write-only
  broadcast and a two-input multiply, timed in the same rounds, are the model's check
  kernels, printed by ``calibrate``), so one curve serves both.  Beyond the largest point the
  curve takes the cold stream's rate (``timing``'s stream over 32 arrays in turn: inputs
  never in cache).
* **the memory's age**: the stream over f32[1024, 1024] in one program with a kernel that
  computes for milliseconds over 128 KiB (``AGE_SPIN`` cheap ops an element of f32[32, 1024],
  in the level-2 cache), against the same with a kernel of one op: the stream's cost a byte
  rises with the time between its calls as if its memory were further away, and the curve
  read backwards gives how much further: the bytes of the shared cache that the machine's
  other tenants take a second (``cost_model``'s docstring says what was measured).
* **page faults**: a 32 MiB broadcast (glibc maps blocks of 32 MiB and more afresh each
  call, ``timing.ALLOCATOR_ENV``): its time beyond the curve's, per 4 KiB page.
* **compute**: per element and operation class, from kernels made compute-bound by
  chaining the class's operation (cheap float ops, compare/select, integer ops) or by the
  operation's own cost (exp, tanh, log, divide, sqrt, rsqrt, each beside a cheap op, so that
  XLA emits it in a loop fusion of several instructions, as in the programs' fused kernels;
  a transposing copy in ``x.T + y``), each timed over f32[128, 1024] and f32[1024, 1024]:
  the rate is the slope between the two (``rates_from`` says why); the YNNPACK reductions
  XLA:CPU calls, the same slope less each size's read at the memory curve (their reading is
  the memory term's);
  dot and convolution per flop, less the dispatch.
* **one-op loop kernels**: a chain of ``ONE_OP_CHAIN`` multiplies ``x = x * y`` compiled
  without the fusion pass (so many one-op kernels a call) over f32[8, 1024] and f32[32, 1024]
  (every buffer in half of the level-2 cache), the slope between the two per element, of
  their fastest rounds (a chain's slow mode can last most of a run: ``rates_from``): the
  floor of a kernel the fusion-wrapper made of one elementwise instruction of two operands
  (``cost_model``'s docstring says why); and so, on chains of their own, the floors of
  ``cost_model.ONE_OP_KINDS`` (a negate or a floor; a select; a compare: ``ONE_OP_KIND_ARGS``);
  the same chain over rows of ``ROW + RAGGED_EXTRA`` floats, not a whole number of the loop's
  tiles, gives what such rows add to an element (``cost_model.RAGGED``);
  and the operations of ``cost_model.ALONE`` alone, each in such a kernel (``<class> (one-op
  loop)``): exp, tanh, divide and sqrt on chains of their own in the level 2, as the floors
  (``k_exp_chain`` says why), and a transposing copy (compiled without the fusion pass, as
  the unfused programs' ``wrapped_copy`` is) as the compute classes are measured.
* **the same speed for every kernel**: the plan spreads each kernel's calls of a round over
  ``passes`` passes through the round (``timing.TimingPlan.passes``; the worker says why:
  this machine's vector units run at two speeds, in stretches longer than ten calls).

Nothing here imports pytest.  The micro-kernels are the module's ``k_*`` functions, so the
worker (a fresh interpreter) imports them by name.
"""
from __future__ import annotations

import functools
import json
import math
import os
import statistics
import time
import types
from collections.abc import Mapping
from pathlib import Path

from . import cost_model
from ..naming import BACKENDS
from .kernel_code import facts, kernel_objects, read_code, scalar_kernels, unread_why, vector_accesses

F32 = "float32"
ME = "pytest_dumpref.xla.cpu.calibrate"
ROW = 1024                                    # every calibration array is f32[rows, 1024]
CURVE_ROWS = (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
COMPUTE_ROWS = 128                            # 512 KiB an array: input and output in L2 (1 MiB)
COMPUTE_ROWS_LARGE = 1024                     # 4 MiB an array, the size of the programs studied
# The chain's x, y and 2 temporaries: 128 KiB at 8 rows, 512 KiB at 32, half the level 2 of
# an AMD EPYC (1 MiB).  At 64 rows they filled it (1 MiB), and in two of five runs of the
# claim's plan the chain ran in a slow mode for most rounds (rates_from's comment).
ONE_OP_ROWS = (8, 32)
ONE_OP_CHAIN = 16                             # one-op kernels a call (k_mul_chain)
# The ragged rows' chain (cost_model.RAGGED): rows of ROW + 8 floats, half a tile over
RAGGED_EXTRA = 8
# the chains of the one-op floors of cost_model.ONE_OP_KINDS: their arguments' dtypes
ONE_OP_KIND_ARGS = {"unary": (F32,), "select": ("bool", "bool", F32, F32), "compare": (F32, F32, F32)}
CHECK_ROWS = (256, 1024, 2048)
# The short-run kernel's sizes (k_short_run): 8 to 48 MiB touched a call, from where its
# runs began to cost more than a stream's (16 MiB and beyond on an AMD EPYC) to memory
SHORT_RUN_ROWS = (1024, 1536, 2048, 3072, 4096, 6144)
SHORT_RUN_PARTS = 4
WRITE_ROWS = (256, 1024, 2048, 4096, 6144)   # below 32 MiB: from the heap, never faulted
FAULT_ROWS = 8192                             # 32 MiB: mapped afresh every call by glibc
AGE_SPIN = 1000                               # the age kernels' spin: cheap ops an element
AGE_SPIN_ROWS = 32
CHAIN = 16
# A transposing copy alone is the fusion-wrapper's one-op kernel only when the fusion pass
# is off: with it, XLA emits x.T as a transpose_copy_fusion of two instructions (a loop
# fusion), which the unfused programs' wrapped_copy is not.
ALONE_OPTIONS = {"transpose": {"xla_disable_hlo_passes": "fusion"}}
# The operations alone measured on chains in the level 2 (k_exp_chain: why); the transposing
# copy's rate is its cost across rows, which it pays only on arrays larger than the level 2
ALONE_CHAINS = tuple(c for c in cost_model.ALONE if c != "transpose")
# (arguments, passes left out of its compile) of a chain that is not (1, "fusion"): the
# divide's takes a divisor, and is compiled without algsimp too (k_divide_chain: why)
ALONE_CHAIN_COMPILE = {"divide": (2, "fusion,algsimp")}
SMALL_DISTANCE = 2 ** 20              # the L2 of one core on the machines seen (1 MiB)


# ---- the micro-kernels (run in the timing worker) -------------------------------------------

def k_scale(x):
    return x * 2.0


def k_fill(v):
    import jax.numpy as jnp
    return jnp.broadcast_to(v[:, None], (v.shape[0], ROW)) + 0.0


def k_mul(x, y):
    return x * y


def k_mul_chain(x, y):
    # Compiled without the fusion pass: ONE_OP_CHAIN one-op kernels (wrapped_multiply).  One
    # x * y a call is not enough: on an AMD EPYC (1 MiB L2) its whole call's slope per element
    # between 8 and 64 rows came out 0.14, 0.23 and 0.21 ns between successive pairs in one
    # run, while this chain's was 0.124-0.135 at every pair from 8 to 256 rows, as jax's
    # profiler timed the kernel itself (0.128-0.142): the difference the slope rests on is 16
    # times as large, and whatever else a call costs that moves with its size is paid once.
    for _ in range(ONE_OP_CHAIN):
        x = x * y
    return x


def k_unary_chain(x):
    # The same floor for a one-op kernel of one operand: negate and floor in turn (XLA folds
    # a negate of a negate, not a floor of one), ONE_OP_CHAIN kernels a call.
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN // 2):
        x = jnp.floor(-x)
    return x


def k_compare_chain(x, y, z):
    # A compare's floor: ONE_OP_CHAIN compares (each writes a mask of one byte an element),
    # each with the select that reads its mask; the selects' own floor (k_select_chain) is
    # taken out of the slope.
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.where(x > y, z, x)
    return x


def k_select_chain(p, q, x, y):
    # A select's floor: ONE_OP_CHAIN selects on two masks in turn (XLA folds a select on the
    # mask of the select it reads).
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN // 2):
        x = jnp.where(p, x, y)
        x = jnp.where(q, y, x)
    return x


def _spin(c, n):
    for _ in range(n):
        c = c * 1.0001 + 0.5                  # one loop kernel of 2n cheap ops an element
    return c


def k_age(c, x):
    # the stream y = 2x with AGE_SPIN ops an element of c beside it, in one call: x's and y's
    # memory is as many milliseconds older at each call as the spin takes
    return _spin(c, AGE_SPIN), x * 2.0


def k_age_spin(c):
    return _spin(c, AGE_SPIN)


def k_age_base(c, x):
    return _spin(c, 1), x * 2.0


def k_age_base_spin(c):
    return _spin(c, 1)


def k_cheap(x):
    for _ in range(16):                       # 32 float ops an element, nothing to fold
        x = x * 1.0001 + 0.5
    return x


def k_short_run(*parts):
    """SHORT_RUN_PARTS f32[rows, 256] side by side: XLA:CPU copies each operand's row with a
    memmove of 1 KiB, in runs shorter than a page (cost_model.short_runs), the bytes and
    distance of the stream over f32[rows, 1024]."""
    import jax.numpy as jnp
    return jnp.concatenate(parts, axis=1)


def k_chain(x):
    """16 dependent elementwise ops: 16 kernels when the fusion passes are off."""
    for k in range(CHAIN):
        x = x * 1.0001 if k % 2 else x + 0.5
    return x


# Each operation class is timed twice: beside a cheap op, so that XLA emits it in a loop
# fusion of several instructions as it does in the programs' fused kernels (k_<class>), and
# alone, as the fusion-wrapper leaves it in a kernel of its own (k_<class>_alone).  XLA:CPU
# emits the two by different paths (cost_model's docstring), which cost differently.

def k_exp(x):
    import jax.numpy as jnp
    return jnp.exp(x) + 0.5                   # add: 1 cheap op


def k_tanh(x):
    import jax.numpy as jnp
    return jnp.tanh(x) + 0.5                  # add: 1 cheap op


def k_log(x):
    import jax.numpy as jnp
    return jnp.log(jnp.abs(x) + 1.0)          # abs and add: 2 cheap ops beside the log


def k_divide(x, y):
    return x / y + 0.5                        # add: 1 cheap op


def k_sqrt(x):
    import jax.numpy as jnp
    return jnp.sqrt(jnp.abs(x))               # abs: 1 cheap op


def k_rsqrt(x):
    import jax
    import jax.numpy as jnp
    return jax.lax.rsqrt(jnp.abs(x) + 1.0)    # abs, add: 2 cheap ops


def k_exp_alone(x):
    import jax.numpy as jnp
    return jnp.exp(x)


# The operations of cost_model.ALONE but the transposing copy, each as a chain of ONE_OP_CHAIN
# one-op kernels a call (compiled without the fusion pass) over ONE_OP_ROWS, every buffer in
# the level 2, as the one-op floors are: the slope is then the operation's kernel alone, its
# memory left to the memory term.  Until 2026-12-07 the rate was the slope of one such kernel
# between 128 and 1,024 rows, which holds its traffic in the level 3 where the operation does
# not hide it: on an AMD EPYC a divide cost 242 ps an element so in a calibration (jaxlib
# 0.10.2; 144 in a plain loop of calls) and 145 in the level-2 chain; on jaxlib 0.12.0.1, 190
# (157) and 110, where the unfused programs' wrapped_divide over f32[1024, 1024] ran 109-124
# us (perf, in a run of the claim across programs) and the slope priced it at 216.  exp, tanh
# and sqrt cost the same either way (in a plain loop on 0.10.2: 392 ps an element in the
# chain and 394 as the slope, 342 and 346, 175 and 175), as operations that hide their memory.

def k_exp_chain(x):
    # exp(exp(x)) overflows to inf after a few links: XLA's exp clamps its argument and runs
    # the same instructions for any value (a chain of exp(-x), whose values stay finite, less
    # its negates, cost the same: 391 and 392 ps an element)
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.exp(x)
    return x


def k_tanh_chain(x):
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.tanh(x)
    return x


def k_divide_chain(x, y):
    # Compiled without algsimp too, which makes (x / y) / y a division by y * y: one divide
    # and fifteen multiplies.  Standard normal y: sixteen divisions move |x| by e^10 or so,
    # far from overflow and denormals.
    for _ in range(ONE_OP_CHAIN):
        x = x / y
    return x


def k_sqrt_chain(x):
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.sqrt(x)                       # NaN for negative x, at the same speed
    return x


def k_transpose(x, y):
    return x.T + y                            # XLA's copy_add_fusion: x read across its rows


def k_transpose_alone(x):
    return x.T                                # compiled without fusion (ALONE_OPTIONS): wrapped_copy




# Loop kernels that LLVM leaves scalar (cost_model's docstring), for the rates of a scalar
# loop: calibrate checks in the code its own compile dumps that they are (kernel_code.scalar_kernels).

def k_fill_scalar(b, x):
    import jax.numpy as jnp
    return jnp.broadcast_to(b, x.shape)       # x f32[n, 32] gives the shape only: no operation


def k_cheap_scalar(x, b):
    import jax.numpy as jnp
    return jnp.maximum(x + b, 0.0)            # x f32[n, 32], b f32[32]: 2 cheap ops an element


def k_tanh_scalar(x):
    import jax.numpy as jnp
    return jnp.pad(jnp.tanh(x), ((0, 0), (0, 8))) + 0.5    # the tanh inside the pad's bounds test


SCALAR_MINOR = 32


def _scalar_args(name: str, rows: int) -> tuple:
    narrow = (F32, (rows * ROW // SCALAR_MINOR, SCALAR_MINOR))
    if name == "cheap":
        return (narrow, (F32, (SCALAR_MINOR,)))
    if name == "fill":
        return ((F32, (SCALAR_MINOR,)), narrow)
    return (_rows(rows),)


SCALAR_KERNELS = ("fill",) + cost_model.SCALAR     # fill: a scalar loop's iteration, alone


def k_select(x, y):
    import jax.numpy as jnp
    for k in range(8):                        # 8 compare + 8 select an element
        x = jnp.where(x > y, y, x) if k % 2 else jnp.where(y > x, x, y)
    return x


def k_integer(x, y):
    for _ in range(4):                        # 3 integer ops each: 12 an element
        x = (x * 3 + y) ^ y
    return x


def k_rowsum(x):
    import jax.numpy as jnp
    return jnp.sum(x, axis=1)


def k_colsum(x):
    import jax.numpy as jnp
    return jnp.sum(x, axis=0)


def k_dot(a, b):
    return a @ b


def k_conv(x, w):
    import jax
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _rows(n):
    return (F32, (n, ROW))


def _variants() -> dict:
    """variant name -> (program, args, compiler options)."""
    v: dict[str, tuple] = {}
    for r in CURVE_ROWS:
        v[f"stream {r}"] = ("k_scale", (_rows(r),), {})
    for r in WRITE_ROWS:
        v[f"fill {r}"] = ("k_fill", ((F32, (r,)),), {})
    for r in CHECK_ROWS:
        v[f"mul {r}"] = ("k_mul", (_rows(r), _rows(r)), {})
        v[f"exp {r}"] = ("k_exp_alone", (_rows(r),), {})
        v[f"cheap {r}"] = ("k_cheap", (_rows(r),), {})
    v[f"fill {FAULT_ROWS}"] = ("k_fill", ((F32, (FAULT_ROWS,)),), {})
    for r in SHORT_RUN_ROWS:
        v[f"short-run {r}"] = ("k_short_run", ((F32, (r, ROW // SHORT_RUN_PARTS)),) * SHORT_RUN_PARTS, {})
    spin = (F32, (AGE_SPIN_ROWS, ROW))
    for name in ("age", "age base"):
        fn = name.replace(" ", "_")
        v[name] = (f"k_{fn}", (spin, _rows(1024)), {})
        v[f"{name} spin"] = (f"k_{fn}_spin", (spin,), {})
    v["chain fused"] = ("k_chain", ((F32, (4, ROW)),), {})
    v["chain unfused"] = ("k_chain", ((F32, (4, ROW)),),
                          {"xla_disable_hlo_passes": "fusion,fusion-wrapper,dot-library-rewriter"})
    for rows, suffix in ((COMPUTE_ROWS, ""), (COMPUTE_ROWS_LARGE, f" {COMPUTE_ROWS_LARGE}")):
        c = _rows(rows)
        for name, args in (("cheap", (c,)), ("exp", (c,)), ("tanh", (c,)), ("log", (c,)), ("divide", (c, c)),
                           ("sqrt", (c,)), ("rsqrt", (c,)), ("select", (c, c)),
                           ("integer", (("int32", (rows, ROW)),) * 2), ("rowsum", (c,)), ("colsum", (c,)),
                           ("transpose", (c, (F32, (ROW, rows))))):
            v[f"compute {name}{suffix}"] = (f"k_{name}", args, {})
        v[f"compute transpose alone{suffix}"] = ("k_transpose_alone", (c,), ALONE_OPTIONS["transpose"])
        for name in SCALAR_KERNELS:
            v[f"compute {name} scalar{suffix}"] = (f"k_{name}_scalar", _scalar_args(name, rows), {})
    for r in ONE_OP_ROWS:
        v[f"one-op {r}"] = ("k_mul_chain", (_rows(r), _rows(r)), {"xla_disable_hlo_passes": "fusion"})
        ragged = (F32, (r, ROW + RAGGED_EXTRA))
        v[f"one-op ragged {r}"] = ("k_mul_chain", (ragged, ragged), {"xla_disable_hlo_passes": "fusion"})
        for kind, dtypes in ONE_OP_KIND_ARGS.items():
            v[f"one-op {kind} {r}"] = (f"k_{kind}_chain", tuple((t, (r, ROW)) for t in dtypes),
                                       {"xla_disable_hlo_passes": "fusion"})
        for cls in ALONE_CHAINS:
            arity, passes = ALONE_CHAIN_COMPILE.get(cls, (1, "fusion"))
            v[f"one-op {cls} alone {r}"] = (f"k_{cls}_chain", ((F32, (r, ROW)),) * arity,
                                            {"xla_disable_hlo_passes": passes})
    v["compute dot"] = ("k_dot", ((F32, (512, 512)), (F32, (512, 512))), {})
    v["compute conv"] = ("k_conv", ((F32, (4, 32, 32, 64)), (F32, (3, 3, 64, 64))), {})
    return v


def plan_variants() -> tuple:
    """``(variants, programs)`` of the calibration kernels, to merge into a ``TimingPlan``
    of one's own: the rates are then measured in the same rounds as the programs they
    predict, under the same load (``rates_from`` reads them from that run's result)."""
    variants = _variants()
    return ({k: o for k, (_, _, o) in variants.items()},
            {k: (f"{ME}:{p}", a) for k, (p, a, _) in variants.items()})


def plan(rounds: int = 10, calls_per_round: int = 5, seed: int = 0, *, variants: dict | None = None,
         programs: dict | None = None, timeout_s: float = 120, passes: int = 5):
    """A ``TimingPlan`` of the calibration kernels (with ``cold_stream``), plus any
    ``variants`` / ``programs`` of the caller's, timed in the same interleaved rounds."""
    from ...timing import TimingPlan
    cv, cp = plan_variants()
    first = next(iter(cp.values()))
    return TimingPlan(program=first[0], args=first[1],
                      variants={**cv, **(variants or {})}, programs={**cp, **(programs or {})},
                      stream_shape=(1024, ROW), rounds=rounds, calls_per_round=calls_per_round,
                      warmup_calls=3, seed=seed, cold_stream=True, timeout_s=timeout_s, passes=passes)


# ---- from times to rates --------------------------------------------------------------------

@functools.lru_cache(maxsize=128)
def _census(hlo_text: str) -> "cost_model.ProgramCost":
    """The model's own view of a calibration kernel (its kernels, op counts, accesses); each
    kernel's module is read once however many rates it enters."""
    return cost_model.analyse(hlo_text, buffer_assignment_text=None, source="calibration kernel")


def rates_from(result, vectorised: Mapping[str, str] | None = None) -> "cost_model.Rates":
    """Rates from a ``TimingResult`` of :func:`plan`.  ``vectorised``: the scalar-loop
    classes whose calibration kernel this XLA vectorises, with why
    (:func:`vectorised_scalar_kernels`, which compiles them: None where jax is not at hand,
    as in the listing, which then takes them to be scalar, as they are on jaxlib 0.10)."""
    from ... import timing

    vectorised = vectorised or {}
    v = result.variants
    med = {k: x.median for k, x in v.items()}
    inline = med[timing.DISPATCH]
    async_ = med[timing.DISPATCH_WORKER]
    # Below the L2's size (1 MiB here) every point is mostly dispatch: a line through the
    # smallest sizes gives the per-byte cost there (its slope) and the cost of a call of
    # such a program (its intercept), which the larger points then subtract.  Under load
    # the dispatch kernel alone moved by more than the 32-row stream's bytes cost.
    small_rows = [r for r in CURVE_ROWS if 2 * 4 * r * ROW <= SMALL_DISTANCE]
    xs = [2.0 * 4 * r * ROW for r in small_rows]
    ys = [med[f"stream {r}"] for r in small_rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    if slope <= 0:
        raise RuntimeError(f"calibration: the small streams did not take longer with size "
                           f"({dict(zip(small_rows, ys))}): too noisy to measure")
    curve = [(x, slope) for x in xs]
    for r in CURVE_ROWS:
        if r in small_rows:
            continue
        s = 4 * r * ROW
        curve.append((2.0 * s, max(med[f"stream {r}"] - intercept, 1e-9) / (2.0 * s)))
    base = cost_model.Rates(dispatch_inline_s=inline, dispatch_async_s=async_, launch_s=0.0,
                            curve=curve, cold_s_per_byte=0.0, fault_s=0.0, compute={})
    # the cold stream reads an input last touched 32 calls ago (timing.COLD_INPUT_BYTES of
    # other inputs since) and writes an output last touched one call ago (8 MiB since)
    half = 4.0 * 1024 * ROW
    n_cold = max(2, min(256, timing.COLD_INPUT_BYTES // int(half)))
    write = half * base.seconds_per_byte(2 * half)
    cold = max((med[timing.STREAM_COLD] - async_ - write) / half, curve[-1][1])
    base.cold_s_per_byte = cold
    base.curve = curve + [((n_cold + 1) * half, cold)]
    _age(base, med)
    # runs shorter than a page: the concatenate's cost a byte, less the dispatch the model
    # charges its program, against the curve's at its distance (its memory one call old, as
    # the stream's points are read)
    for r in SHORT_RUN_ROWS:
        name = f"short-run {r}"
        concat = _census(v[name].hlo_text)
        if not any(a.short_run for k in concat.kernels for a in k.accesses):
            raise RuntimeError(f"calibration: {name} compiled to no kernel that moves runs shorter than a page")
        moved = 2.0 * 4 * r * ROW
        d = moved + base.age_bytes_per_s * med[name]
        dispatch = async_ if concat.operations >= cost_model.ASYNC_MIN_OPS else inline
        base.short_run.append((d, max(med[name] - dispatch, 1e-9) / moved / base.seconds_per_byte(d)))
    # write-only memory: a broadcast into an output of s bytes, by the size written (the model
    # reads it so: cost_model's docstring says why); its 4 KiB input is noise
    base.write_curve = [(4.0 * r * ROW, max(med[f"fill {r}"] - async_, 1e-9) / (4.0 * r * ROW))
                        for r in WRITE_ROWS]
    # launch: the unfused chain's extra kernels, less their (tiny, L1) bodies
    chain_u = _census(v["chain unfused"].hlo_text)
    chain_f = _census(v["chain fused"].hlo_text)
    extra_k = len(chain_u.kernels) - len(chain_f.kernels)
    body_u = sum(base.memory_seconds(k) for k in chain_u.kernels)
    body_f = sum(base.memory_seconds(k) for k in chain_f.kernels)
    launch = max(0.0, (med["chain unfused"] - med["chain fused"] - (body_u - body_f)) / max(extra_k, 1))
    base.launch_s = launch
    # page faults of a block mapped afresh each call
    big = _census(v[f"fill {FAULT_ROWS}"].hlo_text)
    pages = FAULT_ROWS * ROW * 4 / 4096
    base.fault_s = max(0.0, (med[f"fill {FAULT_ROWS}"] - async_ - sum(base.memory_seconds(k) for k in big.kernels))
                       / pages)
    # compute, per element and class: the kernel's time less what its other classes cost
    compute: dict[str, float] = {}
    order = ["cheap", "select", "integer", "exp", "tanh", "log", "divide", "sqrt", "rsqrt", "reduce",
             "reduce (across rows)", "transpose", "dot", "convolution"]
    names = {"reduce": "rowsum", "reduce (across rows)": "colsum", "convolution": "conv"}
    # The elementwise classes: the slope between the kernel over COMPUTE_ROWS and over
    # COMPUTE_ROWS_LARGE rows, so that neither the call's fixed cost (dispatch) nor its noise
    # enters the rate: measured so, exp cost 0.398 ns an element between 128 and 1,024 rows
    # (and between 256 and 1,024), where 128 rows less the dispatch gave 0.35 (it ran 65.5
    # us, the dispatch 19.5, and the intercept of the line is 13.3).  The slope is the cost
    # of an element at the size of the programs studied, its traffic in the last-level cache
    # included where the operation does not hide it.  The reductions: the same slope less
    # each size's memory at the curve, what a row costs beyond reading it (cost_model's
    # docstring: the read is the memory term's, and a library kernel that reduces adds its
    # compute to its memory); the slope between 32 and 128 rows, in L2, held YNNPACK's cost
    # around the kernel, which grows with the rows up to about 128 (by perf's samples, the
    # call grew 2.4 times as much as the row sum's own code).
    def census(name):
        counts = {}
        for k in _census(v[name].hlo_text).kernels:
            for c, n in k.ops.items():
                counts[c] = counts.get(c, 0) + n
        return counts

    for cls in order:
        small = f"compute {names.get(cls, cls)}"
        large = f"{small} {COMPUTE_ROWS_LARGE}"
        if large in v:
            cs, cl = census(small), census(large)
            counts = {c: cl.get(c, 0) - cs.get(c, 0) for c in set(cs) | set(cl)}
            body = med[large] - med[small]
            if cls.startswith("reduce"):
                body -= sum(map(base.memory_seconds, _census(v[large].hlo_text).kernels)) - \
                    sum(map(base.memory_seconds, _census(v[small].hlo_text).kernels))
        else:                  # dot, convolution: one size, less the dispatch
            counts = census(small)
            body = med[small] - async_
        others = sum(n * compute[c] for c, n in counts.items() if c != cls and c in compute)
        split = [n for n in (small, large) if n in v and "reduce-window(" in v[n].hlo_text]
        if split:
            # jaxlib 0.9's XLA:CPU splits a sum over 1,024 columns into a reduce-window of
            # 32-element windows and a reduce (and a sum over 128 rows so, by 32 rows): the
            # slope would be the reduce-window's as much as the reduction's, so the class is
            # left unmeasured, and a kernel of it is refused with this reason
            base.unmeasured[cls] = (f"this XLA compiles the calibration kernel {split[0]!r} with a "
                                    "reduce-window, which the model does not price")
            continue
        if counts.get(cls, 0) <= 0:
            raise RuntimeError(f"calibration kernel for {cls!r} has no {cls} operation: {counts}")
        compute[cls] = max(body - others, 1e-12) / counts[cls]
    # a transposing copy alone in a one-op loop kernel, the same slope (the kernel holds nothing else)
    small = "compute transpose alone"
    cs, cl = census(small), census(f"{small} {COMPUTE_ROWS_LARGE}")
    n = cl.get("transpose", 0) - cs.get("transpose", 0)
    if n <= 0:
        raise RuntimeError(f"calibration kernel for 'transpose' alone has no transpose operation: {cl}")
    compute[cost_model.alone("transpose")] = max(med[f"{small} {COMPUTE_ROWS_LARGE}"] - med[small], 1e-12) / n
    # an operation in a loop LLVM left scalar, the same slope, where this XLA leaves the
    # calibration kernel scalar (its IR, from a compile of calibrate's own)
    def iterations_of(name):
        return sum(k.elements for k in _census(v[name].hlo_text).kernels)

    for cls in SCALAR_KERNELS:
        small = f"compute {cls} scalar"
        large = f"{small} {COMPUTE_ROWS_LARGE}"
        rate = cost_model.SCALAR_LOOP if cls == "fill" else cost_model.scalar(cls)
        if cls in vectorised or (cls != "fill" and cost_model.SCALAR_LOOP not in compute):
            base.unmeasured[rate] = vectorised.get(cls) or \
                f"a scalar loop's iteration is not measured: {base.unmeasured.get(cost_model.SCALAR_LOOP)}"
            continue
        iterations = iterations_of(large) - iterations_of(small)
        body = med[large] - med[small]
        if cls == "fill":
            compute[rate] = max(body, 1e-12) / iterations
            continue
        cs, cl = census(small), census(large)
        counts = {c: cl.get(c, 0) - cs.get(c, 0) for c in set(cs) | set(cl)}
        if counts.get(cls, 0) <= 0:
            raise RuntimeError(f"calibration kernel for {cls!r} (scalar loop) has no {cls} operation: {counts}")
        others = iterations * compute[cost_model.SCALAR_LOOP] + sum(
            n * compute[cost_model.scalar(c)] for c, n in counts.items() if c != cls and cost_model.scalar(c) in compute)
        compute[rate] = max(body - others, 1e-12) / counts[cls]
    # a one-op loop kernel's cost per element (cost_model's docstring): a chain of x * y, the
    # slope between two sizes whose buffers stay in the level-2 cache, so that neither the
    # call's fixed cost nor memory time enters it (cost_model's docstring: how it meets the
    # memory time).  The slope of the chains' fastest rounds, not of their medians: a chain
    # in the level 2 runs at one speed but for a slow mode that can last most of a run.  In
    # one of five runs of the claim's plan (2026-12-06) the chain of x * y at 64 rows (its
    # buffers then filled the level 2: ONE_OP_ROWS) took 237-240 us in 17 of 20 rounds and
    # 157-158 in the other 3, in another 192-196 in most rounds (the other three runs:
    # 151-164 in every round), and the medians gave floors of 0.234 and 0.178 ns an element
    # for 0.128-0.135.
    fastest = {k: min(x.samples) for k, x in v.items()}
    small, large = (f"one-op {r}" for r in ONE_OP_ROWS)
    elements = [sum(k.one_op for k in _census(v[n].hlo_text).kernels) for n in (small, large)]
    if not elements[1] > elements[0] > 0:
        raise RuntimeError(f"calibration: the chain of x * y compiled to no one-op loop kernel ({elements})")
    compute[cost_model.ONE_OP] = max(fastest[large] - fastest[small], 1e-12) / (elements[1] - elements[0])
    # ragged rows: the same chain's slope over rows of ROW + RAGGED_EXTRA, less the floor
    small, large = (f"one-op ragged {r}" for r in ONE_OP_ROWS)
    ragged = [sum(k.one_op for k in _census(v[n].hlo_text).kernels if k.ragged) for n in (small, large)]
    if not ragged[1] > ragged[0] > 0:
        raise RuntimeError(f"calibration: the chain of x * y over ragged rows compiled to no such kernel ({ragged})")
    compute[cost_model.RAGGED] = max((fastest[large] - fastest[small]) / (ragged[1] - ragged[0])
                                     - compute[cost_model.ONE_OP], 1e-12)
    # the floors of the other kinds, the same slope; a chain's kernels of a kind measured
    # before (the compare chain's selects) are taken out at their floor
    def by_kind(name):
        counts: dict = {}
        for k in _census(v[name].hlo_text).kernels:
            counts[k.one_op_kind] = counts.get(k.one_op_kind, 0.0) + k.one_op
        return counts

    for kind in cost_model.ONE_OP_KINDS:
        small, large = (f"one-op {kind} {r}" for r in ONE_OP_ROWS)
        cs, cl = by_kind(small), by_kind(large)
        n = cl.get(kind, 0.0) - cs.get(kind, 0.0)
        if n <= 0:
            raise RuntimeError(f"calibration: the chain of {kind} one-op kernels compiled to none ({cl})")
        others = sum((cl.get(o, 0.0) - cs.get(o, 0.0)) * compute[cost_model.one_op_floor(o)] for o in set(cl) | set(cs)
                     if o != kind)
        compute[cost_model.one_op_floor(kind)] = max(fastest[large] - fastest[small] - others, 1e-12) / n
    # the other operations alone: their chains in the level 2 (k_exp_chain), as the floors
    for cls in ALONE_CHAINS:
        small, large = (f"one-op {cls} alone {r}" for r in ONE_OP_ROWS)
        n = census(large).get(cls, 0) - census(small).get(cls, 0)
        if n != ONE_OP_CHAIN * (ONE_OP_ROWS[1] - ONE_OP_ROWS[0]) * ROW:
            raise RuntimeError(f"calibration: the chain of {cls} compiled to other than {ONE_OP_CHAIN} one-op "
                               f"kernels of {cls} a call ({census(large)})")
        compute[cost_model.alone(cls)] = max(fastest[large] - fastest[small], 1e-12) / n
    base.compute = compute
    return base


@functools.lru_cache(maxsize=1)
def vectorised_scalar_kernels() -> types.MappingProxyType:
    """class -> why, for the scalar-loop calibration kernels that this XLA vectorises after
    all (or whose code is not read here: ``kernel_code``): compiled once a process, with their
    code dumped (read-only, since every caller shares it)."""
    import tempfile

    import jax
    import numpy as np
    cpu = jax.devices("cpu")[0]
    why = {}
    for cls in SCALAR_KERNELS:
        fn = globals()[f"k_{cls}_scalar"]
        args = [jax.device_put(np.ones(shape, dtype), cpu) for dtype, shape in _scalar_args(cls, COMPUTE_ROWS)]
        with tempfile.TemporaryDirectory() as folder:
            dump_optimized(fn, args, folder)
            optimized = next(Path(folder).glob(BACKENDS["cpu"].optimized_glob), None)
            code = read_code(optimized) if optimized else {}
            loops = vector_accesses(optimized, code) if optimized else {}
            if not loops:
                unread = unread_why(kernel_objects(optimized).values()) if optimized else None
                why[cls] = (f"this XLA dumped no kernel IR for k_{cls}_scalar, and {unread}" if unread else
                            f"this XLA dumped no kernel code (IR or object file) for k_{cls}_scalar")
            elif not set(loops) <= scalar_kernels(optimized, code):
                why[cls] = f"this XLA vectorises k_{cls}_scalar, the kernel that measures it"
    return types.MappingProxyType(why)


def _age(rates: "cost_model.Rates", med: dict) -> None:
    """Set ``rates.age_bytes_per_s`` from the age kernels, and shift the curve's points by
    the age of their own stream's memory, so that its distances are those the model prices
    at: reuse distance in bytes plus the tenants' bytes while the memory waited (the stream
    over s bytes was called back to back: its memory is one call old)."""
    own = 2.0 * 4 * 1024 * ROW                 # the age kernels' stream: x and y, 4 MiB each
    parts = {n: (med[n] - med[f"{n} spin"]) / own for n in ("age", "age base")}   # s a byte
    waited = med["age"] - med["age base"]
    points = list(rates.curve)
    calls = [med[f"stream {r}"] for r in CURVE_ROWS]

    def shifted(rate):      # the stream points, each by its own call's age; the cold point as it is
        return [(d + rate * t, c) for (d, c), t in zip(points, calls)] + points[len(calls):]

    rate = 0.0
    for _ in range(3):      # the shift moves the points the curve is read back at: a fixed point
        curve = shifted(rate)
        further = _distance_at(curve, parts["age"], own) - _distance_at(curve, parts["age base"], own)
        rate = max(0.0, further / waited) if waited > 0 else 0.0
    rates.age_bytes_per_s = rate
    rates.curve = shifted(rate)


def _distance_at(curve: list, seconds_per_byte: float, least: float) -> float:
    """The distance (at least ``least``) where ``curve`` first reaches ``seconds_per_byte``,
    interpolated as ``Rates.seconds_per_byte`` reads it (in log distance); its last point's
    where it never does."""
    pts = [(d, c) for d, c in curve if d >= least]
    if not pts or seconds_per_byte <= pts[0][1]:
        return least
    for (d0, c0), (d1, c1) in zip(pts, pts[1:]):
        if c0 < seconds_per_byte <= c1:
            f = (seconds_per_byte - c0) / (c1 - c0)
            return math.exp(math.log(d0) + f * (math.log(d1) - math.log(d0)))
    return pts[-1][0]


def check_rows(result, rates: "cost_model.Rates") -> list:
    """The check kernels (not used to fit): measured against predicted, per kernel."""
    rows = []
    for name, x in result.variants.items():
        if name.split()[0] not in ("mul", "exp", "cheap") or name.startswith("compute"):
            continue
        pred = cost_model.predict_text(x.hlo_text, None, rates, source=name).total_s
        rows.append({"kernel": name, "measured us": round(x.median * 1e6, 1),
                     "predicted us": round(pred * 1e6, 1), "measured/predicted": round(x.median / pred, 3)})
    return rows


def machine_info() -> dict:
    from ...provenance import cpu_caches
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpus = sorted(os.sched_getaffinity(0))
    return {"cpu": model, "caches": cpu_caches(cpus[-1]), "load average": list(os.getloadavg())}


def calibrate(rounds: int = 10, calls_per_round: int = 5) -> tuple:
    """Measure this machine's rates: ``(Rates, check rows, seconds it took)``."""
    from ...timing import run_plan
    t0 = time.perf_counter()
    result = run_plan(plan(rounds, calls_per_round))
    rates = rates_from(result, vectorised=vectorised_scalar_kernels())
    rates.machine = dict(machine_info(), **{"jax": result.jax_version, "xla_flags": result.xla_flags,
                                           "pinned cpu": result.cpu})
    checks = check_rows(result, rates)
    rates.checks = checks
    return rates, checks, time.perf_counter() - t0


def save(rates: "cost_model.Rates", path) -> Path:
    # written beside and renamed over: an interrupted run leaves the user's old rates whole
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(rates.to_json(), indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _median(xs):
    return statistics.median(xs)


# ---- a program's optimized module and buffer assignment, for the model -----------------------

def optimized_files(folder) -> tuple:
    """(optimized HLO text, buffer-assignment text) of the one module dumped in ``folder``."""
    folder = Path(folder)
    mods = sorted(folder.glob("*after_optimizations.txt"))
    if len(mods) != 1:
        raise ValueError(f"{folder}: expected one '*after_optimizations.txt', found {len(mods)}")
    ba = mods[0].with_name(mods[0].name[:-len(".txt")] + "-buffer-assignment.txt")
    return mods[0].read_text(), (ba.read_text() if ba.is_file() else None)


def dump_optimized(fn, args, folder, options: dict | None = None) -> tuple:
    """Compile ``fn`` on ``args`` with jax, dumping its optimized module and buffer assignment
    into ``folder``; returns ``optimized_files(folder)``."""
    import jax
    opts = dict(options or {}, xla_dump_to=str(folder), xla_dump_hlo_as_text=True,
                xla_dump_hlo_module_re=".*")
    jax.jit(fn).lower(*args).compile(compiler_options=opts)
    return optimized_files(folder)


# ---- reading an optimized module and its kernels' IR (``cost_cli.py``'s ``cost`` prices them) ----

def read_optimized(path) -> tuple[str, str | None]:
    """(optimized HLO text, buffer-assignment text or None) of an optimized module file, with
    the ``-buffer-assignment.txt`` XLA writes beside it."""
    path = Path(path)
    ba = path.with_name(path.name[:-len(".txt")] + "-buffer-assignment.txt") if path.suffix == ".txt" else None
    return path.read_text(), (ba.read_text() if ba is not None and ba.is_file() else None)


# ---- the model as one file a reader runs on a timing run and dumps of their own ---------------

MODEL_ROOTS = {"pytest_dumpref.xla.cpu.calibrate": ["model_main"]}
MODEL_MODULES = ("shapes", "shape_inference", "hlo", "naming", "traffic", "pytest_dumpref.xla.cpu.cost_model",
                 "pytest_dumpref.xla.cpu.kernel_code", "pytest_dumpref.timing", "pytest_dumpref.xla.cpu.calibrate")
MODEL_HEADER = '''"""cost_model.py: the kernel cost model (pytest-dumpref, as it ran), on its own, with the rates
it reads from a timing run's calibration kernels and the HLO and buffer-assignment readers it
uses (cut from pytest_dumpref/xla/cpu/cost_model.py, calibrate.py, hlo.py, shapes.py, traffic.py
and pytest_dumpref/timing.py).  Plain Python, no jax:

    python cost_model.py run.json FILE...

run.json: what timed.py printed (its calibration kernels give this run's rates); FILE: an
optimized module (*.cpu_after_optimizations.txt) with the -buffer-assignment.txt XLA writes
beside it.  Prints each file's predicted time per call, in microseconds, to full precision.
"""
'''


def run_rates(run_json: dict) -> "cost_model.Rates":
    """The rates of the calibration kernels of a timing run (``run_json``: what timed.py printed)."""
    from types import SimpleNamespace

    from ...timing import VariantTiming
    return rates_from(SimpleNamespace(variants={k: VariantTiming(**v) for k, v in run_json["variants"].items()}))


def price_files(run_json: dict, files) -> list:
    """[(file, the model's seconds per call)] of optimized module files, at the rates of a
    timing run's calibration kernels; a file the model cannot price raises CostModelError."""
    rates = run_rates(run_json)
    return [(str(f), cost_model.predict_text(*read_optimized(f), rates, source=str(f),
                                             **facts(f)).total_s) for f in files]


def model_main(argv=None) -> int:
    """``python cost_model.py run.json FILE...``: each file's predicted time per call (us); a
    file the model cannot price is named with why on stderr, and the exit code is then 2."""
    import sys
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) < 2:
        print(model_main.__doc__, file=sys.stderr)
        return 2
    with open(args[0]) as f:
        rates = run_rates(json.load(f))
    refused = 0
    for name in args[1:]:
        try:
            seconds = cost_model.predict_text(*read_optimized(name), rates, source=name,
                                              **facts(name)).total_s
        except cost_model.CostModelError as e:
            refused += 1
            print(f"refused: {e}", file=sys.stderr)
            continue
        print(f"{name}: {seconds * 1e6!r} us")
    return 2 if refused else 0


def model_listing() -> str:
    """cost_model.py: the model, its rates and its readers as one runnable file (MODEL_ROOTS)."""
    from ..standalone import listing
    return (listing(MODEL_ROOTS, order=MODEL_MODULES, header=MODEL_HEADER)
            + '\n\nif __name__ == "__main__":\n    raise SystemExit(model_main())\n')


def run_model_from_the_page(folder, run, files) -> tuple:
    """Save ``model_listing()`` and ``run``'s JSON (as timed.py prints it) in ``folder`` and run
    the listing there with an isolated python, nothing of this package imported, on the
    optimized module ``files``.  Returns (the lines it printed, the lines ``price_files``
    gives in this process: the same when the listing is the model)."""
    import subprocess
    import sys
    from dataclasses import asdict
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    run_json = {"variants": {k: asdict(v) for k, v in run.variants.items()}}
    (folder / "run.json").write_text(json.dumps(run_json))
    (folder / "cost_model.py").write_text(model_listing())
    done = subprocess.run([sys.executable, "-I", "cost_model.py", "run.json", *map(str, files)], cwd=folder,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cost_model.py failed in {folder}:\n{done.stderr[-3000:]}")
    return done.stdout.splitlines(), [f"{name}: {sec * 1e6!r} us" for name, sec in price_files(run_json, files)]


def predict_dump(dump, rates) -> "cost_model.Prediction":
    """The model's prediction for a ``Dump`` (``xla/dump.py``): its optimized module and
    buffer assignment, at ``rates``."""
    return cost_model.predict_text(dump.optimized_text, dump.buffer_assignment, rates,
                                   source=str(dump.files.optimized), **facts(dump.files.optimized))


def model_times(run, fused, plain):
    """The kernel cost model on a timing's two variants (see :func:`record_model_kernels`):
    ({"fused", "fused model", "extra", "extra model"} in seconds per call, and the two
    predictions)."""
    rates = rates_from(run, vectorised=vectorised_scalar_kernels())
    pf, pu = predict_dump(fused, rates), predict_dump(plain, rates)
    times = {"fused": run.variants["fused"].median, "fused model": pf.total_s,
             "extra": run.difference("fused", "without fusion"), "extra model": pu.total_s - pf.total_s}
    return times, pf, pu


def record_model_kernels(evidence, run, fused, plain) -> dict:
    """Record the kernel cost model on both variants of a timing (``fused``, ``plain``: their
    dumps), its rates from its calibration kernels timed in the same rounds as they (``run``,
    a run of its own with variants "fused" and "without fusion"), kernel by kernel.  Returns
    the run's measured and the model's seconds per call, of the fused program ("fused",
    "fused model") and of the extra time without fusion ("extra", "extra model"), for the
    claim to judge; the tables are one run's, stated and not compared."""
    from ...claims import varies
    times, pf, pu = model_times(run, fused, plain)
    rows = []
    for variant, p in (("fused", pf), ("without fusion", pu)):
        # the regime is the larger of the kernel's memory and compute times at this run's rates
        rows += [{"variant": variant, "kernel": k.name, "regime": varies(k.regime),
                  "model (us)": varies(round(k.seconds * 1e6, 1))}
                 for k in p.kernels]
        rows.append({"variant": variant, "kernel": "(the program: dispatch and kernels)", "regime": varies(""),
                     "model (us)": varies(round(p.total_s * 1e6, 1))})
    evidence.table("the kernel cost model (pytest_dumpref/xla/cpu/cost_model.py; whole, as one file, the listing "
                   "cost_model.py of the claim 'The time of undoing the pass, across programs') on both "
                   "variants, at rates measured in a run of its own (not compared: one run's)", rows)
    evidence.table("the model against the first of its runs (the first row of the table of its runs; not "
                   "compared: one run's)", [
        {"time per call (us)": "fused program", "measured": varies(round(times["fused"] * 1e6, 1)),
         "model": varies(round(times["fused model"] * 1e6, 1))},
        {"time per call (us)": "extra without fusion", "measured": varies(round(times["extra"] * 1e6, 1)),
         "model": varies(round(times["extra model"] * 1e6, 1))}])
    evidence.note("The model's extra time is its price of the unfused program less its price of "
                  "the fused one, each kernel at the rate of its regime (the kernel table): mostly "
                  "the kernels the unfused program adds, the broadcast into a 4 MiB temporary and "
                  "the multiply that reads it.")
    return times


def across_programs(run, predicted_bytes: dict, dumps: dict) -> dict:
    """Programs timed in one run (variants "<name>: fused", "<name>: unfused", "<name>: A/A"),
    against the extra bytes predicted for some (``predicted_bytes``) and the cost model on each
    program's (fused, unfused) dumps (``dumps``, every program: one the model refuses need not
    have been timed), at the rates of the run's calibration kernels.  Returns points (the
    programs with predicted bytes, for timing.plot_across_programs), rows (one run's, shown and
    not compared), exact ((predicted, measured, A/A) seconds per program with predicted
    bytes), refused (the programs the model has no rate for), model ((program, fused
    measured, fused model, extra measured, extra model) seconds, every program it prices) and
    predictions (program -> the model's (fused, unfused) Prediction, the same programs)."""
    from ...claims import varies
    rates = rates_from(run, vectorised=vectorised_scalar_kernels())
    points, rows, exact, refused, model = [], [], [], [], []
    predictions = {}
    for name, (fused_dump, unfused_dump) in dumps.items():
        fused, unfused_v, aa_v = f"{name}: fused", f"{name}: unfused", f"{name}: A/A"
        pf: cost_model.Prediction | None
        pu: cost_model.Prediction | None
        try:
            pf = predict_dump(fused_dump, rates)
            pu = predict_dump(unfused_dump, rates)
        except cost_model.CostModelError as e:
            pf = pu = None
            refused.append({"program": name, "why the model refuses it": str(e).split(": cannot model ", 1)[-1]})
        if fused not in run.variants:
            continue
        measured_s = run.difference(fused, unfused_v)
        aa = run.difference(fused, aa_v)
        row = {"name": name, "extra bytes (policy)": predicted_bytes.get(name, ""),
               "extra at the stream's bandwidth (us)": "", "extra measured (us)": round(measured_s * 1e6, 1),
               "A/A (us)": round(aa * 1e6, 1), "fused measured (us)": round(run.variants[fused].median * 1e6, 1)}
        if name in predicted_bytes:
            predicted = run.predicted_seconds(predicted_bytes[name])
            exact.append((predicted, measured_s, aa))
            points.append({"name": name, "predicted_us": predicted * 1e6, "measured_us": measured_s * 1e6,
                           "aa_us": aa * 1e6})
            row["extra at the stream's bandwidth (us)"] = round(predicted * 1e6, 1)
        if pf is None or pu is None:
            row.update({"fused, model (us)": "refused", "extra, model (us)": "refused",
                        "unfused: the model's dearest kernel it adds, regime, us": "refused"})
        else:
            model.append((name, run.variants[fused].median, pf.total_s, measured_s, pu.total_s - pf.total_s))
            predictions[name] = (pf, pu)
            # where a program's extra time misses: of the kernels the unfused program has and
            # the fused one lacks (by name; the library kernels keep theirs), the one the model
            # prices dearest, and what bounds it (a kernel's own measured time is not in this
            # run: jax's profiler would perturb the rounds)
            fused_names = {k.name for k in pf.kernels}
            dearest = max([k for k in pu.kernels if k.name not in fused_names] or pu.kernels,
                          key=lambda k: k.seconds)
            row.update({"fused, model (us)": round(pf.total_s * 1e6, 1),
                        "extra, model (us)": round((pu.total_s - pf.total_s) * 1e6, 1),
                        "unfused: the model's dearest kernel it adds, regime, us":
                            f"{dearest.name}: {dearest.regime}, {dearest.seconds * 1e6:.0f}"})
        # one run's times, shown and not compared: the claim's conclusions are its bounds
        rows.append({k: (v if k in ("name", "extra bytes (policy)") else varies(v)) for k, v in row.items()})
    return {"points": points, "rows": rows, "exact": exact, "refused": refused, "model": model,
            "predictions": predictions}


# A program's extra time is resolved by a run when the standard uncertainty of its paired
# median is at most this share of the model's extra time: its measured/model is then known
# to about a tenth, and a ratio against a bound of 0.25 means something.  matvec_tanh's
# unfused program adds a 1-us kernel to 143 us (measured -0.2 +- 0.6 us, model 0.5), and
# kv_cache_update's 16-row update adds 3-14 us to 286 (3.3 +- 2.7 in one run, 14.3 in the
# last): their ratios are noise, whatever the model.
RESOLVED_SHARE = 0.10


def extra_time_median(model: list) -> float:
    """The median over the programs of ``model`` (``across_programs``' "model" entries) of
    |measured/model - 1| of their extra time."""
    return statistics.median(abs(m / p - 1) for _, _, _, m, p in model)


def extra_time_errors(run, model: list) -> dict:
    """The cost model's extra-time errors over the programs of an across-programs ``run``
    (``model``: ``across_programs``' "model" entries): the median and worst |measured/model - 1|
    over every program priced, the worst over those whose extra time the run resolves
    (``RESOLVED_SHARE``), and the programs it does not resolve with (measured, its standard
    uncertainty, model) in seconds."""
    errors = sorted((abs(m / p - 1), name) for name, _, _, m, p in model)
    resolved, unresolved = [], []
    for name, _, _, m, p in model:
        noise = run.difference_noise(f"{name}: fused", f"{name}: unfused")
        if noise <= RESOLVED_SHARE * abs(p):
            resolved.append((abs(m / p - 1), name))
        else:
            unresolved.append((name, m, noise, p))
    resolved.sort()
    return {"median": extra_time_median(model), "worst": errors[-1],
            "resolved worst": resolved[-1] if resolved else None, "resolved": len(resolved),
            "unresolved": unresolved}


def extra_time_goal_rows(run, model: list, goal: dict) -> list:
    """The rows of a table of ``extra_time_errors`` against ``goal`` ({"median", "worst"}),
    each this run's: shown, not compared."""
    from ...claims import varies
    e = extra_time_errors(run, model)
    rows = [{"error": "extra time, median |measured/model - 1|", "this run": varies(round(e["median"], 3)),
             "goal": goal["median"]},
            {"error": "extra time, worst |measured/model - 1|", "this run": varies(round(e["worst"][0], 3)),
             "goal": goal["worst"]},
            {"error": "extra time, worst program", "this run": varies(e["worst"][1]), "goal": ""},
            {"error": f"programs whose extra time the run resolves (its standard uncertainty at most "
                      f"{RESOLVED_SHARE:.0%} of the model's)", "this run": varies(f"{e['resolved']} of {len(model)}"),
             "goal": ""}]
    # One row each, whatever the run resolves, so that every run renders the same lines
    # (which programs the run resolves moves with its noise)
    worst = e["resolved worst"]
    rows.append({"error": "of those, worst |measured/model - 1|",
                 "this run": varies(f"{worst[0]:.3f} ({worst[1]})" if worst else "(none)"), "goal": goal["worst"]})
    rows.append({"error": "not resolved: extra measured against the model (us)", "this run": varies("; ".join(
        f"{name} {m * 1e6:.1f} ± {noise * 1e6:.1f} against {p * 1e6:.1f}" for name, m, noise, p in e["unresolved"])
        or "(none)"), "goal": ""})
    return rows


def record_model_runs(evidence, times: list, within: tuple) -> list:
    """Record the model's extra time against the measured one in several runs of its own
    (``times``: ``model_times``' first element, one per run) and their median against the goal
    ``within`` (low, high); stated, not compared: each run's.  Returns measured/model per run."""
    from ...claims import varies
    low, high = within
    ratios = [t["extra"] / t["extra model"] for t in times]
    n = len(times)
    evidence.table(f"the kernel cost model in {n} runs of its own (not compared: each run's)", [
        {"run": i + 1, "extra measured (us)": varies(round(t["extra"] * 1e6, 1)),
         "extra, model (us)": varies(round(t["extra model"] * 1e6, 1)),
         "measured / model": varies(round(r, 4)),
         # said apart, so that no rounding puts a run on the wrong side of the goal's bounds
         f"in [{low:g}, {high:g}]": varies("yes" if low <= r <= high else "no")}
        for i, (t, r) in enumerate(zip(times, ratios))])
    evidence.table("the same runs against the goal (not compared, not asserted: this run's)", [
        {f"median measured/model of the {n} runs": varies(round(statistics.median(ratios), 4)),
         f"runs with measured/model in [{low:g}, {high:g}]": varies(f"{sum(low <= r <= high for r in ratios)} of {n}"),
         "goal": f"{n - 1} of {n} runs in [{low:g}, {high:g}]"}])
    return ratios


def record_model_from_the_page(evidence, folder, run, names: list, dumps: dict) -> tuple:
    """Run the model's one-file listing alone in ``folder`` on this run's timings and the
    optimized modules of the programs ``names`` (``dumps``: program -> its dumps), and record
    the listing and the commands that reproduce its prices from the page.  Returns
    ``run_model_from_the_page``'s (lines printed, lines priced here) for the claim to judge."""
    from ... import timing
    from .fusion_programs import dump_commands
    files = [x.files.optimized for name in names for x in dumps[name]]
    out = run_model_from_the_page(folder, run, files)
    evidence.excerpt("cost_model.py: the kernel cost model, as it ran, whole, with the rates it reads from a "
                     "timing run's calibration kernels and the HLO and buffer-assignment readers it uses "
                     "(calibrate.model_listing, cut from pytest_dumpref's source; plain Python: the "
                     "module docstring of cost_model gives the measurements that decided its form)",
                     model_listing(), lang="python")
    evidence.excerpt("the model's prices from the page: timed.py run as its header says (its environment, and "
                     "program.py saved beside it) with its output saved as run.json, each "
                     "program's two optimized modules dumped with plain jax and program.py (the unfused one with "
                     "--xla_disable_hlo_passes=fusion), then cost_model.py alone, which prints each module's "
                     "price; this claim runs the last line so, in an empty folder, on the "
                     f"{len(files)} modules of the {len(names)} programs it prices, and the seconds printed are "
                     "the model's in the per-program table, to the last bit: 'fused, model' is the fused "
                     "module's price, 'extra, model' the unfused module's less it; 'fused measured' is the "
                     "median of the fused variant's rounds and 'extra measured' the median of the rounds' "
                     "paired differences, as statistic.py computes them",
                     timing.run_command("timed.py", "run.json") + "\n" + dump_commands(names) + "\n"
                     "python cost_model.py run.json dump/*/*/*.cpu_after_optimizations.txt",
                     lang="bash", fold=True)
    return out
