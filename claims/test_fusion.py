"""Study: one fusion decision, reconstructed and verified.

The program is the softmax at the heart of attention, over scores f32[1024, 1024] (one head,
1024 queries by 1024 keys), forward only: it is the piece of a transformer block whose
fusions are easiest to see whole.  Before XLA's loop-fusion pass (``fusion``) runs on CPU,
the library rewriter (``dot-library-rewriter``) has already taken ``max``, ``x - max``,
``exp`` and ``sum`` into YNNPACK kernels, and the algebraic simplifier has turned
``e / s`` into ``e * broadcast(1 / s)``.  What is left for ``fusion`` is the normalisation::

    divide      = f32[1024]        divide(broadcast(1.0), sum)     # 1 / s, one per row
    broadcast.1 = f32[1024,1024]   broadcast(divide), dimensions={0}
    multiply    = f32[1024,1024]   multiply(exp, broadcast.1)      # ROOT

The decision studied: the pass fuses ``broadcast.1`` into ``multiply`` but refuses to fuse
``divide`` into that fusion, in its own words "Fusion is not profitable."  The claims below

  1.  argue that decision from XLA's CPU fusion policy, restated as a model that replays the
      pass and predicts every decision in its log (pytest_dumpref/xla/cpu/fusion_policy.py; 1b:
      the same model on the textbook case, exp with two consumers, library rewriter off);
  2.  predict the bytes that undoing the pass's fusions costs, exactly, and verify them;
  3.  predict the time those bytes cost at the bandwidth measured in the same run, pinned and
      single-threaded, and verify it against an A/A control;
  4.  show why the study runs at f32[1024,1024] and not f32[4096,4096];
  5.  show that the model is the policy, not a story about one decision: it predicts every
      decision of sixteen programs of a model and four it was not built on, and the bytes of
      undoing the pass; 6. those bytes against the time, program by program.

Rules cited (openxla/xla, read at 0725a3a9 for cpu_instruction_fusion.cc; the reason strings
the compiler logged in this run are the strings these functions return):
  xla/service/cpu/cpu_instruction_fusion.cc  CpuInstructionFusion::ShouldFuse, CanBeLoopFused,
                                             CpuInstructionFusion::IsExpensive
  xla/service/instruction_fusion.cc          InstructionFusion::ShouldFuse (FusionWouldDuplicate,
                                             IsAlwaysDuplicable), ReusesOperandElements
  xla/hlo/ir/hlo_instruction.cc              HloInstruction::OperandElementUse (broadcast: reuse)
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from pytest_dumpref import timing
from pytest_dumpref.examples import softmax
from pytest_dumpref.timing import TimingPlan, run_plan
from pytest_dumpref.xla.cpu import fusion_policy, fusion_programs
from pytest_dumpref.xla.cpu.fusion import (fused_opcodes, module_fusion, record_undo_measured,
                                       record_undo_prediction, softmax_normalisation)
from pytest_dumpref.xla.cpu.fusion_programs import HELD_OUT, M, SUITE, TIMED, WRITTEN_AFTER
from pytest_dumpref.xla.cpu.fusion_timing import ProgramTimes, UndoTiming
from pytest_dumpref.xla.passes import record_entry

pytestmark = pytest.mark.fusion

X_SHAPE = (1024, 1024)      # ~f32[1024,1024]: fusion effects measurable, allocation not dominant
PASSES = ["fusion"]         # on CPU the decision is this pass's.  The library rewriter runs
                            # before it in both variants and does the same in both (disabling it
                            # would change the program fusion sees: exp leaves YNNPACK); the
                            # fusion wrapper moves no bytes (checked in claim 2).
PROVENANCE = dict(dtype="f32", shapes={"x": X_SHAPE})


def _x():
    """The scores, committed to jax's CPU device so that every compile below targets XLA's
    CPU compiler even when a plugin device (this project's own) claims the default."""
    import jax
    x = np.random.default_rng(0).standard_normal(X_SHAPE).astype(np.float32)
    return jax.device_put(x, jax.devices("cpu")[0])


# ---- 1. the decision, argued from the policy --------------------------------------------------

@pytest.mark.claim(
    "XLA's CPU loop-fusion pass fuses the f32[1024,1024] broadcast of softmax's row reciprocal "
    "into the multiply that normalises the rows, but keeps the reciprocal itself (an f32 divide) "
    "out of that kernel: a divide is expensive on CPU and the broadcast would recompute each "
    "reciprocal once per column, 1024 times per row (\"Fusion is not profitable.\").",
    section="fusion", title="The reciprocal stays out of the multiply",
    finding="the restated rules predict {decisions the restated rules predict} of the {decisions of the fusion pass} decisions of the pass")
@pytest.mark.provenance(**PROVENANCE, method="every-pass XLA dump with xla_dump_fusion_visualization; "
                        "the pass's own decision log; rules of cpu_instruction_fusion.cc restated")
def test_broadcast_fused_reciprocal_refused(dump, evidence):
    evidence.excerpt("program.py, the program and its input (pytest_dumpref/examples.py and this claim "
                     "file, as they ran)",
                     "import jax\nimport jax.numpy as jnp\nimport numpy as np\n\n"
                     + inspect.getsource(softmax) + f"\n\nX_SHAPE = {X_SHAPE!r}\n\n\n"
                     + inspect.getsource(_x), lang="python", fold=True)
    d = dump(softmax, _x())
    before, _ = d.around_pass("fusion")
    divide, bcast, multiply = softmax_normalisation(before.module)
    record_entry(evidence, "entry computation before the fusion pass", before)

    # The compiler's own words, and every decision of the pass predicted by the restated
    # policy (pytest_dumpref/xla/cpu/fusion_policy.py, replaying the pass on the snapshot it saw).
    mf = module_fusion(d)
    mf.record(evidence, "every decision of the fusion pass, in its order: the compiler's log against "
              "the model (refusals end '; multi-output fusion not supported by this pass' in both; "
              "shown without it)", counts=True)
    assert not mf.disagreements() and len(mf.rows) == len(mf.log), mf.disagreements()
    rule_of = {(r["producer"], r["consumer"]): r["rule"] for r in mf.rows}
    fused_bcast = mf.decisions(producer=bcast.name, origin=multiply.name, fused=True)
    assert len(fused_bcast) == 1, f"no 'Fused |{bcast.name}|' into {multiply.name} in the log"
    kernel = fused_bcast[0].fusion
    refused = mf.decisions(producer=divide.name, consumer=kernel, fused=False)
    assert len(refused) == 1, f"no decision about {divide.name} -> {kernel} in the log"
    assert refused[0].reason.startswith("Fusion is not profitable."), refused[0].reason

    # Fusibility first (CpuInstructionFusion::ShouldFuse checks CanBeLoopFused before any
    # cost): both producers are loop-fusible, so neither refusal can be about fusibility.
    for inst in (divide, bcast):
        assert inst.opcode in fusion_policy.ELEMENTWISE | fusion_policy.LOOP_FUSIBLE, inst.opcode
    # ... while the YNNPACK kernels are custom fusions and are refused for that reason.
    ynn = [x for x in mf.decisions(fused=False) if x.producer.startswith("ynn_fusion")]
    assert ynn and all(x.reason.startswith(("Producer is not loop-fusible.",
                                            "Don't fuse instructions from custom fusions/calls")) for x in ynn)

    # Then profitability, rule "expensive producer and consumer reuses operand elements"
    # (CpuInstructionFusion::ShouldFuse, the "Cost condition").
    # (a floating-point divide is expensive: only integer division by a constant is cheap)
    assert divide.shape.element_type == "f32"
    assert rule_of[(divide.name, kernel)] == "IsExpensive and ReusesOperandElements"
    assert bcast.opcode not in fusion_policy.EXPENSIVE and \
        rule_of[(bcast.name, multiply.name)] == "ShouldFuse: consumer is loop-fusible"
    # The consumer by then is the fusion holding the broadcast: ReusesOperandElements holds
    # because the divide's value reaches a broadcast inside it (OperandElementUse of a
    # broadcast is "reuse": each input element feeds many output elements).
    reuse = bcast.shape.element_count // divide.shape.element_count
    assert reuse == X_SHAPE[1] == 1024
    # Duplication (InstructionFusion::ShouldFuse, FusionWouldDuplicate): the broadcast has
    # one user, so fusing it duplicates nothing (and broadcasts may always be duplicated:
    # IsAlwaysDuplicable).
    assert [u.name for u in before.module.entry.users(bcast.name)] == [multiply.name]

    # The result in the optimized program: the multiply's kernel holds the broadcast and no
    # divide; the divide is a kernel of its own writing f32[1024].
    opt = d.optimized
    root = opt.entry.root
    assert root.opcode == "fusion" and root.fusion_kind == "kLoop"
    inside = fused_opcodes(opt, root)
    assert {"broadcast", "multiply"} <= inside and "divide" not in inside, inside
    div_kernel = [p for p in map(opt.entry.instruction, root.operands)
                  if p.opcode == "fusion" and "divide" in fused_opcodes(opt, p)]
    assert len(div_kernel) == 1 and div_kernel[0].shape.element_count == X_SHAPE[0]
    record_entry(evidence, "optimized entry computation", d)
    d.session.record_folders(evidence)

    evidence.number("elements of the broadcast per reciprocal (reuse factor)", reuse)
    evidence.number("divides executed as compiled", divide.shape.element_count)
    evidence.number("divides had the reciprocal been fused into the multiply", bcast.shape.element_count)
    saved_bytes = 2 * divide.shape.byte_size    # the reciprocals written once and read once
    extra_divides = bcast.shape.element_count - divide.shape.element_count
    evidence.note(
        "Fusibility first: CpuInstructionFusion::ShouldFuse (xla/service/cpu/cpu_instruction_fusion.cc) "
        "refuses producers that CanBeLoopFused rejects before it weighs any cost; that is why the "
        "YNNPACK kernels are never fused into ('Producer is not loop-fusible.'). The broadcast and the "
        "divide both pass. Profitability next: the same function forbids fusing a producer that "
        "CpuInstructionFusion::IsExpensive calls expensive (a floating-point divide is; only integer "
        "division by a constant is cheap) into a consumer that ReusesOperandElements for it "
        "(instruction_fusion.cc). The consumer by then is the fusion that already holds the broadcast: "
        "a broadcast reuses its operand (HloInstruction::OperandElementUse), and when the broadcast was "
        "fused, InstructionFusion::UpdateReusedOperandsForFusion carried that reuse over to the fusion, "
        "so the fusion counts as reusing the divide. "
        f"Fusing the reciprocal would trade {saved_bytes:,} bytes of memory traffic for "
        f"{extra_divides:,} extra divides. "
        "The broadcast, cheap and with a single user, passes InstructionFusion::ShouldFuse's "
        "duplication test (FusionWouldDuplicate) and is fused: the f32[1024,1024] it would "
        "produce never exists in memory.")


# ---- 1b. the same rules on the textbook case --------------------------------------------------

@pytest.mark.claim(
    "The same restated rules predict every decision of the pass when XLA's library rewriter is "
    "off and the whole softmax is left to it: exp(x - max), expensive and read by both the row "
    "sum and the normalising multiply, is fused into neither and written to memory once "
    "(\"expensive producer would be duplicated\"); the row max stays out of the exp kernel and "
    "the reciprocal out of the multiply (\"Fusion is not profitable.\"), the same decision as "
    "with the rewriter on.", section="fusion", title="The same rules with the library rewriter off")
@pytest.mark.provenance(**PROVENANCE, method="every-pass XLA dump with xla_dump_fusion_visualization and "
                        "xla_disable_hlo_passes=dot-library-rewriter; the pass's decision log against "
                        "the restated rules")
def test_rules_predict_exp_not_duplicated(dump, evidence):
    d = dump(softmax, _x(), xla_disable_hlo_passes="dot-library-rewriter")
    before, _ = d.around_pass("fusion")
    entry = before.module.entry
    record_entry(evidence, "entry computation before the fusion pass", before)
    mf = module_fusion(d)
    mf.record(evidence, "every decision of the fusion pass: the compiler's log against the model")
    assert not mf.disagreements() and len(mf.rows) == len(mf.log), mf.disagreements()

    exp = next(i for i in entry.instructions if i.opcode == "exponential")
    consumers = sorted(u.opcode for u in entry.users(exp.name))
    assert consumers == ["multiply", "reduce"], consumers
    refusals = mf.decisions(producer=exp.name, fused=False)
    assert len(refusals) == 2 and all(x.reason.startswith("expensive producer would be duplicated")
                                      for x in refusals)
    assert not mf.decisions(producer=exp.name, fused=True)
    divide, _, multiply = softmax_normalisation(before.module)
    # the row max is the reduce whose result is broadcast back over the row (the sum is divided)
    row_max = next(i for i in entry.instructions if i.opcode == "reduce"
                   and any(u.opcode == "broadcast" for u in entry.users(i.name)))
    for producer, origin in ((divide.name, multiply.name), (row_max.name, exp.name)):
        refused = mf.decisions(producer=producer, consumer=mf.kernel_of(origin), fused=False)
        assert any(x.reason.startswith("Fusion is not profitable.") for x in refused), (producer, origin)
    d.session.record_folders(evidence)
    evidence.number("consumers of exp", len(consumers))
    evidence.number("exp evaluations avoided per call by not duplicating it", exp.shape.element_count)
    evidence.number("bytes of exp in memory (written once, read by both consumers)", exp.shape.byte_size,
                    unit="B")
    evidence.note("InstructionFusion::ShouldFuse (xla/service/instruction_fusion.cc) refuses a fusion that "
                  "FusionWouldDuplicate (the producer has users outside the consumer) when the producer "
                  "is expensive and not IsAlwaysDuplicable; exp is expensive on CPU. The cheap subtract "
                  "and broadcast before it are fused into the exp kernel instead.")


# ---- 2. the bytes, predicted from the shapes, then verified ------------------------------------

@pytest.mark.claim(
    "Without the fusion pass, the softmax writes the broadcasts the pass had fused to memory and "
    "reads them back: predicted from the pass's decision log and the shapes before it ran, and "
    "equal, byte for byte, to the traffic of the compiled unfused program and to XLA's own cost "
    "analysis.", section="fusion", title="The bytes of undoing the pass, predicted exactly",
    finding="undoing the pass writes {measured extra bytes written} and reads {measured extra bytes read} more, as predicted to the byte")
@pytest.mark.provenance(**PROVENANCE, method="spill-style traffic of the optimized modules (traffic.py) "
                        "and XLA HloCostAnalysis 'bytes accessed', default vs xla_disable_hlo_passes=fusion")
def test_unfused_bytes_match_prediction(dump, unfused, evidence):
    x = _x()
    fused = dump(softmax, x)
    # Prediction (fusion.undo_prediction): each producer the pass fused stops existing in
    # memory; undone, it is written once by its own kernel (a constant is not: it lives in the
    # executable) and read once by each user.
    predicted_written, predicted_read = record_undo_prediction(evidence, fused)
    # The decision studied (the f32[1024,1024] broadcast fused into the multiply) is nearly
    # all of it; the rest is the f32[1024] broadcast of 1.0 fused into the divide.
    _, bcast, _ = softmax_normalisation(fused.around_pass("fusion")[0].module)
    share = 2 * bcast.shape.byte_size / (predicted_written + predicted_read)
    evidence.number("share of the extra bytes due to the studied broadcast", share)
    assert share > 0.99

    # Verification: the two optimized modules' traffic, kernel by kernel, and XLA's count.
    plain = unfused(softmax, x, passes=PASSES)
    extra_written, extra_read = record_undo_measured(evidence, fused, plain)
    xla_f, xla_u = fused.xla_bytes_accessed, plain.xla_bytes_accessed
    assert (extra_written, extra_read) == (predicted_written, predicted_read)
    assert xla_u - xla_f == predicted_written + predicted_read
    assert (fused.traffic, plain.traffic) == (xla_f, xla_u)

    # "fusion" is exactly the pass that matters: the fusion wrapper, which runs after it and
    # wraps each leftover instruction in a kernel of its own, moves no bytes either way.
    bare = unfused(softmax, x, passes=PASSES + ["fusion-wrapper"])
    evidence.number("XLA bytes accessed, without fusion and fusion-wrapper", bare.traffic, unit="B")
    assert bare.traffic == plain.traffic
    fused.session.record_folders(evidence)


# ---- 3. the time, predicted at the measured bandwidth, then measured ---------------------------

# The bounds of claims 3 and 6, and why the cost model's extra-time goals are stated and not
# asserted: the ratios each machine and run gave are in docs/timing-bounds.md.
TIME_TOLERANCE = 0.25       # the argument's aim for |measured/predicted - 1|, stated
SOFTMAX_AT_LEAST = 0.8      # asserted: the lowest measured, 0.90 (Intel Xeon)
MODEL_WITHIN = (0.9, 1.1)
MODEL_RUNS = 5
SOFTMAX_AA_LIMIT = 0.25
AA_LIMIT = 0.10     # across programs: A/A controls under this share of the measured effect


@pytest.mark.claim(
    "At the memory bandwidth measured in the same run, the bytes the fusion pass saves give how "
    f"much slower the softmax runs without it to at least {SOFTMAX_AT_LEAST:g} of the measured "
    "extra time, and how much more depends on the machine's caches (the environment's caches row): "
    "near the bytes' time where the calibration stream runs from the cache level the unfused "
    "kernels run from, above it where the stream stays in a faster one (stated below, against the "
    f"{TIME_TOLERANCE:.0%} the argument aimed for). The kernel cost model, pricing each kernel at "
    f"rates measured in a run of its own, aims to predict the extra time to within {MODEL_WITHIN[0]:g} "
    f"and {MODEL_WITHIN[1]:g} of the measured in {MODEL_RUNS - 1} of {MODEL_RUNS} such runs; its runs "
    "are stated against that goal, not asserted: on another kind of machine, and at the end of the CI "
    "sequence, their median has fallen under the band.",
    section="fusion",
    title="The time of undoing the pass, predicted from the bytes",
    finding="predicted {predicted extra time per call} a call, measured {measured extra time per call (median of paired rounds)}: a ratio of {measured / predicted extra time}")
@pytest.mark.provenance(**PROVENANCE, method="pytest_dumpref.timing: subprocess pinned to one CPU, "
                        "XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, 40 interleaved rounds, A/A control, "
                        "bandwidth of a y=2x stream over f32[1024,1024] less dispatch cost")
def test_unfused_time_matches_prediction(dump, unfused, evidence, tmp_path):
    x = _x()
    fused, plain = dump(softmax, x), unfused(softmax, x, passes=PASSES)
    xla_f, xla_u = fused.xla_bytes_accessed, plain.xla_bytes_accessed
    extra_bytes = xla_u - xla_f
    fused.session.record_folders(evidence)

    t = UndoTiming.measure("pytest_dumpref.examples:softmax", (("float32", X_SHAPE),), PASSES,
                           model_runs=MODEL_RUNS, stream_shape=X_SHAPE, rounds=40, calls_per_round=20,
                           warmup_calls=20, passes=5)
    run = t.run
    # The timed programs are the dumped ones: same bytes by XLA's own count (the pinned
    # compile differs only in not splitting loops across threads).
    assert run.variants["fused"].bytes_accessed == xla_f
    assert run.variants["without fusion"].bytes_accessed == xla_u

    # Prediction first: from the bytes and the calibration kernels alone.
    predicted = timing.record_prediction(evidence, run, extra_bytes, "XLA bytes accessed, unfused - fused")

    # Then the measurement.
    measured = timing.record_difference(evidence, run, "measured extra time per call (median of paired rounds)",
                                        "fused", "without fusion")
    aa = run.difference("fused", "fused, compiled again (A/A)")
    ratio = measured / predicted
    # The A/A difference is noise around zero by design: what the claim asserts of it is a
    # bound, against the prediction, and so is the ratio.
    aa_share = abs(aa) / predicted
    assert aa_share <= SOFTMAX_AA_LIMIT, (
        f"A/A control differs by {aa * 1e6:.1f} us, more than {SOFTMAX_AA_LIMIT:.0%} of the predicted "
        f"{predicted * 1e6:.1f} us: this run was too noisy to judge the prediction")
    evidence.number("|A/A difference| / predicted extra time", aa_share, bound=("<=", SOFTMAX_AA_LIMIT))
    assert ratio >= SOFTMAX_AT_LEAST, (
        f"measured {measured * 1e6:.1f} us vs predicted {predicted * 1e6:.1f} us "
        f"(ratio {ratio:.2f}): undoing the pass cost less than {SOFTMAX_AT_LEAST:g} of its bytes at the stream's bandwidth")
    evidence.number("measured / predicted extra time", ratio, bound=(">=", SOFTMAX_AT_LEAST))
    evidence.table("per-call times, pinned single thread", run.table())
    t.record_model(evidence, fused, plain, MODEL_WITHIN)
    # The note says nothing that depends on where in its spread this run's ratio fell: the
    # ratio straddles the aim's bound from run to run (1.24 in one fresh-clone check, 2.6 in
    # a render), and a sentence that flipped with it would not reproduce.
    evidence.note("Method: " + run.method() + f". The claim holds when measured/predicted >= "
                  f"{SOFTMAX_AT_LEAST:g}, |A/A difference| <= {SOFTMAX_AA_LIMIT:g} x "
                  f"predicted; this is what each run asserts. How many of the cost model's {MODEL_RUNS} runs of "
                  f"its own give measured/model extra time in [{MODEL_WITHIN[0]:g}, {MODEL_WITHIN[1]:g}] is stated "
                  f"against the goal of {MODEL_RUNS - 1} of {MODEL_RUNS}, not asserted. The argument aimed for "
                  "|measured/predicted - 1| "
                  f"<= {TIME_TOLERANCE:g}; the ratio above says how far this run came from that, and the "
                  "claim does not assert it.")
    t.record_listings(evidence, "softmax", at_least=SOFTMAX_AT_LEAST, aa_limit=SOFTMAX_AA_LIMIT)
    # The model's runs from the page: their listings and commands, and cost_model.py run alone
    # on the first run's timings and this claim's dumps prices them as the model did here.
    printed, priced_here = t.record_model_from_the_page(evidence, tmp_path / "model-from-the-page", "softmax",
                                                        fused, plain)
    assert printed == priced_here, (printed, priced_here)
    array = int(np.prod(X_SHAPE)) * 4
    evidence.note(f"Each f32[1024,1024] array is {array // 2**20} MiB; the three a kernel touches "
                  f"({3 * array // 2**20} MiB) stay in any last-level cache that holds them (this "
                  "machine's caches are in the environment table), and the stream kernel's arrays are "
                  "the same size, so the bandwidth measured here is that of the same level of the "
                  "memory hierarchy, not a datasheet DRAM figure: the right rate for the prediction, "
                  "because the extra traffic is made of arrays of the same size, streamed the same way.")
    t.record_figure(evidence, predicted, tmp_path / "fusion-prediction.png",
                    "softmax f32[1024,1024] with and without XLA's fusion pass")

    # Allocation must not dominate: the fresh pages a call touches (minor page faults, 4 KiB
    # each) stay under a tenth of the traffic being predicted.  The unfused program allocates
    # its 4 MiB temporary per call; after warm-up the allocator serves it without faulting
    # most of the time, and a round's fastest call is one that did not fault.
    page = 4096
    for name in ("fused", "without fusion"):
        faults = run.variants[name].minor_faults_per_call
        assert faults * page < 0.1 * extra_bytes, (
            f"{name}: {faults:.0f} page faults per call; allocation, not traffic, would be timed")
        evidence.number(f"minor page faults per call, {name}", faults, bound=("<", 0.1 * extra_bytes / page))


# ---- 4. why this size ------------------------------------------------------------------------

BIG = (4096, 4096)


@pytest.mark.claim(
    "The decision belongs to the size studied: at f32[4096,4096] XLA's library rewriter hands "
    "the whole softmax to a single YNNPACK kernel, so the fusion pass has nothing to decide and "
    "disabling it changes nothing; and every call there faults in its entire 64 MiB output, so a "
    "timing at that size would measure allocation, not the traffic a fusion saves.",
    section="fusion", title="Why f32[1024,1024] and not f32[4096,4096]")
@pytest.mark.provenance(dtype="f32", shapes={"x": BIG},
                        method="every-pass XLA dump; unfused fixture; pytest_dumpref.timing "
                        "(pinned single thread) minor page faults per call")
def test_large_size_has_no_decision_and_times_allocation(dump, unfused, evidence):
    import jax
    from pytest_dumpref.xla.dump import DumpError

    x = jax.device_put(np.zeros(BIG, np.float32), jax.devices("cpu")[0])
    d = dump(softmax, x)
    kernels = [i for i in d.optimized.entry.instructions if i.opcode not in ("parameter", "constant")]
    record_entry(evidence, "optimized entry computation at f32[4096,4096]", d)
    evidence.number("kernels in the optimized program", len(kernels))
    assert len(kernels) == 1 and kernels[0].fusion_kind == "kCustom" and "__ynn_fusion" in kernels[0].line
    changed = d.passes_that_changed()
    evidence.note("Passes that changed the module at this size, in order: " + ", ".join(changed) + ".")
    assert "dot-library-rewriter" in changed and "fusion" not in changed
    with pytest.raises(DumpError, match="unchanged|never changed"):
        unfused(softmax, x, passes=PASSES)

    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", BIG),),
                      variants={"softmax": {}}, stream_shape=BIG, rounds=8, calls_per_round=3, warmup_calls=2)
    run = run_plan(plan)
    block = timing.plan_block(plan)
    evidence.excerpt("the timing plan at f32[4096,4096]: timed.py of the claim 'The time of undoing the pass, "
                     "predicted from the bytes' runs it with this block in place of its own plan (its JSON "
                     "gives each variant's minor page faults per call, from getrusage)", block, lang="python",
                     fold=True)
    pages = x.size * x.dtype.itemsize // 4096
    faults = run.variants["softmax"].minor_faults_per_call
    evidence.number("4 KiB pages in the output", pages)
    # One fault per page, every call: the buffer goes back to the system after each call and
    # the next call touches fresh pages (consistent with glibc's malloc, which serves blocks
    # above its largest mmap threshold, 32 MiB, straight from mmap and unmaps them on free).
    assert faults >= 0.9 * pages
    evidence.number("minor page faults per call (pinned single thread)", faults, bound=(">=", 0.9 * pages))
    # the softmax's row only: this claim uses no bandwidth, and the 8-element dispatch kernel,
    # timed beside 64 MiB kernels that flush the caches, measured 17.17 ± 3.5 us in one render:
    # too noisy a row for any re-run to be judged against it
    evidence.table("per-call time at f32[4096,4096], pinned single thread",
                   [row for row in run.table() if row["variant"] == "softmax"], fold=True)


