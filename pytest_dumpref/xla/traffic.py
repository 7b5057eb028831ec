"""Bytes read and written per kernel, spill-style, cross-checked with XLA's HloCostAnalysis.

The model ("spill-style"): every kernel of the entry computation reads each of its operands
from memory and writes its result to memory; whatever stays inside a fusion never touches
memory.  Kernels are the instructions that run code: parameters, constants, tuples,
get-tuple-element and bitcasts only name buffers that already exist, so they move nothing.
A while loop runs its body ``known_trip_count`` times (and its condition once more); a call
runs its callee's kernels.

XLA's own HloCostAnalysis ("bytes accessed") counts almost the same thing but not quite.
``xla_rule_bytes`` restates its rules instruction by instruction (so that a difference can be
pinned on an instruction), ``OPCODE_RULES`` holding each opcode's rule in both models, and ``ModuleTraffic.compare_with_xla`` names every instruction
where the two models differ and why.  XLA adds its amounts in float32, so above 2**24 bytes
its total is rounded; ``xla_float32_total`` replays that arithmetic, and the rounding is named
as a difference of its own.  Any remainder beyond that is reported as unexplained.  The identity ``ours - sum(d.ours - d.xla) == XLA's bytes accessed`` is what the
tests check.
"""
from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .hlo import HloComputation, HloModule, Instruction, Shape, wrapped_opcode
from .naming import backend_of_module_text

__all__ = [
    "FREE_OPCODES",
    "OPCODE_RULES",
    "RUNS_COMPUTATIONS",
    "Allocation",
    "BufferValue",
    "Counting",
    "Discrepancy",
    "KernelTraffic",
    "ModuleTraffic",
    "counting_for",
    "OpcodeRule",
    "Runs",
    "module_traffic",
    "opcode_rule",
    "parse_buffer_assignment",
    "record_output_values",
    "trip_count",
    "xla_float32_total",
    "xla_rule_bytes",
    "xla_visit_order",
]

# Size of a pointer in a tuple's index table, as the CPU client's shape-size function uses:
# 8 bytes with jaxlib 0.9 to 0.11; the cost analysis of jaxlib 0.12 sizes it at 4 bytes
# (measured: a tuple of two arrays is 16 bytes accessed with 0.10.2 and 0.11.0, 8 with 0.12.0.1;
# tests/xla_model/test_traffic_rules.py checks the size below against the jaxlib installed).
POINTER_SIZE = 8
POINTER_SIZE_4_SINCE = (0, 12, 0)


def _installed_jaxlib() -> tuple | None:
    from importlib import metadata
    try:
        version = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3])


@functools.lru_cache(maxsize=1)
def xla_pointer_size() -> int:
    """The pointer size XLA's cost analysis gives a tuple's index table, for the jaxlib
    installed (read from its version, without importing it): ``POINTER_SIZE`` (8) up to
    jaxlib 0.11, 4 from ``POINTER_SIZE_4_SINCE`` on."""
    v = _installed_jaxlib()
    return 4 if v is not None and v >= POINTER_SIZE_4_SINCE else POINTER_SIZE


@dataclass
class KernelTraffic:
    """One kernel: bytes it reads and writes per execution, and how often it runs.

    ``name`` is the instruction's name; kernels inside a while body or a called computation
    carry a ``path`` such as ``while.6/ynn_fusion``.  ``entry_instruction`` is the entry
    instruction it belongs to (the while loop for a body kernel).

    Example (``d`` a Dump)::

        for k in d.traffic_report.kernels:
            print(k.path or k.name, k.opcode, k.bytes_read, k.bytes_written, k.executions)
    """
    name: str
    opcode: str
    fusion_kind: str | None
    bytes_read: int
    bytes_written: int
    operand_shapes: list
    output_shape: Shape
    executions: int = 1
    path: str = ""
    entry_instruction: str = ""
    # memory space -> [bytes read, bytes written] per execution, where the backend's memory has
    # spaces (on a TPU: "HBM", "VMEM", ...); None where it has one (the CPU)
    spaces: dict | None = None

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    def space_bytes(self, space: str) -> int:
        """Bytes this kernel reads plus writes in memory space ``space`` ("HBM"), all its
        executions; 0 where it touches none (or the backend's memory has no spaces)."""
        read, written = (self.spaces or {}).get(space, (0, 0))
        return (read + written) * self.executions

    @property
    def total_read(self) -> int:
        return self.bytes_read * self.executions

    @property
    def total_written(self) -> int:
        return self.bytes_written * self.executions

    def as_dict(self) -> dict:
        return {"name": self.name, "path": self.path or self.name, "opcode": self.opcode,
                "fusion_kind": self.fusion_kind, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "executions": self.executions,
                "operand_shapes": [str(s) for s in self.operand_shapes],
                "output_shape": str(self.output_shape),
                "entry_instruction": self.entry_instruction,
                **({} if self.spaces is None else {"bytes_by_memory_space": {
                    space: {"read": r, "written": w} for space, (r, w) in self.spaces.items()}})}


@dataclass
class Discrepancy:
    """An entry instruction whose bytes differ between this model and XLA's rules."""
    instruction: str
    ours: float
    xla: float
    reason: str

    def as_dict(self) -> dict:
        return {"instruction": self.instruction, "ours": self.ours, "xla": self.xla,
                "reason": self.reason}


# ---- buffer assignment ---------------------------------------------------------------------

@dataclass
class BufferValue:
    """One value placed in an allocation (``<id name{index} @pos> (size=..,offset=..)``)."""
    id: int
    name: str
    index: str
    size: int
    offset: int
    shape: str
    is_phi: bool = False


@dataclass
class Allocation:
    """One buffer allocation of XLA's buffer assignment and the values that live in it."""
    index: int
    size: int
    kinds: tuple
    parameter: int | None = None
    values: list = field(default_factory=list)
    # the memory it is allocated in: XLA's color, 0 (the default memory space; HBM on a TPU)
    # unless the header says "color N" (1: a TPU's VMEM)
    color: int = 0

    @property
    def is_temp(self) -> bool:
        """Scratch memory of the program: not a parameter, constant, output or thread-local."""
        if "preallocated-temp" in self.kinds:
            return True
        return not any(k in self.kinds for k in (
            "parameter", "constant", "thread-local", "maybe-live-out", "output"))

    def sharing(self) -> list:
        """Groups of values whose byte ranges overlap: they reuse the same memory in turn."""
        groups: list[list[BufferValue]] = []
        ends: list[int] = []
        for v in sorted(self.values, key=lambda v: (v.offset, -v.size)):
            if groups and v.offset < ends[-1]:
                groups[-1].append(v)
                ends[-1] = max(ends[-1], v.offset + v.size)
            else:
                groups.append([v])
                ends.append(v.offset + v.size)
        return groups

    def overlapping(self, value: BufferValue) -> list:
        """The other values whose byte ranges overlap ``value``'s, in offset order: they were
        never live at the same time, so XLA let them share those bytes."""
        return [o for o in sorted(self.values, key=lambda v: (v.offset, v.name)) if o is not value
                and o.offset < value.offset + value.size and value.offset < o.offset + o.size]

    def layout_rows(self) -> list[dict]:
        """Every value in offset order: its byte range, and the values that reuse some of it."""
        return [{"value": v.name, "shape": v.shape, "bytes": f"[{v.offset:,}, {v.offset + v.size:,})",
                 "shares bytes with": ", ".join(o.name for o in self.overlapping(v)) or "(none)"}
                for v in sorted(self.values, key=lambda v: (v.offset, v.name))]

    def record(self, evidence, what: str) -> int:
        """Record the ``what`` allocation (``temporary``): its size, its values, the sum of their
        sizes and every value's byte range with the values that reuse some of those bytes
        (layout_rows).  Returns that sum."""
        total = sum(v.size for v in self.values)
        evidence.number(f"{what} allocation size", self.size, unit="B")
        evidence.number(f"values in the {what} allocation", len(self.values))
        evidence.number("sum of their sizes", total, unit="B")
        # values whose ranges overlap were never live at the same time: XLA let them share bytes
        evidence.table(f"every value of the {what} allocation: its byte range, and the values "
                       "that reuse some of those bytes (never live at the same time)", self.layout_rows(), fold=True)
        return total


