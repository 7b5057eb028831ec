"""`python -m pytest_dumpref tour` on folders written by XLA_FLAGS in another process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_dumpref.xla.dump import DumpFolder

_PROGRAM = textwrap.dedent("""
    import numpy as np, jax
    from pytest_dumpref.examples import softmax, layernorm
    x = np.linspace(-1, 1, 64 * 128, dtype=np.float32).reshape(64, 128)
    g, b = np.ones(128, np.float32), np.zeros(128, np.float32)
    jax.jit(softmax)(x).block_until_ready()
    jax.jit(layernorm)(x, g, b).block_until_ready()
""")


def _run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "pytest_dumpref", *map(str, args)],
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def flags_dump(tmp_path_factory):
    """A folder written by XLA itself, the way a user would make one."""
    d = tmp_path_factory.mktemp("xla-flags-dump")
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d} --xla_dump_hlo_pass_re=.*",
               JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", _PROGRAM], env=env, check=True, timeout=300)
    return d


def test_tour_json_ranks_every_module(flags_dump):
    r = _run("tour", flags_dump, "--json", "--top", "3")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    names = [m["name"] for m in report["modules"]]
    assert "jit_softmax" in names and "jit_layernorm" in names
    assert len(names) == len(DumpFolder(flags_dump).modules)
    sm = next(m for m in report["modules"] if m["name"] == "jit_softmax")
    assert 1 <= len(sm["passes"]) <= 3
    assert [p["rank"] for p in sm["passes"]] == list(range(1, len(sm["passes"]) + 1))
    scores = [p["score"] for p in sm["passes"]]
    assert scores == sorted(scores, reverse=True)
    top = sm["passes"][0]
    for key in ("pass", "pipeline", "step", "bytes_read", "bytes_written", "kernels", "excerpt"):
        assert key in top
    # the byte arithmetic agrees with XLA's own cost analysis of the same snapshots
    for p in sm["passes"]:
        for side in ("before", "after"):
            ours = p["bytes_read"][side] + p["bytes_written"][side]
            assert ours == p["xla"]["bytes_accessed"][side], (p["pass"], side)
    # the optimized module's figures are those of the last change
    assert sm["optimized"]["kernels"] < sm["input"]["kernels"]
    # excerpts are lines of the dump (metadata elided)
    after_file = Path(top["after_file"]).read_text()
    for line in top["excerpt"]["after"].splitlines():
        if line.startswith("+ "):
            assert line[2:].split(", metadata=")[0] in after_file


def test_tour_text_names_module_and_arithmetic(flags_dump):
    r = _run("tour", flags_dump, "--module", "jit_layernorm", "--top", "2", "--no-xla")
    assert r.returncode == 0, r.stderr
    assert "== module_" in r.stdout and ".jit_layernorm ==" in r.stdout
    assert "bytes read:" in r.stdout and "bytes written:" in r.stdout and "before:" in r.stdout
    assert "jit_softmax ==" not in r.stdout
    assert "snapshot" not in r.stderr  # progress only on a terminal


def test_tour_says_how_it_counts_and_what_r0_w0_n0_are(flags_dump):
    from pytest_dumpref.xla.passes import DEFINITIONS
    from pytest_dumpref.xla.traffic import module_traffic
    r = _run("tour", flags_dump, "--module", "jit_layernorm", "--top", "1", "--no-xla")
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())  # the definitions are wrapped to the terminal
    for key, text in DEFINITIONS.items():
        assert f"[{key}] {' '.join(text.split())}" in flat, key
    # R0, W0, N0 with their values: those of the module before optimizations
    d = DumpFolder(flags_dump).dump("jit_layernorm")
    base = d.before_optimizations
    t = module_traffic(base)
    n0 = len(base.entry.instructions)  # layernorm calls nothing: the entry is all there is
    assert not any(i.opcode in ("call", "while", "conditional") for i in base.entry.instructions)
    assert (f"R0 = {t.bytes_read:,} B read, W0 = {t.bytes_written:,} B written, "
            f"N0 = {n0:,} instructions compared") in r.stdout
    j = json.loads(_run("tour", flags_dump, "--module", "jit_layernorm", "--json", "--no-xla").stdout)
    assert j["definitions"] == DEFINITIONS
    assert j["modules"][0]["baseline"] == {"R0": t.bytes_read, "W0": t.bytes_written, "N0": n0}


def test_tour_empty_folder_is_an_error(tmp_path):
    r = _run("tour", tmp_path)
    assert r.returncode == 2
    assert f"{tmp_path}: no XLA module dumps" in r.stderr and "Traceback" not in r.stderr


def test_tour_reports_a_broken_module_and_analyses_the_rest(flags_dump, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    victim = None
    for p in sorted(flags_dump.iterdir()):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if victim is None and ".jit_softmax." in p.name and ".0005." in p.name:
            victim, data = p.name, data[: len(data) // 3]
        (broken / p.name).write_bytes(data)
    assert victim
    r = _run("tour", broken, "--json", "--no-xla", "--top", "1")
    assert r.returncode == 2
    assert victim in r.stderr and "Traceback" not in r.stderr
    report = json.loads(r.stdout)
    sm = next(m for m in report["modules"] if m["name"] == "jit_softmax")
    assert victim in sm["error"]
    ln = next(m for m in report["modules"] if m["name"] == "jit_layernorm")
    assert "error" not in ln and ln["passes"]


def test_tour_names_a_module_whose_snapshots_are_missing(flags_dump, tmp_path):
    cut = tmp_path / "cut"
    cut.mkdir()
    for p in flags_dump.iterdir():
        if not p.is_file() or ".jit_layernorm." in p.name and ".0002." in p.name:
            continue
        (cut / p.name).write_bytes(p.read_bytes())
    r = _run("tour", cut, "--module", "jit_layernorm", "--no-xla")
    assert r.returncode == 2
    assert "jit_layernorm is missing pass snapshot step(s) 0002" in r.stderr
