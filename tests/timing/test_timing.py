"""timing.py: the pinned, single-threaded, interleaved measurement the fusion claims rest on.

The arithmetic is tested on synthetic samples (exact numbers); the subprocess is tested once,
on a tiny plan, for what the method promises: the pin, the flags, interleaving, the A/A pair,
XLA's byte counts, and clear errors.
"""
import inspect
import json
import os
import statistics
import subprocess
import sys

import pytest

from pytest_dumpref import timing
from pytest_dumpref.timing import (DISPATCH, DISPATCH_WORKER, STREAM, TimingError, TimingPlan, TimingResult,
                                   VariantTiming, resolve_program, run_plan)

PLAN = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (64, 64)),),
                  variants={"fused": {}, "fused (A/A)": {}, "unfused": {"xla_disable_hlo_passes": "fusion"}},
                  stream_shape=(256, 256), rounds=6, calls_per_round=3, warmup_calls=2)


def _result(samples: dict, bytes_: dict) -> TimingResult:
    variants = {n: VariantTiming(n, {}, bytes_[n], s, 0.0) for n, s in samples.items()}
    return TimingResult(PLAN, variants, orders=[], cpu=0, xla_flags="", jax_version="")


def test_paired_difference_is_the_median_of_per_round_differences():
    r = _result({"a": [1.0, 2.0, 3.0], "b": [1.5, 2.1, 4.0]}, {"a": 0, "b": 0})
    assert r.paired_differences("a", "b") == pytest.approx([0.5, 0.1, 1.0])
    assert r.difference("a", "b") == pytest.approx(0.5)


def test_bandwidth_removes_the_worker_threads_dispatch_cost_per_round():
    # stream: 1000 bytes in 11 us; the worker's dispatch: 64 bytes in 1 us -> 936 bytes in 10
    # us.  The calling thread's (8 elements) is not the stream's: PJRT runs the stream on its
    # worker thread, and so the kernel over WORKER_ELEMENTS
    r = _result({STREAM: [11e-6, 12e-6, 11e-6], DISPATCH_WORKER: [1e-6, 2e-6, 1e-6], DISPATCH: [0.5e-6] * 3},
                {STREAM: 1000.0, DISPATCH_WORKER: 64.0, DISPATCH: 32.0})
    assert r.bandwidth == pytest.approx(936 / 10e-6)
    assert r.predicted_seconds(9360) == pytest.approx(100e-6)


def test_the_two_dispatch_kernels_are_on_either_side_of_the_worker_threads_threshold(small_run):
    """The cost model charges the worker's dispatch to a program of ASYNC_MIN_OPS flops or
    more (XLA's count: one an element of y = 2x), the calling thread's below; the stream, over
    the plan's array, is above."""
    from pytest_dumpref.xla.cpu import cost_model
    assert 8 < cost_model.ASYNC_MIN_OPS <= timing.WORKER_ELEMENTS <= PLAN.stream_shape[0] * PLAN.stream_shape[1]
    assert small_run.variants[DISPATCH_WORKER].bytes_accessed == 2 * 4 * timing.WORKER_ELEMENTS
    assert small_run.variants[DISPATCH].bytes_accessed == 2 * 4 * 8


def test_bandwidth_refuses_a_stream_no_slower_than_dispatch():
    r = _result({STREAM: [1e-6] * 3, DISPATCH_WORKER: [2e-6] * 3}, {STREAM: 1000.0, DISPATCH_WORKER: 64.0})
    with pytest.raises(TimingError, match="not slower than the worker's dispatch kernel"):
        r.bandwidth


def test_cold_bandwidth_refuses_a_cold_stream_no_slower_than_dispatch():
    r = _result({timing.STREAM_COLD: [1e-6] * 3, DISPATCH_WORKER: [2e-6] * 3},
                {timing.STREAM_COLD: 1000.0, DISPATCH_WORKER: 64.0})
    with pytest.raises(TimingError, match="cold streaming kernel .* not slower than the worker's dispatch kernel"):
        r.cold_bandwidth


def _numbers(evidence) -> dict:
    return {i["name"]: i for i in evidence.items if i["kind"] == "number"}


