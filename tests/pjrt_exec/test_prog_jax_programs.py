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
         "pred_f8_complex_products", "scalars_and_empties", "int4",
         "rng_bit_generator", "qr", "triangular_solve", "dce_sink", "fft", "scan_grad2",
         "inplace_chains"]


def run_jax(script: Path, library: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    env = dict(os.environ, DUMPREF_PJRT_LIBRARY=str(library), JAX_PLATFORMS="")
    return subprocess.run([sys.executable, str(script), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=HERE.parents[1])


def run_script(library: Path, folder: Path, name: str, source: str) -> str:
    """Write ``source`` as ``folder/name``, run it with the device registered, and return what
    it printed; a script that fails shows its stderr."""
    script = folder / name
    script.write_text(source)
    done = run_jax(script, library, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


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
    out = run_script(plugin_library, tmp_path, "unsupported.py",
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax import lax\n"
        "d = jax.devices('dumpref')[0]\n"
        "x = jax.device_put(np.arange(5.0, dtype=np.float32)[::-1].copy(), d)\n"
        "# max pooling's gradient: select_and_scatter, which the device does not run\n"
        "pool_grad = jax.grad(lambda t: lax.reduce_window(t, -np.inf, lax.max, (2,), (2,), 'VALID').sum())\n"
        "try:\n"
        "    jax.jit(pool_grad)(x)\n"
        "except Exception as e:\n"
        "    print('RAISED', type(e).__name__, e)\n"
        "print('ALIVE', jax.jit(lambda t: t * 2)(x))\n")
    assert "RAISED" in out and "UNIMPLEMENTED" in out
    assert "vhlo.select_and_scatter_v1" in out
    assert "ALIVE [8. 6. 4. 2. 0.]" in out


def test_plugin_reports_the_stablehlo_version_it_reads(plugin_library, tmp_path):
    out = run_script(plugin_library, tmp_path, "version.py",
        "import jax\n"
        "from jax._src import xla_bridge\n"
        "jax.devices('dumpref')\n"
        "print('VERSION', xla_bridge.get_backend('dumpref').stablehlo_current_version)\n")
    assert "VERSION [1, 10, 0]" in out, out


DONATION_SCRIPT = r"""
import warnings
warnings.simplefilter("error")  # "Some donated buffers were not usable" would be an error
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
dev, cpu = jax.devices("dumpref")[0], jax.devices("cpu")[0]

def step(w, g, lr):
    return w - lr * g, jnp.sum(g * g)

cases = {"vector": (np.linspace(-1, 1, 6), np.arange(6.0), np.float64(0.5)),
         "scalar": (np.float32(3), np.float32(2), np.float32(0.25)),
         "empty": (np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32), np.float32(1)),
         "int32": (np.arange(12, dtype=np.int32).reshape(3, 4), np.ones((3, 4), np.int32),
                   np.int32(2))}
for name, args in cases.items():
    expected = jax.jit(step)(*jax.device_put(args, cpu))
    on_dev = jax.device_put(args, dev)
    got = jax.jit(step, donate_argnums=0)(*on_dev)
    same = all(np.array_equal(np.asarray(e), np.asarray(g)) for e, g in zip(expected, got))
    print("CASE", name, "deleted", [a.is_deleted() for a in on_dev], "same", same,
          "on", sorted({d.platform for g in got for d in g.devices()}))
    try:
        np.asarray(on_dev[0])
    except RuntimeError as e:
        print("READ", name, "RuntimeError", str(e).split(".")[0])

x = jax.device_put(np.zeros(10, np.float32), dev)
try:
    jax.jit(lambda a, b: a + b, donate_argnums=0)(x, x).block_until_ready()
except Exception as e:
    print("TWICE", type(e).__name__, "passed only once" in str(e))
print("ALIVE", x.is_deleted(), float(np.asarray(x).sum()))
"""


def test_donated_buffers_are_invalidated(plugin_library, tmp_path):
    """jax.jit(f, donate_argnums=0) on the device: no "not usable" warning (warnings are
    errors in the script), the donated array reports deleted and refuses reads, the other
    arguments live on, the result equals the CPU backend's; passing a donated buffer twice is
    an error that leaves it alive (as on XLA:CPU)."""
    out = run_script(plugin_library, tmp_path, "donate.py", DONATION_SCRIPT)
    for name in ("vector", "scalar", "empty", "int32"):
        assert f"CASE {name} deleted [True, False, False] same True on ['dumpref']" in out, out
        assert f"READ {name} RuntimeError Array has been deleted" in out, out
    assert "TWICE JaxRuntimeError True" in out, out
    assert "ALIVE False 0.0" in out


def test_s4_population_count_is_refused_by_name(plugin_library, tmp_path):
    """popcnt on s4 has two answers (XLA:CPU counts the sign-extended byte, StableHLO the 4
    bits): the device refuses it, naming the op and the type, and the process lives on."""
    out = run_script(plugin_library, tmp_path, "popcnt_s4.py",
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax import lax\n"
        "x = jax.device_put(np.array([-1, 3], jnp.int4), jax.devices('dumpref')[0])\n"
        "try:\n"
        "    jax.jit(lax.population_count)(x)\n"
        "except Exception as e:\n"
        "    print('RAISED', e)\n"
        "print('ALIVE', jax.jit(lambda t: -t)(x))\n")
    assert "RAISED UNIMPLEMENTED" in out and "s4 for vhlo.popcnt_v1" in out, out
    assert "ALIVE [1 -3]" in out


def test_copies_on_the_device_and_to_the_cpu(plugin_library, tmp_path):
    """device_put without aliasing copies on the device (PJRT_Buffer_CopyToMemory); moving an
    array to the CPU backend reads it through ToHostBuffer with the layout jaxlib sends."""
    out = run_script(plugin_library, tmp_path, "copies.py",
        "import jax, numpy as np\n"
        "dev, cpu = jax.devices('dumpref')[0], jax.devices('cpu')[0]\n"
        "x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), dev)\n"
        "y = jax.device_put(x, may_alias=False, donate=False)\n"
        "x.delete()\n"
        "print('COPY', y is not x, sorted(d.platform for d in y.devices()), np.asarray(y).sum())\n"
        "z = jax.device_put(y, cpu)\n"
        "print('TO_CPU', sorted(d.platform for d in z.devices()), np.asarray(z).tolist())\n")
    assert "COPY True ['dumpref'] 15.0" in out, out
    assert "TO_CPU ['cpu'] [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]" in out, out


def test_tokens_are_made_passed_and_returned(plugin_library, tmp_path):
    """Tokens (create_token, after_all) run as values of no bytes: made on the device, passed
    in (jaxlib passes a token argument as pred[0]) and out, beside the numbers, which match
    the CPU backend's."""
    out = run_script(plugin_library, tmp_path, "tokens.py",
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax import lax\n"
        "from jax._src import core\n"
        "dev, cpu = jax.devices('dumpref')[0], jax.devices('cpu')[0]\n"
        "jax.config.update('jax_default_device', dev)\n"
        "x = jax.device_put(np.arange(4, dtype=np.float32), dev)\n"
        "tok = jax.jit(lax.create_token)(1.0)\n"
        "print('ON', sorted(d.platform for d in tok._buf.devices()))\n"
        "print('MADE', isinstance(tok, core.Token))\n"
        "f = jax.jit(lambda t, y: (lax.after_all(t, lax.create_token()), y * 2, t))\n"
        "t2, y, t3 = f(tok, x)\n"
        "print('PASSED', isinstance(t2, core.Token), isinstance(t3, core.Token), t3 is not tok,\n"
        "      sorted(d.platform for d in y.devices()), np.asarray(y).tolist())\n"
        "_, z = jax.jit(lambda y: (y + 2, tok))(x)\n"
        "print('CAPTURED', isinstance(z, core.Token))\n")
    assert "MADE True" in out and "ON ['dumpref']" in out, out
    assert "PASSED True True True ['dumpref'] [0.0, 2.0, 4.0, 6.0]" in out, out
    assert "CAPTURED True" in out, out
