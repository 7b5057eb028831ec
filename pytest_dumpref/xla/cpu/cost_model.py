"""The time of XLA:CPU's optimized program, kernel by kernel, at rates measured on this machine.

**What a kernel costs.**  Each kernel of the entry computation (a loop fusion, a YNNPACK
library fusion, or a bare instruction) costs

    launch + max(memory, compute) + page faults

(a one-op loop kernel that copies its vectors through the stack: ``(memory ** ONE_OP_OVERLAP +
compute ** ONE_OP_OVERLAP) ** (1 / ONE_OP_OVERLAP)`` for the max; a library kernel that
reduces: ``memory + compute``) and a program costs one dispatch plus its kernels (the
first kernel's launch is part of the dispatch).  The rates come from ``calibrate.py``,
measured with ``timing.py``'s pinned worker:

* *memory*: every buffer the kernel reads or writes, in bytes, each byte priced by the
  measured cost per byte at its **reuse distance**: the bytes of distinct memory the program
  touched since that memory was last touched (LRU stack distance, in bytes, the kernel's own
  other buffers included, counted around the program's repeated calls).  Buffers are the
  allocation slices of XLA's buffer assignment, so a kernel that writes in place (the fused
  softmax's last multiply writes over the buffer it reads) touches one buffer, not two, and a
  temporary that reuses a dead one's memory finds it where that one left it.  The distance
  is in bytes, the program's own, plus what the machine's other tenants took of the shared
  cache since: the seconds the memory waited (the kernels' predicted times in between) times
  the rate calibrate measures (``Rates.age_bytes_per_s``), priced in ``AGE_ROUNDS`` rounds.
  Without a buffer assignment, every instruction gets its own buffer.  Of an operand the
  kernel only slices, or updates in place, it touches the cache lines of the slices
  (``_touched_bytes``).  A kernel that moves memory in **runs shorter than a page**
  (``SHORT_RUN_BYTES``: a concatenate whose operands are narrower than its output's rows, a
  slice that cuts rows) pays each byte the stream's price times the ratio calibrate measures
  for such runs at that distance (``Rates.short_run``).
* *compute*: per operation class (cheap float ops, compare/select, integer, exp, tanh, log,
  divide, sqrt, rsqrt, reduce, transpose, dot and convolution flops) its element count times the
  measured seconds per element, each class measured in a loop fusion of several
  instructions, as the fused kernels run it; and for a **one-op loop kernel** (a loop fusion
  of a single elementwise instruction, as the fusion-wrapper pass makes of every instruction
  the fusion pass left alone) its operation at its rate alone in such a kernel (``ALONE``:
  exp, tanh, divide, sqrt, transpose), and at least its elements times the measured cost of an element
  of such a kernel, by the operands it reads (``ONE_OP``, or the floor of its kind:
  ``ONE_OP_KINDS``), plus ``RAGGED`` an element where its rows are not a whole number of the
  loop's tiles: the larger of the two.  A loop
  kernel that LLVM left **scalar** (its code in the dump, optimized IR or object file, moves no
  element of memory in a vector, or loads none where it copies an operand as large as half its
  output: a pad of the rows; ``kernel_code.scalar_kernels``) costs its elements at the measured cost of a scalar loop's iteration
  (``SCALAR_LOOP``, a broadcast's) plus its operations at their rates in such a loop
  (``SCALAR``: cheap ops and tanh; a scalar kernel of another class is refused by name).  A reduction
  costs what it adds to reading its input, which the memory term prices.  An operation with no
  measured rate (reduce-window, sort, scatter, a custom call...) is refused by name, and so
  is a while loop: nothing is guessed.
* *page faults*: an output or temporary of 32 MiB or more is mapped afresh on every call by
  glibc (``timing.ALLOCATOR_ENV``), and its pages are faulted in: pages x measured seconds.

**Why these terms, and why combined so.**  Measured here (AMD EPYC, 2 cores, 32 MiB L3
shared with other tenants; pinned single thread):

* Roofline per kernel, not a sum of memory and compute: ``exp`` over f32[rows, 1024] took
  0.408 ns an element at 1,024 rows (8 MiB touched) and 0.410 at 4,096 rows (32 MiB, where
  the stream ``y = 2x`` alone took 0.284 ns an element): the memory time vanished under the
  exps.  The 32-op cheap chain took 0.164 ns at 1,024 rows (compute-bound, stream 0.112)
  and 0.255 at 4,096 rows (memory-bound, stream 0.284): the larger of the two, not the sum.
* Not quite the larger of the two in a one-op loop kernel: its loop (below: "One-op loop kernels")
  hides its memory time under its own work less well than a loop fusion does, and a kernel
  whose memory and floor cost about the same ran slower than either.  In three sampled runs
  of the fusion study's 27 programs whose extra time is over 20 us (each with its rates
  measured in the same rounds; ``kernel_perf.profile_run``, AMD EPYC, 2026-12-06), the
  median |measured/model - 1| of the extra time was 0.202, 0.122 and 0.110 (the third beside
  two CPU burners) with the larger of the two, and the model under the measured in most
  programs (median measured/model 1.18, 1.12, 1.10).  With the p-norm of the two, p = 2,
  3, 4 and 6: 0.091, 0.068, 0.086, 0.128 in the first run, which chose p = 3; then 0.061 and
  0.061 in the other two (median measured/model 0.99 and 0.97; worst 0.28 and 0.20 where
  the larger of the two gave 0.52 and 0.41).  A multi-op loop fusion keeps the larger: in
  those runs the p-norm for every loop kernel moved the fused programs' median error by
  under 0.02 either way, and the exp kernel above ran as its exps alone.  And so does a
  one-op kernel whose loop does not copy its vectors through the stack (jaxlib 0.12's:
  ``kernel_code.lean_kernels``), the loop the p-norm was chosen for being jaxlib 0.10's, that
  does.  In one run of the claim across programs on each (AMD EPYC, 2026-12-07), the p-norm
  for jaxlib 0.12.0.1's one-op kernels priced the extra time above the measured (median
  measured/model - 1 over the 29 programs -0.047; median |measured/model - 1| 0.118), the
  larger of the two at the median (-0.004; 0.111); on jaxlib 0.10.2 the larger of the two
  gave +0.204 and 0.204, the p-norm +0.050 and 0.059.
* Reuse distance, not the array's size: the same ``x * y`` over two f32[1024, 1024] arrays
  took 179 us in one run and 241 us in another, 12 MiB touched a call, where the L3 is
  shared: the cost per byte rises steeply from about 8 MiB on (13 ps/B at 12 MiB, 17 at
  16 MiB, 35 at 32 MiB).  In a program a buffer's distance is what the other kernels
  touched in between, which one stream's size cannot say.
* Age, not only bytes: memory waits in a cache the machine's other tenants share, and they
  take part of it while it waits.  Measured on an AMD EPYC (32 MiB L3; 2026-12-06), a stream
  over f32[1024, 1024] (8 MiB touched a call) beside a kernel that computes over 128 KiB
  cost 15.0 ps a byte when the computation took nothing, 16.4 when it took 1 ms, 19.2 at 2
  ms and 23.3 at 4.4 ms: its memory as far away as 16, 21 and 26 MiB of the stream's curve,
  about 3 GB more a second of waiting; two calibrations gave 3.4 and 3.9 GiB/s.  And a
  negate over 4 MiB that the distances put 8.5 MiB away cost 145 us beside no such kernel and
  223, 278 and 293 us beside one of 5, 29 and 58 ms, the last as from memory.  The unfused
  programs wait longer between touches than the stream the curve is measured on (their calls
  take milliseconds, the stream's 0.1-1 ms): in one run of the 29 programs, each kernel's
  time sampled by perf in the rounds that measured the rates (``kernel_perf.profile_run``),
  the one-op kernels the unfused programs add and price on memory ran 1.23 times their
  price by distance in bytes and their broadcasts 1.16; priced with age, in the next run,
  1.15 and 0.99, and the median error of the extra time over programs went from 0.22 to 0.19.
* One line, once: a kernel that reads a buffer and writes it in place moves it once.  The
  fused softmax's last multiply (in place, per the buffer assignment) took 43 us in the
  program (jax.profiler's per-kernel events, fastest of 200 calls), where ``x * v[:, None]``
  into a separate output took 119 us.  Memory a kernel only writes is priced on its own
  curve, a broadcast into an output of s bytes (``calibrate``'s fills), at the bytes the
  kernel writes, or on the stream's curve at its reuse distance where that is dearer (the
  line is fetched from where it lies before it is written).  The fills are read at the size
  written, not at the distance, because on an Intel Xeon (2 MiB L2 a core, 480 MiB L3) their
  cost per byte rose with the size written (37 ps/B at 8 MiB, 42 at 16, 45 at 24) while the
  stream over the same distances, its lines in the same L3, stayed at 36-37: what rises is
  the store stream's own cost, not where its lines were.  The unfused softmax's broadcast
  writes 4 MiB whose lines were last touched 12 MiB ago; priced on the fills at 12 MiB, the
  model's extra time came out above the measured by 4 % at the median of 18 runs
  (measured/model 0.926-1.019), at 4 MiB 0.957-1.035 (six quiet runs, six with a glibc
  hugepage setting, six beside two CPU burners).
* Runs shorter than a page cost more than a stream of their bytes, and more the further
  their memory: a concatenate of four f32[rows, 256] along the rows' dimension (XLA:CPU
  copies each operand's row with a call to ``memmove``, 1 KiB at a time) against the stream
  ``y = 2x`` over f32[rows, 1024], the same bytes and distance (a plain pinned loop; AMD
  EPYC, 32 MiB L3, 2026-12-07) cost 1.05-1.19 times the stream up to 16 MiB, 1.7-2.2 at 24
  and 32 MiB and 1.5 at 48 and 64.  A slice of half of each row, ``x[:, :512]``, against a
  stream of the same lines cost 1.1-1.2 times it at up to 16 MiB of lines and 1.6-2.0 at 24
  and 32; beside 8 to 32 MiB touched between calls the slice cost 1.45-1.58 times the slice
  of half the rows, ``x[:512, :]``, and the concatenate 1.5-1.7 times one along the rows.
  Priced as streams, concat_heads' concatenate (perf: ``memmove``) was sampled at 170-210
  us fused and 212-262 unfused against prices of 121-132 and 128-147, in four runs of the
  claim across programs; and halves' two unfused slices at 173-215 us together against
  119-125, the programs' extra time above the model by 0.17-0.32 and 0.03-0.32.  The ratio
  is calibrate's concatenate against the curve at the same distance (``Rates.short_run``),
  applied to every byte of such a kernel, as it was measured; a loop fusion's concatenate,
  which XLA emits element by element and not by ``memmove``, is not measured, and priced as
  a stream.  Four calibrations gave 1.18-1.45 at 8.5 MiB and 1.28-1.88 from 17 MiB on.  In a
  run of the claim across programs with it (its own rates), concat_heads' extra time came out
  at measured/model - 1 = +0.093 (+0.118 at a ratio of 1) and halves' at -0.027 (+0.056); the
  concatenate is still priced under its samples there (137.7 us fused, 150.6 unfused, against
  178 and 217 of ``memmove``), and XLA's unfused concatenate runs 27-39 us longer than the
  fused one's where the model gives 13: what slows it beyond its distance is not found.
* The unfused softmax over f32[1024,1024]: the fusion it loses is the last multiply's, which
  becomes a 4 MiB broadcast temporary plus a multiply that reads it.  Per kernel (profiler,
  fastest calls, load average about 3.5): exp kernel 494 us fused, 492-507 unfused; row sum
  48 and 48; broadcast 60 (unfused only); multiply 43 in place with a column, 129-133 with
  the temporary.  The kernels' differences add to 155-165 us, and the model predicts
  100-140 us of them (the in-place multiply it prices at 55-60 us, the broadcast at 55-100).
  The bytes at one stream's bandwidth predict 110-160 us.  The program-level extra that the
  timing worker measures was 215-370 us (load average 6-12): 60-200 us more than the sum of
  the kernels' differences under jax's profiler.  Sampled instead (perf, cpu-clock at 4 kHz,
  6,000 calls of each variant in a pinned process after its compile, load average 7), the
  difference is in the kernels, not around them: XLA's loop kernels (perf's JIT code) took
  83 us a call fused and 318 unfused (the model: 59 and 237), while the runtime, the
  allocator, the kernel and Python differed by under 20 us a call together; page faults
  (perf stat: 0.6 a call more unfused) and context switches (2.2 a call, both) add nothing.
  The loop kernels' memory is what the model under-prices, by about a third at that load;
  the YNNPACK kernels' times moved by 40-90 us a call between two processes of the same
  variant, which one sampled run each cannot resolve.  Not modelled yet.
* One-op loop kernels, a cost per element of their own: XLA:CPU emits them by another path
  than its multi-op loop fusions (the dump names their object files
  ``__compute_module_wrapped_multiply`` where a fused kernel's is
  ``broadcast_multiply_fusion_kernel_module``), whose loop saves and restores the stack and
  copies each 16-float vector through the stack.  On an AMD EPYC (Zen 5, L3 32 MiB; the
  stream ``y = 2x`` at 100 GB/s) ``x * y`` over f32[256|1024|2048, 1024] took 0.375, 0.340 and
  0.360 ns an element, where the memory curve predicted 0.23, 0.21 and 0.29 (1.64, 1.58 and
  1.26 times less), and ``exp``, ``tanh``, ``log`` and ``divide`` kernels of one op took
  0.36, 0.36, 0.36 and 0.34: one floor, whatever the operation, that no memory rate
  explains.  It was the unfused programs' missing time: the softmax's extra time was 3.3 times
  the model's without it (its ``wrapped_multiply``: 1,048,576 elements, priced on memory at
  93 us).  On an Intel Xeon whose stream ran at 26 GB/s the same kernels were bound by
  memory, which hid it.  The floor is measured on ``x * y`` over arrays that stay in the
  level-2 cache (calibrate's ``one-op`` kernels), so that no memory time enters it.  Until
  2026-12-05 its two sizes were 32 and 128 rows, whose three arrays (1.5 MiB at 128) overflow
  the 1 MiB level 2 of an AMD EPYC and fill three quarters of an Intel Xeon's 2 MiB: on the
  Xeon, beside two other engineers' jobs, the floor came out 0.27 ns an element where
  transformer_block's one-op kernels of 64K elements ran 0.13-0.15 (jax's profiler, fastest
  of 200 calls), and at 16 and 64 rows (768 KiB at most) 0.20 under the same load.  Since
  2026-12-05 (later) it is the slope of a chain of 16 one-op multiplies (``calibrate.k_mul_chain``),
  not of one: on an AMD EPYC the slope of one ``x * y`` a call between 8 and 64 rows came
  out 0.14-0.23 ns an element (and 0.18-0.26 across claim runs), the chain's 0.124-0.135 at
  every pair of sizes from 8 to 256 rows, as the profiler timed the kernel (0.13).  At the
  chain's floor the model prices most programs' extra time below the measured on that
  machine (median |measured/model - 1| over programs 0.18-0.26 in four runs, most programs
  above 1; with the single call's floor 0.16 in one, most below 1): which kernels the
  difference lies in is not found yet (docs/timing-bounds.md).  Since 2026-12-06 (evening)
  the chain runs at 8 and 32 rows (512 KiB at most: its x, y and two temporaries), the slope
  of its fastest rounds: at 64 rows its four buffers filled the 1 MiB level 2, and in two of
  five runs of the claim's plan it ran in a slow mode for most rounds (floors of 0.234 and
  0.178 ns from the medians); alone, the slope between 8 and 32 rows and between 16 and 64
  came out the same (0.128-0.129 and 0.130).
* Two paths, two rates: on an Intel Xeon (2 MiB of L2 a core; the stream ``y = 2x`` at 25
  GB/s) ``exp`` alone (XLA's ``wrapped_exponential``) cost 0.54-0.59 ns an element over
  f32[1024, 1024] and ``exp(x) + 0.5`` (a loop fusion of two) 0.43-0.46; ``x / y`` alone
  0.52-0.56 and with an add beside it 0.47.  Priced at the rates of the kernels alone, as
  the compute classes were measured until then, adam_update's fused divide kernel came out
  at 958 us a call and the fused program at 1.29 times its measured time.
* Transposes, a rate of their own: a copy whose output's minor dimension is not its
  input's reads each element a row away from the last.  Priced as memory only, as it was
  until 2026-12-05, ``exp(x.T) + y`` over f32[1024, 1024] (transpose_add; AMD EPYC, 32 MiB
  L3) came out at 355 us where it ran 815-892, and its unfused program's wrapped_copy at
  116 us where the difference says about 900.  Measured as a class (``x.T + y`` fused, the
  slope between 128 and 1,024 rows: about 0.43 ns an element; the copy alone, 0.87), the
  fused program came out at 0.99 of its time and the extra time at 1.12.  How XLA emits the
  fused copy depends on what it transposes: ``x.T + 1`` and ``x.T * 2 + y``, whose
  transposed value is computed from a broadcast, ran 3,258 and 3,358 us where ``x.T + y``
  ran 479 and ``exp(x.T) + y`` 772, so such a kernel is refused, not priced at this rate.
* Reductions beyond their reading, and a library kernel that reduces pays its reading and
  its other work one after the other.  YNNPACK's row sum over f32[rows, 1024] took 181 ps a
  row element between 128 and 1,024 rows on an Intel Xeon (its input from L3: the read
  alone, 4 bytes at the memory curve's 43 ps/B), and a kernel that reduces and
  exponentiates (the softmax's first, ``exp(x - max(x))``) priced with that in its compute
  paid for the read twice: 715 us where it ran 538 alone.  The reduction's rate was then
  the slope between 32 and 128 rows, in L2, until 2026-12-07, when perf's samples of the
  run that measured it (``kernel_perf.profile_run``; AMD EPYC, 2026-12-07) showed that slope
  to be mostly not the reduction's: the row sum's call grew 8.1 us between 32 and 128 rows,
  of which 3.4 in YNNPACK's ``sum_k1`` (35 ps an element) and the rest in the runtime
  around it, a cost that grows with the rows up to about 128 and then stops (27.1 us at 128
  rows and 27.0 at 1,024), so the rate came out 78-112 ps an element, and the library's
  row sums in the programs ran at 0.42-0.69 of their price, the norms' fused programs at
  measured/model 0.71-0.89.  Now the rate is the slope between 128 and 1,024 rows
  less each size's read at the memory curve (``calibrate.rates_from``): what a row costs
  beyond reading it, at the programs' size.  In four runs of the claim across programs
  (two on each jaxlib) the row sum's slope was 49-59 ps an element and its read at the
  curve 54-59: next to nothing beyond the read (the rate came out 0, 0, 0.7 and 6 ps), the
  column sum 14-27 ps beyond it.  And a library kernel that reduces costs its memory plus
  its compute, not the larger: YNNPACK reads a row to reduce it, then computes from the row
  in cache, so its memory and its exps do not overlap.  The softmax's ``exp(x - max(x))`` over 1,024 rows
  (a plain pinned loop, slope between 512 and 1,024 rows; AMD EPYC, jaxlib 0.10.2) cost
  469 ps an element, ``x - max(x)`` 171 and XLA's ``exp(x) + 0.5`` 320: the sum, 491, not
  the larger, 320.  Priced so in those four runs (the runs' own timings and dumps priced
  again), the fused programs' median |measured/model - 1| went from 0.061, 0.061, 0.075
  and 0.108 to 0.053, 0.060, 0.060 and 0.082, and in the first the norms' measured/model
  - 1 from -0.24 to -0.12 (layernorm), -0.19 to -0.11 (batchnorm) and -0.16 to -0.04
  (rmsnorm); the extra time's median moved by under 0.01 (0.076, 0.059, 0.075 and 0.110
  to 0.072, 0.060, 0.082 and 0.114).  The library kernels are the same in both variants,
  but with the sum they pay where their memory lies: the unfused softmax reads x 12 MiB
  away, the fused one 8 (the unfused touched a 4 MiB temporary more), and its
  ``exp(x - max(x))`` costs 17 us more there in the model, 36 us more by perf's samples of
  the same run, where the larger of the two hid it (0); the softmax's measured/model of the
  extra time went from 1.080 to 0.989 on that run's timings.  On jaxlib 0.12.0.1 the library's exp
  runs cheaper than XLA's (the same kernel: 409 ps an element, ``x - max(x)`` 146 and the
  loop fusion's exp 376), which the model does not price apart: the fused softmax stays
  priced about a third above its time there (measured/model 0.75).
* Two speeds: the vector units of the machine this was measured on ran an AVX loop at two
  speeds (70 us or 100-110 us over 16 KiB) in stretches of milliseconds to hundreds of
  milliseconds, set by whatever shares the physical core; a scalar loop ran at one speed.
  Compute rates and program times are therefore measured with each round's calls spread
  over passes (``timing.TimingPlan.passes``), so that both are those of the fast stretches;
  with all of a round's calls in a row, tanh's rate came out 448 ps an element in one run
  and 262 in the next.
* Scalar loops, read from the dump: of the 34 programs of the fusion study, the two whose
  fused program the model priced at a third of its time (pad_tanh: 2,321 us measured, 407
  priced; conv_bias_relu's bias and ReLU kernel: 525 us, 168 priced) are the two whose fused
  loop kernel's optimized IR holds no vector instruction; every other loop kernel of theirs
  that XLA dumped IR for was vectorised.  ``pad(tanh(x))`` keeps the tanh inside the pad's
  bounds test, which LLVM does not turn into a select, and ``max(x + b, 0)`` over a minor
  dimension of 32 floats was left scalar too, and so was the unfused program's broadcast of
  the bias over that dimension: 350 us for 4 MiB where the memory curve gave 168.  Measured
  on an Intel Xeon, a scalar loop's iteration (a broadcast's) cost about 0.3 ns, an
  operation in it beyond that 0.05-0.2 ns if cheap, about 1.9 if a tanh (0.016 and 0.34
  vectorised).
* Dispatch: PJRT's CPU client runs a program with few flops on the calling thread, a larger
  one on its worker thread (a thread switch on one pinned core): two measured dispatch
  costs, chosen by the program's flops as XLA counts them (below 1,024: inline; ``x * 2``
  over 256 elements ran inline, over 1,024 elements not; ``exp``, 0 flops, inline).

Pure Python: no jax, no numpy, no pytest.  ``analyse`` turns HLO text (and its buffer
assignment) into kernels with their accesses and operation counts; ``predict`` prices them
with ``Rates``.
"""
from __future__ import annotations

