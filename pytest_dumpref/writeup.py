"""Claim records -> a GitHub-flavoured Markdown write-up and its data file, and back.

The Markdown is for people; its data file beside it (``writeup.dumpref.json``: JSON, one line
per claim, named with its sha256 on the Markdown's last line) holds every claim record whole, so
that ``--dumpref-check`` can render the file again from it and from a fresh run, and so that a
run of some claims can update them in place.  Rendering gives :class:`Line` objects (see
:mod:`pytest_dumpref.markdown`): the text of a line and, for the parts of it that may
legitimately differ between runs, :class:`Slot` spans saying how they may differ (a measured
value within its tolerance, a field of the machine, a field declared in :data:`RUN_TO_RUN`).
Everything else on a line must come out identical.  Each item of evidence is rendered by its
kind (:mod:`pytest_dumpref.kinds`).  Output is deterministic: records in file order, JSON keys
sorted, nothing time-dependent.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
from pathlib import Path
from typing import Any

from . import kinds
from .claims import FINDING_FIELD
from .config import DumprefConfig
from .kinds import NUMBER, RenderContext, cell_text
from .markdown import (EVIDENCE_DIR, Line, Out, Slot, Var, anchor, asset_name, assets_dir_name, bound_text,
                       evidence_dir, folded, format_number, link_text, measured_text, noise_text, percent, prose)

# the names other modules (and projects) use from here; they live in markdown and kinds now
__all__ = ["Line", "Slot", "Var", "anchor", "asset_name", "assets_dir_name", "bound_text", "evidence_dir",
           "format_number", "measured_text", "noise_text", "percent", "prose", "EVIDENCE_DIR",
           "render", "render_lines", "read", "readable_body", "WriteupError", "RUN_TO_RUN"]

# The write-up's data (every claim's record whole) is a JSON file beside it, named on the
# Markdown's last line: ``<!-- dumpref-data writeup.dumpref.json sha256=... -->``.  Up to
# format 2 it was embedded in that comment instead (GitHub refuses Markdown over 400 KB, and
# this repository's data alone was 423 KB of JSON); such a file is still read and checked.
DATA_BEGIN = "<!-- dumpref-data"
DATA_END = "-->"
DATA_SUFFIX = ".dumpref.json"
FORMAT_VERSION = 3
EMBEDDED_FORMAT = 2
_DATA_LINE = re.compile(r"<!-- dumpref-data (?P<name>[^\s/\\]+) sha256=(?P<sha>[0-9a-f]{64}) -->")

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


def environment_fields(config: DumprefConfig) -> list[tuple[str, str, int]]:
    """The environment table's rows, (name, rule, rank), in the order of their rank: the core's
    and those of the extensions (pytest_dumpref.hookspec).  A row's rule "machine" marks a fact
    of the machine a run is made on: a stranger re-proves on their own machine, so a difference
    there is reported side by side, before any number, and is not a failure."""
    return sorted(config.environment_fields, key=lambda f: f[2])


def machine_fields(config: DumprefConfig) -> tuple[str, ...]:
    return tuple(name for name, rule, _ in environment_fields(config) if rule == "machine")


class WriteupError(ValueError):
    """A write-up that cannot be read back (missing, no data block, bad JSON)."""


# -- names and commands --------------------------------------------------------------------

def github_slug(text: str, seen: dict[str, int]) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens, a
    repeated slug suffixed -1, -2, ... in document order."""
    plain = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", text)  # Markdown emphasis/code marks
    slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


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
    rows = [("chip", Var(cell_text(chip), "machine", what="chip")),
            ("backend", cell_text(", ".join(obs.get("backends", [])) or env.get("platform"))),
            ("dtype", cell_text(prov.get("dtype"))),
            ("shapes", cell_text(_shapes_text(prov.get("shapes")))),
            ("method", cell_text(prov.get("method"))),
            ]
    if "jax" in env:  # an environment the jax extension filled (pytest_dumpref.jax_fixtures)
        rows.append(("jax / jaxlib", Var(cell_text(f"{env.get('jax')} / {env.get('jaxlib')}"), "machine",
                                         what="jax / jaxlib")))
    opts = obs.get("options")
    if opts:
        rows.append(("compiler options", cell_text(", ".join(f"{k}={v}" for k, v in sorted(opts.items())))))
    if env.get("XLA_FLAGS"):
        rows.append(("XLA_FLAGS", cell_text(env["XLA_FLAGS"])))
    for k in sorted(set(obs) - {"backends", "params", "options", "chip"}):
        rows.append((k, cell_text(obs[k])))
    return rows


