"""Boolean constants of 1 to 20 elements, on the dumpref device against jax's CPU backend.

MLIR stores a dense i1 tensor packed, one bit per element, and a splat as the single byte 0x00
or 0xFF; a tensor of 2 to 8 booleans is then one byte whether it is a splat or not, and only
those two bytes are splats (DenseElementsAttr::isValidRawBuffer).  The device once read every
one-byte boolean tensor as a splat of its byte, so a mask of 2 to 8 elements with a true and a
false became all true: ``jnp.sum(x, where=mask)`` with a numpy mask closed over (a constant of
the program) summed every element, and jnp.mean, std and var over such masks gave wrong numbers
(jax-v0.10.2's lax_numpy_reducers_test testReducerWhere*, issue 20), and jax's mask of the
negative indices of a small index array was all true, so `x.at[idx].multiply(u)` updated other
elements (lax_numpy_indexing_test IndexedUpdateTest)."""
from __future__ import annotations

import json

import pytest

from test_prog_jax_programs import plugin_library, run_script  # noqa: F401 (a fixture)

SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 20]
PATTERNS = ["alternate", "first", "last", "all", "none", "thirds"]

SCRIPT = r'''
import json
import jax
import jax.numpy as jnp, numpy as np
cpu, dev = jax.devices("cpu")[0], jax.devices("dumpref")[0]
masks = {"alternate": lambda n: np.arange(n) %% 2 == 0, "first": lambda n: np.arange(n) == 0,
         "last": lambda n: np.arange(n) == n - 1, "all": lambda n: np.ones(n, bool),
         "none": lambda n: np.zeros(n, bool), "thirds": lambda n: np.arange(n) %% 3 != 1}
out = {}
for n in %(sizes)r:
    x = np.arange(1, 2 * n + 1, dtype=np.float32).reshape(2, n)
    for name, make in masks.items():
        m = make(n)
        programs = {  # the mask is a constant of each program, not an argument
            "where": lambda x: jnp.where(m, x, -1.0),
            "sum": lambda x: jnp.sum(x, axis=0, where=m),
            "mean": lambda x: jnp.mean(x, axis=1, where=m),
            "mask2d": lambda x: jnp.where(m.reshape(1, n), x, 0.0).sum(axis=0),
            "bool_out": lambda x: jnp.logical_and(x > 0, m),
            # negative indices: jax folds `idx < 0` into a boolean constant shaped like idx
            "neg_index": lambda x: x.at[:, np.where(m, -1 - np.arange(n), np.arange(n))].multiply(3.0),
        }
        for p, f in programs.items():
            e = np.asarray(jax.jit(f)(jax.device_put(x, cpu)))
            g = np.asarray(jax.jit(f)(jax.device_put(x, dev)))
            out[f"{n}/{name}/{p}"] = {"same": bool(np.array_equal(e, g, equal_nan=True)),
                                      "close": bool(np.array_equal(np.isnan(e), np.isnan(g)) and
                                                    np.allclose(e, g, rtol=1e-6, atol=0,
                                                                equal_nan=True)),
                                      "expected": e.tolist(), "got": g.tolist()}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):  # noqa: F811
    text = run_script(plugin_library, tmp_path_factory.mktemp("bool-constants"),
                      "bool_constants.py", SCRIPT % {"sizes": SIZES})
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("n", SIZES)
def test_matches_cpu(results, n, pattern):
    """Every program over a mask of n booleans gives the CPU's numbers: exactly, but for the
    mean within rounding (XLA:CPU multiplies the sum by the count's reciprocal, 77 * (1/7) is
    11.000001 in f32; the device divides)."""
    for p in ("where", "sum", "mean", "mask2d", "bool_out", "neg_index"):
        r = results[f"{n}/{pattern}/{p}"]
        ok = r["close"] if p == "mean" else r["same"]
        assert ok, f"{p}: expected {r['expected']}\n     got {r['got']}"
