"""The kinds of evidence a claim records, each one class, registered here.

A kind records an item (validating what the claim passed), finalizes it at the end of its
test (the run's tolerances, paths made relative), says what the data of the write-up keeps,
checks an item read back from it, renders it as lines of Markdown, compares a re-run's items
with the written ones, and names the line of the file an item is on.  The rest of the package
(``claims.Evidence``, ``writeup``, ``check``, ``session``) goes through :data:`KINDS` and knows
no kind by its name, except that a claim's finding quotes its *numbers*.

Items are plain dicts with a ``"kind"`` key (JSON: they travel from xdist workers and are kept
in the write-up's data), so a kind is a stateless object that works on them, the way syrupy's
serialisers work on snapshots.  A project adds a kind of its own from its ``conftest.py``::

    from pytest_dumpref import kinds

    class Quote(kinds.Kind):
        name = "quote"              # evidence.quote(...) records one
        required = ("text", "source")

        def record(self, text, *, source):
            return {"text": str(text), "source": str(source)}

        def render(self, out, ctx, index):
            item = ctx.items[index]
            out.blank()
            out.add("> ", kinds.prose(item["text"]), " (", kinds.prose(item["source"]), ")")
            return 1

    kinds.register(Quote())

Besides the item kinds, a table cell may be a value of one of the :data:`CELLS` kinds:
measured (a value with its noise), bounded (asserted under or over a limit) or varies (shown,
not compared).
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

from . import measured as _measured
from .markdown import (Out, Var, asset_name, assets_dir_name, bound_text, evidence_dir, fence,
                       folded, format_number, link_text, md_cell, measured_text, percent,
                       prose, tolerance_text)
from .measured import TIME_UNITS, parse_bound, speed_exponent, within_bound

# Long evidence folds into <details>: a numbers table of more than NUMBERS_FOLD rows, another
# table of more than TABLE_FOLD, an excerpt of more than EXCERPT_FOLD lines (a claim can say
# fold=True or fold=False for one table or excerpt).  Figures, notes and short evidence stay in
# view, so that a reader meets the sentence, its notes and its key figures first.
NUMBERS_FOLD = 8
TABLE_FOLD = 4
EXCERPT_FOLD = 8
# An excerpt of more than EXCERPT_KEPT_BESIDE bytes (a whole module listed so a reader can run
# it) is kept as a file beside the write-up, which links to it with its size and sha256: the
# Markdown stays under the 400 KB a GitHub page renders (the fusion model alone is 124 KB), and
# a reader downloads the file instead of copying thousands of lines out of a page.  A listing
# of a few hundred lines (the minimal plugin's C, 12 KB) stays in the page, folded.
EXCERPT_KEPT_BESIDE = 16 * 1024
# The file name a kept excerpt takes: the first file name its title gives, "fusion_model.py: ..."
# or "the cost model (pytest_dumpref/xla/cpu/cost_model.py, whole)", without its folders.
_TITLE_FILE = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*([A-Za-z_][\w-]*\.(?:py|c|h|cc|cpp|txt|json|toml|md|sh|hlo|mlir|yml|yaml))"
                         r"(?![\w.-])")
# A note of at least this many characters that several claims record is rendered under the
# first of them; the others point to it (a sentence or two is cheaper said again than pointed to).
SAID_ONCE_CHARS = 200


class ClaimError(Exception):
    """A claim broke the contract (missing evidence, bad provenance, wrong chip)."""


class UnknownKind(ClaimError, AttributeError):
    """Evidence of a kind nobody registered.  An AttributeError too, since ``evidence.<kind>``
    is where a claim meets it (``hasattr`` stays truthful)."""


# -- helpers of several kinds --------------------------------------------------------------

def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_of_tree(root: Path) -> str:
    """One hash for a folder: names and contents of every file, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(q for q in Path(root).rglob("*") if q.is_file()):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(sha256_of(p).encode() + b"\n")
    return h.hexdigest()