def test_a_prediction_is_recorded_with_its_bytes_bandwidth_and_noise():
    from pytest_dumpref.claims import Evidence
    # the bandwidth test's run: 936 bytes in 10 us per round, so 9360 bytes take 100 us
    r = _result({STREAM: [11e-6, 12e-6, 11e-6, 13e-6], DISPATCH_WORKER: [1e-6, 2e-6, 1e-6, 2e-6]},
                {STREAM: 1000.0, DISPATCH_WORKER: 64.0})
    ev = Evidence()
    predicted = timing.record_prediction(ev, r, 9360, "XLA bytes accessed, b - a")
    assert predicted == pytest.approx(100e-6) == r.predicted_seconds(9360)
    got = _numbers(ev)
    assert list(got) == ["extra bytes (XLA bytes accessed, b - a)",
                         "measured bandwidth (stream kernel, pinned single thread)", "predicted extra time per call"]
    assert got["extra bytes (XLA bytes accessed, b - a)"]["value"] == 9360
    assert got["measured bandwidth (stream kernel, pinned single thread)"]["value"] == pytest.approx(r.bandwidth / 1e9)
    assert got["predicted extra time per call"]["value"] == pytest.approx(100.0)
    assert got["predicted extra time per call"]["unit"] == "us"
    # the noise is the bandwidth's, carried over: the same share of the value
    assert got["predicted extra time per call"]["noise"] == pytest.approx(100.0 * r.bandwidth_noise / r.bandwidth)


def test_a_difference_is_recorded_in_microseconds_with_its_noise():
    from pytest_dumpref.claims import Evidence
    r = _result({"a": [1e-6, 2e-6, 3e-6, 4e-6], "b": [2e-6, 4e-6, 5e-6, 9e-6]}, {"a": 0, "b": 0})
    ev = Evidence()
    measured = timing.record_difference(ev, r, "extra time", "a", "b")
    assert measured == r.difference("a", "b") == pytest.approx(2e-6)
    n = _numbers(ev)["extra time"]
    assert n["value"] == pytest.approx(2.0) and n["unit"] == "us"
    assert n["noise"] == pytest.approx(r.difference_noise("a", "b") * 1e6)


def test_spearman_is_the_correlation_of_ranks():
    assert timing.spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0]) == pytest.approx(0.5)
    assert timing.spearman([3.0, 1.0, 2.0], [0.3, 0.1, 0.2]) == pytest.approx(1.0)
    assert timing.spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)


def test_plan_round_trips_through_json():
    assert TimingPlan.from_json(json.loads(json.dumps(PLAN.to_json()))) == PLAN


@pytest.mark.parametrize("ref, message", [
    ("pytest_dumpref.examples.softmax", "must be written 'module:function'"),
    ("pytest_dumpref.nosuchmodule:f", "cannot import pytest_dumpref.nosuchmodule"),
    ("pytest_dumpref.examples:nosuchfunction", "has no nosuchfunction"),
])
def test_bad_program_reference_is_named(ref, message):
    with pytest.raises(TimingError, match=message):
        resolve_program(ref)


def test_worker_refuses_to_run_without_single_thread_flags(monkeypatch, capsys):
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(json.dumps(PLAN.to_json())))
    assert timing.main() == 2
    assert "run through run_plan()" in capsys.readouterr().err


def test_worker_refuses_to_run_without_the_allocator_settings(monkeypatch):
    # glibc reads them at start-up: a worker started without them would time the allocator
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    with pytest.raises(TimingError, match="start the timing process with MALLOC_ARENA_MAX=1 "):
        timing._worker(PLAN)


def test_temporaries_are_not_faulted_in_afresh_on_every_call():
    # gelu's gradient without the fusion pass writes ~28 MB of temporaries a call: under
    # glibc's defaults its executing thread's arena maps them anew per call (7,169 minor
    # faults a call measured); with ALLOCATOR_ENV each call reuses the pages of the last, so
    # at most one of the 12 timed calls faults them in (the heap's high-water mark can still
    # rise once after the warm-up, when the calibration kernels' buffers sit in between).
    plan = TimingPlan(program="pytest_dumpref.examples:gelu_grad", args=(("float32", (1024, 1024)),),
                      variants={"unfused": {"xla_disable_hlo_passes": "fusion"}},
                      stream_shape=(64, 64), rounds=4, calls_per_round=3, warmup_calls=2)
    r = run_plan(plan)
    assert r.variants["unfused"].minor_faults_per_call < 7169 / 4, r.variants["unfused"].minor_faults_per_call
    assert "MALLOC_ARENA_MAX=1" in r.method()


