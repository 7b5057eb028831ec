"""The fusion study's timings, each against the cost model: one program with and without the
fusion pass, and every program of ``fusion_programs.TIMED`` in one run.

``UndoTiming`` times one program with and without a pass, then again beside the cost model's
calibration kernels (``calibrate.plan``), and records the model on those runs; ``ProgramTimes``
dumps and times every program, fused, unfused and A/A, and holds what the claim across
programs states: the measured extra times against the bytes the policy predicts (a rank
correlation) and against the cost model.  Nothing here imports pytest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ... import timing
from ...claims import varies
from ...timing import TimingPlan, TimingResult, run_plan
from . import calibrate, cost_model, kernel_perf
from .fusion_programs import SUITE, timed_dumps


# The variants of an UndoTiming, as its tables, listings and the cost model's record
# (calibrate.model_times reads "fused" and "without fusion") name them.
FUSED, AA, UNFUSED = "fused", "fused, compiled again (A/A)", "without fusion"
# The last lines of a reader's run of the model (UndoTiming.record_model_from_the_page): price
# both dumps with cost_model.py (its lines saved), then print the measured extra time, the
# model's and their ratio, the numbers the claim's table of the model's runs gives.
MODEL_FROM_THE_PAGE = (
    "python cost_model.py run.json dump/*/*/*.cpu_after_optimizations.txt | tee prices.txt\n"
    "python -c \"import json, statistics; v = json.load(open('run.json'))['variants']; "
    f"m = 1e6 * statistics.median(b - a for a, b in zip(v['{FUSED}']['samples'], v['{UNFUSED}']['samples'])); "
    "p = {l.split('/')[2]: float(l.rsplit(': ', 1)[1].split()[0]) for l in open('prices.txt')}; "
    "e = p['unfused'] - p['fused']; print('extra measured (us):', m, ' model (us):', e, ' measured/model:', m / e)\"")


def install_command() -> str:
    """The shell line that makes the model's runs' environment: a fresh virtual environment
    with this jax and jaxlib, and numpy."""
    import jax
    return (f"python3 -m venv venv && . venv/bin/activate && pip install jax=={jax.__version__} "
            f"jaxlib=={jax.__version__} numpy")


@dataclass
class UndoTiming:
    """One program timed in one pinned run (timing.run_plan) fused, fused and compiled again
    (the A/A twin) and with passes disabled, then in runs of the cost model's own: the same
    variants beside its calibration kernels (calibrate.plan, 20 rounds of 10 calls), each run
    giving the model its rates."""
    plan: TimingPlan
    run: TimingResult
    model_runs: list
    model_plan: TimingPlan | None = None     # the plan of each of the model's runs

    @classmethod
    def measure(cls, program: str, args: tuple, disabled, *, model_runs: int, **plan) -> "UndoTiming":
        """Time ``program`` ('module:function') on ``args`` ((dtype, shape) each) with and
        without the passes ``disabled``; ``plan``: TimingPlan's other fields (stream_shape,
        rounds, passes through a round, ...)."""
        p = TimingPlan(program=program, args=args, variants={
            FUSED: {}, AA: {}, UNFUSED: {"xla_disable_hlo_passes": ",".join(disabled)}}, **plan)
        run = run_plan(p)
        model_plan = calibrate.plan(20, 10, variants=dict(p.variants),
                                    programs={k: (p.program, p.args) for k in p.variants})
        return cls(p, run, [run_plan(model_plan) for _ in range(model_runs)], model_plan)

    def record_model(self, evidence, fused, plain, within: tuple) -> list:
        """Record the cost model on the dumps ``fused`` and ``plain`` (the program with the
        passes and without) at the rates of each of its runs: the first run's kernel tables
        (calibrate.record_model_kernels; the others are priced the same way), then every run's
        extra time, measured against the model's, and their median against the goal ``within``
        (calibrate.record_model_runs).  Returns measured/model per run."""
        times = [calibrate.record_model_kernels(evidence, self.model_runs[0], fused, plain)]
        times += [calibrate.model_times(r, fused, plain)[0] for r in self.model_runs[1:]]
        return calibrate.record_model_runs(evidence, times, within)

    def record_model_from_the_page(self, evidence, folder: Path, program: str, fused, plain) -> tuple:
        """Record how a reader makes one of the model's runs with plain jax (its timed.py and
        program.py, the model's listing cost_model.py, then the commands: install, time, dump the
        TIMED program ``program``, price with cost_model.py), and run cost_model.py alone
        in ``folder`` on the first run's timings and the dumps ``fused`` and ``plain``
        (calibrate.run_model_from_the_page): (lines it printed, the same prices here), for the
        claim to judge."""
        from .fusion_programs import dump_commands
        model_plan = self.model_plan
        if model_plan is None:
            raise ValueError("this UndoTiming holds no plan of the model's runs (UndoTiming.measure gives one)")
        out = calibrate.run_model_from_the_page(folder, self.model_runs[0],
                                                [fused.files.optimized, plain.files.optimized])
        evidence.excerpt("model_program.py, the programs of the cost model's runs as they ran (timing."
                         "program_listing of the model's plan: the claim's program and the calibration "
                         "kernels of pytest_dumpref/xla/cpu/calibrate.py)", timing.program_listing(model_plan),
                         lang="python", beside=True)
        evidence.excerpt("model_timed.py, one of the cost model's runs as it ran (timing.worker_listing of "
                         "the model's plan: the claim's variants beside the calibration kernels that give "
                         f"the model its rates, in {model_plan.rounds} interleaved rounds of "
                         f"{model_plan.calls_per_round} calls a variant, not the claim's own timing's rounds)",
                         timing.worker_listing(model_plan, "model_program.py"), lang="python", beside=True)
        evidence.excerpt("cost_model.py, the kernel cost model as it ran, whole, with the rates it reads from "
                         "a timing run's calibration kernels and the readers it uses (calibrate.model_listing; "
                         "the claim 'The time of undoing the pass, across programs' keeps the same file)",
                         calibrate.model_listing(), lang="python", beside=True)
        evidence.excerpt(
            "the model's runs from the page: in a folder of their own, with plain jax in a fresh virtual "
            "environment, model_timed.py saved as timed.py (not the claim's own timed.py above), "
            "model_program.py as program.py, and cost_model.py (the three linked above, kept in this "
            "claim's folder of the write-up's assets); in one shell, since the first line "
            "activates the environment the others use: timed.py's output saved as run.json, the "
            "program's two optimized modules dumped with plain jax (as this claim dumps them, with XLA's "
            "default threading: they differ from the timed compile's only in outer_dimension_partitions "
            "hints, which the model does not read), then cost_model.py prints each module's price (saved "
            "as prices.txt), and the last command prints the measured extra time (the median of the "
            "rounds' paired differences, as statistic.py computes it), the model's (the unfused price "
            "less the fused one) and measured/model.  Another run, in the same shell (in a new one, "
            "'. venv/bin/activate' first): timed.py again and the last two commands (they write over "
            "run.json and prices.txt: copy those first to keep them; the dumps stay).  This claim runs "
            "cost_model.py so on its first run's timings and its own dumps, and the prices it prints are "
            "the first run's model to the last bit (the first row of the table of the model's runs, "
            "rounded there to 0.1 us; a reader's run prints its own)",
            install_command() + "\n" + timing.run_command("timed.py", "run.json") + "\n"
            + dump_commands([program]) + "\n" + MODEL_FROM_THE_PAGE, lang="bash", fold=True)
        return out

    def record_listings(self, evidence, label: str, *, at_least: float, aa_limit: float) -> None:
        """Record the timing method's listings (timing.record_listings): the comparison of the
        fused and unfused variants, named ``label``, with the claim's bounds (measured /
        predicted at least ``at_least``, |A/A| at most ``aa_limit`` x predicted)."""
        timing.record_listings(evidence, self.plan, [{"label": label, "base": FUSED, "other": UNFUSED, "aa": AA,
                                                      "extra_bytes": None, "at_least": at_least,
                                                      "aa_limit": aa_limit}])

    def record_figure(self, evidence, predicted_seconds: float, path: Path, title: str) -> None:
        """Record the figure of the predicted extra time against the measured one, fused
        against unfused, with the A/A twin (timing.plot_prediction, drawn at ``path``)."""
        evidence.figure("predicted against measured, fused against unfused",
                        timing.plot_prediction(self.run, FUSED, UNFUSED, predicted_seconds, path, aa=AA,
                                               title=title))


def sampled_or_not(plan) -> tuple:
    """``(run, profiles, why not sampled)``: the plan run under perf where perf may sample
    (kernel_perf.profile_run, a profile per variant); else, or where the sampled run fails
    (its worker could not name its kernels, or perf failed), run again unsampled (profiles
    empty, and why said)."""
    why = kernel_perf.perf_available()
    if why is None:
        try:
            return (*kernel_perf.profile_run(plan), "")
        except (kernel_perf.PerfError, timing.TimingError) as e:
            why = f"the sampled run failed: {str(e)[-300:]}"
    return run_plan(plan), {}, why


@dataclass
class ProgramTimes:
    """Every program of TIMED dumped fused and unfused (the dumps of ``timed_dumps``), timed
    fused, unfused and A/A in one run with the cost model's calibration kernels, against the
    extra bytes the policy predicts for the SUITE programs and the cost model at the run's
    rates (``calibrate.across_programs``, whose results the fields after ``dumps`` are)."""
    plan: TimingPlan
    run: TimingResult
    predicted_bytes: dict     # SUITE program -> extra bytes the policy predicts without the pass
    dumps: dict               # program -> (fused dump, unfused dump)
    points: list              # a SUITE program's predicted and measured extra time, A/A (us)
    rows: list                # the per-program table, one run's
    exact: list               # (predicted, measured, A/A) seconds per SUITE program
    refused: list             # the programs the cost model has no rate for, and why
    model: list               # (program, fused measured, fused model, extra measured, extra model) s
    predictions: dict = field(default_factory=dict)   # program -> its (fused, unfused) cost_model.Prediction
    misses: dict = field(default_factory=dict)   # program -> kernel_perf.extra_time_miss, of this run
    unprofiled: str = ""      # why the run was not profiled (perf), if it was not

    @classmethod
    def measure(cls, dump, passes, *, rounds: int = 20, calls_per_round: int = 10,
                timeout_s: float = 1800) -> "ProgramTimes":
        """Dump every program through the claim's ``dump`` fixture, fused and with ``passes``
        disabled; time those the cost model prices (and every SUITE program) in one run,
        sampled by perf where it may (kernel_perf.profile_run), so that each program's miss
        is split into its kernels' from the rounds the rates were measured in."""
        predicted_bytes, dumps, variants, programs = timed_dumps(dump, passes)
        plan = calibrate.plan(rounds, calls_per_round, variants=variants, programs=programs, timeout_s=timeout_s)
        run, profiles, why = sampled_or_not(plan)
        t = cls(plan, run, predicted_bytes, dumps, **calibrate.across_programs(run, predicted_bytes, dumps),
                unprofiled=why)
        if profiles:
            t.misses = kernel_misses(t.predictions, profiles)
        for row in t.rows:
            name = row["name"]
            row[MISS_COLUMN] = varies(miss_cell(t.misses[name]) if name in t.misses else
                                      "refused" if any(r["program"] == name for r in t.refused) else "not profiled")
        return t

    @property
    def slower(self) -> list[str]:
        """The SUITE programs that undoing the pass did not slow (measured extra time <= 0)."""
        return [p["name"] for p in self.points if p["measured_us"] <= 0]

    @property
    def rank_correlation(self) -> float:
        """Spearman's rank correlation of the SUITE programs' extra time at the stream's
        bandwidth (from the predicted bytes) and their measured extra time, unrounded."""
        return timing.spearman([p for p, _, _ in self.exact], [m for _, m, _ in self.exact])

    @property
    def aa_share(self) -> float:
        """The median over the SUITE programs of |A/A difference| / measured extra time."""
        return float(np.median([abs(a) / m for _, m, a in self.exact]))

    @property
    def fused_ratios(self) -> list[tuple]:
        """(program, measured / model) of the fused program's time, every program priced."""
        return [(n, m / p) for n, m, p, _, _ in self.model]

    @property
    def fused_median(self) -> float:
        """The median over the programs priced of |measured/model - 1| of the fused time."""
        return float(np.median(sorted(abs(r - 1) for _, r in self.fused_ratios)))

    def record(self, evidence, folder: Path) -> None:
        """Record the figure of predicted against measured extra time (drawn into ``folder``),
        the per-program table and the programs the cost model refuses (when any)."""
        evidence.figure("extra time per call without the fusion pass, predicted from the bytes against "
                        "measured, per program",
                        timing.plot_across_programs(self.points, folder / "fusion-across-programs.png",
                                                    title=f"{len(SUITE)} programs, pinned single thread, one run"))
        evidence.table("per program, one run (not compared: each claim of this section states its own "
                       "bounds; a program's time moves with its machine's other tenants); the extra bytes "
                       f"and their time at the stream's bandwidth for the {len(SUITE)} programs of the rank "
                       "correlation", self.rows, fold=True)
        if self.refused:
            evidence.table("programs the cost model refuses, by the kernel and operation it has no rate for",
                           self.refused)
        evidence.table("where the model misses the extra time, by class of kernel, summed over the programs "
                       "it prices (this run, sampled by perf; not compared)",
                       miss_by_class(self.misses, self.unprofiled))

    @property
    def extra_median(self) -> float:
        """The median over the programs priced of |measured/model - 1| of the extra time."""
        return calibrate.extra_time_median(self.model)

    def record_numbers(self, evidence, *, rank_correlation: float, aa_limit: float, fused_error: float,
                       extra_error: float) -> None:
        """Record the numbers the claim across programs states, each with its bound: the rank
        correlation (at least ``rank_correlation``), the median A/A share (at most
        ``aa_limit``), how many programs the cost model prices, and its median errors on the
        fused programs' time (at most ``fused_error``) and on their extra time (at most
        ``extra_error``)."""
        evidence.number("Spearman rank correlation, predicted against measured extra time", self.rank_correlation,
                        bound=(">=", rank_correlation))
        evidence.number("median over programs of |A/A difference| / measured extra time", self.aa_share,
                        bound=("<=", aa_limit))
        evidence.number("programs the cost model predicts", len(self.model))
        evidence.number("fused programs' time, median |measured/model - 1|", self.fused_median,
                        bound=("<=", fused_error))
        evidence.number("extra time, median |measured/model - 1|", self.extra_median, bound=("<=", extra_error))

    def record_goals(self, evidence, goal: dict) -> None:
        """Record the cost model's extra-time errors of this run beside ``goal`` ("median" and
        "worst" |measured/model - 1|), the program it misses most, and the worst over the
        programs whose extra time the run resolves (calibrate.extra_time_goal_rows); stated,
        not compared."""
        evidence.table("the cost model's extra time against its goals, this run (not compared: the median is "
                       "asserted, a number above; the worst is stated)",
                       calibrate.extra_time_goal_rows(self.run, self.model, goal))

    def record_model_from_the_page(self, evidence, folder: Path) -> tuple:
        """The model's one-file listing run alone on this run's timings and the dumps of every
        program it priced (calibrate.record_model_from_the_page): (lines it printed, the same
        prices here), for the claim to judge."""
        return calibrate.record_model_from_the_page(evidence, folder, self.run,
                                                    [name for name, *_ in self.model], self.dumps)

    def record_listings(self, evidence, *, rank_correlation: float, aa_limit: float) -> None:
        """Record the timing method's listings (timing.record_listings), every SUITE program a
        comparison of its fused, unfused and A/A variants, with the claim's bounds."""
        timing.record_listings(evidence, self.plan, [
            {"label": name, "base": f"{name}: fused", "other": f"{name}: unfused", "aa": f"{name}: A/A",
             "extra_bytes": self.predicted_bytes[name]} for name in SUITE],
            across={"rank_correlation": rank_correlation, "aa_limit": aa_limit})


