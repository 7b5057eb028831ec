"""What the fusion study's across-programs claims and its timing claim record, recorded by the
objects that hold the evidence: fusion_programs.PolicyAcrossPrograms (the decisions of every
program) and fusion_timing's UndoTiming and ProgramTimes (the timings).  The arithmetic and the
recording are tested on synthetic results (exact numbers); the timing subprocess is
timing.py's, tested in tests/timing."""
from __future__ import annotations

import json
import statistics
import subprocess
from types import SimpleNamespace

import pytest

from pytest_dumpref import timing
from pytest_dumpref.claims import Evidence
from pytest_dumpref.timing import DISPATCH_WORKER, STREAM, TimingPlan, TimingResult, VariantTiming
from pytest_dumpref.xla.cpu import fusion_timing
from pytest_dumpref.xla.cpu.fusion_programs import SUITE, PolicyAcrossPrograms
from pytest_dumpref.xla.cpu.fusion_timing import AA, FUSED, UNFUSED, ProgramTimes, UndoTiming


def _items(ev: Evidence, kind: str) -> list:
    return [i for i in ev.items if i["kind"] == kind]


def _row(producer: str, agree: bool) -> dict:
    return {"producer": producer, "consumer": "c", "compiler": "fused",
            "predicted": "fused" if agree else "no", "rule": "r", "agree": agree}


def _policy(*, miss: bool) -> PolicyAcrossPrograms:
    per_program = [{"program": "a", "decisions logged": 3, "predicted": 3 - miss,
                    "extra bytes predicted": 8, "extra bytes measured": 8}]
    held = [{"program": "b (held out)", "decisions logged": 2, "predicted": 2,
             "extra bytes predicted": "", "extra bytes measured": ""}]
    modules = {"a": SimpleNamespace(rows=[_row("p", True), _row("q", not miss), _row("s", True)]),
               "b": SimpleNamespace(rows=[_row("t", True), _row("u", True)])}
    return PolicyAcrossPrograms(per_program, held, modules, {"rule one": 2, "rule two": 1})


def test_the_policy_across_programs_is_counted_over_every_program():
    p = _policy(miss=True)
    assert (p.logged, p.agreed) == (5, 4)
    assert p.misses == [{"program": "a", "producer": "q", "consumer": "c", "compiler": "fused",
                         "predicted": "no", "rule": "r"}]
    assert _policy(miss=False).misses == []


def test_the_policy_records_mispredictions_only_when_there_are_some():
    ev = Evidence()
    _policy(miss=False).record(ev)
    titles = [i["title"] for i in _items(ev, "table")]
    assert len(titles) == 2 and titles[0].startswith("decisions of the fusion pass per program")
    assert titles[1] == f"the model with one rule left out: decisions it then mispredicts, over the {len(SUITE)} programs"
    assert _items(ev, "table")[1]["rows"] == [["rule one", 2], ["rule two", 1]]
    assert {i["name"]: i["value"] for i in _items(ev, "number")} == {
        "decisions logged, all programs": 5, "decisions predicted exactly, all programs": 5}
    ev = Evidence()
    _policy(miss=True).record(ev)
    assert [i["title"] for i in _items(ev, "table")][1] == (
        "every decision the model mispredicts, with the rule that made the prediction")


def _run(plan, samples: dict) -> TimingResult:
    variants = {n: VariantTiming(n, {}, 0.0, s, 0.0) for n, s in samples.items()}
    return TimingResult(plan, variants, orders=[], cpu=0, xla_flags="", jax_version="")


