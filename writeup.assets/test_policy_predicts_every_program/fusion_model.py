"""fusion_model.py: XLA's CPU fusion pass restated (pytest-dumpref, as it ran), on its own.

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization" python prog.py
    python fusion_model.py DIR        # needs plain jax installed only for its version (jaxlib)

prints, per module of DIR, every decision of the fusion pass: the compiler's (its log,
*_fusion.html or *_fusion.pyz) beside the model's (predict, replaying the pass on the snapshot
the pass saw), then "N of M decisions predicted", and last the total over all modules.  In
Python: predict(parse_module(text)) replays one snapshot; predict(..., without=[rule]) leaves
one of RULES out (the one-rule-left-out table); the jaxlib version decides one rule
(installed_xla_has_coupled_softmax_rule), or say --coupled-softmax / --no-coupled-softmax.
Every definition below is copied whole from the file its heading names.
"""
from __future__ import annotations

import difflib
import functools
import gc
import json
import os
import re
import sqlite3
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from dataclasses import field
from itertools import chain
from pathlib import Path
from typing import Any

naming = sys.modules[__name__]  # pytest_dumpref.xla.naming: its definitions are listed here


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


# ---- from pytest_dumpref/xla/fusion_log.py ------------------------------------------------

class FusionLogError(ValueError):
    """A fusion visualization file that cannot be read; the message names the file."""

@dataclass(frozen=True)
class FusionDecision:
    """One decision of a fusion pass about one producer -> consumer edge.

    ``consumer`` is as the compiler named it at that moment: once something has been fused
    into a consumer, the consumer is the fusion instruction (``broadcast_multiply_fusion``),
    and ``consumer_origin`` the instruction that fusion grew from (``multiply``).  ``fusion``
    is the fusion instruction a fused producer ended up in.  ``reason`` is XLA's text after
    "as" for a refusal, or the whole log line for a fusion.

    Example (``d`` a Dump)::

        decisions = d.fusion_decisions()
        [x.producer for x in decisions if x.fused]   # what the pass fused, in its order
        refusals(decisions, producer="divide")       # why it did not fuse divide.N
        print(decisions[0])                          # fusion: fused broadcast.1 into multiply: ...
    """
    producer: str
    consumer: str
    fused: bool
    reason: str
    pass_name: str
    consumer_origin: str
    fusion: str | None
    file: str
    computation: str = ""       # the computation the pass was fusing (from the file name)

    def __str__(self) -> str:
        verb = "fused" if self.fused else "did not fuse"
        return f"{self.pass_name}: {verb} {self.producer} into {self.consumer}: {self.reason}"

_FRAMES = re.compile(r"const frames = (\[.*?\]);\s*$", re.S | re.M)

_ABOUT = re.compile(r"^About to fuse \|(?P<p>[^|]+)\| into \|(?P<c>[^|]+)\| inside (?P<who>\w+)")

_FUSED = re.compile(r"^Fused \|(?P<p>[^|]+)\| into \|(?P<f>[^|]+)\| inside (?P<who>\w+)")

_NOT = re.compile(r"^Not fusing \|(?P<p>[^|]+)\| into \|(?P<c>[^|]+)\| as (?P<why>.*)$", re.S)

_FILE = re.compile(r"^(?P<comp>.+)\.module_(?P<id>\d+)\.(?P<name>.+)\.(?P<pass>[^.]*)_fusion\.(?:html|pyz)$")

# the file kinds XLA writes the log in: an html page (jaxlib 0.9, 0.10), a zip app (0.11, 0.12)
LOG_SUFFIXES = ("_fusion.html", "_fusion.pyz")

def fusion_log_files(folder, module_id: str | None = None) -> list[Path]:
    """The fusion log files of ``folder`` (of one module when ``module_id`` is given), in name
    order: ``*_fusion.html`` or ``*_fusion.pyz``, whichever the XLA that wrote them uses."""
    folder = Path(folder)
    try:
        files = sorted(p for p in folder.iterdir() if p.name.endswith(LOG_SUFFIXES) and p.is_file())
    except OSError:
        return []
    if module_id is not None:
        files = [p for p in files if f".module_{module_id}." in p.name]
    return files