def _row_key(row) -> tuple:
    name, value = row
    return name, value.text if isinstance(value, Var) else value


def _findings(out: Out, sections: list, config: DumprefConfig, slugs: dict, also: list) -> None:
    """Under each section's title (linked), one line a claim with a ``finding=`` (the numbers it
    quotes, ``{name}``, shown and checked), linked to the claim; the titles of consecutive claims
    without one share a line.  Every claim and section is linked from here, so the findings are
    the write-up's contents too (a contents list under them said the same titles again, 943 px
    of the first screens); ``also``: the links to the document's other parts, one line."""
    out.where = "findings"
    out.add("## Findings")
    out.blank()
    for s, rs in sections:
        if len(sections) > 1:
            out.add(f"**[{link_text(config.section_title(s))}](#{slugs[s]})**")
            out.blank()
        # consecutive claims without a finding share one line of links (a run of ten
        # "Rank N" titles took ten lines of the first screen and said nothing more)
        bare: list[str] = []

        def flush() -> None:
            if bare:
                out.claim = None
                out.add("- " + " · ".join(bare))
                bare.clear()
        for r in rs:
            title = r.get("title") or default_title(r["nodeid"])
            link = f"[{link_text(title)}](#{anchor(r['nodeid'])})"
            if not r.get("finding"):
                bare.append(link)
                continue
            flush()
            out.claim = r["nodeid"]
            pieces: list = [f"- {link}: "]
            numbers = {i["name"]: i for i in r["evidence"] if i["kind"] == NUMBER.name}
            pos = 0
            for m in FINDING_FIELD.finditer(r["finding"]):
                pieces.append(prose(r["finding"][pos:m.start()]))
                pieces.append(NUMBER.piece(numbers[m.group(1)], f"finding's number {m.group(1)!r}")[0])
                pos = m.end()
            pieces.append(prose(r["finding"][pos:]))
            out.add(*pieces)
        flush()
        out.claim = None
        out.blank()
    out.add("Also: " + " · ".join(also))
    out.blank()


def _evidence(out: Out, rec: dict, report_name: str, skip_notes: frozenset | set = frozenset(),
              said: dict | None = None) -> None:
    """A claim's evidence, each item rendered by its kind: first each kind's head (the numbers
    table), then the items in the order they were recorded.  ``skip_notes``: texts said once at
    the head of the study; ``said``: long notes already rendered under an earlier claim (text ->
    (anchor, title)), which a later claim that records them again points to."""
    items = [i for i in rec["evidence"] if kinds.lookup(i["kind"], rec["nodeid"]).study_text(i) not in skip_notes]
    ctx = RenderContext(rec, items, report_name, anchor(rec["nodeid"]),
                        rec.get("title") or default_title(rec["nodeid"]), said)
    for kind, of_kind in _by_kind(items):
        kind.render_head(out, of_kind, ctx)
    k = 0
    while k < len(items):
        k += max(1, kinds.lookup(items[k]["kind"], rec["nodeid"]).render(out, ctx, k))


def _by_kind(items: list[dict]) -> list[tuple[kinds.Kind, list[dict]]]:
    """The kinds that ``items`` are of, in the order they are registered, each with its items."""
    return [(kind, of_kind) for kind in kinds.KINDS.values()
            if (of_kind := [i for i in items if i["kind"] == kind.name])]