def plain(value: Any) -> Any:
    """Numbers as JSON-friendly Python scalars (numpy scalars, jax scalars)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "item"):
        return plain(value.item())
    raise TypeError(f"evidence.number needs a real number, got {type(value).__name__}: {value!r}")


def noise_of(what: str, noise: Any) -> float:
    try:
        n = plain(noise)
    except TypeError:
        n = None
    if n is None or isinstance(n, bool) or not math.isfinite(n) or n < 0:
        raise ClaimError(f"{what}: noise must be a finite number >= 0 (one sigma, in the value's unit), "
                         f"got {noise!r}")
    return float(n)


def bound_of(what: str, value: Any, bound: Any) -> list:
    try:
        op, limit = parse_bound(what, bound)   # limit: a number, or [low, high] for "in"
    except ValueError as e:
        raise ClaimError(str(e)) from None
    if not within_bound(value, op, limit):  # type: ignore[arg-type]
        raise ClaimError(f"{what}: {value!r} is not {op} {limit!r}, the bound it is recorded with "
                         "(assert the bound in the claim; a bound the value breaks is not evidence)")
    return [op, limit]


# -- the values a table cell may hold --------------------------------------------------------

class CellKind:
    """A table cell that is more than a plain value: a dict ``{"value": v, <key>: ...}``."""
    name: ClassVar[str] = ""
    key: ClassVar[str] = ""          # the dict key that tells this kind of cell
    optional: ClassVar[tuple[str, ...]] = ()   # further keys a cell of this kind may hold

    def matches(self, cell: Any) -> bool:
        return isinstance(cell, dict) and self.key in cell

    def text(self, cell: dict) -> str:
        return md_cell(cell["value"])

    def piece(self, text: str, cell: dict, what: str) -> Var:
        raise NotImplementedError


class MeasuredCell(CellKind):
    """A measured value with its noise (one sigma, the value's unit): the check judges it as
    it judges ``evidence.number(..., noise=)``."""
    name, key, optional = "measured", "noise", ("unit", "ruler")

    def make(self, value: Any, noise: Any, unit: str | None = None, ruler: bool = False) -> dict:
        v = plain(value)
        if isinstance(v, float) and not math.isfinite(v):
            raise ClaimError(f"measured: the value is not finite: {v}")
        if ruler and speed_exponent(unit) != 1:
            raise ClaimError(f"measured: a ruler is a time (unit one of {', '.join(TIME_UNITS)}), got unit {unit!r}")
        cell = {"value": v, "noise": noise_of("measured", noise)}
        if unit is not None:
            cell["unit"] = str(unit)
        if ruler:
            cell["ruler"] = True
        return cell

    def text(self, cell: dict) -> str:
        return measured_text(cell["value"], cell["noise"], None)

    def piece(self, text: str, cell: dict, what: str) -> Var:
        return Var(text, "measured", cell["value"], what=what, noise=cell["noise"], unit=cell.get("unit"))


class BoundedCell(CellKind):
    """A value the claim asserts under or over a limit (see ``evidence.number(bound=)``)."""
    name, key = "bounded", "bound"

    def make(self, value: Any, bound: Any) -> dict:
        v = plain(value)
        return {"value": v, "bound": bound_of("bounded", v, bound)}

    def piece(self, text: str, cell: dict, what: str) -> Var:
        return Var(text, "bound", cell["value"], what=what, bound=tuple(cell["bound"]))


class VariesCell(CellKind):
    """A value shown and not compared (a count the run chose, such as a benchmark's rounds)."""
    name, key = "varies", "varies"

    def make(self, value: Any) -> dict:
        return {"value": cell_value(value), "varies": True}

    def piece(self, text: str, cell: dict, what: str) -> Var:
        return Var(text, "varies", what=what)


MEASURED, BOUNDED, VARIES = MeasuredCell(), BoundedCell(), VariesCell()
CELLS: tuple[CellKind, ...] = (MEASURED, BOUNDED, VARIES)
_CELL_KEYS = [({"value", c.key}, {"value", c.key, *c.optional}) for c in CELLS]


def cell_kind(cell: Any) -> CellKind | None:
    return next((c for c in CELLS if c.matches(cell)), None)


def cell_value(c: Any) -> Any:
    """A table cell as recorded: JSON scalars, a cell kind's dict, or the text of anything else."""
    if c is None or isinstance(c, (str, bool)):
        return c
    if isinstance(c, dict) and any(needed <= set(c) <= allowed for needed, allowed in _CELL_KEYS):
        return dict(c)
    try:
        return plain(c)
    except TypeError:
        return str(c)


def cell_text(v: Any) -> str:
    kind = cell_kind(v)
    return kind.text(v) if kind else md_cell(v)


def cell_piece(text: str, value: Any, tol: dict | None, what: str) -> Any:
    """A cell or value as a line piece: a slot (Var) when it is a cell kind's or carries a
    column tolerance, else its text."""
    kind = cell_kind(value)
    if kind is not None:
        return kind.piece(text, value, what)
    if tol and isinstance(value, (int, float)) and not isinstance(value, bool):
        return Var(text, "measured", value, tol.get("rel"), tol.get("abs"), what)
    return text


def rows_of(what: str, rows: Iterable) -> tuple[list[str], list[list]]:
    """``rows``: dicts with the same keys, or lists whose first row is the header."""
    rows = list(rows)
    if rows and isinstance(rows[0], dict):
        header = list(rows[0].keys())
        body = [[r.get(k) for k in header] for r in rows]
    elif rows:
        header, body = list(rows[0]), [list(r) for r in rows[1:]]
    else:
        header, body = [], []
    if any(len(r) != len(header) for r in body):
        raise ClaimError(f"{what}: every row needs {len(header)} cells, one per column of {header}")
    return [str(h) for h in header], [[cell_value(c) for c in r] for r in body]


def column_tolerances(what: str, header: list[str], tolerances: dict | None) -> dict:
    """{column: {"rel": x} | {"abs": x}}, checked against the header."""
    out = {}
    for col, tol in (tolerances or {}).items():
        if col not in header:
            raise ClaimError(f"{what}: tolerances name column {col!r}, which is not one of {header}")
        if isinstance(tol, dict) and set(tol) == {"abs"}:
            kind, value = "abs", tol["abs"]
        else:
            kind, value = "rel", tol
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ClaimError(f"{what}: tolerance of column {col!r} must be a relative number >= 0 "
                             f"or {{'abs': number}}, got {tol!r}")
        out[col] = {kind: float(value)}
    return out


# -- what a kind is given --------------------------------------------------------------------

@dataclass
class Finalizing:
    """What a kind may use when its claim's test ends: the tolerance [tool.dumpref] gives a
    unit, and where a path lies under pytest's --basetemp (None: elsewhere)."""
    tolerance_for: Callable[[str | None, float | None], float | None]
    under_basetemp: Callable[[Path], str | None]


@dataclass
class RenderContext:
    """One claim being rendered: its record, the items shown (in order), its anchor and title,
    the write-up's file name, and the long notes already said (text -> (anchor, title))."""
    record: dict
    items: list[dict]
    report_name: str
    anchor: str
    title: str
    said: dict | None = None


# -- the kinds ---------------------------------------------------------------------------

class Kind:
    """One kind of evidence.  Subclasses set ``name`` and implement :meth:`record` and
    :meth:`render`; the other methods have defaults that suit a kind which is rendered and
    compared through its lines alone.

    Example, a built-in kind used directly (``evidence.table(...)`` records the same item)::

        table = kinds.KINDS["table"]
        item = {"kind": "table", **table.record("sizes", [{"array": "x", "bytes": 4096}])}
        table.render(out, kinds.RenderContext(record, [item], "writeup.md", "claim-x", "X"), 0)
    """
    name: ClassVar[str] = ""
    key: ClassVar[str | None] = None      # the field that names an item in messages
    unique: ClassVar[bool] = False        # whether that name may appear once per claim only
    required: ClassVar[tuple[str, ...]] = ()  # fields an item read back from a write-up must have
    substantive: ClassVar[bool] = True    # whether an item backs a claim (a note alone does not)

    def record(self, *args: Any, **kwargs: Any) -> dict:
        """The item's fields (without "kind") from what the claim passed; ClaimError if bad."""
        raise NotImplementedError(f"evidence kind {self.name!r} does not say how it records")

    def finalize(self, item: dict, run: Finalizing) -> dict:
        """The item as it travels and is written, at the end of its claim's test."""
        return item

    def stored(self, item: dict) -> dict:
        """The item as the write-up's data keeps it."""
        return item

    def problem(self, item: dict) -> str | None:
        """Why an item read back from a write-up (its required fields present) cannot be used."""
        return None

    def judged(self, item: dict) -> bool:
        """Whether the item holds a value the check judges by noise, bound or tolerance."""
        return False

    def study_text(self, item: dict) -> str | None:
        """Text said once at the head of a study when every claim of it records it."""
        return None

    def render_head(self, out: Out, items: list[dict], ctx: RenderContext) -> None:
        """Before a claim's items, once, given all its items of this kind."""

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        """Render ``ctx.items[index]``; return how many items it rendered (1, or more for a
        kind that renders its neighbours with it)."""
        raise NotImplementedError(f"evidence kind {self.name!r} does not say how it renders")

    def render_tail(self, out: Out, items: list[dict], ctx: RenderContext) -> None:
        """After the claim's Reproduce line, once, given all its items of this kind."""

    def compare(self, written: list[dict], now: list[dict],
                rule: _measured.Rule) -> list[tuple[str, str]]:
        """(item name, problem) for what the visible lines cannot show (full precision, hashes)."""
        return []

    def line_of(self, lines: list[str], start: int, name: str) -> int | None:
        """The 1-based line of the committed file that shows item ``name`` (from ``start``)."""
        return None

    def asset(self, nodeid: str, item: dict) -> str | None:
        """The file name the item keeps beside the write-up, if any (under the write-up's assets
        folder: its text from :meth:`asset_text`, or else copied from item["path"])."""
        return None

    def asset_text(self, item: dict) -> str | None:
        """The text of the item's file beside the write-up, when the item holds it (the check
        then compares the file with it byte for byte); None: copied from item["path"]."""
        return None

    def run_lines(self, item: dict, written: list[dict]) -> list[str]:
        """What a verbose check prints of the item beside the write-up's items of this kind."""
        return []

    def label(self, item: dict) -> str:
        return f"{self.name} {item.get(self.key)!r}" if self.key else self.name


def _same(written: Any, now: Any, tolerance: float | None) -> bool:
    if isinstance(written, bool) or isinstance(now, bool) or tolerance is None:
        if isinstance(written, float) or isinstance(now, float):
            # exact, up to the last bits of float summation order
            return math.isclose(written, now, rel_tol=1e-12, abs_tol=0.0)
        return bool(written == now)
    return bool(written == now or abs(now - written) <= tolerance * abs(written))


class Number(Kind):
    name, key, unique = "number", "name", True
    required = ("name", "value")

    def record(self, name: str, value: Any, *, unit: str | None = None, tolerance: float | None = None,
               noise: float | None = None, bound: Any = None) -> dict:
        """A number the write-up states, compared by ``--dumpref-check`` in one of four ways:

        - ``noise=``: a measured value and its standard uncertainty (one sigma, in ``unit``) as
          this run estimated it from its own data (its rounds' spread, an A/A control); a re-run
          is judged by both runs' noise (see :mod:`pytest_dumpref.measured`);
        - ``bound=``: a figure the claim asserts under or over a limit, ``("<=", 1e-5)`` or
          ``{"max": 1e-5}``; checked against the limit, not against the last run's value;
        - ``tolerance=``: relative (0.1 = 10 %), declared by hand;
        - none of these: exact, unless ``[tool.dumpref] default_tolerances`` names the unit."""
        v = plain(value)
        what = f"evidence.number {name!r}"
        if isinstance(v, float) and not math.isfinite(v):
            raise ClaimError(f"{what} is not finite: {v}")
        if tolerance is not None and (not isinstance(tolerance, (int, float)) or tolerance < 0):
            raise ClaimError(f"{what}: tolerance must be a relative number >= 0, got {tolerance!r}")
        if sum(x is not None for x in (tolerance, noise, bound)) > 1:
            raise ClaimError(f"{what}: give one of tolerance=, noise= and bound=")
        item = {"name": name, "value": v, "unit": unit, "tolerance": tolerance}
        if noise is not None:
            item["noise"] = noise_of(what, noise)
        if bound is not None:
            item["bound"] = bound_of(what, v, bound)
        return item

    def finalize(self, item: dict, run: Finalizing) -> dict:
        item["effective_tolerance"] = run.tolerance_for(item.get("unit"), item.get("tolerance"))
        return item

    def problem(self, item: dict) -> str | None:
        if not isinstance(item.get("value"), (int, float)):  # bools too
            return f"has number {item['name']!r} without a numeric 'value'"
        tol = item.get("effective_tolerance")
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float))):
            return f"has number {item['name']!r} whose tolerance is not a number"
        return None

    def judged(self, item: dict) -> bool:
        return any(item.get(k) is not None for k in ("noise", "bound", "effective_tolerance"))

    def piece(self, n: dict, what: str | None = None) -> tuple[Any, str]:
        """(the value as a line piece, a slot where the check must judge it; how it is compared)."""
        what = what or f"number {n['name']!r}"
        if n.get("noise") is not None:
            return (Var(measured_text(n["value"], n["noise"], n.get("unit")), "measured", n["value"],
                        what=what, noise=n["noise"], unit=n.get("unit")), "measured (± its noise)")
        if n.get("bound") is not None:
            return (Var(format_number(n["value"], n.get("unit")), "bound", n["value"], what=what,
                        bound=tuple(n["bound"])),
                    "bound " + bound_text(n["bound"]) + (f" {n['unit']}" if n.get("unit") else ""))
        tol = n.get("effective_tolerance")
        return (cell_piece(format_number(n["value"], n.get("unit")), n["value"],
                           {"rel": tol} if tol is not None else None, what),
                "exact" if tol is None else percent(tol))

    def render_head(self, out: Out, items: list[dict], ctx: RenderContext) -> None:
        out.blank()

        def body() -> None:
            out.add("| number | value | tolerance |")
            out.add("|---|---|---|")
            for n in items:
                value, how = self.piece(n)
                out.add(f"| {md_cell(n['name'])} | ", value, " | ", how, " |")
        if len(items) > NUMBERS_FOLD:
            folded(out, f"all {len(items)} numbers of this claim", body, holds=("numbers", len(items)))
        else:
            body()

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        return 1  # in the numbers table of render_head

    def compare(self, written: list[dict], now: list[dict], rule: _measured.Rule) -> list[tuple[str, str]]:
        problems = []
        numbers_now = {i["name"]: i for i in now}
        for w in written:
            n = numbers_now.get(w["name"])
            if n is None:
                continue  # the visible comparison names a number that is gone
            name = w["name"]
            unit = f" {w['unit']}" if w.get("unit") else ""
            if w.get("bound") is not None or n.get("bound") is not None:
                op, limit = w.get("bound") or n["bound"]
                for who, item in (("write-up", w), ("this run", n)):
                    if not within_bound(item["value"], op, limit):
                        problems.append((name, f"number {name!r}: the {who}'s "
                                         f"{item['value']!r}{unit} is not {op} {limit!r}, its bound"))
                continue
            if w.get("noise") is not None and n.get("noise") is not None:
                verdict = _measured.judge(w["value"], w["noise"], n["value"], n["noise"], rule, w.get("unit"))
                if verdict.outcome == _measured.INCOMPATIBLE:
                    problems.append((name, f"number {name!r} does not reproduce: write-up says {w['value']!r} ± "
                                     f"{w['noise']!r}{unit}, this run measured {n['value']!r} ± {n['noise']!r}{unit}"))
                continue
            tol = w.get("effective_tolerance")
            if not _same(w["value"], n["value"], tol):
                how = "exactly" if tol is None else f"within ±{tol:.0%}"
                problems.append((name, f"number {name!r} does not reproduce: write-up says {w['value']!r}{unit}, "
                                 f"this run measured {n['value']!r}{unit} (must match {how})"))
        return problems

    def line_of(self, lines: list[str], start: int, name: str) -> int | None:
        return next((i + 1 for i in range(start, len(lines)) if lines[i].startswith(f"| {md_cell(name)} |")), None)

    def run_lines(self, item: dict, written: list[dict]) -> list[str]:
        was = next((w.get("value") for w in written if w["name"] == item["name"]), "(not in the write-up)")
        unit = f" {item['unit']}" if item.get("unit") else ""
        return [f"  {item['name']}: {item['value']!r}{unit}  (write-up: {was!r}{unit})"]


