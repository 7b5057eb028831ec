"""fft, cholesky and constants of no elements, jitted on the dumpref device against jax's CPU
backend (issue 20: each was refused, 'unsupported op vhlo.fft_v1', 'vhlo.cholesky_v1', and
'tensor data of 2 bytes for 0 elements' for jnp.spacing on an empty f16 array).

- fft: FFT, IFFT, RFFT, IRFFT over the last 1, 2 and 3 dimensions (jnp.fft's fft, fftn,
  rfftn, ...), lengths that are powers of two and lengths that are not, c64 and c128 (f32 and
  f64 for the real side);
- cholesky: lower (jnp.linalg.cholesky) and upper (stablehlo.cholesky with lower = false,
  which jax never emits: a primitive lowered to it here), batched, f32, f64, c64, c128, and a
  matrix that is not positive definite (NaNs on both);
- a zero-element splat constant.
Floats: the error relative to the largest expected magnitude, 1e-5 for single precision, 1e-12
for double; NaNs where the CPU has them.
"""
from __future__ import annotations

import json

import pytest

from test_prog_jax_programs import plugin_library, run_script  # noqa: F401 (a fixture)

SCRIPT = r'''
import json
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo

cpu, dev = jax.devices("cpu")[0], jax.devices("dumpref")[0]
rng = np.random.RandomState(11)

upper_cholesky = Primitive("upper_cholesky")
upper_cholesky.def_abstract_eval(lambda x: x)
mlir.register_lowering(upper_cholesky,
                       lambda ctx, x: [hlo.cholesky(x, lower=ir.BoolAttr.get(False))])

def complex_of(dt, shape):
    return (rng.randn(*shape) + 1j * rng.randn(*shape)).astype(dt)

def spd(dt, batch, m):
    a = complex_of(dt, batch + (m, m)) if np.dtype(dt).kind == "c" else rng.randn(*batch, m, m).astype(dt)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + m * np.eye(m)).astype(dt)

cases = {}
for ct, rt in (("complex64", "float32"), ("complex128", "float64")):
    for shape in ((8,), (6,), (3, 16), (2, 5, 6), (2, 4, 3, 8)):
        x = complex_of(ct, shape)
        r = rng.randn(*shape).astype(rt)
        for nd in range(1, min(3, len(shape)) + 1):
            axes = tuple(range(-nd, 0))
            s = "x".join(map(str, shape))
            cases[f"{ct}/fft/{s}/{nd}d"] = (lambda x, axes=axes: jnp.fft.fftn(x, axes=axes), x)
            cases[f"{ct}/ifft/{s}/{nd}d"] = (lambda x, axes=axes: jnp.fft.ifftn(x, axes=axes), x)
            cases[f"{rt}/rfft/{s}/{nd}d"] = (lambda x, axes=axes: jnp.fft.rfftn(x, axes=axes), r)
            half = np.fft.rfftn(r, axes=axes).astype(ct)
            cases[f"{ct}/irfft/{s}/{nd}d"] = (
                lambda x, axes=axes, shape=shape: jnp.fft.irfftn(x, s=[shape[a] for a in axes], axes=axes), half)
for dt in ("float32", "float64", "complex64", "complex128"):
    for batch, m in (((), 1), ((), 5), ((3,), 4), ((2, 2), 7)):
        a = spd(dt, batch, m)
        s = "x".join(map(str, batch + (m, m)))
        cases[f"{dt}/cholesky_lower/{s}"] = (jnp.linalg.cholesky, a)
        cases[f"{dt}/cholesky_upper/{s}"] = (lambda a: jnp.triu(upper_cholesky.bind(a)), a)
    bad = spd(dt, (), 4)
    bad[2, 2] = -50
    cases[f"{dt}/cholesky_lower/not_positive_definite"] = (jnp.linalg.cholesky, bad)
cases["complex64/fft/0/1d"] = (jnp.fft.fft, np.zeros((0,), np.complex64))  # jax's testFftEmpty
cases["float16/spacing/0x3"] = (jnp.spacing, np.zeros((0, 3), np.float16))
cases["bool/and_empty_constant/0"] = (lambda x: x & jnp.ones((0,), bool), np.zeros((0,), bool))

out = {}
for name, (f, x) in cases.items():
    e = np.asarray(jax.jit(f)(jax.device_put(x, cpu)))
    try:
        g = np.asarray(jax.jit(f)(jax.device_put(x, dev)))
    except Exception as exc:  # a refusal is a failure of its case, not of the run
        out[name] = {"error": str(exc)[:300]}
        continue
    double = e.dtype in (np.float64, np.complex128)
    finite = ~np.isnan(e)
    same_shape = [str(g.dtype), list(g.shape)] == [str(e.dtype), list(e.shape)]
    err = 0.0
    if same_shape and finite.any():
        scale = float(np.max(np.abs(e[finite]))) or 1.0
        err = float(np.max(np.abs(g[finite].astype(np.complex128) - e[finite]))) / scale
    out[name] = {"dtype_shape": same_shape,
                 "nan_same": same_shape and bool(np.array_equal(np.isnan(e), np.isnan(g))),
                 "rel_err": err if np.isfinite(err) else 1e300, "tol": 1e-12 if double else 1e-5}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):  # noqa: F811
    text = run_script(plugin_library, tmp_path_factory.mktemp("fft-cholesky"), "fft_chol.py",
                      SCRIPT)
    return json.loads(text.strip().splitlines()[-1])


def check(results, prefix):
    chosen = {k: v for k, v in results.items() if k.split("/")[1].startswith(prefix)}
    assert chosen, prefix
    bad = {k: v for k, v in chosen.items()
           if "error" in v or not (v["dtype_shape"] and v["nan_same"] and v["rel_err"] <= v["tol"])}
    assert not bad, bad
    return chosen


def test_fft_matches_cpu(results):
    # 2 types x (1 + 1 + 2 + 3 + 3 axis counts over 5 shapes) x 4 transforms, and an empty one
    assert len(check(results, "fft")) + len(check(results, "ifft")) \
        + len(check(results, "rfft")) + len(check(results, "irfft")) == 2 * 10 * 4 + 1


def test_cholesky_matches_cpu(results):
    chosen = check(results, "cholesky")
    assert len(chosen) == 4 * (4 * 2 + 1)
    # the matrix that is not positive definite gives NaNs on both backends
    assert all(results[f"{dt}/cholesky_lower/not_positive_definite"]["nan_same"]
               for dt in ("float32", "float64", "complex64", "complex128"))


def test_zero_element_constants(results):
    assert len(check(results, "spacing")) == 1
    assert len(check(results, "and_empty")) == 1
