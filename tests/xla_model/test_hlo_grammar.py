"""The HLO grammar as XLA's own parser accepts it, case by case, compared with that parser.

Each case is a module written here in a form XLA's tests use (no HloModule line, comments,
instructions over several lines, nested instructions, omitted shapes ...).  A case passes
when our parse means what XLA's parse means: the same computations, the same entry, and in
each computation the same instructions in the same order, with the same opcodes, result
shapes (element type and dimensions) and operands (by position: XLA renames instructions to
make names unique in the module).
"""
from __future__ import annotations

import pytest

from pytest_dumpref.xla import xla_private
from pytest_dumpref.xla.hlo import (HloParseError, _parse_shape_at, _strip_comments,
                                    parse_module, wrapped_opcode)


def _shape_key(s):
    return tuple(_shape_key(x) for x in s.tuple_shapes) if s.is_tuple else (s.element_type, s.dims)


def _xla_fields(line: str):
    head, _, rhs = _strip_comments(line.split("\n")[0]).partition(" = ")
    shape, end = _parse_shape_at(rhs, 0)
    rest = rhs[end + 1:]
    return head.replace("ROOT ", "").strip().lstrip("%"), shape, rest[:rest.index("(")]


def assert_same_as_xla(text: str):
    ours = parse_module(text, source="case.hlo")
    theirs = xla_private.parse_with_xla(text)
    assert ours.name == theirs.name
    xcomps = theirs.computations()
    assert sorted(ours.computations) == sorted(c.name for c in xcomps)
    for xc in xcomps:
        comp = ours.computations[xc.name]
        xi = xc.instructions()
        assert len(comp.instructions) == len(xi), xc.name
        xpos = {b.name: k for k, b in enumerate(xi)}
        opos = {a.name: k for k, a in enumerate(comp.instructions)}
        for a, b in zip(comp.instructions, xi):
            _, shape, opcode = _xla_fields(b.to_string())
            assert a.opcode == opcode or (a.opcode == "async-start" and wrapped_opcode(opcode)), \
                (a.name, a.opcode, opcode)
            assert _shape_key(a.shape) == _shape_key(shape), (a.name, a.shape, shape)
            assert [opos[o] for o in a.operands] == [xpos[o.name] for o in b.operands()], a.name
    # the entry: XLA prints it as ENTRY
    entry_line = next(line for line in theirs.to_string().splitlines() if line.startswith("ENTRY"))
    assert entry_line.split()[1].lstrip("%") == ours.entry.name
    return ours


ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def test_bare_computations_without_hlo_module_line():
    m = assert_same_as_xla(ADD + """
ENTRY main {
  p = f32[8]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
""")
    assert m.name == "module_main" and m.entry.name == "main"


def test_block_comments_anywhere_and_line_comments_after_a_brace():
    m = assert_same_as_xla("""/* a test module */
HloModule m /* its name */

add {
  a = f32[] parameter(0) /* first */
  b = f32[] /* the shape */ parameter(1)
  ROOT s = f32[] add(a, /* second */ b)
} // add

// RUN: some-tool %s | FileCheck %s
ENTRY main {
  p = f32[8]{0} parameter(0)  // the input
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
} // main
""")
    assert m.instruction("b").shape.element_type == "f32"


def test_slashes_inside_quoted_strings_are_not_comments():
    m = assert_same_as_xla("""HloModule m

ENTRY main {
  p = f32[8]{0} parameter(0), metadata={source_file="//third_party/x.py" op_name="a/*b*/c"}
  ROOT n = f32[8]{0} negate(p) // a comment
}
""")
    assert m.instruction("p").attrs["metadata"] == '{source_file="//third_party/x.py" op_name="a/*b*/c"}'