def record_output_values(evidence, allocations: list) -> list:
    """Record the values placed in the allocations that may be live out (the program's
    output); returns those allocations."""
    outputs = [a for a in allocations if "maybe-live-out" in a.kinds]
    evidence.table("values placed in the output allocation", [
        {"allocation": a.index, "value": v.name, "shape": v.shape} for a in outputs for v in a.values], fold=True)
    return outputs


_ALLOCATION = re.compile(r"allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(r"\s*value: <(\d+) (\S+?)(\{[^}]*\})?( \(phi\))? @\d+> "
                    r"\(size=(\d+),offset=(\d+)\): (.*)$")


def parse_buffer_assignment(text: str, *, source: str | None = None) -> list:
    """Allocations from a ``*-buffer-assignment.txt`` dump (the part before 'Total bytes')."""
    allocations: list[Allocation] = []
    seen_header = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("BufferAssignment:"):
            seen_header = True
            continue
        m = _ALLOCATION.match(line)
        if m:
            rest = m.group(3)
            kinds = []
            param = None
            pm = re.search(r"parameter (\d+)", rest)
            if pm:
                kinds.append("parameter")
                param = int(pm.group(1))
            if "output shape is" in rest:
                kinds.append("output")
            for k in ("constant", "thread-local", "maybe-live-out", "preallocated-temp"):
                if re.search(r"(^|, )" + k + r"(,|$)", rest):
                    kinds.append(k)
            color = re.search(r"(?:^|, )color (\d+)(?:,|$)", rest)
            allocations.append(Allocation(int(m.group(1)), int(m.group(2)), tuple(kinds), param,
                                          color=int(color.group(1)) if color else 0))
            continue
        if line.lstrip().startswith("value:") and allocations:
            v = _VALUE.match(line)
            if not v:
                raise ValueError(f"{source or '<buffer assignment>'}:{lineno}: "
                                 f"unreadable value line {line.strip()[:60]!r}")
            allocations[-1].values.append(BufferValue(
                int(v.group(1)), v.group(2), v.group(3) or "{}", int(v.group(5)),
                int(v.group(6)), v.group(7), v.group(4) is not None))
            continue
        if allocations and not line.startswith(" ") and not m:
            break  # the summary sections that follow the allocations
    if not seen_header:
        raise ValueError(f"{source or '<buffer assignment>'}: not a buffer assignment "
                         f"(no 'BufferAssignment:' line)")
    if not allocations:
        # read as a program without temporaries it would price and count wrong, silently
        raise ValueError(f"{source or '<buffer assignment>'}: a buffer assignment without one allocation "
                         f"(cut short?); every optimized module has at least its parameters and output")
    return allocations


# ---- XLA's rules, restated per instruction -------------------------------------------------

def _default_xla_size(shape: Shape) -> int:
    """GetShapeSize as the CPU client's cost analysis sizes a shape: a tuple by its index
    table (``xla_pointer_size()`` B a pointer), an array by its data, plus 4 B per dimension of size metadata
    when any dimension is dynamic (``f32[<=16]`` is 64 + 4 B)."""
    if shape.tuple_shapes is not None:
        return xla_pointer_size() * len(shape.tuple_shapes)
    if shape.dynamic_dims:
        return shape.byte_size + 4 * len(shape.dims)
    return shape.byte_size


@dataclass(frozen=True)
class Counting:
    """How one backend sizes what its kernels move: ``xla_size``, the size its cost analysis
    gives a shape; ``array_bytes``, what a kernel moves for it spill-style; ``space``, the name
    of the memory a shape lives in (None: one memory); ``moves``, the (read, written) shapes of
    an instruction where they are not its operands and result; ``rules`` and ``reasons``,
    opcodes the backend's cost analysis counts apart from ``OPCODE_RULES`` and why the counts
    differ there.  A backend's room (``pytest_dumpref.xla.<backend>.counting``) supplies them;
    the default is XLA:CPU's, for any module whose text does not name another backend."""
    backend: str | None
    xla_size: Callable[[Shape], int]
    array_bytes: Callable[[Shape], int]
    space: Callable[[Shape], str] | None = None
    moves: Callable | None = None
    rules: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)


DEFAULT_COUNTING = Counting(None, _default_xla_size, lambda s: s.byte_size)
# The counting of the module being walked: set by the entry points below (counted_as), read by
# _xla_size and the kernel builder, so that the one opcode table serves every backend.
_COUNTING: ContextVar[Counting] = ContextVar("counting", default=DEFAULT_COUNTING)


@functools.lru_cache(maxsize=None)
def _room_counting(backend: str) -> Counting:
    try:
        room = importlib.import_module(f"{__package__}.{backend}.counting")
    except ModuleNotFoundError:
        return DEFAULT_COUNTING
    custom = getattr(room, "CUSTOM_CALLS", {})

    def custom_call(rules, comp, inst):
        how = custom.get((inst.attrs.get("custom_call_target") or "").strip('"'))
        if how is None:
            return OPCODE_RULES["custom-call"].xla(rules, comp, inst)
        return rules.default_terms(comp, inst) if how == "default" else [how]
    rules = {"custom-call": OpcodeRule(xla=custom_call, reason=room.CUSTOM_CALL_REASON)} if custom else {}
    rules |= {op: OpcodeRule(reason=why) for op, why in getattr(room, "DEFAULT_RULE_OPCODES", {}).items()}
    return Counting(backend, room.xla_size, room.array_bytes,
                    lambda s: room.space_name(room.memory_space(s)), room.moves, rules, room.REASONS)


