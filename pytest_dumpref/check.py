"""``--dumpref-check``: does the committed write-up still reproduce, line by line?

The run is rendered afresh (:func:`writeup.render_lines`) and compared with the committed
file's visible lines: every line must come out identical, except the spans the renderer marks
as slots: a measured value must agree within its declared tolerance, a field of the machine
may differ (reported side by side, not a failure), a field of :data:`writeup.RUN_TO_RUN` may
differ (declared, and listed).  The data block is checked too: rendered on its own it must give
the file's visible lines exactly (so an edit to either side shows), and its full-precision
numbers and hashes must agree with the run's.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field

from . import kinds, measured
from .writeup import Line

MAX_REPORTED = 40
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?")


class MeasuredMismatch(str):
    """Why a line does not reproduce, when the only cause is a measured value the runs' noise
    says is incompatible: the one failure a fresh-process re-run of its claim may undo."""


@dataclass
class Difference:
    line: int                  # 1-based line of the committed file
    claim: str | None
    where: str
    message: str
    measured: bool = False     # only a measured value differs (MeasuredMismatch)

    def __str__(self) -> str:
        part = f"claim {self.claim}" if self.claim else self.where
        return f"line {self.line} ({part}): {self.message}"


def _short(text: str, n: int = 220, start: int = 0) -> str:
    """A line for a message: whole when short, else the part from ``start`` (where it first
    differs from the line it is compared with, less some context)."""
    if len(text) <= n:
        return repr(text)
    start = max(0, min(start - 60, len(text) - n))
    return repr(("…" if start else "") + text[start:start + n] + ("…" if start + n < len(text) else ""))


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# -- one line ------------------------------------------------------------------------------

def _pattern(line: Line) -> re.Pattern:
    parts, pos = [], 0
    for s in line.slots:
        parts.append(re.escape(line.text[pos:s.start]))
        parts.append("(.*?)")
        pos = s.end
    parts.append(re.escape(line.text[pos:]))
    return re.compile("".join(parts), re.DOTALL)


def _displayed_number(text: str) -> tuple[float, float] | None:
    """The first number of a displayed value and half a unit of its last digit (rounding)."""
    m = _NUMBER.search(text)
    if not m:
        return None
    s = m.group(0).replace(",", "")
    mantissa, _, exponent = s.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    try:
        value = float(s)
    except ValueError:
        return None
    slack = 0.5 * 10 ** (-decimals) * 10 ** (int(exponent) if exponent else 0)
    if value:  # the renderer shows 4 significant digits ("1" is 1.000): rounding is no wider
        slack = min(slack, 0.5 * 10 ** (math.floor(math.log10(abs(value))) - 3))
    return value, slack


def _bound(written: float, slack: float, rel: float | None, abs_: float | None) -> float:
    return slack + (rel or 0.0) * abs(written) + (abs_ or 0.0)


def _within(written: float, slack: float, now: float, rel: float | None, abs_: float | None) -> bool:
    return abs(now - written) <= _bound(written, slack, rel, abs_) * (1 + 1e-12)


def _used(written: float, slack: float, now: float, rel: float | None, abs_: float | None) -> float:
    bound = _bound(written, slack, rel, abs_)
    return min(1.0, abs(now - written) / bound) if bound else 0.0


@dataclass
class Margin:
    """How much of its tolerance a measured value that reproduced used."""
    what: str
    line: int          # 1-based line of the committed file (0 until placed)
    shown: str         # the file's value
    now: str           # this run's value
    bound: str         # the tolerance, as the failure message would state it
    used: float        # |now - written| / the bound (rounding slack included), 0..1

    def __str__(self) -> str:
        return (f"{self.what} (line {self.line}): {self.used:.0%} of {self.bound} "
                f"(the file says {self.shown}, this run {self.now})")


def _bound_text(slot) -> str:
    return f"±{slot.abs:g}" if slot.abs is not None else f"±{slot.rel:.0%}"


@dataclass
class Inconclusive:
    """A measured value whose comparison the noise of the runs could not decide."""
    what: str
    claim: str | None
    line: int
    shown: str
    now: str
    sigma: float          # sigmas x combined sigma (relative, log scale), as measured.judge gives it

    def __str__(self) -> str:
        return (f"line {self.line} (claim {self.claim}): {self.what} is inconclusive: the file says "
                f"{self.shown}, this run {self.now}; the runs' noise allows a factor of "
                f"{math.exp(self.sigma):.2f}, too wide to tell a value from its double")


def _parse_measured(shown: str) -> tuple[float, float] | None:
    """(value, noise) of a displayed ``350.5 ± 12 us``."""
    value_text, sep, noise_text = shown.partition(" ± ")
    if not sep:
        return None
    v, n = _displayed_number(value_text), _displayed_number(noise_text)
    return (v[0], n[0]) if v and n else None


def _judge_slot(slot, shown: str, now: str, rule: measured.Rule):
    """(failure or None, Verdict or None) for a slot judged by noise or by its bound."""
    if slot.rule == "bound":
        parsed = _displayed_number(shown)
        op, limit = slot.bound
        if parsed is None or _NUMBER.sub("#", shown) != _NUMBER.sub("#", now):
            return f"{slot.what} differs", None
        if not measured.within_bound(parsed[0], op, limit):
            return f"{slot.what}: the file's value is not {op} {limit}, the bound the claim asserts", None
        if not measured.within_bound(slot.value, op, limit):
            return f"{slot.what}: this run's value is not {op} {limit}, the bound the claim asserts", None
        return None, None
    parsed = _parse_measured(shown)
    if parsed is None or _NUMBER.sub("#", shown) != _NUMBER.sub("#", now):
        return f"{slot.what} differs", None
    verdict = measured.judge(parsed[0], parsed[1], slot.value, slot.noise, rule, slot.unit)
    if verdict.outcome == measured.INCOMPATIBLE:
        return MeasuredMismatch(
            f"{slot.what} does not reproduce: {shown} in the file and {now} in this run are "
            f"incompatible (they differ by a factor of {math.exp(verdict.distance):.2f}, the runs' "
            f"noise allows {math.exp(verdict.sigma):.2f})"), verdict
    return None, verdict


def compare_line(text: str, fresh: Line, margins: list | None = None,
                 inconclusive: list | None = None, rule: measured.Rule = measured.Rule()
                 ) -> tuple[str | None, list[tuple[str, str, str]]]:
    """(why ``text`` does not reproduce ``fresh``, or None; [(field, file, run)] accepted
    differences of the machine or of RUN_TO_RUN).  Each measured value that reproduced
    within its tolerance is appended to ``margins``, with how much of it the value used; each
    whose noise could not decide, to ``inconclusive``."""
    if text == fresh.text:
        return None, []
    if not fresh.slots:
        return "differs", []
    m = _pattern(fresh).fullmatch(text)
    if not m:
        return "differs", []
    accepted = []
    for slot, shown in zip(fresh.slots, m.groups()):
        now = fresh.text[slot.start:slot.end]
        if shown == now:
            continue
        if slot.rule in ("machine", "varies"):
            accepted.append((slot.what, shown, now))
            continue
        if slot.rule == "bound" or slot.noise is not None:
            why, verdict = _judge_slot(slot, shown, now, rule)
            if why:
                return why, []
            accepted.append((slot.what, shown, now))
            if verdict is not None and verdict.outcome == measured.CONTEXT:
                continue
            if verdict is not None and verdict.outcome == measured.INCONCLUSIVE and inconclusive is not None:
                inconclusive.append(Inconclusive(slot.what, fresh.claim, 0, shown, now, verdict.sigma))
            elif verdict is not None and margins is not None:
                margins.append(Margin(slot.what, 0, shown, now, f"{rule.sigmas:g} sigmas",
                                      min(1.0, verdict.used)))
            continue
        # measured: the shown value within tolerance of the run's, the rest of the text the same
        parsed = _displayed_number(shown)
        if parsed is None or _NUMBER.sub("#", shown) != _NUMBER.sub("#", now):
            return f"{slot.what} differs", []
        written, slack = parsed
        if not _within(written, slack, slot.value, slot.rel, slot.abs):
            return f"{slot.what} does not reproduce within its tolerance ({_bound_text(slot)})", []
        accepted.append((slot.what, shown, now))
        if margins is not None:
            margins.append(Margin(slot.what, 0, shown, now, _bound_text(slot),
                                  _used(written, slack, slot.value, slot.rel, slot.abs)))
    return None, accepted


# -- the file ------------------------------------------------------------------------------

@dataclass
class Result:
    differences: list[Difference]
    accepted: list[tuple[str, str, str]]      # measured values within tolerance, machine, RUN_TO_RUN
    margins: list[Margin]                     # measured values that changed, most of their tolerance used first
    inconclusive: list = field(default_factory=list)  # Inconclusive: values the noise could not decide

    def closest(self, n: int = 5) -> list[Margin]:
        """The ``n`` measured values that came nearest to failing: the ones to watch, or to
        give a wider tolerance, before a noisier machine fails them."""
        return sorted(self.margins, key=lambda m: -m.used)[:n]


def compare_lines(file_lines: list[str], fresh: list[Line], source: str = "this run",
                  rule: measured.Rule = measured.Rule(), speeds: dict | None = None) -> Result:
    """Align the file's lines with the rendered ones and name every line that does not reproduce.
    ``speeds``: node id -> :class:`measured.Speed` of the claims whose rulers agreed (their
    times are judged at that speed)."""
    diffs: list[Difference] = []
    accepted: list = []
    margins: list[Margin] = []
    inconclusive: list[Inconclusive] = []
    sm = difflib.SequenceMatcher(None, file_lines, [ln.text for ln in fresh], autojunk=False)
    last_fresh: Line | None = None
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            last_fresh = fresh[j2 - 1]
            continue
        pairs, extra, missing = _pair(file_lines, fresh, i1, i2, j1, j2)
        for i, j in pairs:
            line_margins: list[Margin] = []
            line_open: list[Inconclusive] = []
            speed = (speeds or {}).get(fresh[j].claim)
            why, acc = compare_line(file_lines[i], fresh[j], line_margins, line_open,
                                    dataclasses.replace(rule, speed=speed) if speed else rule)
            last_fresh = fresh[j]
            if why is None:
                accepted += acc
                for m in line_margins + line_open:
                    m.line = i + 1
                margins += line_margins
                inconclusive += line_open
            else:
                at = _first_difference(file_lines[i], fresh[j].text)
                diffs.append(Difference(i + 1, fresh[j].claim, fresh[j].where,
                                        f"{why}: the file says {_short(file_lines[i], start=at)}; "
                                        f"{source} produced {_short(fresh[j].text, start=at)}",
                                        isinstance(why, MeasuredMismatch)))
        for i in extra:
            ctx = fresh[min(j1, len(fresh) - 1)] if fresh else None
            ctx = last_fresh or ctx
            diffs.append(Difference(i + 1, ctx.claim if ctx else None, ctx.where if ctx else "",
                                    f"the file has a line {source} did not produce: "
                                    f"{_short(file_lines[i])}"))
        for j in missing:
            diffs.append(Difference(i1 + 1 if i1 < len(file_lines) else len(file_lines), fresh[j].claim,
                                    fresh[j].where, f"the file lacks a line {source} produced here: "
                                    f"{_short(fresh[j].text)}"))
    diffs.sort(key=lambda d: d.line)
    return Result(diffs, accepted, margins, inconclusive)


def _pair(file_lines, fresh, i1, i2, j1, j2):
    """Pair the lines of a changed block: those that match a rendered line's pattern first, in
    order, then the rest position by position."""
    if i2 - i1 == j2 - j1:
        return list(zip(range(i1, i2), range(j1, j2))), [], []
    pairs, used_i, used_j = [], set(), set()
    j = j1
    for i in range(i1, i2):
        for k in range(j, j2):
            if fresh[k].slots and _pattern(fresh[k]).fullmatch(file_lines[i]):
                pairs.append((i, k))
                used_i.add(i)
                used_j.add(k)
                j = k + 1
                break
    rest_i = [i for i in range(i1, i2) if i not in used_i]
    rest_j = [k for k in range(j1, j2) if k not in used_j]
    n = min(len(rest_i), len(rest_j))
    pairs += list(zip(rest_i[:n], rest_j[:n]))
    return sorted(pairs), rest_i[n:], rest_j[n:]


# -- the data block ------------------------------------------------------------------------

def rulers(record: dict) -> dict:
    """A claim's rulers: ``(table title, row's first cell, column) -> cell`` for every
    measured cell of its tables marked ``ruler`` (the times that measure the machine)."""
    out = {}
    for item in record.get("evidence", []):
        if item.get("kind") != "table":
            continue
        for row in item.get("rows") or []:
            for column, cell in zip(item.get("header") or [], row):
                if isinstance(cell, dict) and cell.get("ruler") and cell.get("noise") is not None:
                    out[(item.get("title"), str(row[0]), column)] = cell
    return out


def claim_speed(written: dict, record: dict,
                rule: measured.Rule = measured.Rule()) -> tuple[measured.Speed | None, str | None]:
    """The re-run's speed against the file's from the rulers both runs of one claim hold
    (:func:`measured.common_speed`), and why in words; (None, None) when the claim times no
    rulers."""
    w, n = rulers(written), rulers(record)
    both = [(w[k]["value"], w[k]["noise"], n[k]["value"], n[k]["noise"]) for k in w if k in n]
    if not both:
        return None, None
    return measured.common_speed(both, rule)


def compare_values(nodeid: str, written: dict, record: dict,
                   rule: measured.Rule = measured.Rule()) -> list[tuple[str, str]]:
    """(what, problem) for what the visible lines cannot show of one claim in both runs, each
    kind comparing its own items (numbers at full precision, files by hash; an inconclusive
    measured value is left to the visible comparison, which reports it).  ``what`` is the
    item's label, ``number 'time'``."""
    problems = []
    for name, kind in kinds.KINDS.items():
        w = [i for i in written["evidence"] if i["kind"] == name]
        if not w:
            continue
        now = [i for i in record["evidence"] if i["kind"] == name]
        problems += [(kind.label({kind.key: item} if kind.key else {}), problem)
                     for item, problem in kind.compare(w, now, rule)]
    return problems


