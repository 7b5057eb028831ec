"""HLO text -> modules, computations, instructions, shapes and byte sizes.

A reader for the text XLA writes into its dumps (``*.txt`` pass snapshots, ``as_text()`` of a
compiled function), written in Python so that every field is at hand without private jaxlib
APIs.  XLA's own C++ parser (see ``xla_private``) stays the referee for what is valid HLO; this
one is the model the analyses walk.

Speed matters: an every-pass dump holds hundreds of snapshots of one module that share most of
their lines.  Parsed instruction lines are cached by their raw text, so re-reading a snapshot
costs a dictionary look-up per unchanged line.  Cached ``Instruction`` objects are therefore
shared between modules: treat them as read-only.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = [
    "HloParseError", "Shape", "Instruction", "HloComputation", "HloModule",
    "parse_shape", "parse_module", "PRIMITIVE_BITS",
]


class HloParseError(ValueError):
    """The text is not (complete) HLO.  The message names the source and the line."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        self.reason = message
        where = source or "<hlo text>"
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {message}")


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

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
# element_size_in_bits in a layout, e.g. {0:E(4)}: sub-byte types packed in memory
_ELEMENT_BITS = re.compile(r"E\((\d+)\)")
_COMMENT = re.compile(r"/\*.*?\*/")


class Shape:
    """An XLA shape: an array (element type, dims, optional layout) or a tuple of shapes.

    ``byte_size`` is the storage of the data: for an array, what XLA's
    ShapeUtil::ByteSizeOf gives (elements x byte width of the type, or
    ceil(elements x element_size_in_bits / 8) when the layout packs sub-byte elements with
    ``E(n)``); for a tuple, the sum over its leaves (not the tuple's index table; see
    ``xla_byte_size`` for XLA's convention).  Dynamic dimensions (``<=8``) count at their bound.
    """

    __slots__ = ("element_type", "dims", "layout", "tuple_shapes", "dynamic_dims", "_text",
                 "_bytes", "_xla_bytes")

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


@functools.lru_cache(maxsize=65536)
def parse_shape(text: str) -> Shape:
    """Parse a shape such as ``f32[64,128]{1,0}``, ``(s32[], bf16[<=8])`` or ``token[]``."""
    if "/*" in text:
        text = _COMMENT.sub("", text)
    shape, end = _parse_shape_at(text.strip(), 0)
    if end != len(text.strip()):
        raise ValueError(f"trailing text after shape in {text!r}")
    return shape


def _parse_shape_at(text: str, pos: int) -> tuple[Shape, int]:
    """Parse one shape starting at ``pos``; return it and the index just past it."""
    if pos < len(text) and text[pos] == "(":
        start = pos
        pos += 1
        elements = []
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] == ")":
            return Shape("tuple", (), None, [], text=text[start:pos + 1]), pos + 1
        while True:
            s, pos = _parse_shape_at(text, pos)
            elements.append(s)
            if text.startswith(", ", pos):
                pos += 2
            elif pos < len(text) and text[pos] == ",":
                pos += 1
            elif pos < len(text) and text[pos] == ")":
                pos += 1
                return Shape("tuple", (), None, elements, text=text[start:pos]), pos
            else:
                raise ValueError(f"bad tuple shape {text[start:]!r}")
    m = _ARRAY_SHAPE.match(text, pos)
    if not m:
        raise ValueError(f"bad shape {text[pos:pos + 40]!r}")
    et, dims_text, layout = m.group(1), m.group(2), m.group(3)
    if et not in PRIMITIVE_BITS:
        raise ValueError(f"unknown element type {et!r} in shape {m.group(0)!r}")
    dims, dynamic = [], []
    if dims_text:
        for i, d in enumerate(dims_text.split(",")):
            d = d.strip()
            if d.startswith("<="):
                dynamic.append(i)
                d = d[2:]
            elif d == "?":  # unbounded dynamic dimension: no storage size is known
                dynamic.append(i)
                d = "0"
            dims.append(int(d))
    return Shape(et, tuple(dims), layout, None, tuple(dynamic), text=m.group(0)), m.end()


# Attributes whose value names computations that an instruction calls.
_CALLING_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
                  "true_computation", "false_computation", "called_computations",
                  "select", "scatter", "comparator", "async_computation")
# Opcodes whose parenthesised text is not a list of operand names.
_NON_OPERAND_OPCODES = frozenset({"constant", "parameter"})
# Tokens that matter when splitting text at top-level separators.
_NESTING = re.compile(r'[(){}\[\]"\\]|, ')


