"""A claim's record and the rule "no evidence, no claim".

Nothing here imports pytest: the hooks in ``plugin.py`` build a :class:`ClaimRecord`
per test and hand fixtures an :class:`Evidence` to fill.  Domain code (the XLA dump
model, the PJRT builder) records into the same :class:`Evidence`, which is how
"fixtures record their evidence automatically".
"""
from __future__ import annotations

import hashlib
import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .measured import parse_bound, within_bound

REQUIRED_PROVENANCE = ("dtype", "shapes", "method")


class ClaimError(Exception):
    """A claim broke the contract (missing evidence, bad provenance, wrong chip)."""


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


def _plain(value: Any) -> Any:
    """Numbers as JSON-friendly Python scalars (numpy scalars, jax scalars)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "item"):
        return _plain(value.item())
    raise TypeError(f"evidence.number needs a real number, got {type(value).__name__}: {value!r}")


class Evidence:
    """What backs one claim.  Items keep the order they were recorded in.

    Every item is a plain dict (JSON-serialisable) so records travel from xdist
    workers to the controller and into the write-up's data block unchanged.
    """

    def __init__(self) -> None:
        self.items: list[dict] = []
        # What the evidence itself says it was measured on; checked against the
        # declared provenance.  Filled by observe().
        self.observed: dict[str, Any] = {}

    # -- the five kinds a claim records ------------------------------------------------
    def number(self, name: str, value, *, unit: str | None = None,
               tolerance: float | None = None, noise: float | None = None, bound=None) -> None:
        """A number the write-up states, compared by ``--dumpref-check`` in one of four ways:

        - ``noise=``: a measured value and its standard uncertainty (one sigma, in ``unit``) as
          this run estimated it from its own data (its rounds' spread, an A/A control); a re-run
          is judged by both runs' noise (see :mod:`pytest_dumpref.measured`);
        - ``bound=``: a figure the claim asserts under or over a limit, ``("<=", 1e-5)`` or
          ``{"max": 1e-5}``; checked against the limit, not against the last run's value;
        - ``tolerance=``: relative (0.1 = 10 %), declared by hand;
        - none of these: exact, unless ``[tool.dumpref] default_tolerances`` names the unit."""
        v = _plain(value)
        what = f"evidence.number {name!r}"
        if isinstance(v, float) and not math.isfinite(v):
            raise ClaimError(f"{what} is not finite: {v}")
        if tolerance is not None and (not isinstance(tolerance, (int, float)) or tolerance < 0):
            raise ClaimError(f"{what}: tolerance must be a relative number >= 0, got {tolerance!r}")
        if sum(x is not None for x in (tolerance, noise, bound)) > 1:
            raise ClaimError(f"{what}: give one of tolerance=, noise= and bound=")
        item = {"kind": "number", "name": name, "value": v, "unit": unit, "tolerance": tolerance}
        if noise is not None:
            item["noise"] = _noise(what, noise)
        if bound is not None:
            item["bound"] = _bound(what, v, bound)
        self._check_new_name("number", name)
        self.items.append(item)

    def excerpt(self, title: str, text: str, *, lang: str | None = None, fold: bool | None = None) -> None:
        """Lines copied from a file the claim names.  ``fold``: True folds it into <details>,
        False keeps it in view; None (the default) folds a long one."""
        item = {"kind": "excerpt", "title": title, "text": str(text), "lang": lang}
        if fold is not None:
            item["fold"] = bool(fold)
        self.items.append(item)

    def table(self, title: str, rows: Iterable, *, tolerances: dict | None = None,
              fold: bool | None = None) -> None:
        """``rows``: dicts with the same keys, or lists whose first row is the header.

        ``tolerances`` names the columns that are measured (timings, counts that move between
        runs) and how closely a re-run must agree: ``{"us/call": 0.5}`` is relative (0.5 = 50 %),
        ``{"A/A difference": {"abs": 20}}`` absolute.  Every other cell is compared exactly by
        ``--dumpref-check``.  ``fold`` as for :meth:`excerpt`."""
        header, cells = _table(f"evidence.table {title!r}", rows)
        item = {"kind": "table", "title": title, "header": header, "rows": cells,
                "tolerances": _column_tolerances(f"evidence.table {title!r}", header, tolerances)}
        if fold is not None:
            item["fold"] = bool(fold)
        self.items.append(item)

    def file(self, title: str, path) -> None:
        """A file or folder the claim rests on, by hash (compared exactly by --dumpref-check)."""
        p = Path(path)
        if not p.exists():
            raise ClaimError(f"evidence.file {title!r}: {p} does not exist")
        digest = sha256_of_tree(p) if p.is_dir() else sha256_of(p)
        self._check_new_name("file", title)
        self.items.append({"kind": "file", "title": title, "path": str(p), "sha256": digest,
                           "is_dir": p.is_dir()})

    def figure(self, title: str, path, *, data: Iterable | None = None,
               tolerances: dict | None = None) -> None:
        """An image; copied beside the write-up.  Its pixels are not compared by the check
        (another matplotlib draws other pixels); the numbers it plots are, when given as
        ``data`` (rows as for :meth:`table`, with the same ``tolerances``)."""
        p = Path(path)
        if not p.is_file():
            raise ClaimError(f"evidence.figure {title!r}: {p} is not a file")
        what = f"evidence.figure {title!r}"
        header, cells = _table(what, data) if data is not None else ([], [])
        self.items.append({"kind": "figure", "title": title, "path": str(p), "suffix": p.suffix,
                           "sha256": sha256_of(p), "header": header, "rows": cells,
                           "tolerances": _column_tolerances(what, header, tolerances)})

    def note(self, text: str) -> None:
        """A sentence of explanation rendered under the claim (not a claim of its own)."""
        self.items.append({"kind": "note", "text": str(text)})

    # -- what the evidence says about where it came from -------------------------------
    def observe(self, *, backend: str | None = None, params: dict | None = None,
                options: dict | None = None, **extra) -> None:
        """Called by fixtures that know what they ran.

        backend: the JAX platform that produced the evidence ("cpu", "dumpref", ...).
        params:  the program's parameters, name -> (dtype, shape), dtype in XLA spelling
                 ("f32") or numpy spelling ("float32").
        options: compiler options used (merged across calls).
        """
        if backend is not None:
            self.observed.setdefault("backends", [])
            if backend not in self.observed["backends"]:
                self.observed["backends"].append(backend)
        if params:
            self.observed.setdefault("params", {}).update(
                {str(k): (normalize_dtype(d), tuple(int(x) for x in s)) for k, (d, s) in params.items()})
        if options:
            self.observed.setdefault("options", {}).update({str(k): _cell(v) for k, v in options.items()})
        for k, v in extra.items():
            self.observed[k] = _cell(v)

    def _check_new_name(self, kind: str, name: str) -> None:
        key = "name" if kind == "number" else "title"
        if any(i["kind"] == kind and i[key] == name for i in self.items):
            raise ClaimError(f"evidence.{kind} {name!r} recorded twice: names must be unique within a claim")

    @property
    def substantive(self) -> list[dict]:
        """Items that back a claim (a note alone backs nothing)."""
        return [i for i in self.items if i["kind"] != "note"]


FINDING_FIELD = re.compile(r"\{([^{}]+)\}")


def finding_names(finding: str) -> list[str]:
    """The numbers a finding line quotes, ``{name}`` each."""
    return FINDING_FIELD.findall(finding)


def measured(value, noise) -> dict:
    """A table cell that is a measured value with its noise (one sigma, the value's unit): the
    check judges it as it judges ``evidence.number(..., noise=)``."""
    v = _plain(value)
    if isinstance(v, float) and not math.isfinite(v):
        raise ClaimError(f"measured: the value is not finite: {v}")
    return {"value": v, "noise": _noise("measured", noise)}


def varies(value) -> dict:
    """A table cell shown and not compared (a count the run chose, such as a benchmark's rounds)."""
    return {"value": _cell(value), "varies": True}


def bounded(value, bound) -> dict:
    """A table cell that the claim asserts under or over a limit (see ``evidence.number``)."""
    v = _plain(value)
    return {"value": v, "bound": _bound("bounded", v, bound)}


def _noise(what: str, noise) -> float:
    try:
        n = _plain(noise)
    except TypeError:
        n = None
    if n is None or isinstance(n, bool) or not math.isfinite(n) or n < 0:
        raise ClaimError(f"{what}: noise must be a finite number >= 0 (one sigma, in the value's unit), "
                         f"got {noise!r}")
    return float(n)


def _bound(what: str, value, bound) -> list:
    try:
        op, limit = parse_bound(what, bound)
    except ValueError as e:
        raise ClaimError(str(e)) from None
    if not within_bound(value, op, limit):
        raise ClaimError(f"{what}: {value!r} is not {op} {limit!r}, the bound it is recorded with "
                         "(assert the bound in the claim; a bound the value breaks is not evidence)")
    return [op, limit]


def _table(what: str, rows: Iterable) -> tuple[list[str], list[list]]:
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
    return [str(h) for h in header], [[_cell(c) for c in r] for r in body]


def _column_tolerances(what: str, header: list[str], tolerances: dict | None) -> dict:
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


def _cell(c):
    if c is None or isinstance(c, (str, bool)):
        return c
    if isinstance(c, dict) and set(c) in ({"value", "noise"}, {"value", "bound"}, {"value", "varies"}):
        return dict(c)   # measured() or bounded()
    try:
        return _plain(c)
    except TypeError:
        return str(c)


_DTYPE_ALIASES = {
    "float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16",
    "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bool": "pred", "bool_": "pred", "complex64": "c64", "complex128": "c128",
}


def normalize_dtype(d) -> str:
    """'float32', np.float32, jnp.float32 and 'f32' all become 'f32' (XLA spelling)."""
    name = getattr(d, "name", None) or getattr(d, "__name__", None) or str(d)
    name = str(name).lower()
    return _DTYPE_ALIASES.get(name, name)


@dataclass
class Provenance:
    dtype: Any = None
    shapes: Any = None
    method: Any = None
    chip: str | None = None

    def missing(self) -> list[str]:
        return [k for k in REQUIRED_PROVENANCE if getattr(self, k) in (None, "", {}, [])]

    def declared_dtypes(self) -> list[str]:
        ds = self.dtype if isinstance(self.dtype, (list, tuple)) else [self.dtype]
        return [normalize_dtype(d) for d in ds]

    def as_dict(self) -> dict:
        shapes = self.shapes
        if isinstance(shapes, dict):
            shapes = {str(k): list(v) if isinstance(v, (list, tuple)) else v for k, v in shapes.items()}
        return {"dtype": self.dtype if isinstance(self.dtype, str) else
                (", ".join(self.declared_dtypes()) if self.dtype is not None else None),
                "shapes": shapes, "method": self.method, "chip": self.chip}


@dataclass
class ClaimRecord:
    """Everything the write-up and the check need about one claim."""
    nodeid: str
    text: str
    section: str
    provenance: Provenance
    title: str = ""
    finding: str | None = None        # the claim's line in the write-up's findings, {number} placeholders
    evidence: Evidence = field(default_factory=Evidence)
    environment: dict = field(default_factory=dict)
    outcome: str = "unknown"          # passed | failed | skipped
    reason: str = ""
    order: int = 0                    # position in its file: the write-up follows the files
    assertions: int | None = None     # passing assert statements of its test (None: not counted)

    def violations(self, observed_chip: str | None) -> list[str]:
        """The rule, as sentences.  Empty means the claim is allowed to stand."""
        out = []
        if self.finding:
            names = {i["name"] for i in self.evidence.items if i["kind"] == "number"}
            missing = [n for n in finding_names(self.finding) if n not in names]
            if missing:
                out.append(f"its finding names {', '.join(map(repr, missing))}, which it recorded no "
                           f"number of (recorded: {', '.join(map(repr, sorted(names))) or 'none'})")
        if self.assertions == 0:
            out.append("it asserts nothing: no assert statement passed in its test. Recording "
                       "evidence is not deciding; the test's assertions decide whether the claim holds")
        if not self.evidence.substantive:
            out.append("it recorded no evidence (use the `evidence` fixture, or a fixture that records it: dump, unfused, pjrt_plugin, benchmark)")
        if self.provenance is None:
            out.append("it has no @pytest.mark.provenance(dtype=..., shapes=..., method=...)")
        else:
            miss = self.provenance.missing()
            if miss:
                out.append("its provenance lacks " + ", ".join(miss))
            if self.provenance.chip and observed_chip and self.provenance.chip != observed_chip:
                out.append(f"it declares chip {self.provenance.chip!r} but the evidence came from {observed_chip!r}")
            out.extend(self._param_mismatches())
        return out

    def _param_mismatches(self) -> list[str]:
        params = self.evidence.observed.get("params")
        if not params or self.provenance.missing():
            return []
        out = []
        seen_dtypes = {d for d, _ in params.values()}
        for d in self.provenance.declared_dtypes():
            if d not in seen_dtypes:
                out.append(f"it declares dtype {d} but the program's parameters are {sorted(seen_dtypes)}")
        shapes = self.provenance.shapes
        if isinstance(shapes, dict):
            seen_shapes = {s for _, s in params.values()}
            for name, shape in shapes.items():
                want = tuple(int(x) for x in shape)
                if name in params:
                    if params[name][1] != want:
                        out.append(f"it declares {name}: {want} but parameter {name} is {params[name][1]}")
                elif want not in seen_shapes:
                    out.append(f"it declares {name}: {want} but no parameter has that shape "
                               f"(parameters: {', '.join(f'{k}: {v[1]}' for k, v in sorted(params.items()))})")
        return out

    def to_json(self) -> dict:
        return {"nodeid": self.nodeid, "text": self.text, "title": self.title, "section": self.section,
                "finding": self.finding,
                "provenance": self.provenance.as_dict() if self.provenance else None,
                "evidence": self.evidence.items, "observed": self.evidence.observed,
                "environment": self.environment, "outcome": self.outcome, "reason": self.reason,
                "order": self.order}