def _pyz_frames(path: Path) -> list[str]:
    """The log lines of a zip app: the ``label`` column of ``fusions.db``'s ``frames``, by id."""
    try:
        with zipfile.ZipFile(path) as z:
            db = z.read("fusions.db")
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        raise FusionLogError(f"{path}: not a fusion log archive with fusions.db in it ({e})") from None
    fd, tmp = tempfile.mkstemp(suffix=".db", prefix="dumpref-fusions-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(db)
        conn = sqlite3.connect(tmp)
        try:
            rows = conn.execute("SELECT id, label FROM frames ORDER BY id").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise FusionLogError(f"{path}: fusions.db has no readable frames table ({e})") from None
    finally:
        os.unlink(tmp)
    for r in rows:
        if not isinstance(r[1], str):
            raise FusionLogError(f"{path}: unexpected frame {str(r)[:80]!r}")
    return [r[1] for r in rows]

def read_fusion_log(path) -> list[FusionDecision]:
    """The decisions logged in one ``*_fusion.html`` file, in the order the pass made them."""
    path = Path(path)
    try:
        html = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FusionLogError(f"{path}: cannot be read: {e}") from None
    m = _FRAMES.search(html)
    if not m:
        raise FusionLogError(f"{path}: no 'const frames = [...]' log in it (not an XLA fusion "
                             f"visualization, or truncated)")
    try:
        frames = json.loads(m.group(1))
    except json.JSONDecodeError as e:
        raise FusionLogError(f"{path}: the frames log is not readable ({e.msg} at {e.pos})") from None
    for frame in frames:
        if not isinstance(frame, list) or len(frame) < 2 or not isinstance(frame[1], str):
            raise FusionLogError(f"{path}: unexpected frame {str(frame)[:80]!r}")
    return decisions_of_frames(path, [frame[1] for frame in frames])

def decisions_of_frames(path: Path, texts: list) -> list[FusionDecision]:
    """The decisions in the texts of one fusion log's frames, in order, whichever file they
    were read from (the html page or the .pyz archive); ``path`` names the file, whose name
    says the pass and the computation."""
    fm = _FILE.match(path.name)
    pass_label = (fm.group("pass") if fm else "") or "fusion"
    computation = fm.group("comp") if fm else ""
    origin: dict[str, str] = {}   # fusion instruction -> the consumer it grew from
    pending: dict[str, str] = {}  # producer -> consumer announced by "About to fuse"
    out: list[FusionDecision] = []
    for text in texts:
        a = _ABOUT.match(text)
        if a:
            pending[a["p"]] = a["c"]
            continue
        f = _FUSED.match(text)
        if f:
            consumer = pending.pop(f["p"], f["f"])
            root = origin.get(consumer, consumer)
            origin[f["f"]] = root
            out.append(FusionDecision(f["p"], consumer, True, text, pass_label,
                                      root, f["f"], str(path), computation))
            continue
        n = _NOT.match(text)
        if n:
            why = n["why"].strip()
            out.append(FusionDecision(n["p"], n["c"], False, why, pass_label,
                                      origin.get(n["c"], n["c"]), None, str(path), computation))
    return out

def read_fusion_log_file(path) -> list[FusionDecision]:
    """The decisions logged in one ``*_fusion.html`` or ``*_fusion.pyz`` file, in the order the
    pass made them (one decoding, ``decisions_of_frames``, for both)."""
    path = Path(path)
    if not path.name.endswith(".pyz"):
        return read_fusion_log(path)
    return decisions_of_frames(path, _pyz_frames(path))


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

_BETWEEN = re.compile(r"^(?P<pipeline>.+?)\.after_(?P<after>.+?)(?:\.before_(?P<before>.+))?$")

_INSIDE_BEFORE = re.compile(r"^(?P<pipeline>.+?)\.before_(?P<before>.+)$")

@dataclass(frozen=True)
class Stage:
    """Where in the pipeline a snapshot was written: ``after`` the pass (or stage) that just ran
    (``pipeline-start`` where nothing of the pipeline or pass has run yet), ``before`` the one
    about to run (None for a stage a pass dumps from inside itself)."""
    pipeline: str
    after: str
    before: str | None

def parse_stage(text: str, previous: Stage | None = None) -> Stage:
    """``<pipeline>.after_<pass>[.before_<pass>]`` or ``<pass>.before_<stage>`` -> Stage;
    ValueError for anything else.

    A ``<pass>.before_<stage>`` snapshot (the TPU's ``tpu-tiling-rewriter.before_tiling_rewriter``,
    written from inside layout-assignment) names no pass that just ran: what changed since the
    ``previous`` snapshot is the work of the pass that snapshot was written before
    (``Layout_assignment.after_pipeline-start.before_layout-assignment``: layout-assignment), so
    that pass is its ``after``; with no previous snapshot, ``pipeline-start``."""
    m = _BETWEEN.match(text)
    if m:
        return Stage(m["pipeline"], m["after"], m["before"])
    m = _INSIDE_BEFORE.match(text)
    if m:
        ran = previous.before if previous is not None and previous.before not in (None, "pipeline-end") else None
        return Stage(m["pipeline"], ran or "pipeline-start", m["before"])
    raise ValueError(text)

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

def split_prefix(name: str) -> tuple[str, str] | None:
    """(module id, the rest) of any ``module_NNNN.<rest>`` file name, else None."""
    m = _PREFIX.match(name)
    return (m["id"], m["rest"]) if m else None

def guess_module_name(name: str) -> str | None:
    """The module name of a file whose module has no ``before_optimizations`` file: what
    stands before the step or before the optimized module's tail."""
    m = re.match(r"^module_\d+\.(?P<name>.+?)\.\d{4,}\..+\.txt$", name) or \
        re.match(r"^module_\d+\.(?P<name>.+)\.(?:[^.]*_)?after_optimizations(?:-[a-z-]+)?\.txt$", name)
    return m["name"] if m else None

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

def backend_of_names(module_name: str, tails: list[str]) -> str | None:
    """The backend a module's files come from, by the table: its name's suffix, a marker file,
    or the platform word of its optimized module; None when they do not say (a folder with
    before_optimizations and snapshots only)."""
    for b in BACKENDS.values():
        if b.module_suffix and re.search(b.module_suffix + "$", module_name):
            return b.name
        if any(t.endswith(m) for t in tails for m in b.marker_files):
            return b.name
    for t in tails:
        f = parse_file_name(t)
        if f.kind in ("optimized", "buffer-assignment", "memory-usage-report") and f.platform is not None:
            for b in BACKENDS.values():
                if b.optimized_prefix and re.fullmatch(b.optimized_prefix, f.platform):
                    return b.name
    return None


# ---- from pytest_dumpref/xla/dump.py ------------------------------------------------------

class DumpError(Exception):
    """A dump that cannot be read or a compile that did not do what was asked.
    The message names the file, module or pass."""

class LazyHloFile:
    """An HLO text file (``self.path``) read and parsed on first use; the dataclasses that
    use it declare ``_text`` and ``_module`` fields."""
    # for the type checker only: the dataclasses that use it declare these fields themselves
    path: Path
    _text: str | None
    _module: Any

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = read_text(self.path)
        return self._text

    @property
    def module(self):
        """The parsed module (hlo.HloModule), parsed on first use."""
        if self._module is None:
            self._module = parse_file(self.path, self.text)
        return self._module

@dataclass
class Snapshot(LazyHloFile):
    """The module as it stood at one point of the pipeline.

    ``after`` is the pass that just ran (``pipeline-start`` for the first snapshot of a
    pipeline run); ``before`` the pass about to run (None for copy-insertion's mid-pass
    snapshots, whose ``after`` names a stage of that pass).  ``step`` orders the snapshots of
    a module; ``text`` and ``module`` (an hlo.HloModule) are read on first use.

    Example (``d`` a Dump)::

        after_fusion = [s for s in d.snapshots if s.after == "fusion"]
        print(after_fusion[0].label)      # 0017 HLO_passes_after_layout_assignment: after fusion, before fusion-wrapper
        kernels = after_fusion[0].module.entry.instructions
    """
    step: int
    pipeline: str
    after: str
    before: str | None
    path: Path
    _module: Any = field(default=None, repr=False, compare=False)
    _text: str | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.step:04d} {self.pipeline}: after {self.after}" + (
            f", before {self.before}" if self.before else "")

    def drop_cache(self) -> None:
        self._module = None
        self._text = None

