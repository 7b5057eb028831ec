"""Runs prog_cases on jax's CPU backend and on the dumpref device, in THIS process, and writes
how the outputs compare to a JSON file after every case (so a crash still leaves the cases
before it).  Meant to be run in a subprocess: jaxlib aborts the process on some plugin errors.

    python prog_jax_runner.py OUT.json [case ...]

The plugin is whatever the `jax_plugins` entry point registers (tests point it at a fresh
build with DUMPREF_PJRT_LIBRARY).
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).parent))
import prog_cases  # noqa: E402


def compare(expected, got):
    """One row per output leaf: dtype/shape agreement and the error (relative to the largest
    expected magnitude for floats, exact for integers and booleans)."""
    rows = []
    for e, g in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
        e, g = np.asarray(e), np.asarray(g)
        row = {"dtype": str(e.dtype), "shape": list(e.shape), "got_dtype": str(g.dtype),
               "got_shape": list(g.shape)}
        if e.shape == g.shape and e.dtype == g.dtype:
            if np.issubdtype(e.dtype, np.inexact) or e.dtype.name == "bfloat16":
                wide = np.complex128 if np.issubdtype(e.dtype, np.complexfloating) else np.float64
                e64, g64 = e.astype(wide), g.astype(wide)
                scale = float(np.max(np.abs(e64))) if e.size else 0.0
                err = float(np.max(np.abs(e64 - g64))) if e.size else 0.0
                row["rel_err"] = err / scale if scale > 0 else err
                row["same_nan"] = bool(np.array_equal(np.isnan(e64), np.isnan(g64)))
            else:
                row["exact"] = bool(np.array_equal(e, g))
        rows.append(row)
    return rows


def main(out, names):
    all_cases = prog_cases.cases()
    device, cpu = jax.devices("dumpref")[0], jax.devices("cpu")[0]
    results = {}
    for name in names or list(all_cases):
        fn, args = all_cases[name]
        try:
            # the reference on XLA's CPU backend by name: were the plugin the default backend
            # (DUMPREF_PJRT_PRIORITY above the CPU's), a bare call would compare it with itself
            expected = jax.jit(fn)(*jax.device_put(args, cpu))
            on_device = jax.device_put(args, device)
            got = jax.jit(fn)(*on_device)
            devices = {str(d.platform) for leaf in jax.tree_util.tree_leaves(got) for d in leaf.devices()}
            reference = {str(d.platform) for leaf in jax.tree_util.tree_leaves(expected)
                         for d in leaf.devices()}
            results[name] = {"outputs": compare(expected, got), "devices": sorted(devices),
                             "reference_devices": sorted(reference),
                             "n_expected": len(jax.tree_util.tree_leaves(expected)),
                             "n_got": len(jax.tree_util.tree_leaves(got))}
        except Exception as exc:  # an error is a result too: the test shows it
            results[name] = {"error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc(limit=3)}
        Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
