"""kernel_perf: each kernel's time in a running program, from perf samples.  The names of
XLA:CPU's JIT kernels are read from LLVM's GDB JIT interface in this very process; the calls
kept are chosen by their neighbours' speed, not their own; a real profile of the unfused
softmax names its kernels and sums to the time of its calls."""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_dumpref.xla.cpu import cost_model, kernel_perf


def test_the_jit_kernels_of_this_process_are_named_after_the_optimized_programs_kernels():
    """Compiled here, a program's loop kernel is a function of the objects LLVM registered,
    with its name and an address and size that hold it (the perf map's three columns)."""
    x = jax.device_put(np.ones((64, 256), np.float32), jax.devices("cpu")[0])
    compiled = jax.jit(lambda a: jnp.tanh(a) * 3.0 + 1.0).lower(x).compile()
    jax.block_until_ready(compiled(x))
    kernels = [line.split("=")[0].strip().split()[-1].lstrip("%") for line in compiled.as_text().splitlines()
               if " fusion(" in line and "kind=kLoop" in line]
    assert kernels, compiled.as_text()
    functions = {name: (address, size) for name, address, size in kernel_perf.jit_functions()}
    for kernel in kernels:
        assert kernel in functions, (kernel, sorted(functions)[:20])
        address, size = functions[kernel]
        assert address > 0 and 0 < size < 1 << 20


def test_a_stripped_or_foreign_file_is_refused_by_name(tmp_path):
    f = tmp_path / "not-elf.so"
    f.write_bytes(b"MZ" + bytes(100))
    with pytest.raises(kernel_perf.PerfError, match="not a 64-bit little-endian ELF"):
        kernel_perf.symbol_value(str(f), "__jit_debug_descriptor")


def test_calls_are_kept_by_their_neighbours_speed_not_their_own():
    """A slow stretch (2 ms calls), then a fast one (1 ms) in which a call that catches a
    sample (one in two, at random) is 100 us longer for it.  Kept by their own time, the
    fastest quarter would be calls that caught none, and the kernel would read 0; kept by
    their neighbours', the calls of the fast stretch stay whatever they caught, and the kernel
    reads what the samples say: half the calls carry 250 us of it."""
    import random
    rng = random.Random(0)
    calls, samples, t = [], [], 0
    for i in range(400):
        sampled = rng.random() < 0.5
        d = 2_000_000 if i < 200 else 1_000_000 + (100_000 if sampled else 0)
        calls.append((t, t + d))
        if sampled:
            samples.append((t + 500_000, "wrapped_multiply"))
        t += d + 10_000
    kept, per_call = kernel_perf.attribute(calls, samples, frequency=4000, share=0.25)
    assert len(kept) >= 100 and all(b - a < 2_000_000 for a, b in kept)   # ties at the cut stay
    assert 90 < per_call["wrapped_multiply"] < 160, per_call
    by_own_time = sorted(calls[200:], key=lambda c: c[1] - c[0])[:100]
    assert all(c[1] - c[0] == 1_000_000 for c in by_own_time)   # what the other choice would keep


def test_perf_script_lines_are_read_to_time_and_symbol():
    text = ("  13846.571361054:      7fe69c5581ab PyVectorcall_Function\n"
            "13846.571660288:      7fe69aa9be63 ynn::exp_fp32_x86_avx512f_avx512bw\n"
            "13846.571752845:      7fe69aa9be45 \n")
    assert kernel_perf.parse_script(text) == [(13846571361054, "PyVectorcall_Function"),
                                             (13846571660288, "ynn::exp_fp32_x86_avx512f_avx512bw"),
                                             (13846571752845, "[unknown]")]


@pytest.fixture(scope="module")
def unfused_softmax():
    why = kernel_perf.perf_available()
    if why:
        pytest.skip(why)
    return kernel_perf.profile("pytest_dumpref.examples:softmax", (("float32", (1024, 1024)),),
                               {"xla_disable_hlo_passes": "fusion"}, seconds=3.0)


