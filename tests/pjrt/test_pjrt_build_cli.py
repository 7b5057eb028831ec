"""``python -m pytest_dumpref build-plugin``: builds the library, prints its path; a missing
compiler is a one-line error, not a traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_dumpref.pjrt.abi import PjrtApi
from pytest_dumpref.pjrt.build import LIBRARY_NAME, MINIMAL_LIBRARY_NAME


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pytest_dumpref", "build-plugin", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_build_plugin_prints_the_path_of_a_loadable_library(tmp_path):
    done = _cli("--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == (tmp_path / "out" / LIBRARY_NAME).resolve() and path.is_file()
    assert PjrtApi(path).version >= (0, 1)  # GetPjrtApi is exported and answers


def test_build_plugin_without_a_compiler_says_so(tmp_path):
    env = dict(os.environ, CC="no-such-cc-dumpref")
    done = _cli("--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("build-plugin: CC='no-such-cc-dumpref' is set but not found on PATH")
    assert "Traceback" not in done.stderr


def test_build_plugin_minimal_builds_the_one_file_plugin(tmp_path):
    done = _cli("--minimal", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == (tmp_path / "out" / MINIMAL_LIBRARY_NAME).resolve() and path.is_file()
    api = PjrtApi(path)
    assert api.version >= (0, 1)
    # every slot is a function: the filled ones work, the others answer UNIMPLEMENTED
    assert [n for n in api.slot_names if api.slot(n) == api.ffi.NULL] == []
    client = api.create_client()
    name = api.call("PJRT_Client_PlatformName", client=client)
    assert api.ffi.string(name.platform_name, name.platform_name_size) == b"dumpref"
    err = api.call_raw("PJRT_Client_TopologyDescription", api.new_args("PJRT_Client_TopologyDescription"))
    assert api.take_error("PJRT_Client_TopologyDescription", err).code_name == "UNIMPLEMENTED"


def test_build_plugin_minimal_refuses_sanitize(tmp_path):
    done = _cli("--minimal", "--sanitize", "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "do not go together" in done.stderr


def test_without_out_the_library_goes_to_the_user_cache_not_the_current_folder(tmp_path):
    cwd = tmp_path / "a-project"
    cwd.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "pytest_dumpref", "build-plugin", "--minimal"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == (tmp_path / "cache" / "pytest-dumpref" / "build-plugin" / MINIMAL_LIBRARY_NAME).resolve()
    assert path.is_file() and list(cwd.iterdir()) == []
