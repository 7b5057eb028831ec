"""The minimal plugin (plugin_c/minimal/minimal.c) as a reader meets it: built, registered with
jax's own PJRT_NAMES_AND_LIBRARY_PATHS, and used the way a first user does.  jaxlib aborts the
process when some entry points answer with an error, so what a reader's first steps need must
be filled (levels 1 and 2 take those steps); the one-line edit shows one abort."""
from __future__ import annotations

import pytest

from pytest_dumpref.pjrt import minimal
from pytest_dumpref.pjrt.build import build_plugin
from pytest_dumpref.pjrt.trace import run_jax


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return build_plugin(tmp_path_factory.mktemp("minimal"), minimal=True).path


def test_a_readers_first_steps_survive(library):
    code = ("d = jax.devices('dumpref')[0]\n"
            "print(repr(d), str(d))\n"
            "print(repr(d.default_memory()), str(d.default_memory()))\n"
            "print(d.addressable_memories(), [m.kind for m in d.addressable_memories()])\n"
            "print(d.memory_stats())\n"
            "x = jax.device_put(np.arange(3, dtype=np.float32), d)\n"
            "print(x.block_until_ready(), x.is_ready(), jax.block_until_ready(x).sharding)\n"
            "x.delete()\n"
            "print(x.is_deleted())\n")
    run = run_jax(library, code, trace=False, env=minimal.plain_registration(library))
    assert run.ok, run.why
    assert run.stdout.splitlines()[-6:] == [
        "MinimalDevice(id=0) dumpref:0",
        "MinimalMemory(id=0, kind=hbm) dumpref:0 memory hbm",
        "[MinimalMemory(id=0, kind=hbm)] ['hbm']",
        "None",                                  # Device_MemoryStats UNIMPLEMENTED: jax says None
        "[0. 1. 2.] True SingleDeviceSharding(device=MinimalDevice(id=0), memory_kind=hbm)",
        "True",
    ]


def test_a_memory_whose_to_string_fails_aborts_the_host(tmp_path):
    edit = next(e for e in minimal.EDITS if e.name == "Memory_ToString answering UNIMPLEMENTED")
    result = minimal.run_edit(edit, tmp_path)
    assert result.returncode == -6 and not result.checks_passed, (result.returncode, result.why)
    assert result.why.startswith("SIGABRT"), result.why