# ---- 5. the policy, across programs -----------------------------------------------------------

# The programs and their inputs: pytest_dumpref/xla/cpu/fusion_programs.py.  Every decision is
# compared exactly; a model without any one of its rules mispredicts at least one (the
# knock-out table).  Of the bytes against the time, only the ranking held in every run
# (docs/timing-bounds.md).
RANK_CORRELATION = 0.6


@pytest.mark.claim(
    "The restated policy is XLA's CPU fusion pass, not a story about one decision: replayed "
    "on the module the pass saw, the model in pytest_dumpref/xla/cpu/fusion_policy.py predicts "
    f"every decision the pass logs, in its order and in its words, for {len(SUITE)} programs of a "
    "model (norms, activations, MLP blocks, attention scores and rotary embeddings, losses, "
    f"optimizer updates, gradients, a convolution), for {len(HELD_OUT)} programs it was not built on "
    f"and {len(WRITTEN_AFTER)} written after it; and it predicts, byte for byte, what undoing the pass "
    "costs in memory traffic.", section="fusion",
    title=f"The policy predicts every decision of {len(SUITE) + len(HELD_OUT) + len(WRITTEN_AFTER)} programs",
    finding="{decisions predicted exactly, all programs} of the {decisions logged, all programs} decisions logged, predicted exactly")
