"""The device is opt-in: a jax process that does not ask for it sees nothing of it.

The ``jax_plugins`` entry point is imported by every jax process of the environment; without
``DUMPREF_PJRT=1`` (or ``DUMPREF_PJRT_LIBRARY``) it must not warn, build or register anything.
Each run gets an empty cache folder, so a build would show as files there.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

DEVICES = "import jax; print(jax.devices())"


def _run(code, tmp_path, **env):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("DUMPREF_PJRT", "PJRT_", "JAX_PLATFORMS"))}
    base["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    base.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=base, cwd=tmp_path)


def _cache_files(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache").rglob("*")) if (tmp_path / "cache").exists() else []


@pytest.mark.parametrize("switch", [None, "0"], ids=["unset", "DUMPREF_PJRT=0"])
def test_a_process_that_does_not_ask_sees_nothing(tmp_path, switch):
    r = _run(DEVICES, tmp_path, **({} if switch is None else {"DUMPREF_PJRT": switch}))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[CpuDevice(id=0)]"
    assert "dumpref" not in (r.stdout + r.stderr).lower(), r.stderr
    assert _cache_files(tmp_path) == []  # nothing was built


def test_asking_builds_and_registers_the_device(tmp_path):
    # eigvalsh: the entry point also registered the eigh lowering (jax_lowerings.py)
    r = _run("import jax, numpy as np; d = jax.devices('dumpref'); "
             "w = jax.numpy.linalg.eigvalsh(jax.device_put(np.diag([2., 1.]), d[0])); "
             "print(d, jax.default_backend(), w.devices() == set(d), w.tolist())", tmp_path,
             DUMPREF_PJRT="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[DumprefDevice(id=0)] cpu True [1.0, 2.0]"
    assert any(name.endswith(".so") for name in _cache_files(tmp_path))  # built on first use
