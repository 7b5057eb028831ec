"""A claim's record and the rule "no evidence, no claim".

Nothing here imports pytest: the hooks in ``plugin.py`` build a :class:`ClaimRecord`
per test and hand fixtures an :class:`Evidence` to fill.  Domain code (the XLA dump
model, the PJRT builder) records into the same :class:`Evidence`, which is how
"fixtures record their evidence automatically".
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from . import kinds
from .kinds import BOUNDED, MEASURED, VARIES, ClaimError, UnknownKind, cell_value, sha256_of, sha256_of_tree

__all__ = ["ClaimError", "UnknownKind", "sha256_of", "sha256_of_tree", "Evidence", "ClaimRecord",
           "Provenance", "measured", "varies", "bounded", "finding_names", "normalize_dtype"]

REQUIRED_PROVENANCE = ("dtype", "shapes", "method")


class Evidence:
    """What backs one claim.  Items keep the order they were recorded in.

    Every item is a plain dict (JSON-serialisable) so records travel from xdist workers to the
    controller and into the write-up's data unchanged.  ``evidence.<kind>(...)`` records an item
    of any kind registered in :mod:`pytest_dumpref.kinds` (``number``, ``excerpt``, ``table``,
    ``file``, ``figure``, ``note`` and a project's own); the kind's ``record`` documents its
    arguments (``help(kinds.KINDS["table"].record)``).
    """

    def __init__(self) -> None:
        self.items: list[dict] = []
        # What the evidence itself says it was measured on; checked against the
        # declared provenance.  Filled by observe().
        self.observed: dict[str, Any] = {}
        self.claim: str | None = None   # the node id of the claim it backs, for messages

    def record(self, kind: str, *args: Any, **kwargs: Any) -> None:
        """Record an item of the kind named ``kind`` (what ``evidence.<kind>(...)`` calls)."""
        k = kinds.lookup(kind, self.claim)
        item = kinds.make_item(k, self.claim, args, kwargs)
        if k.unique:
            name = item.get(k.key) if k.key else None
            if any(i["kind"] == k.name and i.get(k.key) == name for i in self.items):
                raise ClaimError(f"evidence.{k.name} {name!r} recorded twice: names must be unique within a claim")
        self.items.append(item)

    def __getattr__(self, name: str) -> Callable[..., None]:
        # only for names Evidence does not have: evidence.number, evidence.table, a project's kind
        if name.startswith("_"):
            raise AttributeError(name)
        kind = kinds.lookup(name, self.__dict__.get("claim"))

        def record(*args: Any, **kwargs: Any) -> None:
            self.record(name, *args, **kwargs)
        record.__doc__ = kind.record.__doc__
        record.__name__ = name
        return record

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
            self.observed.setdefault("options", {}).update({str(k): cell_value(v) for k, v in options.items()})
        for k, v in extra.items():
            self.observed[k] = cell_value(v)

    @property
    def substantive(self) -> list[dict]:
        """Items that back a claim (a note alone backs nothing)."""
        return [i for i in self.items if kinds.lookup(i["kind"], self.claim).substantive]


FINDING_FIELD = re.compile(r"\{([^{}]+)\}")


def finding_names(finding: str) -> list[str]:
    """The numbers a finding line quotes, ``{name}`` each."""
    return FINDING_FIELD.findall(finding)


def measured(value: Any, noise: Any, *, unit: str | None = None, ruler: bool = False) -> dict:
    """A table cell that is a measured value with its noise (one sigma, the value's unit): the
    check judges it as it judges ``evidence.number(..., noise=)``.  ``unit`` (the column's
    header may already show it) lets the check judge a time at the machine's speed;
    ``ruler=True`` marks a time that measures the machine, not the claim (a calibration
    kernel timed beside the programs): a claim's rulers give that speed (see
    :mod:`pytest_dumpref.measured`)."""
    return MEASURED.make(value, noise, unit, ruler)


def varies(value: Any) -> dict:
    """A table cell shown and not compared (a count the run chose, such as a benchmark's rounds)."""
    return VARIES.make(value)


def bounded(value: Any, bound: Any) -> dict:
    """A table cell that the claim asserts under or over a limit (see ``evidence.number``)."""
    return BOUNDED.make(value, bound)


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
    provenance: Provenance | None
    title: str = ""
    finding: str | None = None        # the claim's line in the write-up's findings, {number} placeholders
    evidence: Evidence = field(default_factory=Evidence)
    environment: dict = field(default_factory=dict)
    outcome: str = "unknown"          # passed | failed | skipped
    reason: str = ""
    order: int = 0                    # position in its file: the write-up follows the files
    assertions: int | None = None     # passing assert statements of its test (None: not counted)

    def __post_init__(self) -> None:
        self.evidence.claim = self.nodeid

    def violations(self, observed_chip: str | None) -> list[str]:
        """The rule, as sentences.  Empty means the claim is allowed to stand."""
        out = []
        if self.finding:
            names = {i["name"] for i in self.evidence.items if i["kind"] == kinds.NUMBER.name}
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
        prov = self.provenance
        if not params or prov is None or prov.missing():
            return []
        out = []
        seen_dtypes = {d for d, _ in params.values()}
        for d in prov.declared_dtypes():
            if d not in seen_dtypes:
                out.append(f"it declares dtype {d} but the program's parameters are {sorted(seen_dtypes)}")
        shapes = prov.shapes
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