def counting_for(module: HloModule) -> Counting:
    """The counting of the backend ``module`` was compiled for, read from its text
    (``naming.backend_of_module_text``: tiled layouts are the TPU's); XLA:CPU's otherwise."""
    memo = module.entry.memo
    if "backend" not in memo:
        layouts = [module.header] + [str(i.shape) for i in module.entry.instructions]
        memo["backend"] = backend_of_module_text("\n".join(layouts))
    return DEFAULT_COUNTING if memo["backend"] is None else _room_counting(memo["backend"])


@contextmanager
def counted_as(module: HloModule) -> Iterator[Counting]:
    """Walk ``module`` with its backend's counting (``counting_for``)."""
    token = _COUNTING.set(counting_for(module))
    try:
        yield _COUNTING.get()
    finally:
        _COUNTING.reset(token)


def _xla_size(shape: Shape) -> int:
    return _COUNTING.get().xla_size(shape)


def _leaf_sizes(shape: Shape) -> list:
    """GetShapeSize of every leaf (array or token) of a shape, depth first, as XLA's
    ForEachLeafShape visits them; an array is its own single leaf, ``()`` has none."""
    if shape.tuple_shapes is None:
        return [_xla_size(shape)]
    out = []
    for s in shape.tuple_shapes:
        out += _leaf_sizes(s)
    return out


# ---- the opcode table: what each model does with an opcode ----------------------------------
#
# One entry per opcode that either model treats apart from the default (XLA: every leaf of the
# output, then each operand; here: a kernel that reads its operands and writes its result).
# Every walker reads it: the restated rules (_Rules), their float32 replay (_Float32Total), the
# spill-style kernels and the reasons for differences (_Builder, _generic_reason), and the rule
# prose of the write-up (passes.DEFINITIONS).  A new opcode with a rule of its own is one entry.

@dataclass(frozen=True)
class Runs:
    """How an instruction runs computations of its own, whose amounts stand for its own.

    ``computations(inst)``: their names, or None when this instruction runs none;
    ``times(inst)``: how often each runs per execution here (default: once each);
    ``xla_combines``: "sum" (XLA adds each computation's amount once, whatever the trips) or
    "max" (XLA takes the heaviest; here the heaviest by XLA's rules runs, once);
    ``spill_style``: the spill-style model walks them too (False: here the instruction is one
    kernel); ``words``: how often they run, as the write-up states it (None: once)."""
    computations: Callable[[Instruction], list | None]
    times: Callable[[Instruction], list] | None = None
    xla_combines: str = "sum"
    spill_style: bool = True
    words: str | None = None


@dataclass(frozen=True)
class OpcodeRule:
    """One opcode in both byte models.

    ``xla``: HloCostAnalysis' amount, as the terms XLA adds in float, given ``(rules,
    computation, instruction)``; None: the default rule.  ``reason``: why XLA's count differs
    from the spill-style one, in words (a string, printed after the opcode), or a function of
    ``(walker, computation, instruction, nested)`` giving the whole text (None: the generic
    one) where the words need the instruction.  ``moves_nothing``: it names buffers that exist
    or orders work, so it runs no kernel here (True), or a test of ``(computation,
    instruction)`` for the instructions of the opcode that do, stated by ``words`` for the
    write-up.  ``runs``: the computations it runs (``Runs``)."""
    xla: Callable | None = None
    reason: str | Callable | None = None
    moves_nothing: bool | Callable = False
    runs: Runs | None = None
    words: str | None = None

    def runs_no_kernel(self, comp: HloComputation, inst: Instruction) -> bool:
        if callable(self.moves_nothing):
            return self.moves_nothing(comp, inst)
        return self.moves_nothing


def _operand(comp: HloComputation, inst: Instruction, i: int) -> Shape:
    return comp.instruction(inst.operands[i]).shape


def _zero(rules, comp, inst) -> list:
    return [0]


def _while_trips(inst: Instruction) -> list:
    n = trip_count(inst)
    n = 1 if n is None else n
    return [n, n + 1]


# Custom calls that only mark an outlinable block: XLA counts them as 0, any other as -1.
_CALL_MARKERS = ('"__xla_internal_call_marker_before"', '"__xla_internal_call_marker_after"')
_ZERO_MOVES_NOTHING = OpcodeRule(xla=_zero, moves_nothing=True)
_READS_ONLY = "XLA counts only the elements it reads"

