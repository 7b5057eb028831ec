"""The compiler's own fusion decisions against the model of ``fusion_policy``.

``fusion_log`` reads the decisions XLA's InstructionFusion pass logged (its fusion
visualization); ``compare`` lines the log up with the model of ``fusion_policy`` (which replays
the pass), ``module_fusion`` does it for one dumped module and ``fusion_report`` for every
module of a dump folder.  The log reader's names are importable from here too.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from ..dump import (
    Dump,
    DumpError,
    DumpFolder,
    DumpSession,
    Snapshot,
    _discover,
    snapshots_of,
)
from ..fusion_log import (
    LOG_GLOB,
    FusionDecision,
    FusionLogError,
    decisions_of_frames,
    fusion_decisions_in_folder,
    fusion_log_files,
    read_fusion_log,
    read_fusion_log_file,
    refusals,
)
from .fusion_policy import RULES, FusionModelError, predict, uncalled_computations
from ..hlo import HloParseError, parse_module
from ..standalone import listing

__all__ = [
    "FusionDecision", "FusionLogError", "ModuleFusion", "ModuleTrouble", "compare",
    "decisions_of_frames", "fusion_decisions", "fusion_decisions_in_folder", "fusion_log_files",
    "fused_opcodes", "fusion_report", "model_listing", "module_fusion", "read_fusion_log",
    "read_fusion_log_file", "record_undo_measured", "record_undo_prediction", "refusals", "replay",
    "snapshot_before_fusion", "softmax_normalisation", "undo_prediction", "verdict",
]


def fusion_decisions(fn, *args, folder, **compiler_options) -> list[FusionDecision]:
    """Compile ``fn(*args)`` into ``folder`` and return the fusion decisions XLA logged."""
    compiler_options.setdefault("xla_dump_fusion_visualization", True)
    d = DumpSession(Path(folder)).dump(fn, *args, passes="^$", **compiler_options)
    return d.fusion_decisions()


# ---- the log against the model ---------------------------------------------------------------

HOW_TO_DUMP = ("dump with XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=.* "
               "--xla_dump_fusion_visualization' (or the compiler options xla_dump_to, "
               "xla_dump_hlo_pass_re='.*', xla_dump_fusion_visualization=True)")


def verdict(d: FusionDecision) -> str:
    """"fused", or the compiler's full reason for a refusal."""
    return "fused" if d.fused else d.reason


def compare(log: list, predicted: list) -> list[dict]:
    """The log's decisions beside the model's, in the log's order, one row per decision.

    Both lists are in the pass's order.  They are aligned on (producer, the instruction the
    consumer grew from, verdict) with difflib, so that one wrong prediction costs one row,
    not every row after it.  A row ``agree``s when all three are equal.  A decision the
    model makes that the log lacks gets a row with ``compiler`` None; one it lacks, a row
    with ``predicted`` None.  ``rule`` names the restated XLA rule that made the prediction."""
    a = [(d.producer, d.consumer_origin, verdict(d)) for d in log]
    b = [(p.producer, p.consumer_origin, p.verdict) for p in predicted]
    rows = []

    def row(d, p):
        rows.append({"computation": (d.computation if d else p.computation),
                     "producer": d.producer if d else p.producer,
                     "consumer": d.consumer if d else p.consumer,
                     "compiler": verdict(d) if d else None,
                     "predicted": p.verdict if p else None,
                     "rule": p.rule if p else None,
                     "agree": bool(d and p and a[log.index(d)] == b[predicted.index(p)])})
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            for d, p in zip(log[i1:i2], predicted[j1:j2]):
                row(d, p)
            continue
        ds, ps = log[i1:i2], predicted[j1:j2]
        for k in range(max(len(ds), len(ps))):
            d = ds[k] if k < len(ds) else None
            p = ps[k] if k < len(ps) else None
            if d is not None and p is not None and (d.producer, d.consumer_origin) != (p.producer, p.consumer_origin):
                row(d, None)
                row(None, p)
            else:
                row(d, p)
    return rows


