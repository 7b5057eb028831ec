"""`python -m pytest_dumpref fusion` on a folder written by plain XLA_FLAGS in another process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Programs of different shapes of decision: refusals for profitability and duplication,
# a library (custom) fusion, a while loop (several computations), a tuple root.
_PROGRAM = textwrap.dedent("""
    import numpy as np, jax
    from pytest_dumpref.examples import softmax, layernorm, scan_rnn, adam_update
    x = np.linspace(-1, 1, 64 * 128, dtype=np.float32).reshape(64, 128)
    g, b = np.ones(128, np.float32), np.zeros(128, np.float32)
    jax.jit(softmax)(x).block_until_ready()
    jax.jit(layernorm)(x, g, b).block_until_ready()
    jax.jit(scan_rnn)(x[:8], np.ones((4, 8, 128), np.float32), np.eye(128, dtype=np.float32))
    jax.block_until_ready(jax.jit(adam_update)(x, x, x, x))
""")


def _run(*args):
    return subprocess.run([sys.executable, "-m", "pytest_dumpref", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def _dump(folder, flags: str, program: str):
    """Run ``program`` in a fresh python with XLA_FLAGS dumping into ``folder`` (and ``flags``):
    a folder a user makes, no pytest-dumpref in the process."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_dump_to={folder} {flags}")
    subprocess.run([sys.executable, "-c", program], env=env, check=True, timeout=300)
    return folder


@pytest.fixture(scope="module")
def flags_dump(tmp_path_factory):
    return _dump(tmp_path_factory.mktemp("xla-flags-fusion-dump"),
                 "--xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization", _PROGRAM)


def test_json_lists_every_logged_decision_with_the_models(flags_dump):
    out = _run("fusion", flags_dump, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    names = [m["module"].split(".", 1)[1] for m in report["modules"]]
    for want in ("jit_softmax", "jit_layernorm", "jit_scan_rnn", "jit_adam_update"):
        assert want in names, names
    for m in report["modules"]:
        # a module the pass logged nothing for (a lone op) is listed too, with no decision
        assert bool(m["decisions"]) == bool(m["log_files"]), m["module"]
        if m["module"].split(".", 1)[1] in ("jit_softmax", "jit_layernorm", "jit_scan_rnn",
                                            "jit_adam_update"):
            assert m["decisions"], m["module"]
        for d in m["decisions"]:
            assert {"producer", "consumer", "compiler", "predicted"} <= set(d)
        # the compiler's column is the log's, word for word
        assert all(d["compiler"] == "fused" or d["compiler"].endswith(
            " ; multi-output fusion not supported by this pass") for d in m["decisions"])
        assert m["predicted"] == m["logged"] == len(m["decisions"]), m["module"]
    rnn = next(m for m in report["modules"] if m["module"].endswith("jit_scan_rnn"))
    assert len({d["computation"] for d in rnn["decisions"]}) > 1   # entry and loop body


def test_text_names_one_module_and_counts(flags_dump):
    out = _run("fusion", flags_dump, "--module", "jit_softmax")
    assert out.returncode == 0, out.stderr
    assert "== module_" in out.stdout and "jit_softmax ==" in out.stdout
    assert "Fusion is not profitable." in out.stdout
    last = [line for line in out.stdout.splitlines() if "decisions predicted" in line]
    assert len(last) == 1
    n, _, m = last[0].split()[:3]
    assert int(n) == int(m) > 0


def test_folder_without_the_log_names_the_flag(tmp_path):
    d = _dump(tmp_path / "no-log", "--xla_dump_hlo_pass_re=.*", "import jax, jax.numpy as jnp; "
              "jax.jit(lambda x: jnp.exp(x) * 2)(jnp.ones((8, 8))).block_until_ready()")
    out = _run("fusion", d)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--xla_dump_fusion_visualization" in lines[0] and str(d) in lines[0]
    assert "Traceback" not in out.stderr


def test_not_a_dump_folder_is_one_line(tmp_path):
    out = _run("fusion", tmp_path)
    assert out.returncode == 2 and "no XLA module dumps" in out.stderr and "Traceback" not in out.stderr
    out = _run("fusion", tmp_path / "missing")
    assert out.returncode == 2 and "not a folder" in out.stderr


def test_log_without_pass_snapshots_names_the_flag(tmp_path):
    d = _dump(tmp_path / "log-only", "--xla_dump_fusion_visualization", "import jax, jax.numpy as jnp; "
              "jax.jit(lambda x: jnp.exp(x) * 2 + 1)(jnp.ones((8, 8))).block_until_ready()")
    out = _run("fusion", d)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert "no snapshot before the fusion pass" in line and "--xla_dump_hlo_pass_re=.*" in line