@pytest.mark.provenance(dtype="f32", shapes={"most arrays": M},
                        method="every-pass XLA dump with xla_dump_fusion_visualization (the pass's "
                        "log) against fusion_policy.predict on the snapshot before the pass; "
                        "spill-style traffic (traffic.py) of the model's modules and of the "
                        "compiled ones, default and xla_disable_hlo_passes=fusion")
def test_policy_predicts_every_program(dump, unfused, evidence, tmp_path):
    # every program's decisions, its knock-outs (each rule left out in turn: decisions then
    # missed) and the bytes of undoing the pass: fusion_programs.policy_across_programs
    across = fusion_programs.policy_across_programs(dump, unfused, PASSES)
    across.record(evidence)
    logged, agreed = across.logged, across.agreed
    evidence.note(
        f"A decision is predicted when the model and the log agree on the producer, on the instruction "
        "the consumer grew from, and on the verdict: 'fused', or the compiler's whole reason, character "
        "for character (compare aligns the two lists with difflib, so one wrong prediction costs one "
        f"decision); it mispredicts none of the {logged:,} (a misprediction would be listed here, with "
        "the rule that made it, and fail the claim). Held-out programs are functions of "
        "pytest_dumpref.examples written before the model and not run on it while it was built; the programs 'written after' were written once it was "
        "finished and run on it unchanged. The extra bytes are the traffic (traffic.py, spill-style) of "
        "the module the model writes out as HLO (fusion_policy.fused_module_text), fusion pass undone "
        "against done, both after the fusion wrapper; they are not part of the listing below.")
    # The same total from the page alone: the two listings saved in an empty folder and run with
    # plain jax and XLA_FLAGS, nothing of this package imported.
    done, total = fusion_programs.record_policy_from_the_page(evidence, tmp_path / "from-the-page")
    assert done.returncode == 0, f"the listings failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    assert total == f"all {len(across.modules)} modules: {agreed} of {logged} decisions predicted", total

    assert agreed == logged, f"{logged - agreed} decisions mispredicted: {across.misses[:5]}"
    for r in across.per_program:
        assert r["extra bytes predicted"] == r["extra bytes measured"], r
    assert all(n > 0 for n in across.knockouts.values()), across.knockouts