# ---- where the model misses, kernel by kernel (kernel_perf's profile of the run itself) -------

MISS_COLUMN = "where the model misses the extra time in this run (perf): measured - model, us"
# The classes of miss_by_class, in its table's order: the kernels only the unfused program has
# by their regime, then what both variants have, as differences.
ONE_OP_FLOOR, ONE_OP_OPERATION, ONE_OP_MEMORY = (
    "one-op loop kernels priced at the one-op floor", "one-op loop kernels priced at their operation's rate",
    "one-op loop kernels priced on memory")
BROADCASTS = "broadcasts the unfused program writes (write-only memory)"
OTHER_UNFUSED = "other kernels only the unfused program has"
FUSED_ONLY = "kernels only the fused program has (their miss counts against the extra time)"
BOTH = "loop kernels both programs have: unfused less fused"
LIBRARY_BOTH = "library kernels: unfused less fused"
OUTSIDE_BOTH = "outside the kernels (runtime, allocator, Python, the system's interrupts): unfused less fused"
MISS_CLASSES = (ONE_OP_FLOOR, ONE_OP_OPERATION, ONE_OP_MEMORY, BROADCASTS, OTHER_UNFUSED,
                FUSED_ONLY, BOTH, LIBRARY_BOTH, OUTSIDE_BOTH)


