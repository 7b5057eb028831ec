"""The program reader on StableHLO MLIR text (prog_text.c), through cffi: what jax's
`lowered.as_text()` prints, in the pretty form, with locations, and in the generic form, runs
and matches jax's CPU backend; bad text gives an error naming the op and line, never a crash."""
from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import prog_artifacts as pa


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    return pa.Reader(pa.build_prog_library(tmp_path_factory.mktemp("prog-text")))


def _where(x):
    return jnp.where(x > 0, x, -x) + jnp.arange(4.0, dtype=jnp.float32)


PROGRAMS = {
    "elementwise": (lambda x, y: jnp.tanh(x) * y + 1.0,
                    (np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32))),
    "matmul_relu": (lambda x, w: jnp.maximum(x @ w, 0.0),
                    (np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                     np.arange(12, dtype=np.float32).reshape(3, 4) - 5)),
    "compare_select_iota": (_where, (np.array([1, -2, 3, -4], np.float32),)),
    "private_call": (lambda x: jax.jit(lambda t: t * 2)(x) - x.T.T, (np.ones((2, 2), np.float32),)),
    "int_and_convert": (lambda a: ((a * 3) >> 1).astype(jnp.float32) - 0.5,
                        (np.array([[1, -7], [12, 5]], np.int32),)),
    "scalar": (lambda x: x * x + 1, (np.float32(3.0),)),
}


def texts(fn, args):
    low = jax.jit(fn).lower(*args)
    module = low.compiler_ir("stablehlo")
    return {"pretty": low.as_text(), "locations": low.as_text(debug_info=True),
            "generic": module.operation.get_asm(print_generic_op_form=True)}


@pytest.mark.parametrize("form", ["pretty", "locations", "generic"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_text_program_matches_cpu(reader, name, form):
    fn, args = PROGRAMS[name]
    text = texts(fn, args)[form]
    p, code, message = reader.parse(text.encode())
    assert p is not None, (code, message, text[:2000])
    code, message, outs = reader.run(p, [np.asarray(a) for a in args])
    assert code == 0, message
    want = np.asarray(jax.jit(fn)(*jax.device_put(args, jax.devices("cpu")[0])))
    assert outs[0].dtype == want.dtype and outs[0].shape == want.shape
    np.testing.assert_allclose(outs[0], want, rtol=1e-6, atol=1e-6)


def test_text_unsupported_op_is_named_with_its_line(reader):
    text = texts(lambda x: jnp.sort(x), (np.arange(4.0, dtype=np.float32),))["pretty"]
    p, code, message = reader.parse(text.encode())
    assert p is None and code == pa.UNIMPLEMENTED
    assert "stablehlo.sort" in message and "line" in message


def test_text_errors_name_the_line(reader):
    good = texts(*PROGRAMS["elementwise"])["pretty"]
    bad = good.replace("%arg1 : tensor<4xf32>", "%nope : tensor<4xf32>", 1)
    p, code, message = reader.parse(bad.encode())
    assert p is None and code == pa.INVALID_ARGUMENT and "%nope" in message and "line" in message
    p, code, message = reader.parse(good.replace("tensor<4xf32>", "tensor<5xf32>", 1).encode())
    assert p is None and code == pa.INVALID_ARGUMENT


def test_mutated_text_never_crashes(reader):
    corpus = [t.encode() for fn, args in PROGRAMS.values() for t in texts(fn, args).values()]
    rng = random.Random(7)
    seen = {"parsed": 0, pa.INVALID_ARGUMENT: 0, pa.UNIMPLEMENTED: 0}
    for _ in range(3000):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 3)):
            if not data:
                break
            at = rng.randrange(len(data))
            kind = rng.randrange(3)
            if kind == 0:
                del data[at:at + rng.randint(1, 12)]
            elif kind == 1:
                data[at] = rng.choice(b"%(){}<>,:=x0123456789 \n\"")
            else:
                del data[at:]
        p, code, message = reader.parse(bytes(data))
        if p is None:
            assert code in seen and message, (code, message)
            seen[code] += 1
        else:
            seen["parsed"] += 1
            inputs, _ = reader.signature(p)
            if sum(int(np.prod(s)) for _, s in inputs) < 1 << 16:
                code, message, _ = reader.run(p, [np.zeros(s, np.dtype(t)) for t, s in inputs])
                assert code in (0, pa.INVALID_ARGUMENT, pa.UNIMPLEMENTED, 8, 13), message
    assert seen[pa.INVALID_ARGUMENT] > 0


@pytest.mark.parametrize("result, message", [("tensor<2x5xf32>", "dot result shape"),
                                             ("tensor<2x4xf32>", None)])
def test_text_dot_general_shapes_are_checked(reader, result, message):
    """The text reader checks a dot_general's shapes with the bytecode reader's check."""
    text = ("func.func public @main(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> " + result + " {\n"
            "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
            "(tensor<2x3xf32>, tensor<3x4xf32>) -> " + result + "\n"
            "  return %0 : " + result + "\n}\n")
    p, code, got = reader.parse(text.encode())
    if message is None:
        assert p is not None, got
        a, b = np.ones((2, 3), np.float32), np.full((3, 4), 2.0, np.float32)
        code, got, outs = reader.run(p, [a, b])
        reader.free(p)
        assert code == 0 and (outs[0] == a @ b).all(), got
    else:
        assert p is None and code == pa.INVALID_ARGUMENT and message in got, got