import bisect
import itertools
import json
import math
from dataclasses import asdict, dataclass, field


from ..naming import BackendMismatch, require_backend
from ..hlo import HloModule, Instruction, parse_module
from ..shape_inference import int_list
from ..traffic import parse_buffer_assignment

__all__ = ["Rates", "Kernel", "ProgramCost", "Prediction", "CostModelError", "analyse", "predict",
           "predict_text", "OP_CLASSES"]

# Large blocks are mapped per call by glibc at and above this size (timing.ALLOCATOR_ENV).
MMAP_BYTES = 32 * 2 ** 20
PAGE = 4096
# Below this many flops a program ran on the calling thread (see the module docstring).
ASYNC_MIN_OPS = 1024
INLINE, WORKER = "inline", "worker thread"     # the two dispatches, as Prediction names them


class CostModelError(ValueError):
    """The model cannot price a program; the message names the kernels and operations."""


# ---- operation classes ----------------------------------------------------------------------

# Instructions that compute nothing of their own inside a kernel: their cost is the bytes the
# kernel reads and writes, which the memory term counts.
_MOVE = frozenset({
    "parameter", "constant", "broadcast", "bitcast", "reshape", "slice", "concatenate",
    "transpose", "copy", "pad", "reverse", "get-tuple-element", "tuple", "dynamic-slice",
    "dynamic-update-slice", "iota", "bitcast-convert", "gather",
})
_CHEAP = frozenset({"add", "subtract", "multiply", "maximum", "minimum", "negate", "abs", "convert",
                    "sign", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "clamp"})
