"""The compact get-tuple-element form newer XLA prints (jaxlib 0.11 on): ``%t#1`` as an
operand is element 1 of the tuple ``%t``, with no get-tuple-element line of its own."""
from __future__ import annotations

import pytest

from pytest_dumpref.xla.hlo import HloParseError, parse_module
from pytest_dumpref.xla.traffic import module_traffic

COMPACT = """HloModule m, entry_computation_layout={((s32[], f32[8]{0}))->f32[8]{0}}

ENTRY %main (p: (s32[], f32[8])) -> f32[8] {
  %p = (s32[], f32[8]{0}) parameter(0)
  %c = f32[8]{0} convert(%p#0)
  ROOT %add = f32[8]{0} add(%p#1, %c)
}
"""

SPELLED = """HloModule m, entry_computation_layout={((s32[], f32[8]{0}))->f32[8]{0}}

ENTRY %main (p: (s32[], f32[8])) -> f32[8] {
  %p = (s32[], f32[8]{0}) parameter(0)
  %g0 = s32[] get-tuple-element(%p), index=0
  %c = f32[8]{0} convert(%g0)
  %g1 = f32[8]{0} get-tuple-element(%p), index=1
  ROOT %add = f32[8]{0} add(%g1, %c)
}
"""


def test_a_compact_operand_is_a_get_tuple_element_of_its_tuple():
    m = parse_module(COMPACT)
    by = {i.name: i for i in m.entry.instructions}
    g = by["p#1"]
    assert g.opcode == "get-tuple-element" and g.operands == ["p"] and str(g.shape) == "f32[8]{0}"
    assert g.attrs["index"] == "1"
    assert by["add"].operands == ["p#1", "c"] and m.entry.root.name == "add"
    # made once, before its first user
    names = [i.name for i in m.entry.instructions]
    assert names.index("p#0") < names.index("c") and names.count("p#0") == 1


def test_it_counts_as_the_spelled_out_form():
    assert module_traffic(parse_module(COMPACT)).bytes_accessed == \
        module_traffic(parse_module(SPELLED)).bytes_accessed


@pytest.mark.parametrize("bad, says", [("%p#2", "no such element"), ("%q#0", "undefined operand q"),
                                       ("%c#0", "no such element")])
def test_a_wrong_compact_operand_is_named(bad, says):
    text = COMPACT.replace("add(%p#1, %c)", f"add({bad}, %c)")
    with pytest.raises(HloParseError) as e:
        parse_module(text, source="x.txt")
    assert says in str(e.value) and "x.txt" in str(e.value) and "add" in str(e.value)