# A note longer than this (characters) folds behind its first sentence, in its place: a
# paragraph of method detail (the timing plan, the build flags) ran to 10-13 lines of the page.
# A note of several paragraphs (a list, a table) stays as it is.
NOTE_FOLD = 300
_SENTENCE_END = re.compile(r"\.(?=\s)")


def _first_sentence(text: str, limit: int = 110) -> tuple[str, str]:
    """A long note's summary line and the rest of it: its first sentence when that is neither
    a bare label ("Method:") nor too long for one line (the rest follows it), else its opening
    words and the whole note.  ``limit``: about one line of the summary's column."""
    m = _SENTENCE_END.search(text, 40)
    if m and m.end() <= limit:
        head, rest = text[:m.end()], text[m.end():].strip()
    else:
        cut = text.rfind(" ", 0, limit - 10)
        head, rest = text[:cut if cut > 0 else limit - 10] + " …", text
    return re.sub(r"`|\*\*", "", head), rest


def note_text(out: Out, text: str) -> None:
    """A note's paragraph, or a long one folded behind its first sentence (NOTE_FOLD)."""
    if len(text) > NOTE_FOLD and "\n" not in text:
        summary, rest = _first_sentence(text)
        folded(out, summary, lambda: out.text(prose(rest)))
    else:
        out.text(prose(text))


