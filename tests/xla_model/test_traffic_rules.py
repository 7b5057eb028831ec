"""Every byte rule of XLA's HloCostAnalysis, restated in ``traffic``, on modules written here.

Each case is one kind of instruction the rules treat apart (tuple-shaped results, variadic
sort and reduce, scatter and gather, rng-bit-generator, send/recv, infeed/outfeed,
cholesky, triangular-solve, collectives and async start/done pairs, custom calls,
while/conditional/call, bounded-dynamic shapes, fusions of every kind).  XLA's own cost
analysis runs on the same text in the test: the restated rules must add up to its
"bytes accessed" exactly, nothing may be left unexplained, and every instruction where the
spill-style model differs must be named with its reason.
"""
from __future__ import annotations

import pytest

from pytest_dumpref.xla import xla_private
from pytest_dumpref.xla.hlo import parse_module
from pytest_dumpref.xla.traffic import module_traffic, xla_rule_bytes

CASES = {
    "rng_bit_generator": """HloModule m
ENTRY e {
  s = u64[2]{0} parameter(0)
  ROOT r = (u64[2]{0}, u32[8]{0}) rng-bit-generator(s), algorithm=rng_three_fry
}""",
    "sort_two_outputs": """HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = f32[1024]{0} parameter(0)
  v = s32[1024]{0} parameter(1)
  ROOT s = (f32[1024]{0}, s32[1024]{0}) sort(k, v), dimensions={0}, to_apply=cmp
}""",
    "variadic_reduce": """HloModule m
argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  g = pred[] compare(a, b), direction=GE
  m = f32[] select(g, a, b)
  n = s32[] select(g, i, j)
  ROOT t = (f32[], s32[]) tuple(m, n)
}
ENTRY e {
  x = f32[16,32]{1,0} parameter(0)
  i = s32[16,32]{1,0} iota(), iota_dimension=1
  z = f32[] constant(-inf)
  zi = s32[] constant(0)
  ROOT r = (f32[16]{0}, s32[16]{0}) reduce(x, i, z, zi), dimensions={1}, to_apply=argmax
}""",
    "scatter": """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[100,4]{1,0} parameter(0)
  i = s32[3,1]{1,0} parameter(1)
  u = f32[3,4]{1,0} parameter(2)
  ROOT s = f32[100,4]{1,0} scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}""",
    "gather": """HloModule m
ENTRY e {
  x = f32[100,4]{1,0} parameter(0)
  i = s32[3,1]{1,0} parameter(1)
  ROOT g = f32[3,4]{1,0} gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}""",
    "send_recv": """HloModule m
ENTRY e {
  x = f32[16]{0} parameter(0)
  t = token[] after-all()
  s = (f32[16]{0}, u32[], token[]) send(x, t), channel_id=1
  sd = token[] send-done(s), channel_id=1
  r = (f32[16]{0}, u32[], token[]) recv(t), channel_id=2
  rd = (f32[16]{0}, token[]) recv-done(r), channel_id=2
  ROOT o = f32[16]{0} get-tuple-element(rd), index=0
}""",
    "infeed_outfeed": """HloModule m
ENTRY e {
  t = token[] after-all()
  i = ((f32[4]{0}), token[]) infeed(t)
  d = (f32[4]{0}) get-tuple-element(i), index=0
  t2 = token[] get-tuple-element(i), index=1
  ROOT o = token[] outfeed(d, t2), outfeed_shape=(f32[4]{0})
}""",
    "cholesky": """HloModule m
ENTRY e {
  a = f32[16,16]{1,0} parameter(0)
  ROOT c = f32[16,16]{1,0} cholesky(a), lower=true
}""",
    "triangular_solve": """HloModule m
ENTRY e {
  a = f32[16,16]{1,0} parameter(0)
  b = f32[16,4]{1,0} parameter(1)
  ROOT x = f32[16,4]{1,0} triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
}""",
    "all_reduce": """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64]{0} parameter(0)
  y = f32[32]{0} parameter(1)
  ROOT r = (f32[64]{0}, f32[32]{0}) all-reduce(x, y), replica_groups={}, to_apply=add
}""",
    "all_reduce_start_done": """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64]{0} parameter(0)
  s = f32[64]{0} all-reduce-start(x), replica_groups={}, to_apply=add
  ROOT d = f32[64]{0} all-reduce-done(s)
}""",
    "collective_permute": """HloModule m
ENTRY e {
  x = f32[64]{0} parameter(0)
  ROOT c = f32[64]{0} collective-permute(x), source_target_pairs={{0,0}}
}""",
    "async_custom_call": """HloModule m
ENTRY e {
  x = f32[10]{0} parameter(0)
  s = ((f32[10]{0}), f32[20]{0}, s32[]) custom-call-start(x), custom_call_target="foo"
  ROOT d = f32[20]{0} custom-call-done(s)
}""",
    "async_call": """HloModule m
inner {
  p = f32[10]{0} parameter(0)
  ROOT n = f32[10]{0} negate(p)
}
ENTRY e {
  x = f32[10]{0} parameter(0)
  s = ((f32[10]{0}), f32[10]{0}, s32[]) async-start(x), calls=inner
  ROOT d = f32[10]{0} async-done(s)
}""",
    "custom_call": """HloModule m
ENTRY e {
  x = f32[10]{0} parameter(0)
  ROOT c = f32[10]{0} custom-call(x), custom_call_target="my_kernel"
}""",
    "while_conditional_call": """HloModule m
cond {
  p = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8]{0} get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[8]{0} exponential(x)
  ROOT t = (s32[], f32[8]{0}) tuple(j, y)
}
neg {
  a = f32[8]{0} parameter(0)
  ROOT n = f32[8]{0} negate(a)
}
same {
  a = f32[8]{0} parameter(0)
  ROOT c = f32[8]{0} copy(a)
}
callee {
  a = f32[8]{0} parameter(0)
  b = f32[8]{0} sine(a)
  ROOT c = f32[8]{0} add(a, b)
}
ENTRY e {
  x = f32[8]{0} parameter(0)
  b = pred[] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[8]{0}) tuple(z, x)
  w = (s32[], f32[8]{0}) while(t), condition=cond, body=body
  y = f32[8]{0} get-tuple-element(w), index=1
  c = f32[8]{0} conditional(b, y, y), true_computation=neg, false_computation=same
  ROOT k = f32[8]{0} call(c), to_apply=callee
}""",
    "bounded_dynamic": """HloModule m
ENTRY e {
  x = f32[<=16]{0} parameter(0)
  ROOT n = f32[<=16]{0} negate(x)
}""",
    "fusion_kinds": """HloModule m
loop {
  p = f32[64,32]{1,0} parameter(0)
  ROOT e = f32[64,32]{1,0} exponential(p)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
input {
  p = f32[64,32]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[64]{0} reduce(p, z), dimensions={1}, to_apply=add
}
output {
  a = f32[64,32]{1,0} parameter(0)
  b = f32[32,16]{1,0} parameter(1)
  c = f32[16]{0} parameter(2)
  d = f32[64,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bc = f32[64,16]{1,0} broadcast(c), dimensions={1}
  ROOT s = f32[64,16]{1,0} add(d, bc)
}
custom_gather {
  x = f32[100,4]{1,0} parameter(0)
  i = s32[3,1]{1,0} parameter(1)
  ROOT g = f32[3,4]{1,0} gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}
triton {
  p = f32[64,32]{1,0} parameter(0)
  s = f32[64,8]{1,0} slice(p), slice={[0:64], [0:8]}
  ROOT n = f32[64,8]{1,0} negate(s)
}
ENTRY e {
  x = f32[64,32]{1,0} parameter(0)
  w = f32[32,16]{1,0} parameter(1)
  c = f32[16]{0} parameter(2)
  t = f32[100,4]{1,0} parameter(3)
  i = s32[3,1]{1,0} parameter(4)
  l = f32[64,32]{1,0} fusion(x), kind=kLoop, calls=loop
  r = f32[64]{0} fusion(l), kind=kInput, calls=input
  o = f32[64,16]{1,0} fusion(x, w, c), kind=kOutput, calls=output
  g = f32[3,4]{1,0} fusion(t, i), kind=kCustom, calls=custom_gather
  tr = f32[64,8]{1,0} fusion(l), kind=kCustom, calls=triton, backend_config={"fusion_backend_config":{"kind":"__triton"}}
  ROOT out = (f32[64]{0}, f32[64,16]{1,0}, f32[3,4]{1,0}, f32[64,8]{1,0}) tuple(r, o, g, tr)
}""",
}

