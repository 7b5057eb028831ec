"""The ``jax_plugins`` entry point: makes ``jax.devices("dumpref")`` work after ``pip install``.

jax imports this module at start-up, in every process of the environment, and calls
:func:`initialize`.  The device is opt-in: unless the process asks for it, initialize returns at
once, so a jax program that never mentions dumpref sees no warning, no build and no extra
backend.  Asked for, it registers the dumpref library with jax, building it first into a
per-user cache if the cache has no library for the current sources.  It never raises: a missing
compiler or a broken build must not stop jax from starting, so it logs a warning and registers
nothing.

Environment:
  DUMPREF_PJRT=1            register the plugin (the test fixtures set it for their subprocesses)
  DUMPREF_PJRT_LIBRARY=PATH register this library instead of the cached build; setting it is
                            asking for the device too (DUMPREF_PJRT=0 still wins)
  DUMPREF_PJRT_PRIORITY=N   backend priority (default -100: below jax's CPU backend, so jax's
                            default device stays the CPU and the plugin is opt-in by name)
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

PLATFORM = "dumpref"
DEFAULT_PRIORITY = -100


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-dumpref" / "pjrt"


def cached_library() -> Path:
    """The library for the current sources, built into the cache on first use."""
    from .build import LIBRARY_NAME, build_plugin, sources_digest
    folder = cache_dir() / sources_digest()[:16]
    lib = folder / LIBRARY_NAME
    if not lib.is_file():
        build_plugin(folder)
        _prune(keep=folder)
    return lib


#: Builds kept in the cache: each change of the sources or flags adds one.
KEEP_BUILDS = 4


def _prune(keep: Path) -> None:
    """Remove all but the newest KEEP_BUILDS builds.  A process still using a removed library
    keeps its mapping (unlinking does not unmap), so this is safe while jax runs elsewhere."""
    import shutil
    builds = sorted((d for d in keep.parent.iterdir() if d.is_dir() and d != keep),
                    key=lambda d: d.stat().st_mtime, reverse=True)
    for old in builds[KEEP_BUILDS - 1:]:
        shutil.rmtree(old, ignore_errors=True)


def wanted() -> bool:
    """Whether this process asked for the device (see the module docstring)."""
    switch = os.environ.get("DUMPREF_PJRT", "")
    if switch == "0":
        return False
    return switch == "1" or bool(os.environ.get("DUMPREF_PJRT_LIBRARY"))


def initialize() -> None:
    if not wanted():
        return
    try:
        library = os.environ.get("DUMPREF_PJRT_LIBRARY") or str(cached_library())
        priority = int(os.environ.get("DUMPREF_PJRT_PRIORITY", DEFAULT_PRIORITY))
        from jax._src import xla_bridge
        xla_bridge.register_plugin(PLATFORM, priority=priority, library_path=library)
        enable_donation()
    except Exception as e:  # never stop jax from starting
        logger.warning("dumpref PJRT plugin not registered: %s", e)
        return
    # jax lowers eigh only for cpu, gpu and tpu; its own pure-jax divide-and-conquer is
    # registered for this platform (jax_lowerings.py).  After register_plugin: jax refuses a
    # lowering for a platform it does not know yet.  It warns, never raises, if that fails.
    from .jax_lowerings import register
    register(PLATFORM)


def enable_donation() -> None:
    """Tell jax that the device honours buffer donation.  jax 0.10.2 decides this from a
    hard-coded list of platforms (``jax._src.interpreters.mlir._platforms_with_donation``);
    a platform outside it gets no aliasing in its programs and the warning "Some donated
    buffers were not usable" for every donated argument.  The device invalidates each donated
    input after a run (executable.c), as XLA does.  A jax without the list is left alone."""
    from jax._src.interpreters import mlir
    platforms = getattr(mlir, "_platforms_with_donation", None)
    if isinstance(platforms, list) and PLATFORM not in platforms:
        platforms.append(PLATFORM)