def test_an_undo_timing_times_the_three_variants_then_the_model_runs(monkeypatch):
    plans = []

    def run_plan(plan):
        plans.append(plan)
        return _run(plan, {v: [1e-6] for v in plan.variants})
    monkeypatch.setattr(fusion_timing, "run_plan", run_plan)
    t = UndoTiming.measure("pytest_dumpref.examples:softmax", (("float32", (64, 64)),), ["fusion", "x"],
                           model_runs=3, stream_shape=(64, 64), rounds=4, passes=2)
    assert len(plans) == 4 and t.plan is plans[0] and t.run.plan is plans[0]
    assert t.plan.variants == {FUSED: {}, AA: {}, UNFUSED: {"xla_disable_hlo_passes": "fusion,x"}}
    assert (t.plan.rounds, t.plan.stream_shape, t.plan.passes) == (4, (64, 64), 2)
    # each model run times the same variants, each on the program, beside the calibration kernels
    model_plan = plans[1]
    assert [p.variants for p in plans[2:]] == [model_plan.variants] * 2 and len(t.model_runs) == 3
    assert {k: model_plan.variants[k] for k in t.plan.variants} == t.plan.variants
    assert set(fusion_timing.calibrate.plan_variants()[0]) < set(model_plan.variants)
    assert all(model_plan.program_of(k) == (t.plan.program, t.plan.args) for k in t.plan.variants)


def test_an_undo_timing_records_the_model_on_every_run(monkeypatch):
    runs = ["run 1", "run 2", "run 3"]
    t = UndoTiming(plan=None, run=None, model_runs=runs)
    seen = []
    monkeypatch.setattr(fusion_timing.calibrate, "record_model_kernels",
                        lambda ev, run, f, p: seen.append(("kernels", run)) or {"extra": 1.0, "extra model": 1.0})
    monkeypatch.setattr(fusion_timing.calibrate, "model_times",
                        lambda run, f, p: (seen.append(("priced", run)) or {"extra": 2.0, "extra model": 1.0}, f, p))
    monkeypatch.setattr(fusion_timing.calibrate, "record_model_runs",
                        lambda ev, times, within: [t["extra"] / t["extra model"] for t in times])
    assert t.record_model(Evidence(), "fused dump", "plain dump", (0.9, 1.1)) == [1.0, 2.0, 2.0]
    # the first run's kernels are recorded; the others are priced the same way, unrecorded
    assert seen == [("kernels", "run 1"), ("priced", "run 2"), ("priced", "run 3")]


def test_the_model_runs_table_says_which_runs_are_within_the_goal():
    # 161.2 / 179.2 = 0.89955: rounded to 3 digits it read 0.9, inside [0.9, 1.1], where the
    # count beside it (rightly) left it out; a stranger counted it in
    ev = Evidence()
    times = [{"extra": 161.2e-6, "extra model": 179.2e-6}, {"extra": 181.5e-6, "extra model": 169.4e-6}]
    ratios = fusion_timing.calibrate.record_model_runs(ev, times, (0.9, 1.1))
    assert ratios[0] < 0.9 < ratios[1] < 1.1
    runs, goal = ([dict(zip(i["header"], row)) for row in i["rows"]] for i in ev.items if i["kind"] == "table")
    assert [r["measured / model"]["value"] for r in runs] == [0.8996, 1.0714]
    assert [r["in [0.9, 1.1]"]["value"] for r in runs] == ["no", "yes"]
    assert goal[0]["runs with measured/model in [0.9, 1.1]"]["value"] == "1 of 2"


def test_an_undo_timing_records_its_listings_and_figure(tmp_path):
    pytest.importorskip("matplotlib")
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (64, 64)),),
                      variants={FUSED: {}, AA: {}, UNFUSED: {"xla_disable_hlo_passes": "fusion"}},
                      stream_shape=(64, 64))
    run = _run(plan, {FUSED: [1e-6, 2e-6], AA: [1e-6, 2e-6], UNFUSED: [3e-6, 5e-6],
                      STREAM: [11e-6, 12e-6], DISPATCH_WORKER: [1e-6, 2e-6]})      # the figure states the bandwidth
    t = UndoTiming(plan, run, [])
    ev = Evidence()
    t.record_listings(ev, "softmax", at_least=0.8, aa_limit=0.25)
    t.record_figure(ev, 2e-6, tmp_path / "f.png", "a title")
    program, worker, statistic = _items(ev, "excerpt")
    assert "def softmax(" in program["text"] and "plan = types.SimpleNamespace(" in worker["text"]
    assert ("{'label': 'softmax', 'base': 'fused', 'other': 'without fusion', 'aa': 'fused, compiled again (A/A)', "
            "'extra_bytes': None, 'at_least': 0.8, 'aa_limit': 0.25}") in statistic["text"]
    (figure,) = _items(ev, "figure")
    assert figure["title"] == "predicted against measured, fused against unfused"
    assert (tmp_path / "f.png").stat().st_size > 0


