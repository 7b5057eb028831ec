"""How jax finds the dumpref device: the two ways of registering it, and which backend each
makes jax's default, measured in fresh processes.

This package's ``jax_plugins`` entry point (:mod:`.jax_plugin`) registers the device only when a
process asks for it, below the CPU; jax's own ``PJRT_NAMES_AND_LIBRARY_PATHS`` registers any
library at jax's plugin priority, above the CPU.  Study 3's first claim runs both (and neither)
and states how its snippets run.
"""
from __future__ import annotations

from pathlib import Path

from .build import LIBRARY_NAME
from .jax_plugin import DEFAULT_PRIORITY
from .minimal import plain_registration
from .trace import PRELUDE, JaxRun, run_jax

# How every snippet of Study 3 runs, for a reader who wants to run one: the runner
# (pytest_dumpref/pjrt/trace.py) puts PRELUDE before the snippet and registers the plugin
# through jax's plugin discovery, before the snippet's first line.
HOW_SNIPPETS_RUN = (
    f"Every snippet here runs as shown in a fresh Python; its first line ({PRELUDE.strip()}) is "
    f"the prelude pytest_dumpref/pjrt/trace.py puts before each. jax registers the plugin at "
    f"start-up, one of two ways: (1) this package's jax_plugins entry point, only when asked "
    f"(DUMPREF_PJRT=1 builds {LIBRARY_NAME} into ~/.cache/pytest-dumpref/pjrt/; "
    f"DUMPREF_PJRT_LIBRARY=PATH names one), at priority {DEFAULT_PRIORITY}, below the CPU's 0; "
    f"(2) jax's own PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:/path/to/lib.so, priority 400, so the "
    f"device becomes jax's default (the table above). The snippets name the device, so they pass "
    f"either way.")
#: A snippet run with jax's own variable, as a reader without this package's entry point would.
PLAIN_REGISTRATION = ("PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:/path/to/" + LIBRARY_NAME
                      + " python level1.py   # level1.py: the level 1 snippet, as shown below")
#: What jax lists, and which dumpref libraries the process mapped, with their sha256.
DEVICES_AND_LIBRARIES = (
    "import hashlib, json\n"
    "devs = repr(jax.devices())\n"
    "libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'dumpref_pjrt' in l})\n"
    "print(json.dumps({'devices': devs, 'platform': jax.devices()[0].platform,"
    " 'libs': [[p, hashlib.sha256(open(p, 'rb').read()).hexdigest()] for p in libs]}))\n")
#: What registering minimal.c as 'other' (its PlatformName 'dumpref') shows, in words.
NAME_AND_PLATFORM = ("The registration name is the backend's name in jax (jax.devices(name) finds it); "
                     "PlatformName is the platform the device reports (device.platform, "
                     "jax.default_backend()). A level passes with the two different, but then "
                     "jax.devices(jax.default_backend()) fails: give both the same name.")
DEFAULT_BACKEND = "import json\nprint(json.dumps([jax.default_backend(), [d.platform for d in jax.devices()]]))\n"


def default_backends(library: Path) -> dict[str, JaxRun]:
    """DEFAULT_BACKEND run with ``library`` registered each way (and with neither): the way,
    as the table names it -> the run."""
    ways = {"entry point, DUMPREF_PJRT=1 (priority -100)": {},
            "PJRT_NAMES_AND_LIBRARY_PATHS (jax's priority 400)": plain_registration(library),
            "neither (this package installed, the device not asked for)": {"DUMPREF_PJRT": "",
                                                                           "DUMPREF_PJRT_LIBRARY": ""}}
    return {way: run_jax(library, DEFAULT_BACKEND, trace=False, env=env) for way, env in ways.items()}


def default_backend_rows(runs: dict[str, JaxRun]) -> list[dict]:
    """One row per way: jax's default backend, the platforms it lists, whether stderr names the
    device."""
    rows = []
    for way, r in runs.items():
        default, platforms = r.printed()
        rows.append({"registered by": way, "jax.default_backend()": default,
                     "platforms of jax.devices()": ", ".join(platforms),
                     "stderr mentions dumpref": "yes" if "dumpref" in r.stderr else "no"})
    return rows