OPCODE_RULES: dict[str, OpcodeRule] = {
    # named buffers and ordering: nothing moves in either model
    "parameter": _ZERO_MOVES_NOTHING,
    "constant": _ZERO_MOVES_NOTHING,
    "get-tuple-element": _ZERO_MOVES_NOTHING,
    "bitcast": _ZERO_MOVES_NOTHING,
    "after-all": _ZERO_MOVES_NOTHING,
    "add-dependency": _ZERO_MOVES_NOTHING,
    "domain": _ZERO_MOVES_NOTHING,
    # no kernel here; XLA's default rule counts their result and operands
    "opt-barrier": OpcodeRule(moves_nothing=True),
    "partition-id": OpcodeRule(moves_nothing=True),
    "replica-id": OpcodeRule(moves_nothing=True),
    "tuple": OpcodeRule(  # only the index table is written
        xla=lambda rules, comp, inst: [_xla_size(inst.shape)],
        reason=lambda b, comp, inst, nested: "XLA counts the tuple's index table" if nested else (
            f"tuple: XLA counts its index table ({_xla_size(inst.shape)} bytes); "
            f"here a tuple only gathers pointers and runs no kernel"),
        moves_nothing=True),
    "transpose": OpcodeRule(
        xla=lambda rules, comp, inst: [0] if is_bitcast_transpose(comp, inst)
        else rules.default_terms(comp, inst),
        moves_nothing=lambda comp, inst: is_bitcast_transpose(comp, inst),
        words=(
            "a transpose that is a bitcast by XLA's "
            "ShapeUtil::TransposeIsBitcast test: equal element types, and the transpose's "
            "dimensions taken in the order of the result's minor-to-major layout give the "
            "operand's minor-to-major layout (f32[4,4,128,64]{3,1,2,0} transpose(f32[4,128,4,64]"
            "{3,2,1,0}), dimensions={0,2,1,3} is one). The operand's layout is that of the "
            "instruction the transpose names as its operand, looked up by that name in the "
            "transpose's own computation; a shape printed without a layout has the default one, "
            "{n-1,...,1,0}. Only transpose gets that test: a copy or a reshape is a kernel whatever "
            "its layouts (until a pass such as reshape-decomposer makes it a bitcast).")),
    "fusion": OpcodeRule(
        xla=lambda rules, comp, inst: rules.fusion(inst)[1]["terms"],
        reason=lambda b, comp, inst, nested: _fusion_reason(b.rules, comp, inst)),
    "slice": OpcodeRule(
        xla=lambda rules, comp, inst: [2 * _xla_size(inst.shape)],
        reason=f"{_READS_ONLY}, not the whole operand"),
    "dynamic-slice": OpcodeRule(  # the elements read, written, and the first start index
        xla=lambda rules, comp, inst: [2 * _xla_size(inst.shape) + _xla_size(_operand(comp, inst, 1))],
        reason=f"{_READS_ONLY} (and the first start index), not the whole operand"),
    "dynamic-update-slice": OpcodeRule(
        xla=lambda rules, comp, inst: [2 * _xla_size(_operand(comp, inst, 1))
                                       + _xla_size(_operand(comp, inst, 2))],
        reason="XLA counts the update only; the buffer is updated in place"),
    "gather": OpcodeRule(
        xla=lambda rules, comp, inst: [2 * _xla_size(inst.shape) + _xla_size(_operand(comp, inst, 1))],
        reason=f"{_READS_ONLY} (and the indices), not the whole operand"),
    "scatter": OpcodeRule(
        xla=lambda rules, comp, inst: [rules.scatter_bytes(comp, inst)],
        reason="XLA counts the updates three times (read, and the operand's elements read and "
               "written in place) plus the indices, not the whole operand"),
    "custom-call": OpcodeRule(
        xla=lambda rules, comp, inst: [0] if inst.attrs.get("custom_call_target") in _CALL_MARKERS
        else [-1],
        reason="XLA does not know its cost and reports -1"),
    "triangular-solve": OpcodeRule(  # half of the triangular matrix is read
        xla=lambda rules, comp, inst: [_xla_size(inst.shape), _xla_size(_operand(comp, inst, 0)) / 2,
                                       _xla_size(_operand(comp, inst, 1))],
        reason="XLA counts half of the triangular matrix as read"),
    "cholesky": OpcodeRule(  # half of the matrix read, half of the result written
        xla=lambda rules, comp, inst: [_xla_size(_operand(comp, inst, 0)) / 2,
                                       _xla_size(_operand(comp, inst, 0)) / 2],
        reason="XLA counts half of the matrix read and half of the result written"),
    "infeed": OpcodeRule(
        xla=lambda rules, comp, inst: [sum(_leaf_sizes(inst.shape))],
        reason="XLA counts only the data written, not the token"),
    "outfeed": OpcodeRule(
        xla=lambda rules, comp, inst: [sum(_leaf_sizes(comp.instruction(o).shape))
                                       for o in inst.operands],
        reason="XLA counts only the data read (every array of its operands), no result"),
    "all-reduce": OpcodeRule(xla=lambda rules, comp, inst: rules.all_reduce_terms(comp, inst)),
    "all-reduce-start": OpcodeRule(xla=lambda rules, comp, inst: rules.all_reduce_terms(comp, inst)),
    # computations run in their place
    "call": OpcodeRule(
        runs=Runs(lambda inst: inst.called[:1]),
        reason=lambda b, comp, inst, nested: _call_reason(b, inst, nested)),
    "while": OpcodeRule(
        runs=Runs(lambda inst: [_attr_name(inst, "body"), _attr_name(inst, "condition")],
                  times=_while_trips,
                  words="a while body known_trip_count times (once when its backend_config "
                        "gives none), its condition once more"),
        reason=lambda b, comp, inst, nested: _while_reason(b, inst, nested)),
    "conditional": OpcodeRule(
        runs=Runs(lambda inst: inst.called, xla_combines="max",
                  words="of a conditional's branches the one XLA's rules give the most bytes"),
        reason=lambda b, comp, inst, nested: _conditional_reason(b, inst, nested)),
    "async-start": OpcodeRule(  # written without its computation: see _Rules.wrapped_terms
        xla=lambda rules, comp, inst: rules.wrapped_terms(comp, inst),
        runs=Runs(lambda inst: inst.called[:1] if inst.called else None, spill_style=False),
        reason="XLA counts the work of the computation it starts; here it is a kernel "
               "that reads its operands and writes its result"),
}
_DEFAULT_RULE = OpcodeRule()


def opcode_rule(opcode: str) -> OpcodeRule:
    """The table's entry for ``opcode``: its own, the one of an ``<op>-start`` that XLA wraps in
    a computation of its own (``custom-call-start``: counted as <op> is), or the default."""
    rule = _COUNTING.get().rules.get(opcode) or OPCODE_RULES.get(opcode)
    if rule is not None:
        return rule
    inner = wrapped_opcode(opcode)
    if inner is not None and opcode.endswith("-start"):
        # the reason carries over for custom-call only (-1 whatever wraps it)
        return OpcodeRule(xla=lambda rules, comp, inst: rules.wrapped_terms(comp, inst),
                          reason=OPCODE_RULES["custom-call"].reason if inner == "custom-call"
                          else None)
    return _DEFAULT_RULE


# Instructions that name existing buffers (or order work) and run no kernel.
FREE_OPCODES = frozenset(op for op, r in OPCODE_RULES.items() if r.moves_nothing is True)
# Instructions that run computations in place of a kernel of their own, in the table's order.
RUNS_COMPUTATIONS = tuple(op for op, r in OPCODE_RULES.items() if r.runs and r.runs.spill_style)


# ---- why the two counts differ, in words ---------------------------------------------------

def _generic_reason(comp: HloComputation, inst: Instruction) -> str:
    """Why this instruction's bytes differ between the spill-style model and XLA's rules,
    where its table entry gives no text of its own for the instruction."""
    op = inst.opcode
    rule = opcode_rule(op).reason
    if isinstance(rule, str):
        return f"{op}: {rule}"
    parts = []
    moves_nothing = opcode_rule(op).moves_nothing is True
    if moves_nothing:
        parts.append("XLA counts its result and operands; here it names buffers that exist "
                     "and runs no kernel")
    by_name = comp._by_name or {}
    shapes = [inst.shape] + [by_name[o].shape for o in inst.operands if o in by_name]
    for o in inst.operands:
        shape = by_name[o].shape if o in by_name else None
        if shape is not None and shape.is_tuple and not moves_nothing:
            parts.append(f"operand {o} is a tuple: XLA counts its index table "
                         f"({_xla_size(shape)} B), here its arrays ({shape.byte_size} B)")
    if any(s.is_dynamic for s in shapes):
        parts.append("a bounded-dynamic shape: XLA adds 4 B of size metadata per dimension")
    return f"{op}: " + ("; ".join(parts) if parts else "the rules differ")


def _while_reason(b: _Builder, inst: Instruction, nested: bool) -> str:
    if nested:
        return "nested while"
    n = trip_count(inst)
    once = b.rules.instruction(b.module.entry, inst)
    ours_once = sum(k.bytes_accessed for k in b.kernels if k.entry_instruction == inst.name)
    body = b.module.computations[_attr_name(inst, "body")]
    cond = b.module.computations[_attr_name(inst, "condition")]
    inner = b.inner_differences([body, cond])
    if n is None:
        return (f"while loop with no known trip count: both count one iteration "
                f"(XLA {once:g} bytes, here {ours_once} bytes); the rules differ at "
                + (", ".join(inner) or "no single instruction"))
    text = (f"while loop: XLA counts the body and the condition once ({once:g} bytes); "
            f"here the body runs {n} times and the condition {n + 1} times "
            f"(known_trip_count={n})")
    if inner:
        text += "; within one iteration the rules also differ at " + ", ".join(inner)
    return text