# instruction -> a phrase of the reason its bytes differ from the spill-style model
NAMED = {
    'rng_bit_generator': {},
    'sort_two_outputs': {},
    'variadic_reduce': {},
    'infeed_outfeed': {},
    'all_reduce': {},
    'all_reduce_start_done': {},
    'collective_permute': {},
    'scatter': {'s': 'updates three times'},
    'gather': {'g': 'elements it reads'},
    'send_recv': {'sd': 'is a tuple', 'rd': 'is a tuple'},
    'cholesky': {'c': 'half of the matrix'},
    'triangular_solve': {'x': 'half of the triangular'},
    'async_custom_call': {'s': 'reports -1', 'd': 'is a tuple'},
    'async_call': {'s': 'computation it starts', 'd': 'is a tuple'},
    'custom_call': {'c': 'reports -1'},
    'while_conditional_call': {'t': 'index table', 'w': 'while loop'},
    'bounded_dynamic': {'n': 'size metadata'},
    'fusion_kinds': {'g': 'gather g inside it', 'tr': 'slice s', 'out': 'index table'},
}



@pytest.mark.parametrize("case", sorted(CASES))
def test_rules_add_up_to_xla_and_every_difference_is_named(case):
    text = CASES[case]
    cost = xla_private.cost_analysis(text, source=case)
    module = parse_module(text, source=case)
    assert sum(xla_rule_bytes(module).values()) == cost.get("bytes accessed", 0.0)
    found = module_traffic(module, xla_cost=cost).compare_with_xla()
    assert not [d for d in found if d.instruction.startswith("(")], found
    assert {d.instruction for d in found} == set(NAMED[case])
    for d in found:
        assert NAMED[case][d.instruction] in d.reason, (d.instruction, d.reason)


