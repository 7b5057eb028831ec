"""Claim records -> a GitHub-flavoured Markdown write-up, and back.

The Markdown is for people; the data block at its end (an HTML comment holding JSON, one
line per claim) holds every claim record whole, so that ``--dumpref-check`` can render the
file again from it and from a fresh run, and so that a run of some claims can update them in
place.  Rendering gives :class:`Line` objects: the text of a line and, for the parts of it
that may legitimately differ between runs, :class:`Slot` spans saying how they may differ
(a measured value within its tolerance, a field of the machine, a field declared in
:data:`RUN_TO_RUN`).  Everything else on a line must come out identical.  Output is
deterministic: records in file order, JSON keys sorted, nothing time-dependent.
"""
from __future__ import annotations

import base64
import html
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .claims import FINDING_FIELD
from .config import DumprefConfig
from .measured import BOUND_SIGNS

DATA_BEGIN = "<!-- dumpref-data"
DATA_END = "-->"
FORMAT_VERSION = 2
EVIDENCE_DIR = "dumpref-evidence"

# Long evidence folds into <details>: a numbers table of more than NUMBERS_FOLD rows, another
# table of more than TABLE_FOLD, an excerpt of more than EXCERPT_FOLD lines (a claim can say
# fold=True or fold=False for one table or excerpt).  Figures, notes and short evidence stay in
# view, so that a reader meets the sentence, its notes and its key figures first.
NUMBERS_FOLD = 8
TABLE_FOLD = 4
EXCERPT_FOLD = 8
# A note of at least this many characters that several claims record is rendered under the
# first of them; the others point to it (a sentence or two is cheaper said again than pointed to).
SAID_ONCE_CHARS = 200

# The one place that says which fields of a write-up legitimately differ between two runs of
# the same claims, and why.  --dumpref-check accepts any value there and says so; measured
# values are declared where they are recorded (a number's or a table column's tolerance).
RUN_TO_RUN = {
    "commit": "the commit the run was made at",
    "dirty": "whether the work tree had uncommitted changes",
    "failure message": "a claim that is not established is listed with the message it failed with, "
                       "which may quote measured values",
    "figure image": "a figure's pixels depend on the matplotlib that drew them; the data it plots "
                    "is compared",
    "counts a run chooses": "a table cell recorded with claims.varies (a benchmark's rounds), shown "
                            "and not compared",
}
# Fields of the machine a run is made on.  A stranger re-proves on their own machine: a
# difference is reported side by side, before any number, and is not a failure.
MACHINE = ("chip", "platform", "os", "cpu_count", "caches", "python", "jax", "jaxlib", "numpy")


class WriteupError(ValueError):
    """A write-up that cannot be read back (missing, no data block, bad JSON)."""


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


@dataclass
class Line:
    text: str
    claim: str | None = None       # node id of the claim the line belongs to
    where: str = ""                # the part of the file: "environment", "contents", "section 'x'"
    slots: tuple = ()


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


class _Out:
    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.claim: str | None = None
        self.where = ""

    def add(self, *pieces) -> None:
        text, slots = "", []
        for p in pieces:
            if isinstance(p, Var):
                slots.append(Slot(len(text), len(text) + len(p.text), p.rule, p.value, p.rel, p.abs, p.what,
                                  p.noise, p.bound))
                text += p.text
            else:
                text += str(p)
        assert "\n" not in text, text
        self.lines.append(Line(text, self.claim, self.where, tuple(slots)))

    def text(self, block: str) -> None:
        for ln in block.split("\n"):
            self.add(ln)

    def blank(self) -> None:
        self.add("")


# -- numbers -------------------------------------------------------------------------------

def _float_text(value: float) -> str:
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
        text = _float_text(value)
    if unit == "B" and isinstance(value, (int, float)) and abs(value) >= 1024:
        return f"{text} B ({_binary(value)})"
    return f"{text} {unit}" if unit else text


def noise_text(noise: float) -> str:
    """A noise as a reader reads it: two significant digits (``12``, ``0.034``), whole from 100."""
    return f"{noise:,.0f}" if abs(noise) >= 100 else f"{noise:.2g}"


def measured_text(value, noise: float, unit: str | None) -> str:
    """``350.5 ± 12 us``: a measured value and its noise, the unit once."""
    v = f"{value:,}" if isinstance(value, int) else _float_text(value)
    return f"{v} ± {noise_text(noise)}" + (f" {unit}" if unit else "")


