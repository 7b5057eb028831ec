"""Markdown lines with slots: the pieces the write-up is rendered from.

Rendering gives :class:`Line` objects: the text of a line and, for the parts of it that may
legitimately differ between runs, :class:`Slot` spans saying how they may differ (a measured
value within its tolerance, a field of the machine, a field the write-up declares as varying
between runs).  Everything else on a line must come out identical.  The evidence kinds
(:mod:`pytest_dumpref.kinds`) and the document (:mod:`pytest_dumpref.writeup`) both render
with these; nothing here knows a kind or a claim record.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .measured import BOUND_SIGNS

# -- lines with slots ----------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """A span of a line whose text may differ between runs, and how."""
    start: int
    end: int
    rule: str                      # "measured" | "bound" | "machine" | "varies"
    value: Any = None              # measured, bound: the number rendered in the span
    rel: float | None = None       # measured: relative tolerance
    abs: float | None = None       # measured: absolute tolerance
    what: str = ""                 # for messages: "number 'time'", "chip", "commit"
    noise: float | None = None     # measured: the run's noise (one sigma); judged by measured.judge
    bound: tuple | None = None     # bound: (operator, limit)
    unit: str | None = None        # measured: the value's unit (a time is judged at the claim's speed)


@dataclass
class Line:
    text: str
    claim: str | None = None       # node id of the claim the line belongs to
    where: str = ""                # the part of the file: "environment", "contents", "section 'x'"
    slots: tuple = ()
    holds: tuple | None = None     # a <details> line: (what it folds, how many), see folded


@dataclass(frozen=True)
class Var:
    """A piece of a line that may vary: see Slot."""
    text: str
    rule: str
    value: Any = None
    rel: float | None = None
    abs: float | None = None
    what: str = ""
    noise: float | None = None
    bound: tuple | None = None
    unit: str | None = None


class Out:
    """The lines rendered so far; ``claim`` and ``where`` label the lines added next."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.claim: str | None = None
        self.where = ""

    def add(self, *pieces: Any) -> None:
        text, slots = "", []
        for p in pieces:
            if isinstance(p, Var):
                slots.append(Slot(len(text), len(text) + len(p.text), p.rule, p.value, p.rel, p.abs, p.what,
                                  p.noise, p.bound, p.unit))
                text += p.text
            else:
                text += str(p)
        assert "\n" not in text, text
        self.lines.append(Line(text, self.claim, self.where, tuple(slots)))

    def lines_of(self, texts: Iterable[str]) -> None:
        for t in texts:
            self.add(t)

    def text(self, block: str) -> None:
        for ln in block.split("\n"):
            self.add(ln)

    def blank(self) -> None:
        self.add("")


# -- numbers -------------------------------------------------------------------------------