def _reproduce(out: Out, rec: dict, report_name: str) -> None:
    """The command that re-proves one claim, and what its kinds say under it (the hashed evidence
    it leaves where)."""
    out.add(f"Reproduce: `{reproduce_command(rec['nodeid'], report_name)}`")
    ctx = RenderContext(rec, rec["evidence"], report_name, anchor(rec["nodeid"]),
                        rec.get("title") or default_title(rec["nodeid"]))
    for kind, of_kind in _by_kind(rec["evidence"]):
        kind.render_tail(out, of_kind, ctx)


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
    if sections:
        github_slug("Findings", seen)
    env_slug = github_slug("Environment", seen)
    section_slugs = {}
    for s, rs in sections:
        section_slugs[s] = github_slug(config.section_title(s), seen)
        for r in rs:
            github_slug(r.get("title") or default_title(r["nodeid"]), seen)
    missing_slug = github_slug("Not established", seen)

    out = Out()
    out.where = "title"
    out.add(f"# {config.title}")
    out.blank()
    out.add(f"{_count(len(passed), 'claim')} established, {len(not_established)} not established. Every "
            "number below was computed by the test named under it, in the run that wrote this "
            "file; `--dumpref-check` re-runs them and compares.")
    out.blank()
    # the findings come first, in the reader's first screen; the introduction and the rule of
    # the check follow them
    also = [f"[Environment](#{env_slug})", f"[Not established](#{missing_slug})"]
    if sections:
        _findings(out, sections, config, section_slugs, also)
    if config.intro:
        out.where = "introduction"
        out.text(config.intro.strip())
        out.blank()
    out.where = "title"
    if any(_judged(i, r["nodeid"]) for r in passed for i in r["evidence"]):
        out.add(config.measured.sentence() + " A tolerance written ±N% beside a number lets a "
                "re-run differ from it by N % of its value.")
        out.blank()

    if not sections:  # no findings to link the document's parts from
        out.where = "contents"
        out.add("Contents: " + " · ".join(also))
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
            _provenance_table(out, f"of every claim in this {config.section_word}", head)
            out.blank()
        # a note every claim of the study records (what a shared fixture says) is said once, here
        shared = _said_by_all(rs)
        for text in shared:
            kinds.note_text(out, text)
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
                pieces: list = [f"*Provenance of this claim, where it differs from the {config.section_word}'s:* "]
                for k, (name, value) in enumerate(own):
                    pieces += (["; "] if k else []) + [f"**{name}** ", value]
                out.add(*pieces)
            start = len(out.lines)
            _evidence(out, r, report_name, skip_notes=set(shared), said=said)
            out.blank()
            reproduce_at = len(out.lines)
            _reproduce(out, r, report_name)
            out.blank()
            _fold_the_rest(out, start, reproduce_at)
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
        tail = [": ", Var(cell_text(reason[0][:300]), "varies", what="failure message")] if reason else []
        out.add(f"- **{r['outcome']}**: {cell_text(r['text'])} (`{r['nodeid']}`)", *tail)
    out.claim = None
    if not_established:
        out.blank()
    return _tight(out.lines)


# what the gathered fold's summary calls what it holds (markdown.folded's ``holds``)
_HOLDS = {"numbers": "all {} numbers", "table": "{} table", "excerpt": "{} excerpt"}