def read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DumpError(f"{path}: not HLO text (not UTF-8: {e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DumpError(f"{path}: cannot be read ({e.strerror})") from None

def parse_file(path: Path, text: str | None = None):
    """Parse one HLO text file; any parse failure becomes a DumpError naming the file."""
    if text is None:
        text = read_text(path)
    try:
        module = parse_module(text, source=str(path))
    except HloParseError as e:
        msg = str(e)
        raise DumpError(msg if str(path) in msg else f"{path}: {msg}") from None
    if not re.search(r"^ENTRY ", text, re.M):   # XLA's parser would take the last computation
        raise DumpError(f"{path}: no ENTRY computation, which XLA writes in every dump file "
                        f"(truncated?)")
    return module

def snapshots_of(files: "ModuleFiles") -> list[Snapshot]:
    """The pass snapshots of one module's files, in step order; DumpError naming the file whose
    name is not a snapshot's (``naming.parse_stage``)."""
    out: list[Snapshot] = []
    previous = None
    for step, rest, path in files.snapshot_paths:
        try:
            previous = naming.parse_stage(rest, previous)
        except ValueError:
            raise DumpError(f"{path}: not a pass snapshot name (expected <step>.<pipeline>."
                            f"after_<pass>[.before_<pass>] or <step>.<pass>.before_<stage>)") from None
        out.append(Snapshot(step, previous.pipeline, previous.after, previous.before, path))
    return out

@dataclass
class ModuleFiles:
    """Every file XLA wrote for one compiled module (one ``module_NNNN.<name>`` prefix)."""
    folder: Path
    id: str
    name: str
    before_optimizations: Path | None = None
    optimized: Path | None = None
    buffer_assignment: Path | None = None
    memory_usage_report: Path | None = None
    snapshot_paths: list = field(default_factory=list)   # (step, rest, path)
    other: list = field(default_factory=list)
    tails: list = field(default_factory=list)            # every file name after the module's
    backend: str | None = None                           # by naming.backend_of_names
    debug_options: Path | None = None                    # the compile's options, as text

    def disabled_passes(self) -> list[str]:
        """The passes the compile was told to skip (``xla_disable_hlo_passes`` in the
        ``debug_options`` file XLA writes beside the module); [] without that file."""
        if self.debug_options is None:
            return []
        m = re.search(r'^\s*xla_disable_hlo_passes:\s*"([^"]*)"', read_text(self.debug_options), re.M)
        return [p for p in (m.group(1).split(",") if m else []) if p]

    @property
    def key(self) -> str:
        return f"module_{self.id}.{self.name}"

def _discover(folder: Path) -> list[ModuleFiles]:
    modules: dict[str, ModuleFiles] = {}

    def get(mid: str, name: str) -> ModuleFiles:
        key = f"{mid}.{name}"
        if key not in modules:
            modules[key] = ModuleFiles(folder, mid, name)
        return modules[key]

    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    # Module names come from before_optimizations files first, so that a dotted module name
    # is never mistaken for "<name>.<step>".
    known: dict[str, str] = {}
    for n in names:
        found = naming.module_of_name(n)
        if found:
            get(*found).before_optimizations = folder / n
            known[found[0]] = found[1]
    for n in names:
        split = naming.split_prefix(n)
        if not split or naming.module_of_name(n):
            continue
        mid, rest = split
        name = known.get(mid)
        if name is None:
            # a module without before_optimizations: best guess at its name
            name = naming.guess_module_name(n)
            if name is None:
                continue
            known[mid] = name
        if not rest.startswith(name + "."):
            continue
        tail = rest[len(name) + 1:]
        mf = get(mid, name)
        mf.tails.append(tail)
        path = folder / n
        f = naming.parse_file_name(tail)
        if f.kind == "snapshot":
            mf.snapshot_paths.append((f.step, f.stage, path))
        elif f.kind == "optimized":
            mf.optimized = path
        elif f.kind == "buffer-assignment":
            mf.buffer_assignment = path
        elif f.kind == "memory-usage-report":
            mf.memory_usage_report = path
        elif f.kind == "debug_options":
            mf.debug_options = path
        else:
            mf.other.append(path)
    out = list(modules.values())
    for mf in out:
        mf.snapshot_paths.sort(key=lambda t: t[0])
        mf.backend = naming.backend_of_names(mf.name, mf.tails)
    out.sort(key=lambda m: (int(m.id), m.name))
    return out


# ---- from pytest_dumpref/xla/cpu/fusion_policy.py -----------------------------------------

MOF_REASON = "multi-output fusion not supported by this pass"

NOT_DUPLICABLE = "operand can not be duplicated"

# IsOpElementwise (hlo_instruction.cc); constants count as elementwise too
# (HloConstantInstruction::IsElementwiseImpl).
ELEMENTWISE = frozenset("""
abs acos acosh asin asinh atanh round-nearest-afz round-nearest-even ceil count-leading-zeros
convert bitcast-convert copy cosine cosh erf exponential exponential-minus-one floor imag
is-finite log log-plus-one not negate popcnt real reduce-precision rsqrt logistic sign sine
sinh sqrt cbrt tan tanh add atan2 compare complex divide maximum minimum multiply mulhi
power remainder subtract and or xor shift-left shift-right-arithmetic shift-right-logical
stochastic-convert select clamp constant""".split())

# CanBeLoopFused (cpu_instruction_fusion.cc): elementwise, plus these.
LOOP_FUSIBLE = frozenset("""bitcast broadcast concatenate dynamic-slice dynamic-update-slice
gather iota pad reduce reshape reverse slice transpose""".split())

# CpuInstructionFusion::IsExpensive: opcodes that are expensive whatever their types.
EXPENSIVE = frozenset("""
acos acosh sinh asin asinh atan2 atanh cosh tanh cbrt power rsqrt sqrt erf exponential
exponential-minus-one log log-plus-one add-dependency after-all async-start async-update
async-done batch-norm-grad batch-norm-inference batch-norm-training call cholesky conditional
convolution all-gather all-gather-start all-gather-done all-reduce reduce-scatter
all-reduce-start all-reduce-done all-to-all collective-broadcast collective-permute
collective-permute-done collective-permute-start custom-call domain dot fft fusion gather
logistic map parameter ragged-all-to-all ragged-dot recv recv-done reduce reduce-window rng
rng-get-and-update-state rng-bit-generator scaled-dot scan scatter select-and-scatter send
send-done sort topk triangular-solve while get-dimension-size set-dimension-size""".split())

# ... expensive only for complex elements
EXPENSIVE_IF_COMPLEX = frozenset({"abs", "sign", "cosine", "sine", "tan"})

# IsFusible (hlo_instruction.cc): never fused, never a consumer.
NOT_FUSIBLE = frozenset({"domain", "parameter", "while", "conditional", "call"})

# HasSideEffect, for the opcodes a jax program meets.
SIDE_EFFECTS = frozenset({"send", "send-done", "recv", "recv-done", "infeed", "outfeed",
                          "rng-get-and-update-state", "after-all", "all-reduce-start"})

# Computations called with these are "embedded" (scalar bodies): the pass skips them.
EMBEDDING_OPCODES = frozenset({"reduce", "reduce-window", "map", "sort", "scatter",
                               "select-and-scatter", "all-reduce", "reduce-scatter",
                               "all-reduce-start", "custom-call", "scan", "fusion"})

# cpu::FusionWrapper::MustWrapInstruction with the fusion emitters on (the default); copies
# only when they change the layout; convolutions go to Eigen and are not wrapped.
WRAPPED = frozenset("""
scatter abs acos acosh add and asin asinh atan2 atanh bitcast-convert broadcast cbrt ceil clamp
count-leading-zeros compare complex convert cosine cosh divide dynamic-slice dynamic-update-slice
transpose erf exponential exponential-minus-one floor gather imag iota is-finite log log-plus-one
map maximum minimum mulhi multiply negate not or pad popcnt power real reduce reduce-precision
reduce-window remainder reshape reverse round-nearest-afz round-nearest-even rsqrt select
shift-left shift-right-arithmetic shift-right-logical sign sine sinh slice sqrt subtract tan
tanh xor""".split())

# FusionNodeIndexingEvaluation::kAllowedCodeDuplication; ElementalIrEmitter::OpInvalidatesCache
ALLOWED_CODE_DUPLICATION = 15

INVALIDATES_CACHE = frozenset({"concatenate", "dot", "dynamic-update-slice", "pad", "reduce",
                               "reduce-window"})

MAX_CONCATENATE_ARGUMENTS = 8       # CpuInstructionFusion::ShouldFuse, kMaxConcatenateArguments

MAX_REDUCTIONS_IN_FUSION = 5        # ... kMaxReductionsInFusion

FUSION_THRESHOLD_BYTES = 16 * 1024  # ... kFusionThresholdBytes (small matrix-vector dots)

_COMPLEX = ("c64", "c128")

_INTEGRAL = ("s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32", "u64")

# The refusal rules ``predict(without=...)`` can leave out, each by the function it restates.
RULES = ("ShouldSkip", "ShouldFuse: non-scalar constant", "CanBeLoopFused",
         "IsExpensive and ReusesOperandElements", "FusionWouldDuplicate and IsExpensive",
         "ShouldFuse: lone constant", "ComputeGloballyUnfusible", "ShouldFuse: no fusible case")

class FusionModelError(ValueError):
    """A module the model cannot replay; the message names the module and instruction."""

class Node:
    """An instruction of a computation being fused; ``fused`` is set for fusion instructions."""
    __slots__ = ("name", "opcode", "shape", "operands", "users", "inst", "kind", "fused",
                 "origin", "max_reduce")

    def __init__(self, name, opcode, shape, inst=None, kind=None):
        self.name, self.opcode, self.shape, self.inst, self.kind = name, opcode, shape, inst, kind
        self.operands: list[Node] = []
        self.users: list[Node] = []
        self.fused: FusedComputation | None = None
        self.origin = name          # for a fusion the pass made: the consumer it grew from
        self.max_reduce = False     # a reduce whose region's root is maximum (IsMaxReduction)

    def attr(self, key, default=None):
        return self.inst.attrs.get(key, default) if self.inst is not None else default

    def fused_computation(self) -> FusedComputation:
        """The computation of a fusion instruction (it has one from the moment it is made)."""
        if self.fused is None:
            raise FusionModelError(f"{self.name} ({self.opcode}) has no fused computation")
        return self.fused

    def __repr__(self):
        return f"<Node {self.name} {self.opcode}>"

class Clone:
    """An instruction inside a fused computation: operands are Clones or ``("param", i)``."""
    __slots__ = ("name", "opcode", "shape", "operands", "inst", "param_shapes")

    def __init__(self, name, opcode, shape, inst, param_shapes):
        self.name, self.opcode, self.shape, self.inst = name, opcode, shape, inst
        self.operands: list = []
        self.param_shapes = param_shapes   # its fused computation's parameter shapes (shared)

@dataclass
class FusedComputation:
    root: Clone
    clones: list = field(default_factory=list)
    params: list = field(default_factory=list)     # shapes, by parameter number

    def users_of_param(self, i):
        return [c for c in self.clones if ("param", i) in c.operands]

def _add_user(op: Node, user: Node) -> None:
    if user not in op.users:
        op.users.append(user)

def _drop_user(op: Node, user: Node) -> None:
    if user in op.users:
        op.users.remove(user)

def _is_elementwise(n) -> bool:
    """HloInstruction::IsElementwise; a fusion is elementwise when everything in it is."""
    if n.opcode == "fusion":
        return n.fused is not None and all(_is_elementwise(c) for c in n.fused.clones)
    if n.opcode == "bitcast-convert" and n.inst is not None:
        return False if not n.operands else _bits(n.shape) == _bits(_shape(n.operands[0], n))
    return n.opcode in ELEMENTWISE

def _bits(s: Shape) -> str:
    return "".join(ch for ch in s.element_type if ch.isdigit())

def _shape(op, owner) -> Shape:
    """The shape of an operand; ``("param", i)`` inside a fused computation."""
    return op.shape if not isinstance(op, tuple) else owner.param_shapes[op[1]]

def _is_fusible(n: Node) -> bool:
    if n.opcode in NOT_FUSIBLE:
        return False
    if n.opcode in ("fusion", "map", "reduce", "reduce-window"):
        return True
    if n.opcode == "rng":
        return len(n.users) <= 1
    if n.opcode == "custom-call" and "custom_call_has_side_effect=true" in (n.inst.line if n.inst else ""):
        return False
    return n.opcode not in SIDE_EFFECTS

def is_expensive(n) -> bool:
    """CpuInstructionFusion::IsExpensive."""
    op, et = n.opcode, n.shape.element_type if not n.shape.is_tuple else ""
    if op in EXPENSIVE:
        return True
    if op in EXPENSIVE_IF_COMPLEX:
        return et in _COMPLEX
    if op == "convert":
        src = n.operands[0].shape.element_type if n.operands else ""
        return et == "bf16" and src == "f32"
    if op in ("divide", "remainder"):
        # integer division by a constant (operand 0, as the CPU function tests) is cheap
        if et not in _INTEGRAL:
            return True
        a = n.operands[0]
        if a.opcode == "broadcast":
            a = a.operands[0]
        return not (a.opcode == "constant" and a.shape.element_count == 1)
    return False

def _can_be_loop_fused(n) -> bool:
    return _is_elementwise(n) or n.opcode in LOOP_FUSIBLE

def _is_effective_scalar(s: Shape) -> bool:
    return not s.is_tuple and s.element_count == 1

def _true_rank(s: Shape) -> int:
    return 0 if s.is_tuple else sum(1 for d in s.dims if d != 1)

def _elements(s: Shape) -> int:
    return sum(x.element_count for x in s.leaves())

def _rank(s: Shape) -> int:
    return 0 if s.is_tuple else len(s.dims)

def _minor_dim(s: Shape) -> int:
    return s.minor_to_major[0] if s.dims else 0

def _int_list(text: str | None) -> list[int]:
    return [int(x) for x in (text or "").strip("{}").split(",") if x.strip()]

REUSE, USE, NO_USE = 0, 1, 2

def _operand_element_use(n, i: int) -> int:
    op = n.opcode
    if op in ("bitcast", "concatenate", "reshape", "reverse", "slice", "transpose", "gather"):
        return USE
    if op == "pad":
        return REUSE if i > 0 else USE
    if op == "reduce":
        return REUSE if i >= len(n.operands) // 2 else USE
    if op == "fusion":
        return _fusion_param_use(n.fused, i)
    if op == "dot":
        if _rank(n.shape) <= 1:
            other = n.operands[1 - i] if len(n.operands) == 2 else None
            if other is not None and _rank(_shape(other, n)) <= 1:
                return USE
        return REUSE
    if op == "dynamic-update-slice":
        return USE if i in (0, 1) else REUSE
    return USE if _is_elementwise(n) else REUSE

def _fusion_param_use(fused: FusedComputation, param: int) -> int:
    """FusionReusesParamElements::Compute: the meet over the paths from the fused root."""
    cache: dict[int, int] = {}

    def visit(c) -> int:
        if isinstance(c, tuple):
            return USE if c[1] == param else NO_USE
        if id(c) in cache:
            return cache[id(c)]
        cache[id(c)] = NO_USE
        value = NO_USE
        for k, o in enumerate(c.operands):
            use = _operand_element_use(c, k)
            if use == NO_USE:
                continue
            sub = visit(o)
            if sub == NO_USE:
                continue
            value = min(value, use, sub)
            cache[id(c)] = value
            if value == REUSE:
                break
        return value

    return visit(fused.root)

@dataclass(frozen=True)
class Prediction:
    """One decision of the pass as the model makes it.  ``consumer`` is the consumer's name
    at that moment (a fusion's name once it has grown), ``consumer_origin`` the instruction
    it grew from; ``reason`` the compiler's full wording of a refusal (None: fused);
    ``rule`` the rule that decided, by the XLA function that holds it; ``logged`` whether
    XLA writes the decision to its fusion log (refusals about get-tuple-element are not)."""
    computation: str
    producer: str
    consumer: str
    consumer_origin: str
    reason: str | None
    rule: str
    logged: bool = True

    @property
    def fused(self) -> bool:
        return self.reason is None

    @property
    def verdict(self) -> str:
        return "fused" if self.reason is None else self.reason

@dataclass
class FusionResult:
    """What the pass did to one computation: the decisions and the computation after it."""
    computation: str
    decisions: list
    nodes: list                  # Nodes left in the computation, in their original order
    root: Node | None = None

class _Pass:
    """InstructionFusion::Run with CpuInstructionFusion's overrides, on one computation."""

    def __init__(self, module: HloModule, comp: HloComputation, names: set, *,
                 coupled_softmax_rule: bool = False, without: frozenset = frozenset()):
        self.without = without
        self.module, self.comp, self.names = module, comp, names
        self.coupled_softmax_rule = coupled_softmax_rule
        self.nodes: dict[str, Node] = {}
        for inst in comp.instructions:
            n = Node(inst.name, inst.opcode, inst.shape, inst, inst.fusion_kind)
            self.nodes[inst.name] = n
        for inst in comp.instructions:
            n = self.nodes[inst.name]
            for o in inst.operands:
                n.operands.append(self.nodes[o])
                _add_user(self.nodes[o], n)
            if inst.opcode == "fusion":
                n.fused = self._dumped_fusion(inst)
        self.root = self.nodes[comp.root.name]
        # ComputeInstructionsToSkip: custom fusions (the library rewriter's kernels)
        self.skip = {n for n in self.nodes.values() if n.opcode == "fusion" and n.kind == "kCustom"}
        self.reused: dict[int, set] = {}        # ReusedOperandsOf cache, by id(node)
        self.evaluations: dict[int, _IndexingEvaluation] = {}
        self.decisions: list[Prediction] = []

    # -- a fusion that was already in the module (e.g. a library rewriter's) --------------
    def _dumped_fusion(self, inst: Instruction) -> FusedComputation:
        comp = self.module.computations[inst.called[0]]
        clones: dict[str, Clone] = {}
        params = [None] * len(comp.parameters)
        for c in comp.instructions:
            if c.opcode == "parameter":
                params[c.parameter_number] = c.shape
                continue
            clones[c.name] = Clone(c.name, c.opcode, c.shape, c, params)
        pnum = {p.name: p.parameter_number for p in comp.parameters}
        for c in comp.instructions:
            if c.opcode != "parameter":
                clones[c.name].operands = [("param", pnum[o]) if o in pnum else clones[o]
                                           for o in c.operands]
        root = clones.get(comp.root.name) or Clone(comp.root.name, "parameter", comp.root.shape, comp.root, params)
        return FusedComputation(root, list(clones.values()), params)

    # -- post order (HloComputation::MakeInstructionPostOrder) ----------------------------
    def post_order(self) -> list[Node]:
        order: list[Node] = []
        state: dict[int, int] = {}
        for n in self.nodes.values():
            if n.users:
                continue
            stack = [n]
            while stack:
                cur = stack[-1]
                s = state.get(id(cur))
                if s is None:
                    state[id(cur)] = 1
                    for o in reversed(cur.operands):
                        if state.get(id(o)) != 2:
                            stack.append(o)
                else:
                    stack.pop()
                    if s != 2:
                        state[id(cur)] = 2
                        order.append(cur)
        return order

    def on(self, rule: str) -> bool:
        return rule not in self.without

    # -- ReusedOperandsOf / UpdateReusedOperandsForFusion ---------------------------------
    def reused_operands(self, n: Node) -> set:
        s = self.reused.get(id(n))
        if s is None:
            s = {id(n.operands[i]) for i in range(len(n.operands))
                 if _operand_element_use(n, i) == REUSE}
            self.reused[id(n)] = s
        return s

    def update_reused(self, producer: Node, fusion: Node) -> None:
        s = self.reused_operands(fusion)
        if id(producer) in s:
            s.discard(id(producer))
            s.update(id(o) for o in producer.operands)
        else:
            s.update(self.reused_operands(producer))

    # -- CpuInstructionFusion::ShouldFuse -------------------------------------------------
    def should_fuse(self, consumer: Node, i: int) -> tuple[str | None, str]:
        """(None or the refusal, the rule that decided)."""
        if consumer in self.skip and self.on("ShouldSkip"):
            return "Don't fuse instructions from custom fusions/calls", "ShouldSkip"
        producer = consumer.operands[i]
        if producer.opcode == "constant" and not _is_effective_scalar(producer.shape) and \
                self.on("ShouldFuse: non-scalar constant"):
            return "Don't fuse non-scalar constants.", "ShouldFuse: non-scalar constant"
        if _can_be_output_fused(producer, consumer):
            return None, "CanBeOutputFused"
        if _can_be_output_fused_into_some_operand(producer):
            return ("Bailing because producer can be output-fused into some operand.",
                    "CanBeOutputFusedIntoSomeOperand")
        if not _can_be_loop_fused(producer) and self.on("CanBeLoopFused"):
            return "Producer is not loop-fusible.", "CanBeLoopFused"
        if ((producer.opcode == "concatenate" and (len(producer.operands) > MAX_CONCATENATE_ARGUMENTS
                                                   or _minor_dim_concatenate(producer))) or
                (consumer.opcode == "concatenate" and (len(consumer.operands) > MAX_CONCATENATE_ARGUMENTS
                                                       or _minor_dim_concatenate(consumer)))):
            return "Concatenate fusion is inefficient.", "ShouldFuse: concatenate"
        if producer.opcode != "fusion" and is_expensive(producer) and \
                id(producer) in self.reused_operands(consumer) and self.on("IsExpensive and ReusesOperandElements"):
            return "Fusion is not profitable.", "IsExpensive and ReusesOperandElements"
        # InstructionFusion::ShouldFuse
        if producer is self.root:
            return "not fusing into the output of the root instruction", "InstructionFusion::ShouldFuse: root"
        would_duplicate = not (len(producer.users) == 1 and consumer in producer.users)
        if would_duplicate and is_expensive(producer) and not _always_duplicable(producer) and \
                self.on("FusionWouldDuplicate and IsExpensive"):
            return "expensive producer would be duplicated", "FusionWouldDuplicate and IsExpensive"
        if consumer.opcode == "fusion" and producer.opcode == "reduce":
            if sum(1 for c in consumer.fused_computation().clones if c.opcode == "reduce") > MAX_REDUCTIONS_IN_FUSION:
                return "Too many reductions inside single fusion.", "ShouldFuse: kMaxReductionsInFusion"
        if producer.opcode == "constant" and consumer.opcode != "fusion" and self.on("ShouldFuse: lone constant"):
            return "Not fusing: insufficient non-constant nodes.", "ShouldFuse: lone constant"
        if producer.opcode == "fusion":
            return "Not fusing: producer is itself a fusion node.", "ShouldFuse: producer fusion"
        if consumer.opcode == "fusion":
            if self.evaluation(consumer).code_duplication_too_high(producer):
                return "Code duplication too high", "FusionNodeIndexingEvaluation::CodeDuplicationTooHigh"
        if consumer.opcode == "dot" and _rank(consumer.shape) <= 1:
            a, b = consumer.operands[0], consumer.operands[1]
            if (_rank(a.shape) == 1 and i == 1 and a.shape.byte_size < FUSION_THRESHOLD_BYTES) or \
                    (_rank(b.shape) == 1 and i == 0 and b.shape.byte_size < FUSION_THRESHOLD_BYTES):
                return None, "ShouldFuse: small matrix-vector dot"
        if consumer.opcode == "fusion" and consumer.kind == "kLoop":
            return None, "ShouldFuse: consumer is a loop fusion"
        if _can_be_loop_fused(consumer) or not self.on("ShouldFuse: no fusible case"):
            return None, "ShouldFuse: consumer is loop-fusible"
        return "Not fusing: not found a fusible case", "ShouldFuse: no fusible case"

    def evaluation(self, fusion: Node) -> "_IndexingEvaluation":
        ev = self.evaluations.get(id(fusion))
        if ev is None:
            ev = self.evaluations[id(fusion)] = _IndexingEvaluation(fusion)
        return ev

    # -- ComputeGloballyUnfusible (generic and CPU) ---------------------------------------
    def globally_unfusible(self, post: list[Node]) -> set:
        reach = _reachability(post)
        do_not = set()
        cache: dict = {}

        def all_paths(producer: Node, consumer: Node) -> bool:
            if consumer is producer:
                return True
            if not _is_fusible(consumer):
                return False
            key = (id(producer), id(consumer))
            if key in cache:
                return cache[key]
            result = True
            for i, o in enumerate(consumer.operands):
                if id(producer) not in reach[id(o)]:
                    continue
                if id(o) in do_not or self.should_fuse(consumer, i)[0] is not None or \
                        not all_paths(producer, o):
                    result = False
                    break
            cache[key] = result
            return result

        for p in reversed(post):
            if _effectively_at_most_unary(p):
                continue
            if sum(_elements(o.shape) for o in dict.fromkeys(p.operands)) <= _elements(p.shape):
                continue
            if _is_fusible(p) and all(all_paths(p, u) for u in p.users):
                continue
            do_not.add(id(p))
        if self.coupled_softmax_rule:
            for p in post:
                if _coupled_reduction_shift_exp_producer(p):
                    do_not.add(id(p))
        return do_not

    # -- the fusions themselves --------------------------------------------------------------
    def new_fusion(self, producer: Node, consumer: Node) -> Node:
        """AddFusionInstruction: a loop fusion replaces a consumer that is not one yet."""
        if consumer.opcode == "fusion":
            return consumer
        return self._wrap(consumer, _unique(f"{producer.opcode}_{consumer.opcode}_fusion", self.names))

    def _wrap(self, consumer: Node, name: str) -> Node:
        """HloInstruction::CreateFusion around ``consumer``, which it replaces."""
        f = Node(name, "fusion", consumer.shape, None, "kLoop")
        f.origin = consumer.origin
        params: list = []   # the fused computation's parameter shapes, shared with its clones
        clone = Clone(consumer.name, consumer.opcode, consumer.shape, consumer.inst, params)
        f.fused = FusedComputation(clone, [clone], params)
        for o in consumer.operands:
            if o not in f.operands:
                f.operands.append(o)
                params.append(o.shape)
        clone.operands = [("param", f.operands.index(o)) for o in consumer.operands]
        for o in dict.fromkeys(consumer.operands):
            _drop_user(o, consumer)
            _add_user(o, f)
        for u in consumer.users:
            u.operands = [f if x is consumer else x for x in u.operands]
            _add_user(f, u)
        if consumer is self.root:
            self.root = f
        self._replace(consumer, f)
        return f

    @staticmethod
    def _clone(n: Node, into: FusedComputation) -> Clone:
        return Clone(n.name, n.opcode, n.shape, n.inst, into.params)

    def _replace(self, old: Node, new: Node) -> None:
        items = list(self.nodes.items())
        self.nodes = {(new.name if k == old.name else k): (new if v is old else v) for k, v in items}

    def fuse_into(self, fusion: Node, producer: Node) -> None:
        """HloFusionInstruction::FuseInstruction: clone the producer into the fusion, turn its
        parameter into the clone, and take the producer's operands as new parameters."""
        ev = self.evaluation(fusion)
        indexing_users = ev.remove_operand(producer)
        fc = fusion.fused_computation()
        k = fusion.operands.index(producer)
        clone = self._clone(producer, fc)
        # the parameter k becomes the clone; later parameters shift down by one
        fusion.operands.pop(k)
        fc.params.pop(k)

        def renumber(x):
            if isinstance(x, tuple):
                if x[1] == k:
                    return clone
                return ("param", x[1] - 1) if x[1] > k else x
            return x
        for c in fc.clones:
            c.operands = [renumber(x) for x in c.operands]
        for o in producer.operands:
            if o not in fusion.operands:
                fusion.operands.append(o)
                fc.params.append(o.shape)
                _add_user(o, fusion)
        clone.operands = [("param", fusion.operands.index(o)) for o in producer.operands]
        fc.clones.append(clone)
        _drop_user(producer, fusion)
        ev.add(clone, indexing_users)

    def remove(self, n: Node) -> None:
        for o in dict.fromkeys(n.operands):
            _drop_user(o, n)
        self.nodes.pop(n.name, None)

    # -- FusionWrapper (cpu/fusion_wrapper.cc, codegen/emitters/fusion_wrapper_base.cc) ----
    def wrap_leftovers(self) -> None:
        """The pass after ``fusion``: every instruction left that the CPU emits as a loop
        kernel becomes a fusion of its own (``wrapped_<opcode>``).  Traffic changes only where
        the instruction read one operand twice: a fusion reads it once."""
        for n in self.post_order():
            if n.opcode in WRAPPED or (n.opcode == "copy" and str(n.shape) != str(n.operands[0].shape)):
                self._wrap(n, _unique(f"wrapped_{n.opcode}", self.names))

    # -- InstructionFusion::Run -------------------------------------------------------------
    def run(self) -> FusionResult:
        post = self.post_order()
        do_not = self.globally_unfusible(post)
        queue: list[Node | None] = list(post)   # None: a node fused away since
        index = {id(n): i for i, n in enumerate(queue)}
        while True:
            while queue and queue[-1] is None:
                queue.pop()
            if not queue:
                break
            inst = queue.pop()
            assert inst is not None  # the Nones at the end were just dropped
            index.pop(id(inst), None)
            operands = [i for i, o in enumerate(inst.operands) if id(o) in index]
            operands.sort(key=lambda i: -index[id(inst.operands[i])])
            if not _is_fusible(inst) and inst.opcode != "fusion":
                continue
            for i in operands:
                producer = inst.operands[i]
                if not _is_fusible(producer):
                    continue
                reason: str | None
                if id(producer) in do_not and self.on("ComputeGloballyUnfusible"):
                    reason, rule = NOT_DUPLICABLE, "ComputeGloballyUnfusible"
                else:
                    reason, rule = self.should_fuse(inst, i)
                origin = inst.origin
                if reason is not None:
                    logged = "get-tuple-element" not in (producer.opcode, inst.opcode)
                    self.decisions.append(Prediction(self.comp.name, producer.name, inst.name, origin,
                                                     f"{reason} ; {MOF_REASON}", rule, logged))
                    continue
                fusion = self.new_fusion(producer, inst)
                self.update_reused(producer, fusion)
                self.fuse_into(fusion, producer)
                self.decisions.append(Prediction(self.comp.name, producer.name, inst.name, origin,
                                                 None, rule))
                index[id(fusion)] = len(queue)
                queue.append(fusion)
                if not producer.users:
                    do_not.discard(id(producer))
                    if id(producer) in index:
                        queue[index.pop(id(producer))] = None
                    self.remove(producer)
                if fusion is not inst:
                    do_not.discard(id(inst))
                break
        return FusionResult(self.comp.name, self.decisions, list(self.nodes.values()), self.root)

class _IndexingEvaluation:
    """FusionNodeIndexingEvaluation: how many times each fused instruction would be emitted."""

    def __init__(self, fusion: Node):
        self.fusion = fusion
        fc = fusion.fused_computation()
        self.indexing_users: dict[int, set] = {id(fc.root): {id(fusion)}}
        self.count: dict[int, int] = {id(fusion): 1}
        self.by_id: dict[int, object] = {id(fusion): fusion}
        order = _clone_post_order(fc)
        for c in reversed(order):
            self._update_count(c)
            self._update_operands(c)

    def _key(self, operand):
        """A fused parameter stands for the fusion operand it reads."""
        if isinstance(operand, tuple):
            node = self.fusion.operands[operand[1]]
            self.by_id[id(node)] = node
            return id(node), node.shape
        self.by_id[id(operand)] = operand
        return id(operand), operand.shape

    def _update_count(self, c) -> None:
        self.count[id(c)] = sum(self.count[u] for u in self.indexing_users.get(id(c), ()))

    def _update_operands(self, c) -> None:
        mine = self.indexing_users.setdefault(id(c), set())
        for o in c.operands:
            key, shape = self._key(o)
            target = self.indexing_users.setdefault(key, set())
            if c.opcode == "transpose" or _same_dims(shape, c.shape):
                target.update(mine)
            else:
                target.add(id(c))

    def code_duplication_too_high(self, producer: Node) -> bool:
        if producer.opcode == "broadcast":
            return False
        emitted = sum(self.count[u] for u in self.indexing_users.get(id(producer), ()))
        return emitted > ALLOWED_CODE_DUPLICATION or (
            producer.opcode in INVALIDATES_CACHE and (emitted > 1 or _user_count(producer) > 1))

    def remove_operand(self, producer: Node) -> set:
        return self.indexing_users.pop(id(producer), set())

    def add(self, clone: Clone, indexing_users: set) -> None:
        self.indexing_users[id(clone)] = set(indexing_users)
        self._update_count(clone)
        self._update_operands(clone)

def _user_count(n: Node) -> int:
    """UserCount in fusion_node_indexing_evaluation.cc: through a fusion, its parameter's users."""
    total = 0
    for u in n.users:
        if u.opcode == "fusion":
            total += len(u.fused_computation().users_of_param(u.operands.index(n)))
        else:
            total += 1
    return total

def _same_dims(a: Shape, b: Shape) -> bool:
    """Shape::Equal().IgnoreElementType(): same dimensions and layout."""
    if a.is_tuple or b.is_tuple:
        return str(a) == str(b)
    return a.dims == b.dims and a.minor_to_major == b.minor_to_major

def _clone_post_order(fc: FusedComputation) -> list:
    order, seen = [], set()
    stack = [(fc.root, False)]
    while stack:
        c, done = stack.pop()
        if isinstance(c, tuple):
            continue
        if done:
            if id(c) not in seen:
                seen.add(id(c))
                order.append(c)
            continue
        if id(c) in seen:
            continue
        stack.append((c, True))
        for o in reversed(c.operands):
            stack.append((o, False))
    return order

def _always_duplicable(n: Node) -> bool:
    """IsAlwaysDuplicable: a widening convert, or a broadcast."""
    if n.opcode == "broadcast":
        return True
    return n.opcode == "convert" and bool(n.operands) and n.operands[0].shape.byte_size < n.shape.byte_size

def _is_matvec_dot(n: Node) -> bool:
    """IsNonComplexNonBatchedMatrixVectorDot."""
    return (n.opcode == "dot" and n.shape.element_type not in _COMPLEX and _rank(n.shape) <= 1
            and not _int_list(n.attr("lhs_batch_dims")))

def _can_be_output_fused(producer: Node, consumer: Node) -> bool:
    return (consumer.opcode == "add" and _is_matvec_dot(producer) and len(producer.users) == 1
            and producer.users[0].operands.count(producer) == 1)

def _can_be_output_fused_into_some_operand(consumer: Node) -> bool:
    return consumer.opcode == "add" and any(_can_be_output_fused(o, consumer) for o in consumer.operands[:2])

def _minor_dim_concatenate(n: Node) -> bool:
    if _rank(n.shape) <= 1:
        return False
    dim = _int_list(n.attr("dimensions"))[0]
    return dim == _minor_dim(n.shape) and n.shape.dims[dim] >= 128

def _effectively_at_most_unary(n: Node) -> bool:
    out = max((_true_rank(s) for s in n.shape.leaves()), default=0)
    big = 0
    for o in n.operands:
        if o.opcode in ("broadcast", "iota"):
            continue
        if o.opcode == "constant" and _is_effective_scalar(o.shape):
            continue
        if (_true_rank(o.shape) if not o.shape.is_tuple else 0) >= out:
            big += 1
    return big <= 1

def _reachability(post: list[Node]) -> dict:
    """For each node, the ids of the nodes it is reachable from (itself included)."""
    reach: dict[int, set] = {}
    for n in post:
        s = {id(n)}
        for o in n.operands:
            s |= reach[id(o)]
        reach[id(n)] = s
    return reach

def _coupled_reduction_shift_exp_producer(n: Node) -> bool:
    """CpuInstructionFusion::ComputeGloballyUnfusible's addition
    (IsCoupledReductionShiftExpProducer): an elementwise producer read by a row-max reduce
    and by the subtract that shifts it before exp is computed once, never duplicated."""
    if n.opcode == "fusion" or not _is_elementwise(n):
        return False
    reduce = next((u for u in n.users if u.opcode == "reduce" and u.operands[0] is n
                   and u.max_reduce), None)
    if reduce is None:
        return False

    def via_broadcast(x, target):
        return x.opcode == "broadcast" and x.operands[0] is target

    for s in n.users:
        if s.opcode != "subtract":
            continue
        a, b = s.operands[0], s.operands[1]
        uses_shift = a is n or b is n or via_broadcast(a, n) or via_broadcast(b, n)
        uses_reduce = via_broadcast(a, reduce) or via_broadcast(b, reduce)
        if uses_shift and uses_reduce and any(u.opcode == "exponential" for u in s.users):
            return True
    return False

def _unique(prefix: str, names: set) -> str:
    """NameUniquer::GetUniqueName, approximately: the prefix, else prefix.N for the first
    N not taken in the module.  (XLA's uniquer also remembers names of instructions removed
    by earlier passes, so a suffix can differ; decisions are compared by the instruction a
    fusion grew from, which does not.)"""
    name, k = prefix, 0
    while name in names:
        k += 1
        name = f"{prefix}.{k}"
    names.add(name)
    return name

def fused_computations_order(module: HloModule) -> list[HloComputation]:
    """The computations the pass visits (MakeNonfusionComputations, callees first), without
    fusion computations and the scalar bodies of reduce, sort, map ... (IsEmbeddedComputation).

    The entry computation and what it calls come first; then the computations no instruction
    calls (``uncalled_computations``), in the module's order: XLA keeps a computation whose
    caller a pass removed until a later clean-up, and the fusion pass visits it like any other
    (the library rewriter leaves such a ``fused_computation.N`` behind, and the pass logs
    decisions inside it)."""
    embedded, order, seen = set(), [], set()
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.opcode in EMBEDDING_OPCODES:
                embedded.update(inst.called)

    def visit(name):
        if name in seen or name not in module.computations:
            return
        seen.add(name)
        comp = module.computations[name]
        for callee in comp.callees:
            visit(callee)
        order.append(comp)

    visit(module.entry.name)
    for name in uncalled_computations(module):
        visit(name)
    return [c for c in order if c.name not in embedded]

def uncalled_computations(module: HloModule) -> list[str]:
    """Computations other than the entry that no instruction of the module calls, in the
    module's order (left behind by a pass that replaced their caller)."""
    called = {c for comp in module.computations.values() for inst in comp.instructions
              for c in inst.called}
    return [name for name, comp in module.computations.items()
            if name not in called and comp is not module.entry]

# The first jaxlib whose XLA has CpuInstructionFusion's coupled-softmax rule (PR #44738):
# jaxlib 0.10.2's and 0.11.0's duplicate the stable-softmax producer, 0.12.0.1's keeps it
# (tests/xla_fusion/test_fusion_policy.py checks the model against the jaxlib installed).
COUPLED_SOFTMAX_SINCE = (0, 12, 0)

def installed_xla_has_coupled_softmax_rule() -> bool:
    """Whether the installed jaxlib's XLA keeps the stable-softmax producer from being
    duplicated (``COUPLED_SOFTMAX_SINCE``); False when jaxlib is not installed."""
    from importlib import metadata
    try:
        version = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return False
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts) >= COUPLED_SOFTMAX_SINCE

