"""Programs the dumpref device must run, each a jax function and its arguments.

Shared by the jax-level tests (run on the device through PJRT) and the reader-level tests
(artifacts captured from jax and run through cffi).  Imported inside subprocesses with
jax_enable_x64 on, so f64 and s64 inputs stay what they say.
"""
from __future__ import annotations

from functools import partial

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
        **more_cases(),
    }


def _scan_grad_step(jnp):
    """The step of jax's testScanGrad: a carry of 4, a scanned row of 3, a scalar output."""
    def step(c, a):
        b = jnp.sum(jnp.sin(a)) + jnp.sum(jnp.sin(c)) + 0.25
        return jnp.sin(c * b), b
    return step


def _vjp_of_vjp(fn, *args):
    """check_grads(order=2, modes=["rev"])'s second function: the VJP of the VJP of fn (each
    at its own output as cotangent)."""
    import jax

    def vjp_at_output(*a):
        out, pull = jax.vjp(fn, *a)
        return pull(out)
    out, pull = jax.vjp(vjp_at_output, *args)
    return out, pull(out)


def more_cases():
    """Control flow, indexing, sort, windows, convolution, bit ops and the wider element types
    (each with 0-d and empty inputs where the op allows them)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    ints = np.array([[7, -3, 0, 12], [-8, 5, 9, -1]], np.int32)
    c64 = (f32(3, 4) + 1j * f32(3, 4, seed=1)).astype(np.complex64)
    idx = np.array([3, 0, 3], np.int32)
    return {
        "while_loop": (lambda x, n: (lax.fori_loop(0, 5, lambda i, c: c * 2 + i, x),
                                     lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5),
                                                    (np.int32(0), np.float32(1.0)))),
                       (f32(3), np.int32(4))),
        "cond_switch": (lambda p, i, x: (lax.cond(p, lambda: x + 1, lambda: x * 2),
                                         lax.switch(i, [lambda: x - 1, lambda: x * 3, lambda: -x]),
                                         lax.switch(i + 7, [lambda: x, lambda: x * 0.5])),
                        (np.bool_(False), np.int32(1), f32(2, 3))),
        "scan": (lambda c, xs, w: lax.scan(lambda h, x: (jnp.tanh(h @ w + x), h.sum()), c, xs),
                 (f32(4), f32(5, 4, seed=1), f32(4, 4, seed=2))),
        "sort": (lambda x, k, e: (jnp.sort(x, axis=0), jnp.argsort(x[:, 0], stable=True),
                                  lax.sort((k, x[:, 1]), num_keys=1), jnp.sort(e)),
                 (f32(6, 3), np.array([3, 1, 3, 0, 1, 2], np.int32), np.zeros(0, np.float32))),
        "top_k_argmax": (lambda x: (lax.top_k(x, 3), jnp.argmax(x, axis=1), jnp.argmin(x, axis=0)),
                         (f32(4, 7),)),
        "windows": (lambda x: (jnp.cumsum(x, axis=1), jnp.cumprod(x[:, :3], axis=0),
                               lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 2), "SAME"),
                               lax.reduce_window(x, 0.0, lax.add, (3, 1), (1, 1), ((1, 1), (0, 0)),
                                                 base_dilation=(2, 1))),
                    (f32(4, 6),)),
        "dynamic_slices": (lambda x, i, j: (lax.dynamic_slice(x, (i, j), (2, 3)),
                                            lax.dynamic_update_slice(x, jnp.zeros((2, 2), np.float32), (j, i)),
                                            lax.dynamic_slice(x, (i + 9, j - 9), (1, 2))),
                           (f32(5, 5), np.int32(1), np.int32(3))),
        "pad": (lambda x, e: (jnp.pad(x, ((1, 2), (0, 1))), lax.pad(x, np.float32(-1), ((1, -1, 1), (0, 0, 2))),
                              jnp.pad(e, ((1, 1), (0, 0)))),
                (f32(3, 3), np.zeros((0, 2), np.float32))),
        "gather_scatter": (lambda x, i, u: (x[i], x[:, i], jnp.take_along_axis(x[:3], i[:, None] % 4, axis=1),
                                            x.at[i].add(u), x.at[i].set(u), x.at[i].max(u), x.at[i].mul(u),
                                            x.at[i + 10].add(u, mode="drop"), x[i[0]]),
                           (f32(5, 4), idx, f32(3, 4, seed=2))),
        "batched_indexing": (lambda x, i: (jax.vmap(lambda r, j: lax.dynamic_slice(r, (j,), (2,)))(x, i),
                                           jax.vmap(lambda r, j: r.at[j].add(1.0))(x, i),
                                           jax.vmap(lambda r, j: r[j])(x, i)),
                             (f32(3, 5), np.array([0, 2, 4], np.int32))),
        "conv": (lambda x, k, kg: (lax.conv_general_dilated(x, k, (1, 1), "SAME"),
                                   lax.conv_general_dilated(x, kg, (2, 1), ((1, 0), (2, 1)),
                                                            lhs_dilation=(1, 2), rhs_dilation=(2, 1),
                                                            feature_group_count=2)),
                 (f32(2, 4, 6, 5), f32(3, 4, 3, 3, seed=1), f32(4, 2, 2, 3, seed=2))),
        "conv_grad": (jax.grad(lambda x, k: lax.conv_general_dilated(x, k, (2, 2), "VALID").sum(), argnums=(0, 1)),
                      (f32(1, 2, 6, 6), f32(3, 2, 3, 3, seed=1))),
        "bits": (lambda x, i: (jnp.isfinite(x / jnp.array([0.0, 1.0, 2.0], np.float32)),
                               lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint8),
                               lax.reduce_precision(x * 1000, 5, 10), lax.population_count(i),
                               lax.clz(i), lax.shift_right_arithmetic(i, np.int32(2))),
                 (f32(3), ints)),
        "rounding": (lambda x: (jnp.cbrt(x), jnp.round(x), lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
                                jnp.tan(x / 4)), (f32(8) * 3,)),
        "optimization_barrier": (lambda x: lax.optimization_barrier((x, x + 1)), (f32(3),)),
        "int_widths": (lambda a, b, c, d, e, f: tuple((t * 3 + t // 2, t % 3, t >> 1, t.sum(), t.max(), -t, t < t[::-1])
                                                      for t in (a, b, c, d, e, f)),
                       tuple(np.abs(ints).astype(t) * (1 if t in (np.uint8, np.uint16, np.uint32, np.uint64) else -1)
                             for t in (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64))),
        "float16": (lambda x: (x * 3 + 1, jnp.exp(x), x.sum(), x @ x.T, x.astype(np.float32)),
                    (f32(3, 4).astype(np.float16),)),
        "float8": (lambda x: (x.astype(jnp.float8_e4m3fn).astype(np.float32),
                              x.astype(jnp.float8_e5m2).astype(np.float32), x.astype(jnp.float8_e4m3fn),
                              x.astype(jnp.float8_e4m3fn) < x[::-1].astype(jnp.float8_e4m3fn),
                              x.astype(jnp.float8_e5m2) == x[::-1].astype(jnp.float8_e5m2),
                              x.astype(jnp.float8_e5m2) >= jnp.float8_e5m2(1.0)),
                   (f32(8) * 20,)),
        "complex": (lambda a, b: (a * b + a, a / b, jnp.exp(a), jnp.abs(a), jnp.real(a), jnp.imag(a),
                                  lax.complex(jnp.real(a), -jnp.imag(b)), a @ b.T, a.sum(axis=0), a == b),
                    (c64, c64[::-1].copy())),
        "mixed_dot": (lambda a, b, i: (lax.dot(a, b, preferred_element_type=jnp.float32),
                                       lax.dot(i, i.T, preferred_element_type=jnp.int32)),
                      (f32(3, 4).astype(jnp.bfloat16), f32(4, 5).astype(jnp.bfloat16), ints.astype(np.int8))),
        "pred_f8_complex_products": (
            lambda a, b, x, w: (lax.dot(a, b), lax.dot(a, b, preferred_element_type=np.float32),
                                lax.dot(x[0, 0].astype(jnp.float8_e4m3fn), x[0, 1].T.astype(jnp.float8_e5m2),
                                        preferred_element_type=np.float32),
                                lax.iota(jnp.float8_e4m3fn, 5).astype(np.float32),
                                lax.conv_general_dilated(x, w, (1, 1), "SAME")),
            (f32(3, 4) > 0, f32(4, 2) > 0.5,
             (f32(1, 2, 5, 5) + 1j * f32(1, 2, 5, 5, seed=1)).astype(np.complex64),
             (f32(3, 2, 3, 3, seed=2) + 1j * f32(3, 2, 3, 3, seed=3)).astype(np.complex64))),
        "int4": (lambda a, b, u, v, f, s, e: (
                     tuple(op(a, b) for op in (lax.add, lax.sub, lax.mul, lax.div, lax.rem, lax.max,
                                               lax.shift_left, lax.shift_right_logical,
                                               lax.shift_right_arithmetic, lax.bitwise_xor, lax.lt)),
                     tuple(op(u, v) for op in (lax.add, lax.mul, lax.div, lax.rem, lax.shift_right_arithmetic,
                                               lax.shift_right_logical, lax.ge)),
                     lax.neg(a), lax.bitwise_not(u), lax.sign(a), lax.population_count(u), lax.clz(u), lax.clz(a),
                     a.astype(np.int8), u.astype(np.float32), f.astype(jnp.int4), f.astype(jnp.uint4),
                     lax.reduce_max(a, (1,)), lax.reduce(u, np.array(0, jnp.uint4), lax.add, (0,)),
                     jnp.where(a > b, a, b), a.T, lax.iota(jnp.int4, 5), lax.neg(s), e + e,
                     # bitcasts: a byte is two nibbles, the low one first
                     lax.bitcast_convert_type(a, jnp.uint4), lax.bitcast_convert_type(u.reshape(2, 2, 2), np.uint8),
                     lax.bitcast_convert_type(a.astype(np.int8), jnp.int4)),
                 (np.array([[7, -3, 0, -8], [-8, 5, 1, -1]], jnp.int4),
                  np.array([[2, -1, 3, -1], [3, 0, 7, 2]], jnp.int4),
                  np.array([[15, 3, 0, 9], [8, 5, 1, 14]], jnp.uint4),
                  np.array([[2, 4, 3, 1], [3, 0, 7, 2]], jnp.uint4),
                  np.array([-20.0, -8.5, -1.5, 0.4, 6.9, 7.5, 40.0, 15.2], np.float32),
                  np.array(-8, jnp.int4), np.zeros((0, 3), jnp.uint4))),
        # the custom calls Qr and ProductOfElementaryHouseholderReflectors (jax's QR on a
        # platform without LAPACK) against LAPACK's on the CPU: tall, wide, batched, a zero
        # diagonal element, 0-sized, f64
        "qr": (lambda a, b, c, e, d: (jnp.linalg.qr(a), jnp.linalg.qr(b), jnp.linalg.qr(c, mode="complete"),
                                      jnp.linalg.qr(e), jnp.linalg.qr(d, mode="r")),
               (f32(5, 3), f32(3, 4, seed=1), f32(2, 4, 4, seed=2) * np.array([0, 1, 1, 1], np.float32),
                np.zeros((0, 3), np.float32), f32(4, 4, seed=3).astype(np.float64))),
        # triangular_solve against LAPACK's trsm: every side, triangle, transpose and unit
        # diagonal, batched, an empty right-hand side, f64
        "triangular_solve": (lambda a, b, c, d: tuple(
            lax.linalg.triangular_solve(a, b if left else c, left_side=left, lower=lower,
                                        transpose_a=trans, unit_diagonal=unit)
            for left in (True, False) for lower in (True, False) for trans in (False, True)
            for unit in (False, True)) + (
            lax.linalg.triangular_solve(a[0], np.zeros((4, 0), np.float32), left_side=True),
            lax.linalg.triangular_solve(d, d[:, :2], left_side=True, lower=True)),
            (f32(2, 4, 4) + 4 * np.eye(4, dtype=np.float32), f32(2, 4, 3, seed=1), f32(2, 3, 4, seed=2),
             (f32(4, 4, seed=3) + 4 * np.eye(4, dtype=np.float32)).astype(np.float64))),
        # fft: a 2-d FFT of a length that is not a power of two, RFFT, IRFFT; in the fuzz
        # corpus, so its reader and kernel are mutated under ASan too (cholesky cannot join:
        # the corpus is captured through the CPU lowering, a LAPACK custom call there)
        "fft": (lambda x, r: (jnp.fft.fft2(x), jnp.fft.rfft(r), jnp.fft.irfft(jnp.fft.rfft(r))),
                (f32(4, 6) + 1j * f32(4, 6, seed=1), f32(8, seed=2))),
        # second-order reverse-mode gradient through lax.scan, as jax's testScanGrad checks it:
        # unroll=0 (no while loop: the steps unrolled), 1 (a while loop with dynamic_slice /
        # dynamic_update_slice of the stacked outputs) and 2 (two steps per trip, a remainder
        # step after the loop); f32 and f64
        "scan_grad2": (lambda c32, a32, c64, a64: tuple(
            _vjp_of_vjp(partial(lax.scan, _scan_grad_step(jnp), unroll=u), c, a)
            for u in (0, 1, 2) for c, a in ((c32, a32), (c64, a64))),
            (f32(4), f32(5, 3, seed=1), f32(4, seed=2).astype(np.float64),
             f32(5, 3, seed=3).astype(np.float64))),
        # elementwise results written over an operand that dies there (prog_interp.c,
        # ew_reusable): a value read again later (y) must not be overwritten by the op before
        # (z), one op reading one value twice (y * y), the other operand dying (b), a scalar
        # operand, integers and bf16 (widened, written back), a chain inside a loop body
        "inplace_chains": (lambda a, b, i, h: (
            (lambda y: (lambda z: (z + y, y * y))(jnp.exp(y) * 2.0))(a + 1.0),
            (a * 3.0) - (b + 1.0) * (b - 2.0),
            (lambda j: (j * 3 - j) ^ (j + 7))(i + 1),
            (h + h) * jnp.bfloat16(0.5) - h,
            lax.fori_loop(0, 3, lambda k, x: jnp.tanh(x * 0.5 + 1.0) - x, a)),
            (f32(5, 7), f32(5, 7, seed=1), np.arange(35, dtype=np.int32).reshape(5, 7),
             f32(4, 6, seed=2).astype(jnp.bfloat16))),
        # lax.dce_sink (the custom call checkify uses): the value it keeps is computed, and
        # nothing comes of it
        "dce_sink": (lambda x: (lax.dce_sink(jnp.sin(x) * 2, prevent_mlir_dce=True), x + 1)[1:],
                     (f32(3, 4),)),
        # XLA:CPU's bits exactly: DEFAULT (Philox there), PHILOX and THREE_FRY, every unsigned
        # width, 0-d, odd, even-dimensioned and empty shapes (ThreeFry halves one dimension)
        "rng_bit_generator": (lambda k: tuple(
            lax.rng_bit_generator(k, shape, dtype=dt, algorithm=alg)
            for alg in (lax.RandomAlgorithm.RNG_DEFAULT, lax.RandomAlgorithm.RNG_PHILOX,
                        lax.RandomAlgorithm.RNG_THREE_FRY)
            for dt, shape in ((np.uint32, ()), (np.uint8, (5,)), (np.uint16, (3, 4)),
                              (np.uint32, (3, 5)), (np.uint64, (7,)), (np.uint32, (0, 3)),
                              (np.uint64, (2, 1, 3)))),
            (np.array([0xffffffff, 0xfffffffe, 0x12345678, 0xdeadbeef], np.uint32),)),
        "scalars_and_empties": (lambda s, e: (lax.fori_loop(0, 3, lambda i, c: c + s, s),
                                              lax.cond(s > 0, lambda: e + 1, lambda: e), e.at[e.astype(np.int32)].add(1.0),
                                              jnp.cumsum(e)),
                                (np.float32(1.5), np.zeros(0, np.float32))),
    }