def machine_differences(written_env: dict, env: dict, machine: tuple[str, ...]) -> list[str]:
    """The fields of the machine (in the environment table's order) on which the write-up and
    this run differ."""
    return [f"{k}: write-up {written_env.get(k)!r}, this run {env.get(k)!r}"
            for k in machine if written_env.get(k) != env.get(k)]


# -- which claims a run covers -------------------------------------------------------------

def covered_by(args: list[str]):
    """Which node ids a run over ``args`` (rootdir-relative "path" or "path::name") would
    collect, so that checking one claim against a write-up does not call the others gone."""
    def covers(nodeid: str) -> bool:
        for arg in args:
            if "::" in arg:
                if nodeid == arg or nodeid.startswith(arg + "[") or nodeid.startswith(arg + "::"):
                    return True
            else:
                path = nodeid.split("::", 1)[0]
                if arg in ("", ".") or path == arg or path.startswith(arg.rstrip("/") + "/"):
                    return True
        return False
    return covers


def missing_claims(written_claims: dict, outcomes: dict[str, str], covers=lambda nodeid: True) -> list[str]:
    """Claims the write-up established that this run did not establish (gone or skipped),
    among those the run was asked to run.  Failures are reported by the failing tests."""
    out = []
    for nodeid, w in sorted(written_claims.items()):
        if w.get("outcome") != "passed" or not covers(nodeid):
            continue
        now = outcomes.get(nodeid)
        if now is None:
            out.append(f"claim {nodeid} is established in the write-up but did not run: it is gone or was renamed")
        elif now == "skipped":
            out.append(f"claim {nodeid} is established in the write-up but was skipped in this run")
    return out
