"""Programs the dumpref device must run, each a jax function and its arguments.

Shared by the jax-level tests (run on the device through PJRT) and the reader-level tests
(artifacts captured from jax and run through cffi).  Imported inside subprocesses with
jax_enable_x64 on, so f64 and s64 inputs stay what they say.
"""
from __future__ import annotations

import numpy as np


def _rng(seed=0):
    return np.random.default_rng(seed)


def f32(*shape, seed=0):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def cases():
    """name -> (function, args).  Built lazily so importing this module imports no jax."""
    import jax
    import jax.numpy as jnp
    from pytest_dumpref import examples as ex

    p = ex.transformer_params(16, 32, seed=1)
    mlp_args = (f32(8, 16), p["w1"], p["b1"], p["w2"], p["b2"])
    sgd_params = {"w1": p["w1"], "b1": p["b1"], "w2": p["w2"], "b2": p["b2"]}
    ints = np.array([[7, -3, 0, 12], [-8, 5, 9, -1]], np.int32)
    nonzero = np.array([[2, -2, 3, 5], [3, 4, -7, 2]], np.int32)

    def nested(x):
        inner = jax.jit(lambda t: jnp.tanh(t) * 2.0)
        return inner(x) + inner(x * 3.0)

    return {
        # the end-to-end slice
        "add_one": (lambda x: x + 1, (np.arange(4.0, dtype=np.float32),)),
        # the reference programs of the study
        "mlp": (ex.mlp, mlp_args),
        "mlp_grad": (jax.grad(lambda x, w1, b1, w2, b2: ex.mlp(x, w1, b1, w2, b2).sum(),
                              argnums=(1, 2, 3, 4)), mlp_args),
        "sgd_step": (ex.sgd_step, (sgd_params, f32(8, 16, seed=4), f32(8, 16, seed=5))),
        "softmax": (ex.softmax, (f32(8, 32),)),
        "layernorm": (ex.layernorm, (f32(8, 16), p["ln1_g"] + f32(16, seed=6), f32(16, seed=7))),
        "causal_attention": (lambda x, wq, wk, wv, wo: ex.causal_attention(x, wq, wk, wv, wo, 4),
                             (f32(2, 8, 16), p["wq"], p["wk"], p["wv"], p["wo"])),
        "transformer_block": (lambda x, params: ex.transformer_block(x, params, 4),
                              (f32(2, 8, 16), p)),
        # dtypes
        "f64_math": (lambda x, y: (jnp.exp(x) / (1 + y * y), jnp.tanh(x) - jnp.sqrt(jnp.abs(y))),
                     (f32(3, 5).astype(np.float64), f32(3, 5, seed=2).astype(np.float64))),
        "s32_arith": (lambda a, b: (a + b * 3, a * b - 7, jnp.maximum(a, b), jnp.minimum(a, -b),
                                    a // b, a % b, -a, jnp.abs(a)), (ints, nonzero)),
        "s64_arith": (lambda a, b: (a * b + (a << 3), a.sum(), a.max(axis=1), a // b),
                      (ints.astype(np.int64) * 100000, nonzero.astype(np.int64))),
        "pred_logic": (lambda p, q: (p & q, p | ~q, p ^ q, jnp.where(p, 1.5, -2.5), p.any(), q.all()),
                       (np.array([True, False, True, False]), np.array([True, True, False, False]))),
        "bf16": (lambda x, y: (x * y + x, jnp.exp(x), x @ y.T),
                 (f32(4, 8).astype(jnp.bfloat16), f32(4, 8, seed=1).astype(jnp.bfloat16))),
        # ranks: 0-d and empty
        "scalar": (lambda x, y: (x * 2 + y, jnp.sqrt(x * x + 1)),
                   (np.float32(1.5), np.float32(-0.25))),
        "empty": (lambda x: (x + 1, x.sum(axis=0), x.T), (np.zeros((0, 3), np.float32),)),
        "several_outputs": (lambda x: (x + 1, x * 2, x.sum(), x.max(axis=0)), (f32(3, 4),)),
        # op coverage beyond the study programs
        "math_ops": (lambda x: (jnp.log(jnp.abs(x) + 1), jax.nn.sigmoid(x), jax.lax.rsqrt(x * x + 1),
                                jnp.abs(x) ** 1.7, jnp.power(x, 3), jnp.exp(-x * x)), (f32(4, 6),)),
        "compare_select": (lambda x, y: (jnp.where(x > y, x, y), x == y, x <= y, jnp.maximum(x, y),
                                         jnp.minimum(x, 0.5), jnp.clip(x, -0.5, 0.5)),
                           (f32(4, 6), f32(4, 6, seed=1))),
        "convert": (lambda x, i: (x.astype(jnp.int32), i.astype(jnp.float32), (x > 0).astype(jnp.float32),
                                  i.astype(jnp.float64), x.astype(jnp.float64)),
                    (f32(3, 4) * 10, ints[:, :3].T.copy())),
        "shape_ops": (lambda x: (jnp.concatenate([x, x[:, ::-1]], axis=1)[1:3], x.T.reshape(2, -1),
                                 jnp.flip(x, 0), jax.lax.iota(jnp.int32, 5), jnp.arange(6.0).reshape(2, 3),
                                 x[:, 1::2], jnp.broadcast_to(x[:, :1], (3, 4))), (f32(3, 4),)),
        "reductions": (lambda x: (x.sum(axis=0), x.max(axis=1), x.min(), jnp.prod(x, axis=1), x.mean()),
                       (f32(4, 5),)),
        "dot_general": (lambda a, b, c: (jnp.einsum("bij,bjk->bik", a, b), jnp.einsum("bij,kj->bki", a, c),
                                         jnp.dot(a[0], b[0]), jnp.einsum("i,i->", a[0, 0], a[1, 0])),
                        (f32(2, 3, 4), f32(2, 4, 5, seed=1), f32(6, 4, seed=2))),
        "int_dot": (lambda a, b: a @ b, (ints, nonzero.T.copy())),
        "private_calls": (nested, (f32(3, 3),)),
    }