def test_an_undo_timing_gives_the_models_runs_from_the_page(monkeypatch, tmp_path):
    # what a reader runs to make one of the model's runs: its program.py and timed.py (the
    # model's plan: the claim's variants beside the calibration kernels), then the commands
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (1024, 1024)),),
                      variants={FUSED: {}, AA: {}, UNFUSED: {"xla_disable_hlo_passes": "fusion"}})
    model_plan = fusion_timing.calibrate.plan(20, 10, variants=dict(plan.variants),
                                              programs={k: (plan.program, plan.args) for k in plan.variants})
    t = UndoTiming(plan, None, ["run 1", "run 2"], model_plan)
    seen = []
    monkeypatch.setattr(fusion_timing.calibrate, "run_model_from_the_page",
                        lambda folder, run, files: seen.append((folder, run, files)) or (["a"], ["a"]))
    dump = lambda path: SimpleNamespace(files=SimpleNamespace(optimized=path))   # noqa: E731
    ev = Evidence()
    assert t.record_model_from_the_page(ev, tmp_path, "softmax", dump("f.txt"), dump("u.txt")) == (["a"], ["a"])
    # cost_model.py is run on the first run's timings and the claim's two dumps
    assert seen == [(tmp_path, "run 1", ["f.txt", "u.txt"])]
    program, worker, model, commands = _items(ev, "excerpt")
    assert program["title"].startswith("model_program.py") and worker["title"].startswith("model_timed.py")
    assert "def softmax(" in program["text"] and "def k_mul_chain(" in program["text"]
    assert repr(model_plan.variants[FUSED]) in worker["text"] and "'pytest_dumpref.xla.cpu.calibrate:k_mul_chain'" in worker["text"]
    # the files a reader saves are kept beside the write-up, the model's listing with them
    assert program["beside"] and worker["beside"] and model["beside"]
    assert model["title"].startswith("cost_model.py") and model["text"] == fusion_timing.calibrate.model_listing()
    import jax
    lines = commands["text"].splitlines()
    assert lines[0] == ("python3 -m venv venv && . venv/bin/activate && "
                        f"pip install jax=={jax.__version__} jaxlib=={jax.__version__} numpy")
    lines = lines[1:]
    assert lines[0] == timing.run_command("timed.py", "run.json")
    assert [x.split('"')[1] for x in lines[1:3]] == ["--xla_dump_to=dump/softmax/fused",
                                                     "--xla_dump_to=dump/softmax/unfused --xla_disable_hlo_passes=fusion"]
    assert "program.softmax).lower(np.zeros((1024, 1024), 'float32'))" in lines[1]
    assert lines[3] == "python cost_model.py run.json dump/*/*/*.cpu_after_optimizations.txt | tee prices.txt"
    # the last line, run as bash runs it on a run.json and the lines cost_model.py prints
    # (calibrate.model_main's form), prints the measured extra time, the model's and the ratio
    run = {"variants": {FUSED: {"samples": [1e-4, 2e-4, 3e-4]}, UNFUSED: {"samples": [3e-4, 4.5e-4, 5e-4]}}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "prices.txt").write_text("dump/softmax/fused/m.cpu_after_optimizations.txt: 612.5 us\n"
                                         "dump/softmax/unfused/m.cpu_after_optimizations.txt: 812.5 us\n")
    done = subprocess.run(["bash", "-c", lines[4]], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[:3] == ["extra", "measured", "(us):"] and float(words[3]) == pytest.approx(200.0)
    assert float(words[6]) == 200.0 and float(words[8]) == pytest.approx(1.0)
    assert len(lines) == 5


def _program_times() -> ProgramTimes:
    # three programs of SUITE: predicted (bytes' time) and measured extra seconds, A/A; the
    # cost model prices two, fused measured against model and extra measured against model
    exact = [(1e-6, 2e-6, 0.1e-6), (2e-6, 3e-6, -0.2e-6), (3e-6, 7e-6, 0.3e-6)]
    points = [{"name": n, "predicted_us": p * 1e6, "measured_us": m * 1e6, "aa_us": a * 1e6}
              for n, (p, m, a) in zip(("softmax", "gelu", "rope"), exact)]
    model = [("softmax", 11e-6, 10e-6, 2e-6, 2.5e-6), ("gelu", 9e-6, 10e-6, 3e-6, 2e-6)]
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (8, 8)),),
                      variants={f"{n}: {v}": {} for n in SUITE for v in ("fused", "A/A", "unfused")},
                      programs={f"{n}: {v}": (f"pytest_dumpref.examples:{n}", (("float32", (8, 8)),))
                                for n in SUITE for v in ("fused", "A/A", "unfused")},
                      stream_shape=(8, 8))
    return ProgramTimes(plan, run=None, predicted_bytes={n: 1000 for n in SUITE}, dumps={}, points=points,
                        rows=[{"name": "softmax"}], exact=exact, refused=[{"program": "top_k"}], model=model)