def test_a_profile_of_the_unfused_softmax_names_its_kernels_and_sums_to_its_calls(unfused_softmax):
    p = unfused_softmax
    assert p.calls >= 100 and p.kept >= 20
    # the samples of a kept call add up to its CPU time (the interrupts' cost included: 1-4 %)
    assert 0.85 * p.call_us < p.sampled_us < 1.2 * p.call_us, (p.sampled_us, p.call_us)
    kernels = kernel_perf.by_kernel(p, ["wrapped_broadcast", "wrapped_broadcast.1", "wrapped_divide",
                                        "wrapped_multiply", "ynn_fusion", "ynn_fusion.1"])
    # the multiply over 1M elements and the 4 MiB broadcast are loop kernels of their own;
    # the exponentials and row sums run in YNNPACK, the largest share
    assert kernels["loop"]["wrapped_multiply"] > 30 and kernels["loop"]["wrapped_broadcast"] > 10, kernels
    assert kernels["library"] > kernels["loop"]["wrapped_multiply"], kernels
    assert kernels["outside"] < 0.25 * p.call_us, kernels


def test_the_model_is_set_beside_the_profile_kernel_by_kernel(unfused_softmax, dump, unfused):
    from pytest_dumpref.xla.cpu import calibrate
    x = np.ones((1024, 1024), np.float32)
    from pytest_dumpref.examples import softmax
    plain = unfused(softmax, x, passes=["fusion"])
    rates = cost_model.Rates(dispatch_inline_s=8e-6, dispatch_async_s=19e-6, launch_s=0.5e-6,
                             curve=[(1.0, 1.5e-11), (64e6, 3e-11)], cold_s_per_byte=3e-11, fault_s=0.0,
                             compute={c: 1e-10 for c in cost_model.OP_CLASSES})
    prediction = calibrate.predict_dump(plain, rates)
    rows = kernel_perf.against_model(unfused_softmax, prediction)
    names = [r["kernels"] for r in rows]
    assert names[-2:] == ["library kernels", "outside the kernels"]
    assert {"wrapped_multiply", "wrapped_broadcast", "wrapped_divide"} <= set(names), names
    multiply = rows[names.index("wrapped_multiply")]
    assert multiply["count"] == 1 and multiply["model us"] > 0 and multiply["measured us"] > 0


def _row(kernels, model, measured, count=1, regimes=("memory (L3)",)):
    return {"kernels": kernels, "count": count, "regimes": list(regimes), "model us": model, "measured us": measured,
            "model us by regime": {regimes[0]: model} if regimes else {}}


def test_the_extra_times_miss_splits_into_its_kernels_misses():
    fused = [_row("add_multiply_fusion", 100.0, 90.0), _row("library kernels", 50.0, 55.0, regimes=()),
             _row("outside the kernels", 20.0, 40.0, 0, regimes=())]
    unfused = [_row("wrapped_multiply", 150.0, 210.0, count=3), _row("wrapped_add", 40.0, 30.0),
               _row("library kernels", 50.0, 60.0, regimes=()), _row("outside the kernels", 20.0, 90.0, 0, regimes=())]
    miss = kernel_perf.extra_time_miss(fused, unfused)
    # measured extra (210 + 30 + 60 + 90) - (90 + 55 + 40) = 205; model's (150 + 40 + 50 + 20) -
    # (100 + 50 + 20) = 90: the 115 missed, kernel by kernel, largest first
    assert [(r["kernels"], r["miss us"]) for r in miss] == [
        ("wrapped_multiply (unfused)", 60.0), ("outside the kernels", 50.0), ("wrapped_add (unfused)", -10.0),
        ("add_multiply_fusion (fused)", 10.0), ("library kernels", 5.0)]
    assert sum(r["miss us"] for r in miss) == pytest.approx(205.0 - 90.0)
    by = {r["kernels"]: r for r in miss}
    assert by["wrapped_multiply (unfused)"]["miss us"] == 60.0 and by["wrapped_multiply (unfused)"]["count"] == 3
    assert by["add_multiply_fusion (fused)"]["measured us"] == 90.0   # over-priced by 10 in the fused program
    assert by["library kernels"]["miss us"] == 5.0 and by["library kernels"]["model us"] is None
    assert [abs(r["miss us"]) for r in miss] == sorted((abs(r["miss us"]) for r in miss), reverse=True)


