"""Real (f32, f64) QR of matrices whose squares leave the type's range, jitted on the dumpref
device: the Householder norm must be scaled, as LAPACK's dnrm2/dlapy2 scale it.

The device computes the `Qr` custom call in double.  Unscaled, an f64 column whose entries are
below ~1e-154 squares to 0 below the diagonal and is taken as already reduced (tau 0: R not
triangular, Q R still A but R wrong), and one above ~1e154 squares to inf (tau NaN).  Checked:
Q R rebuilds A (relative to A's largest entry), Q^T Q is the identity, R is upper triangular
and matches numpy.linalg.qr up to the signs of its rows (the sign convention is LAPACK's, but
numpy's is whatever its LAPACK gives), for f64 matrices scaled by 1e-170 and 1e160 (reduced and
complete, square, tall and wide), and the same matrices at ordinary scale in f32 and f64.
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

dev = jax.devices("dumpref")[0]
rng = np.random.RandomState(35)
out = {}
for dtype, scales in (("float64", (1e-170, 1e160, 1.0)), ("float32", (1.0,))):
    for shape in ((4, 4), (6, 3), (3, 5)):
        base = rng.randn(*shape)
        for scale in scales:
            a = (base * scale).astype(dtype)
            for mode in ("reduced", "complete"):
                name = f"{dtype}/{scale:g}/{'x'.join(map(str, shape))}/{mode}"
                try:
                    q, r = jax.jit(lambda x, mode=mode: jnp.linalg.qr(x, mode=mode))(
                        jax.device_put(a, dev))
                    places = sorted({d.platform for x in (q, r) for d in x.devices()})
                    q, r = np.asarray(q), np.asarray(r)
                except Exception as exc:  # a refusal fails its case, not the run
                    out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                    continue
                eq, er = np.linalg.qr(a.astype(np.float64), mode=mode)
                big = float(np.max(np.abs(a)))
                # R's rows (and Q's columns) are unique up to sign; rows past min(m, n) are 0
                signs = np.ones(r.shape[0])
                d = np.diag(r).size
                signs[:d] = np.where(np.sign(np.diag(r)) == np.sign(np.diag(er)), 1.0, -1.0)
                q64 = q.astype(np.float64)
                with np.errstate(all="ignore"):
                    errs = {
                        "rebuilt": float(np.max(np.abs(q64 @ r - a))) / big,
                        "orthonormal": float(np.max(np.abs(q64.T @ q64 - np.eye(q.shape[1])))),
                        "lower_zero": float(np.max(np.abs(np.tril(r, -1)), initial=0.0)) / big,
                        "r_vs_numpy": float(np.max(np.abs(signs[:, None] * r - er))) / big,
                    }
                out[name] = {"places": places, "dtypes": [str(q.dtype), str(r.dtype)],
                             "finite": bool(np.isfinite(q).all() and np.isfinite(r).all()),
                             "errors": {e: (v if np.isfinite(v) else 1e300)
                                        for e, v in errs.items()},
                             "tol": 1e-12 if dtype == "float64" else 1e-5}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):  # noqa: F811
    text = run_script(plugin_library, tmp_path_factory.mktemp("real-qr"), "real_qr.py", SCRIPT)
    return json.loads(text.strip().splitlines()[-1])


def check(results, prefix, count):
    chosen = {k: v for k, v in results.items() if k.startswith(prefix)}
    assert len(chosen) == count, sorted(results)
    dtype = prefix.split("/")[0]
    bad = {k: v for k, v in chosen.items()
           if "error" in v or v["places"] != ["dumpref"] or v["dtypes"] != [dtype, dtype]
           or not v["finite"] or max(v["errors"].values()) > v["tol"]}
    assert not bad, json.dumps(bad, indent=1)


@pytest.mark.parametrize("prefix", ["float64/1e-170/", "float64/1e+160/"])
def test_f64_qr_of_tiny_and_huge_matrices(results, prefix):
    """Entries whose squares underflow (1e-170) or overflow (1e160) in double."""
    check(results, prefix, 3 * 2)


@pytest.mark.parametrize("prefix", ["float64/1/", "float32/1/"])
def test_qr_of_ordinary_matrices(results, prefix):
    check(results, prefix, 3 * 2)
