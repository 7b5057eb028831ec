"""The hooks of pytest-dumpref's core, for its extensions.

The core (markers, session, rendering, check, configuration, provenance) needs no compiler: what
the machine is beyond Python and the OS, which chip a backend runs on, and which observed
options are temporary paths come from the plugins that implement these hooks.  The XLA dump
fixtures, the PJRT device and the timing harness do so in :mod:`pytest_dumpref.jax_fixtures`;
a project's ``conftest.py`` may too.  (pytest-benchmark's ``pytest_benchmark_update_machine_info``
is the model.)  Every hook is optional: with none implemented the write-up's environment holds
the core's rows and the chip is the processor's model name.
"""
from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_dumpref_environment_fields() -> list[tuple[str, str, int]] | None:
    """Rows this plugin adds to the write-up's environment table: ``(name, rule, rank)`` each.

    ``rule`` says how a re-run may differ: ``"machine"`` (a fact of the machine, reported side
    by side and not a failure), ``"varies"`` (declared as varying between runs) or ``""``
    (compared exactly).  Rows appear in the order of their ``rank``; the core's are python 50,
    os 60, cpu_count 70, caches 80, call_timer 90, commit 100, dirty 110."""


@pytest.hookspec
def pytest_dumpref_environment(rootdir) -> dict | None:
    """The values of this plugin's environment rows for the run (captured once per process)."""


@pytest.hookspec(firstresult=True)
def pytest_dumpref_chip(backend: str | None) -> str | None:
    """The chip behind ``backend`` (a platform name a claim's evidence observed; None: the
    default one), or None to leave it to the next plugin (the core answers the CPU's model)."""


@pytest.hookspec
def pytest_dumpref_transient_options() -> list[str] | None:
    """Names of compiler options a claim observes that are temporary paths of the run (where a
    dump went), not provenance: they are left out of the write-up."""


@pytest.hookspec(firstresult=True)
def pytest_dumpref_evidence_folders() -> str | None:
    """What the folders a claim's Reproduce command leaves hold, in words for the write-up's
    environment paragraph (the XLA fixtures: ``"dump folders"``)."""