def _fold_the_rest(out: Out, start: int, tail: int) -> None:
    """One claim's folded evidence (its <details> blocks of numbers, tables and excerpts, from
    line ``start``) and its Reproduce lines (from ``tail``) gathered at the claim's end under one
    <details>: what stays in view is the claim's sentence, provenance, numbers in view, notes
    (a long one folded in its place) and figures.  Each fold took a line of its own (121 lines
    in this repository's write-up, and 28 Reproduce paragraphs of 3-4 lines each: 9,400 of its
    32,700 px); gathered, a claim takes one."""
    body: list[list[Line]] = []      # runs of lines: a <details> block, or one other line
    depth = 0
    for ln in out.lines[start:tail]:
        opens, closes = ln.text.startswith("<details>"), ln.text == "</details>"
        if depth == 0:
            body.append([])
        body[-1].append(ln)
        depth += opens - closes
    reproduce = out.lines[tail:]
    del out.lines[start:]
    counts: dict[str, int] = {}
    gathered: list[list[Line]] = []
    for run in body:
        if run[0].holds is None or run[0].holds[0] not in _HOLDS:  # text, or a fold of a note
            if run[0].text or (out.lines and out.lines[-1].text):  # one blank where a fold was
                out.lines.extend(run)
            continue
        gathered.append(run)
        what, n = run[0].holds
        counts[what] = counts.get(what, 0) + n
    parts = [_HOLDS[what].format(n) + ("s" if n != 1 and what != "numbers" else "")
             for what, n in counts.items()]
    if out.lines and out.lines[-1].text:
        out.blank()
    out.add("<details><summary>", "; ".join(parts + ["how to reproduce this claim"]), "</summary>")
    out.blank()
    for run in gathered:
        out.lines.extend(run)
        out.blank()
    out.lines.extend(ln for ln in reproduce if ln.text or out.lines[-1].text)
    if out.lines[-1].text:
        out.blank()
    out.add("</details>")
    out.blank()


def _study_texts(rec: dict) -> list[tuple[str, str]]:
    return [(i["kind"], t) for i in rec["evidence"]
            if (t := kinds.lookup(i["kind"], rec["nodeid"]).study_text(i)) is not None]


def _said_by_all(rs: list[dict]) -> list[str]:
    """The texts (notes) every claim of a study records, in the first claim's order."""
    if len(rs) < 2:
        return []
    others = [set(_study_texts(r)) for r in rs[1:]]
    return [t for kt in _study_texts(rs[0]) if all(kt in o for o in others) for t in [kt[1]]]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _judged(item: dict, nodeid: str) -> bool:
    """Whether an item holds a value the check judges by noise, bound or tolerance."""
    return kinds.lookup(item["kind"], nodeid).judged(item)


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


def _provenance_table(out: Out, title: str, rows) -> None:
    # the title heads the wide value column: in the narrow name column it wrapped word by word
    out.add(f"| provenance | {title} |")
    out.add("|---|---|")
    for name, value in rows:
        out.add(f"| {name} | ", value, " |")


def _environment(out: Out, records, environment: dict, config: DumprefConfig, report_name: str) -> None:
    out.where, out.claim = "environment", None
    out.add("## Environment")
    out.blank()
    fields = environment_fields(config)

    def table() -> None:
        out.add("| environment | of the run that wrote this file |")
        out.add("|---|---|")
        for k, rule, _ in fields:
            text = cell_text(environment.get(k)) or "(not set)"  # an empty cell read as a rendering fault
            out.add(f"| {k} | ", Var(text, rule, what=k) if rule else text, " |")
    # folded: each section's provenance table names the chip and what else its claims rest on
    folded(out, f"the environment of the run that wrote this file: {fields[0][0]}, "
           f"{fields[1][0]} and {len(fields) - 2} more rows" if len(fields) > 2 else
           "the environment of the run that wrote this file", table)
    out.blank()
    _chips(out, records, environment)
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
            f"{f'({config.evidence_folders}) ' if config.evidence_folders else ''}in a folder of its own "
            f"under `{EVIDENCE_DIR}/`, at the paths shown "
            "with its files. Re-render this file with "
            f"`{reprove_command(records, config, report_name, 'dumpref-report')}`.")
    out.blank()