class Note(Kind):
    name, required, substantive = "note", ("text",), False

    def record(self, text: str) -> dict:
        """A sentence of explanation rendered under the claim (not a claim of its own)."""
        return {"text": str(text)}

    def study_text(self, item: dict) -> str | None:
        return str(item["text"])

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        item = ctx.items[index]
        out.blank()
        first = ctx.said.get(item["text"]) if ctx.said is not None else None
        if first is not None:
            words = " ".join(item["text"].split()[:8])
            out.add(f"*The note “{prose(words)} …” under [{link_text(first[1])}](#{first[0]}) "
                    "holds for this claim too.*")
            return 1
        note_text(out, item["text"])
        if ctx.said is not None and len(item["text"]) >= SAID_ONCE_CHARS:
            ctx.said[item["text"]] = (ctx.anchor, ctx.title)
        return 1


class Excerpt(Kind):
    name, key, required = "excerpt", "title", ("title", "text")

    def record(self, title: str, text: str, *, lang: str | None = None, fold: bool | None = None,
               beside: bool = False) -> dict:
        """Lines copied from a file the claim names.  ``fold``: True folds it into <details>,
        False keeps it in view; None (the default) folds a long one.  ``beside``: True keeps it
        as a file beside the write-up however short (a script a reader saves and runs, under
        the file name its title gives), as a long one always is."""
        item: dict = {"title": title, "text": str(text), "lang": lang}
        if fold is not None:
            item["fold"] = bool(fold)
        if beside:
            item["beside"] = True
        return item

    @staticmethod
    def folds(item: dict) -> bool:
        """An excerpt folds when its claim says so, or, by default, when it is long."""
        fold = item.get("fold")
        return bool(fold) if fold is not None else item["text"].rstrip("\n").count("\n") + 1 > EXCERPT_FOLD

    @staticmethod
    def before_after(a: dict, b: dict) -> bool:
        """Two excerpts recorded one after the other as 'before NAME ...' and 'after NAME ...':
        the two sides of one change, which a reader compares, so they fold (or stay) together."""
        if b["kind"] != "excerpt":
            return False
        wa, wb = a["title"].split(" ", 2), b["title"].split(" ", 2)
        return len(wa) > 1 and len(wb) > 1 and wa[0] == "before" and wb[0] == "after" and wa[1] == wb[1]

    @staticmethod
    def _in_view(out: Out, title: str, lines: list[str]) -> None:
        out.add(f"**{title}**")
        out.blank()
        for ln in lines:
            out.add(ln)

    @staticmethod
    def kept_beside(item: dict) -> bool:
        return bool(item.get("beside")) or len(item["text"].encode("utf-8")) > EXCERPT_KEPT_BESIDE

    def asset(self, nodeid: str, item: dict) -> str | None:
        """A long excerpt's file: the first file name its title gives (``_TITLE_FILE``), in a
        folder named for its claim, so a reader runs it under that name."""
        if not self.kept_beside(item):
            return None
        m = _TITLE_FILE.search(item["title"])
        claim = re.sub(r"[^A-Za-z0-9._-]+", "-", nodeid.split("::")[-1])[:80]
        if m:
            return f"{claim}/{m.group(1)}"
        return f"{claim}/{re.sub(r'[^A-Za-z0-9._-]+', '-', item['title']).strip('-')[:100] or 'excerpt'}.txt"

    def asset_text(self, item: dict) -> str | None:
        return item["text"] if self.kept_beside(item) else None

    def line_of(self, lines: list[str], start: int, name: str) -> int | None:
        return next((i + 1 for i in range(start, len(lines)) if lines[i].startswith(f"**{name}**")), None)

    def _beside(self, out: Out, ctx: RenderContext, item: dict) -> None:
        text = item["text"]
        rel = f"{assets_dir_name(ctx.report_name)}/{self.asset(ctx.record['nodeid'], item)}"
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        n = text.rstrip("\n").count("\n") + 1
        # folded like the listings shown inline, and gathered with them at the claim's end
        lines = f"{n:,} line{'' if n == 1 else 's'}"
        folded(out, f"{item['title']} ({lines})", lambda: out.add(
            f"**{item['title']}**: [`{rel.rsplit('/', 1)[-1]}`]({rel}), {lines}, "
            f"{format_number(len(text.encode('utf-8')), 'B')}, sha256 `{digest}`, kept beside this file "
            "(the check compares it byte for byte)."), holds=("excerpt", 1))

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        item = ctx.items[index]
        out.blank()
        after = ctx.items[index + 1] if index + 1 < len(ctx.items) else None
        if after is not None and self.before_after(item, after):
            self._pair(out, item, after)
            return 2
        if self.kept_beside(item):
            self._beside(out, ctx, item)
            return 1
        lines = fence(item["text"], item.get("lang"))
        if self.folds(item):
            folded(out, f"{item['title']} ({len(lines) - 2} lines)", lambda: out.lines_of(lines),
                   holds=("excerpt", 1))
        else:
            self._in_view(out, item["title"], lines)
        return 1

    def _pair(self, out: Out, before: dict, after: dict) -> None:
        """One <details> for both sides when either would fold, both in view otherwise."""
        fences = [fence(x["text"], x.get("lang")) for x in (before, after)]

        def body() -> None:
            self._in_view(out, before["title"], fences[0])
            out.blank()
            self._in_view(out, after["title"], fences[1])
        if self.folds(before) or self.folds(after):
            name = before["title"].split(" ", 2)[1]
            folded(out, f"before and after {name} ({len(fences[0]) - 2} + {len(fences[1]) - 2} lines)", body,
                   holds=("excerpt", 1))
        else:
            body()