def _call_reason(b: _Builder, inst: Instruction, nested: bool) -> str:
    if nested:
        return "nested call"
    inner = b.inner_differences([b.module.computations[inst.called[0]]])
    return (f"call: its kernels are those of {inst.called[0]}; the rules differ there at "
            + (", ".join(inner) or "no single instruction"))


def _conditional_reason(b: _Builder, inst: Instruction, nested: bool) -> str:
    if nested:
        return "nested conditional"
    heaviest = max(inst.called, key=b.rules.computation)
    inner = b.inner_differences([b.module.computations[heaviest]])
    return (f"conditional: both count the branch that XLA rates heaviest ({heaviest}); "
            f"the rules differ there at " + (", ".join(inner) or "no single instruction"))


def _fusion_reason(rules: _Rules, comp: HloComputation, inst: Instruction) -> str | None:
    _, details = rules.fusion(inst)
    if "custom" in details:
        op, name, n = details["custom"]
        return (f"fusion kCustom: XLA counts only the {op} {name} inside it ({n:g} bytes): "
                f"{opcode_rule(op).reason}")
    parts = []
    for pnum, read, whys in details["operands"]:
        operand = comp.instruction(inst.operands[pnum])
        whole = operand.shape.byte_size
        if read != whole:
            parts.append(f"operand {pnum} ({operand.name}): XLA reads {read} of {whole} "
                         f"bytes ({'; '.join(whys) or 'fused parameter rule'})")
    for kind, n in details["output"]:
        parts.append(f"output: XLA counts {n} of {inst.shape.byte_size} bytes "
                     f"(root is an in-place {kind})")
    for name, n in details["constants"]:
        parts.append(f"XLA adds the fused constant {name} ({n} bytes)")
    if not parts:
        return None
    return f"fusion {inst.fusion_kind}: " + "; ".join(parts)


class _Rules:
    """HloCostAnalysis "bytes accessed", one instruction at a time, for one module.

    ``terms`` gives an instruction's amount as the float additions XLA makes to build it
    (for the float32 replay); ``instruction`` is their exact sum, or the total of the
    computations a while, call, conditional or async-start runs.
    """

    def __init__(self, module: HloModule):
        self.module = module
        self._users: dict[str, dict] = {}
        self._cache: dict[tuple, float] = {}

    def users(self, comp: HloComputation) -> dict:
        # derived from the computation's text alone: kept with the (shared) computation
        users = comp.memo.get("users")
        if users is None:
            users = {i.name: [] for i in comp.instructions}
            for inst in comp.instructions:
                for op in dict.fromkeys(inst.operands):  # a user counts once per operand
                    users[op].append(inst)
            comp.memo["users"] = users
        return users

    def computation(self, name: str) -> float:
        key = ("comp", name)
        if key not in self._cache:
            comp = self.module.computations[name]
            self._cache[key] = sum(self.instruction(comp, i) for i in comp.instructions)
        return self._cache[key]

    def called_computations(self, inst: Instruction):
        """For an instruction whose amount is that of computations it runs (``Runs`` in the
        table): how XLA combines them ("sum" or "max") and their names; None otherwise."""
        runs = opcode_rule(inst.opcode).runs
        if runs is None:
            return None
        names = runs.computations(inst)
        return None if names is None else (runs.xla_combines, names)

    def instruction(self, comp: HloComputation, inst: Instruction) -> float:
        calls = self.called_computations(inst)
        if calls is not None:
            how, names = calls
            amounts = [self.computation(c) for c in names]
            return max(amounts) if how == "max" else sum(amounts)
        return sum(self.terms(comp, inst))

    def terms(self, comp: HloComputation, inst: Instruction) -> list:
        """The amounts XLA adds (in float) to build this instruction's bytes accessed."""
        xla = opcode_rule(inst.opcode).xla
        return self.default_terms(comp, inst) if xla is None else xla(self, comp, inst)

    def all_reduce_terms(self, comp: HloComputation, inst: Instruction) -> list:
        """One integer sum: every leaf of the result, then each operand."""
        return [sum(_leaf_sizes(inst.shape)) +
                sum(_xla_size(_operand(comp, inst, i)) for i in range(len(inst.operands)))]

    def default_terms(self, comp: HloComputation, inst: Instruction) -> list:
        """The default rule's terms, in the order XLA adds them: every leaf of the output,
        then each operand (a tuple operand by its index table)."""
        by_name = comp.by_name
        return _leaf_sizes(inst.shape) + [_xla_size(by_name[o].shape) for o in inst.operands]

    def scatter_bytes(self, comp: HloComputation, inst: Instruction) -> int:
        """Each update is read, its elements of the operand read and written: 3x the
        updates, plus the indices once (variadic: n operands, the indices, n updates)."""
        n = (len(inst.operands) - 1) // 2
        updates = sum(_xla_size(_operand(comp, inst, n + 1 + i)) for i in range(n))
        return 3 * updates + _xla_size(_operand(comp, inst, n))

    def wrapped_terms(self, comp: HloComputation, inst: Instruction) -> list:
        """``<op>-start`` written without its computation: XLA wraps <op> in one, whose
        amount is <op>'s own (operands: the start's; result: element 1 of its shape)."""
        inner_op = wrapped_opcode(inst.opcode) or "custom-call"
        shape = inst.shape.tuple_shapes[1] if inst.shape.is_tuple and \
            len(inst.shape.tuple_shapes) > 1 else inst.shape
        params = [Instruction(f"param.{k}", "parameter", comp.instruction(o).shape, [], [],
                              None, "", "", False, k, str(k))
                  for k, o in enumerate(inst.operands)]
        inner = Instruction(inst.name + ".wrapped", inner_op, shape, [p.name for p in params],
                            [], None, inst._attr_text, inst.line, True, None, inst.operand_text)
        wrapper = HloComputation(inst.name + ".wrapped", params + [inner], inner, False, "")
        wrapper._by_name = {x.name: x for x in wrapper.instructions}
        return self.terms(wrapper, inner)

    def fusion(self, inst: Instruction):
        """(bytes, details): XLA's count for a fusion and what it read/wrote per operand."""
        fused = self.module.computations[inst.called[0]]
        # The count depends on the fusion's shape and the fused computation only (unless that
        # calls further computations), so it is kept with the shared fused computation.
        key = ("xla-fusion", inst)
        if key in fused.memo:
            return fused.memo[key]
        result = self._fusion(inst, fused)
        if not fused.callees:
            fused.memo[key] = result
        return result

    def _fusion(self, inst: Instruction, fused: HloComputation):
        if inst.fusion_kind == "kCustom":
            # a custom fusion with a gather or scatter inside is counted as that one
            # instruction (its own shapes, inside the fusion), nothing else
            for x in fused.instructions:
                if x.opcode in ("gather", "scatter"):
                    n = sum(self.terms(fused, x))
                    details: dict[str, Any] = {
                        "output": [], "constants": [], "operands": [], "terms": [n],
                        "custom": (x.opcode, x.name, n)}
                    return n, details
        root = fused.root
        # "terms": every amount in the order HandleFusion adds it (for its float32 total)
        details = {"output": [], "constants": [], "operands": [], "terms": []}
        total = 0
        # output: every array leaf; an in-place dynamic-update-slice writes only its update
        if not inst.shape.is_tuple:
            if root.opcode == "dynamic-update-slice":
                n = _xla_size(fused.instruction(root.operands[1]).shape)
                details["output"].append(("dynamic-update-slice", n))
            else:
                n = _xla_size(inst.shape)
            total += n
            details["terms"].append(n)
        else:
            for i, leaf in enumerate(inst.shape.tuple_shapes):
                n = self._fusion_output_leaf(fused, root, i, leaf, details)
                total += n
                details["terms"].append(n)
        # constants with more than one element are read from memory
        for c in fused.instructions:
            if c.opcode == "constant" and c.shape.element_count > 1 and not c.shape.is_tuple:
                total += _xla_size(c.shape)
                details["constants"].append((c.name, _xla_size(c.shape)))
                details["terms"].append(_xla_size(c.shape))
        for p in fused.parameters:
            n, why = self.parameter_read(fused, p)
            total += n
            details["terms"].append(n)
            details["operands"].append((p.parameter_number, n, why))
        return total, details

    def _fusion_output_leaf(self, fused, root, i, leaf: Shape, details) -> int:
        if leaf.is_tuple:  # nested tuple: arrays below count fully
            return sum(_xla_size(s) for s in leaf.leaves())
        if root.opcode == "tuple":
            part = fused.instruction(root.operands[i])
            if part.opcode == "dynamic-update-slice":
                n = _xla_size(fused.instruction(part.operands[1]).shape)
                details["output"].append(("dynamic-update-slice", n))
                return n
        return _xla_size(leaf)

    def parameter_read(self, fused: HloComputation, param: Instruction):
        """FusionParameterReadBytes: how much of a fused parameter XLA counts as read.

        A tuple parameter is followed, leaf by leaf, down the first get-tuple-element of each
        index (staying put where there is none), as XLA does."""
        if not param.shape.is_tuple:
            return self._read_bytes(fused, param)
        users = self.users(fused)
        total, whys = 0, []
        for path in _leaf_paths(param.shape):
            node = param
            for index in path:
                for user in users[node.name]:
                    if user.opcode == "get-tuple-element" and \
                            int(user.attrs.get("index", -1)) == index:
                        node = user
                        break
            n, why = self._read_bytes(fused, node)
            total += n
            whys += why
        return total, whys

    def _read_bytes(self, fused: HloComputation, hlo: Instruction):
        size = 0
        whys: list[str] = []
        seen_trivial = False
        whole = _xla_size(hlo.shape)
        for user in self.users(fused)[hlo.name]:
            op = user.opcode
            if op == "fusion":
                nested = self.module.computations[user.called[0]]
                for idx, name in enumerate(user.operands):
                    if name == hlo.name:
                        n, why = self._read_bytes(nested, nested.parameters[idx])
                        size += n
                        whys += why
            elif op == "slice":
                size += _xla_size(user.shape)
                whys.append(f"slice {user.name} reads {_xla_size(user.shape)} bytes")
            elif op == "dynamic-slice":
                if user.operands[0] == hlo.name:
                    size += _xla_size(user.shape)
                    whys.append(f"dynamic-slice {user.name} reads {_xla_size(user.shape)} bytes")
                elif not seen_trivial:
                    seen_trivial = True
                    size += whole
            elif op == "dynamic-update-slice":
                if user.operands[0] != hlo.name:
                    if not seen_trivial:
                        seen_trivial = True
                        size += whole
                else:
                    whys.append(f"updated in place by {user.name}, not read")
            elif op in ("broadcast", "reshape"):
                size += whole
                whys.append(f"{op} {user.name} counts a read of its own")
            elif not seen_trivial:
                seen_trivial = True
                size += whole
        return size, whys