_INTEGER_ONLY = frozenset({"and", "or", "xor", "not", "shift-left", "shift-right-logical",
                           "shift-right-arithmetic", "popcnt", "count-leading-zeros"})
_SELECT = frozenset({"compare", "select"})
_NAMED = {"exponential": "exp", "tanh": "tanh", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt"}
# The per-element floor of a one-op loop kernel (module docstring): a rate of Rates.compute,
# not an operation's class; a kernel's count of it is in Kernel.one_op.
ONE_OP = "one-op loop"
# A one-op kernel's floor by its operation, measured apart (calibrate's chains of each kind):
# the loop copies each operand's vectors through the stack, so that an operand more costs
# more.  Measured on an AMD EPYC (every buffer in the level-2 cache; one run, the slope between
# 16 and 64 rows, as the chains then ran): 124 ps an element for x * y, 81 for a negate or a
# floor, 160 for a select, 160 for a compare (its mask, a byte an element, then read by a
# select).  At the two-operand floor, huber_loss's unfused abs was priced 148 us and ran 77
# (perf, in the run that measured the rates), its compare 156 and 195, its select 150 and 199;
# at their own, in another run, 93 and 95, 186 and 186, 184 and 180.  A one-op kernel of no
# kind here (two operands, or more but not a select) takes ONE_OP.  Operands are counted
# distinct: x * x (jnp.square, a layer norm's variance) reads one array, and a chain of x + x
# one-op kernels over f32[rows, 1024] ran 75-83 ps an element at every size from 16 to 4,096
# rows (AMD EPYC, 2026-12-06; the slope between chains of 4 and 12), where the negate's floor
# measured in the same run was 81 and x * y's 129.  In the order calibrate measures them: the
# compare chain's selects are taken out at the select floor.
ONE_OP_KINDS = ("unary", "select", "compare")
# A one-op kernel whose rows are not a whole number of the loop's tiles (RAGGED_TILE_BYTES of
# its narrowest type: 16 f32, 32 bf16, 64 pred) costs more an element, every element: the
# loop emitter's code for such rows is another (in its IR, a quarter to a half of the vector
# instructions of the whole rows').  Measured on an AMD EPYC (2026-12-06, one-op chains in the level 2, the
# slope between 8 and 32 rows, two runs): x * y 150 ps an element over rows of 1,024 floats,
# 288-301 over 1,026 and 1,032, 165-169 over 1,040; a floor 76-94, 212-244 over 1,026 and
# 1,032; a select (a mask of a byte an element) 154-187 over 1,024, 240-264 over 1,026, 1,032,
# 1,040 and 1,056 (none a multiple of 64 bytes of mask).  pad_tanh's unfused multiply, over
# f32[1026, 1026], ran 326 us in the render of 2026-12-06 where the floor priced it at 163.
# The excess is measured on x * y (calibrate: a chain over rows of ROW + 8) and added to the
# floor of any kind.  Rows of one tile or less are not told apart: 8 floats ran at 144 ps an
# element, 12 at 1,164 and 4 at 257 (the same runs), and are priced at the floor.
RAGGED = f"{ONE_OP} (ragged rows)"
RAGGED_TILE_BYTES = 64


def one_op_floor(kind: str) -> str:
    """The rate of Rates.compute of a one-op loop kernel's floor of ``kind`` (ONE_OP_KINDS),
    ONE_OP for ''."""
    return f"{ONE_OP} ({kind})" if kind else ONE_OP


def one_op_kind(inst: Instruction) -> str:
    """The kind of the floor of a one-op loop kernel whose one computing instruction is ``inst``."""
    if inst.opcode in ("compare", "select"):
        return inst.opcode
    return "unary" if len(set(inst.operands)) == 1 else ""


# The operations measured alone in a one-op loop kernel as well (their rate there is
# alone(class)): XLA:CPU emits such a kernel by another path than a loop fusion of several
# instructions, and an exp alone cost 1.3 times what an exp beside an add did (module
# docstring).  Not log and rsqrt: alone, their cost depends on the input's sign (on standard
# normal input, half of it negative, 1.9 and 2.6 ns an element on an Intel Xeon, where on
# |x| beside an add 0.70 and 0.52), which a model of operation classes cannot see.  Their rate
# is the operation's kernel without its memory (calibrate's chains in the level 2), which the
# p-norm then meets as every one-op kernel's floor.
ALONE = ("exp", "tanh", "divide", "sqrt", "transpose")


def alone(cls: str) -> str:
    """The rate of Rates.compute for an operation of class ``cls`` alone in a one-op loop kernel."""
    return f"{cls} ({ONE_OP})"


# The classes measured in a loop kernel that LLVM left scalar (module docstring); their rate
# there is scalar(class).
SCALAR = ("cheap", "tanh")
SCALAR_LOOP = "scalar loop"


def scalar(cls: str) -> str:
    """The rate of Rates.compute for an operation of class ``cls`` in a scalar loop kernel."""
    return f"{cls} ({SCALAR_LOOP})"


# The classes the calibration measures; any other operation is refused by name.
OP_CLASSES = ("cheap", "select", "integer", "exp", "tanh", "log", "divide", "sqrt", "rsqrt", "reduce",
              "reduce (across rows)", "transpose", "dot", "convolution", ONE_OP) + tuple(alone(c) for c in ALONE) \
    + tuple(scalar(c) for c in SCALAR) + (SCALAR_LOOP,) + tuple(one_op_floor(k) for k in ONE_OP_KINDS) + (RAGGED,)
# Inside a fusion, instructions that are not the kernel's one operation.
_NOT_AN_OP = frozenset({"parameter", "constant", "bitcast"})
_TRANSCENDENTAL = frozenset({"exp", "tanh", "log", "sqrt", "rsqrt"})
_REFUSED_CONTROL = frozenset({"while", "conditional", "call", "async-start", "async-done"})


def _is_int(et: str) -> bool:
    return et[:1] in ("s", "u") and et[1:].isdigit()


def ragged_rows(comp, inst: Instruction) -> bool:
    """Whether a one-op kernel computing ``inst`` has rows that are not a whole number of its
    loop's tiles (RAGGED): the minor dimension of its output, longer than one tile, is not a
    multiple of RAGGED_TILE_BYTES of the narrowest type among its output and operands."""
    shapes = [inst.shape] + [comp.instruction(o).shape for o in inst.operands]
    if any(s.is_tuple for s in shapes) or not inst.shape.element_count:
        return False
    minor = _minor(inst.shape)
    if minor is None:
        return False
    width = min(s.byte_size // s.element_count for s in shapes if s.element_count)
    tile = RAGGED_TILE_BYTES // max(width, 1)
    n = inst.shape.dims[minor]
    return n > tile and n % tile != 0


def _minor(shape) -> int | None:
    """The minor-most dimension of ``shape`` that is longer than 1 (None: a scalar's)."""
    return next((d for d in shape.minor_to_major if shape.dims[d] != 1), None)


def transposes(comp, inst: Instruction) -> bool:
    """A copy or transpose that reads its operand across its rows: the output's minor-most
    dimension is not the operand's, so consecutive elements written come from elements a
    row apart (a copy that only relabels the layout, as the transpose inside XLA's
    ``transpose_copy_fusion`` does, moves nothing and is not one)."""
    if inst.opcode not in ("copy", "transpose") or inst.shape.is_tuple or not inst.operands:
        return False
    src = comp.instruction(inst.operands[0]).shape
    out = _minor(inst.shape)
    if out is None or src.is_tuple:
        return False
    perm = int_list(inst.attrs.get("dimensions")) if inst.opcode == "transpose" else range(len(inst.shape.dims))
    return list(perm)[out] != _minor(src)


def _fed_by_broadcast(comp, inst: Instruction) -> bool:
    """Whether a broadcast is among what ``inst`` computes from, inside its computation."""
    seen, todo = set(), list(inst.operands)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        i = comp.instruction(name)
        if i.opcode == "broadcast":
            return True
        todo += i.operands
    return False


def op_class(comp, inst: Instruction) -> tuple:
    """(class, count) of one instruction inside a kernel; class None: moves data only;
    class '?': no rate for it."""
    op, shape = inst.opcode, inst.shape
    n = 0 if shape.is_tuple else shape.element_count
    if transposes(comp, inst):
        # measured apart (calibrate.k_transpose): each element read is a row away from the
        # last.  One fed by a broadcast is refused: x.T + 1 and x.T * 2 + y, whose fused
        # kernels transpose a value computed from a broadcast, ran 7 times as long as
        # x.T + y (3,258 and 3,358 us against 479 over f32[1024, 1024], where exp(x.T) + y
        # ran 772): XLA emits them otherwise, and no rate is measured for that
        return ("?" if _fed_by_broadcast(comp, inst) else "transpose"), n
    if op == "slice" and any(":" in p and p.count(":") == 2 and p.rsplit(":", 1)[1].strip("]} {") != "1"
                             for p in inst.attrs.get("slice", "").split(",")):
        # a strided slice makes the loop read every other element: no rate is measured for it
        return "?", n
    if op in _MOVE:
        return None, 0
    if op == "reduce":
        src = comp.instruction(inst.operands[0]).shape
        k = max(1, len(inst.operands) // 2)
        # over the minor-most dimension (a row) or across rows: measured apart, since a
        # column sum strides through memory (calibrate.k_colsum)
        minor = src.minor_to_major[0] if src.dims else 0
        cls = "reduce" if minor in int_list(inst.attrs.get("dimensions")) else "reduce (across rows)"
        return cls, src.element_count * k
    if op == "dot":
        lhs = comp.instruction(inst.operands[0]).shape
        contract = int_list(inst.attrs.get("lhs_contracting_dims"))
        size = 1
        for d in contract:
            size *= lhs.dims[d]
        return "dot", 2 * n * size
    if op == "convolution":
        kernel = comp.instruction(inst.operands[1]).shape
        labels = inst.attrs.get("dim_labels", "")
        try:
            o = labels.split("_")[1].split("->")[0].index("o")
            per_out = kernel.element_count // kernel.dims[o]
        except (IndexError, ValueError):
            return "?", 0
        return "convolution", 2 * n * per_out
    if op in _NAMED:
        return _NAMED[op], n
    if op == "divide":
        return ("?" if _is_int(shape.element_type) else "divide"), n
    if op in _SELECT or (op in ("and", "or", "not", "xor") and shape.element_type == "pred"):
        return "select", n
    if op in _CHEAP or op in _INTEGER_ONLY:
        return ("integer" if _is_int(shape.element_type) else "cheap"), n
    return "?", n


# ---- the program's kernels and their accesses -------------------------------------------------

@dataclass
class Access:
    """Bytes of one buffer segment a kernel touches, and that memory's reuse distance."""
    segment: tuple
    nbytes: float
    distance: float = 0.0
    write_only: bool = False      # written by the kernel and not read by it
    written: float = 0.0          # write-only: all the bytes the kernel only writes (its fill)
    # when (kernel positions in two laps of the program, this kernel's in the second) the
    # memory was last touched and is touched again: ``_elapsed`` turns them into seconds
    last: int = -1
    at: int = -1
    short_run: bool = False       # its kernel moves memory in runs shorter than a page (short_runs)


@dataclass
class Kernel:
    name: str
    opcode: str
    kind: str                     # 'loop', 'library' (kCustom: YNNPACK), or the opcode
    ops: dict                     # class -> element count (flops for dot and convolution)
    unknown: list                 # opcodes with no rate
    accesses: list
    fault_pages: float = 0.0
    one_op: float = 0.0           # a one-op loop kernel: its elements (module docstring)
    one_op_kind: str = ""         # and the kind of its floor (ONE_OP_KINDS; '': ONE_OP)
    ragged: bool = False          # and its rows are not a whole number of its loop's tiles (RAGGED)
    scalar: bool = False          # LLVM left its loop scalar: its IR holds no vector type
    elements: float = 0.0         # a loop kernel's output elements (a scalar loop's iterations)
    lean: bool = False            # its code read, its loop copies no vector through the stack (ONE_OP_OVERLAP)

    @property
    def nbytes(self) -> float:
        return sum(a.nbytes for a in self.accesses)

    @property
    def working_set(self) -> float:
        return sum(s[2] - s[1] for s in {a.segment for a in self.accesses})


@dataclass
class ProgramCost:
    """What ``analyse`` found: kernels in execution order, and what it cannot price."""
    module: str
    kernels: list
    refused: list                 # "kernel: why" for each kernel the model cannot price
    source: str = ""

    @property
    def operations(self) -> float:
        """Flops as XLA counts them: transcendentals are counted apart and do not decide
        where PJRT runs the program (an exp-only program ran inline)."""
        return sum(n for k in self.kernels for c, n in k.ops.items() if c not in _TRANSCENDENTAL)


class _Buffers:
    """Instruction (and tuple index) -> the allocation segments holding its value."""

    def __init__(self, module: HloModule, ba_text: str | None, source: str):
        self.module = module
        self.values: dict = {}    # (name, index) -> (allocation, offset, size)
        self.kinds: dict = {}     # allocation -> kinds
        self.bounds: dict = {}    # allocation -> sorted segment boundaries
        if ba_text is not None:
            for a in parse_buffer_assignment(ba_text, source=source):
                self.kinds[a.index] = a.kinds
                b = {0, a.size}
                for v in a.values:
                    self.values.setdefault((v.name, v.index), (a.index, v.offset, v.size))
                    b.update((v.offset, v.offset + v.size))
                self.bounds[a.index] = sorted(b)
        self.synthetic = ba_text is None

    def of(self, name: str, index: str = "{}") -> list:
        """Segments (allocation, start, end) of a value; follows bitcasts and tuple elements."""
        inst = self.module.entry.instruction(name)
        if self.synthetic:
            return self._synthetic(inst, index)
        if (name, index) in self.values:
            a, off, size = self.values[(name, index)]
            return self._split(a, off, off + size)
        if inst.opcode == "get-tuple-element":
            i = inst.attrs.get("index", "0")
            return self.of(inst.operands[0], "{" + i + "}")
        if inst.opcode in ("bitcast", "copy") and inst.operands:
            return self.of(inst.operands[0], index)
        if index == "{}" and inst.shape.is_tuple:
            out = []
            for i in range(len(inst.shape.tuple_shapes)):
                out += self.of(name, "{" + str(i) + "}")
            return out
        keys = [k for k in self.values if k[0] == name]
        if keys:
            out = []
            for k in keys:
                a, off, size = self.values[k]
                out += self._split(a, off, off + size)
            return out
        raise CostModelError(f"{self.module.source or self.module.name}: no buffer for {name}{index} "
                             f"in the buffer assignment")

    def _synthetic(self, inst, index) -> list:
        if inst.opcode in ("bitcast", "get-tuple-element", "copy") and inst.operands:
            return self._synthetic(self.module.entry.instruction(inst.operands[0]), index)
        return [(inst.name, 0, inst.shape.byte_size)]

    def _split(self, a, start, end) -> list:
        b = self.bounds[a]
        i = bisect.bisect_right(b, start) - 1
        out = []
        while i < len(b) - 1 and b[i] < end:
            out.append((a, max(b[i], start), min(b[i + 1], end)))
            i += 1
        return out

    def fresh_per_call(self, segment) -> bool:
        """Output or temporary memory (malloc'd per call), not a parameter or constant."""
        if self.synthetic:
            inst = self.module.entry.instruction(segment[0])
            return inst.opcode not in ("parameter", "constant")
        kinds = self.kinds.get(segment[0], ())
        return not any(k in kinds for k in ("parameter", "constant", "thread-local"))

    def allocation_size(self, segment) -> float:
        if self.synthetic:
            return segment[2] - segment[1]
        return self.bounds[segment[0]][-1]


def require_xla_cpu(source, hlo_text: str) -> None:
    """CostModelError naming ``source`` for a module another backend compiled (its text says so:
    ``naming.require_backend``): the rates are this machine's, for XLA:CPU's kernels."""
    try:
        require_backend(source, hlo_text, "cpu", "the kernel cost model (XLA:CPU's kernels priced at "
                        "rates measured on this machine)")
    except BackendMismatch as e:
        raise CostModelError(str(e)) from None


def analyse(hlo_text: str, buffer_assignment_text: str | None = None, *, source: str = "",
            scalar_kernels: frozenset = frozenset(), lean_kernels: frozenset = frozenset()) -> ProgramCost:
    """The kernels of an optimized module, their operation counts and their accesses with
    reuse distances (rate-independent: ``predict`` prices them).  ``scalar_kernels``: the loop
    kernels LLVM left scalar; ``lean_kernels``: the one-op kernels whose loop does not copy its
    vectors through the stack (``kernel_code.scalar_kernels`` and ``kernel_code.lean_kernels``
    read both from the code the dump holds beside the module)."""
    module = parse_module(hlo_text, source=source or None)
    require_xla_cpu(source or module.name, hlo_text)
    buffers = _Buffers(module, buffer_assignment_text, source or module.name)
    entry = module.entry
    kernels, refused = [], []
    for inst in entry.instructions:
        op = inst.opcode
        if op in ("parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
                  "opt-barrier", "add-dependency"):
            continue
        if op in _REFUSED_CONTROL or op.endswith("-start") or op.endswith("-done"):
            refused.append(f"{inst.name}: {op}: the model prices straight-line programs only")
            continue
        ops: dict[str, float] = {}
        unknown: list = []
        if op == "fusion":
            kind = "library" if inst.fusion_kind == "kCustom" else "loop"
            comp = module.computations[inst.called[0]]
            body = comp.instructions
        else:
            kind, comp, body = op, entry, [inst]
        for i in body:
            cls, n = op_class(comp, i)
            if cls == "?":
                unknown.append("strided slice" if i.opcode == "slice" else
                               "transpose of a broadcast's value" if transposes(comp, i) else i.opcode)
            elif cls is not None:
                ops[cls] = ops.get(cls, 0) + n
        one_op, floor_kind, ragged = 0.0, "", False
        if kind == "loop":
            computing = [i for i in body if i.opcode not in _NOT_AN_OP]
            if len(computing) == 1 and op_class(comp, computing[0])[0] not in (None, "?"):
                one_op = float(computing[0].shape.element_count)
                floor_kind = one_op_kind(computing[0])
                ragged = ragged_rows(comp, computing[0])
        if op == "custom-call":
            unknown.append(f"custom-call {inst.attrs.get('custom_call_target', '?')}")
        if unknown:
            refused.append(f"{inst.name}: no measured rate for {', '.join(sorted(set(unknown)))}")
        # every distinct segment the kernel reads or writes, once: a line read and written
        # in place is fetched once and written back once, as a line only read or only written
        # is (write-allocate); see the module docstring for the measurement
        out = buffers.of(inst.name)
        segs: list = []
        sliced: dict[tuple, float] = {}
        root = module.computations[inst.called[0]].root if op == "fusion" else inst
        in_place = root.opcode == "dynamic-update-slice"
        for i, o in enumerate(inst.operands):
            of = buffers.of(o)
            segs += of
            part = _touched_bytes(module, inst, i)
            if part is not None and len(of) == 1:
                sliced[of[0]] = sliced.get(of[0], 0.0) + part
            else:
                sliced.update({sg: math.inf for sg in of})   # read whole where any use is
        read = set(segs)
        # an output is written whole, but for the operand a dynamic-update-slice updates in place
        accesses = [Access(sg, float(sg[2] - sg[1]) if sg in out and (sg not in read or not in_place)
                           else min(float(sg[2] - sg[1]), sliced[sg]), write_only=sg not in read)
                    for sg in dict.fromkeys(segs + out)]
        written = sum(a.nbytes for a in accesses if a.write_only)
        short = short_runs(module, inst)
        for a in accesses:
            a.short_run = short
            if a.write_only:
                a.written = written
        pages = 0.0
        for s in {s for s in out}:
            if buffers.fresh_per_call(s) and buffers.allocation_size(s) >= MMAP_BYTES:
                pages += (s[2] - s[1]) / PAGE
        shape = inst.shape
        elements = float(sum(t.element_count for t in shape.tuple_shapes) if shape.is_tuple else shape.element_count)
        kernels.append(Kernel(inst.name, op, kind, ops, unknown, accesses, pages, one_op, floor_kind, ragged,
                              scalar=kind == "loop" and inst.name in scalar_kernels,
                              elements=elements if kind == "loop" else 0.0, lean=inst.name in lean_kernels))
    _reuse_distances(kernels)
    return ProgramCost(module.name, kernels, refused, source)


# A kernel touches the lines of an operand that its slices cover, not the operand: halves'
# unfused slices of x[:, :512] over f32[1024, 1024] ran 137-142 us each (jax's profiler,
# fastest of 200 calls) where the whole 4 MiB operand priced them at 197.  And an update in
# place (a dynamic-update-slice writing into its operand's buffer) touches the lines it
# updates: kv_cache_update's fused kernel, 16 rows of a 4 MiB cache, was priced at 134 us
# for the whole cache, and its program at 417 us where it ran 286.
_SLICING = frozenset({"slice", "dynamic-slice"})
LINE = 64


# A run shorter than a page (4 KiB, the span of the hardware's stream prefetch on the machines
# seen) is priced at the short-run ratio (module docstring).
SHORT_RUN_BYTES = PAGE


def _run_bytes(part, whole) -> float:
    """The bytes of one contiguous run of a region of shape ``part`` inside an array of
    shape ``whole`` (same rank, same layout): its dimensions from the minor-most up to the
    first it does not span whole; infinite where it spans the array (one run)."""
    if part.is_tuple or whole.is_tuple or not part.element_count or len(part.dims) != len(whole.dims) \
            or list(part.minor_to_major) != list(whole.minor_to_major):
        return math.inf
    run = part.byte_size / part.element_count
    for d in part.minor_to_major:
        run *= part.dims[d]
        if part.dims[d] != whole.dims[d]:
            return run
    return math.inf


def short_runs(module: HloModule, inst: Instruction) -> bool:
    """Whether a kernel moves memory in runs shorter than a page (SHORT_RUN_BYTES): a
    concatenate (XLA:CPU's, a ``memmove`` a run) whose operand's rows are narrower than its
    output's, or a slice, alone or in a loop fusion, that cuts its operand's rows so."""
    if inst.opcode == "concatenate":
        return any(_run_bytes(module.entry.instruction(o).shape, inst.shape) < SHORT_RUN_BYTES
                   for o in inst.operands)
    if inst.opcode != "fusion" or inst.fusion_kind == "kCustom":
        return False
    comp = module.computations[inst.called[0]]
    return any(x.opcode in _SLICING and _run_bytes(x.shape, comp.instruction(x.operands[0]).shape) < SHORT_RUN_BYTES
               for x in comp.instructions)


def _lines_bytes(shape) -> float:
    """The bytes of the cache lines a region of this shape covers inside a larger array: a
    run of its minor dimension shorter than a line still costs whole lines."""
    if shape.is_tuple or not shape.dims or not shape.element_count:
        return float(shape.byte_size)
    run = shape.dims[shape.minor_to_major[0]] * shape.byte_size / shape.element_count
    return shape.byte_size * max(1.0, LINE / run) if run else 0.0


def _touched_bytes(module: HloModule, inst: Instruction, i: int) -> float | None:
    """The bytes of operand ``i`` that ``inst`` touches when every use of it is a slice taken
    from it or the update in place of a dynamic-update-slice (the lines those cover); None
    when the kernel reads it whole."""
    comp = module.computations[inst.called[0]] if inst.opcode == "fusion" else None
    if comp is None:
        uses, name = [inst], inst.operands[i]
    else:
        param = next((x for x in comp.instructions if x.opcode == "parameter" and x.parameter_number == i), None)
        if param is None:
            return None
        uses, name = [x for x in comp.instructions if param.name in x.operands], param.name
    total = 0.0
    for x in uses:
        if x.operands.count(name) != 1 or x.operands[0] != name:
            return None
        if x.opcode in _SLICING:
            total += _lines_bytes(x.shape)
        elif x.opcode == "dynamic-update-slice" and (x.is_root or comp is None):
            update = (comp or module.entry).instruction(x.operands[1])
            total += _lines_bytes(update.shape)
        else:
            return None
    return total if uses else None


def _reuse_distances(kernels: list) -> None:
    """Each access's reuse distance in bytes, in the steady state of repeated calls.

    A kernel streams its buffers from start to end, so a line of a buffer was last touched
    partway through the kernel that last touched it, and is touched again partway through
    this one: on average half of the last kernel's other bytes came after it, and half of
    this kernel's come before it.  The distance is therefore half the bytes of the last
    toucher, all the distinct bytes of the kernels in between, and half the bytes of this
    kernel (a byte in both halves counts once).  For a kernel called again and again on the
    same buffers (the calibration's stream) this is its working set, the point the curve
    was measured at.
    """
    n = len(kernels)
    segs = [{a.segment: a.segment[2] - a.segment[1] for a in k.accesses} for k in kernels]
    # A Fenwick tree over time holds each segment's size at the time it was last touched,
    # so the bytes touched between two kernels are one prefix-sum difference (programs of
    # thousands of kernels stay linear-logarithmic).
    tree = [0.0] * (2 * n + 1)

    def add(i, v):
        i += 1
        while i <= 2 * n:
            tree[i] += v
            i += i & -i

    def upto(i):                          # sum over times 0..i
        i += 1
        total = 0.0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    last: dict = {}
    for t in range(2 * n):               # the second lap sees the previous call's accesses
        i = t % n
        mine = segs[i]
        if t >= n:
            # this kernel's segments by when they were last touched, with running sums: the
            # bytes of those not touched since kernel j are one bisection away
            order = sorted((last.get(s_, -1), size) for s_, size in mine.items())
            whens = [w for w, _ in order]
            running = list(itertools.accumulate(size for _, size in order))
            own = {}                                     # j -> kernel j's bytes untouched since
            for a in kernels[i].accesses:
                j = last[a.segment]
                between = upto(t - 1) - upto(j)          # distinct bytes touched after kernel j
                if j not in own:
                    own[j] = sum(size for s_, size in segs[j % n].items() if last[s_] == j)
                k = bisect.bisect_right(whens, j)
                a.distance = float(between + 0.5 * own[j] + 0.5 * (running[k - 1] if k else 0.0))
                a.last, a.at = j, t
        for s_, size in mine.items():
            if s_ in last:
                add(last[s_], -size)
            add(t, size)
            last[s_] = t


# ---- rates and the prediction ---------------------------------------------------------------

def _by_distance(points: list, distance: float) -> float:
    """The value of ``points`` ([(distance, value)], increasing) at ``distance``: interpolated
    in log(distance) between them, clamped at both ends."""
    xs = [math.log(max(d, 1.0)) for d, _ in points]
    x = math.log(max(distance, 1.0))
    k = bisect.bisect_left(xs, x)
    if k == 0:
        return points[0][1]
    if k == len(xs):
        return points[-1][1]
    f = (x - xs[k - 1]) / (xs[k] - xs[k - 1])
    return points[k - 1][1] + f * (points[k][1] - points[k - 1][1])


NO_SHORT_RUN = "no measured cost of runs shorter than a page (rates older than the model: run calibrate again)"


@dataclass
class Rates:
    """This machine's rates (``calibrate.py`` measures them; JSON round-trips)."""
    dispatch_inline_s: float
    dispatch_async_s: float
    launch_s: float
    curve: list                   # [(reuse distance in bytes, seconds per byte)], increasing
    cold_s_per_byte: float
    fault_s: float
    compute: dict                 # class -> seconds per element (per flop for dot, convolution)
    machine: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    # memory a kernel only writes, by the bytes it writes (a write-only broadcast); empty: `curve`
    write_curve: list = field(default_factory=list)
    # class -> why this machine's XLA left it unmeasured (its calibration kernel compiled
    # otherwise); a kernel of that class is refused with the reason
    unmeasured: dict = field(default_factory=dict)
    # bytes of the shared cache that the machine's other tenants take a second: memory last
    # touched t seconds ago is priced at its reuse distance plus t times this (module
    # docstring); 0: not measured (rates older than it), distances in bytes alone
    age_bytes_per_s: float = 0.0
    # [(distance in bytes, ratio)], increasing: memory moved in runs shorter than a page
    # (short_runs) against the stream at the same distance (calibrate's concatenate); empty:
    # not measured (rates older than it), and a kernel that moves such runs is refused
    short_run: list = field(default_factory=list)

    def seconds_per_byte(self, distance: float, *, write_only: bool = False) -> float:
        """Interpolated in log(distance) between measured points; clamped at both ends."""
        return _by_distance(self.write_curve if write_only and self.write_curve else self.curve, distance)

    def distance(self, a: Access, aged: float = 0.0) -> float:
        """The distance the access is priced at: its reuse distance, plus the bytes the
        tenants took of the shared cache while its memory waited ``aged`` seconds."""
        return a.distance + self.age_bytes_per_s * aged

    def access_seconds(self, a: Access, aged: float = 0.0) -> float:
        """The access's memory time, its memory ``aged`` seconds old (``distance``)."""
        distance = self.distance(a, aged)
        if a.write_only and self.write_curve:
            # the store stream's cost at the size written, or the line's fetch from its
            # reuse distance where dearer (module docstring)
            seconds = a.nbytes * max(self.seconds_per_byte(a.written or a.nbytes, write_only=True),
                                     self.seconds_per_byte(distance))
        else:
            seconds = a.nbytes * self.seconds_per_byte(distance)
        return seconds * self.short_run_ratio(distance) if a.short_run else seconds

    def short_run_ratio(self, distance: float) -> float:
        """The cost of memory moved in runs shorter than a page against the stream's, at
        ``distance``: interpolated in log(distance) between measured points, clamped at both
        ends."""
        if not self.short_run:
            raise CostModelError(f"the rates have {NO_SHORT_RUN}")
        return _by_distance(self.short_run, distance)

    def memory_seconds(self, kernel: Kernel, ages: dict | None = None) -> float:
        """``ages``: seconds since each access's memory was last touched (``_elapsed``)."""
        return sum(self.access_seconds(a, (ages or {}).get(id(a), 0.0)) for a in kernel.accesses)

    def compute_seconds(self, kernel: Kernel) -> tuple:
        """(seconds, class that costs most)."""
        # an operation alone in a one-op loop kernel costs its rate there (ALONE)
        if kernel.scalar:       # a scalar loop: every operation at its rate there
            rate_of = {c: scalar(c) for c in kernel.ops}
        else:
            rate_of = {c: alone(c) if kernel.one_op and c in ALONE else c for c in kernel.ops}
        missing = [r for r in rate_of.values() if r not in self.compute]
        floor_rate = one_op_floor(kernel.one_op_kind)
        if kernel.one_op and not kernel.scalar and floor_rate not in self.compute:
            missing.append(floor_rate)
        ragged = kernel.one_op and not kernel.scalar and kernel.ragged
        if ragged and RAGGED not in self.compute:
            missing.append(RAGGED)
        if kernel.scalar and SCALAR_LOOP not in self.compute:
            missing.append(SCALAR_LOOP)
        if missing:
            old = " (rates older than the model: run calibrate again)" if any(ONE_OP in m for m in missing) else ""
            why = "".join(f" ({m}: {self.unmeasured[m]})" for m in missing if m in self.unmeasured)
            raise CostModelError(f"{kernel.name}: the rates have no measured rate for {', '.join(missing)}{old}{why}")
        parts = {c: n * self.compute[rate_of[c]] for c, n in kernel.ops.items()}
        if kernel.scalar:       # a scalar loop's iterations cost beside its operations
            parts[SCALAR_LOOP] = kernel.elements * self.compute[SCALAR_LOOP]
        total = sum(parts.values())
        floor = kernel.one_op * self.compute[floor_rate] if kernel.one_op and not kernel.scalar else 0.0
        if ragged:
            floor += kernel.one_op * self.compute[RAGGED]
        if floor > total:
            return floor, (f"{floor_rate}, ragged rows" if ragged else floor_rate)   # the larger of the two
        if not parts:
            return 0.0, ""
        top = max(parts, key=lambda c: parts[c])
        return total, top

    def level(self, distance: float) -> str:
        caches = sorted((c["bytes"], c["level"]) for c in self.machine.get("caches", [])
                        if c.get("type") in ("Data", "Unified"))
        for size, lvl in caches:
            if distance <= size:
                return f"L{lvl}"
        return "DRAM" if caches else f"{distance / 2 ** 20:.1f} MiB away"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Rates":
        d = dict(d)
        d["curve"] = [tuple(p) for p in d["curve"]]
        d["write_curve"] = [tuple(p) for p in d.get("write_curve", [])]
        d["short_run"] = [tuple(p) for p in d.get("short_run", [])]
        return cls(**d)

    @classmethod
    def load(cls, path) -> "Rates":
        with open(path) as f:
            return cls.from_json(json.load(f))


@dataclass
class KernelTime:
    name: str
    kind: str
    seconds: float
    memory_s: float
    compute_s: float
    fault_s: float
    regime: str
    nbytes: float
    working_set: float

    def as_dict(self) -> dict:
        return {"kernel": self.name, "kind": self.kind, "us": self.seconds * 1e6, "memory us": self.memory_s * 1e6,
                "compute us": self.compute_s * 1e6, "faults us": self.fault_s * 1e6, "regime": self.regime,
                "bytes": self.nbytes, "working set": self.working_set}


@dataclass
class Prediction:
    module: str
    kernels: list                 # KernelTime, in execution order
    dispatch_s: float
    launch_s: float
    dispatch: str = INLINE        # which dispatch it charged: INLINE or WORKER (ASYNC_MIN_OPS says)
    flops: float = 0.0            # the program's flops as XLA counts them, which chose it

    @property
    def total_s(self) -> float:
        return self.dispatch_s + sum(k.seconds for k in self.kernels) - (self.launch_s if self.kernels else 0.0)

    def as_dict(self) -> dict:
        return {"module": self.module, "total us": self.total_s * 1e6, "dispatch us": self.dispatch_s * 1e6,
                "dispatch": self.dispatch, "flops": self.flops, "kernels": [k.as_dict() for k in self.kernels]}


# Rounds of pricing with the memory's age: a kernel's time sets how old the memory the next
# kernels touch is, which sets their time.  On the fusion study's programs (both variants of
# the 29 priced, at 3.9 GiB/s) the totals of two rounds came within 0.05 % of three rounds',
# one round's within 0.6 %.
AGE_ROUNDS = 2
# The p of a one-op loop kernel's p-norm of memory and compute (module docstring): chosen on
# one sampled run of the fusion study's programs, and held on two more.  Only a kernel whose
# loop copies its vectors through the stack, as jaxlib 0.10's one-op kernels do, or whose code
# was not read (kernel_code.lean_kernels); a lean one-op kernel takes the larger of the two, as
# a loop fusion does.
ONE_OP_OVERLAP = 3.0


def _body(k: Kernel, memory: float, compute: float) -> float:
    """A kernel's time beside its launch and faults: the larger of memory and compute, or a
    one-op loop kernel's p-norm of the two (ONE_OP_OVERLAP) where it is not lean, or the sum
    of the two for a library kernel that reduces (module docstring: it reads a row, then
    computes from it)."""
    if k.one_op and not k.scalar and not k.lean:
        return (memory ** ONE_OP_OVERLAP + compute ** ONE_OP_OVERLAP) ** (1.0 / ONE_OP_OVERLAP)
    if k.kind == "library" and any(c.startswith("reduce") for c in k.ops):
        return memory + compute
    return max(memory, compute)


def _elapsed(program: ProgramCost, seconds: list, dispatch_s: float) -> dict:
    """id(access) -> seconds between the touch of its memory before and this one: half of
    the kernel that touched it last (it streams its buffers, as the distances assume), every
    kernel in between, half of this one, and the dispatch of the next call where the two
    touches are in two calls of the program."""
    n = len(program.kernels)
    lap = [seconds[i % n] for i in range(2 * n)]
    before = [0.0, *itertools.accumulate(lap)]        # before[t]: seconds of kernels 0..t-1
    out = {}
    for k in program.kernels:
        for a in k.accesses:
            if a.last < 0:
                continue
            out[id(a)] = (0.5 * lap[a.last] + before[a.at] - before[a.last + 1] + 0.5 * lap[a.at]
                          + (dispatch_s if a.last < n else 0.0))
    return out


def predict(program: ProgramCost, rates: Rates) -> Prediction:
    """Price ``program``; raises CostModelError naming every kernel it cannot price."""
    if program.refused:
        raise CostModelError(f"{program.source or program.module}: cannot model " + "; ".join(program.refused))
    short = [k.name for k in program.kernels if any(a.short_run for a in k.accesses)]
    if short and not rates.short_run:
        raise CostModelError(f"{program.source or program.module}: {', '.join(short)}: the rates have {NO_SHORT_RUN}")
    worker = program.operations >= ASYNC_MIN_OPS
    dispatch = rates.dispatch_async_s if worker else rates.dispatch_inline_s
    times = _price(program, rates, {})
    for _ in range(AGE_ROUNDS if rates.age_bytes_per_s > 0 else 0):
        times = _price(program, rates, _elapsed(program, [t.seconds for t in times], dispatch))
    return Prediction(program.module, times, dispatch, rates.launch_s, WORKER if worker else INLINE,
                      program.operations)


def _price(program: ProgramCost, rates: Rates, ages: dict) -> list:
    """Each kernel's KernelTime, its memory ``ages`` (``_elapsed``) seconds old."""
    times = []
    for k in program.kernels:
        mem = rates.memory_seconds(k, ages)
        comp, cls = rates.compute_seconds(k)
        faults = k.fault_pages * rates.fault_s
        if comp > mem:
            regime = f"compute ({cls}, {SCALAR_LOOP})" if k.scalar and cls != SCALAR_LOOP else f"compute ({cls})"
        else:
            far = max(k.accesses, key=lambda a: rates.access_seconds(a, ages.get(id(a), 0.0)), default=None)
            where = rates.level(rates.distance(far, ages.get(id(far), 0.0))) if far else ""
            regime = "launch" if far is None else f"memory ({where}, short runs)" if far.short_run else f"memory ({where})"
        times.append(KernelTime(k.name, k.kind, rates.launch_s + _body(k, mem, comp) + faults, mem, comp, faults,
                                regime, k.nbytes, k.working_set))
    return times


def predict_text(hlo_text: str, buffer_assignment_text: str | None, rates: Rates, *, source: str = "",
                 scalar_kernels: frozenset = frozenset(), lean_kernels: frozenset = frozenset()) -> Prediction:
    """``analyse`` then ``predict``."""
    return predict(analyse(hlo_text, buffer_assignment_text, source=source, scalar_kernels=scalar_kernels,
                           lean_kernels=lean_kernels), rates)


def compare(fused: Prediction, unfused: Prediction) -> dict:
    """The predicted times of two variants of one program and their difference (seconds)."""
    return {"fused_s": fused.total_s, "unfused_s": unfused.total_s, "extra_s": unfused.total_s - fused.total_s}