def predict(module: HloModule, *, fuse: bool = True, wrap: bool = False,
            coupled_softmax_rule: bool | None = None, without=()) -> list[FusionResult]:
    """Replay the CPU fusion pass on ``module`` (the snapshot just before it): per computation
    it visits, every decision in the order the pass makes it, and what is left after it.

    ``coupled_softmax_rule``: None (the default) follows the XLA of the jaxlib installed
    (``installed_xla_has_coupled_softmax_rule``); say True or False for a dump that another
    jaxlib wrote.

    ``wrap``: then the fusion wrapper that follows it, so that the computations left are the
    kernels the program runs.  ``fuse=False`` skips the fusion pass (the program compiled with
    ``xla_disable_hlo_passes=fusion``).  ``without``: rules (by the names in ``RULES``) the
    replay leaves out, to show what each one decides."""
    if coupled_softmax_rule is None:
        coupled_softmax_rule = installed_xla_has_coupled_softmax_rule()
    names = {i.name for c in module.computations.values() for i in c.instructions}
    out = []
    for comp in fused_computations_order(module):
        p = _Pass(module, comp, names, coupled_softmax_rule=coupled_softmax_rule,
                  without=frozenset(without))
        for n in p.nodes.values():
            if n.opcode == "reduce" and n.inst is not None:
                region = module.computations.get(n.inst.attrs.get("to_apply", "").lstrip("%"))
                n.max_reduce = region is not None and region.root.opcode == "maximum"  # IsMaxReduction
        try:
            result = p.run() if fuse else FusionResult(comp.name, [], list(p.nodes.values()), p.root)
            if wrap:
                p.wrap_leftovers()
                result = FusionResult(comp.name, result.decisions, list(p.nodes.values()), p.root)
            out.append(result)
        except (KeyError, IndexError, ValueError) as e:
            raise FusionModelError(f"module {module.name}, computation {comp.name}: the model "
                                   f"cannot replay the fusion pass here ({type(e).__name__}: {e})") from None
    return out


