"""Where the dumpref PJRT plugin's toolchain is: its C sources, the PJRT C API header of the
installed ``xla-cpu-pjrt`` wheel, and the C compiler.  ``abi`` (which preprocesses the header
for cffi) and ``build`` (which compiles the plugin) both stand on it.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path


class BuildError(RuntimeError):
    """The plugin could not be built; the message says why (no compiler, no header, C errors)."""


def plugin_source_dir() -> Path:
    """The C sources: ``$DUMPREF_PLUGIN_SRC``, else ``plugin_c/`` of this checkout, else the copy
    a non-editable install ships inside the package (``pytest_dumpref/pjrt/plugin_c``).

    The checkout comes first so that an editable install always builds what is being edited.
    """
    env = os.environ.get("DUMPREF_PLUGIN_SRC")
    if env:
        candidates = [Path(env)]
    else:
        here = Path(__file__).resolve().parent
        candidates = [here.parents[1] / "plugin_c", here / "plugin_c"]
    for src in candidates:
        if (src / "dumpref.h").is_file() and list(src.glob("*.c")):
            return src
    raise BuildError("no C sources of the dumpref plugin in "
                     + " or ".join(str(c) for c in candidates)
                     + " (reinstall pytest-dumpref, or set DUMPREF_PLUGIN_SRC)")


def header_dir() -> Path:
    """The folder holding ``pjrt_c_api.h``, from the installed ``xla-cpu-pjrt`` wheel."""
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("the PJRT C API header comes from the 'xla-cpu-pjrt' package, which is "
                         "not installed (pip install xla-cpu-pjrt==0.0.1)")
    include = Path(list(spec.submodule_search_locations)[0]) / "include"
    if not (include / "pjrt_c_api.h").is_file():
        raise BuildError(f"pjrt_c_api.h not found in {include} (broken xla-cpu-pjrt install?)")
    return include


def find_compiler() -> str:
    """``$CC``, else the first of cc, gcc, clang on PATH."""
    cc = os.environ.get("CC")
    if cc:
        if shutil.which(cc.split()[0]) is None:
            raise BuildError(f"CC={cc!r} is set but not found on PATH")
        return cc
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    raise BuildError("building the dumpref PJRT plugin needs a C compiler, and none was found "
                     "(tried $CC, cc, gcc, clang): install gcc or clang, or set CC")
