"""XLA shapes as values: element types and their widths, arrays and tuples, byte sizes.

The HLO reader (``hlo.parse_shape``) makes them from text; shape inference
(``shape_inference``) makes them from operands' shapes.  This module needs neither.
"""
from __future__ import annotations

import re

__all__ = ["PRIMITIVE_BITS", "Shape"]

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
