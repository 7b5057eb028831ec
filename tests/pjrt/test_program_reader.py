"""The program reader and level 3 for x + 1 (pytest_dumpref/pjrt/program_reader.py,
level3_add.py) as Study 3's reader meets them: jax compiles real programs for the minimal
plugin, whose level-3 slots level3_add fills, in a subprocess; the bytes jax sent come back
and the reader is held to them, and to damaged copies of them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_dumpref.pjrt import minimal
from pytest_dumpref.pjrt.build import build_plugin
from pytest_dumpref.pjrt.program_reader import Program
from pytest_dumpref.pjrt.trace import run_jax

RUN = """
import json, os
from pytest_dumpref.pjrt import level3_add
level3_add.install(os.environ['PJRT_NAMES_AND_LIBRARY_PATHS'].split(':', 1)[1])
dev = jax.devices('dumpref')[0]
out = {}
for a in [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.int32)]:
    y = np.asarray(jax.jit(lambda x: x + 1)(jax.device_put(a, dev)))
    out[str(a.dtype)] = [str(y.dtype), y.tolist()]
try:
    jax.jit(jnp.tanh)(jax.device_put(np.ones(3, np.float32), dev))
except Exception as e:
    out['tanh'] = str(e)
out['codes'] = [c['code'] for c in level3_add.seen['compile']]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    lib = build_plugin(tmp_path_factory.mktemp("minimal"), minimal=True).path
    run = run_jax(lib, RUN, trace=False, env=minimal.plain_registration(lib))
    assert run.ok, run.why + run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_x_plus_1_runs_on_the_device_in_f32_and_s32(ran):
    assert ran["float32"] == ["float32", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]
    assert ran["int32"] == ["int32", [1, 2, 3, 4]]


def test_an_op_it_cannot_run_is_refused_at_compile_naming_it(ran):
    assert "UNIMPLEMENTED" in ran["tanh"] and "vhlo.tanh" in ran["tanh"], ran["tanh"]


def test_the_reader_computes_x_plus_1_from_the_bytes_jax_sent(ran):
    prog = Program(bytes.fromhex(ran["codes"][0]))
    assert prog.version in (5, 6) and "vhlo" in prog.dialects
    assert [op["name"] for op in prog.main()["ops"]] == [
        "vhlo.constant_v1", "vhlo.broadcast_in_dim_v1", "vhlo.add_v1", "vhlo.return_v1"]
    x = np.full((2, 3), 2.5, np.float32)
    (y,) = prog.run(x)
    assert y.dtype == np.float32 and (y == 3.5).all()
    with pytest.raises(ValueError, match=r"argument %0 is float32\[3, 2\]"):
        prog.run(np.ones((3, 2), np.float32))  # the shape main declares is checked


def test_damaged_bytes_fail_saying_where(ran):
    code = bytes.fromhex(ran["codes"][0])
    with pytest.raises(ValueError, match="not MLIR bytecode"):
        Program(b"XLA!" + code[4:])
    with pytest.raises(ValueError, match=r"truncated at byte \d+"):
        Program(code[:len(code) // 2])