@dataclass
class ModuleFusion:
    """One module of a dump: the snapshot the fusion pass saw, the log, the model's replay.

    ``changed``: whether the pass changed the module (a snapshot after it exists); a pass that
    fused nothing still logs its refusals.  ``logged_files``: the module's log files (none
    when the pass logged no decision).  ``uncalled``: computations the pass visited that no
    instruction calls (see ``fusion_policy.uncalled_computations``)."""
    module: str
    before: Snapshot
    log: list
    predicted: list              # fusion_policy.Prediction, logged ones only
    rows: list
    changed: bool = True
    logged_files: list = field(default_factory=list)
    uncalled: list = field(default_factory=list)

    @property
    def agreed(self) -> int:
        return sum(1 for r in self.rows if r["agree"])

    @property
    def fused(self) -> int:
        """Decisions the log records as fusions."""
        return sum(1 for d in self.log if d.fused)

    @property
    def refused(self) -> int:
        """Decisions the log records as refusals."""
        return sum(1 for d in self.log if not d.fused)

    def decision_rows(self) -> list[dict]:
        """The decision table: the compiler's log against the model, with the restated rule
        that made each prediction (a refusal's reason shown up to its first ' ; ')."""
        def shown(verdict):
            return "fused" if verdict == "fused" else (verdict or "-").split(" ; ")[0]
        return [{"producer": r["producer"], "consumer": r["consumer"], "compiler": shown(r["compiler"]),
                 "model (fusion_policy)": shown(r["predicted"]), "rule (XLA function restated)": r["rule"]}
                for r in self.rows]

    def decisions(self, *, producer: str | None = None, consumer: str | None = None,
                  origin: str | None = None, fused: bool | None = None) -> list:
        """The logged decisions about ``producer`` into ``consumer`` (the name the consumer had
        then: a fusion's, once something was fused into it) or into what grew from ``origin``,
        fused or refused as ``fused`` says, in the pass's order; names match exactly and a
        criterion left None matches any decision."""
        return [d for d in self.log if (producer is None or d.producer == producer)
                and (consumer is None or d.consumer == consumer)
                and (origin is None or d.consumer_origin == origin)
                and (fused is None or d.fused == fused)]

    def kernel_of(self, origin: str) -> str:
        """The fusion the instruction ``origin`` grew into: the kernel its first fused
        decision made.  KeyError when nothing was fused into it."""
        made = self.decisions(origin=origin, fused=True)
        if not made:
            raise KeyError(f"the pass fused nothing into {origin}")
        return made[0].fusion

    def record(self, evidence, title: str, *, counts: bool = False) -> None:
        """Record the decision table (decision_rows, folded) under ``title``; with ``counts``,
        then the number of decisions the pass logged and of those the model predicts."""
        evidence.table(title, self.decision_rows(), fold=True)
        if counts:
            evidence.number("decisions of the fusion pass", len(self.log))
            evidence.number("decisions the restated rules predict", self.agreed)

    def knockouts(self) -> dict[str, int]:
        """rule -> how many of the logged decisions the model mispredicts with that one rule
        of fusion_policy.RULES left out (every rule in turn)."""
        out = {}
        for rule in RULES:
            without = [q for r in predict(self.before.module, without=[rule]) for q in r.decisions if q.logged]
            out[rule] = sum(1 for r in compare(self.log, without) if not r["agree"])
        return out

    def disagreements(self) -> list[str]:
        """Every decision the model and the log disagree on, in words (none when it predicts
        them all)."""
        return [f"the model says {r['predicted']} ({r['rule']}) for {r['producer']} -> "
                f"{r['consumer']}; the compiler: {r['compiler']}" for r in self.rows if not r["agree"]]

    def as_dict(self) -> dict:
        return {"module": self.module, "snapshot": str(self.before.path),
                "changed": self.changed, "fused": self.fused, "refused": self.refused,
                "log_files": [str(p) for p in self.logged_files],
                "uncalled_computations": list(self.uncalled),
                "decisions": [{k: r[k] for k in ("producer", "consumer", "compiler", "predicted")}
                              | {"computation": r["computation"], "rule": r["rule"], "agree": r["agree"]}
                              for r in self.rows],
                "predicted": self.agreed, "logged": len(self.log)}


@dataclass
class ModuleTrouble:
    """A module of a dump folder that could not be analysed; ``error`` names the file, module
    or pass.  ``fusion_report`` reports it and goes on with the others."""
    module: str
    error: str

    def as_dict(self) -> dict:
        return {"module": self.module, "error": self.error}


# Where the CPU pipeline runs ``fusion``: just before ``fusion-wrapper`` (jaxlib 0.9 to 0.12
# name it in the snapshot written after fusion, ``after_fusion.before_fusion-wrapper``), in
# the pipeline HLO_passes_after_layout_assignment; these pipelines start after both passes ran.
FUSION_NEXT_PASS = "fusion-wrapper"
PIPELINES_AFTER_FUSION = ("simplification_after_layout_assignment", "copy-insertion",
                          "HLO_passes_after_scheduling")


