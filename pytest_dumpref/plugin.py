"""pytest hooks only: options, markers, fixtures.  Each hands off to a domain object
(``session.DumprefSession``), so the rules are testable without pytest.

Records travel as ``user_properties`` of the test reports (the channel junitxml uses),
so under pytest-xdist they reach the controller, which alone writes the write-up.
"""
from __future__ import annotations

import json

import pytest

from . import config as dumpref_config
from .claims import ClaimError, Evidence
from .session import DumprefSession, MarkerError, parse_claim_marker, parse_provenance_marker
from .writeup import WriteupError

_SESSION_KEY = pytest.StashKey[DumprefSession]()
_RECORD_KEY = pytest.StashKey["object"]()
_EVIDENCE_KEY = pytest.StashKey[Evidence]()
_PROPERTY = "dumpref"

MARKERS = {
    "claim": "claim(text, *, section=None): this test is a claim of the write-up; text is the sentence it states",
    "provenance": "provenance(*, dtype, shapes, method, chip=None): what the claim was measured on and how",
    "passes": "study: a compile, pass by pass (a claim's default section)",
    "fusion": "study: one fusion decision, reconstructed and verified (a claim's default section)",
    "pjrt": "study: the dumpref PJRT device (a claim's default section)",
}


def pytest_addoption(parser):
    group = parser.getgroup("dumpref", "pytest-dumpref: claims about what the compiler did")
    group.addoption("--dumpref-report", metavar="PATH", default=None,
                    help="render the passing claims into a Markdown write-up at PATH")
    group.addoption("--dumpref-check", metavar="PATH", default=None,
                    help="re-run the claims and fail unless they reproduce the write-up at PATH")


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    pyproject = config.inipath if config.inipath and config.inipath.name == "pyproject.toml" \
        else config.rootpath / "pyproject.toml"
    try:
        cfg = dumpref_config.load(pyproject)
        config.stash[_SESSION_KEY] = DumprefSession(
            cfg, config.rootpath, config.getoption("dumpref_report"), config.getoption("dumpref_check"))
    except (dumpref_config.ConfigError, WriteupError) as e:
        raise pytest.UsageError(f"pytest-dumpref: {e}") from None
    config.pluginmanager.register(_RunHooks(config), "dumpref-run")
    basetemp = config.getoption("basetemp", None)
    if basetemp:  # a write-up's Reproduce lines use --basetemp=dumpref-evidence/<claim>; pytest
        # creates only the last folder of --basetemp, so the parent is made here
        (config.invocation_params.dir / basetemp).parent.mkdir(parents=True, exist_ok=True)


def _session(config) -> DumprefSession:
    return config.stash[_SESSION_KEY]


def pytest_collection_modifyitems(session, config, items):
    """Marker arguments are checked before anything runs: a usage error names the test."""
    for index, item in enumerate(items):
        marker = item.get_closest_marker("claim")
        if marker is None:
            continue
        try:
            claim = parse_claim_marker(item.nodeid, marker.args, marker.kwargs)
            prov_marker = item.get_closest_marker("provenance")
            prov = parse_provenance_marker(item.nodeid, prov_marker.args, prov_marker.kwargs) if prov_marker else None
            names = {m.name for m in item.iter_markers()}
            item.stash[_RECORD_KEY] = _session(config).new_record(item.nodeid, claim, prov, names)
            item.stash[_RECORD_KEY].order = index  # every xdist worker collects the same list
        except MarkerError as e:
            raise pytest.UsageError(f"pytest-dumpref: {e}") from None


@pytest.fixture
def evidence(request) -> Evidence:
    """Records what backs the claim: number, excerpt, table, file, figure, note."""
    record = request.node.stash.get(_RECORD_KEY, None)
    if record is not None:
        return record.evidence
    if _EVIDENCE_KEY not in request.node.stash:  # an ordinary test may use it too; nothing checks it
        request.node.stash[_EVIDENCE_KEY] = Evidence()
    return request.node.stash[_EVIDENCE_KEY]


def _record_benchmark(item, record) -> None:
    bench = getattr(item, "funcargs", {}).get("benchmark")
    meta = getattr(bench, "stats", None)
    stats = getattr(meta, "stats", None)
    if stats is None or not getattr(stats, "rounds", 0):
        return  # benchmarks disabled (e.g. under xdist): nothing was measured
    fields = ["min", "max", "mean", "stddev", "median", "iqr", "rounds", "iterations"]
    rows = [["statistic", "value"]] + [[f, getattr(stats, f, None)] for f in fields]
    record.evidence.table(f"pytest-benchmark statistics, group {meta.group or meta.name} (seconds)", rows)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield  # a failing assertion propagates from here as usual
    record = item.stash.get(_RECORD_KEY, None)
    if record is not None:
        # pytest keeps its TempPathFactory here; evidence is located relative to its basetemp
        _session(item.config).basetemp = item.config._tmp_path_factory.getbasetemp()
        try:
            _record_benchmark(item, record)
            problems = _session(item.config).judge(record)
        except ClaimError as e:
            problems = [f"claim {item.nodeid} fails: {e}"]
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    record = item.stash.get(_RECORD_KEY, None)
    if record is not None and (report.when == "call" or (report.when == "setup" and not report.passed)):
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        if report.when == "setup" and report.failed:
            outcome = "error"
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2]
        elif call.excinfo is not None:
            reason = call.excinfo.exconly()
        data = _session(item.config).finalize(record, outcome, reason)
        report.user_properties.append((_PROPERTY, json.dumps(data, sort_keys=True)))
    return report


def _rootdir_relative_args(config) -> list[str]:
    """The run's positional arguments as rootdir-relative node-id prefixes."""
    out = []
    for arg in config.args:
        path, sep, rest = str(arg).partition("::")
        full = (config.invocation_params.dir / path).resolve()
        try:
            rel = full.relative_to(config.rootpath.resolve()).as_posix()
        except ValueError:
            continue
        out.append(("" if rel == "." else rel) + (sep + rest if sep else ""))
    return out


class _RunHooks:
    """Hooks that need the run's session object: registered per run, the way junitxml
    registers its LogXML, so report hooks (which get no config) can reach it."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == _PROPERTY:
                _session(self.config).collect(json.loads(value))

    def pytest_sessionfinish(self, session, exitstatus):
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: the controller writes
        opt = self.config.getoption
        narrowed = bool(opt("keyword") or opt("markexpr") or opt("lf", False) or opt("deselect", None))
        dsession = _session(self.config)
        dsession.finish(narrowed, _rootdir_relative_args(self.config))
        if dsession.problems and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        for line in _session(config).summary_lines(verbose=config.getoption("verbose") > 0):
            terminalreporter.write_line(line, red=line.startswith("dumpref check FAILED"))


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    from .provenance import benchmark_machine_info
    machine_info.update(benchmark_machine_info())


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


@pytest.fixture(scope="session")
def pjrt_map(_pjrt_built):
    """The measured map of levels 1-3 (call order, knock-out needs), once per session."""
    from .pjrt.pjrt_map import measure_map
    return measure_map(_pjrt_built)
