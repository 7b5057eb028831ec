"""cost_model.py: the kernel cost model (pytest-dumpref, as it ran), on its own, with the rates
it reads from a timing run's calibration kernels and the HLO and buffer-assignment readers it
uses (cut from pytest_dumpref/xla/cpu/cost_model.py, calibrate.py, hlo.py, shapes.py, traffic.py
and pytest_dumpref/timing.py).  Plain Python, no jax:

    python cost_model.py run.json FILE...

run.json: what timed.py printed (its calibration kernels give this run's rates); FILE: an
optimized module (*.cpu_after_optimizations.txt) with the -buffer-assignment.txt XLA writes
beside it.  Prints each file's predicted time per call, in microseconds, to full precision.
"""
from __future__ import annotations

import bisect
import functools
import gc
import glob
import itertools
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from itertools import chain
from pathlib import Path

cost_model = sys.modules[__name__]  # pytest_dumpref.xla.cpu.cost_model: its definitions are listed here
timing = sys.modules[__name__]  # pytest_dumpref.timing: its definitions are listed here


# ---- from pytest_dumpref/xla/shapes.py ----------------------------------------------------

# Bits per element of every XLA primitive type, as XLA's primitive_util::BitWidth gives them.
# pred occupies a whole byte in memory.  token has no storage.  opaque is a pointer.
PRIMITIVE_BITS: dict[str, int] = {
    "pred": 8,
    "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4,
    "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f8e8m0fnu": 8,
    "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8,
    "f8e4m3fnuz": 8, "f8e3m4": 8,
    "token": 0, "opaque": 64,
}

# element_size_in_bits in a layout, e.g. {0:E(4)}: sub-byte types packed in memory
_ELEMENT_BITS = re.compile(r"E\((\d+)\)")