def snapshot_before_fusion(dump, *, unchanged: bool = False):
    """The snapshot the ``fusion`` pass saw: the one before the snapshot written after it
    (with ``--xla_dump_hlo_pass_re=.*`` a snapshot is written only when a pass changed the
    module), else the one announcing it (``before_fusion``).

    ``unchanged=True`` (the pass ran, its log says so, and changed nothing, so no snapshot
    names it): the module it saw is the module the next pass saw, so the snapshot before the
    first one written by a later pass (``fusion-wrapper``, or the first of a pipeline that
    runs after it).  None when no snapshot fits."""
    snaps = dump.snapshots
    for i, s in enumerate(snaps):
        if s.after == "fusion" and i > 0:
            return snaps[i - 1]
    for s in reversed(snaps):
        if s.before == "fusion":
            return s
    if not unchanged:
        return None
    for i, s in enumerate(snaps):
        if i > 0 and (s.after == FUSION_NEXT_PASS or s.pipeline in PIPELINES_AFTER_FUSION):
            return snaps[i - 1]
    return None


def module_fusion(dump, *, log=None, **model_options) -> ModuleFusion:
    """The fusion pass of one dumped module: its log (read from the dump's fusion
    visualization unless given) against the model's replay of the snapshot it saw.

    A module whose log holds only refusals (the pass ran and fused nothing, so it wrote no
    snapshot) is replayed on the module the next pass saw; so is one with no log at all when
    ``log=[]`` is given (the pass had nothing to log): the model must then predict no logged
    decision either."""
    files = fusion_log_files(dump.folder, dump.files.id)
    if log is None:
        log = [d for d in dump.fusion_decisions() if d.pass_name == "fusion"]
    before = snapshot_before_fusion(dump)
    changed = before is not None
    if before is None:
        fused = [d for d in log if d.fused]
        if fused:
            raise DumpError(f"{dump.folder}: module {dump.files.key}: its fusion log says the pass "
                            f"fused ({fused[0].producer} into {fused[0].consumer}, {fused[0].file}) "
                            f"but no snapshot was written after the fusion pass ({HOW_TO_DUMP})")
        before = snapshot_before_fusion(dump, unchanged=True)
    if before is None:
        raise DumpError(f"{dump.folder}: module {dump.files.key} has no snapshot before the fusion "
                        f"pass (did it run? {HOW_TO_DUMP})")
    log, predicted, rows, uncalled = replay(before.module, log, **model_options)
    return ModuleFusion(dump.files.key, before, log, predicted, rows,
                        changed=changed, logged_files=files, uncalled=uncalled)


def undo_prediction(dump) -> tuple[list[dict], int, int]:
    """What undoing the fusion pass of ``dump`` costs in bytes, predicted from its log and the
    shapes before it ran: (one row per producer the pass fused, extra bytes written, extra
    bytes read).  Each fused producer stops existing in memory; undone, a fused kernel (not a
    constant) is written once by its own kernel and read once by each user, and a fused
    constant, which lives in the executable, is only read (by the kernel now using it)."""
    entry = dump.around_pass("fusion")[0].module.entry
    rows, written, read = [], 0, 0
    for decision in (d for d in dump.fusion_decisions() if d.pass_name == "fusion" and d.fused):
        p = entry.instruction(decision.producer)
        n_users = len(entry.users(p.name))
        w = 0 if p.opcode == "constant" else p.shape.byte_size
        r = p.shape.byte_size * n_users
        written, read = written + w, read + r
        rows.append({"producer": p.name, "shape": str(p.shape), "users": n_users,
                     "extra written (B)": w, "extra read (B)": r})
    return rows, written, read


def record_undo_prediction(evidence, dump) -> tuple[int, int]:
    """Record ``undo_prediction(dump)``: its rows (folded), then the extra bytes written and
    read it predicts.  Returns those two (written, read)."""
    rows, written, read = undo_prediction(dump)
    evidence.table("prediction: what each fusion the pass made keeps out of memory", rows, fold=True)
    evidence.number("predicted extra bytes written", written, unit="B")
    evidence.number("predicted extra bytes read", read, unit="B")
    return written, read