def test_the_timing_worker_logs_its_timed_calls_for_perf(tmp_path):
    # profile_run's worker, run without perf: it names the JIT kernels and logs every timed call
    import sys
    from pytest_dumpref import timing
    plan = timing.TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (8, 128)),),
                             variants={"fused": {}, "unfused": {"xla_disable_hlo_passes": "fusion"}},
                             rounds=3, calls_per_round=4, warmup_calls=2, passes=2, stream_shape=(8, 128))
    log = tmp_path / "calls.json"
    run = timing.run_plan(plan, command=(sys.executable, "-m", "pytest_dumpref.xla.cpu.kernel_perf",
                                         kernel_perf.TIMING_WORKER, str(log)))
    logged = json.loads(log.read_text())
    try:
        calls = logged["calls"]
        # every timed call, and only those: rounds x calls a round, per variant and calibration kernel
        assert {n for n, *_ in calls} == set(run.variants)
        assert all(sum(1 for c in calls if c[0] == n) == 3 * 4 for n in run.variants)
        # each call's time by the run's timer (its CPU time, or the wall clock where the CPU
        # clock's ticks are too coarse to time a call: provenance.call_timer), never 0
        assert all(a < b and t > 0 for _, a, b, t in calls)
        if run.timer != "process CPU time":
            assert all(t == b - a for _, a, b, t in calls)
        # each round's fastest call (the run's sample) is a logged call, timed as the run timed it
        for n in ("fused", "unfused"):
            logged_ns = {t for m, _, _, t in calls if m == n}
            assert all(round(s * 1e9) in logged_ns for s in run.variants[n].samples)
        # the JIT kernels are named for perf
        assert "wrapped_multiply" in Path(f"/tmp/perf-{logged['pid']}.map").read_text()
    finally:
        Path(f"/tmp/perf-{logged['pid']}.map").unlink(missing_ok=True)


def test_a_sampled_timing_run_spreads_each_variants_time_over_its_kernels():
    why = kernel_perf.perf_available()
    if why:
        pytest.skip(why)
    from pytest_dumpref import timing
    plan = timing.TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (512, 1024)),),
                             variants={"fused": {}, "unfused": {"xla_disable_hlo_passes": "fusion"}},
                             rounds=10, calls_per_round=20, warmup_calls=3, passes=2, stream_shape=(512, 1024))
    run, profiles = kernel_perf.profile_run(plan)
    assert set(profiles) == set(run.variants)
    for name, p in profiles.items():
        assert p.calls == 10 * 20 and p.call_us == pytest.approx(run.variants[name].median * 1e6)
        assert p.sampled_us == pytest.approx(p.call_us)       # the variant's time, spread
    unfused = kernel_perf.by_kernel(profiles["unfused"], ["wrapped_multiply", "wrapped_broadcast"])
    fused = kernel_perf.by_kernel(profiles["fused"], ["broadcast_multiply_fusion"])
    # the unfused program's multiply and the fused one's fusion, each a share (about 15 % and 7 %;
    # 200 calls give the fusion some 20 samples)
    assert unfused["loop"].get("wrapped_multiply", 0) > 0.05 * profiles["unfused"].call_us, unfused
    assert fused["loop"].get("broadcast_multiply_fusion", 0) > 0.03 * profiles["fused"].call_us, fused
    assert unfused["library"] > 0 and fused["library"] > 0