def test_program_times_state_the_claims_numbers():
    t = _program_times()
    assert t.slower == []
    t.points[1]["measured_us"] = -1.0     # as if undoing the pass had not slowed gelu
    assert t.slower == ["gelu"]
    assert t.rank_correlation == pytest.approx(timing.spearman([1, 2, 3], [2, 3, 7]))
    assert t.aa_share == pytest.approx(statistics.median([0.1 / 2, 0.2 / 3, 0.3 / 7]))
    assert t.fused_ratios == [("softmax", pytest.approx(1.1)), ("gelu", pytest.approx(0.9))]
    assert t.fused_median == pytest.approx(0.1)
    # extra time: softmax 2 / 2.5 (error 0.2), gelu 3 / 2 (error 0.5)
    assert t.extra_median == pytest.approx(0.35)
    ev = Evidence()
    t.record_numbers(ev, rank_correlation=0.6, aa_limit=0.1, fused_error=0.15, extra_error=0.4)
    got = {i["name"]: (i["value"], i.get("bound")) for i in _items(ev, "number")}
    assert got == {"Spearman rank correlation, predicted against measured extra time": (t.rank_correlation, [">=", 0.6]),
                   "median over programs of |A/A difference| / measured extra time": (t.aa_share, ["<=", 0.1]),
                   "programs the cost model predicts": (2, None),
                   "fused programs' time, median |measured/model - 1|": (t.fused_median, ["<=", 0.15]),
                   "extra time, median |measured/model - 1|": (t.extra_median, ["<=", 0.4])}


def test_program_times_state_the_model_against_its_goals():
    ev = Evidence()
    t = _program_times()
    # the paired medians' noise: softmax's 0.1 us, a twentieth of the model's 2.5; gelu's 0.5
    # us, a quarter of the model's 2: the run does not resolve gelu's extra time
    t.run = SimpleNamespace(difference_noise=lambda base, other: {"softmax": 0.1e-6, "gelu": 0.5e-6}[base.split(":")[0]])
    t.record_goals(ev, {"median": 0.1, "worst": 0.25})
    (table,) = _items(ev, "table")
    # extra time: softmax 2 / 2.5 (error 0.2), gelu 3 / 2 (error 0.5, the worst)
    cells = [[c["value"] if isinstance(c, dict) else c for c in row] for row in table["rows"]]
    assert cells == [["extra time, median |measured/model - 1|", 0.35, 0.1],
                     ["extra time, worst |measured/model - 1|", 0.5, 0.25],
                     ["extra time, worst program", "gelu", ""],
                     ["programs whose extra time the run resolves (its standard uncertainty at most 10% of "
                      "the model's)", "1 of 2", ""],
                     ["of those, worst |measured/model - 1|", "0.200 (softmax)", 0.25],
                     ["not resolved: extra measured against the model (us)", "gelu 3.0 ± 0.5 against 2.0", ""]]


