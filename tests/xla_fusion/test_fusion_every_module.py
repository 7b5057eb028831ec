"""`python -m pytest_dumpref fusion DIR` reports every module of a folder: one where the pass
fused nothing (an optimizer's init function), one it logged nothing for (a lone op), one whose
decisions sit in a computation no instruction calls (attention, after the library rewriter),
and one that cannot be read, without hiding the others.

Each dump is written by plain jax in a fresh python with XLA_FLAGS, as a user would make it;
the programs are written here (an optax-style init, a head-batched attention), no model
library is needed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

FLAGS = "--xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization"

# What optax's init functions compile to: zeros shaped like the parameters, and a step count.
# Nothing in it is worth fusing, so the pass logs refusals and writes no snapshot.
_INIT_AND_FRIENDS = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    def init_fn(params):
        mu = jax.tree.map(jnp.zeros_like, params)
        nu = jax.tree.map(jnp.zeros_like, params)
        return {"count": jnp.zeros([], jnp.int32), "mu": mu, "nu": nu}
    def scale_add(x):
        return jnp.exp(x) * 2 + 1
    params = {"w": np.ones((64, 32), np.float32), "b": np.ones((32,), np.float32)}
    x = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32)
    jax.block_until_ready(jax.jit(init_fn)(params))
    jax.block_until_ready(jax.jit(scale_add)(x))
    jax.block_until_ready(jax.jit(jnp.exp)(x))
""")

# Multi-head attention with the heads as a batch dimension (as flax's and equinox's compute
# it): the library rewriter takes the matmuls, and the softmax's divide is left in a
# fused_computation that no instruction calls any more; the fusion pass still visits it.
_ATTENTION = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 8, 128, 32)).astype(np.float32) for _ in range(3))
    jax.block_until_ready(jax.jit(attention)(q, k, v))
""")


def _dump(folder, program: str):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_dump_to={folder} {FLAGS}")
    subprocess.run([sys.executable, "-c", program], env=env, check=True, timeout=300)
    return folder


def _fusion(*args):
    return subprocess.run([sys.executable, "-m", "pytest_dumpref", "fusion", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def _modules(out) -> dict:
    return {m["module"].split(".", 1)[1]: m for m in json.loads(out.stdout)["modules"]}


@pytest.fixture(scope="module")
def init_dump(tmp_path_factory):
    return _dump(tmp_path_factory.mktemp("init-fused-nothing"), _INIT_AND_FRIENDS)


def test_a_module_where_nothing_fused_is_reported_with_its_refusals(init_dump):
    out = _fusion(init_dump, "--json")
    assert out.returncode == 0, out.stderr
    mods = _modules(out)
    init = mods["jit_init_fn"]
    assert init["changed"] is False and init["fused"] == 0
    assert init["refused"] > 0 and init["refused"] == init["logged"]
    assert all(d["compiler"] != "fused" for d in init["decisions"])
    # the model replays the module the pass saw and predicts every refusal
    assert init["predicted"] == init["logged"] == len(init["decisions"])
    assert "after_fusion." not in init["snapshot"]
    # the module beside it, where the pass did fuse, is reported as before
    other = mods["jit_scale_add"]
    assert other["changed"] is True and other["fused"] > 0
    assert other["predicted"] == other["logged"] == len(other["decisions"])


def test_a_module_the_pass_logged_nothing_for_is_listed_with_the_models_replay(init_dump):
    out = _fusion(init_dump, "--json")
    assert out.returncode == 0, out.stderr
    lone = _modules(out)["jit_exp"]
    assert lone["log_files"] == [] and lone["logged"] == 0
    assert lone["decisions"] == []         # the model predicts no logged decision either
    text = _fusion(init_dump, "--module", "jit_exp")
    assert text.returncode == 0, text.stderr
    assert "the pass logged no decision for this module" in text.stdout


def test_the_text_says_a_pass_that_changed_nothing(init_dump):
    out = _fusion(init_dump, "--module", "jit_init_fn")
    assert out.returncode == 0, out.stderr
    assert "the pass changed nothing" in out.stdout
    (last,) = [line for line in out.stdout.splitlines() if "decisions predicted" in line]
    n, _, m = last.split()[:3]
    assert int(n) == int(m) > 0
    assert " fused " not in out.stdout      # every row is a refusal


def test_decisions_in_a_computation_no_instruction_calls_are_replayed(tmp_path):
    d = _dump(tmp_path / "attention", _ATTENTION)
    out = _fusion(d, "--json")
    assert out.returncode == 0, out.stderr
    (m,) = json.loads(out.stdout)["modules"]
    if not m["uncalled_computations"]:
        import jaxlib
        if tuple(int(p) for p in jaxlib.__version__.split(".")[:2]) < (0, 10):
            pytest.skip(f"jaxlib {jaxlib.__version__}'s library rewriter leaves no uncalled "
                        f"computation in this program (0.10.2's and 0.12.0.1's do)")
        pytest.fail("no uncalled computation in this dump: the test no longer tests it")
    inside = [r for r in m["decisions"] if r["computation"] in m["uncalled_computations"]]
    assert inside, m["decisions"]
    assert all(r["compiler"] is not None and r["agree"] for r in inside), inside
    assert m["predicted"] == m["logged"] == len(m["decisions"])


def test_one_modules_trouble_never_hides_the_others(init_dump, tmp_path):
    import shutil
    d = tmp_path / "one-bad"
    shutil.copytree(init_dump, d)
    # the snapshot the pass saw in jit_scale_add is cut short: that module cannot be read
    after = next(p for p in d.iterdir() if ".jit_scale_add." in p.name and ".after_fusion." in p.name)
    step = int(after.name.split(".")[2])
    seen = next(p for p in d.iterdir() if ".jit_scale_add." in p.name
                and p.name.split(".")[2] == f"{step - 1:04d}")
    seen.write_text("HloModule cut_short\n\nENTRY %main {\n  %x = f32[")
    out = _fusion(d, "--json")
    assert out.returncode == 2
    errors = out.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: ") and seen.name in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    mods = _modules(out)
    assert set(mods["jit_scale_add"]) == {"module", "error"}
    assert seen.name in mods["jit_scale_add"]["error"]
    # the module after it is still reported in full
    assert mods["jit_init_fn"]["refused"] > 0 and "jit_exp" in mods
    text = _fusion(d)
    assert text.returncode == 2
    assert "not analysed:" in text.stdout and text.stdout.count("decisions predicted") == len(mods) - 1


def test_a_corrupt_log_is_that_modules_trouble(init_dump, tmp_path):
    import shutil
    d = tmp_path / "bad-log"
    shutil.copytree(init_dump, d)
    (log,) = [p for p in d.iterdir() if ".jit_init_fn." in p.name and p.name.endswith(
        ("_fusion.html", "_fusion.pyz"))]
    log.write_bytes(b"not a log")
    out = _fusion(d, "--json")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert log.name in line
    mods = _modules(out)
    assert "error" in mods["jit_init_fn"] and mods["jit_scale_add"]["fused"] > 0