def bound_text(bound) -> str:
    """``≤ 1e-05``, ``in [0.9, 1.1]``."""
    op, limit = bound
    if op == "in":
        return f"in [{_float_text(limit[0])}, {_float_text(limit[1])}]"
    return f"{BOUND_SIGNS[op]} {_float_text(limit)}"


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


def _md_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, dict) and "noise" in v:
        return measured_text(v["value"], v["noise"], None)
    if isinstance(v, dict) and ("bound" in v or "varies" in v):
        v = v["value"]
    if isinstance(v, float):
        v = _float_text(v)
    elif isinstance(v, int) and not isinstance(v, bool):
        v = f"{v:,}"
    text = str(v).replace("|", "\\|").replace("\n", " ")
    return _outside_code(text, lambda p: _literal(p, keep_strong=False))


def _tolerance_var(text: str, value, tol: dict | None, what: str):
    """A cell or value: measured (a Var) when it carries noise, a bound or a tolerance."""
    if isinstance(value, dict) and "noise" in value:
        return Var(text, "measured", value["value"], what=what, noise=value["noise"])
    if isinstance(value, dict) and "bound" in value:
        return Var(text, "bound", value["value"], what=what, bound=tuple(value["bound"]))
    if isinstance(value, dict) and "varies" in value:
        return Var(text, "varies", what=what)
    if tol and isinstance(value, (int, float)) and not isinstance(value, bool):
        return Var(text, "measured", value, tol.get("rel"), tol.get("abs"), what)
    return text


# -- names and commands --------------------------------------------------------------------

def anchor(nodeid: str) -> str:
    """A claim's anchor: from its node id, so links survive a change of title."""
    return "claim-" + re.sub(r"[^a-z0-9]+", "-", nodeid.lower()).strip("-")


def github_slug(text: str, seen: dict[str, int]) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens, a
    repeated slug suffixed -1, -2, ... in document order."""
    plain = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", text)  # Markdown emphasis/code marks
    slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


def evidence_dir(nodeid: str) -> str:
    """Where one claim's reproduction keeps its evidence: a folder of its own, because pytest
    empties --basetemp at the start of every run."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", nodeid.rsplit("::", 1)[-1]).strip("-")
    return f"{EVIDENCE_DIR}/{name}"


def reproduce_command(nodeid: str, report_name: str = "writeup.md") -> str:
    """Re-run one claim and compare it with this write-up; its evidence stays in evidence_dir."""
    return (f"python -m pytest '{nodeid}' --dumpref-check={report_name} "
            f"--basetemp={evidence_dir(nodeid)} -v")


def claim_paths(records: list[dict], config: DumprefConfig) -> list[str]:
    """What a command re-running every claim names: [tool.dumpref] claims, or the claims' files."""
    if config.claims:
        return list(config.claims)
    return sorted({r["nodeid"].split("::", 1)[0] for r in records})


def reprove_command(records: list[dict], config: DumprefConfig, report_name: str, option: str) -> str:
    paths = " ".join(_shell_word(p) for p in claim_paths(records, config)) or "."
    return f"python -m pytest {paths} --{option}={report_name}"


def _shell_word(s: str) -> str:
    return s if re.fullmatch(r"[A-Za-z0-9_./:=+-]+", s) else "'" + s.replace("'", "'\\''") + "'"