def test_program_times_record_the_figure_tables_and_listings(tmp_path):
    pytest.importorskip("matplotlib")
    t = _program_times()
    ev = Evidence()
    t.record(ev, tmp_path)
    assert (tmp_path / "fusion-across-programs.png").stat().st_size > 0
    assert [i["kind"] for i in ev.items] == ["figure", "table", "table", "table"]
    assert _items(ev, "table")[1]["title"].startswith("programs the cost model refuses")
    assert _items(ev, "table")[2]["title"].startswith("where the model misses the extra time, by class of kernel")
    t.refused = []
    ev = Evidence()
    t.record(ev, tmp_path)
    assert [i["kind"] for i in ev.items] == ["figure", "table", "table"]
    ev = Evidence()
    t.record_listings(ev, rank_correlation=0.6, aa_limit=0.1)
    statistic = _items(ev, "excerpt")[2]["text"]
    assert "ACROSS = {'rank_correlation': 0.6, 'aa_limit': 0.1}" in statistic
    assert all(f"'label': {n!r}" in statistic for n in SUITE)


def _miss(kernels, miss, regimes=(), measured=None, model=None, count=1, by=None):
    return {"kernels": kernels, "count": count, "regimes": list(regimes), "miss us": miss,
            "measured us": measured, "model us": model, "model us by regime": by or {}}


def test_where_the_model_misses_is_summed_by_class_of_kernel():
    misses = {
        "softmax": [_miss("wrapped_multiply (unfused)", 30.0, ["compute (one-op loop)"], 170.0, 140.0),
                    _miss("wrapped_broadcast (unfused)", 10.0, ["memory (L3)"], 70.0, 60.0, count=2),
                    _miss("outside the kernels", 20.0, count=0)],
        # a name priced in two regimes is classed by the one the model prices most of it in
        "gelu": [_miss("wrapped_multiply (unfused)", 60.0, ["compute (one-op loop)", "memory (L3)"], 460.0, 400.0,
                       count=6, by={"compute (one-op loop)": 100.0, "memory (L3)": 300.0}),
                 _miss("add_multiply_fusion (fused)", -120.0, ["compute (tanh)"], 570.0, 450.0),
                 _miss("library kernels", -5.0, count=0)],
    }
    rows = fusion_timing.miss_by_class(misses)
    cells = {r["class"]: [c["value"] for k, c in r.items() if k != "class"] for r in rows}
    assert list(cells) == list(fusion_timing.MISS_CLASSES)
    total = 30 + 10 + 20 + 60 - 120 - 5
    assert cells[fusion_timing.ONE_OP_FLOOR] == [1, 30.0, f"{30 / total:.0%}", "1.21"]
    assert cells[fusion_timing.ONE_OP_MEMORY] == [6, 60.0, f"{60 / total:.0%}", "1.15"]
    assert cells[fusion_timing.BROADCASTS] == [2, 10.0, f"{10 / total:.0%}", "1.17"]
    assert cells[fusion_timing.FUSED_ONLY] == [1, -120.0, f"{-120 / total:.0%}", "1.27"]
    assert cells[fusion_timing.OUTSIDE_BOTH][1:3] == [20.0, f"{20 / total:.0%}"]
    assert cells[fusion_timing.LIBRARY_BOTH][1] == -5.0 and cells[fusion_timing.ONE_OP_OPERATION][:2] == [0, 0.0]
    assert fusion_timing.miss_cell(misses["softmax"], top=2) == (
        "+60: wrapped_multiply (unfused) +30 (compute (one-op loop): 170 against 140); "
        "wrapped_broadcast (unfused) +10 (memory (L3): 70 against 60)")