def _table_lines(out: Out, header: list, rows: list[list], tolerances: dict, title: str) -> None:
    if not header:
        out.add("(empty table)")
        return
    out.add("| " + " | ".join(md_cell(h) for h in header) + " |")
    out.add("|" + "|".join("---" for _ in header) + "|")
    tols = [tolerances.get(h) for h in header]
    for r in rows:
        pieces: list = ["| "]
        for i, c in enumerate(r):
            if i:
                pieces.append(" | ")
            pieces.append(cell_piece(cell_text(c), c, tols[i], f"table {title!r}, column {header[i]!r}"))
        pieces.append(" |")
        out.add(*pieces)


def titled_table(out: Out, title: str, header: list, rows: list[list], tolerances: dict,
                 fold: bool | None = None) -> None:
    note = ""
    if tolerances:
        note = " (measured: " + ", ".join(f"{c} {tolerance_text(t)}" for c, t in tolerances.items()) + ")"
    if fold if fold is not None else len(rows) > TABLE_FOLD:
        folded(out, f"{title}{note} ({len(rows)} row{'' if len(rows) == 1 else 's'})",
               lambda: _table_lines(out, header, rows, tolerances, title), holds=("table", 1))
    else:
        out.add(f"**{title}**{note}")
        out.blank()
        _table_lines(out, header, rows, tolerances, title)