def kernel_misses(predictions: dict, profiles: dict) -> dict:
    """program -> ``kernel_perf.extra_time_miss`` of its fused and unfused variants
    (``predictions``: program -> the model's (fused, unfused) Prediction at the run's rates,
    as ``calibrate.across_programs`` made them; ``profiles``: kernel_perf.profile_run's, of
    the same run)."""
    return {name: kernel_perf.extra_time_miss(*(kernel_perf.against_model(profiles[f"{name}: {v}"], p)
                                                for v, p in zip(("fused", "unfused"), pair)))
            for name, pair in predictions.items()}


def miss_cell(miss: list, top: int = 3) -> str:
    """One program's cell: the miss, then the ``top`` kernel groups that make most of it."""
    parts = []
    for r in miss[:top]:
        part = f"{r['kernels']} {r['miss us']:+.0f}"
        if r["model us"]:
            part += f" ({', '.join(r['regimes']) or 'library'}: {r['measured us']:.0f} against {r['model us']:.0f})"
        parts.append(part)
    return f"{sum(r['miss us'] for r in miss):+.0f}: " + "; ".join(parts)


def miss_class(r: dict) -> str:
    """The class of one of extra_time_miss's groups (MISS_CLASSES)."""
    name = r["kernels"]
    if name == kernel_perf.OUTSIDE:
        return OUTSIDE_BOTH
    if name == kernel_perf.LIBRARY_KERNELS:
        return LIBRARY_BOTH
    if name.endswith(" (fused)"):
        return FUSED_ONLY
    if not name.endswith(" (unfused)"):
        return BOTH
    if not name.startswith("wrapped_"):
        return OTHER_UNFUSED
    if name.startswith("wrapped_broadcast"):
        return BROADCASTS
    # kernels of one name share one function, and so one measured time: the group's class is
    # that of the regime the model prices most of it in
    by = r.get("model us by regime") or dict.fromkeys(r["regimes"], 0.0)
    regime = max(by, key=by.__getitem__, default="")
    if regime.startswith("memory"):
        return ONE_OP_MEMORY
    return ONE_OP_FLOOR if regime.startswith(f"compute ({cost_model.ONE_OP}") else ONE_OP_OPERATION