def _split_top(text: str) -> list[str]:
    """Split at ``, `` outside (), {}, [] and quoted strings."""
    if not any(c in text for c in '({["'):
        return text.split(", ")
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
        elif tok == ", " and depth == 0:
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    return parts


def _matching_paren(text: str, open_pos: int) -> int:
    """Index of the ')' closing the '(' at ``open_pos`` (quotes respected), or -1."""
    close = text.find(")", open_pos + 1)
    if close < 0:
        return -1
    inner = text[open_pos + 1:close]
    if "(" not in inner and '"' not in inner:
        return close
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
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


class Instruction:
    """One HLO instruction, parsed from one line of text.

    ``operands`` and ``called`` are names (without ``%``).  ``attrs`` holds every attribute
    after the operand list as raw text (``{"dimensions": "{1}", "metadata": "{...}"}``).
    ``canonical`` is the line without ``metadata=`` (op names, source locations, stack
    frames), for comparing snapshots.  Instances are shared between modules parsed from
    identical lines: do not mutate them.
    """

    __slots__ = ("name", "opcode", "shape", "operands", "called", "fusion_kind", "attrs",
                 "line", "is_root", "parameter_number", "operand_text", "_canonical")

    def __init__(self, name, opcode, shape, operands, called, fusion_kind, attrs, line,
                 is_root, parameter_number, operand_text):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands = operands
        self.called = called
        self.fusion_kind = fusion_kind
        self.attrs = attrs
        self.line = line
        self.is_root = is_root
        self.parameter_number = parameter_number
        self.operand_text = operand_text  # raw text in the parentheses (a literal for constants)
        self._canonical = None

    @property
    def canonical(self) -> str:
        if self._canonical is None:
            head = self.line[:self.line.index(" = ")].strip()  # "ROOT %name" as written
            attrs = "".join(f", {k}={v}" for k, v in self.attrs.items() if k != "metadata")
            self._canonical = f"{head} = {self.shape} {self.opcode}({self.operand_text}){attrs}"
        return self._canonical

    def __repr__(self) -> str:
        return f"<Instruction {self.name} = {self.shape} {self.opcode}>"


def _parse_instruction(line: str, body: str, is_root: bool, name: str) -> Instruction:
    """Parse ``body``: the text after ``name = `` (shape, opcode, operands, attributes)."""
    if "/*" in body:  # long tuples carry /*index=N*/ markers in shapes and operand lists
        body = _COMMENT.sub("", body)
    if body.startswith("("):
        end = _matching_paren(body, 0) + 1
        if end <= 0:
            raise ValueError("unterminated tuple shape")
    else:
        m = _ARRAY_SHAPE.match(body)
        if not m:
            raise ValueError(f"expected a shape after '{name} =', found {body[:30]!r}")
        end = m.end()
    try:
        shape = parse_shape(body[:end])
    except ValueError as e:
        raise ValueError(f"{e} (instruction {name})") from None
    if body[end:end + 1] != " ":
        raise ValueError(f"expected an opcode after the shape of {name}")
    open_pos = body.find("(", end + 1)
    if open_pos < 0:
        raise ValueError(f"expected '(' after the opcode of {name}")
    opcode = body[end + 1:open_pos]
    if not opcode or " " in opcode:
        raise ValueError(f"bad opcode {opcode!r} in {name}")
    close = _matching_paren(body, open_pos)
    if close < 0:
        raise ValueError(f"unterminated operand list of {name}")
    operand_text = body[open_pos + 1:close]
    rest = body[close + 1:]

    parameter_number = None
    if opcode in _NON_OPERAND_OPCODES:
        operands = []
        if opcode == "parameter":
            parameter_number = int(operand_text)
    elif not operand_text:
        operands = []
    else:
        # Newer XLA prints "%a, %b"; older dumps print "f32[2]{0} %a": the name is the last word.
        operands = [tok.rsplit(" ", 1)[-1].lstrip("%") for tok in _split_top(operand_text)]

    attrs: dict[str, str] = {}
    if rest:
        if not rest.startswith(", "):
            raise ValueError(f"unexpected text after the operands of {name}: {rest[:30]!r}")
        for item in _split_top(rest[2:]):
            key, eq, value = item.partition("=")
            if not eq:
                raise ValueError(f"attribute without '=' in {name}: {item[:30]!r}")
            attrs[key] = value

    called = []
    for key in _CALLING_ATTRS:
        value = attrs.get(key)
        if value is not None:
            if value.startswith("{"):
                called.extend(v.strip().lstrip("%") for v in value[1:-1].split(",") if v.strip())
            else:
                called.append(value.lstrip("%"))
    fusion_kind = attrs.get("kind") if opcode == "fusion" else None
    return Instruction(name, opcode, shape, operands, called, fusion_kind, attrs, line,
                       is_root, parameter_number, operand_text)


