"""fusion_model.py, the write-up's one-file listing of the fusion model, run the way a reader
runs it: saved alone in an empty folder, beside a dump that plain jax wrote with XLA_FLAGS, by
an isolated python that imports nothing of this package."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from pytest_dumpref.xla.dump import Dump, DumpFolder
from pytest_dumpref.xla.cpu.fusion import model_listing, module_fusion
from pytest_dumpref.xla.cpu.fusion_policy import installed_xla_has_coupled_softmax_rule

# softmax (a library fusion and profitability refusals), a layer norm, a scan (a while loop:
# several computations, in the pass's order) and the scaled softmax with the library rewriter
# off, where the coupled-softmax rule decides (wrong on purpose below, so the listing can fail).
_PROGRAM = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    def softmax(x):
        m = jnp.max(x, axis=-1, keepdims=True)
        e = jnp.exp(x - m)
        return e / jnp.sum(e, axis=-1, keepdims=True)
    def layernorm(x, g, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b
    def scan_rnn(h, xs, w):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x),) * 2, h, xs)[0]
    x = np.linspace(-1, 1, 64 * 128, dtype=np.float32).reshape(64, 128)
    g, b = np.ones(128, np.float32), np.zeros(128, np.float32)
    jax.jit(softmax)(x).block_until_ready()
    jax.jit(layernorm)(x, g, b).block_until_ready()
    jax.jit(scan_rnn)(x[:8], np.ones((4, 8, 128), np.float32), np.eye(128, dtype=np.float32))
""")
_SCALED = ("import numpy as np, jax\nfrom jax.nn import softmax\n"
           "jax.jit(lambda x: softmax(x * 0.125))(np.ones((64, 128), np.float32)).block_until_ready()\n")
_FLAGS = "--xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization"


def _plain(folder, program, extra=""):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env.update(JAX_PLATFORMS="cpu", DUMPREF_PJRT="0", XLA_FLAGS=f"--xla_dump_to={folder} {_FLAGS} {extra}")
    subprocess.run([sys.executable, "-I", "-c", program], env=env, check=True, timeout=300, cwd=folder.parent)
    return folder


def _listing(tmp_path, *args):
    (tmp_path / "fusion_model.py").write_text(model_listing())
    return subprocess.run([sys.executable, "-I", "fusion_model.py", *args], cwd=tmp_path, check=False,
                          capture_output=True, text=True, timeout=300)


def test_the_listing_imports_nothing_of_this_package():
    tree = ast.parse(model_listing())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules and not any(m and m.split(".")[0] == "pytest_dumpref" for m in modules), modules
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def test_the_listing_alone_predicts_what_the_package_predicts(tmp_path):
    folder = _plain(tmp_path / "d", _PROGRAM)
    done = _listing(tmp_path, "d")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    modules = DumpFolder(folder).modules
    assert len(modules) == 3
    total = 0
    for m in modules:
        mf = module_fusion(Dump(m))
        assert mf.log and mf.agreed == len(mf.log)
        assert f"== {m.key}: the pass saw {mf.before.path.name}\n" in done.stdout
        assert f"\n{mf.agreed} of {len(mf.log)} decisions predicted\n" in done.stdout
        total += len(mf.log)
    assert done.stdout.count("decisions predicted") == 4
    assert done.stdout.endswith(f"\nall 3 modules: {total} of {total} decisions predicted\n")


def test_a_misprediction_is_marked_and_fails(tmp_path):
    """The scaled softmax with the library rewriter off is decided by the coupled-softmax
    rule; told the other way round from the jaxlib that wrote the dump, the model must miss."""
    _plain(tmp_path / "d", _SCALED, "--xla_disable_hlo_passes=dot-library-rewriter")
    wrong = "--no-coupled-softmax" if installed_xla_has_coupled_softmax_rule() else "--coupled-softmax"
    right = _listing(tmp_path, "d")
    assert right.returncode == 0, right.stdout[-2000:]
    missed = _listing(tmp_path, "d", wrong)
    assert missed.returncode == 1, missed.stdout[-2000:]
    assert any(ln.startswith("* ") and "| model:" in ln for ln in missed.stdout.splitlines())


def test_a_folder_without_pass_snapshots_is_named(tmp_path):
    folder = tmp_path / "d"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", DUMPREF_PJRT="0", XLA_FLAGS=f"--xla_dump_to={folder}")
    subprocess.run([sys.executable, "-I", "-c", _SCALED], env=env, check=True, timeout=300)
    done = _listing(tmp_path, "d")
    assert done.returncode == 2
    assert "no snapshot before the fusion pass" in done.stderr and "xla_dump_hlo_pass_re" in done.stderr


@pytest.mark.parametrize("args", [[], ["a", "b"]])
def test_wrong_arguments_print_the_usage(tmp_path, args):
    done = _listing(tmp_path, *args)
    assert done.returncode == 2 and "python fusion_model.py DIR" in done.stderr


def test_a_name_the_listing_cannot_place_is_named(tmp_path, monkeypatch):
    import importlib

    from pytest_dumpref.xla.standalone import ListingError, listing
    (tmp_path / "half_module.py").write_text("import json\n\n\ndef f():\n    return json.dumps(g())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("half_module")
    with pytest.raises(ListingError, match=r"half_module.py: 'g' is read but defined nowhere"):
        listing({mod: ["f"]}, order=(mod,))
    (tmp_path / "half_module.py").write_text("import json\n\n\n# why f\ndef f():\n    return json.dumps(1)\n")
    mod = importlib.reload(mod)
    # the comment right above a definition comes with it; the import it reads, once, at the top
    text = listing({mod: ["f"]}, order=(mod,))
    assert text.startswith("from __future__ import annotations\n\nimport json\n\n\n# ---- from half_module.py -")
    assert text.endswith("-\n\n# why f\ndef f():\n    return json.dumps(1)\n")


def test_programs_listing_builds_its_tables_alone(tmp_path):
    """programs.py, imported by a python that has nothing of this package: its module-level
    tables (WRITTEN_AFTER reads examples.<program> as it is built) find every name."""
    from pytest_dumpref.xla.cpu.fusion_programs import WRITTEN_AFTER, programs_listing
    (tmp_path / "programs.py").write_text(programs_listing())
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    run = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, '.'); import programs; "
                          "print(sorted(programs.WRITTEN_AFTER))"],
                         cwd=tmp_path, env=dict(env, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == str(sorted(WRITTEN_AFTER))