def test_instruction_and_attributes_over_several_lines_with_a_bare_trailing_comma():
    """The triton calling-convention form: kind=kCustom, then calls=... on the next line."""
    m = assert_same_as_xla("""HloModule m

fused {
  p0 = f32[16]{0} parameter(0)
  ROOT n = f32[16]{0} negate(p0)
}

ENTRY main {
  p = f32[16]{0} parameter(0)
  ROOT f = f32[16]{0} fusion(p), kind=kCustom,
    calls=fused,
    backend_config={"fusion_backend_config":
      {"kind":"__triton"}}
}
""")
    f = m.entry.root
    assert f.called == ["fused"] and f.fusion_kind == "kCustom"
    assert f.attrs["calls"] == "fused" and "__triton" in f.attrs["backend_config"]


def test_no_entry_keyword_takes_the_last_computation():
    m = assert_same_as_xla("""HloModule m

first {
  x = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(x)
}

last {
  y = f32[4]{0} parameter(0)
  ROOT c = f32[4]{0} call(y), to_apply=first
}
""")
    assert m.entry.name == "last"


def test_operands_without_space_and_blank_lines_inside_a_computation():
    m = assert_same_as_xla("""HloModule m

ENTRY main {
  a = f32[4]{0} parameter(0)

  b = f32[4]{0} parameter(1)
  s = f32[4]{0} add(a,b)

  ROOT t = (f32[4]{0}, f32[4]{0}) tuple(s,a)
}
""")
    assert m.instruction("s").operands == ["a", "b"]


def test_nested_instruction_as_operand():
    m = assert_same_as_xla("""HloModule m

ENTRY main {
  p = f32[8]{0} parameter(0)
  ROOT r = f32[2,4]{1,0} reshape(f32[8]{0} negate(f32[8]{0} p))
}
""")
    assert [i.opcode for i in m.entry.instructions] == ["parameter", "negate", "reshape"]
    assert m.entry.root.operands == [m.entry.instructions[1].name]


def test_result_shapes_xla_infers():
    m = assert_same_as_xla("""HloModule m

ENTRY main {
  a = f32[4,3]{1,0} parameter(0)
  b = f32[4,3]{1,0} parameter(1)
  s = add(a, b)
  c = compare(s, b), direction=LT
  t = tuple(s, c)
  g = get-tuple-element(t), index=1
  tr = transpose(a), dimensions={1,0}
  ROOT out = tuple(g, tr)
}
""")
    assert str(m.instruction("c").shape) == "pred[4,3]"
    assert m.instruction("tr").shape.dims == (3, 4)


def test_computation_written_inline():
    m = assert_same_as_xla("""HloModule m

ENTRY main {
  p = f32[8]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply={
    a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT m = f32[] maximum(a, b)
  }
}
""")
    assert m.entry.root.called == ["_"] and m.computations["_"].root.opcode == "maximum"


def test_long_tuples_with_index_markers_and_older_operand_form():
    assert_same_as_xla("""HloModule m

ENTRY main {
  a = f32[2]{0} parameter(0)
  n = f32[2]{0} negate(f32[2]{0} %a)
  ROOT t = (f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, /*index=5*/f32[2]{0}) tuple(a, n, a, n, a, /*index=5*/n)
}
""")


@pytest.mark.parametrize("text, where, words", [
    ("HloModule m\n\nENTRY main {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} frobnicate(p)\n}\n",
     ":5:22:", "unknown opcode 'frobnicate'"),
    ("HloModule m\n\nENTRY main {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} negate(nope)\n}\n",
     ":5:29:", "undefined operand nope"),
    ("HloModule m\n\nENTRY main {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} call(p), to_apply=gone\n}\n",
     ":5:", "calls unknown computation gone"),
])
def test_what_xla_refuses_is_an_error_at_the_instruction(text, where, words):
    with pytest.raises(ValueError):
        xla_private.parse_with_xla(text)
    with pytest.raises(HloParseError) as info:
        parse_module(text, source="bad.hlo")
    message = str(info.value)
    assert message.startswith("bad.hlo" + where) and words in message, message