def is_bitcast_transpose(comp: HloComputation, inst: Instruction) -> bool:
    """A transpose whose layouts make it a relabelling of the same bytes (XLA's
    ShapeUtil::TransposeIsBitcast): the permutation maps the output's minor-to-major order
    onto the operand's."""
    if inst.opcode != "transpose" or "dimensions" not in inst.attrs:
        return False
    operand = comp.instruction(inst.operands[0]).shape
    if operand.element_type != inst.shape.element_type:
        return False
    try:
        perm = [int(d) for d in inst.attrs["dimensions"].strip("{}").split(",") if d.strip()]
    except ValueError:
        raise ValueError(f"transpose {inst.name}: dimensions={inst.attrs['dimensions']} is not "
                         f"a list of dimension numbers") from None
    out_order = inst.shape.minor_to_major
    if len(perm) != len(out_order):
        return False
    return tuple(perm[d] for d in out_order) == operand.minor_to_major


def _leaf_paths(shape: Shape, prefix: tuple = ()):
    """Shape indices of the array leaves of a tuple shape, depth first."""
    for i, sub in enumerate(shape.tuple_shapes or ()):
        if sub.is_tuple:
            yield from _leaf_paths(sub, prefix + (i,))
        else:
            yield prefix + (i,)


def _attr_name(inst: Instruction, key: str) -> str:
    return inst.attrs[key].lstrip("%")


def xla_rule_bytes(module: HloModule) -> dict:
    """XLA's "bytes accessed" per entry instruction, by the rules of HloCostAnalysis."""
    with counted_as(module):
        rules = _Rules(module)
        return {i.name: rules.instruction(module.entry, i) for i in module.entry.instructions}


# ---- XLA's own arithmetic: float32, in visiting order -----------------------------------------

def xla_visit_order(comp: HloComputation) -> list:
    """The order in which XLA's HloComputation::Accept visits ``comp``: first each unreachable
    root (an instruction nobody uses, other than the root, in instruction order), then the
    root, each one depth first and post order, operands (then control predecessors) in order."""
    order: list[Instruction] = []
    seen: set[str] = set()
    used: set[str] = set()
    for inst in comp.instructions:
        used.update(inst.operands)
        used.update(_control_predecessors(inst))
    for start in [i for i in comp.instructions if i.name not in used and i is not comp.root] \
            + [comp.root]:
        if start.name in seen:
            continue
        stack = [(start, False)]
        while stack:
            inst, expanded = stack.pop()
            if inst.name in seen:
                continue
            if expanded:
                seen.add(inst.name)
                order.append(inst)
                continue
            stack.append((inst, True))
            children = inst.operands + _control_predecessors(inst)
            for child in reversed(children):
                if child not in seen:
                    stack.append((comp.instruction(child), False))
    return order


def _control_predecessors(inst: Instruction) -> list:
    value = inst.attrs.get("control-predecessors")
    if not value:
        return []
    return [v.strip().lstrip("%") for v in value.strip("{}").split(",") if v.strip()]