def miss_by_class(misses: dict, unprofiled: str = "") -> list[dict]:
    """The table of where the model misses the extra time, by class (MISS_CLASSES): each
    class's kernels, their share of the programs' summed miss, and for the classes of whole
    kernels their measured time against the model's.  Every class has its row, with what
    this run measured or why it measured nothing, so that the table's lines are the same on
    every machine."""
    sums = {c: [0, 0.0, 0.0, 0.0] for c in MISS_CLASSES}    # kernels, miss, measured, model
    for miss in misses.values():
        for r in miss:
            s = sums[miss_class(r)]
            s[0] += r["count"]
            s[1] += r["miss us"]
            if r["model us"] is not None:
                s[2] += r["measured us"]
                s[3] += r["model us"]
    total = sum(s[1] for s in sums.values())
    rows = []
    for c in MISS_CLASSES:
        n, miss, measured, model = sums[c]
        cells: list
        if not misses:
            cells = [f"not profiled: {unprofiled}" if unprofiled else "not profiled"] + [""] * 3
        else:
            cells = [n, round(miss, 1), f"{miss / total:.0%}" if total else "",
                     f"{measured / model:.2f}" if model else ""]
        rows.append({"class": c, **{k: varies(v) for k, v in zip(
            ("kernels", "measured - model (us)", "share of the summed miss", "measured / model"), cells)}})
    return rows