# ---- from pytest_dumpref/xla/cpu/fusion.py ------------------------------------------------

HOW_TO_DUMP = ("dump with XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=.* "
               "--xla_dump_fusion_visualization' (or the compiler options xla_dump_to, "
               "xla_dump_hlo_pass_re='.*', xla_dump_fusion_visualization=True)")

def verdict(d: FusionDecision) -> str:
    """"fused", or the compiler's full reason for a refusal."""
    return "fused" if d.fused else d.reason

def compare(log: list, predicted: list) -> list[dict]:
    """The log's decisions beside the model's, in the log's order, one row per decision.

    Both lists are in the pass's order.  They are aligned on (producer, the instruction the
    consumer grew from, verdict) with difflib, so that one wrong prediction costs one row,
    not every row after it.  A row ``agree``s when all three are equal.  A decision the
    model makes that the log lacks gets a row with ``compiler`` None; one it lacks, a row
    with ``predicted`` None.  ``rule`` names the restated XLA rule that made the prediction."""
    a = [(d.producer, d.consumer_origin, verdict(d)) for d in log]
    b = [(p.producer, p.consumer_origin, p.verdict) for p in predicted]
    rows = []

    def row(d, p):
        rows.append({"computation": (d.computation if d else p.computation),
                     "producer": d.producer if d else p.producer,
                     "consumer": d.consumer if d else p.consumer,
                     "compiler": verdict(d) if d else None,
                     "predicted": p.verdict if p else None,
                     "rule": p.rule if p else None,
                     "agree": bool(d and p and a[log.index(d)] == b[predicted.index(p)])})
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            for d, p in zip(log[i1:i2], predicted[j1:j2]):
                row(d, p)
            continue
        ds, ps = log[i1:i2], predicted[j1:j2]
        for k in range(max(len(ds), len(ps))):
            d = ds[k] if k < len(ds) else None
            p = ps[k] if k < len(ps) else None
            if d is not None and p is not None and (d.producer, d.consumer_origin) != (p.producer, p.consumer_origin):
                row(d, None)
                row(None, p)
            else:
                row(d, p)
    return rows