def record_undo_measured(evidence, fused, unfused) -> tuple[int, int]:
    """Record what undoing the fusion pass costs, measured: ``fused`` and ``unfused`` are dumps
    of one program compiled with the pass and without it.  The traffic of each optimized
    module kernel by kernel (spill-style, traffic.py; folded), the extra bytes written and read
    without the pass, and XLA's own bytes accessed of both (Dump.xla_bytes_accessed).  Returns
    the extra bytes (written, read)."""
    t_f, t_u = fused.traffic_report, unfused.traffic_report
    for caption, t in (("fused (default)", t_f), ("without the fusion pass", t_u)):
        evidence.table(f"traffic per kernel, {caption}", [
            {"kernel": k.name, "read (B)": k.bytes_read, "written (B)": k.bytes_written} for k in t.kernels], fold=True)
    written, read = t_u.bytes_written - t_f.bytes_written, t_u.bytes_read - t_f.bytes_read
    evidence.number("measured extra bytes written", written, unit="B")
    evidence.number("measured extra bytes read", read, unit="B")
    evidence.number("XLA bytes accessed, fused", fused.xla_bytes_accessed, unit="B")
    evidence.number("XLA bytes accessed, without fusion", unfused.xla_bytes_accessed, unit="B")
    return written, read


def softmax_normalisation(module) -> tuple:
    """(divide, broadcast, multiply) of a row softmax's normalisation in ``module`` (the
    snapshot the fusion pass saw, with the library rewriter on), found by structure: the entry
    root multiplies by a broadcast of a divide (``e / s`` as ``e * broadcast(1 / s)``, the
    algebraic simplifier's form).  ValueError naming what the module has instead."""
    entry = module.entry
    multiply = entry.root
    if multiply.opcode != "multiply":
        raise ValueError(f"root of {module.name} is {multiply.opcode}, not multiply")
    bcast = next((entry.instruction(o) for o in multiply.operands if entry.instruction(o).opcode == "broadcast"),
                 None)
    if bcast is None:
        raise ValueError(f"the root of {module.name}, {multiply.name}, multiplies no broadcast")
    divide = entry.instruction(bcast.operands[0])
    if divide.opcode != "divide":
        raise ValueError(f"{bcast.name} broadcasts {divide.opcode}, not a divide")
    return divide, bcast, multiply


def fused_opcodes(module, kernel) -> set[str]:
    """The opcodes inside ``kernel``, a fusion instruction of ``module``: those of the
    instructions of the computation it calls."""
    return {i.opcode for i in module.computations[kernel.called[0]].instructions}


def replay(module, log: list, **model_options) -> tuple:
    """The model's replay of the fusion pass on ``module`` (the module it saw) beside the
    pass's ``log``: (the log in the pass's order, the logged predictions, ``compare``'s rows,
    the computations no instruction calls that the pass visited)."""
    results = predict(module, **model_options)
    order = {r.computation: k for k, r in enumerate(results)}
    # the pages come one per computation, in file-name order: put them in the pass's order
    log = sorted(log, key=lambda d: order.get(d.computation, len(order)))
    predicted = [p for r in results for p in r.decisions if p.logged]
    uncalled = [c for c in uncalled_computations(module) if c in order]
    return log, predicted, compare(log, predicted), uncalled


def fusion_report(folder, module: str | None = None, **model_options) -> list:
    """``module_fusion`` for each module of a dump folder (or the one named), in module
    order: a ``ModuleFusion`` per module analysed, a ``ModuleTrouble`` per module that could
    not be (one module's trouble never stops the others).

    A module without a log of its own, in a folder that has logs, is one the pass logged no
    decision for: it is replayed with an empty log.  A folder without any log raises
    DumpError naming the flag that writes it."""
    df = DumpFolder(folder)
    mods = df.find(module)
    if not mods:
        raise DumpError(f"{df.folder}: no module {module!r} (modules: "
                        f"{', '.join(m.key for m in df.modules)})")
    if not fusion_log_files(df.folder):
        raise DumpError(f"{df.folder}: no fusion log ({LOG_GLOB}); {HOW_TO_DUMP}")
    mods = [m for m in mods if m.backend in (None, "cpu")]   # XLA:CPU's: what the model restates
    if not mods:
        raise DumpError(f"{df.folder}: no module XLA:CPU compiled (the model restates XLA:CPU's fusion "
                        f"pass; fusion_log.module_log reads another backend's log)")
    if not any(m.snapshot_paths for m in mods):
        raise DumpError(f"{df.folder}: no snapshot before the fusion pass in any module (no pass "
                        f"snapshots at all); {HOW_TO_DUMP}")
    out: list = []
    for m in mods:
        try:
            d = Dump(m)
            log: list | None = None
            if not fusion_log_files(df.folder, m.id):
                if snapshot_before_fusion(d) is not None:
                    raise DumpError(f"{df.folder}: module {m.key}: the fusion pass changed it (a "
                                    f"snapshot after fusion exists) but it has no fusion log "
                                    f"({LOG_GLOB}); {HOW_TO_DUMP}")
                log = []
            out.append(module_fusion(d, log=log, **model_options))
        except (DumpError, FusionLogError, FusionModelError, HloParseError) as e:
            out.append(ModuleTrouble(m.key, str(e)))
        except Exception as e:  # noqa: BLE001 - reported per module, never a traceback
            out.append(ModuleTrouble(m.key, f"{df.folder}: module {m.key}: internal error while "
                                     f"analysing it ({type(e).__name__}: {e}); please report it "
                                     f"with the dump"))
    return out


