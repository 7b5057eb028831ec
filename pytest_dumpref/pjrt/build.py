"""Build the dumpref PJRT plugin (``plugin_c/*.c``) with the system C compiler.

The plugin is compiled against the real ``pjrt_c_api.h`` shipped in the ``xla-cpu-pjrt``
wheel, found through the installed package at build time (never copied into the repository).
Every ``plugin_c/*.c`` file is compiled, so a new family of entry points joins the build by
existing.  The minimal plugin (``plugin_c/minimal/minimal.c``, levels 1 and 2 only) is one file
built on its own, with the flags its header comment gives a reader.  ``build_plugin`` always builds afresh into the folder it is given: a fixture never
sees a stale library.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .abi import PjrtApi
from .toolchain import BuildError, find_compiler, header_dir, plugin_source_dir
from .trace import run_jax

# BuildError and the toolchain look-ups are this module's public names too (tests, the CLI and
# pjrt_map import them from here); they live in toolchain so that abi needs nothing above it.
__all__ = [
    "BuildError", "BuiltPlugin", "LIBRARY_NAME", "MINIMAL_LIBRARY_NAME", "MINIMAL_SOURCE",
    "PLATFORM", "build_command", "build_plugin", "default_out_dir", "find_compiler",
    "header_dir", "minimal_command", "plugin_source_dir", "sources", "sources_digest",
]

LIBRARY_NAME = "libdumpref_pjrt.so"
MINIMAL_LIBRARY_NAME = "libdumpref_minimal.so"
PLATFORM = "dumpref"
#: The minimal plugin: one file, written from the measured map (levels 1 and 2 only).
MINIMAL_SOURCE = Path("minimal") / "minimal.c"

#: Flags for the normal build; why each: C11 as the issue asks, warnings on, symbols hidden so
#: only GetPjrtApi is exported (jaxlib dlsym's it), -g so aborts inside the plugin have names.
#: -O3: the matrix product's micro-kernels (prog_ops_matmul.c) are plain C over fixed-size tiles
#: that gcc keeps in vector registers only at -O3 (measured: f32 256x256 at 40 GFLOPS with
#: -O2 -ftree-vectorize, 74 with -O3, AVX-512 kernel, Zen 4).  The interpreter's elementwise
#: kernels need the dynamic vectorizer cost model, the -O3 default, kept explicit: an output may
#: alias an input, so the vectorized loop carries a run-time check; without it `x + 1` over 1M f32
#: spent its time in a scalar addss loop.  Vectorizing changes no result (no -ffast-math, and
#: -std=c11 turns FP contraction off: float sums keep their order, nothing fuses into an FMA
#: unless the source asks for one, as the matrix product's AVX2/AVX-512 kernels do).
#: -fno-math-errno: sqrt is then the sqrtps instruction in a vectorised loop, where gcc otherwise
#: calls sqrtf for a negative operand to set errno and keeps the loop scalar (nothing here reads
#: errno; the values are the same, IEEE sqrt being correctly rounded either way).
BASE_FLAGS = ("-std=c11", "-O3", "-fvect-cost-model=dynamic", "-fno-math-errno", "-g", "-fPIC",
              "-shared", "-Wall", "-Wextra", "-fvisibility=hidden")
#: AddressSanitizer + UndefinedBehaviorSanitizer; -fno-sanitize-recover makes UB fatal so a
#: test cannot pass over it.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                  "-fno-omit-frame-pointer", "-O1")
#: The minimal plugin's flags: what its own header comment tells a reader to type.
MINIMAL_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-fPIC", "-shared")
#: -z defs: an undefined symbol fails the build here, not the dlopen inside jax later.
LIBS = ("-lpthread", "-lm", "-Wl,-z,defs")  # libm: the program interpreter (prog_interp.c)


def sources(src: Path | None = None) -> list[Path]:
    return sorted((src or plugin_source_dir()).glob("*.c"))


def build_command(output: Path, *, sanitize: bool = False, src: Path | None = None) -> list[str]:
    src = src or plugin_source_dir()
    flags = list(BASE_FLAGS) + (list(SANITIZE_FLAGS) if sanitize else [])
    # The prefix maps keep machine-specific folders out of the debug info, so the same sources,
    # header and compiler give the same bytes (the library's hash is evidence, checked exactly).
    flags += [f"-ffile-prefix-map={src}=plugin_c", f"-ffile-prefix-map={header_dir()}=pjrt_include"]
    return ([*find_compiler().split(), *flags, f"-I{src}", f"-I{header_dir()}", "-o", str(output)]
            + [str(p) for p in sources(src)] + list(LIBS))


def minimal_command(output: Path, *, src: Path | None = None) -> list[str]:
    """The minimal plugin's build: its one file, its header comment's flags, the real header."""
    src = src or plugin_source_dir()
    return [*find_compiler().split(), *MINIMAL_FLAGS, f"-I{header_dir()}", "-o", str(output),
            str(src / MINIMAL_SOURCE)]


def sources_digest(src: Path | None = None) -> str:
    """One hash over the C sources and headers and the build flags, to key caches of built
    libraries (a change of flags alone must not leave a stale library in the cache)."""
    src = src or plugin_source_dir()
    h = hashlib.sha256("\0".join((os.environ.get("CC", ""),) + BASE_FLAGS + LIBS).encode()
                       + b"\0\0")
    for p in sorted(list(src.glob("*.c")) + list(src.glob("*.h"))):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update((header_dir() / "pjrt_c_api.h").read_bytes())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class BuiltPlugin:
    """A freshly built library and what is needed to use it with or without jax.

    The ``pjrt_plugin`` fixture returns one (built once per session); ``build_plugin(folder)``
    makes one anywhere.

    Example::

        plugin = build_plugin(tmp, minimal=True)
        plugin.path, plugin.sha256                   # the library and its hash
        plugin.portable_command()                    # cc -std=c11 ... plugin_c/minimal/minimal.c
        plugin.device_kind()                         # 'dumpref', asked of the device through cffi
        run = plugin.run_jax('import jax; print(jax.devices("dumpref"))', trace=False)
        run.returncode, run.stdout                   # (0, '[MinimalDevice(id=0)]\n')
    """

    path: Path
    build_command: list[str]
    sha256: str
    sanitize: bool = False
    minimal: bool = False
    _api: Any = field(default=None, repr=False)
    _device_kind: str | None = field(default=None, repr=False)

    @property
    def api(self):
        """A cffi view of the library's ``PJRT_Api`` table (see :mod:`.abi`)."""
        if self._api is None:
            self._api = PjrtApi(self.path)
        return self._api

    def run_jax(self, code: str, *, env: dict | None = None, trace: bool = True,
                disable: Sequence[str] = (), timeout: float = 180):
        """Run a jax snippet in a subprocess with this library registered; see :mod:`.trace`."""
        return run_jax(self.path, code, env=env, trace=trace, disable=disable, timeout=timeout)

    def record(self, evidence) -> None:
        """Record the library (hash) and how it was built, and that evidence came from it."""
        evidence.file("PJRT plugin library", self.path)
        evidence.note("Built with: `" + " ".join(self._portable_command()) + "`. Here "
                      "`<xla_cpu_pjrt>/include` is the include folder of the xla-cpu-pjrt wheel "
                      f"(pip install xla-cpu-pjrt=={_header_wheel_version()}), which holds the real "
                      "pjrt_c_api.h; `python -c 'from pytest_dumpref.pjrt.toolchain import "
                      "header_dir; print(header_dir())'` prints it.")
        evidence.observe(backend=PLATFORM, chip=self.device_kind(), plugin_sha256=self.sha256)

    def device_kind(self) -> str:
        """The device kind this library reports, asked of the device itself through cffi
        (PJRT_DeviceDescription_Kind), so that the chip a claim's provenance shows is
        observed, not read from the C source."""
        if self._device_kind is None:
            api = self.api
            client = api.create_client()
            try:
                desc = api.call("PJRT_Device_GetDescription",
                                device=api.first_device(client)).device_description
                kind = api.call("PJRT_DeviceDescription_Kind", device_description=desc)
                self._device_kind = api.ffi.string(kind.device_kind, kind.device_kind_size).decode()
            finally:
                api.destroy_client(client)
        return self._device_kind

    def _portable_command(self) -> list[str]:
        """The build command with machine-specific folders shortened, for the write-up."""
        out = []
        for part in self.build_command:
            part = part.replace(str(self.path.parent), "$OUT")
            part = part.replace(str(header_dir()), "<xla_cpu_pjrt>/include")
            src = str(plugin_source_dir())
            part = part.replace(src, "plugin_c")
            out.append(part)
        return out

    def portable_command(self) -> str:
        """The build command a reader can type: folders as `$OUT`, `<xla_cpu_pjrt>/include`,
        `plugin_c`."""
        return " ".join(self._portable_command())


