"""One run's worth of claims: builds records, judges them, renders or checks the write-up.

The pytest hooks in ``plugin.py`` are three-liners that call into this object (the shape
syrupy uses), so the rules live here, testable and free of pytest.
"""
from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import check, kinds, measured, writeup
from .claims import ClaimRecord, Provenance
from .config import DEFAULT_SECTION, DumprefConfig
from .provenance import cpu_model_name, environment

PROVENANCE_KEYS = {"dtype", "shapes", "method", "chip"}
# how a claim's record says the check did not judge the file by its failure (plugin.py)
FINDING = "dumpref check: "
CLAIM_SIGNATURE = "claim(text, *, title=None, section=None, finding=None)"
# A check names this many measured values that came nearest their tolerance, so that a value
# drifting toward failure is seen while it still passes.
CLOSEST_REPORTED = 5


class MarkerError(ValueError):
    """A claim or provenance marker with arguments the contract does not allow."""


def parse_claim_marker(nodeid: str, args: tuple, kwargs: dict) -> tuple:
    """(sentence, section, title, finding) of a claim marker."""
    if len(args) != 1 or not isinstance(args[0], str) or not args[0].strip():
        raise MarkerError(f"{nodeid}: @pytest.mark.claim takes exactly one sentence: {CLAIM_SIGNATURE}")
    extra = set(kwargs) - {"section", "title", "finding"}
    if extra:
        raise MarkerError(f"{nodeid}: @pytest.mark.claim got unknown arguments {sorted(extra)}; it takes {CLAIM_SIGNATURE}")
    for key in ("section", "title", "finding"):
        value = kwargs.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value.strip()):
            raise MarkerError(f"{nodeid}: @pytest.mark.claim {key} must be a one-line string, got {value!r}")
    title, finding = kwargs.get("title"), kwargs.get("finding")
    return (args[0].strip(), kwargs.get("section"), title.strip() if title else None,
            finding.strip() if finding else None)


def parse_provenance_marker(nodeid: str, args: tuple, kwargs: dict) -> Provenance:
    if args:
        raise MarkerError(f"{nodeid}: @pytest.mark.provenance takes keywords only: provenance(*, dtype, shapes, method, chip=None)")
    extra = set(kwargs) - PROVENANCE_KEYS
    if extra:
        raise MarkerError(f"{nodeid}: @pytest.mark.provenance got unknown arguments {sorted(extra)}; known: {sorted(PROVENANCE_KEYS)}")
    shapes = kwargs.get("shapes")
    if shapes is not None:
        if not isinstance(shapes, dict) or not all(
                isinstance(v, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in v)
                for v in shapes.values()):
            raise MarkerError(f"{nodeid}: @pytest.mark.provenance shapes must map names to tuples of ints, "
                              f"e.g. shapes={{'x': (1024, 1024)}}; got {shapes!r}")
    dtype = kwargs.get("dtype")
    if dtype is not None and not isinstance(dtype, (str, list, tuple)) and not hasattr(dtype, "name") \
            and not hasattr(dtype, "__name__"):
        raise MarkerError(f"{nodeid}: @pytest.mark.provenance dtype must be a dtype name such as 'f32', got {dtype!r}")
    return Provenance(dtype=dtype, shapes=shapes, method=kwargs.get("method"), chip=kwargs.get("chip"))


def _relative(path: Path, rootdir: Path) -> str:
    """A path as the write-up prints it: relative to the rootdir, where its commands run."""
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return str(path)


@dataclass
class Machine:
    """What the core's extensions say about the machine (pytest_dumpref.hookspec; the plugin
    asks them): the rows they add to the environment, the chip behind a backend, the observed
    options that are temporary paths.  The defaults are the core's alone."""
    rows: Callable[[Path], dict] = lambda rootdir: {}
    chip: Callable[[str | None], str | None] = lambda backend: None
    transient_options: frozenset = frozenset()


