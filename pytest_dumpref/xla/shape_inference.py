"""Result shapes that HLO text may leave out, inferred from the operands as XLA's parser does.

XLA's parser accepts ``%s = add(%a, %b)`` without a result shape for many opcodes and asks
its ShapeInference for it.  The forms written in practice (XLA's own tests) are restated
here: elementwise operations, compare, select and clamp, tuples and get-tuple-element,
transpose, reduce, concatenate, dot, and the ordering instructions.  Anything else is an
error naming the instruction, so that a module is never read with a wrong shape.
"""
from __future__ import annotations

from .shapes import Shape

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
