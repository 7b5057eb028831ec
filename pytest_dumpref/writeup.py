"""Claim records -> a GitHub-flavoured Markdown write-up, and back.

The Markdown is for people; the data block at its end (an HTML comment holding JSON) is
for ``--dumpref-check``: every number, tolerance and hash of every claim, so the write-up
alone is enough to re-prove it.  Output is deterministic: records are sorted by node id,
JSON keys sorted, and nothing time-dependent is written except measured numbers.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .config import DumprefConfig

DATA_BEGIN = "<!-- dumpref-data"
DATA_END = "-->"
FORMAT_VERSION = 1
GENERAL_SECTION = "general"


class WriteupError(ValueError):
    """A write-up that cannot be read back (missing, no data block, bad JSON)."""


# -- numbers -------------------------------------------------------------------------------

def format_number(value, unit: str | None) -> str:
    if isinstance(value, bool):
        text = str(value)
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = f"{value:.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if unit == "B" and isinstance(value, (int, float)) and abs(value) >= 1024:
        return f"{text} B ({_binary(value)})"
    return f"{text} {unit}" if unit else text


def _binary(n: float) -> str:
    for prefix in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024:
            return f"{n:.2f} {prefix}"
    return f"{n:.2f} PiB"


# -- rendering -----------------------------------------------------------------------------

def _md_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        v = f"{v:.4g}"
    elif isinstance(v, int) and not isinstance(v, bool):
        v = f"{v:,}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list, rows: list[list]) -> list[str]:
    if not header:
        return ["(empty table)"]
    out = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def _fence(text: str, lang: str | None) -> list[str]:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return [f"{ticks}{lang or ''}", text.rstrip("\n"), ticks]


def anchor(nodeid: str) -> str:
    return "claim-" + re.sub(r"[^a-z0-9]+", "-", nodeid.lower()).strip("-")


EVIDENCE_DIR = "dumpref-evidence"


def evidence_dir(nodeid: str) -> str:
    """Where one claim's reproduction keeps its evidence: a folder of its own, because pytest
    empties --basetemp at the start of every run."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", nodeid.rsplit("::", 1)[-1]).strip("-")
    return f"{EVIDENCE_DIR}/{name}"


def reproduce_command(nodeid: str, report_name: str = "writeup.md") -> str:
    """Re-run one claim and compare it with this write-up; its evidence stays in evidence_dir."""
    return (f"python -m pytest '{nodeid}' --dumpref-check={report_name} "
            f"--basetemp={evidence_dir(nodeid)} -v")


def _shapes_text(shapes) -> str:
    if isinstance(shapes, dict):
        return ", ".join(f"{k}: {tuple(v) if isinstance(v, list) else v}" for k, v in shapes.items())
    return str(shapes)


def _provenance_rows(rec: dict) -> list[list]:
    prov = rec.get("provenance") or {}
    obs = rec.get("observed") or {}
    env = rec.get("environment") or {}
    rows = [["chip", obs.get("chip") or env.get("chip")],
            ["backend", ", ".join(obs.get("backends", [])) or env.get("platform")],
            ["dtype", prov.get("dtype")],
            ["shapes", _shapes_text(prov.get("shapes"))],
            ["method", prov.get("method")],
            ["jax / jaxlib", f"{env.get('jax')} / {env.get('jaxlib')}"]]
    opts = obs.get("options")
    if opts:
        rows.append(["compiler options", ", ".join(f"{k}={v}" for k, v in sorted(opts.items()))])
    if env.get("XLA_FLAGS"):
        rows.append(["XLA_FLAGS", env["XLA_FLAGS"]])
    for k in sorted(set(obs) - {"backends", "params", "options", "chip"}):
        rows.append([k, obs[k]])
    return rows


def _evidence_lines(rec: dict, assets: dict[str, str]) -> list[str]:
    here = evidence_dir(rec["nodeid"])
    out: list[str] = []
    numbers = [i for i in rec["evidence"] if i["kind"] == "number"]
    if numbers:
        out += ["", "| number | value | tolerance |", "|---|---|---|"]
        for n in numbers:
            tol = "exact" if n.get("effective_tolerance") is None else f"±{n['effective_tolerance']:.0%}"
            out.append(f"| {_md_cell(n['name'])} | {format_number(n['value'], n.get('unit'))} | {tol} |")
    for item in rec["evidence"]:
        kind = item["kind"]
        if kind == "note":
            out += ["", item["text"]]
        elif kind == "excerpt":
            out += ["", f"**{item['title']}**", ""] + _fence(item["text"], item.get("lang"))
        elif kind == "table":
            out += ["", f"**{item['title']}**", ""] + _md_table(item["header"], item["rows"])
        elif kind == "figure":
            rel = assets.get(item["sha256"] + item["title"], item.get("path", ""))
            out += ["", f"![{item['title']}]({rel})", f"*{item['title']}*"]
        elif kind == "file":
            what = "folder" if item.get("is_dir") else "file"
            where = f"`{here}/{item['where']}`" if item.get("where") else f"`{item.get('name', '')}`"
            out += ["", f"- {what} **{item['title']}**: {where}, sha256 `{item['sha256'][:16]}…`"]
    return out


def claim_order(record: dict) -> tuple:
    """Claims appear in the order they are written in their files (collection order); the
    node id breaks ties so that the output never depends on which xdist worker ran what."""
    return record.get("order", 0), record["nodeid"]


