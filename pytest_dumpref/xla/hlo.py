"""HLO text -> modules, computations, instructions, shapes and byte sizes.

A reader for HLO text as XLA's own parser (``hlo_module_from_text``) accepts it: the dumps
XLA writes (``*.txt`` pass snapshots, ``as_text()`` of a compiled function) and the
hand-written modules of XLA's tests (no ``HloModule`` line, no ``ENTRY`` keyword, ``/* */``
and ``//`` comments, instructions over several lines, nested instructions as operands,
result shapes left for the parser to infer).  Written in Python so that every field is at
hand without private jaxlib APIs; XLA's C++ parser (see ``xla_private``) stays the referee
for what is valid HLO, this one is the model the analyses walk.

Speed matters: an every-pass dump holds hundreds of snapshots of one module that share most
of their lines, and a real model's module is several megabytes.  The text is read line by
line; an instruction line is matched by one compiled expression in the common case, and its
attributes are split only when asked for.  Parsed lines are cached by their raw text and
parsed computations by theirs, so re-reading a snapshot costs a dictionary look-up per
unchanged computation.  Cached ``Instruction`` and ``HloComputation`` objects are shared
between modules: treat them as read-only.
"""
from __future__ import annotations

import functools
import gc
import re
from itertools import chain

from .shape_inference import infer_shape
from .shapes import PRIMITIVE_BITS, Shape  # hlo.Shape too: the values it reads

__all__ = [
    "HloParseError", "Shape", "Instruction", "HloComputation", "HloModule",
    "parse_shape", "parse_module", "clear_cache", "PRIMITIVE_BITS", "OPCODES",
]


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


# ---- comments ------------------------------------------------------------------------------

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


# ---- splitting at top-level commas ---------------------------------------------------------

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


# ---- instructions --------------------------------------------------------------------------

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


# ---- computations and modules --------------------------------------------------------------

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