@pytest.fixture(scope="module")
def small_run() -> TimingResult:
    # a caller's contrary setting must not survive into the timing subprocess
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
        return run_plan(PLAN)


def test_run_is_pinned_single_threaded_and_interleaved(small_run):
    r = small_run
    assert r.xla_flags.split() == ["--xla_cpu_multi_thread_eigen=false"]
    assert set(r.variants) == {"fused", "fused (A/A)", "unfused", STREAM, DISPATCH, DISPATCH_WORKER}
    assert all(len(v.samples) == PLAN.rounds and min(v.samples) > 0 for v in r.variants.values())
    # every round times every kernel once; the order is shuffled, so it is not always the same
    assert all(sorted(o) == sorted(r.variants) for o in r.orders) and len(r.orders) == PLAN.rounds
    assert len({tuple(o) for o in r.orders}) > 1
    # pinned to one CPU, XLA partitions no loop across threads
    for v in r.variants.values():
        assert '"outer_dimension_partitions":["' not in v.hlo_text, v.name


def test_run_reports_xla_byte_counts(small_run):
    import jax
    import numpy as np
    from pytest_dumpref.examples import softmax
    x = jax.device_put(np.zeros((64, 64), np.float32), jax.devices("cpu")[0])  # XLA CPU, whatever the default
    for name, options in PLAN.variants.items():
        want = jax.jit(softmax).lower(x).compile(compiler_options=options or None).cost_analysis()
        assert small_run.variants[name].bytes_accessed == want["bytes accessed"], name
    assert small_run.variants[STREAM].bytes_accessed == 2 * 256 * 256 * 4   # one read, one write
    assert small_run.variants["fused"].hlo_text == small_run.variants["fused (A/A)"].hlo_text


def test_aa_copy_is_compiled_again_not_taken_from_the_cache(small_run):
    # jax hands back the cached executable for the same program and options; the copy is
    # compiled with one inert option more (the worker checks the executables differ)
    assert timing.AA_INERT_OPTION not in small_run.variants["fused"].compiled_options
    assert small_run.variants["fused (A/A)"].compiled_options == {timing.AA_INERT_OPTION: -2}
    assert small_run.variants["fused (A/A)"].options == {}


def test_one_plan_times_several_programs_each_with_its_inputs():
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (32, 32)),),
                      variants={"softmax": {}, "softmax (A/A)": {}, "ce": {}, "ce (A/A)": {}},
                      programs={"ce": ("pytest_dumpref.examples:cross_entropy",
                                       (("float32", (32, 64)), ("int32", (32,)))),
                                "ce (A/A)": ("pytest_dumpref.examples:cross_entropy",
                                             (("float32", (32, 64)), ("int32", (32,))))},
                      stream_shape=(64, 64), rounds=2, calls_per_round=1, warmup_calls=1, cold_stream=True)
    assert TimingPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    r = run_plan(plan)
    assert set(r.variants) >= {"softmax", "ce", "ce (A/A)", timing.STREAM_COLD}
    assert r.variants["ce"].hlo_text == r.variants["ce (A/A)"].hlo_text != r.variants["softmax"].hlo_text
    assert r.variants["ce (A/A)"].compiled_options == {timing.AA_INERT_OPTION: -2}
    # the cold stream is timed every round on the stream's kernel (its bandwidth, over a
    # 16 KiB array and two calls, is noise here: the arithmetic is tested on samples above)
    cold = r.variants[timing.STREAM_COLD]
    assert len(cold.samples) == plan.rounds and cold.bytes_accessed == r.variants[timing.STREAM].bytes_accessed
    assert r.variants["ce"].transcendentals > 0