def test_rules_that_differ_from_output_plus_operands():
    """The numbers XLA's rules give, as XLA itself gives them (not typed here: compared)."""
    def xla(case):
        return xla_private.cost_analysis(CASES[case])["bytes accessed"]
    # tuple-shaped results count the arrays inside, not the tuple's index table
    assert xla("sort_two_outputs") == 2 * (1024 * 4 + 1024 * 4)
    assert xla("rng_bit_generator") == (16 + 32) + 16
    # half of the matrix for cholesky, f32[16,16] = 1024 B in all
    assert xla("cholesky") == 1024
    # bounded-dynamic: 4 B of size metadata per dimension, each side
    assert xla("bounded_dynamic") == 2 * (16 * 4 + 4)
    # a custom call is unknown: -1
    assert xla("custom_call") == -1


def test_missing_bytes_accessed_key_reads_as_zero():
    """XLA leaves 'bytes accessed' out when nothing is counted (an infeed of nothing): the
    comparison reads 0 and finds the models agree, instead of a difference with no word."""
    text = """HloModule m
ENTRY e {
  t = token[] after-all()
  ROOT i = ((), token[]) infeed(t)
}"""
    cost = xla_private.cost_analysis(text)
    assert "bytes accessed" not in cost
    module = parse_module(text)
    traffic = module_traffic(module, xla_cost=cost)
    assert sum(xla_rule_bytes(module).values()) == 0
    assert traffic.compare_with_xla() == []
    assert traffic.as_dict()["xla"]["bytes_accessed"] == 0.0


def test_the_index_table_pointer_size_is_the_installed_xlas():
    """XLA's cost analysis sizes a tuple's index table with a pointer size that moved between
    jaxlib releases (8 bytes up to 0.11, 4 from 0.12); the restated rules use the one of the
    jaxlib installed, and XLA itself says which that is."""
    from pytest_dumpref.xla.traffic import xla_pointer_size
    text = """HloModule m
ENTRY e {
  x = f32[4]{0} parameter(0)
  ROOT t = (f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(x, x, x)
}"""
    assert xla_private.cost_analysis(text)["bytes accessed"] == 3 * xla_pointer_size()
    assert sum(xla_rule_bytes(parse_module(text)).values()) == 3 * xla_pointer_size()
