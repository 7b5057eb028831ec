"""The HLO model against real compiles and against hand-written edge cases."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from pytest_dumpref import examples
from pytest_dumpref.xla import xla_private
from pytest_dumpref.xla.hlo import HloParseError, parse_module, parse_shape


@pytest.fixture(scope="module")
def scan_text():
    h0, xs, w = jnp.ones((4, 32)), jnp.ones((10, 4, 32)), jnp.ones((32, 32))
    return jax.jit(examples.scan_rnn).lower(h0, xs, w).compile().as_text()


@pytest.fixture(scope="module")
def softmax_dump(tmp_path_factory):
    """Every pass snapshot of a softmax compile, as (path, text) pairs."""
    d = tmp_path_factory.mktemp("softmax-dump")
    jax.jit(examples.softmax).lower(jnp.ones((32, 64))).compile(compiler_options={
        "xla_dump_to": str(d), "xla_dump_hlo_pass_re": ".*", "xla_dump_hlo_as_text": True})
    files = sorted(p for p in d.iterdir() if p.suffix == ".txt" and p.name.count(".") >= 3
                   and "buffer-assignment" not in p.name and "memory-usage" not in p.name
                   and "live-range" not in p.name)
    assert len(files) > 10
    return [(p, p.read_text()) for p in files]


def test_every_snapshot_matches_xla_parser(softmax_dump):
    """Same computations, same instructions (names, opcodes, operands) as XLA's C++ parser."""
    for path, text in softmax_dump:
        ours = parse_module(text, source=str(path))
        theirs = xla_private.parse_with_xla(text)
        assert ours.name == theirs.name
        assert list(ours.computations) == [c.name for c in theirs.computations()]
        for comp in theirs.computations():
            mine = ours.computations[comp.name]
            assert [i.name for i in mine.instructions] == [i.name for i in comp.instructions()]
            for a, b in zip(mine.instructions, comp.instructions()):
                xla_line = b.to_string()
                assert f"{a.shape} {a.opcode}(" in xla_line, (path.name, xla_line)
                assert a.operands == [o.name for o in b.operands()], (path.name, a.name)


def test_module_structure_of_a_while_loop(scan_text):
    m = parse_module(scan_text, source="scan.txt")
    assert m.entry.is_entry and m.entry.root.is_root
    loop = next(i for i in m.entry.instructions if i.opcode == "while")
    body, cond = m.computations[loop.attrs["body"].lstrip("%")], \
        m.computations[loop.attrs["condition"].lstrip("%")]
    assert set(loop.called) == {body.name, cond.name}
    assert loop.shape.is_tuple and len(loop.shape.tuple_shapes) == len(body.root.shape.tuple_shapes)
    assert [p.parameter_number for p in m.entry.parameters] == [0, 1, 2]
    assert m.instruction(loop.name) is loop
    fusions = [i for c in m.computations.values() for i in c.instructions if i.opcode == "fusion"]
    assert fusions and all(i.fusion_kind in ("kLoop", "kInput", "kOutput", "kCustom")
                           for i in fusions)
    assert all("metadata" not in i.canonical for i in fusions)


@pytest.mark.parametrize("text, element_type, dims, nbytes", [
    ("f32[64,128]{1,0}", "f32", (64, 128), 64 * 128 * 4),
    ("bf16[3,5]", "bf16", (3, 5), 30),
    ("pred[7]", "pred", (7,), 7),
    ("f8e4m3fn[10]{0}", "f8e4m3fn", (10,), 10),
    ("f8e5m2[2,2]", "f8e5m2", (2, 2), 4),
    ("s4[5]{0}", "s4", (5,), 5),            # unpacked: one byte per element
    ("s4[5]{0:E(4)}", "s4", (5,), 3),       # packed by the layout: ceil(5*4/8)
    ("u4[8]{0:E(4)}", "u4", (8,), 4),
    ("c64[2]", "c64", (2,), 16),
    ("c128[2]", "c128", (2,), 32),
    ("f32[]", "f32", (), 4),
    ("token[]", "token", (), 0),
    ("f32[<=8,4]{1,0}", "f32", (8, 4), 128),  # dynamic dims count at their bound
])
def test_array_shapes(text, element_type, dims, nbytes):
    s = parse_shape(text)
    assert (s.element_type, s.dims, s.byte_size) == (element_type, dims, nbytes)
    assert str(s) == text and not s.is_tuple