def float_text(value: float) -> str:
    """A measured value as a reader compares it: from 1,000 up a whole number with thousands
    separators (``53,153``, not ``5.315e+04``), below that four significant digits (``2.435``,
    ``0.3365``); only below 1e-4, where the digits would follow a row of zeros, an exponent
    (``4.353e-07``)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def format_number(value, unit: str | None) -> str:
    if isinstance(value, bool):
        text = str(value)
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = float_text(value)
    if unit == "B" and isinstance(value, (int, float)) and abs(value) >= 1024:
        return f"{text} B ({_binary(value)})"
    return f"{text} {unit}" if unit else text


def noise_text(noise: float) -> str:
    """A noise as a reader reads it: two significant digits (``12``, ``0.034``), whole from 100."""
    return f"{noise:,.0f}" if abs(noise) >= 100 else f"{noise:.2g}"


def measured_text(value, noise: float, unit: str | None) -> str:
    """``350.5 ± 12 us``: a measured value and its noise, the unit once."""
    v = f"{value:,}" if isinstance(value, int) else float_text(value)
    return f"{v} ± {noise_text(noise)}" + (f" {unit}" if unit else "")


def bound_text(bound) -> str:
    """``≤ 1e-05``, ``in [0.9, 1.1]``."""
    op, limit = bound
    if op == "in":
        return f"in [{float_text(limit[0])}, {float_text(limit[1])}]"
    return f"{BOUND_SIGNS[op]} {float_text(limit)}"


def _binary(n: float) -> str:
    for prefix in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024:
            return f"{n:.2f} {prefix}"
    return f"{n:.2f} PiB"


_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)


def _outside_code(text: str, fix) -> str:
    """Apply ``fix`` to the parts of ``text`` that are not `code spans`."""
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [fix(text[pos:m.start()]), m.group(0)]
        pos = m.end()
    return "".join(out + [fix(text[pos:])])


def _literal(part: str, keep_strong: bool) -> str:
    """Characters GitHub would read as emphasis or as an HTML tag, shown as themselves:
    ``2*4*128`` and ``*.txt`` are not italics, ``<module>`` is not a tag."""
    star = r"(?<![*\\])\*(?!\*)" if keep_strong else r"(?<!\\)\*"
    part = re.sub(star, r"\\*", part)
    part = re.sub(r"(?<![A-Za-z0-9\\])_|_(?![A-Za-z0-9])", r"\\_", part)
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", part)


def prose(text: str) -> str:
    """A claim's sentence, title or note: Markdown of its author (code spans, **strong**), with
    lone asterisks, edge underscores and tag-like '<' shown literally."""
    return _outside_code(text, lambda p: _literal(p, keep_strong=True))


def md_cell(v: Any) -> str:
    """A plain value (not a measured, bounded or varies cell: see kinds.cell_text) as the text
    of a table cell."""
    if v is None:
        return ""
    if isinstance(v, float):
        v = float_text(v)
    elif isinstance(v, int) and not isinstance(v, bool):
        v = f"{v:,}"
    text = str(v).replace("|", "\\|").replace("\n", " ")
    return _outside_code(text, lambda p: _literal(p, keep_strong=False))


def anchor(nodeid: str) -> str:
    """A claim's anchor: from its node id, so links survive a change of title."""
    return "claim-" + re.sub(r"[^a-z0-9]+", "-", nodeid.lower()).strip("-")


def fence(text: str, lang: str | None) -> list[str]:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return [f"{ticks}{lang or ''}", *text.rstrip("\n").split("\n"), ticks]


def _summary(text: str) -> str:
    return html.escape(text.replace("\n", " "), quote=False)


def folded(out: Out, summary: str, body: Callable[[], object], holds: tuple | None = None) -> None:
    """<details> that GitHub renders: blank lines around the Markdown inside.  ``holds``:
    (what, how many) for a fold of evidence, ("table", 1), ("numbers", 23): the document
    gathers those at the claim's end and says what they hold (writeup._fold_the_rest)."""
    out.add("<details><summary>", _summary(summary), "</summary>")
    out.lines[-1].holds = holds
    out.blank()
    body()
    out.blank()
    out.add("</details>")


def percent(rel: float) -> str:
    """A relative tolerance as a percentage a reader can trust: ``±50%``, ``±0.001%`` (never
    ``±0%`` for a tolerance that is not zero)."""
    return f"±{rel:.0%}" if rel == 0 or rel >= 0.01 else f"±{rel * 100:.2g}%"


def tolerance_text(tol: dict) -> str:
    if "abs" in tol:
        return f"±{tol['abs']:g}"
    return percent(tol["rel"])


def link_text(title: str) -> str:
    return prose(title).replace("[", "\\[").replace("]", "\\]")


# -- the write-up's own files --------------------------------------------------------------

EVIDENCE_DIR = "dumpref-evidence"


def evidence_dir(nodeid: str) -> str:
    """Where one claim's reproduction keeps its evidence: a folder of its own, because pytest
    empties --basetemp at the start of every run."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", nodeid.rsplit("::", 1)[-1]).strip("-")
    return f"{EVIDENCE_DIR}/{name}"


def asset_name(nodeid: str, title: str, suffix: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{nodeid.split('::')[-1]}-{title}")[:120]
    return name + (suffix or "")


def assets_dir_name(report_name: str) -> str:
    return Path(report_name).stem + ".assets"