class _Float32Total:
    """"bytes accessed" added up the way HloCostAnalysis adds it: in float32.

    XLA keeps every property as a C++ float.  Each instruction's amount is built term by term
    (output, then operands; for a fusion: outputs, large constants, parameters) and added to
    the computation's total in visiting order; a call, while or conditional brings in the
    float32 total of its computations.  Below 2**24 bytes float32 holds every integer and the
    result is exact; above it the total (and a large instruction's own amount) rounds to a
    multiple of a power of two, and the rounding depends on the order of the additions.
    """

    def __init__(self, rules: _Rules):
        self.rules = rules
        self._totals: dict[str, np.float32] = {}

    def computation(self, name: str) -> np.float32:
        if name not in self._totals:
            comp = self.rules.module.computations[name]
            total = np.float32(0)
            for inst in xla_visit_order(comp):
                total = np.float32(total + self.instruction(comp, inst))
            self._totals[name] = total
        return self._totals[name]

    def instruction(self, comp: HloComputation, inst: Instruction) -> np.float32:
        calls = self.rules.called_computations(inst)
        if calls is not None:
            how, names = calls
            totals = [self.computation(c) for c in names]
            if how == "max":
                return max(totals)
            total = np.float32(0)  # a fresh total, plus each computation's (body, condition)
            for t in totals:
                total = np.float32(total + t)
            return total
        total = np.float32(0)
        for t in self.rules.terms(comp, inst):
            total = np.float32(total + np.float32(t))
        return total


def xla_float32_total(module: HloModule) -> float:
    """XLA's "bytes accessed" of ``module`` with XLA's own float32 rounding: what
    ``xla_private.cost_analysis`` reports, where ``sum(xla_rule_bytes(module).values())``
    is the exact integer."""
    with counted_as(module):
        return float(_Float32Total(_Rules(module)).computation(module.entry.name))


def trip_count(inst: Instruction) -> int | None:
    """The while loop's trip count that XLA proved (``known_trip_count`` in backend_config)."""
    config = inst.attrs.get("backend_config")
    if not config:
        return None
    try:
        n = json.loads(config).get("known_trip_count", {}).get("n")
    except (ValueError, AttributeError):
        return None
    return int(n) if n is not None else None


# ---- the spill-style model -----------------------------------------------------------------

class ModuleTraffic:
    """Spill-style traffic of a module: kernels, totals, temporaries, and XLA's view of it.

    Example (``d`` a Dump; ``module_traffic(parse_module(text))`` for any HLO text)::

        r = d.traffic_report
        r.bytes_accessed == d.traffic                # bytes read plus written, an int
        [k.name for k in r.kernels]                  # KernelTraffic, one per kernel
        r.compare_with_xla(d.compiled.cost_analysis())   # where XLA counts otherwise, and why
    """

    def __init__(self, module: HloModule, kernels: list, temporaries: list | None,
                 xla_rules: dict, notes: dict):
        self.module = module
        self.kernels = kernels
        self.temporaries = temporaries if temporaries is not None else []
        self.has_buffer_assignment = temporaries is not None
        self.xla_rules = xla_rules  # entry instruction -> XLA's bytes by the restated rules
        self.notes = notes          # entry instruction -> why our count differs in kind
        self.xla_cost: dict | None = None
        # who counted xla_cost, where it is not XLA:CPU's own cost analysis of the text (a TPU
        # module's: its rules restated, tpu/counting.py)
        self.xla_cost_by: str | None = None

    @property
    def bytes_read(self) -> int:
        return sum(k.total_read for k in self.kernels)

    @property
    def bytes_written(self) -> int:
        return sum(k.total_written for k in self.kernels)

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    def bytes_by_memory_space(self) -> dict | None:
        """memory space -> (bytes read, bytes written) over every kernel and execution, where
        the backend's memory has spaces (a TPU: "HBM", "VMEM", ...); None on the CPU."""
        if counting_for(self.module).space is None:
            return None
        out: dict[str, list] = {}
        for k in self.kernels:
            for space, (r, w) in (k.spaces or {}).items():
                rw = out.setdefault(space, [0, 0])
                rw[0] += r * k.executions
                rw[1] += w * k.executions
        return {space: tuple(rw) for space, rw in sorted(out.items())}

    @property
    def hbm_bytes(self) -> int:
        """Bytes the kernels read from and write to HBM (a TPU's memory space 0): what
        round-trips through HBM, the seed's fusion question.  ValueError on a backend whose
        memory has no spaces."""
        spaces = self.bytes_by_memory_space()
        if spaces is None:
            raise ValueError(f"{self.module.source or self.module.name}: a module whose memory has no "
                             f"spaces (not a TPU module): it has no HBM bytes apart")
        return _hbm(spaces)

    @property
    def temp_bytes(self) -> int:
        return sum(a.size for a in self.temporaries)

    @property
    def flops(self) -> float | None:
        """XLA's flop count (from cost analysis), when ``with_xla_cost`` was given one."""
        return None if self.xla_cost is None else self.xla_cost.get("flops")

    @property
    def transcendentals(self) -> float | None:
        return None if self.xla_cost is None else self.xla_cost.get("transcendentals")

    def with_xla_cost(self, cost: dict) -> ModuleTraffic:
        """Attach XLA's cost analysis (``xla_private.cost_analysis``) for flops and comparison."""
        self.xla_cost = dict(cost)
        return self

    def per_entry_instruction(self) -> dict:
        """Our bytes accessed, summed over the kernels of each entry instruction."""
        out = {i.name: 0 for i in self.module.entry.instructions}
        for k in self.kernels:
            out[k.entry_instruction] += k.total_read + k.total_written
        return out

    def compare_with_xla(self, cost: dict | None = None) -> list:
        """Every entry instruction where this model and XLA's rules differ, and why.

        ``cost`` is XLA's cost analysis of the same module (defaults to the one attached with
        ``with_xla_cost``).  When the restated rules (exact integers) do not add up to XLA's
        own "bytes accessed", a last Discrepancy carries the remainder: ``(float32 rounding)``
        when XLA's float32 arithmetic, replayed in its visiting order, gives its total exactly
        (XLA rounds sums above 2**24 bytes), ``(unexplained)`` otherwise.
        """
        with counted_as(self.module):
            return self._compare_with_xla(cost if cost is not None else self.xla_cost)

    def _compare_with_xla(self, cost: dict | None) -> list:
        ours = self.per_entry_instruction()
        found = []
        for inst in self.module.entry.instructions:
            a, b = ours[inst.name], self.xla_rules[inst.name]
            if a != b:
                found.append(Discrepancy(inst.name, a, b, self.notes.get(inst.name) or
                                         _generic_reason(self.module.entry, inst)))
        if cost is not None:
            rule_total = sum(self.xla_rules.values())
            # XLA leaves the key out when nothing was counted (an infeed-only module): 0
            xla_total = cost.get("bytes accessed", 0.0)
            if rule_total != xla_total:
                rounded = xla_float32_total(self.module)
                if rounded == xla_total:
                    found.append(Discrepancy(
                        "(float32 rounding)", rule_total, xla_total,
                        f"XLA's HloCostAnalysis adds bytes in float32, which above 2**24 "
                        f"cannot hold every integer: replaying its additions in its order "
                        f"gives its {xla_total:.0f} B, where the exact sum of the same "
                        f"per-instruction rules is {rule_total} B"))
                else:
                    found.append(Discrepancy(
                        "(unexplained)", rule_total, xla_total,
                        f"XLA's HloCostAnalysis total differs from its rules as restated here "
                        f"(exact sum {rule_total} B; with XLA's float32 rounding {rounded:.0f} B)"))
        return found

    def as_dict(self) -> dict:
        d: dict[str, Any] = {"module": self.module.name, "source": self.module.source,
             "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
             "bytes_accessed": self.bytes_accessed,
             "kernels": [k.as_dict() for k in self.kernels]}
        spaces = self.bytes_by_memory_space()
        if spaces is not None:
            d["backend"] = counting_for(self.module).backend
            d["bytes_by_memory_space"] = {space: {"read": r, "written": w} for space, (r, w) in spaces.items()}
            d["hbm_bytes"] = _hbm(spaces)
        if self.has_buffer_assignment:
            d["temp_bytes"] = self.temp_bytes
            d["temporaries"] = [{"allocation": a.index, "size": a.size,
                                 "values": [v.name + (v.index if v.index != "{}" else "")
                                            for v in a.values]} for a in self.temporaries]
        if self.xla_cost is not None:
            d["xla"] = {"bytes_accessed": self.xla_cost.get("bytes accessed", 0.0),
                        "flops": self.flops, "transcendentals": self.transcendentals}
            d["discrepancies"] = [x.as_dict() for x in self.compare_with_xla()]
        return d