def _chips(out: Out, records, environment: dict) -> None:
    """Each chip the established claims' evidence came from, with how many claims: the run's own
    machine, a device of its own, and chips whose evidence was recorded there and replayed here
    (a claim marked platform(name)).  The run's own chip is a fact of the machine."""
    by_chip: dict[str, int] = {}
    for r in records:
        if r.get("outcome") == "passed":
            chip = (r.get("observed") or {}).get("chip") or environment.get("chip")
            if chip:
                by_chip[chip] = by_chip.get(chip, 0) + 1
    if len(by_chip) < 2:
        return
    out.add("The chips the claims' evidence came from (a claim's provenance names its own; evidence "
            "recorded on a chip this run did not have was replayed from its recording, as the claim says):")
    out.blank()
    out.add("| chip | claims |")
    out.add("|---|---|")
    for chip, n in sorted(by_chip.items(), key=lambda kv: (-kv[1], kv[0])):
        cell = Var(chip, "machine", what="chip") if chip == environment.get("chip") else chip
        out.add("| ", cell, f" | {n} |")
    out.blank()


def data_name(report_name: str) -> str:
    """The file beside the write-up that holds its data: ``writeup.md`` -> ``writeup.dumpref.json``."""
    return Path(report_name).stem + DATA_SUFFIX


def render_files(records: list[dict], environment: dict, config: DumprefConfig,
                 report_name: str = "writeup.md") -> tuple[str, str]:
    """The write-up's Markdown and its data file's text.  The Markdown ends on one comment line
    naming the data file and its sha256, so that a write-up and data of different runs (one
    committed without the other, a write interrupted between the two) are told apart."""
    data = _data_text(records, environment)
    digest = data_digest(json.loads(data))
    lines = [ln.text for ln in render_lines(records, environment, config, report_name)]
    lines += [f"{DATA_BEGIN} {data_name(Path(report_name).name)} sha256={digest} {DATA_END}", ""]
    return "\n".join(lines), data


def render(records: list[dict], environment: dict, config: DumprefConfig,
           report_name: str = "writeup.md") -> str:
    """The write-up's Markdown (its data: :func:`render_files`).  ``records`` are finalized
    ClaimRecord.to_json() dicts."""
    return render_files(records, environment, config, report_name)[0]


def _data_text(records: list[dict], environment: dict) -> str:
    """JSON, one claim a line (a re-render's diff shows which claims changed)."""
    def dump(x) -> str:
        return json.dumps(x, sort_keys=True, ensure_ascii=False)
    claims = sorted(records, key=claim_order)
    body = ",\n".join(f"{dump(r['nodeid'])}: {dump(stored(r, environment))}" for r in claims)
    return (f'{{"format": {FORMAT_VERSION}, "environment": {dump(environment)},\n"claims": {{\n'
            + body + ("\n" if body else "") + "}}\n")


def _unpack(path: Path, nodeid: str, entry):
    """A claim of an embedded data block (format 2) as it was kept: above 64 KiB compressed."""
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
    rec["evidence"] = [kinds.lookup(i["kind"], record["nodeid"]).stored(dict(i)) for i in record["evidence"]]
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


def data_digest(data: dict) -> str:
    """The sha256 the Markdown names its data by: of the data's JSON in one canonical spelling,
    so that what a checkout does to a text file (line endings) does not part the two files, and
    any change of a value does."""
    canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def read(path: Path) -> dict:
    """A write-up and its data: {"environment", "claims": {nodeid: record}, "lines": visible
    lines, "trailer": text after the data line, "data_path": the data file (None: embedded)}."""
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
    data_path = None
    if block.startswith("\n"):   # format 2: the data embedded in the comment
        data = _parse(path, block, "the data block")
        if isinstance(data, dict) and data.get("format") == 1:
            raise WriteupError(f"{path}: a write-up of format 1 (an older pytest-dumpref), whose data block "
                               "holds too little to check every line: render it again whole with "
                               f"--dumpref-report={path}")
        _check_format(path, data, EMBEDDED_FORMAT, "the data block")
    else:
        m = _DATA_LINE.fullmatch(DATA_BEGIN + block + DATA_END)
        if m is None:
            raise WriteupError(f"{path}: its last comment, {(DATA_BEGIN + block + DATA_END)[:120]!r}, is not the "
                               f"line that names its data (`{DATA_BEGIN} NAME{DATA_SUFFIX} sha256=HEX {DATA_END}`)")
        data_path = path.parent / m["name"]
        data = _read_data(path, data_path, m["sha"])
    for nodeid in list(data["claims"]):
        claim = data["claims"][nodeid] = _unpack(path, nodeid, data["claims"][nodeid])
        if isinstance(claim, dict):
            claim.setdefault("environment", data["environment"])
        _check_claim_entry(data_path or path, nodeid, claim)
    data["lines"] = lines
    data["trailer"] = text[text.rfind(DATA_END) + len(DATA_END):]
    data["data_path"] = data_path
    return data