def _header_wheel_version() -> str:
    from importlib.metadata import version
    return version("xla-cpu-pjrt")


def default_out_dir() -> Path:
    """Where ``build-plugin`` puts a library when no ``--out`` is given: the per-user cache
    (``$XDG_CACHE_HOME``, else ``~/.cache``), ``pytest-dumpref/build-plugin``, never the
    folder it happens to run in.  (The plugin that ``DUMPREF_PJRT=1`` registers is cached
    beside it, under ``pytest-dumpref/pjrt``, one folder per version of the sources.)"""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-dumpref" / "build-plugin"


def build_plugin(out_dir, *, sanitize: bool = False, name: str | None = None,
                 minimal: bool = False, source: Path | None = None) -> BuiltPlugin:
    """Compile ``plugin_c/*.c`` (or, ``minimal``, ``plugin_c/minimal/minimal.c`` -- or the
    file ``source`` instead, for an edited copy) into ``out_dir``; return the :class:`BuiltPlugin`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    default = MINIMAL_LIBRARY_NAME if minimal else ("asan-" if sanitize else "") + LIBRARY_NAME
    target = out_dir / (name or default)
    # Build beside the target and rename: a concurrent reader never sees half a library.
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".building-", suffix=".so")
    os.close(fd)
    if minimal:
        cmd = minimal_command(Path(tmp))
        if source is not None:
            cmd[-1] = str(source)
    else:
        cmd = build_command(Path(tmp), sanitize=sanitize)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=plugin_source_dir())
        if done.returncode != 0:
            raise BuildError(f"building the dumpref PJRT plugin failed (exit {done.returncode}):\n"
                             f"$ {' '.join(cmd)}\n{done.stderr.strip()}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    final_cmd = [str(target) if c == tmp else c for c in cmd]
    return BuiltPlugin(path=target, build_command=final_cmd, sha256=_sha256(target),
                       sanitize=sanitize, minimal=minimal)
