"""Captures the artifacts jax sends a plugin: registers the capture shim (prog_capture_shim.c,
a forwarder to XLA's own CPU plugin that reports our stablehlo_current_version and writes every
compiled program to $PROG_CAPTURE_DIR), runs each case on it, and saves per case
`<name>.mlir` (the program of the jitted call) and `<name>.npz` (inputs and XLA's outputs,
flattened leaves in order).

    python prog_capture_runner.py SHIM.so OUT_DIR case ...
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).parent))
import prog_cases  # noqa: E402
from jax._src import xla_bridge  # noqa: E402


def main(shim, out_dir, names):
    out_dir = Path(out_dir)
    os.environ["PROG_CAPTURE_DIR"] = str(out_dir)
    xla_bridge.register_plugin("capture", library_path=shim)
    device = jax.devices("capture")[0]
    all_cases = prog_cases.cases()
    for name in names:
        fn, args = all_cases[name]
        on_device = jax.device_put(args, device)
        before = set(out_dir.glob("program*.mlir"))
        got = jax.jit(fn)(*on_device)
        new = sorted(set(out_dir.glob("program*.mlir")) - before)
        new[-1].rename(out_dir / f"{name}.mlir")
        leaves = jax.tree_util.tree_leaves
        arrays = {f"in{k}": np.asarray(a) for k, a in enumerate(leaves(args))}
        arrays.update({f"out{k}": np.asarray(a) for k, a in enumerate(leaves(got))})
        # npz cannot hold bfloat16: store the bits, and every array's dtype name beside it
        dtypes = {k: a.dtype.name for k, a in arrays.items()}
        arrays = {k: (a.view(np.uint16) if a.dtype.name == "bfloat16" else a)
                  for k, a in arrays.items()}
        np.savez(out_dir / f"{name}.npz", dtypes=np.array(repr(dtypes)), **arrays)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
