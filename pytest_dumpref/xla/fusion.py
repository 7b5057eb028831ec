"""The compiler's own fusion decisions, as data.

With ``xla_dump_fusion_visualization=True`` XLA writes, per compiled module, a "Fusion
Explorer" page (``<computation>.module_NNNN.<name>.<pass>_fusion.html``) whose script holds the
log of XLA's InstructionFusion pass as a JavaScript array::

    const frames = [[0, "About to fuse |broadcast.1| into |multiply| inside InstructionFusion ...", "#node4 polygon"],
                    [1, "Fused |broadcast.1| into |broadcast_multiply_fusion| inside ...", ""],
                    [1, "Not fusing |divide| into |broadcast_multiply_fusion| as Fusion is not profitable. ; ...", ...]]

Newer XLA (jaxlib 0.11 and later) writes the same log into a self-contained viewer instead,
``<computation>.module_NNNN.<name>.<pass>_fusion.pyz``: a zip archive whose ``fusions.db`` is a
SQLite database with a ``frames`` table (``id``, ``label``, ``graph_id``, ``to_highlight``);
each ``label`` is one line of the log as above.  ``read_fusion_log_file`` reads either
(``read_fusion_log`` the html page).

Each line is a decision in the compiler's words.  ``FusionDecision`` keeps those words
(``reason``) so a claim can assert against them, not against a paraphrase.

Which frames count as decisions: a frame ``Fused |P| into |F| ...`` is one decision (P was
fused; F is the fusion that holds it), a frame ``Not fusing |P| into |C| as REASON`` is one
(refused, for REASON).  ``About to fuse |P| into |C|`` only announces the next ``Fused`` frame
and names the consumer as it was before the fusion; it is not counted.  XLA writes one page
per computation the pass visits (``<computation>.module_NNNN...``); it logs nothing about an
operand that cannot be fused at all (a parameter) and no refusal that involves a
get-tuple-element.

``compare`` lines the log up with the model of ``fusion_policy`` (which replays the pass), and
``fusion_report`` does it for every module of a dump folder.
"""
from __future__ import annotations

import json
import os
import re
import difflib
import sqlite3
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


