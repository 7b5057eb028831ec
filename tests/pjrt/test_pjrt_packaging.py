"""A non-editable install ships plugin_c/ and build.py finds it there.

The ``jax_plugins`` entry point builds the library from the C sources on first use, so an
install without them gives a jax that silently lacks the device.  A full ``pip install`` into a
fresh venv takes minutes (it downloads jax); setuptools' ``build_py`` step lays out exactly the
files a wheel would hold, from the same configuration (pyproject.toml + setup.py), in seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("pyproject.toml", "setup.py", "README.md")
PROJECT_DIRS = ("pytest_dumpref", "plugin_c")


@pytest.fixture(scope="module")
def built_lib(tmp_path_factory) -> Path:
    """The package tree a wheel would install, built from a copy of the project's files (the
    build writes egg-info beside its sources, which must not land in the checkout)."""
    project = tmp_path_factory.mktemp("project")
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, project / name)
    for name in PROJECT_DIRS:
        shutil.copytree(REPO / name, project / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.o"))
    lib = project / "build-lib"
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return lib


def _c_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".c", ".h"))


def test_the_install_holds_every_c_source_and_header(built_lib):
    shipped = built_lib / "pytest_dumpref" / "pjrt" / "plugin_c"
    wanted = _c_files(REPO / "plugin_c")
    assert wanted, "no C sources in the checkout's plugin_c/"
    assert "minimal/minimal.c" in wanted  # build-plugin --minimal builds it after pip install
    assert _c_files(shipped) == wanted
    for name in wanted:
        assert (shipped / name).read_bytes() == (REPO / "plugin_c" / name).read_bytes(), name


def test_an_installed_copy_builds_from_the_shipped_sources(built_lib, tmp_path):
    # Run from outside the checkout with only the built tree importable, as after pip install:
    # there is no plugin_c/ two folders above build.py, so the shipped copy must be found.
    code = ("import json, pytest_dumpref.pjrt.build as b; "
            "print(json.dumps([b.__file__, str(b.plugin_source_dir())]))")
    env = {k: v for k, v in os.environ.items() if k != "DUMPREF_PLUGIN_SRC"}
    env["PYTHONPATH"] = str(built_lib)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    module, source_dir = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(module).is_relative_to(built_lib), module
    assert Path(source_dir) == built_lib / "pytest_dumpref" / "pjrt" / "plugin_c"


def test_the_checkout_comes_before_the_shipped_copy():
    # An editable install must build what is being edited, not a stale shipped copy.
    from pytest_dumpref.pjrt.build import plugin_source_dir
    assert plugin_source_dir() == REPO / "plugin_c"


def test_the_build_cache_keeps_only_the_newest_builds(tmp_path, monkeypatch):
    import os
    import time
    from pytest_dumpref.pjrt import jax_plugin
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = jax_plugin.cache_dir()
    for i in range(6):  # six stale builds, oldest first
        d = root / f"stale{i}"
        d.mkdir(parents=True)
        os.utime(d, (time.time() - 100 + i, time.time() - 100 + i))
    lib = jax_plugin.cached_library()  # builds the current sources: a real compile
    assert lib.is_file()
    left = sorted(d.name for d in root.iterdir())
    assert lib.parent.name in left and len(left) == jax_plugin.KEEP_BUILDS
    assert {"stale5", "stale4", "stale3"} <= set(left)