def _parse(path: Path, text: str, what: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise WriteupError(f"{path}: {what} is not valid JSON ({e})") from None


def _check_format(path: Path, data, version: int, what: str) -> None:
    if not isinstance(data, dict) or data.get("format") != version or not isinstance(data.get("claims"), dict) \
            or not isinstance(data.get("environment"), dict):
        raise WriteupError(f"{path}: {what} is not a dumpref write-up of format {version}")


def _read_data(path: Path, data_path: Path, sha: str) -> dict:
    """The data file the Markdown names, checked to be the one it was rendered with."""
    try:
        raw = data_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WriteupError(f"{path}: its data is in {data_path}, which does not exist: a write-up and its "
                           f"data file go together (commit, copy and move both; or render both again with "
                           f"--dumpref-report={path})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WriteupError(f"{data_path}: cannot read the data of {path}: {e}") from None
    data = _parse(data_path, raw, "the write-up's data")
    _check_format(data_path, data, FORMAT_VERSION, "the file")
    digest = data_digest(data)
    if digest != sha:
        raise WriteupError(
            f"{path} and {data_path} do not belong together: {path.name} was rendered with data of sha256 "
            f"{sha[:16]}…, and {data_path.name} holds data of sha256 {digest[:16]}… (one changed, or was "
            f"committed, without the other{_interrupted(path, data_path, sha, digest)}); render both again with "
            f"--dumpref-report={path}")
    return data


def _interrupted(path: Path, data_path: Path, sha: str, digest: str) -> str:
    """What a write interrupted between its two files left beside them (see session.write_report)."""
    found = []
    for folder in sorted(path.parent.glob(f".{path.name}.dumpref-*")):
        old, new = folder / "old-data", folder / "writeup"
        if old.is_file():
            try:
                if data_digest(json.loads(old.read_text(encoding="utf-8"))) == sha:
                    found.append(f"{old} is the data {path.name} was rendered with")
            except (OSError, ValueError):
                pass
        if new.is_file():
            m = _DATA_LINE.search(new.read_text(encoding="utf-8", errors="replace"))
            if m and m["sha"] == digest:
                found.append(f"{new} is the write-up {data_path.name} was rendered for")
    return ("; a write was interrupted between the two: " + " and ".join(found) + ", either pair may be "
            "moved into place") if found else ""


def _check_claim_entry(path: Path, nodeid: str, claim) -> None:
    """One claim of the data has the shape the renderer reads: an edited or damaged entry is
    named here, not met as a KeyError in the middle of the check."""
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
    for item in claim["evidence"]:
        kind = kinds.KINDS.get(item["kind"])
        if kind is None:
            # a project's own kind, registered by a conftest.py pytest has not imported yet:
            # rendering the claim names it if it stays unknown
            continue
        missing = [k for k in kind.required if k not in item]
        if missing:
            raise bad(f"has {kind.name} evidence without {', '.join(map(repr, missing))}")
        problem = kind.problem(item)
        if problem:
            raise bad(problem)