def _rows_problem(kind: str, item: dict) -> str | None:
    header, rows = item.get("header", []), item.get("rows", [])
    if not (isinstance(header, list) and isinstance(rows, list)
            and all(isinstance(r, list) and len(r) == len(header) for r in rows)):
        return f"has {kind} {item['title']!r} whose rows do not match its header"
    return None


def _rows_judged(item: dict) -> bool:
    cells = [c for r in item.get("rows") or [] for c in r]
    return bool(item.get("tolerances")) or any(isinstance(c, dict) for c in cells)


class Table(Kind):
    name, key, required = "table", "title", ("title", "header", "rows")

    def record(self, title: str, rows: Iterable, *, tolerances: dict | None = None,
               fold: bool | None = None) -> dict:
        """``rows``: dicts with the same keys, or lists whose first row is the header.

        ``tolerances`` names the columns that are measured (timings, counts that move between
        runs) and how closely a re-run must agree: ``{"us/call": 0.5}`` is relative (0.5 = 50 %),
        ``{"A/A difference": {"abs": 20}}`` absolute.  Every other cell is compared exactly by
        ``--dumpref-check``.  ``fold`` as for ``excerpt``."""
        what = f"evidence.table {title!r}"
        header, cells = rows_of(what, rows)
        item: dict = {"title": title, "header": header, "rows": cells,
                      "tolerances": column_tolerances(what, header, tolerances)}
        if fold is not None:
            item["fold"] = bool(fold)
        return item

    def problem(self, item: dict) -> str | None:
        return _rows_problem("table", item)

    def judged(self, item: dict) -> bool:
        return _rows_judged(item)

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        item = ctx.items[index]
        out.blank()
        titled_table(out, item["title"], item["header"], item["rows"], item.get("tolerances") or {},
                     item.get("fold"))
        return 1