# ---- 6. the time of undoing the pass, across programs ------------------------------------------

# The fused programs' time and the extra time's median error are asserted; the worst error is
# stated: a program's measured extra time moves between runs by more than the worst goal
# (docs/timing-bounds.md).
FUSED_TIME_ERROR = 0.15
EXTRA_TIME_GOAL = {"median": 0.10, "worst": 0.25}


@pytest.mark.claim(
    f"Across the {len(SUITE)} programs, undoing the fusion pass slows every one, and the extra "
    "bytes the policy predicts rank the programs by how much (Spearman rank correlation at least "
    f"{RANK_CORRELATION:g}); and the kernel cost model, at rates measured in the same run, "
    f"predicts the time of the fused programs to within {FUSED_TIME_ERROR:.0%} at the median, over "
    f"every one it prices of the {len(TIMED)} programs of the claim 'The policy predicts every decision' "
    "(the table below names those it refuses, and why), and their extra time without the pass to "
    f"within {EXTRA_TIME_GOAL['median']:.0%} at the median. Its worst error on the extra time is stated "
    f"against the goal of {EXTRA_TIME_GOAL['worst']:.0%}, not asserted: a program's measured extra "
    "time moves between runs by more than that allows.",
    section="fusion",
    title="The time of undoing the pass, across programs",
    finding="Spearman rank correlation {Spearman rank correlation, predicted against measured extra time}; "
            "the fused programs' time within {fused programs' time, median |measured/model - 1|} of the model at the median")