# Where the CPU pipeline runs ``fusion``: just before ``fusion-wrapper`` (jaxlib 0.9 to 0.12
# name it in the snapshot written after fusion, ``after_fusion.before_fusion-wrapper``), in
# the pipeline HLO_passes_after_layout_assignment; these pipelines start after both passes ran.
FUSION_NEXT_PASS = "fusion-wrapper"

PIPELINES_AFTER_FUSION = ("simplification_after_layout_assignment", "copy-insertion",
                          "HLO_passes_after_scheduling")

def snapshot_before_fusion(dump, *, unchanged: bool = False):
    """The snapshot the ``fusion`` pass saw: the one before the snapshot written after it
    (with ``--xla_dump_hlo_pass_re=.*`` a snapshot is written only when a pass changed the
    module), else the one announcing it (``before_fusion``).

    ``unchanged=True`` (the pass ran, its log says so, and changed nothing, so no snapshot
    names it): the module it saw is the module the next pass saw, so the snapshot before the
    first one written by a later pass (``fusion-wrapper``, or the first of a pipeline that
    runs after it).  None when no snapshot fits."""
    snaps = dump.snapshots
    for i, s in enumerate(snaps):
        if s.after == "fusion" and i > 0:
            return snaps[i - 1]
    for s in reversed(snaps):
        if s.before == "fusion":
            return s
    if not unchanged:
        return None
    for i, s in enumerate(snaps):
        if i > 0 and (s.after == FUSION_NEXT_PASS or s.pipeline in PIPELINES_AFTER_FUSION):
            return snaps[i - 1]
    return None