def test_the_listed_worker_runs_alone_with_plain_jax(tmp_path):
    # The write-up prints program_listing(plan) and worker_listing(plan) as the timing loop
    # as it ran: they must run as scripts of their own, every name defined, saved as the
    # comment says (the program as program.py beside timed.py), with the installs and
    # environment the comment names.  gelu_grad calls gelu: the listed program carries what
    # it uses.
    plan = TimingPlan(program="pytest_dumpref.examples:gelu_grad", args=(("float32", (16, 16)),),
                      variants={"a": {}, "a (A/A)": {}, "b": {"xla_disable_hlo_passes": "fusion"}},
                      stream_shape=(512, 512), rounds=3, calls_per_round=2, warmup_calls=1)
    program = timing.program_listing(plan)
    assert "def gelu(x):" in program and "def gelu_grad(x):" in program and "def softmax" not in program
    (tmp_path / "program.py").write_text(program)
    # (a 1 MiB stream: slower than dispatch even on a busy machine, so a bandwidth exists)
    script = timing.worker_listing(plan)
    # the one line that differs from the run: the program is taken from program.py
    assert timing.LISTED_RESOLVE_PROGRAM in script and inspect.getsource(resolve_program) not in script
    assert "import pytest_dumpref" not in script and "from pytest_dumpref" not in script
    (tmp_path / "timed.py").write_text(script)
    # the environment exactly as the listing's first comment says to run it
    import jax
    assert script.startswith(f"# timed.py needs plain jax: pip install jax=={jax.__version__} "
                             f"jaxlib=={jax.__version__} numpy\n# and the listing program.py beside this file.")
    # a plan whose programs are listed under another name says to save that one as program.py
    assert "# and the listing model_program.py (its programs) as program.py beside this file." \
        in timing.worker_listing(plan, "model_program.py")
    run_line = script.split("# Run it as\n")[1].split("> run.json")[0]
    words = run_line.replace("\\\n", " ").replace("#", " ").split()
    assert words[-2:] == ["python", "timed.py"], words
    env = dict(os.environ, **dict(w.split("=", 1) for w in words[:-2]))
    assert env["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false" and env["MALLOC_ARENA_MAX"] == "1"
    proc = subprocess.run([sys.executable, "timed.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(out["variants"]) == ["a", "a (A/A)", "b", timing.STREAM, timing.DISPATCH, timing.DISPATCH_WORKER]
    assert all(len(v["samples"]) == 3 for v in out["variants"].values())
    assert out["variants"]["a (A/A)"]["compiled_options"] == {timing.AA_INERT_OPTION: -2}
    # ... and the statistic's listing, fed that output, prints what TimingResult computes here
    (tmp_path / "statistic.py").write_text(timing.statistic_listing(
        [{"label": "b", "base": "a", "other": "b", "aa": "a (A/A)", "extra_bytes": None,
          "at_least": 1.0, "aa_limit": 0.25}]))
    assert "python statistic.py < run.json" in (tmp_path / "statistic.py").read_text().splitlines()[0]
    stat = subprocess.run([sys.executable, "statistic.py"], cwd=tmp_path, input=proc.stdout,
                          capture_output=True, text=True, timeout=60)
    assert stat.returncode == 0, stat.stderr[-2000:]
    r = TimingResult(plan, {n: VariantTiming(**v) for n, v in out["variants"].items()},
                     out["orders"], out["cpu"], out["xla_flags"], out["jax_version"])
    extra = r.variants["b"].bytes_accessed - r.variants["a"].bytes_accessed
    ratio = r.difference("a", "b") / r.predicted_seconds(extra)
    assert f"b: extra bytes {extra:,.0f}," in stat.stdout
    assert f"measured/predicted {ratio:.3f}," in stat.stdout
    aa = r.difference("a", "a (A/A)")
    holds = ratio >= 1.0 and abs(aa) <= 0.25 * r.predicted_seconds(extra)
    assert f"(0.25 x predicted): {'holds' if holds else 'does not hold'}" in stat.stdout
    assert stat.stdout.count("'us/call'") == len(r.variants)
    # ... and, for a claim across programs, its summary numbers and condition as the claim computes them
    across = [{"label": "b", "base": "a", "other": "b", "aa": "a (A/A)", "extra_bytes": extra},
              {"label": "b again", "base": "a (A/A)", "other": "b", "aa": "a", "extra_bytes": 2 * extra}]
    (tmp_path / "across.py").write_text(timing.statistic_listing(
        across, {"rank_correlation": 0.6, "aa_limit": 0.1}))
    summary = subprocess.run([sys.executable, "across.py"], cwd=tmp_path, input=proc.stdout,
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr[-2000:]
    pred = [r.predicted_seconds(c["extra_bytes"]) for c in across]
    meas = [r.difference(c["base"], c["other"]) for c in across]
    rho = timing.spearman(pred, meas)
    assert f"Spearman rank correlation, predicted against measured {rho:.4f}\n" in summary.stdout
    aa_share = statistics.median(abs(r.difference(c["base"], c["aa"])) / m for c, m in zip(across, meas))
    holds = min(meas) > 0 and rho >= 0.6 and aa_share <= 0.1
    assert summary.stdout.rstrip().endswith(f"<= 0.1: {'holds' if holds else 'does not hold'}")


def test_program_listing_runs_the_programs_as_the_package_does(tmp_path):
    import jax
    import numpy as np
    from pytest_dumpref import examples
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(), stream_shape=(8, 8),
                      variants={"ln": {}, "lng": {}},
                      programs={"ln": ("pytest_dumpref.examples:residual_layernorm", ()),
                                "lng": ("pytest_dumpref.examples:layernorm_grad", ())})
    namespace: dict = {}
    exec(compile(timing.program_listing(plan), "program.py", "exec"), namespace)
    assert "softmax" not in namespace             # the plan's programs, not the default one
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    for name, args in (("residual_layernorm", (x, x, g, g, b)), ("layernorm_grad", (x, g, b))):
        want = jax.tree.leaves(getattr(examples, name)(*args))
        got = jax.tree.leaves(namespace[name](*args))
        assert all(np.array_equal(w, v) for w, v in zip(want, got)), name
    # programs of two modules (a claim's and the cost model's calibration kernels): both listed,
    # each module's relative imports left out, and the listing runs on its own
    from pytest_dumpref.xla.cpu import calibrate
    both = TimingPlan(program="pytest_dumpref.examples:softmax", args=(), stream_shape=(8, 8),
                      variants={"a": {}, "b": {}}, programs={"b": ("pytest_dumpref.xla.cpu.calibrate:k_exp", ())})
    listing = timing.program_listing(both)
    assert "softmax from pytest_dumpref.examples" in listing and "k_exp from pytest_dumpref.xla.cpu.calibrate" in listing
    assert "from ." not in listing
    namespace = {}
    exec(compile(listing, "program.py", "exec"), namespace)
    assert np.array_equal(namespace["k_exp"](x), calibrate.k_exp(x))
    assert np.array_equal(namespace["softmax"](x), examples.softmax(x))


def test_failure_in_subprocess_names_the_program():
    bad = TimingPlan(program="pytest_dumpref.examples:layernorm", args=(("float32", (8, 8)),),
                     variants={"a": {}}, stream_shape=(8, 8), rounds=1, calls_per_round=1, warmup_calls=0)
    with pytest.raises(TimingError, match="timing pytest_dumpref.examples:layernorm failed"):
        run_plan(bad)


def test_prediction_figure_is_deterministic(tmp_path):
    from pytest_dumpref.timing import plot_prediction
    r = _result({"a": [1e-3, 1.1e-3, 1e-3], "a again": [1e-3, 1.05e-3, 1e-3], "b": [1.4e-3, 1.5e-3, 1.4e-3],
                 STREAM: [11e-6, 12e-6, 11e-6], DISPATCH_WORKER: [1e-6, 2e-6, 1e-6]},
                {"a": 0, "a again": 0, "b": 0, STREAM: 1000.0, DISPATCH_WORKER: 64.0})
    one = plot_prediction(r, "a", "b", 4e-4, tmp_path / "one.png", aa="a again", title="t")
    two = plot_prediction(r, "a", "b", 4e-4, tmp_path / "two.png", aa="a again", title="t")
    assert one.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert one.read_bytes() == two.read_bytes()


def test_a_call_is_timed_by_cpu_time_where_that_clock_can_time_one(small_run):
    # the run's timer is the one its CPU clock's step chooses: CPU time on a machine whose
    # clock steps by about a microsecond (these), the wall clock under gVisor (10 ms)
    from pytest_dumpref.provenance import CPU_CLOCK_MAX_STEP_NS, call_timer, cpu_clock_step_ns
    step = small_run.cpu_clock_step_ns
    assert step > 0 and small_run.timer == call_timer(step)
    # and the step this process measures is the worker's, within the CPU bound's side
    assert (cpu_clock_step_ns() <= CPU_CLOCK_MAX_STEP_NS) == (step <= CPU_CLOCK_MAX_STEP_NS)


def test_a_cpu_clock_in_coarse_ticks_hands_the_call_to_the_wall_clock():
    # gVisor's process CPU clock: real time, in 10 ms ticks (it reports 1 ns of resolution)
    import time
    from pytest_dumpref.provenance import call_timer, call_timer_text, cpu_clock_step_ns

    def ticks():
        return time.perf_counter_ns() // 10_000_000 * 10_000_000
    step = cpu_clock_step_ns(ticks, spin_s=0.1, steps=3)
    assert step == 10_000_000
    assert call_timer(step) == "wall clock"
    assert call_timer_text(step) == "wall clock (the process CPU clock steps 10,000 us)"
    assert call_timer_text(1200) == call_timer_text(1000) == "process CPU time (its clock steps under 10 us)"
    # a clock that never steps within the spin: its step is at least the time spun
    assert cpu_clock_step_ns(lambda: 7, spin_s=0.02) >= 20_000_000


def test_cpu_caches_reads_sysfs_or_nothing():
    from pytest_dumpref.timing import cpu_caches
    caches = cpu_caches(0)
    assert all(c["type"] in ("Data", "Unified") and c["bytes"] > 0 for c in caches)
    assert [c["level"] for c in caches] == sorted(c["level"] for c in caches)
    assert cpu_caches(10 ** 6) == []


def test_a_round_spread_over_passes_keeps_one_sample_per_round():
    # calls_per_round=4 in passes=2: each pass one untimed call and 2 timed ones per variant;
    # the round's sample is its fastest timed call, one per round as with passes=1
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (64, 64)),),
                      variants={"fused": {}, "unfused": {"xla_disable_hlo_passes": "fusion"}},
                      stream_shape=(64, 64), rounds=3, calls_per_round=4, warmup_calls=1, passes=2)
    assert TimingPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    r = run_plan(plan)
    for v in r.variants.values():
        assert len(v.samples) == len(v.wall_samples) == 3 and min(v.samples) > 0
    assert "in 2 passes through the round's order (each pass one untimed call, then 2 timed)" in r.method()