@pytest.mark.provenance(dtype="f32", shapes={"most arrays": M},
                        method="pytest_dumpref.timing: one subprocess pinned to one CPU, "
                        "XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, every program's fused, A/A and "
                        "unfused variants and the cost model's calibration kernels in the same "
                        "interleaved rounds; predicted bytes from fusion_policy on the snapshot before "
                        "the pass; predicted times from cost_model on the optimized modules and their "
                        "buffer assignments")
def test_policy_predicts_time_across_programs(dump, evidence, tmp_path):
    # every program dumped, fused and unfused, and timed in one run with the cost model's
    # calibration kernels; those the model refuses are not timed (the table below says why)
    t = ProgramTimes.measure(dump, PASSES)
    t.record(evidence, tmp_path)
    assert not t.slower, f"undoing the fusion pass did not slow {t.slower}"
    assert t.aa_share <= AA_LIMIT, (
        f"the A/A controls differ by a median {t.aa_share:.0%} of the measured differences: too noisy to judge")
    assert t.rank_correlation >= RANK_CORRELATION, (
        f"the predicted bytes rank the programs' slowdowns with a Spearman correlation of only "
        f"{t.rank_correlation:.2f}")
    assert len(t.model) >= len(TIMED) // 2, f"the cost model refused {len(t.refused)} of {len(TIMED)} programs: {t.refused}"
    assert t.fused_median <= FUSED_TIME_ERROR, (
        f"the cost model's median error on the fused programs' time is {t.fused_median:.3f}, over "
        f"{FUSED_TIME_ERROR}: {[(n, round(r, 3)) for n, r in t.fused_ratios]}")
    assert t.extra_median <= EXTRA_TIME_GOAL["median"], (
        f"the cost model's median error on the programs' extra time is {t.extra_median:.3f}, over "
        f"{EXTRA_TIME_GOAL['median']}")
    t.record_numbers(evidence, rank_correlation=RANK_CORRELATION, aa_limit=AA_LIMIT, fused_error=FUSED_TIME_ERROR,
                     extra_error=EXTRA_TIME_GOAL["median"])
    t.record_goals(evidence, EXTRA_TIME_GOAL)
    evidence.note("Where the model misses (the per-program table's last column and the table by class): the "
                  "run's worker is sampled by Linux perf (cpu-clock at 4 kHz; pytest_dumpref/xla/cpu/kernel_perf.py), "
                  "and each variant's measured time is spread over its kernels in proportion to their samples "
                  "in its timed calls, so that a program's miss of its extra time (measured less model) splits "
                  "exactly into its kernels' misses, in the rounds that measured the model's rates. Kernels of "
                  "one name share one function and one measured time. 'Outside the kernels' is what a call runs "
                  "outside XLA's and the library's kernels: the runtime between kernels, the allocator, Python, "
                  "and the system's interrupts and page faults, whose time grows with the call's; the model "
                  "charges a call's dispatch and a launch per kernel for it, and its rates, measured on whole "
                  "calls, carry the rest inside each kernel's price.")
    # The model from the page: its one-file listing, run alone with plain Python on this run's
    # timings and the programs' dumps, prices every program it priced here, to the last bit.
    printed, priced_here = t.record_model_from_the_page(evidence, tmp_path / "model-from-the-page")
    assert printed == priced_here, (printed[:4], priced_here[:4])
    evidence.note("Method: " + t.run.method() + "; every program's three variants and the cost model's "
                  "calibration kernels (pytest_dumpref/xla/cpu/calibrate.py) in the same rounds; the model's "
                  "rates come from those kernels (calibrate.rates_from), and it prices the optimized "
                  "module of each variant with its buffer assignment (calibrate.predict_dump). The claim "
                  "holds when every program's measured extra time is above zero, the Spearman rank "
                  "correlation of the extra bytes' time at the stream's bandwidth and the measured extra "
                  f"time (from the unrounded times) is at least {RANK_CORRELATION:g} and the median over "
                  f"programs of |A/A difference| / measured extra time is at most {AA_LIMIT:.0%}; "
                  "statistic.py prints them. It holds too when the median over the programs the model "
                  "prices of |measured/model - 1| of the fused program's time is at most "
                  f"{FUSED_TIME_ERROR:g}; the programs it does not price (the table above) are not timed, "
                  f"but for the {len(SUITE)} of the rank correlation.")
    t.record_listings(evidence, rank_correlation=RANK_CORRELATION, aa_limit=AA_LIMIT)

