"""pytest hooks only: options, markers, fixtures.  Each hands off to a domain object.

(Being filled in by the core work; fixture contracts below are stable.)
"""
from __future__ import annotations

import pytest

from .claims import Evidence


@pytest.fixture
def evidence(request) -> Evidence:
    ev = request.node.stash.get(_EVIDENCE_KEY, None)
    if ev is None:
        ev = Evidence()
        request.node.stash[_EVIDENCE_KEY] = ev
    return ev


_EVIDENCE_KEY = pytest.StashKey[Evidence]()

# ---- xla room fixtures (domain: pytest_dumpref.xla.dump.DumpSession) -------------------


@pytest.fixture
def _dump_session(tmp_path, evidence):
    from .xla.dump import DumpSession
    return DumpSession(tmp_path / "xla-dumps", evidence)


@pytest.fixture
def dump(_dump_session):
    """dump(fn, *args, passes=".*", **compiler_options) -> Dump (every-pass XLA dump)."""
    return _dump_session.dump


@pytest.fixture
def unfused(_dump_session):
    """unfused(fn, *args, passes=[...], **compiler_options) -> Dump with those passes disabled."""
    return _dump_session.unfused


# ---- pjrt room fixtures (domain: pytest_dumpref.pjrt.build) -----------------------------


@pytest.fixture(scope="session")
def _pjrt_built(tmp_path_factory):
    from .pjrt.build import build_plugin
    return build_plugin(tmp_path_factory.mktemp("pjrt-plugin"))


@pytest.fixture
def pjrt_plugin(_pjrt_built, evidence):
    """The freshly built PJRT plugin (path, build command, hash, cffi API, jax runner)."""
    _pjrt_built.record(evidence)
    return _pjrt_built