def replay(module, log: list, **model_options) -> tuple:
    """The model's replay of the fusion pass on ``module`` (the module it saw) beside the
    pass's ``log``: (the log in the pass's order, the logged predictions, ``compare``'s rows,
    the computations no instruction calls that the pass visited)."""
    results = predict(module, **model_options)
    order = {r.computation: k for k, r in enumerate(results)}
    # the pages come one per computation, in file-name order: put them in the pass's order
    log = sorted(log, key=lambda d: order.get(d.computation, len(order)))
    predicted = [p for r in results for p in r.decisions if p.logged]
    uncalled = [c for c in uncalled_computations(module) if c in order]
    return log, predicted, compare(log, predicted), uncalled

def main(argv=None) -> int:
    """``python fusion_model.py DIR [--no-coupled-softmax | --coupled-softmax]``: every
    decision of the fusion pass in the dump folder DIR, the log's beside the model's, per
    module; exit code 1 when a decision is mispredicted.  The snapshot the pass saw is found
    as ``snapshot_before_fusion`` finds it, the modules as ``pytest_dumpref.xla.dump`` does."""
    import sys
    from types import SimpleNamespace

    args = sys.argv[1:] if argv is None else list(argv)
    options = {}
    for flag, value in (("--coupled-softmax", True), ("--no-coupled-softmax", False)):
        if flag in args:
            args.remove(flag)
            options["coupled_softmax_rule"] = value
    if len(args) != 1:
        print(main.__doc__, file=sys.stderr)
        return 2
    folder = Path(args[0])
    missed = logged = predicted = modules = 0
    for mf in _discover(folder):
        dump = SimpleNamespace(snapshots=snapshots_of(mf))
        log = [d for p in fusion_log_files(folder, mf.id) for d in read_fusion_log_file(p)
               if d.pass_name == "fusion"]
        before = snapshot_before_fusion(dump) or snapshot_before_fusion(dump, unchanged=True)
        if before is None:
            print(f"{mf.key}: no snapshot before the fusion pass ({HOW_TO_DUMP})", file=sys.stderr)
            return 2
        module = parse_module(before.path.read_text(encoding="utf-8"), source=str(before.path))
        log, _, rows, _ = replay(module, log, **options)
        print(f"== {mf.key}: the pass saw {before.path.name}")
        for k, r in enumerate(rows, 1):
            said = (r["compiler"] if r["agree"] else
                    f"compiler: {r['compiler'] or '-'} | model: {r['predicted'] or '-'}")
            print(f"{' ' if r['agree'] else '*'} {k:4d} {r['producer']} -> {r['consumer']}: {said}")
        agreed = sum(r["agree"] for r in rows)
        missed += len(rows) - agreed
        logged += len(log)
        predicted += agreed
        modules += 1
        print(f"{agreed} of {len(log)} decisions predicted")
    print(f"all {modules} modules: {predicted} of {logged} decisions predicted")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