# ---- the model on its own: one file a reader runs with plain jax ----------------------------

# What the write-up lists as fusion_model.py (standalone.listing: these and everything they
# reach, whole): the HLO reader, the policy, the log reader, the comparison and main below.
MODEL_ROOTS = {"pytest_dumpref.xla.cpu.fusion": ["main"], "pytest_dumpref.xla.cpu.fusion_policy": ["RULES"]}
MODEL_MODULES = ("shapes", "shape_inference", "hlo", "fusion_log", "naming", "dump",
                 "pytest_dumpref.xla.cpu.fusion_policy", "pytest_dumpref.xla.cpu.fusion")
MODEL_HEADER = '''"""fusion_model.py: XLA's CPU fusion pass restated (pytest-dumpref, as it ran), on its own.

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization" python prog.py
    python fusion_model.py DIR        # needs plain jax installed only for its version (jaxlib)

prints, per module of DIR, every decision of the fusion pass: the compiler's (its log,
*_fusion.html or *_fusion.pyz) beside the model's (predict, replaying the pass on the snapshot
the pass saw), then "N of M decisions predicted", and last the total over all modules.  In
Python: predict(parse_module(text)) replays one snapshot; predict(..., without=[rule]) leaves
one of RULES out (the one-rule-left-out table); the jaxlib version decides one rule
(installed_xla_has_coupled_softmax_rule), or say --coupled-softmax / --no-coupled-softmax.
Every definition below is copied whole from the file its heading names.
"""
'''


def model_listing() -> str:
    """fusion_model.py: the model and its driver as one runnable file (see MODEL_ROOTS)."""
    return (listing(MODEL_ROOTS, order=MODEL_MODULES, header=MODEL_HEADER)
            + '\n\nif __name__ == "__main__":\n    raise SystemExit(main())\n')


def main(argv=None) -> int:
    """``python fusion_model.py DIR [--no-coupled-softmax | --coupled-softmax]``: every
    decision of the fusion pass in the dump folder DIR, the log's beside the model's, per
    module; exit code 1 when a decision is mispredicted.  The snapshot the pass saw is found
    as ``snapshot_before_fusion`` finds it, the modules as ``pytest_dumpref.xla.dump`` does."""
    import sys
    from types import SimpleNamespace

    args = sys.argv[1:] if argv is None else list(argv)
    options = {}
    for flag, value in (("--coupled-softmax", True), ("--no-coupled-softmax", False)):
        if flag in args:
            args.remove(flag)
            options["coupled_softmax_rule"] = value
    if len(args) != 1:
        print(main.__doc__, file=sys.stderr)
        return 2
    folder = Path(args[0])
    missed = logged = predicted = modules = 0
    for mf in _discover(folder):
        dump = SimpleNamespace(snapshots=snapshots_of(mf))
        log = [d for p in fusion_log_files(folder, mf.id) for d in read_fusion_log_file(p)
               if d.pass_name == "fusion"]
        before = snapshot_before_fusion(dump) or snapshot_before_fusion(dump, unchanged=True)
        if before is None:
            print(f"{mf.key}: no snapshot before the fusion pass ({HOW_TO_DUMP})", file=sys.stderr)
            return 2
        module = parse_module(before.path.read_text(encoding="utf-8"), source=str(before.path))
        log, _, rows, _ = replay(module, log, **options)
        print(f"== {mf.key}: the pass saw {before.path.name}")
        for k, r in enumerate(rows, 1):
            said = (r["compiler"] if r["agree"] else
                    f"compiler: {r['compiler'] or '-'} | model: {r['predicted'] or '-'}")
            print(f"{' ' if r['agree'] else '*'} {k:4d} {r['producer']} -> {r['consumer']}: {said}")
        agreed = sum(r["agree"] for r in rows)
        missed += len(rows) - agreed
        logged += len(log)
        predicted += agreed
        modules += 1
        print(f"{agreed} of {len(log)} decisions predicted")
    print(f"all {modules} modules: {predicted} of {logged} decisions predicted")
    return 1 if missed else 0
