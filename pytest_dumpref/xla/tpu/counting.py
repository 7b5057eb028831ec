"""Bytes as the TPU counts them, from an optimized module's text alone.

What the TPU compiler's cost analysis ("bytes accessed" of ``Compiled.cost_analysis()`` on a
TPU) counts is XLA's HloCostAnalysis, opcode by opcode as ``traffic.OPCODE_RULES`` restates it,
with the TPU's own size of a shape.  The rules, each checked against the TPU's own figure on
every module of tests/xla_tpu/corpus (76 modules of 38 programs, fused and with tpu_fusion off):

1. **Tiles.** A layout ``{1,0:T(8,128)}`` stores the array in 8x128 tiles: the minor dimensions
   (in layout order) are padded up to the tile's, and the array occupies the padded element count
   times the element size.  ``f32[]{:T(128)}`` (a scalar) occupies a 128-element tile, 512 B;
   ``f32[1024,4]{0,1:T(4,128)}`` 4 x 1024 elements, 16,384 B.  A tile after the first, such as the
   ``(2,1)`` of ``bf16[..]{1,0:T(8,128)(2,1)}``, packs elements inside the first tile and pads no
   further.  A tile with more dimensions than the array pads the missing leading ones from 1.
2. **Memory spaces.** ``S(n)`` in a layout puts the array in memory space n: 0 (not printed) is
   HBM, 1 is VMEM, the TensorCore's vector memory (XLA's docs/shapes.md).  Other spaces are shown
   by number: the async copies' ``u32[]{:S(2)}`` context and the ``S(6)`` scalars.  XLA's count
   does not tell spaces apart; ``hbm`` and ``vmem`` here do.
3. **Async copy contexts.** An untiled ``u32[]{:S(2)}`` / ``s32[]{:S(2)}`` (the third element of a
   copy-start's result) counts 4,096 B.
4. **Tuples.** A tuple counts its index table as a 512 B block (8 B a pointer, rounded up to 512).
5. **Custom calls**: ``TopK`` counts by the default rule (result and operands);
   ``AllocateBuffer`` and ``tpu_custom_call`` count 0; any other (``ConcatBitcast``, ...) and an
   ``async-start`` of a slice count -1, as XLA:CPU counts every custom call (``CUSTOM_CALLS``).
6. **Gathers** count their whole operand, indices and result (the default rule; XLA:CPU counts
   only the elements read), also inside a kCustom fusion, whose count is its gather's.

Spill-style on a TPU: a kernel moves its operands and result at their tiled sizes, each in its
memory space.  An async copy is one kernel: ``copy-start`` reads its operand and writes its
destination (element 0 of its result); ``copy-done`` only waits for it and moves nothing.
"""
from __future__ import annotations

import math
import re

from ..shapes import PRIMITIVE_BITS, Shape

# XLA:CPU's pointer is 8 B; the TPU rounds a tuple's index table up to this block
TUPLE_BLOCK = 512
# what an untiled scalar in memory space 2 (an async copy's context) counts
SYNC_FLAG_BYTES = 4096
HBM, VMEM = 0, 1
SPACE_NAMES = {HBM: "HBM", VMEM: "VMEM"}

_TILE = re.compile(r"T\(([\d,]+)\)")
_SPACE = re.compile(r"S\((\d+)\)")


def memory_space(shape: Shape) -> int:
    """The memory space an array lives in: n of ``S(n)`` in its layout, 0 (HBM) when none."""
    m = _SPACE.search(shape.layout or "")
    return int(m.group(1)) if m else HBM


def space_name(space: int) -> str:
    return SPACE_NAMES.get(space, f"S({space})")


def tiled_bytes(shape: Shape) -> int:
    """The bytes an array occupies in its tiled layout (rule 1); untiled: elements x size."""
    layout = shape.layout or ""
    major_to_minor = [shape.dims[d] for d in reversed(shape.minor_to_major)]
    tile = _TILE.search(layout)
    if tile is None:
        return shape.byte_size
    tile_dims = [int(x) for x in tile.group(1).split(",")]
    n = max(len(tile_dims), len(major_to_minor))
    dims = [1] * (n - len(major_to_minor)) + major_to_minor
    tiled = n - len(tile_dims)                 # the dimensions above the tile are not padded
    padded = dims[:tiled] + [-(-d // t) * t for d, t in zip(dims[tiled:], tile_dims)]
    return math.prod(padded) * ((PRIMITIVE_BITS[shape.element_type] + 7) // 8)


def xla_size(shape: Shape) -> int:
    """The size the TPU's cost analysis gives a shape (rules 1, 3, 4)."""
    if shape.tuple_shapes is not None:
        return TUPLE_BLOCK * max(1, math.ceil(8 * len(shape.tuple_shapes) / TUPLE_BLOCK))
    if _TILE.search(shape.layout or "") is None and memory_space(shape) == 2:
        return SYNC_FLAG_BYTES
    return tiled_bytes(shape)


def array_bytes(shape: Shape) -> int:
    """Spill-style size on the TPU: every array at its tiled size (a tuple: its arrays)."""
    return sum(tiled_bytes(s) for s in shape.leaves())


def moves(comp, inst) -> tuple[list, list] | None:
    """The shapes an async copy's kernel reads and writes (None: the default, operands and
    result): copy-start reads its operand and writes its destination; copy-done waits."""
    if inst.opcode == "copy-start":
        return [comp.instruction(o).shape for o in inst.operands], [inst.shape.tuple_shapes[0]]
    if inst.opcode == "copy-done":
        return [], []
    return None


REASONS = {
    "copy-start": "copy-start: XLA counts its operand and every element of its result (the "
                  "destination, the source again, the context at 4,096 B); here the copy reads "
                  "its operand and writes its destination",
    "copy-done": "copy-done: XLA counts its result and its operand (the copy-start's tuple, as a "
                 "512 B index table); here it waits for the copy and moves nothing",
}

# Custom calls the TPU's cost analysis counts apart from XLA:CPU (which reports -1 for every
# custom call, as traffic.OPCODE_RULES restates it): "default" by their result and operands,
# or a fixed amount.  Seen on the corpus: TopK (jax.lax.top_k) by default; AllocateBuffer (a
# scan's output buffer) and tpu_custom_call (a Mosaic kernel such as the TPU's online-softmax
# of attention) as 0; ConcatBitcast, like any other, as -1.
CUSTOM_CALLS = {"TopK": "default", "AllocateBuffer": 0, "tpu_custom_call": 0}
CUSTOM_CALL_REASON = ("the TPU's cost analysis counts the custom call TopK by its result and "
                      "operands, AllocateBuffer and tpu_custom_call as 0, any other as -1 (it "
                      "does not know its cost); here a custom call is a kernel that reads its "
                      "operands and writes its result")
# Opcodes whose XLA:CPU rule traffic.OPCODE_RULES restates but which the TPU's cost analysis
# counts by the default rule (result and every operand whole), and why the counts then differ
DEFAULT_RULE_OPCODES = {
    "gather": "the TPU's cost analysis counts a gather's whole operand, its indices and its "
              "result (XLA:CPU: only the elements it reads)",
}
