"""The compiler's own fusion decisions, as data.

With ``xla_dump_fusion_visualization=True`` XLA writes, per compiled module, a "Fusion
Explorer" page (``<computation>.module_NNNN.<name>.<pass>_fusion.html``) whose script holds the
log of XLA's InstructionFusion pass as a JavaScript array::

    const frames = [[0, "About to fuse |broadcast.1| into |multiply| inside InstructionFusion ...", "#node4 polygon"],
                    [1, "Fused |broadcast.1| into |broadcast_multiply_fusion| inside ...", ""],
                    [1, "Not fusing |divide| into |broadcast_multiply_fusion| as Fusion is not profitable. ; ...", ...]]

Each line is a decision in the compiler's words.  ``FusionDecision`` keeps those words
(``reason``) so a claim can assert against them, not against a paraphrase.
"""
from __future__ import annotations

import json
import re
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
    """
    producer: str
    consumer: str
    fused: bool
    reason: str
    pass_name: str
    consumer_origin: str
    fusion: str | None
    file: str

    def __str__(self) -> str:
        verb = "fused" if self.fused else "did not fuse"
        return f"{self.pass_name}: {verb} {self.producer} into {self.consumer}: {self.reason}"


_FRAMES = re.compile(r"const frames = (\[.*?\]);\s*$", re.S | re.M)
_ABOUT = re.compile(r"^About to fuse \|(?P<p>[^|]+)\| into \|(?P<c>[^|]+)\| inside (?P<who>\w+)")
_FUSED = re.compile(r"^Fused \|(?P<p>[^|]+)\| into \|(?P<f>[^|]+)\| inside (?P<who>\w+)")
_NOT = re.compile(r"^Not fusing \|(?P<p>[^|]+)\| into \|(?P<c>[^|]+)\| as (?P<why>.*)$", re.S)
_FILE = re.compile(r"^(?P<comp>.+)\.module_(?P<id>\d+)\.(?P<name>.+)\.(?P<pass>[^.]*)_fusion\.html$")


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
    fm = _FILE.match(path.name)
    pass_label = (fm.group("pass") if fm else "") or "fusion"
    origin: dict[str, str] = {}   # fusion instruction -> the consumer it grew from
    pending: dict[str, str] = {}  # producer -> consumer announced by "About to fuse"
    out: list[FusionDecision] = []
    for frame in frames:
        if not isinstance(frame, list) or len(frame) < 2 or not isinstance(frame[1], str):
            raise FusionLogError(f"{path}: unexpected frame {str(frame)[:80]!r}")
        text = frame[1]
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
                                      root, f["f"], str(path)))
            continue
        n = _NOT.match(text)
        if n:
            why = n["why"].strip()
            out.append(FusionDecision(n["p"], n["c"], False, why, pass_label,
                                      origin.get(n["c"], n["c"]), None, str(path)))
    return out


def fusion_decisions_in_folder(folder, module_id: str | None = None) -> list[FusionDecision]:
    """Every decision in the fusion visualization files of ``folder`` (of one module when
    ``module_id`` is given), file by file in name order."""
    folder = Path(folder)
    files = sorted(folder.glob("*_fusion.html"))
    if module_id is not None:
        files = [p for p in files if f".module_{module_id}." in p.name]
    if not files:
        raise FusionLogError(f"{folder}: no *_fusion.html files (compile with "
                             f"xla_dump_fusion_visualization=True)")
    out: list[FusionDecision] = []
    for p in files:
        out.extend(read_fusion_log(p))
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