class HloComputation:
    """A named list of instructions; ``root`` is its result."""

    __slots__ = ("name", "instructions", "root", "is_entry", "header", "callees", "_by_name",
                 "memo")

    def __init__(self, name: str, instructions: list, root: Instruction, is_entry: bool,
                 header: str):
        self.name = name
        self.instructions = instructions
        self.root = root
        self.is_entry = is_entry
        self.header = header
        self._by_name = None
        # names of the computations its instructions call, in order of first use
        self.callees = list(dict.fromkeys(c for i in instructions for c in i.called))
        # results that analyses derive from this computation's text alone (it is shared
        # between modules parsed from identical text, so such results can be reused)
        self.memo: dict = {}

    @property
    def parameters(self) -> list:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        params.sort(key=lambda i: i.parameter_number)
        return params

    def instruction(self, name: str) -> Instruction:
        if self._by_name is None:
            self._by_name = {i.name: i for i in self.instructions}
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        if self._by_name is None:
            self._by_name = {i.name: i for i in self.instructions}
        return name in self._by_name

    def __repr__(self) -> str:
        return f"<HloComputation {self.name}: {len(self.instructions)} instructions>"


class HloModule:
    """A parsed module: computations in file order, the ENTRY one, instructions by name."""

    def __init__(self, name: str, header: str, computations: dict, entry: HloComputation,
                 source: str | None):
        self.name = name
        self.header = header
        self.computations = computations
        self.entry = entry
        self.source = source
        self._index = None

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

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"


_INSTRUCTION_START = re.compile(r"\s+(ROOT )?%?([A-Za-z_][\w.\-]*) = ")
_COMPUTATION_HEADER = re.compile(r"(ENTRY )?%?([A-Za-z_][\w.\-]*)\s*(?:\(.*)?\{$")
# Debug-info sections that newer XLA prints between the module header and the computations.
_INFO_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})

# Two caches, because the snapshots of one compile repeat most of their text:
# a computation's whole text -> its parsed computations (most computations survive a pass
# untouched), and a raw instruction line -> Instruction (for computations a pass did change).
_BLOCK_CACHE: dict[str, list] = {}
_LINE_CACHE: dict[str, Instruction] = {}
_CACHE_LIMIT = 500_000


def clear_cache() -> None:
    """Forget cached computations and lines (memory is bounded anyway; for benchmarks)."""
    _BLOCK_CACHE.clear()
    _LINE_CACHE.clear()
    parse_shape.cache_clear()


def parse_module(text: str, *, source: str | None = None) -> HloModule:
    """Parse one HLO module from text; ``source`` (a file name) is used in error messages.

    Raises ``HloParseError`` for text that is not HLO, is truncated, or references
    instructions or computations that do not exist.
    """
    if len(_LINE_CACHE) > _CACHE_LIMIT or len(_BLOCK_CACHE) > _CACHE_LIMIT:
        clear_cache()
    blocks = text.split("\n\n")  # XLA separates the header, info sections and computations
    header = None
    module_name = ""
    computations: dict[str, HloComputation] = {}
    entry = None
    next_line = 1
    for number, block in enumerate(blocks):
        start = next_line
        next_line += block.count("\n") + 2
        body = block.lstrip("\n")
        start += len(block) - len(body)
        body = body.rstrip()
        if not body:
            continue
        if header is None:
            first, _, rest = body.partition("\n")
            if not first.startswith("HloModule "):
                raise HloParseError(f"not HLO text: expected 'HloModule <name>', found "
                                    f"{first.strip()[:60]!r}", source=source, line=start)
            header = first
            module_name = first[len("HloModule "):].split(",", 1)[0].strip()
            body, start = rest.strip("\n"), start + 1
            if not body:
                continue
        parsed = _BLOCK_CACHE.get(body)
        if parsed is None:
            if body.partition("\n")[0].strip() in _INFO_SECTIONS:
                continue
            parsed = _parse_block(body, start, source, number == len(blocks) - 1)
            _BLOCK_CACHE[body] = parsed
        for comp in parsed:
            if comp.name in computations:
                raise HloParseError(f"computation {comp.name} defined twice", source=source,
                                    line=start)
            computations[comp.name] = comp
            if comp.is_entry:
                entry = comp
    if header is None:
        raise HloParseError("empty file, expected 'HloModule <name>'", source=source, line=1)
    if entry is None:
        # XLA prints the ENTRY computation last, so a module without one was cut short
        raise HloParseError("no ENTRY computation (truncated?)", source=source, line=next_line - 2)
    for comp in computations.values():
        for callee in comp.callees:
            if callee not in computations:
                caller = next(i.name for i in comp.instructions if callee in i.called)
                raise HloParseError(f"instruction {caller} calls unknown computation {callee}",
                                    source=source, line=None)
    return HloModule(module_name, header, computations, entry, source)


