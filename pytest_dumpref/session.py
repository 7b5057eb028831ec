"""One run's worth of claims: builds records, judges them, renders or checks the write-up.

The pytest hooks in ``plugin.py`` are three-liners that call into this object (the shape
syrupy uses), so the rules live here, testable and free of pytest.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from . import check, writeup
from .claims import STUDIES, ClaimRecord, Provenance
from .config import DumprefConfig
from .provenance import environment, observed_chip

PROVENANCE_KEYS = {"dtype", "shapes", "method", "chip"}


class MarkerError(ValueError):
    """A claim or provenance marker with arguments the contract does not allow."""


def parse_claim_marker(nodeid: str, args: tuple, kwargs: dict) -> tuple[str, str | None]:
    if len(args) != 1 or not isinstance(args[0], str) or not args[0].strip():
        raise MarkerError(f"{nodeid}: @pytest.mark.claim takes exactly one sentence: claim(text, *, section=None)")
    extra = set(kwargs) - {"section"}
    if extra:
        raise MarkerError(f"{nodeid}: @pytest.mark.claim got unknown arguments {sorted(extra)}; it takes claim(text, *, section=None)")
    section = kwargs.get("section")
    if section is not None and (not isinstance(section, str) or not section):
        raise MarkerError(f"{nodeid}: @pytest.mark.claim section must be a name, got {section!r}")
    return args[0].strip(), section


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


class DumprefSession:
    def __init__(self, config: DumprefConfig, rootdir: Path, report: Path | None = None,
                 check_against: Path | None = None):
        self.config = config
        self.rootdir = Path(rootdir)
        self.report = Path(report) if report else None
        if self.report is not None and self.report.is_dir():
            raise writeup.WriteupError(f"--dumpref-report={report}: is a folder; name the Markdown "
                                       f"file to write, e.g. {self.report / 'writeup.md'}")
        self.check_path = Path(check_against) if check_against else None
        # Read the write-up up front: a missing or malformed one is a usage error before any test runs.
        self.written = writeup.read(self.check_path) if self.check_path else None
        self.records: dict[str, dict] = {}
        self.basetemp: Path | None = None  # set by the plugin: pytest's --basetemp of this process
        self._environment: dict | None = None
        self.problems: list[str] = []

    # -- per test ---------------------------------------------------------------------
    def new_record(self, nodeid: str, claim: tuple[str, str | None], provenance: Provenance | None,
                   marker_names: set[str]) -> ClaimRecord:
        text, section = claim
        studies = [s for s in STUDIES if s in marker_names]
        section = section or (studies[0] if studies else writeup.GENERAL_SECTION)
        if self.config.sections and section not in self.config.sections:
            raise MarkerError(f"{nodeid}: section {section!r} is not one of the sections configured in "
                              f"{self.config.source}: {self.config.sections}")
        return ClaimRecord(nodeid=nodeid, text=text, section=section, studies=studies, provenance=provenance)

    def judge(self, record: ClaimRecord) -> list[str]:
        """Why a claim whose assertions passed may still not stand (empty: it stands)."""
        # A fixture that ran its evidence elsewhere (a subprocess with the PJRT plugin) says
        # which chip it saw; otherwise ask JAX about the backend the evidence names.
        backends = record.evidence.observed.get("backends") or [None]
        chip = record.evidence.observed.get("chip") or observed_chip(backends[0])
        record.evidence.observed["chip"] = chip
        problems = record.violations(chip)
        if not problems and self.written is not None:
            problems = check.compare_claim(record.nodeid, self.written["claims"].get(record.nodeid),
                                           self.finalize(record, "passed"))
            return [f"does not reproduce the write-up {self.check_path}: {p}" for p in problems]
        return [f"claim {record.nodeid} fails: {p}" for p in problems]

    def finalize(self, record: ClaimRecord, outcome: str, reason: str = "") -> dict:
        """The record as it travels (xdist) and is written: JSON, tolerances resolved,
        temporary paths reduced to names."""
        record.outcome, record.reason = outcome, reason
        data = record.to_json()
        data["environment"] = self.environment()
        items = []
        for item in data["evidence"]:
            item = dict(item)
            if item["kind"] == "number":
                item["effective_tolerance"] = self.config.tolerance_for(item.get("unit"), item.get("tolerance"))
            elif item["kind"] == "file":
                path = Path(item.pop("path"))
                item["name"] = path.name
                item["where"] = self._under_basetemp(path)
            items.append(item)
        data["evidence"] = items
        opts = data["observed"].get("options")
        if opts:  # where the dump went is a temporary folder: not provenance
            data["observed"]["options"] = {k: v for k, v in opts.items() if k != "xla_dump_to"}
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

    # -- end of run -----------------------------------------------------------------------
    def environment(self) -> dict:
        """The run's environment, captured once per process: every record carries it, and
        capturing it runs git twice."""
        if self._environment is None:
            self._environment = environment(self.rootdir, self._ignored_paths())
        return self._environment

    def _report_name(self) -> str:
        rel = self._ignored_paths()
        return rel[0] if rel else self.report.name

    def _ignored_paths(self) -> tuple[str, ...]:
        if not self.report:
            return ()
        try:
            rel = self.report.resolve().relative_to(self.rootdir.resolve())
        except ValueError:
            return ()
        return (str(rel), str(rel.with_suffix("")) + ".assets")

    def finish(self, selection_narrowed: bool, args: list[str] | None = None) -> None:
        """``args``: what the run was asked to run, rootdir-relative ("claims/", "f.py::test")."""
        if self.written is not None and not selection_narrowed:
            outcomes = {k: v["outcome"] for k, v in self.records.items()}
            covers = check.covered_by(args) if args else (lambda nodeid: True)
            self.problems += check.missing_claims(self.written["claims"], outcomes, covers)
        if self.report is not None:
            self.write_report()

    def write_report(self) -> None:
        self.report.parent.mkdir(parents=True, exist_ok=True)
        assets_dir = self.report.with_name(self.report.stem + ".assets")
        if assets_dir.exists():
            shutil.rmtree(assets_dir)
        assets = {}
        for rec in self.records.values():
            for item in rec["evidence"]:
                if item["kind"] != "figure" or rec["outcome"] != "passed":
                    continue
                src = Path(item["path"])
                name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{rec['nodeid'].split('::')[-1]}-{item['title']}")[:120]
                dest = assets_dir / (name + src.suffix)
                assets_dir.mkdir(exist_ok=True)
                shutil.copyfile(src, dest)
                assets[item["sha256"] + item["title"]] = f"{assets_dir.name}/{dest.name}"
        text = writeup.render(list(self.records.values()), self.environment(), self.config, assets,
                              report_name=self._report_name())
        self.report.write_text(text, encoding="utf-8")

    def number_lines(self) -> list[str]:
        """Each number of each claim that ran, beside the write-up's value (check mode)."""
        lines = []
        for rec in sorted(self.records.values(), key=writeup.claim_order):
            nodeid = rec["nodeid"]
            written = self.written["claims"].get(nodeid, {}).get("numbers", {}) if self.written else {}
            lines.append(f"dumpref: {nodeid} ({rec['outcome']})")
            for item in rec["evidence"]:
                if item["kind"] != "number":
                    continue
                was = written.get(item["name"], {}).get("value", "(not in the write-up)")
                unit = f" {item['unit']}" if item.get("unit") else ""
                lines.append(f"  {item['name']}: {item['value']!r}{unit}  (write-up: {was!r}{unit})")
        return lines

    def summary_lines(self, verbose: bool = False) -> list[str]:
        lines = self.number_lines() if self.written is not None and verbose else []
        if self.report is not None:
            n_ok = sum(r["outcome"] == "passed" for r in self.records.values())
            lines.append(f"dumpref: wrote {self.report} ({n_ok} claims established, "
                         f"{len(self.records) - n_ok} not established)")
        if self.written is not None:
            problems = self.problems + [
                f"claim {nodeid} {r['outcome']}: {r['reason'].splitlines()[0] if r['reason'] else ''}"
                for nodeid, r in sorted(self.records.items())
                if r["outcome"] in ("failed", "error")
                and (self.written["claims"].get(nodeid, {}).get("outcome") == "passed"
                     or "does not reproduce the write-up" in r["reason"])]
            if problems:
                lines += [f"dumpref check FAILED against {self.check_path}:"] + [f"  {p}" for p in problems]
            else:
                lines.append(f"dumpref: every claim that ran reproduces {self.check_path} "
                             f"({len(self.records)} claims)")
        return lines