class Shape:
    """An XLA shape: an array (element type, dims, optional layout) or a tuple of shapes.

    ``byte_size`` is the storage of the data: for an array, what XLA's
    ShapeUtil::ByteSizeOf gives (elements x byte width of the type, or
    ceil(elements x element_size_in_bits / 8) when the layout packs sub-byte elements with
    ``E(n)``); for a tuple, the sum over its leaves (not the tuple's index table; see
    ``xla_byte_size`` for XLA's convention).  Dynamic dimensions (``<=8``) count at their bound.

    Example::

        s = parse_shape("(f32[64,128]{1,0}, s32[])")
        s.is_tuple, s.byte_size                      # (True, 32772)
        [str(x) for x in s.leaves()]                 # ['f32[64,128]{1,0}', 's32[]']
        s.tuple_shapes[0].dims                       # (64, 128)
    """

    __slots__ = ("element_type", "dims", "layout", "tuple_shapes", "dynamic_dims", "_text",
                 "_bytes", "_xla_bytes")
    _bytes: int | None
    _xla_bytes: int | None

    def __init__(self, element_type: str, dims: tuple = (), layout: str | None = None,
                 tuple_shapes: list | None = None, dynamic_dims: tuple = (), text: str | None = None):
        self.element_type = element_type
        self.dims = dims
        self.layout = layout
        self.tuple_shapes = tuple_shapes
        self.dynamic_dims = dynamic_dims  # indices of dims that are bounds (<=n) or unknown (?)
        self._text = text
        self._bytes = None
        self._xla_bytes = None

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def is_dynamic(self) -> bool:
        """Any dimension bounded (``<=n``) or unknown (``?``), at any depth."""
        if self.tuple_shapes is not None:
            return any(s.is_dynamic for s in self.tuple_shapes)
        return bool(self.dynamic_dims)

    @property
    def element_count(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def byte_size(self) -> int:
        if self._bytes is None:
            if self.tuple_shapes is not None:
                self._bytes = sum(s.byte_size for s in self.tuple_shapes)
            else:
                self._bytes = _array_bytes(self)
        return self._bytes

    @property
    def minor_to_major(self) -> tuple:
        """The layout's dimension order, minor first; XLA's default when no layout is printed."""
        if self.layout and len(self.layout) > 2:
            order = self.layout[1:-1].split(":", 1)[0]
            if order.strip():
                return tuple(int(d) for d in order.split(","))
        return tuple(range(len(self.dims) - 1, -1, -1))

    def xla_byte_size(self, pointer_size: int = 8) -> int:
        """ShapeUtil::ByteSizeOf(shape, pointer_size): a tuple is its index table only."""
        if pointer_size == 8:  # the common case, asked for once per instruction: remember it
            if self._xla_bytes is None:
                self._xla_bytes = 8 * len(self.tuple_shapes) if self.tuple_shapes is not None \
                    else self.byte_size
            return self._xla_bytes
        if self.tuple_shapes is not None:
            return pointer_size * len(self.tuple_shapes)
        return self.byte_size

    def leaves(self):
        """The array shapes of a (nested) tuple, depth first; an array is its own leaf."""
        if self.tuple_shapes is None:
            yield self
        else:
            for s in self.tuple_shapes:
                yield from s.leaves()

    def __str__(self) -> str:
        if self._text is None:
            if self.tuple_shapes is not None:
                self._text = "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
            else:
                dims = ",".join(("<=" if i in self.dynamic_dims else "") + str(d)
                                for i, d in enumerate(self.dims))
                self._text = f"{self.element_type}[{dims}]{self.layout or ''}"
        return self._text

    def __repr__(self) -> str:
        return f"Shape({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Shape) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

def _array_bytes(shape: Shape) -> int:
    et = shape.element_type
    if et == "token":
        return 0
    if et == "opaque":
        return 8
    n = shape.element_count
    if shape.layout:
        m = _ELEMENT_BITS.search(shape.layout)
        if m and int(m.group(1)):
            return -(-n * int(m.group(1)) // 8)
    bits = PRIMITIVE_BITS[et]
    return n * ((bits + 7) // 8)


# ---- from pytest_dumpref/xla/shape_inference.py -------------------------------------------

_SAME_AS_OPERAND0 = frozenset("""
abs ceil cbrt copy cosine count-leading-zeros erf exponential exponential-minus-one floor log
log-plus-one logistic negate not popcnt round-nearest-afz round-nearest-even rsqrt sign sine
sqrt tan tanh add subtract multiply divide maximum minimum power remainder and or xor
shift-left shift-right-arithmetic shift-right-logical atan2 mulhi reverse opt-barrier domain
add-dependency acos acosh asin asinh atanh cosh sinh while
""".split())

_COMPLEX_PART = {"c64": "f32", "c128": "f64"}

def _array(et: str, dims, dynamic=()) -> Shape:
    return Shape(et, tuple(dims), None, None, tuple(dynamic))

def int_list(value: str | None) -> list[int]:
    """The integers of an HLO attribute such as ``dimensions={1,0}`` (None: none)."""
    if not value:
        return []
    return [int(v) for v in value.strip("{}").split(",") if v.strip()]

def infer_shape(inst, operand_shapes: list) -> Shape:
    """The result shape of ``inst`` (an Instruction without one) from its operands' shapes."""
    op = inst.opcode
    if any(s is None for s in operand_shapes):
        raise ValueError("an operand's shape is unknown")
    if op in ("after-all",):
        return Shape("token", ())
    if op in ("partition-id", "replica-id"):
        return Shape("u32", ())
    if op == "tuple":
        return Shape("tuple", (), None, list(operand_shapes))
    if not operand_shapes:
        raise ValueError(f"{op} without operands")
    a = operand_shapes[0]
    if op in _SAME_AS_OPERAND0:
        return a
    if op in ("is-finite", "compare"):
        return _array("pred", a.dims, dynamic=a.dynamic_dims)
    if op in ("real", "imag"):
        return _array(_COMPLEX_PART.get(a.element_type, a.element_type), a.dims,
                      dynamic=a.dynamic_dims)
    if op == "complex":
        return _array("c128" if a.element_type == "f64" else "c64", a.dims,
                      dynamic=a.dynamic_dims)
    if op in ("select", "clamp"):
        return operand_shapes[1]
    if op == "get-tuple-element":
        if not a.is_tuple:
            raise ValueError("get-tuple-element of a non-tuple")
        return a.tuple_shapes[int(inst.attrs.get("index", "0"))]
    if op == "transpose":
        perm = int_list(inst.attrs.get("dimensions"))
        return _array(a.element_type, [a.dims[p] for p in perm])
    if op == "reduce":
        drop = set(int_list(inst.attrs.get("dimensions")))
        half = len(operand_shapes) // 2
        outs = [_array(s.element_type, [d for k, d in enumerate(s.dims) if k not in drop])
                for s in operand_shapes[:half]]
        return outs[0] if half == 1 else Shape("tuple", (), None, outs)
    if op == "concatenate":
        (dim,) = int_list(inst.attrs.get("dimensions"))
        dims = list(a.dims)
        dims[dim] = sum(s.dims[dim] for s in operand_shapes)
        return _array(a.element_type, dims)
    if op == "dot":
        b = operand_shapes[1]
        lb, rb = int_list(inst.attrs.get("lhs_batch_dims")), int_list(inst.attrs.get("rhs_batch_dims"))
        lc = int_list(inst.attrs.get("lhs_contracting_dims"))
        rc = int_list(inst.attrs.get("rhs_contracting_dims"))
        dims = [a.dims[d] for d in lb]
        dims += [d for k, d in enumerate(a.dims) if k not in lb and k not in lc]
        dims += [d for k, d in enumerate(b.dims) if k not in rb and k not in rc]
        return _array(a.element_type, dims)
    raise ValueError(f"shape inference for {op} is not restated here; write the result shape")


# ---- from pytest_dumpref/xla/hlo.py -------------------------------------------------------

class HloParseError(ValueError):
    """The text is not (complete) HLO.  The message names the source, line and column."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 column: int | None = None):
        self.source = source
        self.line = line
        self.column = column
        self.reason = message
        where = source or "<hlo text>"
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {message}")

# Every opcode XLA's HloOpcode knows, by its text name (xla/hlo/ir/hlo_opcode.h).  Besides
# these, "<op>-start", "<op>-update" and "<op>-done" wrap <op> in an async computation.
OPCODES = frozenset("""
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start
all-reduce all-reduce-done all-reduce-start all-to-all and asin asinh async-done async-start
async-update atan2 atanh batch-norm-grad batch-norm-inference batch-norm-training bitcast
bitcast-convert broadcast call cbrt ceil cholesky clamp count-leading-zeros
collective-broadcast collective-permute collective-permute-done collective-permute-start
compare complex concatenate conditional constant convert convolution copy copy-done
copy-start cosine cosh custom-call divide domain dot dynamic-reshape dynamic-slice
dynamic-update-slice erf exponential exponential-minus-one fft floor fusion gather
get-dimension-size get-tuple-element imag infeed iota is-finite log log-plus-one logistic
map maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter
partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce
reduce-precision reduce-scatter reduce-window remainder replica-id reshape reverse rng
rng-bit-generator rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt
scaled-dot scan scatter select select-and-scatter send send-done set-dimension-size
shift-left shift-right-arithmetic shift-right-logical sign sine sinh slice sort sqrt
stochastic-convert subtract tan tanh topk transpose triangular-solve tuple while xor
""".split())

# Opcodes that have start/done forms of their own and cannot be wrapped (XLA refuses them).
_NOT_WRAPPABLE = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "recv",
                            "send"})

def wrapped_opcode(opcode: str) -> str | None:
    """For an async-wrapped opcode such as ``custom-call-start``, the wrapped one."""
    for suffix in ("-start", "-update", "-done"):
        if opcode.endswith(suffix) and opcode not in OPCODES:
            inner = opcode[:-len(suffix)]
            return inner if inner in OPCODES and inner not in _NOT_WRAPPABLE else None
    return None

def _known_opcode(opcode: str) -> bool:
    return opcode in OPCODES or wrapped_opcode(opcode) is not None

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")

# a layout: minor-to-major dimension numbers, then optionally ':' and tiling, memory space...
_LAYOUT = re.compile(r"\{\s*(?:\d+(?:\s*,\s*\d+)*)?\s*(?::[^{}]*)?\}")

@functools.lru_cache(maxsize=65536)
def parse_shape(text: str) -> Shape:
    """Parse a shape such as ``f32[64,128]{1,0}``, ``(s32[], bf16[<=8])`` or ``token[]``."""
    if "/*" in text:
        text = _strip_comments(text)
    text = text.strip()
    shape, end = _parse_shape_at(text, 0)
    if end != len(text):
        raise ValueError(f"trailing text after shape in {text!r}")
    return shape

def _parse_shape_at(text: str, pos: int) -> tuple[Shape, int]:
    """Parse one shape starting at ``pos``; return it and the index just past it."""
    if pos < len(text) and text[pos] == "(":
        start = pos
        pos += 1
        elements = []
        n = len(text)
        while pos < n and text[pos] in " \t\n":
            pos += 1
        if pos < n and text[pos] == ")":
            return Shape("tuple", (), None, [], text=text[start:pos + 1]), pos + 1
        while True:
            s, pos = _parse_shape_at(text, pos)
            elements.append(s)
            while pos < n and text[pos] in " \t\n":
                pos += 1
            if pos < n and text[pos] == ",":
                pos += 1
                while pos < n and text[pos] in " \t\n":
                    pos += 1
            elif pos < n and text[pos] == ")":
                pos += 1
                return Shape("tuple", (), None, elements, text=text[start:pos]), pos
            else:
                raise ValueError(f"bad tuple shape {text[start:start + 60]!r}")
    if text.startswith("b(", pos):  # a buffer: its storage is that of the array inside
        inner, end = _parse_shape_at(text, pos + 2)
        if text[end:end + 1] != ")" or inner.is_tuple:
            raise ValueError(f"bad buffer shape {text[pos:pos + 40]!r}")
        return Shape(inner.element_type, inner.dims, inner.layout, None, inner.dynamic_dims,
                     text=text[pos:end + 1]), end + 1
    m = _ARRAY_SHAPE.match(text, pos)
    if not m:
        raise ValueError(f"bad shape {text[pos:pos + 40]!r}")
    et, dims_text, layout = m.group(1), m.group(2), m.group(3)
    if layout is not None and not _LAYOUT.fullmatch(layout):
        raise ValueError(f"bad layout in shape {m.group(0)!r}")
    if et not in PRIMITIVE_BITS:
        raise ValueError(f"unknown element type {et!r} in shape {m.group(0)!r}")
    dims, dynamic = [], []
    if dims_text.strip():
        try:
            for i, d in enumerate(dims_text.split(",")):
                d = d.strip()
                if d.startswith("<="):
                    dynamic.append(i)
                    d = d[2:]
                elif d == "?":  # unbounded dynamic dimension: no storage size is known
                    dynamic.append(i)
                    d = "0"
                dims.append(int(d))
        except ValueError:
            raise ValueError(f"bad dimensions in shape {m.group(0)!r}") from None
    return Shape(et, tuple(dims), layout, None, tuple(dynamic), text=m.group(0)), m.end()

# XLA prints /*index=N*/ before every fifth element of long tuples; nothing else in a dump is
# a comment, so that one form is removed without looking for strings.
_INDEX_MARKER = re.compile(r"/\*index=\d+\*/")

_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|/\*.*?\*/|//[^\n]*', re.S)

def _drop_comment(m) -> str:
    s = m.group(0)
    if s[0] == '"':
        return s
    if s[1] == "*":  # keep the line numbering of what follows a comment over several lines
        return "\n" * s.count("\n") or " "
    return ""

def _strip_comments(text: str) -> str:
    """Text without ``/* ... */`` and ``// ...`` comments (outside quoted strings), as
    XLA's lexer skips them; newlines inside a block comment are kept."""
    if "/*index=" in text:
        text = _INDEX_MARKER.sub("", text)
    if "/*" not in text:
        if "//" not in text:
            return text
        # only line comments ("//" is common inside quoted source paths): the lines that
        # hold one, each on its own
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if "//" in line:
                if '"' in line:
                    lines[i] = _STRING_OR_COMMENT.sub(_drop_comment, line).rstrip()
                else:
                    lines[i] = line[:line.index("//")].rstrip()
        return "\n".join(lines)
    return _STRING_OR_COMMENT.sub(_drop_comment, text)

_NESTING = re.compile(r'[(){}\[\]"\\,]')

def _split_top(text: str) -> list[str]:
    """Split at ``,`` outside (), {}, [] and quoted strings; parts are stripped."""
    if not any(c in text for c in '({["'):
        return [p.strip() for p in text.split(",")]
    parts, depth, in_str, start, skip = [], 0, False, 0, -1
    for m in _NESTING.finditer(text):
        tok, i = m.group(0), m.start()
        if i == skip:  # the character right after a backslash inside a string
            continue
        if in_str:
            if tok == "\\":
                skip = i + 1
            elif tok == '"':
                in_str = False
            continue
        if tok == '"':
            in_str = True
        elif tok in "({[":
            depth += 1
        elif tok in ")}]":
            depth -= 1
        elif tok == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts

def _matching_paren(text: str, open_pos: int) -> int:
    """Index of the ')' closing the '(' at ``open_pos`` (quotes respected), or -1."""
    close = text.find(")", open_pos + 1)
    if close < 0:
        return -1
    inner = text[open_pos + 1:close]
    if "(" not in inner and '"' not in inner:
        return close
    return _closing(text, open_pos, "(", ")")

def _closing(text: str, open_pos: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` matching the ``opener`` at ``open_pos``, skipping quoted
    strings (with their backslash escapes), or -1 when it is never closed."""
    depth, in_str, i, n = 0, False, open_pos, len(text)
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1

def _open_brackets(text: str) -> int:
    """How many (, { and [ of ``text`` are still open at its end (quotes respected)."""
    if '"' not in text:
        return (text.count("(") + text.count("{") + text.count("[")
                - text.count(")") - text.count("}") - text.count("]"))
    depth, in_str, skip = 0, False, -1
    for m in _NESTING.finditer(text):
        tok, i = m.group(0), m.start()
        if i == skip:
            continue
        if in_str:
            if tok == "\\":
                skip = i + 1
            elif tok == '"':
                in_str = False
        elif tok == '"':
            in_str = True
        elif tok in "({[":
            depth += 1
        elif tok in ")}]":
            depth -= 1
    return depth

# Attributes whose value names computations that an instruction calls.
_CALLING_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
                  "true_computation", "false_computation", "called_computations",
                  "select", "scatter", "comparator", "async_computation")

_CALLED = re.compile(r"(?:^|,)\s*(" + "|".join(_CALLING_ATTRS) +
                     r")=(\{[^}]*\}|%?[A-Za-z_][\w.\-]*)")

_KIND = re.compile(r"(?:^|,)\s*kind=(\w+)")

# Opcodes whose parenthesised text is not a list of operand names.
_NON_OPERAND_OPCODES = frozenset({"constant", "parameter"})

class Instruction:
    """One HLO instruction.

    ``operands`` and ``called`` are names (without ``%``).  ``attrs`` holds every attribute
    after the operand list as raw text (``{"dimensions": "{1}", "metadata": "{...}"}``), split
    on first use.  ``line`` is the instruction's text (lines joined when it spans several).
    ``canonical`` is the instruction without ``metadata=`` (op names, source locations,
    stack frames), for comparing snapshots.  Instances are shared between modules parsed
    from identical lines: do not mutate them.

    Example (``d`` a Dump)::

        kernel = d.fusion_kernels[0]
        kernel.opcode, kernel.fusion_kind            # ('fusion', 'kLoop')
        kernel.shape.byte_size                       # bytes of its result
        kernel.operands                              # ['x.1']: names of its operands
        d.optimized.computations[kernel.called[0]]   # the computation it runs
    """

    __slots__ = ("name", "opcode", "shape", "operands", "called", "fusion_kind", "_attrs",
                 "_attr_text", "line", "is_root", "parameter_number", "operand_text",
                 "_canonical")

    def __init__(self, name, opcode, shape, operands, called, fusion_kind, attr_text, line,
                 is_root, parameter_number, operand_text):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands = operands
        self.called = called
        self.fusion_kind = fusion_kind
        self._attr_text = attr_text  # the text after the operand list (from its ',')
        self._attrs = None
        self.line = line
        self.is_root = is_root
        self.parameter_number = parameter_number
        self.operand_text = operand_text  # raw text in the parentheses (a literal for constants)
        self._canonical = None

    @property
    def attrs(self) -> dict:
        if self._attrs is None:
            attrs: dict[str, str] = {}
            text = self._attr_text
            if text and text[0] == ",":
                text = text[1:]
            if text and text.strip():
                for item in _split_top(text):
                    key, _, value = item.partition("=")
                    attrs[key.strip()] = value.strip()
            self._attrs = attrs
        return self._attrs

    @property
    def canonical(self) -> str:
        if self._canonical is None:
            head = "ROOT %" + self.name if self.is_root else "%" + self.name
            attrs = "".join(f", {k}={v}" for k, v in self.attrs.items() if k != "metadata")
            self._canonical = f"{head} = {self.shape} {self.opcode}({self.operand_text}){attrs}"
        return self._canonical

    def __repr__(self) -> str:
        return f"<Instruction {self.name} = {self.shape} {self.opcode}>"

# The common line, matched in one step: name, array shape, opcode and the operand list's '('.
_FAST_LINE = re.compile(r"[ \t]*(ROOT )?%?([A-Za-z_][\w.\-]*) = "
                        r"([a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?) ([a-z][a-z0-9\-]*)\(")

_INSTRUCTION_START = re.compile(r"\s*(ROOT\s+)?%?([A-Za-z_][\w.\-]*)\s*=\s*")

_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\s*\(")

class _LineError(ValueError):
    """An error inside one instruction's text, at a character offset into it."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset

def _parse_instruction(text: str, name: str, is_root: bool, pos: int, nested: list | None):
    """Parse the instruction whose right-hand side starts at ``pos`` of ``text``.

    Returns (instruction, end): ``end`` is just past its operand list (a nested instruction
    ends there).  Instructions written inside the operand list are appended to ``nested``
    (None: not allowed, i.e. the caller is itself nested).  Shape None: left for inference.
    """
    n = len(text)
    while pos < n and text[pos] in " \t\n":
        pos += 1
    m = _OPCODE.match(text, pos)
    if m and m.group(1) not in PRIMITIVE_BITS and m.group(1) != "b":
        shape = None  # no result shape: XLA infers it from the operands
        opcode, open_pos = m.group(1), m.end() - 1
    else:
        try:
            shape, pos = _parse_shape_at(text, pos)
        except ValueError as e:
            raise _LineError(f"{e} (instruction {name or 'nested'})", pos) from None
        m = _OPCODE.match(text, pos)
        if not m:
            raise _LineError(f"expected an opcode and '(' after the shape of "
                             f"{name or 'a nested instruction'}, found "
                             f"{text[pos:pos + 30].strip()!r}", pos)
        opcode, open_pos = m.group(1), m.end() - 1
    return _finish_instruction(text, name, is_root, shape, opcode, open_pos, nested)

def _finish_instruction(text, name, is_root, shape, opcode, open_pos, nested):
    if not _known_opcode(opcode):
        raise _LineError(f"unknown opcode {opcode!r} in instruction {name or '(nested)'}",
                         open_pos - len(opcode))
    close = _matching_paren(text, open_pos)
    if close < 0:
        raise _LineError(f"unterminated operand list of {name or 'a nested instruction'}",
                         open_pos)
    operand_text = text[open_pos + 1:close]
    parameter_number = None
    if opcode in _NON_OPERAND_OPCODES:
        operands = []
        if opcode == "parameter":
            try:
                parameter_number = int(operand_text)
            except ValueError:
                raise _LineError(f"parameter number of {name} is not an integer: "
                                 f"{operand_text[:20]!r}", open_pos + 1) from None
    elif not operand_text.strip():
        operands = []
    elif not any(c in operand_text for c in '([{"#'):
        operands = [t.strip().lstrip("%") for t in operand_text.split(",")]
        if "" in operands or any(" " in o for o in operands):
            operands = [_operand_name(t, name, open_pos) for t in _split_top(operand_text)]
    else:
        operands = []
        for tok in _split_top(operand_text):
            if tok.endswith(")"):  # a nested instruction: shape? opcode(operands)
                if nested is None:
                    raise _LineError("a nested instruction cannot have nested instructions "
                                     "with attributes", open_pos)
                inner_start = text.find(tok, open_pos)
                inner, _ = _parse_instruction(text, "", False, inner_start, nested)
                nested.append(inner)
                operands.append(inner)  # replaced by its name once it has one
            else:
                operands.append(_operand_name(tok, name, open_pos))
    return Instruction(name, opcode, shape, operands, None, None, None, text, is_root,
                       parameter_number, operand_text), close + 1

def _operand_name(tok: str, name: str, pos: int) -> str:
    # Newer XLA prints "%a, %b"; older dumps print "f32[2]{0} %a": the name is the last word.
    word = tok.rsplit(None, 1)[-1].lstrip("%") if tok else ""
    if not word:
        raise _LineError(f"empty operand in the operand list of {name}", pos)
    if "#" in word:
        # the compact get-tuple-element form newer XLA prints (jaxlib 0.11 on): %t#1 is
        # element 1 of the tuple %t; _compact_gtes makes the get-tuple-element it stands for
        base, _, index = word.rpartition("#")
        if not base or not index.isdigit():
            raise _LineError(f"operand {word!r} of {name}: not an instruction name, nor the "
                             f"compact get-tuple-element form 'name#index'", pos)
    return word

def _compact_gtes(instructions: list, offsets: list, comp_name: str, source, start: int):
    """The instructions with a get-tuple-element made for each compact operand ``%t#i`` (the
    form newer XLA prints for a get-tuple-element it does not show as a line of its own),
    placed just before its first user and named ``t#i``, as XLA's own parser reads it: an
    instruction like any other, whose byte traffic and fusion decisions are a
    get-tuple-element's."""
    names = {i.name: i for i in instructions}
    made: dict[str, Instruction] = {}
    out, out_offsets = [], []
    for k, inst in enumerate(instructions):
        for op in inst.operands:
            if "#" not in op or op in names or op in made:
                continue
            base, _, index = op.rpartition("#")
            tup = names.get(base) or made.get(base)
            line = start + 1 + (offsets[k] if k < len(offsets) else 0)
            if tup is None:
                raise HloParseError(f"instruction {inst.name} in computation {comp_name} uses "
                                    f"undefined operand {base} (in {op})", source=source,
                                    line=line, column=_column_of(inst.line, op))
            i = int(index)
            if not tup.shape.is_tuple or i >= len(tup.shape.tuple_shapes):
                raise HloParseError(f"instruction {inst.name} in computation {comp_name}: "
                                    f"operand {op} takes element {i} of {base}, whose shape "
                                    f"{tup.shape} has no such element", source=source,
                                    line=line, column=_column_of(inst.line, op))
            shape = tup.shape.tuple_shapes[i]
            text = f"%{op} = {shape} get-tuple-element(%{base}), index={i}"
            gte = Instruction(op, "get-tuple-element", shape, [base], [], None, f", index={i}",
                              text, False, None, f"%{base}")
            made[op] = gte
            out.append(gte)
            out_offsets.append(offsets[k] if k < len(offsets) else 0)
        out.append(inst)
        out_offsets.append(offsets[k] if k < len(offsets) else 0)
    return out, out_offsets

# What each calling opcode must name (XLA's parser requires these attributes).
_REQUIRED_CALLS = {
    "fusion": ("calls",), "call": ("to_apply",), "while": ("condition", "body"),
    "reduce": ("to_apply",), "reduce-window": ("to_apply",), "map": ("to_apply",),
    "sort": ("to_apply",), "scatter": ("to_apply",), "all-reduce": ("to_apply",),
    "all-reduce-start": ("to_apply",), "reduce-scatter": ("to_apply",),
    "select-and-scatter": ("select", "scatter"), "async-start": ("calls",),
}

def _missing_call(opcode: str, rest: str) -> str | None:
    """The attribute a calling instruction lacks (e.g. a fusion without calls=), if any."""
    need = _REQUIRED_CALLS.get(opcode)
    if need:
        for key in need:
            if key + "=" not in rest:
                return key
    if opcode == "conditional" and "branch_computations=" not in rest and \
            ("true_computation=" not in rest or "false_computation=" not in rest):
        return "branch_computations"
    return None

def _set_attributes(inst: Instruction, rest: str, pos: int) -> None:
    """Attach the attribute text after the operand list, and what it says is called."""
    rest = rest.strip()
    if rest:
        if rest[0] != ",":
            raise _LineError(f"unexpected text after the operands of {inst.name}: "
                             f"{rest[:30]!r}", pos)
        rest = rest[1:].lstrip()
    inst._attr_text = rest
    called: list[str] = []
    if rest:
        for m in _CALLED.finditer(rest):
            value = m.group(2)
            if value[0] == "{":
                called.extend(v.strip().lstrip("%") for v in value[1:-1].split(",") if v.strip())
            else:
                called.append(value.lstrip("%"))
    inst.called = called
    missing = _missing_call(inst.opcode, rest)
    if missing:
        raise _LineError(f"{inst.opcode} {inst.name or '(nested)'} names no computation: "
                         f"{missing}= is missing", pos)
    if inst.opcode == "fusion":
        kind = _KIND.search(rest)
        inst.fusion_kind = kind.group(1) if kind else None

# A whole single-line instruction in one match, the form of nearly every line XLA prints:
# ROOT?, name, shape (an array, or a tuple of arrays with plain layouts), opcode, the
# operand text (no parentheses or strings inside) and the rest of the line.
_WHOLE_LINE = re.compile(r'[ \t]*(ROOT )?%?([A-Za-z_][\w.\-]*) = '
                         r'([a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|\([^()]*\)) '
                         r'([a-z][a-z0-9\-]*)\(([^()"]*)\)(.*)')

# Opcodes that may name computations they call (XLA accepts calls=/to_apply=/... on these).
_CALLING_OPCODES = frozenset("""
fusion call while conditional custom-call reduce reduce-window map sort scatter
select-and-scatter all-reduce all-reduce-start reduce-scatter async-start async-update
async-done scan topk
""".split())

def _called_of(attr_text: str) -> list:
    called: list[str] = []
    for m in _CALLED.finditer(attr_text):
        value = m.group(2)
        if value[0] == "{":
            called.extend(v.strip().lstrip("%") for v in value[1:-1].split(",") if v.strip())
        else:
            called.append(value.lstrip("%"))
    return called

_SHAPE_CACHE: dict = {}

# opcode -> 0 (not an opcode), 1 (plain), 2 (constant/parameter: no operand names),
# 3 (may call computations); filled on first sight of each opcode text
_OPCODE_KIND: dict = {}

def _opcode_kind(opcode: str) -> int:
    kind = _OPCODE_KIND.get(opcode)
    if kind is None:
        if not _known_opcode(opcode):
            kind = 0
        elif opcode in _NON_OPERAND_OPCODES:
            kind = 2
        elif opcode in _CALLING_OPCODES or opcode.endswith(("-start", "-update", "-done")):
            kind = 3
        else:
            kind = 1
        _OPCODE_KIND[opcode] = kind
    return kind

def _from_whole_line(m, raw: str):
    """The Instruction of a line ``_WHOLE_LINE`` matched, or None: the general parser then
    reads it (and reports what is wrong with it, if anything)."""
    root, name, shape_text, opcode, ops, rest = m.groups()
    kind = _OPCODE_KIND.get(opcode) or _opcode_kind(opcode)
    if not kind:
        return None
    shape = _SHAPE_CACHE.get(shape_text)
    if shape is None:
        try:
            shape = _SHAPE_CACHE[shape_text] = parse_shape(shape_text)
        except ValueError:
            return None
    parameter_number = None
    if kind == 2:
        operands: list[str] = []
        if opcode == "parameter":
            if not ops.isdigit():
                return None
            parameter_number = int(ops)
    elif not ops:
        operands = []
    elif ops[0] == "%":  # as XLA prints them: "%a, %b"
        operands = ops[1:].split(", %")
        if len(operands) != ops.count(",") + 1 or ops.count(" ") != len(operands) - 1 \
                or "#" in ops:
            return None
    elif "[" in ops or "{" in ops or "#" in ops:
        return None
    else:
        operands = ops.replace("%", "").replace(" ", "").replace("\t", "").split(",")
        if "" in operands:
            return None
    called = []
    fusion_kind = None
    if rest:
        if rest[0] != ",":
            return None
        if kind == 3:  # XLA accepts calls=, to_apply= ... on these opcodes only
            called = _called_of(rest)
            if opcode == "fusion":
                k = _KIND.search(rest)
                fusion_kind = k.group(1) if k else None
    if kind == 3 and _missing_call(opcode, rest):
        return None  # the general reader says what is missing
    return Instruction(name, opcode, shape, operands, called, fusion_kind, rest, raw,
                       root is not None, parameter_number, ops)

def _instructions_of(text: str) -> list:
    """Parse one instruction's text; return it and any nested ones (those first).

    Raises _LineError with an offset into ``text``.
    """
    m = _FAST_LINE.match(text)
    nested: list = []
    if m:
        try:
            shape = parse_shape(m.group(3))
        except ValueError as e:
            raise _LineError(f"{e} (instruction {m.group(2)})", m.start(3)) from None
        inst, end = _finish_instruction(text, m.group(2), m.group(1) is not None, shape,
                                        m.group(4), m.end() - 1, nested)
    else:
        m = _INSTRUCTION_START.match(text)
        if not m:
            raise _LineError(f"expected an instruction ('name = shape opcode(...)'), found "
                             f"{text.strip()[:60]!r}", len(text) - len(text.lstrip()))
        inst, end = _parse_instruction(text, m.group(2), m.group(1) is not None, m.end(),
                                       nested)
    _set_attributes(inst, text[end:], end)
    for inner in nested:
        _set_attributes(inner, "", end)
    return nested + [inst] if nested else [inst]

class HloComputation:
    """A named list of instructions; ``root`` is its result.

    Example::

        entry = parse_module(text).entry
        [i.opcode for i in entry.instructions]       # in program order
        entry.root, entry.parameters                 # its result; its parameters, by number
        entry.instruction("add.1")                   # one by name
    """

    __slots__ = ("name", "instructions", "root", "is_entry", "header", "callees", "_by_name",
                 "memo", "line_offsets", "inlined")
    _by_name: dict[str, Instruction] | None

    def __init__(self, name: str, instructions: list, root: Instruction, is_entry: bool,
                 header: str, line_offsets=(), callees: list | None = None):
        self.name = name
        self.instructions = instructions
        self.root = root
        self.is_entry = is_entry
        self.header = header
        self._by_name = None
        # line of each instruction, counted from the computation's header line
        self.line_offsets = line_offsets
        # names of the computations its instructions call, in order of first use
        self.callees = list(dict.fromkeys(chain.from_iterable(i.called for i in instructions))) \
            if callees is None else callees
        # results that analyses derive from this computation's text alone (it is shared
        # between modules parsed from identical text, so such results can be reused)
        self.memo: dict = {}
        # computations written inline in an attribute (to_apply={...}), with the
        # instruction that calls each: they belong to the module, named there
        self.inlined: list = []

    @property
    def parameters(self) -> list:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        params.sort(key=lambda i: i.parameter_number)
        return params

    @property
    def by_name(self) -> dict[str, Instruction]:
        """Its instructions by name (the parser fills it in as it checks the operands)."""
        if self._by_name is None:
            self._by_name = {i.name: i for i in self.instructions}
        return self._by_name

    def instruction(self, name: str) -> Instruction:
        return self.by_name[name]

    def users(self, name: str) -> list[Instruction]:
        """The instructions of this computation that name ``name`` among their operands."""
        return [i for i in self.instructions if name in i.operands]

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def __repr__(self) -> str:
        return f"<HloComputation {self.name}: {len(self.instructions)} instructions>"

class HloModule:
    """A parsed module: computations in file order, the entry one, instructions by name.

    ``entry`` is the computation marked ``ENTRY``, or the last one when none is (as XLA).
    A module without an ``HloModule`` line is named ``module_<entry>`` (as XLA).

    Example::

        m = parse_module(open("module_0000.jit_f.cpu_after_optimizations.txt").read())
        m.entry.instructions                         # the entry computation's, in order
        m.computations["fused_computation"]          # any computation, by name
        m.instruction("add_tanh_fusion")             # any instruction, by name
        sum(i.opcode == "fusion" for i in m.entry.instructions)   # its fusion kernels, counted
    """

    def __init__(self, name: str, header: str, computations: dict, entry: HloComputation,
                 source: str | None, lines: dict | None = None):
        self.name = name
        self.header = header
        self.computations = computations
        self.entry = entry
        self.source = source
        self.lines = lines or {}  # computation name -> line of its header in the source
        self._index: dict[str, Instruction] | None = None

    def instruction(self, name: str) -> Instruction:
        """Any instruction of the module by name (XLA keeps names unique per module)."""
        if self._index is None:
            self._index = {}
            for comp in self.computations.values():
                for inst in comp.instructions:
                    self._index[inst.name] = inst
        try:
            return self._index[name.lstrip("%")]
        except KeyError:
            raise KeyError(f"no instruction {name!r} in module {self.name}") from None

    def line_of(self, comp: HloComputation, inst: Instruction) -> int | None:
        """The source line an instruction of this module starts on."""
        start = self.lines.get(comp.name)
        if start is None:
            return None
        for i, x in enumerate(comp.instructions):
            if x is inst:
                return start + comp.line_offsets[i]
        return None

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"

_COMPUTATION_HEADER = re.compile(r"(ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*(?:\(.*)?\{$")

# Debug-info sections that newer XLA prints between the module header and the computations.
_INFO_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})

# Two caches, because the snapshots of one compile repeat most of their text:
# a computation's whole text -> its parsed computation (most computations survive a pass
# untouched), and an instruction's text -> Instruction (for computations a pass did change).
_BLOCK_CACHE: dict[str, HloComputation] = {}

_LINE_CACHE: dict[str, Instruction] = {}

_CACHE_LIMIT = 500_000

def clear_cache() -> None:
    """Forget cached computations and lines (memory is bounded anyway; for benchmarks)."""
    _BLOCK_CACHE.clear()
    _LINE_CACHE.clear()
    _SHAPE_CACHE.clear()
    parse_shape.cache_clear()

def parse_module(text: str, *, source: str | None = None) -> HloModule:
    """Parse one HLO module from text; ``source`` (a file name) is used in error messages.

    Raises ``HloParseError`` (file:line:column) for text that is not HLO, is truncated,
    uses an opcode XLA does not know, or references instructions or computations that do
    not exist.
    """
    # The parse allocates tens of thousands of objects that all stay alive; the cyclic
    # garbage collector, run on every few hundred allocations, would walk them again and
    # again (about a third of a cold parse).  Nothing here makes cycles to collect.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_module(text, source)
    finally:
        if enabled:
            gc.enable()

def _parse_module(text: str, source: str | None) -> HloModule:
    if len(_LINE_CACHE) > _CACHE_LIMIT or len(_BLOCK_CACHE) > _CACHE_LIMIT:
        clear_cache()
    if "/*" in text or "//" in text:
        text = _strip_comments(text)
    lines = text.split("\n")
    header = None
    module_name = None
    computations: dict[str, HloComputation] = {}
    comp_lines: dict[str, int] = {}
    entry = None
    i, n = 0, len(lines)
    seen_anything = False
    while i < n:
        stripped = lines[i].strip()
        if not stripped:
            i += 1
            continue
        if stripped.startswith("HloModule") and (len(stripped) == 9 or stripped[9] in " \t,"):
            if seen_anything:
                raise HloParseError("'HloModule' must come first", source=source, line=i + 1,
                                    column=1)
            start = i
            while _open_brackets(stripped) > 0 and i + 1 < n:  # attributes over several lines
                i += 1
                stripped += " " + lines[i].strip()
            header = stripped
            module_name = stripped[9:].split(",", 1)[0].strip()
            if not module_name:
                raise HloParseError("'HloModule' without a name", source=source,
                                    line=start + 1, column=1)
            seen_anything = True
            i += 1
            continue
        if stripped in _INFO_SECTIONS:
            while i < n and lines[i].strip():
                i += 1
            continue
        header_match = _COMPUTATION_HEADER.match(stripped) if stripped.endswith("{") else None
        if header_match is None:
            if not seen_anything:
                raise HloParseError(f"not HLO text: expected 'HloModule <name>' or a "
                                    f"computation, found {stripped[:60]!r}", source=source,
                                    line=i + 1, column=1)
            raise HloParseError(f"unexpected text outside any computation: {stripped[:60]!r}",
                                source=source, line=i + 1,
                                column=len(lines[i]) - len(lines[i].lstrip()) + 1)
        seen_anything = True
        guess = _block_end_guess(lines, i)
        key = "\n".join(lines[i:guess + 1]) if guess > 0 else None
        comp = _BLOCK_CACHE.get(key) if key is not None else None
        end = guess
        if comp is None and key is not None:
            comp = _read_block(key, guess - i - 1, stripped, header_match, source, i)
            if comp is not None:
                _BLOCK_CACHE[key] = comp
        if comp is None:
            comp, end = _read_computation(lines, i, source)
            if not comp.inlined:  # those are renamed per module: not shared
                _BLOCK_CACHE[key if key is not None and end == guess
                             else "\n".join(lines[i:end + 1])] = comp
        if comp.inlined:
            _add_inlined(comp, computations, comp_lines, i + 1)
        if comp.name in computations:
            raise HloParseError(f"computation {comp.name} defined twice", source=source,
                                line=i + 1, column=1)
        computations[comp.name] = comp
        comp_lines[comp.name] = i + 1
        if comp.is_entry:
            if entry is not None:
                raise HloParseError(f"a second ENTRY computation ({comp.name}; the first was "
                                    f"{entry.name})", source=source, line=i + 1, column=1)
            entry = comp
        i = end + 1
    if not computations:
        what = "no computations after the HloModule line (truncated?)" if header else \
            "empty file, expected 'HloModule <name>' and computations"
        raise HloParseError(what, source=source, line=max(1, n - 1 if text.endswith("\n") else n))
    if entry is None:  # XLA takes the last computation when none is marked ENTRY
        entry = list(computations.values())[-1]
    module = HloModule(module_name if module_name is not None else "module_" + entry.name,
                       header or "", computations, entry, source, comp_lines)
    for comp in computations.values():
        for callee in comp.callees:
            if callee not in computations:
                caller = next(x for x in comp.instructions if callee in x.called)
                raise HloParseError(f"instruction {caller.name} calls unknown computation "
                                    f"{callee}", source=source,
                                    line=module.line_of(comp, caller), column=None)
    return module

def _name_inline(comp: HloComputation, caller: Instruction, computations: dict) -> None:
    """XLA names a computation written inline ``_``, then ``_.1``, ``_.2`` ..."""
    placeholder = comp.name
    name, k = "_", 0
    while name in computations:
        k += 1
        name = f"_.{k}"
    comp.name = name
    caller.called = [name if c == placeholder else c for c in caller.called]
    caller._attr_text = caller._attr_text.replace("%" + placeholder, "%" + name)
    caller.line = caller.line.replace("%" + placeholder, "%" + name)

def _add_inlined(comp: HloComputation, computations: dict, comp_lines: dict, line: int):
    for inner, caller in comp.inlined:
        _add_inlined(inner, computations, comp_lines, line)
        _name_inline(inner, caller, computations)
        computations[inner.name] = inner
        comp_lines[inner.name] = line
    comp.callees = list(dict.fromkeys(c for i in comp.instructions for c in i.called))

def _block_end_guess(lines: list, start: int) -> int:
    """The line that most likely closes the computation opened at ``start`` (the first one
    that is exactly '}', as XLA prints it, else the first that begins with '}'), or -1.
    Only a guess: a computation found under that text in the block cache is the one."""
    try:
        guess = lines.index("}", start + 1)
    except ValueError:
        guess = -1
    if guess > 0 and not any(line[:1] == "}" for line in lines[start + 1:guess]):
        return guess
    for i in range(start + 1, len(lines)):
        raw = lines[i]
        if raw[:1] == "}" or raw.lstrip()[:1] == "}":
            return i
    return -1

def _read_computation(lines: list, start: int, source):
    """Parse the computation whose header is at ``lines[start]``; return it and the index of
    its closing line.

    Most lines are whole instructions, read by one match (or found in the line cache); an
    instruction over several lines (attributes, a literal, a bare trailing comma, a
    computation written inline) is joined, newlines kept, and read by the general parser.
    """
    cache = _LINE_CACHE
    cache_get = cache.get
    whole = _WHOLE_LINE.match
    insts: list = []    # Instruction, or None for one the general parser reads
    texts: list = []    # None, or the text of that instruction
    index: list = []    # the line each starts on
    slow = False
    depth = 0           # brackets the instruction being continued leaves open
    open_item = False   # the last instruction goes on below (open brackets, trailing ',')
    i, n = start + 1, len(lines)
    end = -1
    while i < n:
        raw = lines[i]
        if not open_item:
            inst = cache_get(raw)
            if inst is None and not raw.endswith((",", "{", "(")):
                m = whole(raw)
                if m is not None:
                    inst = _from_whole_line(m, raw)
                    if inst is not None:
                        cache[raw] = inst
            if inst is not None:
                insts.append(inst)
                texts.append(None)
                index.append(i)
                i += 1
                continue
        s = raw.strip()
        i += 1
        if not s:
            continue
        if open_item:
            texts[-1] += "\n" + raw
            depth += _open_brackets(raw)
            open_item = depth > 0 or s.endswith((",", "{", "("))
            continue
        if s[0] == "," and insts:
            continued = True
        elif s[0] == "}":
            if texts and texts[-1] is not None and _open_brackets(texts[-1]) > 0:
                continued = True
            else:
                end = i - 1
                break
        elif _INSTRUCTION_START.match(raw):
            continued = False
        else:
            continued = bool(insts)
        if continued:
            if texts[-1] is None:
                texts[-1] = insts[-1].line
                insts[-1] = None
            texts[-1] += "\n" + raw
            depth = _open_brackets(texts[-1])
        else:
            insts.append(None)
            texts.append(raw)
            index.append(i - 1)
            # brackets left open count only where the line says it goes on (a shape cut
            # short, f32[ , is an error in the line, not a continuation)
            depth = _open_brackets(raw) if s.endswith((",", "{", "(", "[")) else 0
        slow = True
        open_item = depth > 0 or s.endswith((",", "{", "("))
    header = lines[start].strip()
    m = _COMPUTATION_HEADER.match(header)
    assert m is not None, "only called on a line that opens a computation"
    if end < 0:
        last = n
        while last > 1 and not lines[last - 1].strip():
            last -= 1
        raise HloParseError(f"file ends inside computation {m.group(2)} (opened at line "
                            f"{start + 1}): truncated?", source=source, line=last)
    name, is_entry = m.group(2), m.group(1) is not None
    comp_inline: list = []
    needs_resolve = False
    if slow:
        instructions: list = []
        offsets: list = []
        for inst, text, line in zip(insts, texts, index):
            if inst is not None:
                instructions.append(inst)
                offsets.append(line - start)
                continue
            inline = []
            if "={" in text and _INLINE_COMPUTATION.search(text):
                text, inline = _extract_inline(text, line + 1, source)
            try:
                parsed = _instructions_of(text)
            except _LineError as e:
                col = e.offset + 1
                raise HloParseError(str(e), source=source, line=line + 1,
                                    column=col if col <= len(lines[line]) + 1 else None) \
                    from None
            if inline:
                comp_inline += [(c, parsed[-1]) for c in inline]
            elif len(parsed) == 1 and parsed[0].shape is not None:
                cache[text] = parsed[0]
            else:
                needs_resolve = True
            instructions.extend(parsed)
            offsets.extend([line - start] * len(parsed))
    else:
        instructions = insts
        offsets = [k - start for k in index]
    comp = _make_computation(name, is_entry, header, instructions, offsets, needs_resolve,
                             source, start)
    comp.inlined = comp_inline
    return comp, end

def _make_computation(name, is_entry, header, instructions, offsets, needs_resolve, source,
                      start, roots=None, callees=None) -> HloComputation:
    if not instructions:
        raise HloParseError(f"computation {name} has no instructions", source=source,
                            line=start + 1, column=1)
    if needs_resolve:
        instructions = _resolve(instructions, name, source, start, offsets)
    if any("#" in op for x in instructions for op in x.operands):
        instructions, offsets = _compact_gtes(instructions, list(offsets), name, source, start)
        roots = None          # indices moved: the ROOT flag says it again
        callees = None
    if roots is None:
        roots = [k for k, x in enumerate(instructions) if x.is_root]
    if len(roots) > 1:
        raise HloParseError(f"more than one ROOT in computation {name}", source=source,
                            line=start + 1 + offsets[roots[1]], column=1)
    # XLA's convention: without a ROOT line the last instruction is the root
    root = instructions[roots[0]] if roots else instructions[-1]
    comp = HloComputation(name, instructions, root, is_entry, header, offsets, callees)
    _check_operands(comp, source, start)
    return comp

# Every instruction line of a computation's text at once (one C pass), in the form XLA
# prints: the whole line, ROOT?, name, shape, opcode, operands ("%a, %b", or the text of a
# constant or parameter), and the attributes (empty, or from ',' to a last character that
# does not open anything, so that the instruction ends on that line).
_BLOCK_LINES = re.compile(r'\n([ \t]*(ROOT )?%?([A-Za-z_][\w.\-]*) = '
                          r'([a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|\([^()]*\)) '
                          r'([a-z][a-z0-9\-]*)\((%[\w.\-]+(?:, %[\w.\-]+)*|[^()"%]*)\)'
                          r'((?:,.*[^,{(\s])?))(?=\n)')

def _read_block(block: str, n_lines: int, header: str, header_match, source, start: int):
    """The computation of ``block`` (its text, header to closing '}', ``n_lines`` lines
    between them) when every line between is one whole instruction as XLA prints them;
    None otherwise (the line-by-line reader then takes it)."""
    found = _BLOCK_LINES.findall(block)
    if len(found) != n_lines:
        return None
    cache = _LINE_CACHE
    cache_get = cache.get
    kinds = _OPCODE_KIND
    shapes = _SHAPE_CACHE
    instructions: list = []
    append = instructions.append
    roots = []
    callees = []
    for raw, root, name, shape_text, opcode, ops, rest in found:
        inst = cache_get(raw)
        if inst is None:
            kind = kinds.get(opcode) or _opcode_kind(opcode)
            shape = shapes.get(shape_text)
            if shape is None:
                try:
                    shape = shapes[shape_text] = parse_shape(shape_text)
                except ValueError:
                    return None
            if kind == 1:
                if ops[:1] == "%":
                    operands = ops[1:].split(", %")
                elif ops:  # names without '%', as jax's as_text() prints them
                    operands = ops.split(", ")
                    if ops.count(" ") != len(operands) - 1 or ops.count(",") != ops.count(" "):
                        return None
                else:
                    operands = []
                inst = Instruction(name, opcode, shape, operands, [], None, rest, raw,
                                   root != "", None, ops)
            elif kind == 2:
                number = None
                if opcode == "parameter":
                    if not ops.isdigit():
                        return None
                    number = int(ops)
                inst = Instruction(name, opcode, shape, [], [], None, rest, raw, root != "",
                                   number, ops)
            elif kind == 3:
                if ops[:1] == "%":
                    operands = ops[1:].split(", %")
                elif ops:
                    operands = ops.split(", ")
                    if ops.count(" ") != len(operands) - 1 or ops.count(",") != ops.count(" "):
                        return None
                else:
                    operands = []
                fusion_kind = None
                if rest:
                    called = _called_of(rest)
                    if opcode == "fusion":
                        k = _KIND.search(rest)
                        fusion_kind = k.group(1) if k else None
                else:
                    called = []
                if _missing_call(opcode, rest):
                    return None
                inst = Instruction(name, opcode, shape, operands, called, fusion_kind, rest,
                                   raw, root != "", None, ops)
            else:
                return None
            cache[raw] = inst
        if root:
            roots.append(len(instructions))
        if inst.called:
            callees += inst.called
        append(inst)
    m = header_match
    return _make_computation(m.group(2), m.group(1) is not None, header, instructions,
                             range(1, n_lines + 1), False, source, start, roots,
                             list(dict.fromkeys(callees)))

_INLINE_COMPUTATION = re.compile(r"(?:^|[\s,])(?:" + "|".join(_CALLING_ATTRS) +
                                 r")=\{\s*(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=")

_INLINE_NAME = "__dumpref_inline_computation_"

def _extract_inline(text: str, line: int, source):
    """Computations written inline as an attribute's value (``to_apply={ ... }``): parsed on
    their own and replaced in ``text`` by a placeholder name that the module resolves to
    XLA's name for them (``_``, ``_.1``, ...)."""
    found: list[HloComputation] = []
    while True:
        m = _INLINE_COMPUTATION.search(text)
        if not m:
            return text, found
        open_pos = text.index("{", m.start())
        close = _matching_brace(text, open_pos)
        if close < 0:
            raise HloParseError("unterminated computation written inline", source=source,
                                line=line)
        inner = ["_ {"] + text[open_pos + 1:close].split("\n") + ["}"]
        comp, _ = _read_computation(inner, 0, source)
        comp.name = f"{_INLINE_NAME}{id(comp)}"
        found.append(comp)
        text = text[:open_pos] + "%" + comp.name + text[close + 1:]

def _matching_brace(text: str, open_pos: int) -> int:
    return _closing(text, open_pos, "{", "}")

def _resolve(instructions: list, comp_name: str, source, start: int, offsets: list) -> list:
    """Name nested instructions and infer omitted result shapes, in order (as XLA does)."""
    names = {x.name for x in instructions if x.name}
    by_name: dict[str, Instruction] = {}
    out = []
    for k, x in enumerate(instructions):
        if not x.name:
            base = x.opcode + ".anon"
            candidate, j = base, 0
            while candidate in names:
                j += 1
                candidate = f"{base}.{j}"
            names.add(candidate)
            x.name = candidate
        x.operands = [o if isinstance(o, str) else o.name for o in x.operands]
        if x.shape is None:
            try:
                x.shape = infer_shape(x, [by_name[o].shape if o in by_name else None
                                          for o in x.operands])
            except ValueError as e:
                raise HloParseError(f"cannot infer the result shape of {x.name}: {e}",
                                    source=source, line=start + 1 + offsets[k]) from None
        by_name[x.name] = x
        out.append(x)
    return out

def _check_operands(comp: HloComputation, source, start: int) -> None:
    by_name = {i.name: i for i in comp.instructions}
    if len(by_name) != len(comp.instructions):
        seen = set()
        for k, inst in enumerate(comp.instructions):
            if inst.name in seen:
                raise HloParseError(f"instruction name {inst.name} used twice in computation "
                                    f"{comp.name}", source=source,
                                    line=start + 1 + comp.line_offsets[k])
            seen.add(inst.name)
    used = set(chain.from_iterable(i.operands for i in comp.instructions))
    if used.issubset(by_name):
        comp._by_name = by_name
        return
    for k, inst in enumerate(comp.instructions):
        for op in inst.operands:
            if op not in by_name:
                line = start + 1 + comp.line_offsets[k]
                raise HloParseError(
                    f"instruction {inst.name} in computation {comp.name} uses undefined "
                    f"operand {op}", source=source, line=line,
                    column=_column_of(inst.line, op))
    comp._by_name = by_name

def _column_of(text: str, word: str) -> int | None:
    i = text.find("%" + word)
    if i < 0:
        i = text.find(word, text.find("(") + 1)
    return i + 1 if i >= 0 else None


# ---- from pytest_dumpref/xla/naming.py ----------------------------------------------------

@dataclass(frozen=True)
class Backend:
    """One row of the table: how a backend names its dump files and passes.

    ``optimized_prefix``: what stands before ``after_optimizations`` in the optimized module's
    file name (a regular expression); ``module_suffix``: what the backend appends to the module's
    name (the TPU's ``.cl_<id>``); ``marker_files``: file name tails only this backend writes;
    ``fusion_passes``: the passes that fuse, as its pipeline names them (what ``unfused`` takes);
    ``chip``: how the write-up names what it compiles for; ``optimized_glob``: a glob of its
    optimized modules' file names; ``environment_files``: file name tails of what the backend
    writes about the compile's environment, not about the program (left out of a dump's
    manifest: some differ between two identical compiles)."""
    name: str
    chip: str
    optimized_prefix: str
    module_suffix: str | None
    marker_files: tuple
    fusion_passes: tuple
    optimized_glob: str
    environment_files: tuple = ()

BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("cpu", "XLA:CPU", r"cpu_", None, (), ("fusion",), "*.cpu_after_optimizations.txt"),
    # libtpu writes no platform word before after_optimizations; its module names end in the
    # compilation's id (.cl_NNN) and it writes tpu_comp_env.txt beside them
    Backend("tpu", "TPU", r"", r"\.cl_\d+", ("tpu_comp_env.txt",), ("tpu_fusion",),
            "*.cl_*.after_optimizations.txt",
            # hlo_module_config.txt differs between two compiles of one program in one process
            ("tpu_comp_env.txt", "hlo_module_config.txt", "target_arguments.txt", "execution_options.txt",
             "basic_compiler_metadata.txt", "transfer_stats.txt", "flagfile")),
    # XLA:GPU prefixes the compute capability (CUDA) or the gfx name (ROCm)
    Backend("gpu", "XLA:GPU", r"(?:sm_\d+\.\d+|gfx[0-9a-z]+)_gpu_", None, (),
            ("priority-fusion", "fusion", "multi_output_fusion", "horizontal-loop-fusion"),
            "*_gpu_after_optimizations.txt"),
)}

_PREFIX = re.compile(r"^module_(?P<id>\d+)\.(?P<rest>.+)$")

_BEFORE_OPT = re.compile(r"^module_(?P<id>\d+)\.(?P<name>.+)\.before_optimizations\.txt$")

_STEP = re.compile(r"^(?P<step>\d{4,})\.(?P<stage>.+)\.txt$")

_OPTIMIZED = re.compile(r"^(?P<platform>(?:.*_)?)after_optimizations(?P<kind>-[a-z-]+)?\.txt$")

_TILED = re.compile(r"\{[0-9,]*:[^{}]*T\(\d")

@dataclass(frozen=True)
class FileName:
    """What a dump file's name says, once its module's name is known: ``kind`` is one of
    ``before_optimizations``, ``snapshot`` (with ``step`` and ``stage``), ``optimized``,
    ``buffer-assignment``, ``memory-usage-report``, ``debug_options``, ``other``; ``platform`` is the word before
    ``after_optimizations`` (``cpu_``, ``sm_9.0_gpu_``, or empty on a TPU)."""
    kind: str
    step: int | None = None
    stage: str | None = None
    platform: str | None = None

def module_of_name(name: str) -> tuple[str, str] | None:
    """(module id, module name) of a ``before_optimizations`` file, else None."""
    m = _BEFORE_OPT.match(name)
    return (m["id"], m["name"]) if m else None

def guess_module_name(name: str) -> str | None:
    """The module name of a file whose module has no ``before_optimizations`` file: what
    stands before the step or before the optimized module's tail."""
    m = re.match(r"^module_\d+\.(?P<name>.+?)\.\d{4,}\..+\.txt$", name) or \
        re.match(r"^module_\d+\.(?P<name>.+)\.(?:[^.]*_)?after_optimizations(?:-[a-z-]+)?\.txt$", name)
    return m["name"] if m else None

def describe(name: str) -> tuple[str, FileName] | None:
    """(``module_NNNN.<module>``, what the rest says) of a dump file's name read alone, without
    its folder (the module's name is what stands before the step, before
    ``before_optimizations``, or before the optimized module's tail); None for a name that is
    not a module's file."""
    if not _PREFIX.match(name):
        return None
    found = module_of_name(name)
    module = found[1] if found else guess_module_name(name)
    if module is None:
        return None
    key = name[:name.index(".") + 1] + module
    return key, parse_file_name(name[len(key) + 1:])

def parse_file_name(tail: str) -> FileName:
    """What the part of a file name after ``module_NNNN.<module>.`` says."""
    if tail == "before_optimizations.txt":
        return FileName("before_optimizations")
    if tail == "debug_options":        # the compile's DebugOptions, as text (any backend)
        return FileName("debug_options")
    m = _STEP.match(tail)
    if m:
        return FileName("snapshot", int(m["step"]), m["stage"])
    m = _OPTIMIZED.match(tail)
    if m:
        kind = {None: "optimized", "-buffer-assignment": "buffer-assignment",
                "-memory-usage-report": "memory-usage-report"}.get(m["kind"], "other")
        return FileName(kind, platform=m["platform"])
    return FileName("other")

def backend_of_module_text(text: str) -> str | None:
    """"tpu" for an optimized module whose layouts are tiled (``f32[8,128]{1,0:T(8,128)}``:
    only the TPU compiler writes tiles into HLO layouts), else None: an untiled module does not
    say whether XLA:CPU or XLA:GPU made it."""
    return "tpu" if _TILED.search(text) else None

class BackendMismatch(ValueError):
    """A module from one backend handed to an analysis made for another."""

def require_backend(path, text: str, want: str, analysis: str, *, folder_backend: str | None = None) -> None:
    """Refuse, by name, a module ``analysis`` (made for backend ``want``) cannot price: one whose
    dump or text says it comes from another backend."""
    found = folder_backend or backend_of_module_text(text)
    if found is not None and found != want:
        raise BackendMismatch(
            f"{path}: a module compiled for {BACKENDS[found].chip} ({_why(found, path)}); "
            f"{analysis} is made for {BACKENDS[want].chip} modules only and does not guess")

def _why(backend: str, path) -> str:
    if backend == "tpu":
        return "its layouts are tiled, as only the TPU compiler writes them"
    return f"its file name {Path(str(path)).name} says so"


# ---- from pytest_dumpref/xla/traffic.py ---------------------------------------------------

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


# ---- from pytest_dumpref/xla/cpu/cost_model.py --------------------------------------------

# Large blocks are mapped per call by glibc at and above this size (timing.ALLOCATOR_ENV).
MMAP_BYTES = 32 * 2 ** 20

PAGE = 4096

# Below this many flops a program ran on the calling thread (see the module docstring).
ASYNC_MIN_OPS = 1024

INLINE, WORKER = "inline", "worker thread"     # the two dispatches, as Prediction names them

class CostModelError(ValueError):
    """The model cannot price a program; the message names the kernels and operations."""

# Instructions that compute nothing of their own inside a kernel: their cost is the bytes the
# kernel reads and writes, which the memory term counts.
_MOVE = frozenset({
    "parameter", "constant", "broadcast", "bitcast", "reshape", "slice", "concatenate",
    "transpose", "copy", "pad", "reverse", "get-tuple-element", "tuple", "dynamic-slice",
    "dynamic-update-slice", "iota", "bitcast-convert", "gather",
})

_CHEAP = frozenset({"add", "subtract", "multiply", "maximum", "minimum", "negate", "abs", "convert",
                    "sign", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "clamp"})

_INTEGER_ONLY = frozenset({"and", "or", "xor", "not", "shift-left", "shift-right-logical",
                           "shift-right-arithmetic", "popcnt", "count-leading-zeros"})

_SELECT = frozenset({"compare", "select"})

_NAMED = {"exponential": "exp", "tanh": "tanh", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt"}

# The per-element floor of a one-op loop kernel (module docstring): a rate of Rates.compute,
# not an operation's class; a kernel's count of it is in Kernel.one_op.
ONE_OP = "one-op loop"

# A one-op kernel's floor by its operation, measured apart (calibrate's chains of each kind):
# the loop copies each operand's vectors through the stack, so that an operand more costs
# more.  Measured on an AMD EPYC (every buffer in the level-2 cache; one run, the slope between
# 16 and 64 rows, as the chains then ran): 124 ps an element for x * y, 81 for a negate or a
# floor, 160 for a select, 160 for a compare (its mask, a byte an element, then read by a
# select).  At the two-operand floor, huber_loss's unfused abs was priced 148 us and ran 77
# (perf, in the run that measured the rates), its compare 156 and 195, its select 150 and 199;
# at their own, in another run, 93 and 95, 186 and 186, 184 and 180.  A one-op kernel of no
# kind here (two operands, or more but not a select) takes ONE_OP.  Operands are counted
# distinct: x * x (jnp.square, a layer norm's variance) reads one array, and a chain of x + x
# one-op kernels over f32[rows, 1024] ran 75-83 ps an element at every size from 16 to 4,096
# rows (AMD EPYC, 2026-12-06; the slope between chains of 4 and 12), where the negate's floor
# measured in the same run was 81 and x * y's 129.  In the order calibrate measures them: the
# compare chain's selects are taken out at the select floor.
ONE_OP_KINDS = ("unary", "select", "compare")

# A one-op kernel whose rows are not a whole number of the loop's tiles (RAGGED_TILE_BYTES of
# its narrowest type: 16 f32, 32 bf16, 64 pred) costs more an element, every element: the
# loop emitter's code for such rows is another (in its IR, a quarter to a half of the vector
# instructions of the whole rows').  Measured on an AMD EPYC (2026-12-06, one-op chains in the level 2, the
# slope between 8 and 32 rows, two runs): x * y 150 ps an element over rows of 1,024 floats,
# 288-301 over 1,026 and 1,032, 165-169 over 1,040; a floor 76-94, 212-244 over 1,026 and
# 1,032; a select (a mask of a byte an element) 154-187 over 1,024, 240-264 over 1,026, 1,032,
# 1,040 and 1,056 (none a multiple of 64 bytes of mask).  pad_tanh's unfused multiply, over
# f32[1026, 1026], ran 326 us in the render of 2026-12-06 where the floor priced it at 163.
# The excess is measured on x * y (calibrate: a chain over rows of ROW + 8) and added to the
# floor of any kind.  Rows of one tile or less are not told apart: 8 floats ran at 144 ps an
# element, 12 at 1,164 and 4 at 257 (the same runs), and are priced at the floor.
RAGGED = f"{ONE_OP} (ragged rows)"

RAGGED_TILE_BYTES = 64

def one_op_floor(kind: str) -> str:
    """The rate of Rates.compute of a one-op loop kernel's floor of ``kind`` (ONE_OP_KINDS),
    ONE_OP for ''."""
    return f"{ONE_OP} ({kind})" if kind else ONE_OP

def one_op_kind(inst: Instruction) -> str:
    """The kind of the floor of a one-op loop kernel whose one computing instruction is ``inst``."""
    if inst.opcode in ("compare", "select"):
        return inst.opcode
    return "unary" if len(set(inst.operands)) == 1 else ""

# The operations measured alone in a one-op loop kernel as well (their rate there is
# alone(class)): XLA:CPU emits such a kernel by another path than a loop fusion of several
# instructions, and an exp alone cost 1.3 times what an exp beside an add did (module
# docstring).  Not log and rsqrt: alone, their cost depends on the input's sign (on standard
# normal input, half of it negative, 1.9 and 2.6 ns an element on an Intel Xeon, where on
# |x| beside an add 0.70 and 0.52), which a model of operation classes cannot see.  Their rate
# is the operation's kernel without its memory (calibrate's chains in the level 2), which the
# p-norm then meets as every one-op kernel's floor.
ALONE = ("exp", "tanh", "divide", "sqrt", "transpose")

def alone(cls: str) -> str:
    """The rate of Rates.compute for an operation of class ``cls`` alone in a one-op loop kernel."""
    return f"{cls} ({ONE_OP})"

# The classes measured in a loop kernel that LLVM left scalar (module docstring); their rate
# there is scalar(class).
SCALAR = ("cheap", "tanh")

SCALAR_LOOP = "scalar loop"

def scalar(cls: str) -> str:
    """The rate of Rates.compute for an operation of class ``cls`` in a scalar loop kernel."""
    return f"{cls} ({SCALAR_LOOP})"

# Inside a fusion, instructions that are not the kernel's one operation.
_NOT_AN_OP = frozenset({"parameter", "constant", "bitcast"})

_TRANSCENDENTAL = frozenset({"exp", "tanh", "log", "sqrt", "rsqrt"})

_REFUSED_CONTROL = frozenset({"while", "conditional", "call", "async-start", "async-done"})

def _is_int(et: str) -> bool:
    return et[:1] in ("s", "u") and et[1:].isdigit()

def ragged_rows(comp, inst: Instruction) -> bool:
    """Whether a one-op kernel computing ``inst`` has rows that are not a whole number of its
    loop's tiles (RAGGED): the minor dimension of its output, longer than one tile, is not a
    multiple of RAGGED_TILE_BYTES of the narrowest type among its output and operands."""
    shapes = [inst.shape] + [comp.instruction(o).shape for o in inst.operands]
    if any(s.is_tuple for s in shapes) or not inst.shape.element_count:
        return False
    minor = _minor(inst.shape)
    if minor is None:
        return False
    width = min(s.byte_size // s.element_count for s in shapes if s.element_count)
    tile = RAGGED_TILE_BYTES // max(width, 1)
    n = inst.shape.dims[minor]
    return n > tile and n % tile != 0

def _minor(shape) -> int | None:
    """The minor-most dimension of ``shape`` that is longer than 1 (None: a scalar's)."""
    return next((d for d in shape.minor_to_major if shape.dims[d] != 1), None)

def transposes(comp, inst: Instruction) -> bool:
    """A copy or transpose that reads its operand across its rows: the output's minor-most
    dimension is not the operand's, so consecutive elements written come from elements a
    row apart (a copy that only relabels the layout, as the transpose inside XLA's
    ``transpose_copy_fusion`` does, moves nothing and is not one)."""
    if inst.opcode not in ("copy", "transpose") or inst.shape.is_tuple or not inst.operands:
        return False
    src = comp.instruction(inst.operands[0]).shape
    out = _minor(inst.shape)
    if out is None or src.is_tuple:
        return False
    perm = int_list(inst.attrs.get("dimensions")) if inst.opcode == "transpose" else range(len(inst.shape.dims))
    return list(perm)[out] != _minor(src)

def _fed_by_broadcast(comp, inst: Instruction) -> bool:
    """Whether a broadcast is among what ``inst`` computes from, inside its computation."""
    seen, todo = set(), list(inst.operands)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        i = comp.instruction(name)
        if i.opcode == "broadcast":
            return True
        todo += i.operands
    return False

def op_class(comp, inst: Instruction) -> tuple:
    """(class, count) of one instruction inside a kernel; class None: moves data only;
    class '?': no rate for it."""
    op, shape = inst.opcode, inst.shape
    n = 0 if shape.is_tuple else shape.element_count
    if transposes(comp, inst):
        # measured apart (calibrate.k_transpose): each element read is a row away from the
        # last.  One fed by a broadcast is refused: x.T + 1 and x.T * 2 + y, whose fused
        # kernels transpose a value computed from a broadcast, ran 7 times as long as
        # x.T + y (3,258 and 3,358 us against 479 over f32[1024, 1024], where exp(x.T) + y
        # ran 772): XLA emits them otherwise, and no rate is measured for that
        return ("?" if _fed_by_broadcast(comp, inst) else "transpose"), n
    if op == "slice" and any(":" in p and p.count(":") == 2 and p.rsplit(":", 1)[1].strip("]} {") != "1"
                             for p in inst.attrs.get("slice", "").split(",")):
        # a strided slice makes the loop read every other element: no rate is measured for it
        return "?", n
    if op in _MOVE:
        return None, 0
    if op == "reduce":
        src = comp.instruction(inst.operands[0]).shape
        k = max(1, len(inst.operands) // 2)
        # over the minor-most dimension (a row) or across rows: measured apart, since a
        # column sum strides through memory (calibrate.k_colsum)
        minor = src.minor_to_major[0] if src.dims else 0
        cls = "reduce" if minor in int_list(inst.attrs.get("dimensions")) else "reduce (across rows)"
        return cls, src.element_count * k
    if op == "dot":
        lhs = comp.instruction(inst.operands[0]).shape
        contract = int_list(inst.attrs.get("lhs_contracting_dims"))
        size = 1
        for d in contract:
            size *= lhs.dims[d]
        return "dot", 2 * n * size
    if op == "convolution":
        kernel = comp.instruction(inst.operands[1]).shape
        labels = inst.attrs.get("dim_labels", "")
        try:
            o = labels.split("_")[1].split("->")[0].index("o")
            per_out = kernel.element_count // kernel.dims[o]
        except (IndexError, ValueError):
            return "?", 0
        return "convolution", 2 * n * per_out
    if op in _NAMED:
        return _NAMED[op], n
    if op == "divide":
        return ("?" if _is_int(shape.element_type) else "divide"), n
    if op in _SELECT or (op in ("and", "or", "not", "xor") and shape.element_type == "pred"):
        return "select", n
    if op in _CHEAP or op in _INTEGER_ONLY:
        return ("integer" if _is_int(shape.element_type) else "cheap"), n
    return "?", n

@dataclass
class Access:
    """Bytes of one buffer segment a kernel touches, and that memory's reuse distance."""
    segment: tuple
    nbytes: float
    distance: float = 0.0
    write_only: bool = False      # written by the kernel and not read by it
    written: float = 0.0          # write-only: all the bytes the kernel only writes (its fill)
    # when (kernel positions in two laps of the program, this kernel's in the second) the
    # memory was last touched and is touched again: ``_elapsed`` turns them into seconds
    last: int = -1
    at: int = -1
    short_run: bool = False       # its kernel moves memory in runs shorter than a page (short_runs)

@dataclass
class Kernel:
    name: str
    opcode: str
    kind: str                     # 'loop', 'library' (kCustom: YNNPACK), or the opcode
    ops: dict                     # class -> element count (flops for dot and convolution)
    unknown: list                 # opcodes with no rate
    accesses: list
    fault_pages: float = 0.0
    one_op: float = 0.0           # a one-op loop kernel: its elements (module docstring)
    one_op_kind: str = ""         # and the kind of its floor (ONE_OP_KINDS; '': ONE_OP)
    ragged: bool = False          # and its rows are not a whole number of its loop's tiles (RAGGED)
    scalar: bool = False          # LLVM left its loop scalar: its IR holds no vector type
    elements: float = 0.0         # a loop kernel's output elements (a scalar loop's iterations)
    lean: bool = False            # its code read, its loop copies no vector through the stack (ONE_OP_OVERLAP)

    @property
    def nbytes(self) -> float:
        return sum(a.nbytes for a in self.accesses)

    @property
    def working_set(self) -> float:
        return sum(s[2] - s[1] for s in {a.segment for a in self.accesses})

@dataclass
class ProgramCost:
    """What ``analyse`` found: kernels in execution order, and what it cannot price."""
    module: str
    kernels: list
    refused: list                 # "kernel: why" for each kernel the model cannot price
    source: str = ""

    @property
    def operations(self) -> float:
        """Flops as XLA counts them: transcendentals are counted apart and do not decide
        where PJRT runs the program (an exp-only program ran inline)."""
        return sum(n for k in self.kernels for c, n in k.ops.items() if c not in _TRANSCENDENTAL)

class _Buffers:
    """Instruction (and tuple index) -> the allocation segments holding its value."""

    def __init__(self, module: HloModule, ba_text: str | None, source: str):
        self.module = module
        self.values: dict = {}    # (name, index) -> (allocation, offset, size)
        self.kinds: dict = {}     # allocation -> kinds
        self.bounds: dict = {}    # allocation -> sorted segment boundaries
        if ba_text is not None:
            for a in parse_buffer_assignment(ba_text, source=source):
                self.kinds[a.index] = a.kinds
                b = {0, a.size}
                for v in a.values:
                    self.values.setdefault((v.name, v.index), (a.index, v.offset, v.size))
                    b.update((v.offset, v.offset + v.size))
                self.bounds[a.index] = sorted(b)
        self.synthetic = ba_text is None

    def of(self, name: str, index: str = "{}") -> list:
        """Segments (allocation, start, end) of a value; follows bitcasts and tuple elements."""
        inst = self.module.entry.instruction(name)
        if self.synthetic:
            return self._synthetic(inst, index)
        if (name, index) in self.values:
            a, off, size = self.values[(name, index)]
            return self._split(a, off, off + size)
        if inst.opcode == "get-tuple-element":
            i = inst.attrs.get("index", "0")
            return self.of(inst.operands[0], "{" + i + "}")
        if inst.opcode in ("bitcast", "copy") and inst.operands:
            return self.of(inst.operands[0], index)
        if index == "{}" and inst.shape.is_tuple:
            out = []
            for i in range(len(inst.shape.tuple_shapes)):
                out += self.of(name, "{" + str(i) + "}")
            return out
        keys = [k for k in self.values if k[0] == name]
        if keys:
            out = []
            for k in keys:
                a, off, size = self.values[k]
                out += self._split(a, off, off + size)
            return out
        raise CostModelError(f"{self.module.source or self.module.name}: no buffer for {name}{index} "
                             f"in the buffer assignment")

    def _synthetic(self, inst, index) -> list:
        if inst.opcode in ("bitcast", "get-tuple-element", "copy") and inst.operands:
            return self._synthetic(self.module.entry.instruction(inst.operands[0]), index)
        return [(inst.name, 0, inst.shape.byte_size)]

    def _split(self, a, start, end) -> list:
        b = self.bounds[a]
        i = bisect.bisect_right(b, start) - 1
        out = []
        while i < len(b) - 1 and b[i] < end:
            out.append((a, max(b[i], start), min(b[i + 1], end)))
            i += 1
        return out

    def fresh_per_call(self, segment) -> bool:
        """Output or temporary memory (malloc'd per call), not a parameter or constant."""
        if self.synthetic:
            inst = self.module.entry.instruction(segment[0])
            return inst.opcode not in ("parameter", "constant")
        kinds = self.kinds.get(segment[0], ())
        return not any(k in kinds for k in ("parameter", "constant", "thread-local"))

    def allocation_size(self, segment) -> float:
        if self.synthetic:
            return segment[2] - segment[1]
        return self.bounds[segment[0]][-1]

def require_xla_cpu(source, hlo_text: str) -> None:
    """CostModelError naming ``source`` for a module another backend compiled (its text says so:
    ``naming.require_backend``): the rates are this machine's, for XLA:CPU's kernels."""
    try:
        require_backend(source, hlo_text, "cpu", "the kernel cost model (XLA:CPU's kernels priced at "
                        "rates measured on this machine)")
    except BackendMismatch as e:
        raise CostModelError(str(e)) from None

def analyse(hlo_text: str, buffer_assignment_text: str | None = None, *, source: str = "",
            scalar_kernels: frozenset = frozenset(), lean_kernels: frozenset = frozenset()) -> ProgramCost:
    """The kernels of an optimized module, their operation counts and their accesses with
    reuse distances (rate-independent: ``predict`` prices them).  ``scalar_kernels``: the loop
    kernels LLVM left scalar; ``lean_kernels``: the one-op kernels whose loop does not copy its
    vectors through the stack (``kernel_code.scalar_kernels`` and ``kernel_code.lean_kernels``
    read both from the code the dump holds beside the module)."""
    module = parse_module(hlo_text, source=source or None)
    require_xla_cpu(source or module.name, hlo_text)
    buffers = _Buffers(module, buffer_assignment_text, source or module.name)
    entry = module.entry
    kernels, refused = [], []
    for inst in entry.instructions:
        op = inst.opcode
        if op in ("parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
                  "opt-barrier", "add-dependency"):
            continue
        if op in _REFUSED_CONTROL or op.endswith("-start") or op.endswith("-done"):
            refused.append(f"{inst.name}: {op}: the model prices straight-line programs only")
            continue
        ops: dict[str, float] = {}
        unknown: list = []
        if op == "fusion":
            kind = "library" if inst.fusion_kind == "kCustom" else "loop"
            comp = module.computations[inst.called[0]]
            body = comp.instructions
        else:
            kind, comp, body = op, entry, [inst]
        for i in body:
            cls, n = op_class(comp, i)
            if cls == "?":
                unknown.append("strided slice" if i.opcode == "slice" else
                               "transpose of a broadcast's value" if transposes(comp, i) else i.opcode)
            elif cls is not None:
                ops[cls] = ops.get(cls, 0) + n
        one_op, floor_kind, ragged = 0.0, "", False
        if kind == "loop":
            computing = [i for i in body if i.opcode not in _NOT_AN_OP]
            if len(computing) == 1 and op_class(comp, computing[0])[0] not in (None, "?"):
                one_op = float(computing[0].shape.element_count)
                floor_kind = one_op_kind(computing[0])
                ragged = ragged_rows(comp, computing[0])
        if op == "custom-call":
            unknown.append(f"custom-call {inst.attrs.get('custom_call_target', '?')}")
        if unknown:
            refused.append(f"{inst.name}: no measured rate for {', '.join(sorted(set(unknown)))}")
        # every distinct segment the kernel reads or writes, once: a line read and written
        # in place is fetched once and written back once, as a line only read or only written
        # is (write-allocate); see the module docstring for the measurement
        out = buffers.of(inst.name)
        segs: list = []
        sliced: dict[tuple, float] = {}
        root = module.computations[inst.called[0]].root if op == "fusion" else inst
        in_place = root.opcode == "dynamic-update-slice"
        for i, o in enumerate(inst.operands):
            of = buffers.of(o)
            segs += of
            part = _touched_bytes(module, inst, i)
            if part is not None and len(of) == 1:
                sliced[of[0]] = sliced.get(of[0], 0.0) + part
            else:
                sliced.update({sg: math.inf for sg in of})   # read whole where any use is
        read = set(segs)
        # an output is written whole, but for the operand a dynamic-update-slice updates in place
        accesses = [Access(sg, float(sg[2] - sg[1]) if sg in out and (sg not in read or not in_place)
                           else min(float(sg[2] - sg[1]), sliced[sg]), write_only=sg not in read)
                    for sg in dict.fromkeys(segs + out)]
        written = sum(a.nbytes for a in accesses if a.write_only)
        short = short_runs(module, inst)
        for a in accesses:
            a.short_run = short
            if a.write_only:
                a.written = written
        pages = 0.0
        for s in {s for s in out}:
            if buffers.fresh_per_call(s) and buffers.allocation_size(s) >= MMAP_BYTES:
                pages += (s[2] - s[1]) / PAGE
        shape = inst.shape
        elements = float(sum(t.element_count for t in shape.tuple_shapes) if shape.is_tuple else shape.element_count)
        kernels.append(Kernel(inst.name, op, kind, ops, unknown, accesses, pages, one_op, floor_kind, ragged,
                              scalar=kind == "loop" and inst.name in scalar_kernels,
                              elements=elements if kind == "loop" else 0.0, lean=inst.name in lean_kernels))
    _reuse_distances(kernels)
    return ProgramCost(module.name, kernels, refused, source)

# A kernel touches the lines of an operand that its slices cover, not the operand: halves'
# unfused slices of x[:, :512] over f32[1024, 1024] ran 137-142 us each (jax's profiler,
# fastest of 200 calls) where the whole 4 MiB operand priced them at 197.  And an update in
# place (a dynamic-update-slice writing into its operand's buffer) touches the lines it
# updates: kv_cache_update's fused kernel, 16 rows of a 4 MiB cache, was priced at 134 us
# for the whole cache, and its program at 417 us where it ran 286.
_SLICING = frozenset({"slice", "dynamic-slice"})

LINE = 64

# A run shorter than a page (4 KiB, the span of the hardware's stream prefetch on the machines
# seen) is priced at the short-run ratio (module docstring).
SHORT_RUN_BYTES = PAGE

def _run_bytes(part, whole) -> float:
    """The bytes of one contiguous run of a region of shape ``part`` inside an array of
    shape ``whole`` (same rank, same layout): its dimensions from the minor-most up to the
    first it does not span whole; infinite where it spans the array (one run)."""
    if part.is_tuple or whole.is_tuple or not part.element_count or len(part.dims) != len(whole.dims) \
            or list(part.minor_to_major) != list(whole.minor_to_major):
        return math.inf
    run = part.byte_size / part.element_count
    for d in part.minor_to_major:
        run *= part.dims[d]
        if part.dims[d] != whole.dims[d]:
            return run
    return math.inf

def short_runs(module: HloModule, inst: Instruction) -> bool:
    """Whether a kernel moves memory in runs shorter than a page (SHORT_RUN_BYTES): a
    concatenate (XLA:CPU's, a ``memmove`` a run) whose operand's rows are narrower than its
    output's, or a slice, alone or in a loop fusion, that cuts its operand's rows so."""
    if inst.opcode == "concatenate":
        return any(_run_bytes(module.entry.instruction(o).shape, inst.shape) < SHORT_RUN_BYTES
                   for o in inst.operands)
    if inst.opcode != "fusion" or inst.fusion_kind == "kCustom":
        return False
    comp = module.computations[inst.called[0]]
    return any(x.opcode in _SLICING and _run_bytes(x.shape, comp.instruction(x.operands[0]).shape) < SHORT_RUN_BYTES
               for x in comp.instructions)

def _lines_bytes(shape) -> float:
    """The bytes of the cache lines a region of this shape covers inside a larger array: a
    run of its minor dimension shorter than a line still costs whole lines."""
    if shape.is_tuple or not shape.dims or not shape.element_count:
        return float(shape.byte_size)
    run = shape.dims[shape.minor_to_major[0]] * shape.byte_size / shape.element_count
    return shape.byte_size * max(1.0, LINE / run) if run else 0.0

def _touched_bytes(module: HloModule, inst: Instruction, i: int) -> float | None:
    """The bytes of operand ``i`` that ``inst`` touches when every use of it is a slice taken
    from it or the update in place of a dynamic-update-slice (the lines those cover); None
    when the kernel reads it whole."""
    comp = module.computations[inst.called[0]] if inst.opcode == "fusion" else None
    if comp is None:
        uses, name = [inst], inst.operands[i]
    else:
        param = next((x for x in comp.instructions if x.opcode == "parameter" and x.parameter_number == i), None)
        if param is None:
            return None
        uses, name = [x for x in comp.instructions if param.name in x.operands], param.name
    total = 0.0
    for x in uses:
        if x.operands.count(name) != 1 or x.operands[0] != name:
            return None
        if x.opcode in _SLICING:
            total += _lines_bytes(x.shape)
        elif x.opcode == "dynamic-update-slice" and (x.is_root or comp is None):
            update = (comp or module.entry).instruction(x.operands[1])
            total += _lines_bytes(update.shape)
        else:
            return None
    return total if uses else None

def _reuse_distances(kernels: list) -> None:
    """Each access's reuse distance in bytes, in the steady state of repeated calls.

    A kernel streams its buffers from start to end, so a line of a buffer was last touched
    partway through the kernel that last touched it, and is touched again partway through
    this one: on average half of the last kernel's other bytes came after it, and half of
    this kernel's come before it.  The distance is therefore half the bytes of the last
    toucher, all the distinct bytes of the kernels in between, and half the bytes of this
    kernel (a byte in both halves counts once).  For a kernel called again and again on the
    same buffers (the calibration's stream) this is its working set, the point the curve
    was measured at.
    """
    n = len(kernels)
    segs = [{a.segment: a.segment[2] - a.segment[1] for a in k.accesses} for k in kernels]
    # A Fenwick tree over time holds each segment's size at the time it was last touched,
    # so the bytes touched between two kernels are one prefix-sum difference (programs of
    # thousands of kernels stay linear-logarithmic).
    tree = [0.0] * (2 * n + 1)

    def add(i, v):
        i += 1
        while i <= 2 * n:
            tree[i] += v
            i += i & -i

    def upto(i):                          # sum over times 0..i
        i += 1
        total = 0.0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    last: dict = {}
    for t in range(2 * n):               # the second lap sees the previous call's accesses
        i = t % n
        mine = segs[i]
        if t >= n:
            # this kernel's segments by when they were last touched, with running sums: the
            # bytes of those not touched since kernel j are one bisection away
            order = sorted((last.get(s_, -1), size) for s_, size in mine.items())
            whens = [w for w, _ in order]
            running = list(itertools.accumulate(size for _, size in order))
            own = {}                                     # j -> kernel j's bytes untouched since
            for a in kernels[i].accesses:
                j = last[a.segment]
                between = upto(t - 1) - upto(j)          # distinct bytes touched after kernel j
                if j not in own:
                    own[j] = sum(size for s_, size in segs[j % n].items() if last[s_] == j)
                k = bisect.bisect_right(whens, j)
                a.distance = float(between + 0.5 * own[j] + 0.5 * (running[k - 1] if k else 0.0))
                a.last, a.at = j, t
        for s_, size in mine.items():
            if s_ in last:
                add(last[s_], -size)
            add(t, size)
            last[s_] = t

def _by_distance(points: list, distance: float) -> float:
    """The value of ``points`` ([(distance, value)], increasing) at ``distance``: interpolated
    in log(distance) between them, clamped at both ends."""
    xs = [math.log(max(d, 1.0)) for d, _ in points]
    x = math.log(max(distance, 1.0))
    k = bisect.bisect_left(xs, x)
    if k == 0:
        return points[0][1]
    if k == len(xs):
        return points[-1][1]
    f = (x - xs[k - 1]) / (xs[k] - xs[k - 1])
    return points[k - 1][1] + f * (points[k][1] - points[k - 1][1])

NO_SHORT_RUN = "no measured cost of runs shorter than a page (rates older than the model: run calibrate again)"

@dataclass
class Rates:
    """This machine's rates (``calibrate.py`` measures them; JSON round-trips)."""
    dispatch_inline_s: float
    dispatch_async_s: float
    launch_s: float
    curve: list                   # [(reuse distance in bytes, seconds per byte)], increasing
    cold_s_per_byte: float
    fault_s: float
    compute: dict                 # class -> seconds per element (per flop for dot, convolution)
    machine: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    # memory a kernel only writes, by the bytes it writes (a write-only broadcast); empty: `curve`
    write_curve: list = field(default_factory=list)
    # class -> why this machine's XLA left it unmeasured (its calibration kernel compiled
    # otherwise); a kernel of that class is refused with the reason
    unmeasured: dict = field(default_factory=dict)
    # bytes of the shared cache that the machine's other tenants take a second: memory last
    # touched t seconds ago is priced at its reuse distance plus t times this (module
    # docstring); 0: not measured (rates older than it), distances in bytes alone
    age_bytes_per_s: float = 0.0
    # [(distance in bytes, ratio)], increasing: memory moved in runs shorter than a page
    # (short_runs) against the stream at the same distance (calibrate's concatenate); empty:
    # not measured (rates older than it), and a kernel that moves such runs is refused
    short_run: list = field(default_factory=list)

    def seconds_per_byte(self, distance: float, *, write_only: bool = False) -> float:
        """Interpolated in log(distance) between measured points; clamped at both ends."""
        return _by_distance(self.write_curve if write_only and self.write_curve else self.curve, distance)

    def distance(self, a: Access, aged: float = 0.0) -> float:
        """The distance the access is priced at: its reuse distance, plus the bytes the
        tenants took of the shared cache while its memory waited ``aged`` seconds."""
        return a.distance + self.age_bytes_per_s * aged

    def access_seconds(self, a: Access, aged: float = 0.0) -> float:
        """The access's memory time, its memory ``aged`` seconds old (``distance``)."""
        distance = self.distance(a, aged)
        if a.write_only and self.write_curve:
            # the store stream's cost at the size written, or the line's fetch from its
            # reuse distance where dearer (module docstring)
            seconds = a.nbytes * max(self.seconds_per_byte(a.written or a.nbytes, write_only=True),
                                     self.seconds_per_byte(distance))
        else:
            seconds = a.nbytes * self.seconds_per_byte(distance)
        return seconds * self.short_run_ratio(distance) if a.short_run else seconds

    def short_run_ratio(self, distance: float) -> float:
        """The cost of memory moved in runs shorter than a page against the stream's, at
        ``distance``: interpolated in log(distance) between measured points, clamped at both
        ends."""
        if not self.short_run:
            raise CostModelError(f"the rates have {NO_SHORT_RUN}")
        return _by_distance(self.short_run, distance)

    def memory_seconds(self, kernel: Kernel, ages: dict | None = None) -> float:
        """``ages``: seconds since each access's memory was last touched (``_elapsed``)."""
        return sum(self.access_seconds(a, (ages or {}).get(id(a), 0.0)) for a in kernel.accesses)

    def compute_seconds(self, kernel: Kernel) -> tuple:
        """(seconds, class that costs most)."""
        # an operation alone in a one-op loop kernel costs its rate there (ALONE)
        if kernel.scalar:       # a scalar loop: every operation at its rate there
            rate_of = {c: scalar(c) for c in kernel.ops}
        else:
            rate_of = {c: alone(c) if kernel.one_op and c in ALONE else c for c in kernel.ops}
        missing = [r for r in rate_of.values() if r not in self.compute]
        floor_rate = one_op_floor(kernel.one_op_kind)
        if kernel.one_op and not kernel.scalar and floor_rate not in self.compute:
            missing.append(floor_rate)
        ragged = kernel.one_op and not kernel.scalar and kernel.ragged
        if ragged and RAGGED not in self.compute:
            missing.append(RAGGED)
        if kernel.scalar and SCALAR_LOOP not in self.compute:
            missing.append(SCALAR_LOOP)
        if missing:
            old = " (rates older than the model: run calibrate again)" if any(ONE_OP in m for m in missing) else ""
            why = "".join(f" ({m}: {self.unmeasured[m]})" for m in missing if m in self.unmeasured)
            raise CostModelError(f"{kernel.name}: the rates have no measured rate for {', '.join(missing)}{old}{why}")
        parts = {c: n * self.compute[rate_of[c]] for c, n in kernel.ops.items()}
        if kernel.scalar:       # a scalar loop's iterations cost beside its operations
            parts[SCALAR_LOOP] = kernel.elements * self.compute[SCALAR_LOOP]
        total = sum(parts.values())
        floor = kernel.one_op * self.compute[floor_rate] if kernel.one_op and not kernel.scalar else 0.0
        if ragged:
            floor += kernel.one_op * self.compute[RAGGED]
        if floor > total:
            return floor, (f"{floor_rate}, ragged rows" if ragged else floor_rate)   # the larger of the two
        if not parts:
            return 0.0, ""
        top = max(parts, key=lambda c: parts[c])
        return total, top

    def level(self, distance: float) -> str:
        caches = sorted((c["bytes"], c["level"]) for c in self.machine.get("caches", [])
                        if c.get("type") in ("Data", "Unified"))
        for size, lvl in caches:
            if distance <= size:
                return f"L{lvl}"
        return "DRAM" if caches else f"{distance / 2 ** 20:.1f} MiB away"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Rates":
        d = dict(d)
        d["curve"] = [tuple(p) for p in d["curve"]]
        d["write_curve"] = [tuple(p) for p in d.get("write_curve", [])]
        d["short_run"] = [tuple(p) for p in d.get("short_run", [])]
        return cls(**d)

    @classmethod
    def load(cls, path) -> "Rates":
        with open(path) as f:
            return cls.from_json(json.load(f))

@dataclass
class KernelTime:
    name: str
    kind: str
    seconds: float
    memory_s: float
    compute_s: float
    fault_s: float
    regime: str
    nbytes: float
    working_set: float

    def as_dict(self) -> dict:
        return {"kernel": self.name, "kind": self.kind, "us": self.seconds * 1e6, "memory us": self.memory_s * 1e6,
                "compute us": self.compute_s * 1e6, "faults us": self.fault_s * 1e6, "regime": self.regime,
                "bytes": self.nbytes, "working set": self.working_set}

@dataclass
class Prediction:
    module: str
    kernels: list                 # KernelTime, in execution order
    dispatch_s: float
    launch_s: float
    dispatch: str = INLINE        # which dispatch it charged: INLINE or WORKER (ASYNC_MIN_OPS says)
    flops: float = 0.0            # the program's flops as XLA counts them, which chose it

    @property
    def total_s(self) -> float:
        return self.dispatch_s + sum(k.seconds for k in self.kernels) - (self.launch_s if self.kernels else 0.0)

    def as_dict(self) -> dict:
        return {"module": self.module, "total us": self.total_s * 1e6, "dispatch us": self.dispatch_s * 1e6,
                "dispatch": self.dispatch, "flops": self.flops, "kernels": [k.as_dict() for k in self.kernels]}

# Rounds of pricing with the memory's age: a kernel's time sets how old the memory the next
# kernels touch is, which sets their time.  On the fusion study's programs (both variants of
# the 29 priced, at 3.9 GiB/s) the totals of two rounds came within 0.05 % of three rounds',
# one round's within 0.6 %.
AGE_ROUNDS = 2

# The p of a one-op loop kernel's p-norm of memory and compute (module docstring): chosen on
# one sampled run of the fusion study's programs, and held on two more.  Only a kernel whose
# loop copies its vectors through the stack, as jaxlib 0.10's one-op kernels do, or whose code
# was not read (kernel_code.lean_kernels); a lean one-op kernel takes the larger of the two, as
# a loop fusion does.
ONE_OP_OVERLAP = 3.0

def _body(k: Kernel, memory: float, compute: float) -> float:
    """A kernel's time beside its launch and faults: the larger of memory and compute, or a
    one-op loop kernel's p-norm of the two (ONE_OP_OVERLAP) where it is not lean, or the sum
    of the two for a library kernel that reduces (module docstring: it reads a row, then
    computes from it)."""
    if k.one_op and not k.scalar and not k.lean:
        return (memory ** ONE_OP_OVERLAP + compute ** ONE_OP_OVERLAP) ** (1.0 / ONE_OP_OVERLAP)
    if k.kind == "library" and any(c.startswith("reduce") for c in k.ops):
        return memory + compute
    return max(memory, compute)

def _elapsed(program: ProgramCost, seconds: list, dispatch_s: float) -> dict:
    """id(access) -> seconds between the touch of its memory before and this one: half of
    the kernel that touched it last (it streams its buffers, as the distances assume), every
    kernel in between, half of this one, and the dispatch of the next call where the two
    touches are in two calls of the program."""
    n = len(program.kernels)
    lap = [seconds[i % n] for i in range(2 * n)]
    before = [0.0, *itertools.accumulate(lap)]        # before[t]: seconds of kernels 0..t-1
    out = {}
    for k in program.kernels:
        for a in k.accesses:
            if a.last < 0:
                continue
            out[id(a)] = (0.5 * lap[a.last] + before[a.at] - before[a.last + 1] + 0.5 * lap[a.at]
                          + (dispatch_s if a.last < n else 0.0))
    return out

def predict(program: ProgramCost, rates: Rates) -> Prediction:
    """Price ``program``; raises CostModelError naming every kernel it cannot price."""
    if program.refused:
        raise CostModelError(f"{program.source or program.module}: cannot model " + "; ".join(program.refused))
    short = [k.name for k in program.kernels if any(a.short_run for a in k.accesses)]
    if short and not rates.short_run:
        raise CostModelError(f"{program.source or program.module}: {', '.join(short)}: the rates have {NO_SHORT_RUN}")
    worker = program.operations >= ASYNC_MIN_OPS
    dispatch = rates.dispatch_async_s if worker else rates.dispatch_inline_s
    times = _price(program, rates, {})
    for _ in range(AGE_ROUNDS if rates.age_bytes_per_s > 0 else 0):
        times = _price(program, rates, _elapsed(program, [t.seconds for t in times], dispatch))
    return Prediction(program.module, times, dispatch, rates.launch_s, WORKER if worker else INLINE,
                      program.operations)

def _price(program: ProgramCost, rates: Rates, ages: dict) -> list:
    """Each kernel's KernelTime, its memory ``ages`` (``_elapsed``) seconds old."""
    times = []
    for k in program.kernels:
        mem = rates.memory_seconds(k, ages)
        comp, cls = rates.compute_seconds(k)
        faults = k.fault_pages * rates.fault_s
        if comp > mem:
            regime = f"compute ({cls}, {SCALAR_LOOP})" if k.scalar and cls != SCALAR_LOOP else f"compute ({cls})"
        else:
            far = max(k.accesses, key=lambda a: rates.access_seconds(a, ages.get(id(a), 0.0)), default=None)
            where = rates.level(rates.distance(far, ages.get(id(far), 0.0))) if far else ""
            regime = "launch" if far is None else f"memory ({where}, short runs)" if far.short_run else f"memory ({where})"
        times.append(KernelTime(k.name, k.kind, rates.launch_s + _body(k, mem, comp) + faults, mem, comp, faults,
                                regime, k.nbytes, k.working_set))
    return times

def predict_text(hlo_text: str, buffer_assignment_text: str | None, rates: Rates, *, source: str = "",
                 scalar_kernels: frozenset = frozenset(), lean_kernels: frozenset = frozenset()) -> Prediction:
    """``analyse`` then ``predict``."""
    return predict(analyse(hlo_text, buffer_assignment_text, source=source, scalar_kernels=scalar_kernels,
                           lean_kernels=lean_kernels), rates)


# ---- from pytest_dumpref/xla/cpu/kernel_code.py -------------------------------------------

IR_TAIL = "_kernel_module.ir-with-opt.ll"

OBJECT_TAIL = "_kernel_module.o"

COMPUTE_MODULE = "__compute_module_"               # the other emitter's kernels' files

STACK_RESTORE_IR = "@llvm.stackrestore"

STACK_RESTORE = re.compile(r"^\s*[0-9a-f]+:\s+mov\s+%(?!rbp\b|rsp\b)[a-z0-9]+,%rsp\s*$", re.M)

VECTOR_TYPE = re.compile(r"<\d+ x (?:float|double|half|bfloat|i\d+)>")

VECTOR_LOAD = re.compile(r"= load <\d+ x ")

DISASSEMBLERS = ("objdump", "llvm-objdump") + tuple(f"llvm-objdump-{v}" for v in range(20, 13, -1))

X86_64 = 62                                    # ELF e_machine of x86-64

# x86 mnemonics that move or compute one element, though some name a vector register
ONE_ELEMENT = re.compile(r"^(?:v?p?broadcast|v?pinsr|v?pextr|v?movd$|v?movq$|v?insertps|v?extractps)|(?:ss|sd)$")

PACKED = re.compile(r"(?:ps|pd)$|^(?:vp|v?movdq|v(?:insert|extract)[if](?:128|32x4|64x2|32x8|64x4))")

INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(.*)$")

FILE_FORMAT = re.compile(r"^(.*\S):\s+file format (\S+)\s*$")

OPERAND = re.compile(r"[^,(]*\([^)]*\)|[^,]+")

class KernelCodeError(ValueError):
    """A kernel's object file the disassembler could not read; the message names the file."""

def _module_prefix(path: Path) -> str:
    """``module_NNNN.<module>.``, what every file XLA wrote for the module ``path`` begins with."""
    named = describe(path.name)
    return (named[0] if named else path.name) + "."

def _dumped(path, head: str, tail: str) -> dict:
    """kernel name -> each file ``<module>.<head><kernel><tail>`` XLA:CPU dumped beside the
    optimized module ``path``."""
    path = Path(path)
    prefix = _module_prefix(path) + head
    return {f.name[len(prefix):-len(tail)]: f for f in path.parent.glob(f"{glob.escape(prefix)}*{tail}")}

def kernel_irs(path) -> dict:
    """kernel name -> path of its optimized LLVM IR, as XLA:CPU dumps it beside the optimized
    module ``path`` (``<module>.<kernel>_kernel_module.ir-with-opt.ll``).

    Only the loop emitter's kernels.  The other emitter's (``<module>.__compute_module_<kernel>
    .ir-with-opt.ll``: the one-op kernels, and some fused copies) are priced at rates measured
    on kernels of that emitter, scalar where theirs are: the one-op transpose the calibration
    times (``k_transpose_alone``, a ``wrapped_copy``) holds no vector type, as transpose_add's
    unfused ``wrapped_copy`` does not.  In the 34 programs' dumps (jax 0.10.2, 2026-12-06) 17
    of the 226 such kernels are scalar: that copy; kernels of one element (a loss's f32[]
    multiply); scan_rnn's (refused: a while loop); and in transformer_block and
    causal_attention, copies of 64K-128K elements that keep the minor dimension
    (``wrapped_copy``, ``copy_bitcast_fusion``), which the model prices on their memory alone.
    Whether those run slower than their memory, being scalar, is not measured."""
    return _dumped(path, "", IR_TAIL)

def kernel_objects(path) -> dict:
    """kernel name -> path of its object file, as XLA:CPU dumps it beside the optimized module
    ``path`` (``<module>.obj-file.<kernel>_kernel_module.o``): the loop emitter's kernels."""
    return _dumped(path, "obj-file.", OBJECT_TAIL)

def ir_access(ir: str) -> str:
    """A kernel's vector access (the module's docstring) from its optimized LLVM IR."""
    if not VECTOR_TYPE.search(ir):
        return "none"
    return "loads" if VECTOR_LOAD.search(ir) else "stores"

def disassembler() -> str | None:
    """The first of ``DISASSEMBLERS`` on the PATH, or None."""
    return next((p for p in map(shutil.which, DISASSEMBLERS) if p), None)

def _elf_machine(path: Path) -> int | None:
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:      # little-endian ELF only
        return None
    return int.from_bytes(head[18:20], "little")

def unread_why(objects) -> str | None:
    """Why the object files ``objects`` cannot be read here, or None when they can."""
    if not objects:
        return None
    if disassembler() is None:
        return f"no disassembler on the PATH ({', '.join(DISASSEMBLERS[:2])}) to read the kernels' object code"
    other = sorted(str(f) for f in objects if _elf_machine(Path(f)) != X86_64)
    if other:
        return f"object code that is not x86-64 ELF is not read: {other[0]}"
    return None

def packed_accesses(disassembly: str) -> dict:
    """object file -> (packed loads, packed stores), from ``objdump -d`` output (AT&T syntax)
    of one or more files.  Accesses to the stack (spilled registers: ``%rsp``, ``%rbp``) and at
    an offset from ``%rip`` are not counted."""
    counts: dict = {}
    current = None
    for line in disassembly.replace("\t", " ").splitlines():
        head = FILE_FORMAT.match(line)
        if head:
            current = head.group(1)
            counts[current] = [0, 0]
            continue
        m = INSTRUCTION.match(line)
        if m is None or current is None:
            continue
        words = [w for w in m.group(1).split() if not w.startswith("{")]     # {evex}, {vex}
        if not words:
            continue
        mnemonic, operands = words[0], "".join(words[1:])
        if ONE_ELEMENT.search(mnemonic) or not (PACKED.search(mnemonic) or (mnemonic.startswith("p") and "%xmm" in operands)):
            continue
        parts = [o.strip() for o in OPERAND.findall(operands)]
        memory = [i for i, o in enumerate(parts) if "(" in o]
        if not memory or any(r in parts[i] for i in memory for r in ("%rsp", "%rbp", "%rip")):
            continue
        counts[current][1 if memory[-1] == len(parts) - 1 else 0] += 1
    return {f: tuple(c) for f, c in counts.items()}

def _disassemble(objects: dict) -> dict:
    """kernel name -> ``objdump -d`` text of its object file (``objects``: kernel name -> path),
    all disassembled in one call; raises KernelCodeError naming a file it could not read."""
    tool = disassembler()
    done = subprocess.run([str(tool), "-d", "--no-show-raw-insn", *map(str, objects.values())],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KernelCodeError(f"{tool} -d failed on {sorted(map(str, objects.values()))[0]}: "
                              f"{done.stderr.strip()[-500:]}")
    lines: dict = {}               # file -> its lines, from its "file format" line on
    current: list | None = None
    for line in done.stdout.splitlines():
        head = FILE_FORMAT.match(line)
        if head:
            current = lines.setdefault(head.group(1), [])
        if current is not None:
            current.append(line)
    missing = [str(f) for f in objects.values() if str(f) not in lines]
    if missing:
        raise KernelCodeError(f"{tool} -d printed no disassembly of {missing[0]}")
    return {name: "\n".join(lines[str(f)]) for name, f in objects.items()}

LOOP, COMPUTE = "loop", "compute"               # the two emitters (the module's docstring)

def compute_module_code(path) -> dict:
    """kernel name -> the code of each kernel of the other emitter (``__compute_module_``) of
    the optimized module ``path``: its optimized IR where dumped
    (``<module>.__compute_module_<kernel>.ir-with-opt.ll``), else its object file
    (``<module>.obj-file.__compute_module_<kernel>.o``)."""
    return {**_dumped(path, f"obj-file.{COMPUTE_MODULE}", ".o"), **_dumped(path, COMPUTE_MODULE, ".ir-with-opt.ll")}

def _read(files: dict) -> dict:
    """key -> (file, text) for ``files`` (key -> path): an IR file's text, an object file's
    disassembly, the object files in one disassembler call; an object file that cannot be
    read here (``unread_why``) is left out."""
    code = {k: (f, f.read_text()) for k, f in files.items() if f.suffix == ".ll"}
    objects = {k: f for k, f in files.items() if k not in code}
    if objects and not unread_why(objects.values()):
        code.update({k: (objects[k], text) for k, text in _disassemble(objects).items()})
    return code

def read_code(path) -> dict:
    """(emitter, kernel name) -> (file, text) of every kernel whose code XLA:CPU dumped beside
    the optimized module ``path`` and that can be read here: the loop emitter's (``LOOP``) and
    the other's (``COMPUTE``), each from its IR where that was dumped, else from its object
    file, all the object files disassembled in one call.  ``vector_accesses``,
    ``scalar_kernels`` and ``lean_kernels`` take it, so that one reading serves all three."""
    path = Path(path)
    loop = {**kernel_objects(path), **kernel_irs(path)}
    return _read({**{(LOOP, n): f for n, f in loop.items()},
                  **{(COMPUTE, n): f for n, f in compute_module_code(path).items()}})

def _access(f: Path, text: str) -> str:
    """A loop kernel's vector access from its IR or its disassembly."""
    if f.suffix == ".ll":
        return ir_access(text)
    loads, stores = next(iter(packed_accesses(text).values()), (0, 0))
    return "loads" if loads else ("stores" if stores else "none")

def vector_accesses(path, code: dict | None = None) -> dict:
    """kernel name -> vector access of each loop kernel of the optimized module ``path``:
    from its IR where that was dumped, from its object code where only that was
    (``code``: ``read_code(path)``, read here when not given)."""
    code = read_code(path) if code is None else code
    return {name: _access(f, text) for (emitter, name), (f, text) in code.items() if emitter == LOOP}

def scalar_kernels(path, code: dict | None = None) -> frozenset:
    """The loop kernels of the optimized module ``path`` that LLVM left scalar (the module's
    docstring: a vector access of ``"none"``, or of ``"stores"`` where the kernel copies an
    operand at least half its output's size).  A kernel whose code is not read is not among
    them.  ``code``: as ``vector_accesses``."""
    access = vector_accesses(path, code)
    scalar = {name for name, a in access.items() if a == "none"}
    unloaded = [name for name, a in access.items() if a == "stores"]
    if unloaded:
        entry = parse_module(Path(path).read_text(), source=str(path)).entry
        for name in unloaded:
            if name not in entry:
                continue
            inst = entry.instruction(name)
            if inst.shape.is_tuple:
                continue
            sizes = [entry.instruction(o).shape for o in inst.operands]
            if any(not s.is_tuple and 2 * s.element_count >= inst.shape.element_count for s in sizes):
                scalar.add(name)
    return frozenset(scalar)

def lean_kernels(path, code: dict | None = None) -> frozenset:
    """The other emitter's kernels of the optimized module ``path`` whose code was read and
    does not copy its vectors through the stack (the module's docstring).  A kernel whose
    code is not read here (``unread_why``) is not among them.  ``code``: as
    ``vector_accesses``."""
    code = read_code(path) if code is None else code
    return frozenset(name for (emitter, name), (f, text) in code.items() if emitter == COMPUTE and not (
        STACK_RESTORE_IR in text if f.suffix == ".ll" else STACK_RESTORE.search(text)))

def facts(path) -> dict:
    """What the code dumped beside the optimized module ``path`` tells the cost model, as the
    keyword arguments of ``cost_model.analyse`` and ``cost_model.predict_text``: its scalar
    loop kernels and its lean one-op kernels, from one reading of the code (``read_code``)."""
    code = read_code(path)
    return {"scalar_kernels": scalar_kernels(path, code), "lean_kernels": lean_kernels(path, code)}


# ---- from pytest_dumpref/timing.py --------------------------------------------------------

DISPATCH = "calibration: dispatch y=2x over 8 elements"

# The same over enough elements (2,048 flops) that PJRT runs it on its worker thread, as it
# runs the stream: the dispatch that the bandwidth takes out of the stream's time.
WORKER_ELEMENTS = 2048

DISPATCH_WORKER = f"calibration: dispatch y=2x over {WORKER_ELEMENTS} elements (worker thread)"

# The same stream kernel, each call on the next of enough distinct input arrays to exceed
# the last-level cache several times over: the bandwidth of data that is not in cache.
STREAM_COLD = "calibration: stream y=2x, inputs not in cache"

COLD_INPUT_BYTES = 128 * 2 ** 20

@dataclass
class VariantTiming:
    """One variant's times: ``samples`` holds, per round, the seconds of its fastest call."""
    name: str
    options: dict
    bytes_accessed: float
    samples: list
    minor_faults_per_call: float
    hlo_text: str = field(default="", repr=False)
    flops: float = 0.0
    transcendentals: float = 0.0
    compiled_options: dict = field(default_factory=dict)   # as compiled (A/A copy: + the inert option)
    wall_samples: list = field(default_factory=list)       # per round, the fastest call's wall-clock seconds

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def noise(self) -> float:
        """Standard uncertainty (seconds) of :attr:`median`, from the spread of the rounds."""
        return median_noise(self.samples)

def median_noise(samples: list) -> float:
    """The standard error of a median of ``samples``: 1.2533 sigma / sqrt(n) (the median's
    asymptotic efficiency), sigma read from the interquartile range (IQR / 1.349), which the
    few slow rounds a busy machine leaves do not inflate the way they would a deviation."""
    if len(samples) < 4:
        return abs(statistics.median(samples))   # too few rounds to tell: all of it
    q = statistics.quantiles(samples, n=4)
    return 1.2533 * ((q[2] - q[0]) / 1.349) / math.sqrt(len(samples))


# ---- from pytest_dumpref/xla/cpu/calibrate.py ---------------------------------------------

ROW = 1024                                    # every calibration array is f32[rows, 1024]

CURVE_ROWS = (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)

COMPUTE_ROWS_LARGE = 1024                     # 4 MiB an array, the size of the programs studied

# The chain's x, y and 2 temporaries: 128 KiB at 8 rows, 512 KiB at 32, half the level 2 of
# an AMD EPYC (1 MiB).  At 64 rows they filled it (1 MiB), and in two of five runs of the
# claim's plan the chain ran in a slow mode for most rounds (rates_from's comment).
ONE_OP_ROWS = (8, 32)

ONE_OP_CHAIN = 16                             # one-op kernels a call (k_mul_chain)

# The short-run kernel's sizes (k_short_run): 8 to 48 MiB touched a call, from where its
# runs began to cost more than a stream's (16 MiB and beyond on an AMD EPYC) to memory
SHORT_RUN_ROWS = (1024, 1536, 2048, 3072, 4096, 6144)

WRITE_ROWS = (256, 1024, 2048, 4096, 6144)   # below 32 MiB: from the heap, never faulted

FAULT_ROWS = 8192                             # 32 MiB: mapped afresh every call by glibc

# The operations alone measured on chains in the level 2 (k_exp_chain: why); the transposing
# copy's rate is its cost across rows, which it pays only on arrays larger than the level 2
ALONE_CHAINS = tuple(c for c in cost_model.ALONE if c != "transpose")

SMALL_DISTANCE = 2 ** 20              # the L2 of one core on the machines seen (1 MiB)

SCALAR_KERNELS = ("fill",) + cost_model.SCALAR     # fill: a scalar loop's iteration, alone

@functools.lru_cache(maxsize=128)
def _census(hlo_text: str) -> "cost_model.ProgramCost":
    """The model's own view of a calibration kernel (its kernels, op counts, accesses); each
    kernel's module is read once however many rates it enters."""
    return cost_model.analyse(hlo_text, buffer_assignment_text=None, source="calibration kernel")

def rates_from(result, vectorised: Mapping[str, str] | None = None) -> "cost_model.Rates":
    """Rates from a ``TimingResult`` of :func:`plan`.  ``vectorised``: the scalar-loop
    classes whose calibration kernel this XLA vectorises, with why
    (:func:`vectorised_scalar_kernels`, which compiles them: None where jax is not at hand,
    as in the listing, which then takes them to be scalar, as they are on jaxlib 0.10)."""

    vectorised = vectorised or {}
    v = result.variants
    med = {k: x.median for k, x in v.items()}
    inline = med[timing.DISPATCH]
    async_ = med[timing.DISPATCH_WORKER]
    # Below the L2's size (1 MiB here) every point is mostly dispatch: a line through the
    # smallest sizes gives the per-byte cost there (its slope) and the cost of a call of
    # such a program (its intercept), which the larger points then subtract.  Under load
    # the dispatch kernel alone moved by more than the 32-row stream's bytes cost.
    small_rows = [r for r in CURVE_ROWS if 2 * 4 * r * ROW <= SMALL_DISTANCE]
    xs = [2.0 * 4 * r * ROW for r in small_rows]
    ys = [med[f"stream {r}"] for r in small_rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    if slope <= 0:
        raise RuntimeError(f"calibration: the small streams did not take longer with size "
                           f"({dict(zip(small_rows, ys))}): too noisy to measure")
    curve = [(x, slope) for x in xs]
    for r in CURVE_ROWS:
        if r in small_rows:
            continue
        s = 4 * r * ROW
        curve.append((2.0 * s, max(med[f"stream {r}"] - intercept, 1e-9) / (2.0 * s)))
    base = cost_model.Rates(dispatch_inline_s=inline, dispatch_async_s=async_, launch_s=0.0,
                            curve=curve, cold_s_per_byte=0.0, fault_s=0.0, compute={})
    # the cold stream reads an input last touched 32 calls ago (timing.COLD_INPUT_BYTES of
    # other inputs since) and writes an output last touched one call ago (8 MiB since)
    half = 4.0 * 1024 * ROW
    n_cold = max(2, min(256, timing.COLD_INPUT_BYTES // int(half)))
    write = half * base.seconds_per_byte(2 * half)
    cold = max((med[timing.STREAM_COLD] - async_ - write) / half, curve[-1][1])
    base.cold_s_per_byte = cold
    base.curve = curve + [((n_cold + 1) * half, cold)]
    _age(base, med)
    # runs shorter than a page: the concatenate's cost a byte, less the dispatch the model
    # charges its program, against the curve's at its distance (its memory one call old, as
    # the stream's points are read)
    for r in SHORT_RUN_ROWS:
        name = f"short-run {r}"
        concat = _census(v[name].hlo_text)
        if not any(a.short_run for k in concat.kernels for a in k.accesses):
            raise RuntimeError(f"calibration: {name} compiled to no kernel that moves runs shorter than a page")
        moved = 2.0 * 4 * r * ROW
        d = moved + base.age_bytes_per_s * med[name]
        dispatch = async_ if concat.operations >= cost_model.ASYNC_MIN_OPS else inline
        base.short_run.append((d, max(med[name] - dispatch, 1e-9) / moved / base.seconds_per_byte(d)))
    # write-only memory: a broadcast into an output of s bytes, by the size written (the model
    # reads it so: cost_model's docstring says why); its 4 KiB input is noise
    base.write_curve = [(4.0 * r * ROW, max(med[f"fill {r}"] - async_, 1e-9) / (4.0 * r * ROW))
                        for r in WRITE_ROWS]
    # launch: the unfused chain's extra kernels, less their (tiny, L1) bodies
    chain_u = _census(v["chain unfused"].hlo_text)
    chain_f = _census(v["chain fused"].hlo_text)
    extra_k = len(chain_u.kernels) - len(chain_f.kernels)
    body_u = sum(base.memory_seconds(k) for k in chain_u.kernels)
    body_f = sum(base.memory_seconds(k) for k in chain_f.kernels)
    launch = max(0.0, (med["chain unfused"] - med["chain fused"] - (body_u - body_f)) / max(extra_k, 1))
    base.launch_s = launch
    # page faults of a block mapped afresh each call
    big = _census(v[f"fill {FAULT_ROWS}"].hlo_text)
    pages = FAULT_ROWS * ROW * 4 / 4096
    base.fault_s = max(0.0, (med[f"fill {FAULT_ROWS}"] - async_ - sum(base.memory_seconds(k) for k in big.kernels))
                       / pages)
    # compute, per element and class: the kernel's time less what its other classes cost
    compute: dict[str, float] = {}
    order = ["cheap", "select", "integer", "exp", "tanh", "log", "divide", "sqrt", "rsqrt", "reduce",
             "reduce (across rows)", "transpose", "dot", "convolution"]
    names = {"reduce": "rowsum", "reduce (across rows)": "colsum", "convolution": "conv"}
    # The elementwise classes: the slope between the kernel over COMPUTE_ROWS and over
    # COMPUTE_ROWS_LARGE rows, so that neither the call's fixed cost (dispatch) nor its noise
    # enters the rate: measured so, exp cost 0.398 ns an element between 128 and 1,024 rows
    # (and between 256 and 1,024), where 128 rows less the dispatch gave 0.35 (it ran 65.5
    # us, the dispatch 19.5, and the intercept of the line is 13.3).  The slope is the cost
    # of an element at the size of the programs studied, its traffic in the last-level cache
    # included where the operation does not hide it.  The reductions: the same slope less
    # each size's memory at the curve, what a row costs beyond reading it (cost_model's
    # docstring: the read is the memory term's, and a library kernel that reduces adds its
    # compute to its memory); the slope between 32 and 128 rows, in L2, held YNNPACK's cost
    # around the kernel, which grows with the rows up to about 128 (by perf's samples, the
    # call grew 2.4 times as much as the row sum's own code).
    def census(name):
        counts = {}
        for k in _census(v[name].hlo_text).kernels:
            for c, n in k.ops.items():
                counts[c] = counts.get(c, 0) + n
        return counts

    for cls in order:
        small = f"compute {names.get(cls, cls)}"
        large = f"{small} {COMPUTE_ROWS_LARGE}"
        if large in v:
            cs, cl = census(small), census(large)
            counts = {c: cl.get(c, 0) - cs.get(c, 0) for c in set(cs) | set(cl)}
            body = med[large] - med[small]
            if cls.startswith("reduce"):
                body -= sum(map(base.memory_seconds, _census(v[large].hlo_text).kernels)) - \
                    sum(map(base.memory_seconds, _census(v[small].hlo_text).kernels))
        else:                  # dot, convolution: one size, less the dispatch
            counts = census(small)
            body = med[small] - async_
        others = sum(n * compute[c] for c, n in counts.items() if c != cls and c in compute)
        split = [n for n in (small, large) if n in v and "reduce-window(" in v[n].hlo_text]
        if split:
            # jaxlib 0.9's XLA:CPU splits a sum over 1,024 columns into a reduce-window of
            # 32-element windows and a reduce (and a sum over 128 rows so, by 32 rows): the
            # slope would be the reduce-window's as much as the reduction's, so the class is
            # left unmeasured, and a kernel of it is refused with this reason
            base.unmeasured[cls] = (f"this XLA compiles the calibration kernel {split[0]!r} with a "
                                    "reduce-window, which the model does not price")
            continue
        if counts.get(cls, 0) <= 0:
            raise RuntimeError(f"calibration kernel for {cls!r} has no {cls} operation: {counts}")
        compute[cls] = max(body - others, 1e-12) / counts[cls]
    # a transposing copy alone in a one-op loop kernel, the same slope (the kernel holds nothing else)
    small = "compute transpose alone"
    cs, cl = census(small), census(f"{small} {COMPUTE_ROWS_LARGE}")
    n = cl.get("transpose", 0) - cs.get("transpose", 0)
    if n <= 0:
        raise RuntimeError(f"calibration kernel for 'transpose' alone has no transpose operation: {cl}")
    compute[cost_model.alone("transpose")] = max(med[f"{small} {COMPUTE_ROWS_LARGE}"] - med[small], 1e-12) / n
    # an operation in a loop LLVM left scalar, the same slope, where this XLA leaves the
    # calibration kernel scalar (its IR, from a compile of calibrate's own)
    def iterations_of(name):
        return sum(k.elements for k in _census(v[name].hlo_text).kernels)

    for cls in SCALAR_KERNELS:
        small = f"compute {cls} scalar"
        large = f"{small} {COMPUTE_ROWS_LARGE}"
        rate = cost_model.SCALAR_LOOP if cls == "fill" else cost_model.scalar(cls)
        if cls in vectorised or (cls != "fill" and cost_model.SCALAR_LOOP not in compute):
            base.unmeasured[rate] = vectorised.get(cls) or \
                f"a scalar loop's iteration is not measured: {base.unmeasured.get(cost_model.SCALAR_LOOP)}"
            continue
        iterations = iterations_of(large) - iterations_of(small)
        body = med[large] - med[small]
        if cls == "fill":
            compute[rate] = max(body, 1e-12) / iterations
            continue
        cs, cl = census(small), census(large)
        counts = {c: cl.get(c, 0) - cs.get(c, 0) for c in set(cs) | set(cl)}
        if counts.get(cls, 0) <= 0:
            raise RuntimeError(f"calibration kernel for {cls!r} (scalar loop) has no {cls} operation: {counts}")
        others = iterations * compute[cost_model.SCALAR_LOOP] + sum(
            n * compute[cost_model.scalar(c)] for c, n in counts.items() if c != cls and cost_model.scalar(c) in compute)
        compute[rate] = max(body - others, 1e-12) / counts[cls]
    # a one-op loop kernel's cost per element (cost_model's docstring): a chain of x * y, the
    # slope between two sizes whose buffers stay in the level-2 cache, so that neither the
    # call's fixed cost nor memory time enters it (cost_model's docstring: how it meets the
    # memory time).  The slope of the chains' fastest rounds, not of their medians: a chain
    # in the level 2 runs at one speed but for a slow mode that can last most of a run.  In
    # one of five runs of the claim's plan (2026-12-06) the chain of x * y at 64 rows (its
    # buffers then filled the level 2: ONE_OP_ROWS) took 237-240 us in 17 of 20 rounds and
    # 157-158 in the other 3, in another 192-196 in most rounds (the other three runs:
    # 151-164 in every round), and the medians gave floors of 0.234 and 0.178 ns an element
    # for 0.128-0.135.
    fastest = {k: min(x.samples) for k, x in v.items()}
    small, large = (f"one-op {r}" for r in ONE_OP_ROWS)
    elements = [sum(k.one_op for k in _census(v[n].hlo_text).kernels) for n in (small, large)]
    if not elements[1] > elements[0] > 0:
        raise RuntimeError(f"calibration: the chain of x * y compiled to no one-op loop kernel ({elements})")
    compute[cost_model.ONE_OP] = max(fastest[large] - fastest[small], 1e-12) / (elements[1] - elements[0])
    # ragged rows: the same chain's slope over rows of ROW + RAGGED_EXTRA, less the floor
    small, large = (f"one-op ragged {r}" for r in ONE_OP_ROWS)
    ragged = [sum(k.one_op for k in _census(v[n].hlo_text).kernels if k.ragged) for n in (small, large)]
    if not ragged[1] > ragged[0] > 0:
        raise RuntimeError(f"calibration: the chain of x * y over ragged rows compiled to no such kernel ({ragged})")
    compute[cost_model.RAGGED] = max((fastest[large] - fastest[small]) / (ragged[1] - ragged[0])
                                     - compute[cost_model.ONE_OP], 1e-12)
    # the floors of the other kinds, the same slope; a chain's kernels of a kind measured
    # before (the compare chain's selects) are taken out at their floor
    def by_kind(name):
        counts: dict = {}
        for k in _census(v[name].hlo_text).kernels:
            counts[k.one_op_kind] = counts.get(k.one_op_kind, 0.0) + k.one_op
        return counts

    for kind in cost_model.ONE_OP_KINDS:
        small, large = (f"one-op {kind} {r}" for r in ONE_OP_ROWS)
        cs, cl = by_kind(small), by_kind(large)
        n = cl.get(kind, 0.0) - cs.get(kind, 0.0)
        if n <= 0:
            raise RuntimeError(f"calibration: the chain of {kind} one-op kernels compiled to none ({cl})")
        others = sum((cl.get(o, 0.0) - cs.get(o, 0.0)) * compute[cost_model.one_op_floor(o)] for o in set(cl) | set(cs)
                     if o != kind)
        compute[cost_model.one_op_floor(kind)] = max(fastest[large] - fastest[small] - others, 1e-12) / n
    # the other operations alone: their chains in the level 2 (k_exp_chain), as the floors
    for cls in ALONE_CHAINS:
        small, large = (f"one-op {cls} alone {r}" for r in ONE_OP_ROWS)
        n = census(large).get(cls, 0) - census(small).get(cls, 0)
        if n != ONE_OP_CHAIN * (ONE_OP_ROWS[1] - ONE_OP_ROWS[0]) * ROW:
            raise RuntimeError(f"calibration: the chain of {cls} compiled to other than {ONE_OP_CHAIN} one-op "
                               f"kernels of {cls} a call ({census(large)})")
        compute[cost_model.alone(cls)] = max(fastest[large] - fastest[small], 1e-12) / n
    base.compute = compute
    return base

def _age(rates: "cost_model.Rates", med: dict) -> None:
    """Set ``rates.age_bytes_per_s`` from the age kernels, and shift the curve's points by
    the age of their own stream's memory, so that its distances are those the model prices
    at: reuse distance in bytes plus the tenants' bytes while the memory waited (the stream
    over s bytes was called back to back: its memory is one call old)."""
    own = 2.0 * 4 * 1024 * ROW                 # the age kernels' stream: x and y, 4 MiB each
    parts = {n: (med[n] - med[f"{n} spin"]) / own for n in ("age", "age base")}   # s a byte
    waited = med["age"] - med["age base"]
    points = list(rates.curve)
    calls = [med[f"stream {r}"] for r in CURVE_ROWS]

    def shifted(rate):      # the stream points, each by its own call's age; the cold point as it is
        return [(d + rate * t, c) for (d, c), t in zip(points, calls)] + points[len(calls):]

    rate = 0.0
    for _ in range(3):      # the shift moves the points the curve is read back at: a fixed point
        curve = shifted(rate)
        further = _distance_at(curve, parts["age"], own) - _distance_at(curve, parts["age base"], own)
        rate = max(0.0, further / waited) if waited > 0 else 0.0
    rates.age_bytes_per_s = rate
    rates.curve = shifted(rate)

def _distance_at(curve: list, seconds_per_byte: float, least: float) -> float:
    """The distance (at least ``least``) where ``curve`` first reaches ``seconds_per_byte``,
    interpolated as ``Rates.seconds_per_byte`` reads it (in log distance); its last point's
    where it never does."""
    pts = [(d, c) for d, c in curve if d >= least]
    if not pts or seconds_per_byte <= pts[0][1]:
        return least
    for (d0, c0), (d1, c1) in zip(pts, pts[1:]):
        if c0 < seconds_per_byte <= c1:
            f = (seconds_per_byte - c0) / (c1 - c0)
            return math.exp(math.log(d0) + f * (math.log(d1) - math.log(d0)))
    return pts[-1][0]

def read_optimized(path) -> tuple[str, str | None]:
    """(optimized HLO text, buffer-assignment text or None) of an optimized module file, with
    the ``-buffer-assignment.txt`` XLA writes beside it."""
    path = Path(path)
    ba = path.with_name(path.name[:-len(".txt")] + "-buffer-assignment.txt") if path.suffix == ".txt" else None
    return path.read_text(), (ba.read_text() if ba is not None and ba.is_file() else None)

def run_rates(run_json: dict) -> "cost_model.Rates":
    """The rates of the calibration kernels of a timing run (``run_json``: what timed.py printed)."""
    from types import SimpleNamespace

    return rates_from(SimpleNamespace(variants={k: VariantTiming(**v) for k, v in run_json["variants"].items()}))

def model_main(argv=None) -> int:
    """``python cost_model.py run.json FILE...``: each file's predicted time per call (us); a
    file the model cannot price is named with why on stderr, and the exit code is then 2."""
    import sys
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) < 2:
        print(model_main.__doc__, file=sys.stderr)
        return 2
    with open(args[0]) as f:
        rates = run_rates(json.load(f))
    refused = 0
    for name in args[1:]:
        try:
            seconds = cost_model.predict_text(*read_optimized(name), rates, source=name,
                                              **facts(name)).total_s
        except cost_model.CostModelError as e:
            refused += 1
            print(f"refused: {e}", file=sys.stderr)
            continue
        print(f"{name}: {seconds * 1e6!r} us")
    return 2 if refused else 0


if __name__ == "__main__":
    raise SystemExit(model_main())
