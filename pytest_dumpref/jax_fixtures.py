"""The compiler's part of pytest-dumpref: the XLA dump fixtures (``dump``, ``unfused``), the
timing harness (``timing``), the PJRT device (``pjrt_plugin``, ``pjrt_map``) and what jax says
about the machine (its platform, the chip behind a backend, its versions and XLA_FLAGS), given
to the core through :mod:`pytest_dumpref.hookspec`.

``plugin.py`` registers this module (``pytest_plugins``); ``-p no:pytest_dumpref.jax_fixtures``
leaves the core alone.  Nothing here imports jax, the XLA or the PJRT rooms until a fixture runs
or the environment is captured (the end of a run): the hooks pytest calls as it starts only ask
whether jax is installed.  A hook that finds no jax adds nothing: the core renders and checks a
write-up in a process that cannot import jax.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys

import pytest

# rows of the environment table: (name, rule, rank); the core's rows rank 50 to 110
FIELDS = [("chip", "machine", 10), ("platform", "machine", 20), ("jax", "machine", 30),
          ("jaxlib", "machine", 40), ("numpy", "machine", 45), ("XLA_FLAGS", "", 90)]


def _jax():
    try:
        import jax
    except ImportError:
        return None
    return jax


@functools.lru_cache(maxsize=None)
def _jax_installed() -> bool:
    """Whether jax can be found, without importing it: the hooks that ask run in every pytest
    session as it starts, where importing jax costs seconds (and under GCC's AddressSanitizer
    jaxlib 0.12 aborts on import)."""
    try:
        return importlib.util.find_spec("jax") is not None
    except (ImportError, ValueError):   # a finder that refuses jax, as where it cannot be imported
        return False


@functools.lru_cache(maxsize=None)
def observed_chip(backend: str | None = None) -> str | None:
    """The chip behind ``backend`` (JAX's default backend when None); None without jax."""
    from .provenance import cpu_model_name

    jax = _jax()
    if jax is None:
        return None
    name = backend or jax.default_backend()
    if name == "cpu":  # jax calls every CPU just "cpu"
        return cpu_model_name()
    try:
        return str(jax.devices(name)[0].device_kind)
    except RuntimeError as e:  # backend not available in this process
        return f"unavailable ({name}: {e})"


@functools.lru_cache(maxsize=None)
def versions() -> dict:
    import jax
    import jaxlib
    import numpy   # the claims' inputs are numpy arrays: its generators and printing are numpy's

    out = {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", jaxlib.version.__version__),
           "numpy": numpy.__version__}
    if _libtpu_installed():   # the TPU's compiler and runtime: a version of their own
        import libtpu
        out["libtpu"] = str(getattr(libtpu, "__version__", "unknown"))
    return out


@functools.lru_cache(maxsize=None)
def _libtpu_installed() -> bool:
    try:
        return importlib.util.find_spec("libtpu") is not None
    except (ImportError, ValueError):
        return False


def pytest_dumpref_environment_fields():
    if not _jax_installed():
        return None   # no jax: no rows of it, not rows "(not set)"
    # libtpu's row only where it is installed: a CPU machine's table has no "(not set)" for it
    return FIELDS + [("libtpu", "machine", 42)] if _libtpu_installed() else FIELDS


def pytest_dumpref_environment(rootdir):
    jax = _jax()
    if jax is None:
        return None
    return {"platform": jax.default_backend(), "chip": observed_chip(None), **versions(),
            "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}


def pytest_dumpref_chip(backend):
    return observed_chip(backend)


def pytest_dumpref_transient_options():
    return ["xla_dump_to"]   # where the dump went is a temporary folder: not provenance


def pytest_dumpref_evidence_folders():
    return "dump folders" if _jax_installed() else None


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    """What pytest-benchmark's machine_info gains: the chip, jax's versions and flags."""
    jax = _jax()
    if jax is None:
        return
    machine_info.update({"dumpref": {"chip": observed_chip(None), "platform": jax.default_backend(),
                                     **versions(), "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
                                     "python_executable": sys.executable}})


# ---- xla room fixtures (domain: pytest_dumpref.xla.dump.DumpSession) -------------------


@pytest.fixture
def _dump_session(tmp_path, evidence, dumpref_recording):
    from .recording import RecordingError
    from .xla.dump import DumpSession
    problem = None
    try:
        recorded = _recorded_dumps(dumpref_recording, evidence) if dumpref_recording else None
    except RecordingError as e:
        problem = str(e)
    if problem:     # the claim cannot run: no recording to replay, or one it must not use
        pytest.fail(problem, pytrace=False)
    yield DumpSession(tmp_path / "xla-dumps", evidence, recorded)
    if recorded is not None and recorded.mode == "record" and recorded.recording.entries:
        recorded.recording.write()


THIS_RUN = {"replay": "replayed from the recording: nothing compiled",
            "live": "measured live on the chip (the recording left as it is)",
            "record": "measured live on the chip and recorded"}


def _recorded_dumps(plan, evidence):
    """How the dump fixtures treat a claim marked platform(name) (pytest_dumpref/recording.py):
    live, live and recorded, or replayed; and, as the claim's evidence, where and when its
    evidence was recorded and what this run did."""
    import datetime

    import jax

    from .claims import varies
    from .recording import Recording, check_chip, choose
    from .xla.dump import RecordedDumps
    mode = choose(plan.mode, plan.platform, jax.default_backend(), plan.path, plan.claim)
    if mode == "record":
        env = {k: v for k, v in versions().items() if k != "numpy"}
        recording = Recording(plan.path, plan.claim, plan.platform, observed_chip(plan.platform) or plan.platform,
                              env, datetime.date.today().isoformat())
    else:
        recording = Recording.open(plan.path, plan.claim)
        if recording.platform != plan.platform:
            from .recording import RecordingError
            raise RecordingError(f"{plan.claim}: its recording {plan.path} was made on {recording.platform}, "
                                 f"and the claim needs {plan.platform}")
    check_chip(recording, plan.declared_chip)
    evidence.table(f"where this claim's evidence was measured ({plan.platform}: recorded there, replayed elsewhere)",
                   [{"recording": plan.shown_path(), "chip": recording.chip, "recorded on": recording.recorded,
                     "recorded with": ", ".join(f"{k} {v}" for k, v in sorted(recording.environment.items())),
                     "this run": varies(THIS_RUN[mode])}])
    return RecordedDumps(mode, recording)


@pytest.fixture
def dump(_dump_session):
    """dump(fn, *args, passes=".*", **compiler_options) -> Dump (every-pass XLA dump)."""
    return _dump_session.dump


@pytest.fixture
def unfused(_dump_session):
    """unfused(fn, *args, passes=[...], **compiler_options) -> Dump with those passes disabled."""
    return _dump_session.unfused


# ---- timing (domain: pytest_dumpref.timing) -------------------------------------------------


@pytest.fixture
def timing(evidence):
    """timing(fn, *args, variants={name: compiler_options}, aa=True, **plan) -> TimingResult.

    Times ``fn`` compiled once per variant in a pinned, single-threaded subprocess, in
    interleaved rounds, with an A/A copy of the first variant, and records the per-call table
    (each time with its noise) and the method as the claim's evidence.  State a difference
    with its noise: ``evidence.number("extra", r.difference(a, b), noise=r.difference_noise(a, b))``."""
    from .timing import time_variants

    def run(fn, *args, variants, aa=True, **plan):
        result = time_variants(fn, args, variants, aa=aa, **plan)
        result.record(evidence)
        return result
    return run


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


@pytest.fixture(scope="session")
def pjrt_map(_pjrt_built):
    """The measured map of levels 1-3 (call order, knock-out needs), once per session."""
    from .pjrt.pjrt_map import measure_map
    return measure_map(_pjrt_built)