def test_across_programs_plot_keeps_labels_apart(tmp_path):
    """Programs whose times coincide (gelu and layernorm_grad, layernorm, swiglu and
    sgd_momentum did in one run) get labels that overlap no other label and no point."""
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pytest_dumpref.timing import _place_labels, plot_across_programs

    names = ["gelu", "layernorm_grad", "layernorm", "swiglu", "sgd_momentum", "softmax", "rope"]
    xs = [80.0, 80.5, 120.0, 121.0, 119.0, 60.0, 400.0]
    ys = [95.0, 96.0, 140.0, 139.0, 141.0, 70.0, 500.0]
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=100)
    ax.plot(xs, ys, "o")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(30, 1000)
    ax.set_ylim(30, 1000)
    boxes = _place_labels(fig, ax, names, xs, ys)
    plt.close(fig)
    assert len(boxes) == len(names)
    overlapping = [(names[i], names[j]) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
                   if boxes[i].overlaps(boxes[j])]
    assert not overlapping, overlapping
    # and the plot itself is drawn with them
    points = [{"name": n, "predicted_us": x, "measured_us": y, "aa_us": 1.0} for n, x, y in zip(names, xs, ys)]
    out = plot_across_programs(points, tmp_path / "p.png")
    assert out.stat().st_size > 0


def test_two_timings_never_run_at_once_on_one_machine(tmp_path, monkeypatch):
    # a timing in another process holds the lock: this one cannot take it until that one ends
    import fcntl
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # this process's temporary folder
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom pytest_dumpref.timing import one_timing_at_a_time\n"
         "with one_timing_at_a_time():\n    print('held', flush=True)\n    sys.stdin.readline()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = tmp_path / timing.TIMING_LOCK
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.wait(timeout=60) == 0
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # released with its holder
        finally:
            os.close(fd)
        with timing.one_timing_at_a_time():
            pass
    finally:
        holder.kill()
