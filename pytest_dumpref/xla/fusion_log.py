"""The compiler's own fusion decisions, as data: its fusion log, read.

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

``fusion`` lines the decisions up with the model of ``fusion_policy``.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import zipfile
from dataclasses import dataclass
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


def refusals(decisions, producer: str | None = None, consumer: str | None = None):
    """The decisions not to fuse, optionally only those about ``producer`` and ``consumer``.
    A name matches exactly or by its part before the first dot (``divide`` matches
    ``divide.3``); a consumer also matches the instruction its fusion grew from."""
    def match(name: str, want: str | None) -> bool:
        return want is None or name == want or name.split(".")[0] == want
    return [d for d in decisions if not d.fused and match(d.producer, producer)
            and (match(d.consumer, consumer) or match(d.consumer_origin, consumer))]


@dataclass(frozen=True)
class ReasonClause:
    """One clause of a refusal's reason, in the compiler's words, with the source line that
    decided it: ``Not fusing MOF at: .../tpu_instruction_fusion.cc:4582`` is the text
    ``Not fusing MOF`` from ``tpu_instruction_fusion.cc:4582``.  ``via``: further ``at:``
    locations XLA appends (where the decision object was made, ``decision.h:119``)."""
    text: str
    source: str | None
    via: tuple = ()

    def __str__(self) -> str:
        return self.text + (f" ({self.source})" if self.source else "")


_AT = " at: "


def reason_clauses(reason: str) -> list[ReasonClause]:
    """A refusal's reason split into its clauses: XLA joins the reasons of a refusal with
    `` ; `` and ends each with `` at: <file>:<line>`` where its source says so (the TPU's log
    does; XLA:CPU's mostly does not)."""
    out = []
    for part in reason.split(" ; "):
        text, *where = part.split(_AT)
        out.append(ReasonClause(text.strip(), where[0].strip() if where else None,
                                tuple(w.strip() for w in where[1:])))
    return out


def refusals_by_reason(decisions) -> dict[ReasonClause, list[FusionDecision]]:
    """The refusals among ``decisions`` grouped by each clause of their reasons (a refusal
    with two clauses is under both), clauses in order of first appearance; the producer ->
    consumer pairs of each group in log order, each pair once (the pass may refuse the same
    edge on several visits)."""
    groups: dict[ReasonClause, list[FusionDecision]] = {}
    for d in decisions:
        if d.fused:
            continue
        for clause in reason_clauses(d.reason):
            key = ReasonClause(clause.text, clause.source)
            group = groups.setdefault(key, [])
            if all((x.producer, x.consumer) != (d.producer, d.consumer) for x in group):
                group.append(d)
    return groups


@dataclass
class ModuleLog:
    """The fusion log of one module whose backend has no model of its fusion policy here (the
    TPU's: XLA:CPU's is the only one restated, in cpu/fusion_policy.py): the compiler's
    decisions, and its refusals grouped by each clause of their reasons, with the source line
    that decided it (``module_log`` reads one)."""
    module: str
    backend: str
    log: list
    note: str = ""      # why the log is empty, where it is

    @property
    def fused(self) -> int:
        return sum(d.fused for d in self.log)

    @property
    def refused(self) -> int:
        return sum(not d.fused for d in self.log)

    def by_reason(self) -> dict:
        return refusals_by_reason(self.log)

    def as_dict(self) -> dict:
        return {"module": self.module, "backend": self.backend, "fused": self.fused,
                "refused": self.refused, **({"note": self.note} if self.note else {}),
                "decisions": [{"producer": d.producer, "consumer": d.consumer, "fused": d.fused,
                               "fusion": d.fusion, "reason": d.reason,
                               "clauses": [{"text": c.text, "source": c.source}
                                           for c in ([] if d.fused else reason_clauses(d.reason))]}
                              for d in self.log],
                "refusals_by_reason": [{"reason": c.text, "source": c.source,
                                        "edges": [[d.producer, d.consumer] for d in group]}
                                       for c, group in self.by_reason().items()]}


def module_log(folder, key: str, module_id: str, backend: str) -> ModuleLog:
    """The ``ModuleLog`` of the module ``key`` (``module_NNNN.<name>``) of ``folder``, from its
    fusion log files; FusionLogError naming the folder when it has none."""
    files = fusion_log_files(folder, module_id)
    if not files:
        raise FusionLogError(f"{folder}: no {LOG_GLOB} files for {key} (compile with "
                             f"xla_dump_fusion_visualization=True)")
    return ModuleLog(key, backend, [d for f in files for d in read_fusion_log_file(f)])