class FusionLogError(ValueError):
    """A fusion visualization file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class FusionDecision:
    """One decision of a fusion pass about one producer -> consumer edge.

    ``consumer`` is as the compiler named it at that moment: once something has been fused
    into a consumer, the consumer is the fusion instruction (``broadcast_multiply_fusion``),
    and ``consumer_origin`` the instruction that fusion grew from (``multiply``).  ``fusion``
    is the fusion instruction a fused producer ended up in.  ``reason`` is XLA's text after
    "as" for a refusal, or the whole log line for a fusion.

    Example (``d`` a Dump)::

        decisions = d.fusion_decisions()
        [x.producer for x in decisions if x.fused]   # what the pass fused, in its order
        refusals(decisions, producer="divide")       # why it did not fuse divide.N
        print(decisions[0])                          # fusion: fused broadcast.1 into multiply: ...
    """
    producer: str
    consumer: str
    fused: bool
    reason: str
    pass_name: str
    consumer_origin: str
    fusion: str | None
    file: str
    computation: str = ""       # the computation the pass was fusing (from the file name)

    def __str__(self) -> str:
        verb = "fused" if self.fused else "did not fuse"
        return f"{self.pass_name}: {verb} {self.producer} into {self.consumer}: {self.reason}"


_FRAMES = re.compile(r"const frames = (\[.*?\]);\s*$", re.S | re.M)
_ABOUT = re.compile(r"^About to fuse \|(?P<p>[^|]+)\| into \|(?P<c>[^|]+)\| inside (?P<who>\w+)")
_FUSED = re.compile(r"^Fused \|(?P<p>[^|]+)\| into \|(?P<f>[^|]+)\| inside (?P<who>\w+)")
_NOT = re.compile(r"^Not fusing \|(?P<p>[^|]+)\| into \|(?P<c>[^|]+)\| as (?P<why>.*)$", re.S)
_FILE = re.compile(r"^(?P<comp>.+)\.module_(?P<id>\d+)\.(?P<name>.+)\.(?P<pass>[^.]*)_fusion\.(?:html|pyz)$")
# the file kinds XLA writes the log in: an html page (jaxlib 0.9, 0.10), a zip app (0.11, 0.12)
LOG_SUFFIXES = ("_fusion.html", "_fusion.pyz")
LOG_GLOB = "*_fusion.{html,pyz}"     # for messages


def fusion_log_files(folder, module_id: str | None = None) -> list[Path]:
    """The fusion log files of ``folder`` (of one module when ``module_id`` is given), in name
    order: ``*_fusion.html`` or ``*_fusion.pyz``, whichever the XLA that wrote them uses."""
    folder = Path(folder)
    try:
        files = sorted(p for p in folder.iterdir() if p.name.endswith(LOG_SUFFIXES) and p.is_file())
    except OSError:
        return []
    if module_id is not None:
        files = [p for p in files if f".module_{module_id}." in p.name]
    return files


def _pyz_frames(path: Path) -> list[str]:
    """The log lines of a zip app: the ``label`` column of ``fusions.db``'s ``frames``, by id."""
    try:
        with zipfile.ZipFile(path) as z:
            db = z.read("fusions.db")
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        raise FusionLogError(f"{path}: not a fusion log archive with fusions.db in it ({e})") from None
    fd, tmp = tempfile.mkstemp(suffix=".db", prefix="dumpref-fusions-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(db)
        conn = sqlite3.connect(tmp)
        try:
            rows = conn.execute("SELECT id, label FROM frames ORDER BY id").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise FusionLogError(f"{path}: fusions.db has no readable frames table ({e})") from None
    finally:
        os.unlink(tmp)
    for r in rows:
        if not isinstance(r[1], str):
            raise FusionLogError(f"{path}: unexpected frame {str(r)[:80]!r}")
    return [r[1] for r in rows]


def read_fusion_log(path) -> list[FusionDecision]:
    """The decisions logged in one ``*_fusion.html`` file, in the order the pass made them."""
    path = Path(path)
    try:
        html = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FusionLogError(f"{path}: cannot be read: {e}") from None
    m = _FRAMES.search(html)
    if not m:
        raise FusionLogError(f"{path}: no 'const frames = [...]' log in it (not an XLA fusion "
                             f"visualization, or truncated)")
    try:
        frames = json.loads(m.group(1))
    except json.JSONDecodeError as e:
        raise FusionLogError(f"{path}: the frames log is not readable ({e.msg} at {e.pos})") from None
    for frame in frames:
        if not isinstance(frame, list) or len(frame) < 2 or not isinstance(frame[1], str):
            raise FusionLogError(f"{path}: unexpected frame {str(frame)[:80]!r}")
    return decisions_of_frames(path, [frame[1] for frame in frames])


def decisions_of_frames(path: Path, texts: list) -> list[FusionDecision]:
    """The decisions in the texts of one fusion log's frames, in order, whichever file they
    were read from (the html page or the .pyz archive); ``path`` names the file, whose name
    says the pass and the computation."""
    fm = _FILE.match(path.name)
    pass_label = (fm.group("pass") if fm else "") or "fusion"
    computation = fm.group("comp") if fm else ""
    origin: dict[str, str] = {}   # fusion instruction -> the consumer it grew from
    pending: dict[str, str] = {}  # producer -> consumer announced by "About to fuse"
    out: list[FusionDecision] = []
    for text in texts:
        a = _ABOUT.match(text)
        if a:
            pending[a["p"]] = a["c"]
            continue
        f = _FUSED.match(text)
        if f:
            consumer = pending.pop(f["p"], f["f"])
            root = origin.get(consumer, consumer)
            origin[f["f"]] = root
            out.append(FusionDecision(f["p"], consumer, True, text, pass_label,
                                      root, f["f"], str(path), computation))
            continue
        n = _NOT.match(text)
        if n:
            why = n["why"].strip()
            out.append(FusionDecision(n["p"], n["c"], False, why, pass_label,
                                      origin.get(n["c"], n["c"]), None, str(path), computation))
    return out


def read_fusion_log_file(path) -> list[FusionDecision]:
    """The decisions logged in one ``*_fusion.html`` or ``*_fusion.pyz`` file, in the order the
    pass made them (one decoding, ``decisions_of_frames``, for both)."""
    path = Path(path)
    if not path.name.endswith(".pyz"):
        return read_fusion_log(path)
    return decisions_of_frames(path, _pyz_frames(path))


def fusion_decisions_in_folder(folder, module_id: str | None = None) -> list[FusionDecision]:
    """Every decision in the fusion visualization files of ``folder`` (of one module when
    ``module_id`` is given), file by file in name order."""
    folder = Path(folder)
    files = fusion_log_files(folder, module_id)
    if not files:
        raise FusionLogError(f"{folder}: no {LOG_GLOB} files (compile with "
                             f"xla_dump_fusion_visualization=True)")
    out: list[FusionDecision] = []
    for p in files:
        out.extend(read_fusion_log_file(p))
    return out


def fusion_decisions(fn, *args, folder, **compiler_options) -> list[FusionDecision]:
    """Compile ``fn(*args)`` into ``folder`` and return the fusion decisions XLA logged."""
    from .dump import DumpSession
    compiler_options.setdefault("xla_dump_fusion_visualization", True)
    d = DumpSession(Path(folder)).dump(fn, *args, passes="^$", **compiler_options)
    return d.fusion_decisions()


def refusals(decisions, producer: str | None = None, consumer: str | None = None):
    """The decisions not to fuse, optionally only those about ``producer`` and ``consumer``.
    A name matches exactly or by its part before the first dot (``divide`` matches
    ``divide.3``); a consumer also matches the instruction its fusion grew from."""
    def match(name: str, want: str | None) -> bool:
        return want is None or name == want or name.split(".")[0] == want
    return [d for d in decisions if not d.fused and match(d.producer, producer)
            and (match(d.consumer, consumer) or match(d.consumer_origin, consumer))]


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
    before: object               # dump.Snapshot
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
    from .dump import DumpError
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


def replay(module, log: list, **model_options) -> tuple:
    """The model's replay of the fusion pass on ``module`` (the module it saw) beside the
    pass's ``log``: (the log in the pass's order, the logged predictions, ``compare``'s rows,
    the computations no instruction calls that the pass visited)."""
    from .fusion_policy import predict, uncalled_computations
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
    from .dump import Dump, DumpError, DumpFolder
    from .fusion_policy import FusionModelError
    from .hlo import HloParseError
    df = DumpFolder(folder)
    mods = df.find(module)
    if not mods:
        raise DumpError(f"{df.folder}: no module {module!r} (modules: "
                        f"{', '.join(m.key for m in df.modules)})")
    if not fusion_log_files(df.folder):
        raise DumpError(f"{df.folder}: no fusion log ({LOG_GLOB}); {HOW_TO_DUMP}")
    if not any(m.snapshot_paths for m in mods):
        raise DumpError(f"{df.folder}: no snapshot before the fusion pass in any module (no pass "
                        f"snapshots at all); {HOW_TO_DUMP}")
    out: list = []
    for m in mods:
        try:
            d = Dump(m)
            log = None
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
MODEL_ROOTS = {"fusion": ["main"], "fusion_policy": ["RULES"]}
MODEL_MODULES = ("shape_inference", "hlo", "dump", "fusion_policy", "fusion")
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
    from .standalone import listing
    return (listing(MODEL_ROOTS, order=MODEL_MODULES, header=MODEL_HEADER)
            + '\n\nif __name__ == "__main__":\n    raise SystemExit(main())\n')


def main(argv=None) -> int:
    """``python fusion_model.py DIR [--no-coupled-softmax | --coupled-softmax]``: every
    decision of the fusion pass in the dump folder DIR, the log's beside the model's, per
    module; exit code 1 when a decision is mispredicted.  The snapshot the pass saw is found
    as ``snapshot_before_fusion`` finds it, the modules as ``pytest_dumpref.xla.dump`` does."""
    import sys
    from types import SimpleNamespace

    from .dump import Snapshot, _discover, parse_stage
    from .hlo import parse_module
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
        snaps = [Snapshot(step, *parse_stage(rest), path) for step, rest, path in mf.snapshot_paths]
        dump = SimpleNamespace(snapshots=snaps)
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