def test_a_run_perf_could_not_sample_has_the_same_table_saying_why():
    rows = fusion_timing.miss_by_class({}, "perf is not installed (Debian: linux-perf)")
    assert [r["class"] for r in rows] == list(fusion_timing.MISS_CLASSES)
    assert all(r["kernels"]["value"] == "not profiled: perf is not installed (Debian: linux-perf)" for r in rows)
    assert list(rows[0]) == list(fusion_timing.miss_by_class({"p": [_miss("outside the kernels", 1.0)]})[0])


def test_kernel_misses_set_the_runs_predictions_beside_its_profiles():
    """kernel_misses prices nothing again: each program's (fused, unfused) predictions, made
    once by calibrate.across_programs, beside the run's profiles of the two variants."""
    from pytest_dumpref.xla.cpu import cost_model, kernel_perf

    def prediction(*kernels):
        return cost_model.Prediction("m", [cost_model.KernelTime(n, "loop", us * 1e-6, us * 1e-6, 0.0, 0.0,
                                                                 "memory (L3)", 0.0, 0.0) for n, us in kernels],
                                     dispatch_s=20e-6, launch_s=0.0)

    def profile(variant, symbols):
        return kernel_perf.KernelProfile(variant, {}, 10, 10, sum(symbols.values()), symbols)

    predictions = {"p": (prediction(("add_multiply_fusion", 100.0)),
                         prediction(("wrapped_multiply", 150.0), ("wrapped_add", 40.0)))}
    profiles = {"p: fused": profile("p: fused", {"add_multiply_fusion": 90.0, "main": 40.0}),
                "p: unfused": profile("p: unfused", {"wrapped_multiply": 210.0, "wrapped_add": 30.0, "main": 90.0})}
    miss = fusion_timing.kernel_misses(predictions, profiles)["p"]
    assert {r["kernels"]: r["miss us"] for r in miss} == {
        "wrapped_multiply (unfused)": pytest.approx(60.0), "outside the kernels": pytest.approx(50.0),
        "wrapped_add (unfused)": pytest.approx(-10.0), "add_multiply_fusion (fused)": pytest.approx(10.0),
        "library kernels": 0.0}


def test_a_sampled_run_that_fails_is_timed_again_unsampled(monkeypatch):
    """The claim across programs runs its plan under perf where perf may sample; where the
    sampled run fails (its worker could not name its kernels: kernel_perf raises PerfError) or
    perf may not sample, the plan is timed again unsampled (a real run) and the claim says why."""
    plan = TimingPlan(program="pytest_dumpref.examples:softmax", args=(("float32", (8, 8)),),
                      variants={"softmax": {}}, stream_shape=(8, 8), rounds=2, calls_per_round=2, warmup_calls=1)

    def fails(p):
        raise fusion_timing.kernel_perf.PerfError("the timing worker named no JIT kernel")
    monkeypatch.setattr(fusion_timing.kernel_perf, "perf_available", lambda: None)
    monkeypatch.setattr(fusion_timing.kernel_perf, "profile_run", fails)
    run, profiles, why = fusion_timing.sampled_or_not(plan)
    assert profiles == {} and why == "the sampled run failed: the timing worker named no JIT kernel"
    assert run.plan == plan and len(run.variants["softmax"].samples) == plan.rounds
    monkeypatch.setattr(fusion_timing.kernel_perf, "perf_available", lambda: "perf is not installed")
    run, profiles, why = fusion_timing.sampled_or_not(plan)
    assert (profiles, why) == ({}, "perf is not installed") and run.variants["softmax"].samples
