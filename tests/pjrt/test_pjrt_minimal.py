"""The minimal plugin (plugin_c/minimal/minimal.c) as a reader meets it: built, registered with
jax's own PJRT_NAMES_AND_LIBRARY_PATHS, and asked what a reader asks first.  jaxlib aborts the
process when some entry points answer with an error, so the minimal plugin must fill those
even though no level needs them; the one-line edits show the abort."""
from __future__ import annotations

import pytest

from pytest_dumpref.pjrt import minimal
from pytest_dumpref.pjrt.build import build_plugin
from pytest_dumpref.pjrt.trace import run_jax


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return build_plugin(tmp_path_factory.mktemp("minimal"), minimal=True).path


def test_a_readers_first_prints_of_device_and_memory_survive(library):
    code = ("d = jax.devices('dumpref')[0]\n"
            "print(repr(d), str(d))\n"
            "print(repr(d.default_memory()), str(d.default_memory()))\n"
            "print(d.addressable_memories(), [m.kind for m in d.addressable_memories()])\n"
            "print(d.memory_stats())\n")
    run = run_jax(library, code, trace=False, env=minimal.plain_registration(library))
    assert run.ok, run.why
    assert run.stdout.splitlines()[-4:] == [
        "MinimalDevice(id=0) dumpref:0",
        "MinimalMemory(id=0, kind=hbm) dumpref:0 memory hbm",
        "[MinimalMemory(id=0, kind=hbm)] ['hbm']",
        "None",                                  # Device_MemoryStats UNIMPLEMENTED: jax says None
    ]


@pytest.mark.parametrize("edit", [e for e in minimal.EDITS if e.then], ids=lambda e: e.name)
def test_each_entry_point_filled_because_jaxlib_aborts_does_abort_when_knocked_out(edit, tmp_path):
    result = minimal.run_edit(edit, tmp_path)
    assert result.returncode == -6 and not result.checks_passed, (result.returncode, result.why)
    assert result.why.startswith("SIGABRT"), result.why
    knocked = {"PJRT_" + n for n in edit.find.replace("SLOT(", " ").replace("),", " ").split()} - \
              {"PJRT_" + n for n in edit.replace.replace("SLOT(", " ").replace("),", " ").split()}
    assert knocked <= set(minimal.FILLED_BECAUSE_JAXLIB_ABORTS), knocked