def _hbm(spaces: dict) -> int:
    """Bytes read plus written in HBM, of ``bytes_by_memory_space``'s answer."""
    return sum(spaces.get("HBM", (0, 0)))


def instruction_kernels(module: HloModule, comp: HloComputation, inst: Instruction) -> list[KernelTraffic]:
    """The kernels one instruction of ``comp`` runs, with their traffic (a fusion is one
    kernel; a loop, call or conditional runs the kernels of its computations).  The
    per-pass analysis uses this to re-account only the instructions a pass changed."""
    with counted_as(module):
        builder = _Builder(module)
        builder.instruction(comp, inst, 1, "", inst.name)
        return builder.kernels


class _Builder:
    def __init__(self, module: HloModule):
        self.module = module
        self.rules = _Rules(module)
        self.kernels: list[KernelTraffic] = []
        self.notes: dict[str, str] = {}

    def kernel(self, comp: HloComputation, inst: Instruction, executions: int, prefix: str,
               entry_name: str) -> None:
        by_name = comp.by_name
        shapes = [by_name[o].shape for o in inst.operands]
        counting = _COUNTING.get()
        moved = counting.moves(comp, inst) if counting.moves is not None else None
        reads, writes = moved if moved is not None else (shapes, [inst.shape])
        size = counting.array_bytes
        spaces: dict | None = None
        if counting.space is not None:
            moved_in: dict[str, list] = {}
            for k, group in ((0, reads), (1, writes)):
                for leaf in (leaf for s in group for leaf in s.leaves()):
                    moved_in.setdefault(counting.space(leaf), [0, 0])[k] += size(leaf)
            spaces = {space: tuple(rw) for space, rw in sorted(moved_in.items())}
        self.kernels.append(KernelTraffic(
            inst.name, inst.opcode, inst.fusion_kind, sum(size(s) for s in reads),
            sum(size(s) for s in writes), shapes, inst.shape, executions, prefix + inst.name,
            entry_name, spaces))

    def computation(self, comp: HloComputation, executions: int, prefix: str,
                    entry_name: str | None) -> None:
        for inst in comp.instructions:
            self.instruction(comp, inst, executions, prefix, entry_name or inst.name)

    def instruction(self, comp, inst, executions, prefix, entry_name) -> None:
        rule = opcode_rule(inst.opcode)
        if rule.runs_no_kernel(comp, inst):
            return
        runs = rule.runs
        names = runs.computations(inst) if runs is not None and runs.spill_style else None
        if runs is None or names is None:
            self.kernel(comp, inst, executions, prefix, entry_name)
            return
        times = runs.times(inst) if runs.times is not None else [1] * len(names)
        if runs.xla_combines == "max":
            # which one runs is data-dependent: count the heaviest, as XLA does
            amounts = [self.rules.computation(c) for c in names]
            k = amounts.index(max(amounts))
            names, times = [names[k]], [times[k]]
        for name, n in zip(names, times):
            self.computation(self.module.computations[name], executions * n,
                             prefix + inst.name + "/", entry_name)

    def explain(self, inst: Instruction) -> str | None:
        """Why this entry instruction's bytes differ between the two models, where the
        backend's counting or the opcode's table entry words it for the instruction (else
        ``_generic_reason`` does)."""
        own = _COUNTING.get().reasons.get(inst.opcode)
        if own:
            return own
        reason = opcode_rule(inst.opcode).reason
        return reason(self, self.module.entry, inst, False) if callable(reason) else None

    def inner_differences(self, comps: list) -> list:
        """'name (ours N, XLA M: why)' for each instruction of ``comps`` where the models differ."""
        out = []
        for comp in comps:
            for inst in comp.instructions:
                xla = self.rules.instruction(comp, inst)
                sub = _Builder(self.module)
                sub.instruction(comp, inst, 1, "", inst.name)
                ours = sum(k.total_read + k.total_written for k in sub.kernels)
                if ours != xla:
                    reason = opcode_rule(inst.opcode).reason
                    why = reason(self, comp, inst, True) if callable(reason) else None
                    out.append(f"{inst.name} (ours {ours}, XLA {xla:g}: "
                               f"{why or _generic_reason(comp, inst)})")
        return out


def module_traffic(module: HloModule, *, buffer_assignment_text: str | None = None,
                   xla_cost: dict | None = None, buffer_assignment_source: str | None = None) -> ModuleTraffic:
    """Spill-style traffic of ``module``; temporaries from its buffer assignment when given.

    ``xla_cost`` (``xla_private.cost_analysis`` of the same text) adds XLA's flops and its
    bytes-accessed total for ``compare_with_xla``.  ``buffer_assignment_source``: the buffer
    assignment's own file, which its errors name (by default the module's, marked so).
    """
    with counted_as(module):
        b = _Builder(module)
        b.computation(module.entry, 1, "", None)
        rules = {i.name: b.rules.instruction(module.entry, i) for i in module.entry.instructions}
        notes = {}
        for inst in module.entry.instructions:
            reason = b.explain(inst)
            if reason:
                notes[inst.name] = reason
    temporaries = None
    if buffer_assignment_text is not None:
        src = buffer_assignment_source or (module.source or module.name) + " (buffer assignment)"
        temporaries = [a for a in parse_buffer_assignment(buffer_assignment_text, source=src)
                       if a.is_temp]
    traffic = ModuleTraffic(module, b.kernels, temporaries, rules, notes)
    if xla_cost is not None:
        traffic.with_xla_cost(xla_cost)
    return traffic