class File(Kind):
    name, key, unique, required = "file", "title", True, ("title", "sha256")

    def record(self, title: str, path: Any) -> dict:
        """A file or folder the claim rests on, by hash (compared exactly by --dumpref-check)."""
        p = Path(path)
        if not p.exists():
            raise ClaimError(f"evidence.file {title!r}: {p} does not exist")
        digest = sha256_of_tree(p) if p.is_dir() else sha256_of(p)
        return {"title": title, "path": str(p), "sha256": digest, "is_dir": p.is_dir()}

    def finalize(self, item: dict, run: Finalizing) -> dict:
        path = Path(item.pop("path"))
        item["name"] = path.name
        item["where"] = run.under_basetemp(path)
        return item

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        return 1  # under the Reproduce line: render_tail

    def render_tail(self, out: Out, items: list[dict], ctx: RenderContext) -> None:
        """The hashed evidence the claim's Reproduce command leaves, and where."""
        here = evidence_dir(ctx.record["nodeid"])
        entries = []
        for item in items:
            what = "folder" if item.get("is_dir") else "file"
            where = f"`{here}/{item['where']}`" if item.get("where") else f"`{item.get('name', '')}`"
            entries.append(f"{what} **{md_cell(item['title'])}** at {where}, sha256 `{item['sha256'][:16]}…`")
        if len(entries) == 1:
            out.add(f"leaves the evidence kept by hash: {entries[0]}.")
        elif len(entries) > TABLE_FOLD:  # a claim over many programs: its list would fill a page
            out.add(f"leaves the evidence kept by hash, {len(entries)} files and folders, listed below.")
            out.blank()
            folded(out, f"the {len(entries)} files and folders of evidence, with their sha256",
                   lambda: out.lines_of(f"- {e}" for e in entries))
        else:
            out.add("leaves the evidence kept by hash:")
            out.blank()
            for e in entries:
                out.add(f"- {e}")

    def compare(self, written: list[dict], now: list[dict], rule: _measured.Rule) -> list[tuple[str, str]]:
        hashes = {i["title"]: i["sha256"] for i in now}
        return [(w["title"], f"file {w['title']!r} changed: sha256 {w['sha256']} in the write-up, "
                 f"{hashes[w['title']]} now")
                for w in written if hashes.get(w["title"]) not in (None, w["sha256"])]

    def line_of(self, lines: list[str], start: int, name: str) -> int | None:
        return next((i + 1 for i in range(start, len(lines)) if f"**{name}**" in lines[i] and "sha256" in lines[i]),
                    None)