def _instruction_from_line(raw: str, line: int, source) -> Instruction:
    inst = _LINE_CACHE.get(raw)
    if inst is None:
        m = _INSTRUCTION_START.match(raw)
        if not m:
            raise HloParseError(f"expected an instruction, found {raw.strip()[:60]!r}",
                                source=source, line=line)
        try:
            inst = _parse_instruction(raw, raw[m.end():], m.group(1) is not None, m.group(2))
        except ValueError as e:
            raise HloParseError(str(e), source=source, line=line) from None
        _LINE_CACHE[raw] = inst
    return inst


def _parse_block(body: str, start: int, source, is_last: bool) -> list:
    """Parse the computations in a block of text (normally exactly one)."""
    lines = body.split("\n")
    cache = _LINE_CACHE
    out = []
    i, n = 0, len(lines)
    while i < n:
        stripped = lines[i].strip()
        if not stripped:
            i += 1
            continue
        m = _COMPUTATION_HEADER.match(stripped) if stripped.endswith("{") else None
        if not m:
            raise HloParseError(f"unexpected line outside any computation: {stripped[:60]!r}",
                                source=source, line=start + i)
        name, is_entry, opened = m.group(2), m.group(1) is not None, start + i
        i += 1
        instructions: list[Instruction] = []
        pending = None  # (line number, text) of an instruction that may continue below
        closed = False
        while i < n:
            raw = lines[i]
            if raw == "}" or raw.strip() == "}":
                closed = True
                i += 1
                break
            inst = cache.get(raw)
            if inst is not None:
                if pending is not None:
                    instructions.append(_instruction_from_line(pending[1], pending[0], source))
                    pending = None
                instructions.append(inst)
            elif pending is not None and not _INSTRUCTION_START.match(raw):
                pending = (pending[0], pending[1] + "\n" + raw)  # a multi-line literal
            else:
                if pending is not None:
                    instructions.append(_instruction_from_line(pending[1], pending[0], source))
                pending = (start + i, raw)
            i += 1
        if pending is not None:
            instructions.append(_instruction_from_line(pending[1], pending[0], source))
        if not closed:
            what = "file ends" if is_last else "blank line"
            raise HloParseError(f"{what} inside computation {name} (opened at line {opened})"
                                + (": truncated?" if is_last else ""),
                                source=source, line=start + n - 1)
        if not instructions:
            raise HloParseError(f"computation {name} has no instructions", source=source,
                                line=opened)
        roots = [x for x in instructions if x.is_root]
        if len(roots) > 1:
            raise HloParseError(f"more than one ROOT in computation {name}", source=source,
                                line=opened)
        # XLA's convention: without a ROOT line the last instruction is the root
        root = roots[0] if roots else instructions[-1]
        comp = HloComputation(name, instructions, root, is_entry, stripped)
        _check_operands(comp, source, opened)
        out.append(comp)
    return out


def _check_operands(comp: HloComputation, source, start_line) -> None:
    by_name = {i.name: i for i in comp.instructions}
    if len(by_name) != len(comp.instructions):
        raise HloParseError(f"duplicate instruction name in computation {comp.name}",
                            source=source, line=start_line)
    for inst in comp.instructions:
        for op in inst.operands:
            if op not in by_name:
                raise HloParseError(
                    f"instruction {inst.name} in computation {comp.name} uses undefined "
                    f"operand {op}", source=source, line=start_line)
    comp._by_name = by_name
