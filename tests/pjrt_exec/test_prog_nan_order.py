"""Sorting floats with NaNs, on the dumpref device against jax's CPU backend, for every float
type: jax's sort comparators compare with compare_type TOTALORDER, which orders NaN above
every number; the device once ignored compare_type and compared as plain floats, where NaN is
unordered, so a stable merge sort left a NaN among the numbers (f16 and bf16 sorts, and the
NaN-aware quantiles, nanpercentile, nanmedian built on them, gave wrong numbers; issue 20)."""
from __future__ import annotations

import json

import pytest

from test_prog_jax_programs import plugin_library, run_script  # noqa: F401 (a fixture)

DTYPES = ["float16", "bfloat16", "float32", "float64"]

SCRIPT = r'''
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, ml_dtypes, numpy as np
cpu, dev = jax.devices("cpu")[0], jax.devices("dumpref")[0]
rng = np.random.RandomState(3)
out = {}
for name in %(dtypes)r:
    dt = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
    x = rng.randn(6, 9).astype(dt)
    x[1, [2, 5]] = np.nan; x[3, :] = np.nan; x[4, 0] = np.inf; x[4, 1] = -np.inf; x[5, 3] = -0.0
    programs = {
        "sort1": lambda x: jnp.sort(x, axis=1), "sort0": lambda x: jnp.sort(x, axis=0),
        "argsort": lambda x: jnp.argsort(x, axis=1, stable=True),
        "nanmedian": lambda x: jnp.nanmedian(x, axis=1),
        "nanpercentile": lambda x: jnp.nanpercentile(x, 30.0, axis=0),
        "nanquantile": lambda x: jnp.nanquantile(x, jnp.array([0.1, 0.5, 0.9]).astype(x.dtype), axis=1),
        "top_k": lambda x: jax.lax.top_k(jnp.nan_to_num(x, nan=0.5), 3)[0],
    }
    for p, f in programs.items():
        e = np.asarray(jax.jit(f)(jax.device_put(x, cpu))).astype(np.float64)
        g = np.asarray(jax.jit(f)(jax.device_put(x, dev))).astype(np.float64)
        # NaNs where the CPU has them, and values within the type's rounding (interpolated
        # quantiles may differ in the last bit: a fused multiply-add or not)
        tol = {"float16": 1e-3, "bfloat16": 1e-2}.get(name, 1e-12 if name == "float64" else 1e-6)
        out[f"{name}/{p}"] = {"same": bool(np.array_equal(e, g, equal_nan=True)),
                              "close": bool(np.array_equal(np.isnan(e), np.isnan(g)) and
                                            np.allclose(e, g, rtol=tol, atol=0, equal_nan=True)),
                              "expected": e.tolist(), "got": g.tolist()}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):  # noqa: F811
    text = run_script(plugin_library, tmp_path_factory.mktemp("nan-order"), "nan_order.py",
                      SCRIPT % {"dtypes": DTYPES})
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.parametrize("program", ["sort1", "sort0", "argsort", "nanmedian", "nanpercentile",
                                     "nanquantile", "top_k"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_cpu(results, dtype, program):
    """Sorts, argsort and top_k exactly; the interpolated quantiles within rounding."""
    r = results[f"{dtype}/{program}"]
    ok = r["close"] if program.startswith("nan") and program != "nanmedian" else r["same"]
    assert ok, f"expected {r['expected']}\n     got {r['got']}"