class Figure(Kind):
    name, key, required = "figure", "title", ("title", "sha256")

    def record(self, title: str, path: Any, *, data: Iterable | None = None,
               tolerances: dict | None = None) -> dict:
        """An image; copied beside the write-up.  Its pixels are not compared by the check
        (another matplotlib draws other pixels); the numbers it plots are, when given as
        ``data`` (rows as for ``table``, with the same ``tolerances``)."""
        p = Path(path)
        if not p.is_file():
            raise ClaimError(f"evidence.figure {title!r}: {p} is not a file")
        what = f"evidence.figure {title!r}"
        header, cells = rows_of(what, data) if data is not None else ([], [])
        return {"title": title, "path": str(p), "suffix": p.suffix, "sha256": sha256_of(p),
                "header": header, "rows": cells, "tolerances": column_tolerances(what, header, tolerances)}

    def stored(self, item: dict) -> dict:
        return {k: v for k, v in item.items() if k != "path"}  # a path of this machine's temporary folders

    def problem(self, item: dict) -> str | None:
        return _rows_problem("figure", item)

    def judged(self, item: dict) -> bool:
        return _rows_judged(item)

    def asset(self, nodeid: str, item: dict) -> str | None:
        return asset_name(nodeid, item["title"], item.get("suffix", ""))

    def render(self, out: Out, ctx: RenderContext, index: int) -> int:
        item = ctx.items[index]
        rel = f"{assets_dir_name(ctx.report_name)}/{self.asset(ctx.record['nodeid'], item)}"
        out.blank()
        out.add(f"![{item['title']}]({rel})")
        out.blank()  # a paragraph of its own: on the image's next line, the caption sat beside it
        out.add(f"*{item['title']}*")
        if item.get("header"):
            out.blank()
            titled_table(out, f"data plotted in “{item['title']}”", item["header"], item["rows"],
                         item.get("tolerances") or {})
        return 1

    def run_lines(self, item: dict, written: list[dict]) -> list[str]:
        # a check writes no figure beside the write-up: the run's own lies here
        return [f"  figure {item['title']!r}: drawn afresh at {item['path']}"] if item.get("path") else []


# -- the registry --------------------------------------------------------------------------

KINDS: dict[str, Kind] = {}
BUILT_IN = ("number", "excerpt", "table", "file", "figure", "note")
# evidence.<name> must not hide what Evidence itself has
_RESERVED = {"record", "observe", "items", "observed", "substantive", "claim"}


def register(kind: Kind) -> Kind:
    """Make ``kind`` recordable as ``evidence.<kind.name>(...)`` and known to the write-up and
    the check.  Call it from a ``conftest.py`` (or a plugin) before the claims run.  A kind of
    the same name registered again by the same module replaces it (pytest may import a
    conftest more than once); another module's kind of that name, or a built-in's, is an error."""
    if not isinstance(kind, Kind):
        raise TypeError(f"kinds.register takes a Kind instance, got {kind!r}")
    name = kind.name
    if not (isinstance(name, str) and name.isidentifier() and not name.startswith("_")) or name in _RESERVED:
        raise ValueError(f"evidence kind {type(kind).__qualname__}: name {name!r} must be an identifier "
                         f"that does not start with '_' and is none of {sorted(_RESERVED)}")
    old = KINDS.get(name)
    if old is not None and (name in BUILT_IN or type(old).__module__ != type(kind).__module__):
        raise ValueError(f"evidence kind {name!r} is registered already (by {type(old).__module__}."
                         f"{type(old).__qualname__}); give {type(kind).__qualname__} another name")
    KINDS[name] = kind
    return kind


def lookup(name: str, claim: str | None = None) -> Kind:
    """The kind of that name; UnknownKind naming the claim and the kind if none is registered."""
    kind = KINDS.get(name)
    if kind is None:
        who = f"claim {claim}: " if claim else ""
        raise UnknownKind(f"{who}evidence of unknown kind {name!r}; known kinds: {', '.join(KINDS)} "
                          "(a kind of your own: pytest_dumpref.kinds.register(...) in conftest.py)")
    return kind


for _kind in (Number(), Excerpt(), Table(), File(), Figure(), Note()):
    register(_kind)
NUMBER: Number = KINDS["number"]  # type: ignore[assignment]  # registered just above


def make_item(kind: Kind, claim: str | None, args: tuple, kwargs: dict) -> dict:
    """Record an item of ``kind``: its fields, checked to travel as JSON."""
    fields = kind.record(*args, **kwargs)
    if not isinstance(fields, dict) or "kind" in fields:
        raise TypeError(f"evidence kind {kind.name!r}: record() must return a dict of fields without 'kind', "
                        f"got {fields!r}")
    item = {"kind": kind.name, **fields}
    try:
        json.dumps(item)
    except (TypeError, ValueError) as e:
        who = f"claim {claim}: " if claim else ""
        raise ClaimError(f"{who}evidence.{kind.name}: the item it records does not travel as JSON ({e})") from None
    missing = [k for k in kind.required if k not in item]
    if missing:
        raise TypeError(f"evidence kind {kind.name!r}: record() left out its required fields {missing}")
    return item