class DumprefSession:
    def __init__(self, config: DumprefConfig, rootdir: Path, report: Path | None = None,
                 check_against: Path | None = None, machine: Machine | None = None):
        self.config = config
        self.machine_hooks = machine or Machine()
        self.rootdir = Path(rootdir)
        self.report = Path(report) if report else None
        self.existing: dict | None = None       # the write-up --dumpref-report would replace
        self.existing_error: str | None = None  # why it cannot be updated in place
        if self.report is not None:
            if self.report.is_dir():
                raise writeup.WriteupError(f"--dumpref-report={report}: is a folder; name the Markdown "
                                           f"file to write, e.g. {self.report / 'writeup.md'}")
            if self.report.exists():
                try:
                    self.existing = writeup.read(self.report)
                except writeup.WriteupError as e:
                    try:
                        text = self.report.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError):
                        text = ""
                    if writeup.DATA_BEGIN not in text:  # somebody's own file: never overwritten
                        raise writeup.WriteupError(
                            f"--dumpref-report={report}: the file exists and is not a write-up made by "
                            "--dumpref-report; it is left alone: name another file, or delete it first") from None
                    self.existing_error = str(e)
        self.check_path = Path(check_against) if check_against else None
        # Read the write-up up front: a missing or malformed one is a usage error before any test runs.
        self.written = writeup.read(self.check_path) if self.check_path else None
        self.records: dict[str, dict] = {}
        self.basetemp: Path | None = None  # set by the plugin: pytest's --basetemp of this process
        self._environment: dict | None = None
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.check_result: check.Result | None = None
        self.machine: list[str] = []
        self.reruns: list[str] = []             # what each fresh-process re-run of a check decided
        self.speed_lines: list[str] = []        # per claim with rulers: the speed its times were judged at, or why none
        # --dumpref-check: claims whose outcome this run does not judge the file by, node id ->
        # why (a measured conclusion on another machine; a claim failing as the file says it does)
        self.findings: dict[str, str] = {}

    # -- per test ---------------------------------------------------------------------
    def new_record(self, nodeid: str, claim: tuple, provenance: Provenance | None,
                   marker_names: list[str]) -> ClaimRecord:
        """``marker_names``: the test's markers, closest first (a study marker on the test beats
        one on its module)."""
        text, section, title, finding = claim
        studies = [m for m in marker_names if m in self.config.sections]
        section = section or (studies[0] if studies else None)
        if section is None:
            if self.config.sections:
                raise MarkerError(
                    f"{nodeid}: the claim names no section; give it one of the sections configured in "
                    f"{self.config.source} ({', '.join(self.config.sections)}), as a marker "
                    f"(@pytest.mark.{self.config.sections[0]}) or as claim(..., section=...)")
            section = DEFAULT_SECTION
        allowed = self.config.sections or [DEFAULT_SECTION]
        if section not in allowed:
            where = f"configured in {self.config.source}" if self.config.sections else \
                "allowed with no [tool.dumpref] sections (configure sections = [...] to add more)"
            raise MarkerError(f"{nodeid}: section {section!r} is not one of the sections {where}: {allowed}")
        return ClaimRecord(nodeid=nodeid, text=text, section=section, provenance=provenance,
                           title=title or writeup.default_title(nodeid), finding=finding)

    def judge(self, record: ClaimRecord) -> list[str]:
        """Why a claim whose assertions passed may still not stand (empty: it stands)."""
        # A fixture that ran its evidence elsewhere (a subprocess with the PJRT plugin) says
        # which chip it saw; otherwise ask JAX about the backend the evidence names.
        backends = record.evidence.observed.get("backends") or [None]
        chip = record.evidence.observed.get("chip") or self.machine_hooks.chip(backends[0]) or cpu_model_name()
        record.evidence.observed["chip"] = chip
        return [f"claim {record.nodeid} fails: {p}" for p in record.violations(chip)]

    def finalize(self, record: ClaimRecord, outcome: str, reason: str = "") -> dict:
        """The record as it travels (xdist) and is written: JSON, tolerances resolved,
        temporary paths reduced to names."""
        record.outcome, record.reason = outcome, reason
        data = record.to_json()
        data["environment"] = self.environment()
        run = kinds.Finalizing(self.config.tolerance_for, self._under_basetemp)
        data["evidence"] = [kinds.lookup(i["kind"], record.nodeid).finalize(dict(i), run)
                            for i in data["evidence"]]
        opts = data["observed"].get("options")
        if opts:  # where a dump went is a temporary folder: not provenance
            data["observed"]["options"] = {k: v for k, v in opts.items()
                                           if k not in self.machine_hooks.transient_options}
        return data

    def _under_basetemp(self, path: Path) -> str | None:
        """Where a piece of evidence lies relative to pytest's --basetemp (the same in a serial
        and an xdist run, since each worker has a basetemp of its own)."""
        if self.basetemp is None:
            return None
        try:
            return path.resolve().relative_to(Path(self.basetemp).resolve()).as_posix()
        except ValueError:
            return None

    def collect(self, data: dict) -> None:
        self.records[data["nodeid"]] = data

    # -- a check on another machine ---------------------------------------------------------
    def machine_differences(self) -> list[str]:
        """--dumpref-check: the machine fields on which the file and this run differ ([] in a
        render, or on the file's machine)."""
        if self.written is None:
            return []
        return check.machine_differences(self.written["environment"], self.environment(),
                                         writeup.machine_fields(self.config))

    def failure_not_judged(self, nodeid: str, evidence_items: list, message: str) -> str | None:
        """--dumpref-check, for a claim whose assertion failed: why that failure does not fail
        the check, or None when it does.  It does not when the file lists the claim as not
        established (the run reproduces the file), nor when the file established it on another
        machine from measured values (a number or cell with its noise): a measured conclusion
        that does not hold on this machine is a finding about this machine, reported with both
        machines' figures; the file's record stands.  A claim without measured evidence that
        fails on any machine fails the check: its evidence no longer derives."""
        if self.written is None:
            return None
        w = self.written["claims"].get(nodeid)
        if w is None:
            return None
        first = message.splitlines()[0] if message else ""
        differs = self.machine_differences()
        if w.get("outcome") != "passed":
            why = f"not established in this run, as {self.check_path} says ({first})"
        elif not _has_measured(evidence_items) or not differs:
            return None
        else:
            why = (f"its measured conclusion does not hold on this machine, which differs from "
                   f"{self.check_path}'s in {', '.join(differs)}: {first}")
        self.findings[nodeid] = why + _side_by_side(w.get("evidence", []), evidence_items)
        return why

    def _outcome_flips_on_this_machine(self) -> None:
        """A claim the file lists as not established whose measured conclusion holds on this
        (another) machine: a finding; the file's record stands."""
        differs = self.machine_differences()
        if not differs:
            return
        for nodeid, rec in self.records.items():
            w = self.written["claims"].get(nodeid) if self.written else None
            if w and w.get("outcome") != "passed" and rec.get("outcome") == "passed" \
                    and _has_measured(rec.get("evidence", [])):
                self.findings[nodeid] = (f"holds on this machine, which differs from {self.check_path}'s in "
                                         f"{', '.join(differs)}, where it was not established"
                                         + _side_by_side(w.get("evidence", []), rec.get("evidence", [])))

    # -- end of run -----------------------------------------------------------------------
    def environment(self) -> dict:
        """The run's environment, captured once per process: every record carries it, and
        capturing it runs git twice."""
        if self._environment is None:
            self._environment = {**environment(self.rootdir, self._ignored_paths()),
                                 **self.machine_hooks.rows(self.rootdir)}
        return self._environment

    def _name(self, path: Path) -> str:
        return _relative(path, self.rootdir)

    def _ignored_paths(self) -> tuple[str, ...]:
        out = []
        for path in (self.report, self.check_path):
            if path is None:
                continue
            try:
                rel = path.resolve().relative_to(self.rootdir.resolve())
            except ValueError:
                continue
            out += [str(rel), str(rel.with_name(writeup.assets_dir_name(rel.name))),
                    str(rel.with_name(writeup.data_name(rel.name)))]
        return tuple(out)

    def merged(self, old: dict | None, narrowed: bool, covers) -> tuple[list[dict], list[str]]:
        """This run's records, and the old write-up's records of claims this run did not run
        but was not asked to drop (a narrowed run, or claims outside its paths).  Returns the
        records and the node ids carried over."""
        records = dict(self.records)
        kept = []
        for nodeid, rec in (old or {}).get("claims", {}).items():
            if nodeid in records or (not narrowed and covers(nodeid)):
                continue
            records[nodeid] = rec
            kept.append(nodeid)
        return list(records.values()), sorted(kept)

    def finish(self, completed: bool, selection_narrowed: bool, args: list[str] | None = None) -> None:
        """``completed``: the run ran to its end (no usage or collection error, no crash, no
        Ctrl-C).  ``selection_narrowed``: -k, -m, --lf, --deselect, -x: claims that did not run
        may still exist.  ``args``: what the run was asked to run, rootdir-relative."""
        covers = check.covered_by(args) if args else (lambda nodeid: True)
        if self.written is not None and completed:
            try:
                self._check(selection_narrowed, covers)
            except kinds.UnknownKind as e:  # a kind the write-up has and this run never registered
                self.problems.append(f"cannot check {self.check_path}: {e}")
        if self.report is not None:
            if not completed:
                self.notes.append(f"dumpref: did not write {self.report}: the run did not complete; "
                                  "the existing write-up and its figures are unchanged")
            else:
                try:
                    self.write_report(selection_narrowed, covers)
                except kinds.UnknownKind as e:
                    self.problems.append(f"did not update {self.report}: {e}")

    def _check(self, narrowed: bool, covers) -> None:
        written, path = self.written, self.check_path
        if written is None or path is None:
            return
        name = self._name(path)
        self._outcome_flips_on_this_machine()
        for nodeid, rec in self.records.items():    # an xdist worker's finding travels in its record
            if rec.get("outcome") == "skipped" and str(rec.get("reason", "")).startswith(FINDING):
                self.findings.setdefault(nodeid, rec["reason"][len(FINDING):])
        for nodeid in self.findings:    # judged by the file's record: the finding is reported apart
            if nodeid in written["claims"]:
                self.records[nodeid] = written["claims"][nodeid]
        outcomes = {k: v["outcome"] for k, v in self.records.items()}
        if not narrowed:
            self.problems += check.missing_claims(written["claims"], outcomes, covers)
        self.problems += [f"claim {n} ran but is not in the write-up (render it with --dumpref-report)"
                          for n, r in sorted(self.records.items())
                          if n not in written["claims"] and r["outcome"] == "passed"]
        self.machine = self.machine_differences()
        rule = dataclasses.replace(self.config.measured, same_machine=not self.machine)
        speeds, self.speed_lines = self._speeds(written, rule)
        result = self._compare(written, narrowed, covers, name, rule, speeds)
        # A measured value whose comparison is inconclusive, or which is incompatible while
        # every other line reproduces, gets its claim re-run in a fresh process: a value doubled
        # by hand stays incompatible there, a run disturbed by its neighbours does not.
        for attempt in range(1, rule.reruns + 1):
            mismatched = [d for d in result.differences if d.measured]
            if len(mismatched) < len(result.differences) or not (mismatched or result.inconclusive):
                break
            nodeids = sorted({i.claim for i in result.inconclusive if i.claim} | {d.claim for d in mismatched if d.claim})
            n = len(result.inconclusive) + len(mismatched)
            why = " and ".join(filter(None, [
                f"{len(result.inconclusive)} inconclusive" if result.inconclusive else "",
                f"{len(mismatched)} incompatible" if mismatched else ""]))
            fresh_records = self._rerun(nodeids)
            self.reruns.append(f"re-run {attempt} of {rule.reruns} in a fresh process, for {why} "
                               f"value{'' if n == 1 else 's'}: " + ", ".join(nodeids))
            if not fresh_records:
                break
            self.records.update(fresh_records)
            speeds, self.speed_lines = self._speeds(written, rule)
            result = self._compare(written, narrowed, covers, name, rule, speeds)
        seen = {d.line for d in result.differences}
        # The data block rendered on its own must give the file exactly: an edit to either shows.
        own = writeup.render_lines(list(written["claims"].values()), written["environment"], self.config, name)
        own = [writeup.Line(ln.text, ln.claim, ln.where) for ln in own]
        source = f"its data ({written['data_path'].name})" if written.get("data_path") else "its data block"
        for d in check.compare_lines(written["lines"], own, source=source).differences:
            if d.line not in seen:
                seen.add(d.line)
                result.differences.append(d)
        for nodeid, rec in self.records.items():
            w = written["claims"].get(nodeid)
            if w is None:
                continue
            claim_rule = dataclasses.replace(rule, speed=speeds[nodeid]) if nodeid in speeds else rule
            for what, problem in check.compare_values(nodeid, w, rec, claim_rule):
                line = _line_of(written["lines"], nodeid, what)
                if line not in seen:
                    result.differences.append(check.Difference(line, nodeid, "claim", problem))
        # A file kept beside the write-up (a long listing) must be the text its data holds,
        # which the lines above tie to this run's.
        assets = path.parent / writeup.assets_dir_name(path.name)
        for nodeid, w in written["claims"].items():
            if w.get("outcome") != "passed" or not covers(nodeid):
                continue
            for item in w["evidence"]:
                kind = kinds.lookup(item["kind"], nodeid)
                text, kept = kind.asset_text(item), kind.asset(nodeid, item)
                if text is None or kept is None:
                    continue
                f = assets / kept
                if f.is_file() and f.read_bytes() == text.encode("utf-8"):
                    continue
                gone = f"{f} is missing" if not f.is_file() else \
                    f"{f} differs from the {kind.label(item)} the write-up's data holds"
                at = kind.line_of(written["lines"], 0, item[kind.key]) if kind.key else None
                result.differences.append(check.Difference(at or 1, nodeid, "claim", gone))
        if written["trailer"].strip():
            result.differences.append(check.Difference(len(written["lines"]) + 1, None, "data block",
                                                       "the file has text after its data block"))
        result.differences.sort(key=lambda d: d.line)
        self.check_result = result

    def _compare(self, written: dict, narrowed: bool, covers, name: str, rule: measured.Rule,
                 speeds: dict) -> check.Result:
        records, _ = self.merged(written, narrowed, covers)
        fresh = writeup.render_lines(records, self.environment(), self.config, name)
        return check.compare_lines(written["lines"], fresh, rule=rule, speeds=speeds)

    def _speeds(self, written: dict, rule: measured.Rule) -> tuple[dict, list[str]]:
        """(node id -> measured.Speed for each claim of this run whose rulers agree on how fast
        the machine ran against the file's, the report's line for each claim with rulers: the
        speed its times are judged at, or why none is applied and they are judged as they are)."""
        speeds: dict[str, measured.Speed] = {}
        none_applied = []
        if not rule.same_machine:
            return speeds, []
        for nodeid, rec in self.records.items():
            w = written["claims"].get(nodeid)
            if w is None:
                continue
            speed, why = check.claim_speed(w, rec, rule)
            if speed is not None:
                speeds[nodeid] = speed
            elif why is not None:
                none_applied.append(f"claim {nodeid}: no speed applied, {why}")
        return speeds, [f"claim {n}: {v}; its times are judged at that speed"
                        for n, v in sorted(speeds.items())] + none_applied

    def _rerun(self, nodeids: list[str]) -> dict[str, dict]:
        """Run ``nodeids`` again in a fresh pytest process and return their records (those that
        passed there; a claim that fails in the re-run keeps this run's record)."""
        with tempfile.TemporaryDirectory(prefix="dumpref-rerun-") as tmp:
            out = Path(tmp) / "rerun.md"
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:xdist",
                   f"--dumpref-report={out}", *nodeids]
            proc = subprocess.run(cmd, cwd=self.rootdir, capture_output=True, text=True)
            if not out.is_file():
                self.reruns.append(f"the re-run wrote no records (exit {proc.returncode}): "
                                   + (proc.stdout + proc.stderr).strip()[-500:])
                return {}
            claims = writeup.read(out)["claims"]
        fresh = {k: v for k, v in claims.items() if k in nodeids and v.get("outcome") == "passed"}
        for k, v in fresh.items():
            # run alone, a claim is the first of its file: it keeps its place in this run's
            v["order"] = self.records[k]["order"] if k in self.records else v["order"]
        return fresh

    def write_report(self, narrowed: bool, covers) -> None:
        """Render into a temporary folder beside the write-up, then move its data, its assets
        (figures, long listings) and the write-up into place, the Markdown last: until it moves,
        the old write-up stands.
        An exception on the way puts the old data and assets back; a process killed on the way
        leaves the folder, holding the old data and the new Markdown, which reading the write-up
        then names (the two files name each other by hash, so a mixed pair is never read)."""
        if narrowed and self.existing_error:
            self.problems.append(f"did not update {self.report} in place: {self.existing_error}. "
                                 "Run every claim to render it whole, or name another file")
            return
        report = self.report
        if report is None:
            return
        name = self._name(report)
        records, kept = self.merged(self.existing, narrowed, covers)
        if kept:
            self.notes.append(f"dumpref: {len(kept)} claims this run did not run are kept as the existing "
                              f"write-up has them: {', '.join(kept)}")
        parent = report.parent
        parent.mkdir(parents=True, exist_ok=True)
        assets = parent / writeup.assets_dir_name(report.name)
        tmp = parent / f".{report.name}.dumpref-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "assets").mkdir(parents=True)
        try:
            n_assets = 0
            for rec in records:
                if rec["outcome"] != "passed":
                    continue
                for item in rec["evidence"]:
                    kind = kinds.lookup(item["kind"], rec["nodeid"])
                    asset = kind.asset(rec["nodeid"], item)
                    if asset is None:
                        continue
                    dest = tmp / "assets" / asset
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    text = kind.asset_text(item)
                    if text is not None:
                        dest.write_text(text, encoding="utf-8")
                        n_assets += 1
                        continue
                    src = Path(item["path"]) if item.get("path") else assets / asset
                    if not src.is_file():
                        self.problems.append(f"claim {rec['nodeid']}: {kind.label(item)} is kept from the "
                                             f"existing write-up but {src} is gone; run the claim again")
                        continue
                    shutil.copyfile(src, dest)
                    n_assets += 1
            text, data = writeup.render_files(records, self.environment(), self.config, name)
            (tmp / "writeup").write_text(text, encoding="utf-8")
            (tmp / "data").write_text(data, encoding="utf-8")
            self._move_into_place(report, tmp, assets, n_assets > 0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _move_into_place(self, report: Path, tmp: Path, assets: Path, any_assets: bool) -> None:
        sidecar = report.with_name(writeup.data_name(report.name))
        had_data = sidecar.exists()
        if had_data:
            shutil.copyfile(sidecar, tmp / "old-data")
        moved_data = moved_assets = False
        try:
            os.replace(tmp / "data", sidecar)
            moved_data = True
            if assets.exists():
                os.replace(assets, tmp / "old-assets")
            moved_assets = True
            if any_assets:
                os.replace(tmp / "assets", assets)
            os.replace(tmp / "writeup", report)
        except BaseException:
            if moved_assets and (tmp / "old-assets").exists():
                shutil.rmtree(assets, ignore_errors=True)
                os.replace(tmp / "old-assets", assets)
            if moved_data:
                if had_data:
                    os.replace(tmp / "old-data", sidecar)
                else:
                    sidecar.unlink(missing_ok=True)
            raise

    def number_lines(self) -> list[str]:
        """Each number of each claim that ran, beside the write-up's value (check mode)."""
        lines = []
        for rec in sorted(self.records.values(), key=writeup.claim_order):
            nodeid = rec["nodeid"]
            w = self.written["claims"].get(nodeid, {}) if self.written else {}
            lines.append(f"dumpref: {nodeid} ({rec['outcome']})")
            for item in rec["evidence"]:
                written = [i for i in w.get("evidence", []) if i["kind"] == item["kind"]]
                lines += kinds.lookup(item["kind"], nodeid).run_lines(item, written)
        return lines

    def summary_lines(self, verbose: bool = False) -> list[str]:
        lines = []
        if self.written is not None and self.machine:
            lines.append(f"dumpref: this run's machine is not the write-up's ({self.check_path}): its "
                         "measured values are shown beside the file's and not judged (a time belongs to "
                         "its machine); the claims' assertions, bounds and counted values are checked:")
            lines += [f"  {m}" for m in self.machine]
        if self.written is not None and verbose:
            lines += self.number_lines()
        if self.report is not None and not any(n.startswith("dumpref: did not write") for n in self.notes) \
                and not any(p.startswith("did not update") for p in self.problems):
            n_ok = sum(r["outcome"] == "passed" for r in self.records.values())
            lines.append(f"dumpref: wrote {self.report} ({n_ok} claim{'' if n_ok == 1 else 's'} established, "
                         f"{len(self.records) - n_ok} not established in this run)")
        lines += self.notes
        lines += [f"dumpref: {r}" for r in self.reruns]
        if self.speed_lines:
            lines.append("dumpref: the machine's speed against the write-up's, from each claim's rulers "
                         "(the calibration kernels timed beside its programs):")
            lines += [f"  {x}" for x in self.speed_lines]
        if self.written is not None and self.check_result is not None:
            accepted = sorted({what for what, _, _ in self.check_result.accepted})
            if accepted:
                lines.append("dumpref: differences accepted as declared (measured values within their "
                             "tolerance, the machine, " + ", ".join(writeup.RUN_TO_RUN) + "): "
                             + ", ".join(accepted[:12]) + (" …" if len(accepted) > 12 else ""))
            closest = [m for m in self.check_result.closest(CLOSEST_REPORTED) if m.used > 0]
            if closest:
                lines.append("dumpref: the measured values nearest their tolerance (share of it used):")
                lines += [f"  {m}" for m in closest]
        if self.findings:
            lines.append("dumpref: claims judged by the write-up's record, not by this run (findings about "
                         "this machine or claims the write-up does not establish):")
            lines += [f"  {nodeid}: {why}" for nodeid, why in sorted(self.findings.items())]
        problems = list(self.problems)
        if self.written is not None:
            problems += [
                f"claim {nodeid} {r['outcome']}: {r['reason'].splitlines()[0] if r['reason'] else ''}"
                for nodeid, r in sorted(self.records.items())
                if r["outcome"] in ("failed", "error") and nodeid not in self.findings
                and self.written["claims"].get(nodeid, {}).get("outcome") == "passed"]
            diffs = self.check_result.differences if self.check_result else []
            problems += [str(d) for d in diffs[:check.MAX_REPORTED]]
            if self.check_result is not None and not diffs:
                problems += [f"{i} (after {len(self.reruns)} fresh-process re-run"
                             f"{'' if len(self.reruns) == 1 else 's'})"
                             for i in (self.check_result.inconclusive or [])]
            if len(diffs) > check.MAX_REPORTED:
                problems.append(f"… and {len(diffs) - check.MAX_REPORTED} more lines that do not reproduce")
        if problems:
            head = f"dumpref check FAILED against {self.check_path}:" if self.written is not None \
                else "dumpref FAILED:"
            lines += [head] + [f"  {p}" for p in problems]
        elif self.written is not None and self.check_result is not None:
            lines.append(f"dumpref: every line of {self.check_path} reproduces "
                         f"({len(self.records)} claim{'' if len(self.records) == 1 else 's'} ran)")
        return lines

    def failed(self) -> bool:
        """Whether the run's dumpref part failed (a problem, or a check that did not reproduce)."""
        r = self.check_result
        return bool(self.problems or (r and (r.differences or r.inconclusive)))

    def failure_line(self) -> str | None:
        """The last line of a failed run's output: what failed, in words a CI summary shows."""
        if not self.failed():
            return None
        if self.written is None:
            return f"dumpref FAILED: {len(self.problems)} problem{'' if len(self.problems) == 1 else 's'}"
        r = self.check_result
        n_lines = len(r.differences) if r else 0
        n_open = len(r.inconclusive or []) if r and not r.differences else 0
        parts = []
        if n_lines:
            parts.append(f"{n_lines} line{'' if n_lines == 1 else 's'} of {self.check_path} "
                         f"do{'es' if n_lines == 1 else ''} not reproduce")
        if n_open:
            parts.append(f"{n_open} measured value{'' if n_open == 1 else 's'} stayed inconclusive")
        if self.problems:
            parts.append(f"{len(self.problems)}{' other' if parts else ''} problem{'' if len(self.problems) == 1 else 's'}")
        return "dumpref check FAILED: " + "; ".join(parts)


def _line_of(lines: list[str], nodeid: str, what: str) -> int:
    """The 1-based line of a claim's item (``what``: its label, ``number 'time'``) in the
    committed file, as its kind finds it; the claim's anchor if not found."""
    start = next((i for i, ln in enumerate(lines) if ln == f'<a id="{writeup.anchor(nodeid)}"></a>'), 0)
    name, _, label = what.partition(" ")
    kind = kinds.KINDS.get(name)
    found = kind.line_of(lines, start, ast.literal_eval(label)) if kind is not None and label else None
    return found if found is not None else start + 1


def _has_measured(items) -> bool:
    """Whether evidence items hold a measured value: a number or table cell with its noise."""
    if isinstance(items, dict):
        return "noise" in items and items.get("noise") is not None or any(_has_measured(v) for v in items.values())
    if isinstance(items, (list, tuple)):
        return any(_has_measured(v) for v in items)
    return False


def _side_by_side(written: list, now: list) -> str:
    """The numbers of a claim in the file and in this run, side by side (the measured ones
    first), as text appended to a finding."""
    def numbers(items):
        return {i.get("name"): i.get("value") for i in items if i.get("kind") == "number"}
    a, b = numbers(written), numbers(now)
    names = [n for n in a if n in b]
    if not names:
        return ""
    return "; the file's | this run's: " + "; ".join(f"{n}: {_short_value(a[n])} | {_short_value(b[n])}" for n in names[:8])


def _short_value(v) -> str:
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    return f"{v:.4g}" if isinstance(v, float) else str(v)
