"""Level 3: jitted JAX programs run on the dumpref device and match jax's CPU backend.

All cases run in one subprocess (jaxlib aborts the process on some plugin errors); each case
is then its own test here.  Floats: error relative to the largest expected magnitude,
at most 1e-5 for f32/f64 (bf16: 1e-2, its own precision); integers and booleans: exact.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dumpref.pjrt.build import build_plugin

HERE = Path(__file__).parent
CASES = ["add_one", "mlp", "mlp_grad", "sgd_step", "softmax", "layernorm", "causal_attention",
         "transformer_block", "f64_math", "s32_arith", "s64_arith", "pred_logic", "bf16",
         "scalar", "empty", "several_outputs", "math_ops", "compare_select", "convert",
         "shape_ops", "reductions", "dot_general", "int_dot", "private_calls",
         # control flow, indexing, sort, windows, convolution, bit ops, more element types
         "while_loop", "cond_switch", "scan", "sort", "top_k_argmax", "windows", "dynamic_slices",
         "pad", "gather_scatter", "batched_indexing", "conv", "conv_grad", "bits", "rounding",
         "optimization_barrier", "int_widths", "float16", "float8", "complex", "mixed_dot",
         "pred_f8_complex_products", "scalars_and_empties"]


def run_jax(script: Path, library: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    env = dict(os.environ, DUMPREF_PJRT_LIBRARY=str(library), JAX_PLATFORMS="")
    return subprocess.run([sys.executable, str(script), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=HERE.parents[1])


@pytest.fixture(scope="module")
def plugin_library(tmp_path_factory):
    return build_plugin(tmp_path_factory.mktemp("prog-plugin")).path


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):
    out = tmp_path_factory.mktemp("prog-results") / "results.json"
    done = run_jax(HERE / "prog_jax_runner.py", plugin_library, out, *CASES)
    if not out.exists():
        pytest.fail(f"the jax runner wrote nothing (exit {done.returncode}):\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    data["_stderr"] = done.stderr[-3000:]
    return data


@pytest.mark.parametrize("case", CASES)
def test_program_matches_cpu(results, case):
    if case not in results:
        pytest.fail(f"{case}: the runner stopped before it (crash?):\n{results['_stderr']}")
    r = results[case]
    assert "error" not in r, r.get("error")
    assert r["devices"] == ["dumpref"], "the outputs must live on the dumpref device"
    assert r["reference_devices"] == ["cpu"], "the reference must come from XLA's CPU backend"
    assert r["n_got"] == r["n_expected"] and r["n_got"] >= 1
    for k, out in enumerate(r["outputs"]):
        assert (out["got_dtype"], out["got_shape"]) == (out["dtype"], out["shape"]), f"output {k}"
        if "exact" in out:
            assert out["exact"], f"output {k} ({out['dtype']}) differs from the CPU backend"
        else:
            tolerance = {"bfloat16": 1e-2, "float16": 1e-3}.get(out["dtype"], 1e-5)
            assert out["same_nan"], f"output {k}: NaNs differ"
            assert out["rel_err"] <= tolerance, f"output {k}: relative error {out['rel_err']:.3g}"


def test_jax_reports_unsupported_op_by_name(plugin_library, tmp_path):
    """An op outside the supported set fails compile with UNIMPLEMENTED naming it, as a Python
    error jax raises -- the process survives."""
    script = tmp_path / "unsupported.py"
    script.write_text(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "d = jax.devices('dumpref')[0]\n"
        "x = jax.device_put(np.arange(5.0, dtype=np.float32)[::-1].copy(), d)\n"
        "key = jax.device_put(np.arange(4, dtype=np.uint32), d)\n"
        "try:\n"
        "    jax.jit(lambda k: jax.lax.rng_bit_generator(k, (3,)))(key)\n"
        "except Exception as e:\n"
        "    print('RAISED', type(e).__name__, e)\n"
        "print('ALIVE', jax.jit(lambda t: t * 2)(x))\n")
    done = run_jax(script, plugin_library, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RAISED" in done.stdout and "UNIMPLEMENTED" in done.stdout
    assert "vhlo.rng_bit_generator_v1" in done.stdout
    assert "ALIVE [8. 6. 4. 2. 0.]" in done.stdout


def test_plugin_reports_the_stablehlo_version_it_reads(plugin_library, tmp_path):
    script = tmp_path / "version.py"
    script.write_text(
        "import jax\n"
        "from jax._src import xla_bridge\n"
        "jax.devices('dumpref')\n"
        "print('VERSION', xla_bridge.get_backend('dumpref').stablehlo_current_version)\n")
    done = run_jax(script, plugin_library, timeout=300)
    assert "VERSION [1, 10, 0]" in done.stdout, done.stderr[-2000:]