def asset_name(nodeid: str, title: str, suffix: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{nodeid.split('::')[-1]}-{title}")[:120]
    return name + (suffix or "")


def assets_dir_name(report_name: str) -> str:
    return Path(report_name).stem + ".assets"


def default_title(nodeid: str) -> str:
    """A claim's heading when its marker gives no title=: its test's name, read as words."""
    name = nodeid.rsplit("::", 1)[-1]
    name, _, param = name.partition("[")
    words = re.sub(r"^test_?", "", name)
    words = re.sub(r"^\d+[a-z]?_", "", words).replace("_", " ").strip() or name
    words = words[0].upper() + words[1:]
    return words + (f" [{param}" if param else "")


def claim_order(record: dict) -> tuple:
    """Claims appear in the order they are written in their files; files in path order.  A run
    of one file orders its claims the same way a run of all does, so updating some claims in
    place keeps the order; the node id breaks ties (xdist workers never decide the order)."""
    return record["nodeid"].split("::", 1)[0], record.get("order", 0), record["nodeid"]


# -- provenance ----------------------------------------------------------------------------

def _shapes_text(shapes) -> str:
    if isinstance(shapes, dict):
        return ", ".join(f"{k}: {tuple(v) if isinstance(v, list) else v}" for k, v in shapes.items())
    return str(shapes)


def _provenance_rows(rec: dict) -> list[tuple[str, Any]]:
    """(name, text or Var): what a claim's evidence was measured on."""
    prov = rec.get("provenance") or {}
    obs = rec.get("observed") or {}
    env = rec.get("environment") or {}
    chip = obs.get("chip") or env.get("chip")
    rows = [("chip", Var(_md_cell(chip), "machine", what="chip")),
            ("backend", _md_cell(", ".join(obs.get("backends", [])) or env.get("platform"))),
            ("dtype", _md_cell(prov.get("dtype"))),
            ("shapes", _md_cell(_shapes_text(prov.get("shapes")))),
            ("method", _md_cell(prov.get("method"))),
            ("jax / jaxlib", Var(_md_cell(f"{env.get('jax')} / {env.get('jaxlib')}"), "machine",
                                 what="jax / jaxlib"))]
    opts = obs.get("options")
    if opts:
        rows.append(("compiler options", _md_cell(", ".join(f"{k}={v}" for k, v in sorted(opts.items())))))
    if env.get("XLA_FLAGS"):
        rows.append(("XLA_FLAGS", _md_cell(env["XLA_FLAGS"])))
    for k in sorted(set(obs) - {"backends", "params", "options", "chip"}):
        rows.append((k, _md_cell(obs[k])))
    return rows


def _row_key(row) -> tuple:
    name, value = row
    return name, value.text if isinstance(value, Var) else value


# -- evidence ------------------------------------------------------------------------------

def _fence(text: str, lang: str | None) -> list[str]:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return [f"{ticks}{lang or ''}", *text.rstrip("\n").split("\n"), ticks]


def _summary(text: str) -> str:
    return html.escape(text.replace("\n", " "), quote=False)


def _folded(out: _Out, summary: str, body) -> None:
    """<details> that GitHub renders: blank lines around the Markdown inside."""
    out.add("<details><summary>", _summary(summary), "</summary>")
    out.blank()
    body()
    out.blank()
    out.add("</details>")


def _table(out: _Out, header: list, rows: list[list], tolerances: dict, title: str) -> None:
    if not header:
        out.add("(empty table)")
        return
    out.add("| " + " | ".join(_md_cell(h) for h in header) + " |")
    out.add("|" + "|".join("---" for _ in header) + "|")
    tols = [tolerances.get(h) for h in header]
    for r in rows:
        pieces = ["| "]
        for i, c in enumerate(r):
            if i:
                pieces.append(" | ")
            pieces.append(_tolerance_var(_md_cell(c), c, tols[i], f"table {title!r}, column {header[i]!r}"))
        pieces.append(" |")
        out.add(*pieces)


def percent(rel: float) -> str:
    """A relative tolerance as a percentage a reader can trust: ``±50%``, ``±0.001%`` (never
    ``±0%`` for a tolerance that is not zero)."""
    return f"±{rel:.0%}" if rel == 0 or rel >= 0.01 else f"±{rel * 100:.2g}%"


def _tolerance_text(tol: dict) -> str:
    if "abs" in tol:
        return f"±{tol['abs']:g}"
    return percent(tol["rel"])


def _titled_table(out: _Out, title: str, header, rows, tolerances, fold: bool | None = None) -> None:
    note = ""
    if tolerances:
        note = " (measured: " + ", ".join(f"{c} {_tolerance_text(t)}" for c, t in tolerances.items()) + ")"
    if fold if fold is not None else len(rows) > TABLE_FOLD:
        _folded(out, f"{title}{note} ({len(rows)} row{'' if len(rows) == 1 else 's'})",
                lambda: _table(out, header, rows, tolerances, title))
    else:
        out.add(f"**{title}**{note}")
        out.blank()
        _table(out, header, rows, tolerances, title)


def _number_piece(n: dict, what: str | None = None):
    """(the value as a line piece, a slot where the check must judge it; how it is compared)."""
    what = what or f"number {n['name']!r}"
    if n.get("noise") is not None:
        return (Var(measured_text(n["value"], n["noise"], n.get("unit")), "measured", n["value"],
                    what=what, noise=n["noise"]), "measured (± its noise)")
    if n.get("bound") is not None:
        return (Var(format_number(n["value"], n.get("unit")), "bound", n["value"], what=what,
                    bound=tuple(n["bound"])),
                "bound " + bound_text(n["bound"]) + (f" {n['unit']}" if n.get("unit") else ""))
    tol = n.get("effective_tolerance")
    return (_tolerance_var(format_number(n["value"], n.get("unit")), n["value"],
                           {"rel": tol} if tol is not None else None, what),
            "exact" if tol is None else percent(tol))


def _findings(out: _Out, sections: list, config: DumprefConfig) -> None:
    """One line a claim, under its section's title: its ``finding=`` with the numbers it
    quotes (``{name}``), or its title, linked to the claim."""
    out.where = "findings"
    out.add("## Findings")
    out.blank()
    for s, rs in sections:
        if len(sections) > 1:
            out.add(f"**{prose(config.section_title(s))}**")
            out.blank()
        for r in rs:
            out.claim = r["nodeid"]
            title = r.get("title") or default_title(r["nodeid"])
            pieces: list = [f"- [{_link_text(title)}](#{anchor(r['nodeid'])})"]
            if r.get("finding"):
                numbers = {i["name"]: i for i in r["evidence"] if i["kind"] == "number"}
                pieces.append(": ")
                pos = 0
                for m in FINDING_FIELD.finditer(r["finding"]):
                    pieces.append(prose(r["finding"][pos:m.start()]))
                    pieces.append(_number_piece(numbers[m.group(1)], f"finding's number {m.group(1)!r}")[0])
                    pos = m.end()
                pieces.append(prose(r["finding"][pos:]))
            out.add(*pieces)
        out.claim = None
        out.blank()


def _numbers(out: _Out, numbers: list[dict]) -> None:
    def body():
        out.add("| number | value | tolerance |")
        out.add("|---|---|---|")
        for n in numbers:
            value, how = _number_piece(n)
            out.add(f"| {_md_cell(n['name'])} | ", value, " | ", how, " |")
    if len(numbers) > NUMBERS_FOLD:
        _folded(out, f"all {len(numbers)} numbers of this claim", body)
    else:
        body()


def _evidence(out: _Out, rec: dict, report_name: str, skip_notes: set = frozenset(),
              said: dict | None = None) -> None:
    """``said``: long notes already rendered under an earlier claim (text -> (anchor, title)):
    a note is said once, and a later claim that records it again points to it."""
    items = [i for i in rec["evidence"] if not (i["kind"] == "note" and i["text"] in skip_notes)]
    numbers = [i for i in items if i["kind"] == "number"]
    if numbers:
        out.blank()
        _numbers(out, numbers)
    paired = False
    for k, item in enumerate(items):
        kind = item["kind"]
        if paired:  # the "after" half of a pair, rendered with its "before"
            paired = False
            continue
        if kind == "note":
            out.blank()
            first = said.get(item["text"]) if said is not None else None
            if first is not None:
                words = " ".join(item["text"].split()[:8])
                out.add(f"*The note “{prose(words)} …” under [{_link_text(first[1])}](#{first[0]}) "
                        "holds for this claim too.*")
                continue
            out.text(prose(item["text"]))
            if said is not None and len(item["text"]) >= SAID_ONCE_CHARS:
                said[item["text"]] = (anchor(rec["nodeid"]), rec.get("title") or default_title(rec["nodeid"]))
        elif kind == "excerpt":
            out.blank()
            after = items[k + 1] if k + 1 < len(items) else None
            if after is not None and _before_after(item, after):
                paired = True
                _excerpt_pair(out, item, after)
                continue
            lines = _fence(item["text"], item.get("lang"))
            if _folds(item):
                _folded(out, f"{item['title']} ({len(lines) - 2} lines)", lambda: [out.add(ln) for ln in lines])
            else:
                _excerpt_in_view(out, item["title"], lines)
        elif kind == "table":
            out.blank()
            _titled_table(out, item["title"], item["header"], item["rows"], item.get("tolerances") or {},
                          item.get("fold"))
        elif kind == "figure":
            rel = f"{assets_dir_name(report_name)}/{asset_name(rec['nodeid'], item['title'], item.get('suffix', ''))}"
            out.blank()
            out.add(f"![{item['title']}]({rel})")
            out.add(f"*{item['title']}*")
            if item.get("header"):
                out.blank()
                _titled_table(out, f"data plotted in “{item['title']}”", item["header"], item["rows"],
                              item.get("tolerances") or {})


def _folds(excerpt: dict) -> bool:
    """An excerpt folds when its claim says so, or, by default, when it is long."""
    fold = excerpt.get("fold")
    return fold if fold is not None else excerpt["text"].rstrip("\n").count("\n") + 1 > EXCERPT_FOLD


def _before_after(a: dict, b: dict) -> bool:
    """Two excerpts recorded one after the other as 'before NAME ...' and 'after NAME ...': the
    two sides of one change, which a reader compares, so they fold (or stay) together."""
    if b["kind"] != "excerpt":
        return False
    wa, wb = a["title"].split(" ", 2), b["title"].split(" ", 2)
    return len(wa) > 1 and len(wb) > 1 and wa[0] == "before" and wb[0] == "after" and wa[1] == wb[1]


def _excerpt_in_view(out: _Out, title: str, lines: list[str]) -> None:
    out.add(f"**{title}**")
    out.blank()
    for ln in lines:
        out.add(ln)


def _excerpt_pair(out: _Out, before: dict, after: dict) -> None:
    """One <details> for both sides when either would fold, both in view otherwise."""
    fences = [_fence(x["text"], x.get("lang")) for x in (before, after)]

    def body():
        _excerpt_in_view(out, before["title"], fences[0])
        out.blank()
        _excerpt_in_view(out, after["title"], fences[1])
    if _folds(before) or _folds(after):
        name = before["title"].split(" ", 2)[1]
        _folded(out, f"before and after {name} ({len(fences[0]) - 2} + {len(fences[1]) - 2} lines)", body)
    else:
        body()


def _reproduce(out: _Out, rec: dict, report_name: str) -> None:
    """The command that re-proves one claim, and the hashed evidence it leaves where."""
    out.add(f"Reproduce: `{reproduce_command(rec['nodeid'], report_name)}`")
    files = [i for i in rec["evidence"] if i["kind"] == "file"]
    if not files:
        return
    here = evidence_dir(rec["nodeid"])
    entries = []
    for item in files:
        what = "folder" if item.get("is_dir") else "file"
        where = f"`{here}/{item['where']}`" if item.get("where") else f"`{item.get('name', '')}`"
        entries.append(f"{what} **{_md_cell(item['title'])}** at {where}, sha256 `{item['sha256'][:16]}…`")
    if len(entries) == 1:
        out.add(f"leaves the evidence kept by hash: {entries[0]}.")
    elif len(entries) > TABLE_FOLD:  # a claim over many programs: its list would fill a page
        out.add(f"leaves the evidence kept by hash, {len(entries)} files and folders, listed below.")
        out.blank()
        _folded(out, f"the {len(entries)} files and folders of evidence, with their sha256",
                lambda: [out.add(f"- {e}") for e in entries])
    else:
        out.add("leaves the evidence kept by hash:")
        out.blank()
        for e in entries:
            out.add(f"- {e}")


# -- the document --------------------------------------------------------------------------

def render_lines(records: list[dict], environment: dict, config: DumprefConfig,
                 report_name: str = "writeup.md") -> list[Line]:
    """The visible write-up, line by line (the data block is added by :func:`render`)."""
    records = sorted(records, key=claim_order)
    passed = [r for r in records if r["outcome"] == "passed"]
    not_established = [r for r in records if r["outcome"] != "passed"]
    order = list(config.sections) + sorted({r["section"] for r in passed} - set(config.sections))
    sections = [(s, [r for r in passed if r["section"] == s]) for s in order]
    sections = [(s, rs) for s, rs in sections if rs]

    # Heading ids in document order (GitHub numbers repeated slugs in that order).
    seen: dict[str, int] = {}
    github_slug(config.title, seen)
    findings_slug = github_slug("Findings", seen) if sections else None
    github_slug("Contents", seen)
    env_slug = github_slug("Environment", seen)
    section_slugs = {}
    for s, rs in sections:
        section_slugs[s] = github_slug(config.section_title(s), seen)
        for r in rs:
            github_slug(r.get("title") or default_title(r["nodeid"]), seen)
    missing_slug = github_slug("Not established", seen)

    out = _Out()
    out.where = "title"
    out.add(f"# {config.title}")
    out.blank()
    if config.intro:
        out.where = "introduction"
        out.text(config.intro.strip())
        out.blank()
    out.where = "title"
    out.add(f"{_count(len(passed), 'claim')} established, {len(not_established)} not established. Every "
            "number below was computed by the test named under it, in the run that wrote this "
            "file; `--dumpref-check` re-runs them and compares.")
    out.blank()
    if any(_judged(i) for r in passed for i in r["evidence"]):
        out.add(config.measured.sentence() + " A tolerance written ±N% beside a number lets a "
                "re-run differ from it by N % of its value.")
        out.blank()

    if sections:
        _findings(out, sections, config)

    out.where = "contents"
    out.add("## Contents")
    out.blank()
    if findings_slug:
        out.add(f"- [Findings](#{findings_slug})")
    out.add(f"- [Environment](#{env_slug})")
    for s, rs in sections:
        out.add(f"- [{config.section_title(s)}](#{section_slugs[s]})")
        for r in rs:
            out.add(f"  - [{_link_text(r.get('title') or default_title(r['nodeid']))}](#{anchor(r['nodeid'])})")
    out.add(f"- [Not established](#{missing_slug})")
    out.blank()

    _environment(out, records, environment, config, report_name)

    for s, rs in sections:
        out.where, out.claim = f"section {s!r}", None
        out.add(f"## {config.section_title(s)}")
        out.blank()
        if config.section_intros.get(s):
            out.text(config.section_intros[s].strip())
            out.blank()
        rows = {r["nodeid"]: _provenance_rows(r) for r in rs}
        common = set.intersection(*(set(_row_key(x) for x in v) for v in rows.values()))
        head = [x for x in rows[rs[0]["nodeid"]] if _row_key(x) in common]
        if head:
            _provenance_table(out, "of every claim in this study", head)
            out.blank()
        # a note every claim of the study records (what a shared fixture says) is said once, here
        shared = [i["text"] for i in rs[0]["evidence"] if i["kind"] == "note" and len(rs) > 1
                  and all(any(j["kind"] == "note" and j["text"] == i["text"] for j in r["evidence"]) for r in rs)]
        for text in shared:
            out.text(prose(text))
            out.blank()
        said: dict = {}
        for r in rs:
            out.claim, out.where = r["nodeid"], "claim"
            out.add(f'<a id="{anchor(r["nodeid"])}"></a>')
            out.add(f"### {prose(r.get('title') or default_title(r['nodeid']))}")
            out.blank()
            out.text(prose(r["text"]))
            own = [x for x in rows[r["nodeid"]] if _row_key(x) not in common]
            if own:  # one line: what differs from the study's provenance
                out.blank()
                pieces: list = ["*Provenance of this claim, where it differs from the study's:* "]
                for k, (name, value) in enumerate(own):
                    pieces += (["; "] if k else []) + [f"**{name}** ", value]
                out.add(*pieces)
            _evidence(out, r, report_name, skip_notes=set(shared), said=said)
            out.blank()
            _reproduce(out, r, report_name)
            out.blank()
        out.claim = None

    out.where = "not established"
    out.add("## Not established")
    out.blank()
    if not not_established:
        out.add("Every claim in the run passed.")
        out.blank()
    for r in not_established:
        out.claim = r["nodeid"]
        reason = (r.get("reason") or "").strip().splitlines()
        tail = [": ", Var(_md_cell(reason[0][:300]), "varies", what="failure message")] if reason else []
        out.add(f"- **{r['outcome']}**: {_md_cell(r['text'])} (`{r['nodeid']}`)", *tail)
    out.claim = None
    if not_established:
        out.blank()
    return _tight(out.lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _judged(item: dict) -> bool:
    """Whether an item holds a value the check judges by noise, bound or tolerance."""
    if item["kind"] == "number":
        return any(item.get(k) is not None for k in ("noise", "bound", "effective_tolerance"))
    cells = [c for r in item.get("rows") or [] for c in r]
    return bool(item.get("tolerances")) or any(isinstance(c, dict) for c in cells)


def _tight(lines: list[Line]) -> list[Line]:
    """Drop the blank lines GitHub does not need: between two folded blocks (a blank line after
    </details> is needed before Markdown, not before another <details>)."""
    out = []
    for i, ln in enumerate(lines):
        if ln.text == "" and 0 < i < len(lines) - 1:
            prev, nxt = lines[i - 1].text, lines[i + 1].text
            if prev == "</details>" and nxt.startswith("<details>"):
                continue
        out.append(ln)
    return out


def _link_text(title: str) -> str:
    return prose(title).replace("[", "\\[").replace("]", "\\]")


def _provenance_table(out: _Out, title: str, rows) -> None:
    # the title heads the wide value column: in the narrow name column it wrapped word by word
    out.add(f"| provenance | {title} |")
    out.add("|---|---|")
    for name, value in rows:
        out.add(f"| {name} | ", value, " |")


def _environment(out: _Out, records, environment: dict, config: DumprefConfig, report_name: str) -> None:
    out.where, out.claim = "environment", None
    out.add("## Environment")
    out.blank()
    out.add("| environment | of the run that wrote this file |")
    out.add("|---|---|")
    for k in ("chip", "platform", "jax", "jaxlib", "numpy", "python", "os", "cpu_count", "caches", "XLA_FLAGS",
              "commit", "dirty"):
        text = _md_cell(environment.get(k)) or "(not set)"  # an empty cell read as a rendering fault
        rule = "machine" if k in MACHINE else "varies" if k in RUN_TO_RUN else None
        out.add(f"| {k} | ", Var(text, rule, what=k) if rule else text, " |")
    out.blank()
    setup = ""
    if config.setup:
        setup = f"Set up once: `{config.setup}`. "
        # the commands below name no interpreter path: they run in the environment the set-up
        # made, which a new shell has to activate again
        activate = re.search(r"(?:^|&&|;)\s*((?:\.|source)\s+\S*activate)\s*(?:&&|;|$)", config.setup)
        setup += ("Every command below runs in that environment: in a new shell, activate it "
                  f"again first (`{activate.group(1)}`). " if activate else
                  "Every command below runs in the environment that set-up made, activated. ")
    out.add(f"{setup}From the project's root folder, re-prove this whole file with "
            f"`{reprove_command(records, config, report_name, 'dumpref-check')}`: it renders the "
            "file afresh and compares it line by line, each number as the column beside it says "
            "(exact, a tolerance, a bound, or measured and judged by its noise). Under each claim, `Reproduce:` re-runs that claim alone against this file, "
            "prints each of its numbers beside the write-up's, and leaves the claim's evidence "
            f"(dump folders) in a folder of its own under `{EVIDENCE_DIR}/`, at the paths shown "
            "with its files. Re-render this file with "
            f"`{reprove_command(records, config, report_name, 'dumpref-report')}`.")
    out.blank()


def render(records: list[dict], environment: dict, config: DumprefConfig,
           report_name: str = "writeup.md") -> str:
    """The whole write-up.  ``records`` are finalized ClaimRecord.to_json() dicts."""
    lines = [ln.text for ln in render_lines(records, environment, config, report_name)]
    lines += [DATA_BEGIN, _data_block(records, environment), DATA_END, ""]
    return "\n".join(lines)


# A data block larger than this keeps each claim's record compressed (zlib, then base64), so
# that the file stays nearer what GitHub renders (its Markdown API refuses files over 400 KB);
# a smaller one stays plain JSON.  (This repository's write-up is over it even so: 318 KB of
# text a reader sees and a 146 KB compressed data block.)
DATA_PLAIN_LIMIT = 64 * 1024


def _data_block(records: list[dict], environment: dict) -> str:
    """JSON, one claim a line (a re-render's diff shows which claims changed)."""
    def dump(x) -> str:
        # "--" may not appear inside an HTML comment; JSON escapes keep the text readable back.
        return json.dumps(x, sort_keys=True, ensure_ascii=False).replace("--", "-\\u002d")
    claims = sorted(records, key=claim_order)
    entries = [(dump(r["nodeid"]), dump(stored(r, environment))) for r in claims]
    if sum(len(v) for _, v in entries) > DATA_PLAIN_LIMIT:
        entries = [(dump(r["nodeid"]), dump(_pack(stored(r, environment)))) for r in claims]
    body = ",\n".join(f"{k}: {v}" for k, v in entries)
    return (f'{{"format": {FORMAT_VERSION}, "environment": {dump(environment)},\n"claims": {{\n'
            + body + ("\n" if body else "") + "}}")


def _pack(record: dict) -> str:
    raw = json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return "zlib:" + base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def _unpack(path: Path, nodeid: str, entry):
    if not (isinstance(entry, str) and entry.startswith("zlib:")):
        return entry
    try:
        return json.loads(zlib.decompress(base64.b64decode(entry[5:], validate=True)).decode("utf-8"))
    except (ValueError, zlib.error, UnicodeDecodeError) as e:
        raise WriteupError(f"{path}: claim {nodeid!r} in the data block cannot be unpacked ({e})") from None


def stored(record: dict, environment: dict) -> dict:
    """A record as the data block keeps it: no paths of this machine's temporary folders, and
    its environment only where it is not the file's (a claim kept from an earlier run)."""
    rec = dict(record)
    if rec.get("environment") == environment:
        del rec["environment"]
    rec["evidence"] = [{k: v for k, v in i.items() if not (i["kind"] == "figure" and k == "path")}
                       for i in record["evidence"]]
    return rec


# -- reading back --------------------------------------------------------------------------

def readable_body(text: str) -> list[str]:
    """The lines a reader scrolls through: those before the data block and outside every
    <details> block (a folded block's own <details> and </details> lines included).  Its length
    is how long the document reads; folded evidence is one click away and not counted."""
    out, depth = [], 0
    for ln in text.split("\n"):
        if ln.startswith(DATA_BEGIN):
            break
        depth += ln.count("<details")
        if depth == 0:
            out.append(ln)
        depth -= ln.count("</details>")
    return out


def split(text: str) -> tuple[list[str], str | None]:
    """The visible lines of a write-up, and its data block's JSON text (None: no block, "":
    a block that is not closed)."""
    start = text.rfind("\n" + DATA_BEGIN) + 1 if not text.startswith(DATA_BEGIN) else 0
    if start == 0 and not text.startswith(DATA_BEGIN):
        return text.split("\n"), None
    visible = text[:start - 1].split("\n") if start else []
    end = text.find(DATA_END, start + len(DATA_BEGIN))
    if end < 0:
        return visible, ""
    return visible, text[start + len(DATA_BEGIN):end]


def read(path: Path) -> dict:
    """A write-up: {"environment", "claims": {nodeid: record}, "lines": visible lines, "trailer"}."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WriteupError(f"{path}: no such write-up (render one with --dumpref-report={path})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WriteupError(f"{path}: cannot read the write-up: {e}") from None
    lines, block = split(text)
    if block is None:
        raise WriteupError(f"{path}: no '{DATA_BEGIN}' block: not a write-up made by --dumpref-report")
    if block == "":
        raise WriteupError(f"{path}: the data block is not closed (truncated write-up?)")
    try:
        data = json.loads(block)
    except json.JSONDecodeError as e:
        raise WriteupError(f"{path}: the data block is not valid JSON ({e})") from None
    if isinstance(data, dict) and data.get("format") == 1:
        raise WriteupError(f"{path}: a write-up of format 1 (an older pytest-dumpref), whose data block "
                           "holds too little to check every line: render it again whole with "
                           f"--dumpref-report={path}")
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(data.get("claims"), dict) \
            or not isinstance(data.get("environment"), dict):
        raise WriteupError(f"{path}: the data block is not a dumpref write-up of format {FORMAT_VERSION}")
    for nodeid in list(data["claims"]):
        claim = data["claims"][nodeid] = _unpack(path, nodeid, data["claims"][nodeid])
        if isinstance(claim, dict):
            claim.setdefault("environment", data["environment"])
        _check_claim_entry(path, nodeid, claim)
    data["lines"] = lines
    data["trailer"] = text[text.rfind(DATA_END) + len(DATA_END):]
    return data


def _check_claim_entry(path: Path, nodeid: str, claim) -> None:
    """One claim of the data block has the shape the renderer reads: an edited or damaged entry
    is named here, not met as a KeyError in the middle of the check."""
    def bad(what: str) -> WriteupError:
        return WriteupError(f"{path}: claim {nodeid!r} in the data block {what}")
    if not isinstance(claim, dict):
        raise bad("is not an object")
    for key in ("nodeid", "text", "outcome", "section"):
        if not isinstance(claim.get(key), str):
            raise bad(f"has no {key!r} string")
    if claim["nodeid"] != nodeid:
        raise bad(f"names another node id, {claim['nodeid']!r}")
    if not isinstance(claim.get("evidence"), list) or not all(
            isinstance(i, dict) and isinstance(i.get("kind"), str) for i in claim["evidence"]):
        raise bad("has no 'evidence' list of items")
    for key in ("observed", "environment"):
        if not isinstance(claim.get(key), dict):
            raise bad(f"has no {key!r} object")
    required = {"number": ("name", "value"), "excerpt": ("title", "text"), "table": ("title", "header", "rows"),
                "file": ("title", "sha256"), "figure": ("title", "sha256"), "note": ("text",)}
    for item in claim["evidence"]:
        kind = item["kind"]
        if kind not in required:
            raise bad(f"has evidence of unknown kind {kind!r}")
        missing = [k for k in required[kind] if k not in item]
        if missing:
            raise bad(f"has {kind} evidence without {', '.join(map(repr, missing))}")
        if kind == "number":
            if not isinstance(item.get("value"), (int, float)):  # bools too
                raise bad(f"has number {item['name']!r} without a numeric 'value'")
            tol = item.get("effective_tolerance")
            if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float))):
                raise bad(f"has number {item['name']!r} whose tolerance is not a number")
        if kind in ("table", "figure") and not (
                isinstance(item.get("header", []), list) and isinstance(item.get("rows", []), list)
                and all(isinstance(r, list) and len(r) == len(item.get("header", [])) for r in item.get("rows", []))):
            raise bad(f"has {kind} {item['title']!r} whose rows do not match its header")