def test_tuple_shapes():
    s = parse_shape("(s32[], (f32[2]{0}, pred[3]), bf16[4,4]{1,0})")
    assert s.is_tuple and len(s.tuple_shapes) == 3
    assert s.tuple_shapes[1].tuple_shapes[1].element_type == "pred"
    assert s.byte_size == 4 + 8 + 3 + 32            # data in the leaves
    assert s.xla_byte_size() == 3 * 8               # XLA: the tuple's index table of pointers
    assert parse_shape("()").tuple_shapes == []
    assert parse_shape("f32[2]{0:T(8,128)}").layout == "{0:T(8,128)}"


MINIMAL = """\
HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %c = f32[] constant(0)
  %r = f32[] reduce(%p, %c), dimensions={0}, to_apply=%add, metadata={op_name="x, y" source_line=3}
  %t = (f32[4]{0}, f32[]) tuple(%p, %r), frontend_attributes={a="b,c"}
  ROOT %o = f32[4]{0} get-tuple-element(%t), index=0
}
"""


def test_attributes_keep_quoted_commas():
    m = parse_module(MINIMAL)
    r = m.instruction("r")
    assert r.called == ["add"] and r.attrs["dimensions"] == "{0}"
    assert r.attrs["metadata"] == '{op_name="x, y" source_line=3}'
    assert m.instruction("t").attrs == {"frontend_attributes": '{a="b,c"}'}
    assert m.instruction("o").operands == ["t"]
    assert m.entry.root.name == "o" and m.computations["add"].root.name == "s"


def test_older_operand_format_with_shapes():
    text = MINIMAL.replace("add(%a, %b)", "add(f32[] %a, f32[] %b)")
    assert parse_module(text).instruction("s").operands == ["a", "b"]


@pytest.mark.parametrize("text, line, words", [
    ("hello world\n", 1, "not HLO"),
    ("", 1, "empty"),
    (MINIMAL[:MINIMAL.index("ROOT %o")], 13, "truncated"),
    (MINIMAL.replace("reduce(%p, %c)", "reduce(%p, %nope)"), "12:25", "undefined operand nope"),
    (MINIMAL.replace("%c = f32[] constant(0)", "%c = f32[ constant(0)"), 11, "shape"),
    (MINIMAL.replace("to_apply=%add", "to_apply=%missing"), 12, "unknown computation missing"),
])
def test_bad_input_names_file_and_line(text, line, words):
    with pytest.raises(HloParseError) as info:
        parse_module(text, source="some/file.txt")
    message = str(info.value)
    assert message.startswith("some/file.txt" + (f":{line}:" if line else ":"))
    assert words in message
    assert isinstance(info.value, ValueError)


BRANCHY = """\
HloModule branchy

%on_true (a: f32[2]) -> f32[2] {
  ROOT %a = f32[2]{0} parameter(0)
}

%on_false (b: f32[2]) -> f32[2] {
  %b = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(%b)
}

ENTRY %main (p: pred[], x: f32[2]) -> (f32[2], f32[2], f32[2], f32[2], f32[2], f32[2]) {
  %p = pred[] parameter(0)
  %x = f32[2]{0} parameter(1)
  %k = f32[2,2]{1,0} constant({ { 1, 2 },
    { 3, 4 } })
  %c = f32[2]{0} conditional(%p, %x, %x), branch_computations={%on_true, %on_false}
  ROOT %t = (f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, /*index=5*/f32[2]{0}) tuple(%c, %c, %c, %c, %c, /*index=5*/%x)
}
"""


def test_branches_literals_and_index_markers():
    m = parse_module(BRANCHY, source="branchy.txt")
    assert m.instruction("c").called == ["on_true", "on_false"]
    assert m.instruction("c").operands == ["p", "x", "x"]
    k = m.instruction("k")  # a literal that spans two lines
    assert k.operands == [] and "{ 3, 4 }" in k.operand_text and k.shape.dims == (2, 2)
    t = m.entry.root
    assert t.operands[-1] == "x" and len(t.shape.tuple_shapes) == 6
    assert m.computations["on_true"].root.opcode == "parameter"
    assert [c for c in m.computations] == ["on_true", "on_false", "main"]


def test_reparsing_a_snapshot_reuses_unchanged_computations():
    """The caches keep parsed computations: an identical computation is the same object."""
    a = parse_module(BRANCHY)
    b = parse_module(BRANCHY.replace("negate(%b)", "abs(%b)"))
    assert a.computations["on_true"] is b.computations["on_true"]
    assert a.computations["on_false"] is not b.computations["on_false"]
    assert b.instruction("n").opcode == "abs" and a.instruction("n").opcode == "negate"