def render(records: list[dict], environment: dict, config: DumprefConfig,
           assets: dict[str, str] | None = None, report_name: str = "writeup.md") -> str:
    """The whole write-up.  ``records`` are ClaimRecord.to_json() dicts."""
    assets = assets or {}
    records = sorted(records, key=claim_order)
    passed = [r for r in records if r["outcome"] == "passed"]
    not_established = [r for r in records if r["outcome"] != "passed"]

    lines = [f"# {config.title}", ""]
    if config.intro:
        lines += [config.intro.strip(), ""]
    lines += [f"{len(passed)} claims established, {len(not_established)} not established. "
              "Every number below was computed by the test named under it, in the run that "
              "wrote this file; `--dumpref-check` re-runs them and compares.", ""]
    lines += ["## Environment", ""] + _md_table(
        ["", ""], [[k, environment.get(k)] for k in
                   ("chip", "platform", "jax", "jaxlib", "python", "os", "cpu_count", "XLA_FLAGS", "commit", "dirty")])
    lines += ["", "Set up once: `pip install -e '.[test]'` in a clone of the repository. Re-prove "
              f"this whole file: `python -m pytest claims/ --dumpref-check={report_name}` (every "
              "number and hash below is compared). Under each claim, `Reproduce:` re-runs that "
              "claim alone against this file: it passes only if every number of the claim "
              "reproduces, prints each number beside the write-up's, and leaves the claim's "
              f"evidence (dump folders) in a folder of its own under `{EVIDENCE_DIR}/`, at the "
              "paths shown with its files. To see a claim rendered as below, add "
              "`--dumpref-report=/tmp/claim.md` (a scratch file: re-rendering this file takes "
              f"`python -m pytest claims/ --dumpref-report={report_name}`).", ""]

    order = list(config.sections) + sorted({r["section"] for r in passed} - set(config.sections))
    for section in order:
        in_section = [r for r in passed if r["section"] == section]
        if not in_section:
            continue
        lines += [f"## {config.section_title(section)}", ""]
        if config.section_intros.get(section):
            lines += [config.section_intros[section].strip(), ""]
        for rec in in_section:
            lines += [f'<a id="{anchor(rec["nodeid"])}"></a>', f"### {rec['text']}", ""]
            lines += _md_table(["provenance", ""], _provenance_rows(rec))
            lines += _evidence_lines(rec, assets)
            lines += ["", f"Reproduce: `{reproduce_command(rec['nodeid'], report_name)}`", ""]

    lines += ["## Not established", ""]
    if not not_established:
        lines += ["Every claim in the run passed.", ""]
    for rec in not_established:
        reason = (rec.get("reason") or "").strip().splitlines()
        lines.append(f"- **{rec['outcome']}**: {rec['text']} (`{rec['nodeid']}`)"
                     + (f": {reason[0][:300]}" if reason else ""))
    lines += ["", DATA_BEGIN, _data_block(records, environment), DATA_END, ""]
    return "\n".join(lines)


def _data_block(records: list[dict], environment: dict) -> str:
    data = {"format": FORMAT_VERSION, "environment": environment,
            "claims": {r["nodeid"]: {"text": r["text"], "section": r["section"], "outcome": r["outcome"],
                                     "numbers": {i["name"]: {"value": i["value"], "unit": i.get("unit"),
                                                             "tolerance": i.get("effective_tolerance")}
                                                 for i in r["evidence"] if i["kind"] == "number"},
                                     "files": {i["title"]: i["sha256"] for i in r["evidence"]
                                               if i["kind"] == "file"}}
                       for r in records}}
    # "--" may not appear inside an HTML comment; JSON escapes keep the text readable back.
    return json.dumps(data, indent=1, sort_keys=True).replace("--", "-\\u002d")


# -- reading back --------------------------------------------------------------------------

def read(path: Path) -> dict:
    """The data block of a write-up: {"environment": ..., "claims": {nodeid: ...}}."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WriteupError(f"{path}: no such write-up (render one with --dumpref-report={path})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WriteupError(f"{path}: cannot read the write-up: {e}") from None
    start = text.rfind(DATA_BEGIN)
    if start < 0:
        raise WriteupError(f"{path}: no '{DATA_BEGIN}' block: not a write-up made by --dumpref-report")
    end = text.find(DATA_END, start + len(DATA_BEGIN))
    if end < 0:
        raise WriteupError(f"{path}: the data block is not closed (truncated write-up?)")
    try:
        data = json.loads(text[start + len(DATA_BEGIN):end])
    except json.JSONDecodeError as e:
        raise WriteupError(f"{path}: the data block is not valid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(data.get("claims"), dict):
        raise WriteupError(f"{path}: the data block is not a dumpref write-up of format {FORMAT_VERSION}")
    for nodeid, claim in data["claims"].items():
        _check_claim_entry(path, nodeid, claim)
    return data


def _check_claim_entry(path: Path, nodeid: str, claim) -> None:
    """One claim of the data block has the shape --dumpref-check reads: an edited or damaged
    entry is named here, not met as a KeyError in the middle of the check."""
    def bad(what: str) -> WriteupError:
        return WriteupError(f"{path}: claim {nodeid!r} in the data block {what}")
    if not isinstance(claim, dict):
        raise bad("is not an object")
    for key in ("text", "outcome"):
        if not isinstance(claim.get(key), str):
            raise bad(f"has no {key!r} string")
    numbers, files = claim.get("numbers", {}), claim.get("files", {})
    if not isinstance(numbers, dict) or not isinstance(files, dict):
        raise bad("has 'numbers' or 'files' that are not objects")
    for name, n in numbers.items():
        if not isinstance(n, dict) or not isinstance(n.get("value"), (int, float)):  # bools too
            raise bad(f"has number {name!r} without a numeric 'value'")
        tol = n.get("tolerance")
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float))):
            raise bad(f"has number {name!r} whose 'tolerance' is not a number")
    for title, digest in files.items():
        if not isinstance(digest, str):
            raise bad(f"has file {title!r} without a sha256 string")
