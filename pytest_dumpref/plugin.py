"""pytest hooks only: options, markers, the ``evidence`` fixture.  Each hands off to a domain
object (``session.DumprefSession``), so the rules are testable without pytest.

This is the core, and needs no compiler: the fixtures that compile (``dump``, ``unfused``,
``timing``, ``pjrt_plugin``, ``pjrt_map``) and what jax says about the machine live in
:mod:`pytest_dumpref.jax_fixtures`, registered below and speaking to the core through the
hooks of :mod:`pytest_dumpref.hookspec`.

Records travel as ``user_properties`` of the test reports (the channel junitxml uses),
so under pytest-xdist they reach the controller, which alone writes the write-up.
"""
from __future__ import annotations

import json
import os
import warnings
import re
from pathlib import Path

import pytest

from . import config as dumpref_config
from .claims import ClaimError, Evidence, varies
from .recording import RecordingPlan, path_for
from .session import FINDING, DumprefSession, Machine, MarkerError, parse_claim_marker, parse_provenance_marker
from .writeup import WriteupError

# the compiler's fixtures and hooks: a plugin of their own (-p no:pytest_dumpref.jax_fixtures
# leaves them out), imported here so that installing pytest-dumpref gives them
pytest_plugins = ["pytest_dumpref.jax_fixtures"]

_SESSION_KEY = pytest.StashKey[DumprefSession]()
_RECORD_KEY = pytest.StashKey["object"]()
_EVIDENCE_KEY = pytest.StashKey[Evidence]()
_PROPERTY = "dumpref"

MARKERS = {
    "claim": "claim(text, *, title=None, section=None): this test is a claim of the write-up; text is "
             "the sentence it states, title its heading (default: the test's name as words)",
    "provenance": "provenance(*, dtype, shapes, method, chip=None): what the claim was measured on and how",
    "benchmark_tolerance": "benchmark_tolerance(rel): --dumpref-check compares this claim's pytest-benchmark "
                           "times within a relative tolerance instead of by their noise",
    "platform": "platform(name): this claim's evidence needs the jax platform name (\"tpu\"): measured "
                "there and recorded, replayed from its recording elsewhere (--dumpref-record)",
}


def pytest_addhooks(pluginmanager):
    from . import hookspec
    pluginmanager.add_hookspecs(hookspec)


def _machine(config) -> Machine:
    """What the extensions say about the machine, through the hooks of hookspec.py."""
    hook = config.hook

    def rows(rootdir):
        out: dict = {}
        for r in reversed(hook.pytest_dumpref_environment(rootdir=rootdir)):  # first registered wins
            out.update(r or {})
        return out
    return Machine(rows=rows, chip=lambda backend: hook.pytest_dumpref_chip(backend=backend),
                   transient_options=frozenset(n for ns in hook.pytest_dumpref_transient_options() for n in ns or ()))


def _extension_fields(config) -> list:
    return [tuple(f) for fs in config.hook.pytest_dumpref_environment_fields() for f in fs or ()]


def pytest_addoption(parser):
    group = parser.getgroup("dumpref", "pytest-dumpref: claims about what the compiler did")
    group.addoption("--dumpref-report", metavar="PATH", default=None,
                    help="render the passing claims into a Markdown write-up at PATH")
    group.addoption("--dumpref-check", metavar="PATH", default=None,
                    help="re-run the claims and fail unless they reproduce the write-up at PATH")
    group.addoption("--dumpref-record", choices=("none", "once", "all"), default=None,
                    help="claims marked platform(name): 'once' (default) measures them live where jax's "
                         "default backend is that platform, recording those without a recording, and "
                         "replays them elsewhere; 'all' records every one again (on the platform only); "
                         "'none' replays even on the platform")


def _pyproject(config):
    return config.inipath if config.inipath and config.inipath.name == "pyproject.toml" \
        else config.rootpath / "pyproject.toml"


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    try:
        cfg = dumpref_config.load(_pyproject(config))
        cfg.environment_fields += _extension_fields(config)
        cfg.evidence_folders = config.hook.pytest_dumpref_evidence_folders()
        config.stash[_SESSION_KEY] = DumprefSession(
            cfg, config.rootpath, config.getoption("dumpref_report"), config.getoption("dumpref_check"),
            _machine(config))
    except (dumpref_config.ConfigError, WriteupError) as e:
        raise pytest.UsageError(f"pytest-dumpref: {e}") from None
    for name in cfg.sections:  # the sections of [tool.dumpref] are markers too
        config.addinivalue_line("markers", f"{name}: {cfg.section_word}: {cfg.section_title(name)} (a claim's section)")
    _enable_assertion_pass_hook(config)
    _quiet_benchmark_compare(config)
    _claims_for_study_markers(config, cfg)
    config.pluginmanager.register(_RunHooks(config), "dumpref-run")
    basetemp = config.getoption("basetemp", None)
    if basetemp:  # a write-up's Reproduce lines use --basetemp=dumpref-evidence/<claim>; pytest
        # creates only the last folder of --basetemp, so the parent is made here
        (config.invocation_params.dir / basetemp).parent.mkdir(parents=True, exist_ok=True)


def _enable_assertion_pass_hook(config) -> None:
    """"A claim asserts" is counted with pytest's pytest_assertion_pass hook, which assertion
    rewriting calls only with the ini option enable_assertion_pass_hook: it is switched on
    here, before any test module is rewritten (pytest reads it per module it rewrites)."""
    if not config.getini("enable_assertion_pass_hook"):
        # pytest has no public way to set an ini value from a plugin; rewriting reads it
        # through getini, which answers from this cache
        config._inicache["enable_assertion_pass_hook"] = True


def _claims_for_study_markers(config, cfg) -> None:
    """`pytest -m fusion` with no path: the claims are searched too, since that is where the
    study markers are.  Only when [tool.dumpref] claims names the claim paths, no path was
    given, and -m selects by study: it matches a test marked with a section and not a test
    with no marker (so `-m "not fusion"` runs what it ran before)."""
    markexpr = config.getoption("markexpr", "") or ""
    if not markexpr or not cfg.claims or config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    if not _selects_a_study(markexpr, cfg.sections):
        return
    for path in cfg.claims:
        full = config.rootpath / path
        if full.exists() and not any(Path(a).resolve() == full.resolve() for a in config.args):
            config.args.append(str(full))


def _selects_a_study(markexpr: str, sections: list[str]) -> bool:
    try:  # -m's own parser: pytest exposes no public one, and a copy would drift from it
        from _pytest.mark.expression import Expression
        expr = Expression.compile(markexpr)
    except Exception:  # noqa: BLE001 - a bad -m is pytest's to report, with its own message
        return False
    def matches(markers):
        return expr.evaluate(lambda name, **kwargs: name in markers)
    return not matches(set()) and any(matches({s}) for s in sections)


def _session(config) -> DumprefSession:
    return config.stash[_SESSION_KEY]


def pytest_collection_modifyitems(session, config, items):
    """Marker arguments are checked before anything runs: a usage error names the test."""
    for item in items:
        marker = item.get_closest_marker("claim")
        if marker is None:
            continue
        try:
            claim = parse_claim_marker(item.nodeid, marker.args, marker.kwargs)
            prov_marker = item.get_closest_marker("provenance")
            prov = parse_provenance_marker(item.nodeid, prov_marker.args, prov_marker.kwargs) if prov_marker else None
            names = [m.name for m in item.iter_markers()]
            record = _session(config).new_record(item.nodeid, claim, prov, names)
        except MarkerError as e:
            raise pytest.UsageError(f"pytest-dumpref: {e}") from None
        # the line the test is defined at: a file's claims keep their order in any selection
        # (a run of one claim by its node id collects it alone, where a count would make it
        # the first of its file) and in every xdist worker; parametrized ones tie and their
        # node ids decide
        record.order = int(item.location[1] or 0)
        item.stash[_RECORD_KEY] = record


@pytest.fixture
def dumpref_recording(request) -> RecordingPlan | None:
    """For a claim marked ``platform(name)``: where its recording is, the mode, the platform and
    the chip its provenance declares (the fixtures that compile decide live or replay);
    None for any other test."""
    marker = request.node.get_closest_marker("platform")
    if marker is None:
        return None
    if len(marker.args) != 1 or not isinstance(marker.args[0], str) or marker.kwargs:
        raise pytest.UsageError(f"pytest-dumpref: {request.node.nodeid}: @pytest.mark.platform takes one "
                                f"platform name, as jax.default_backend() says it (\"tpu\")")
    cfg = _session(request.config).config
    prov = request.node.get_closest_marker("provenance")
    return RecordingPlan(path_for(request.config.rootpath / cfg.recordings, request.node.nodeid),
                         request.config.getoption("dumpref_record"), marker.args[0], request.node.nodeid,
                         prov.kwargs.get("chip") if prov else None, request.config.rootpath)


@pytest.fixture
def evidence(request) -> Evidence:
    """Records what backs the claim: number, excerpt, table, file, figure, note."""
    record = request.node.stash.get(_RECORD_KEY, None)
    if record is not None:
        return record.evidence
    if _EVIDENCE_KEY not in request.node.stash:  # an ordinary test may use it too; nothing checks it
        request.node.stash[_EVIDENCE_KEY] = Evidence()
    return request.node.stash[_EVIDENCE_KEY]


BENCHMARK_UNDER_XDIST = (
    "its evidence is a pytest-benchmark measurement, and pytest-benchmark switches itself off "
    "under pytest-xdist, so nothing was measured: run this claim without -n (for example "
    "`-p no:xdist`, or `-n 0`)")


def _benchmark_session(config):
    # pytest-benchmark offers no public way to its session object; it keeps it here
    return getattr(config, "_benchmarksession", None)


def _benchmark_cannot_measure(item) -> str | None:
    """Why a claim's ``benchmark`` fixture will measure nothing, before its body runs."""
    if "benchmark" not in getattr(item, "fixturenames", ()):
        return None
    bs = _benchmark_session(item.config)
    if getattr(bs, "xdist_warning", False) or os.environ.get("PYTEST_XDIST_WORKER"):
        return BENCHMARK_UNDER_XDIST
    if bs is not None and (bs.disabled or bs.skip):
        return ("its evidence is a pytest-benchmark measurement and pytest-benchmark will not measure "
                "(--benchmark-disable or --benchmark-skip): run it without those options")
    return None


def _benchmark_tolerance(item) -> float | None:
    marker = item.get_closest_marker("benchmark_tolerance")
    if marker is None:
        return _session(item.config).config.benchmark_tolerance
    tol = marker.args[0] if marker.args else marker.kwargs.get("rel")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or tol < 0:
        raise ClaimError(f"@pytest.mark.benchmark_tolerance takes a relative tolerance >= 0, got {tol!r}")
    return float(tol)


def _record_benchmark(item, record) -> str | None:
    """pytest-benchmark's statistics as evidence; a sentence when the benchmark did not measure.

    The median is a number with its noise (its standard error over the benchmark's rounds, from
    their interquartile range), so the check judges it as it judges any measured value, unless
    the claim (``@pytest.mark.benchmark_tolerance(rel)``) or ``[tool.dumpref]
    benchmark_tolerance`` declares a tolerance.  The mean is shown and not compared: a round
    the machine interrupted weighs on it without bound (one run here: mean 65 us, median 32 us,
    max 8,242 us), so it does not reproduce even where the median does; nor are the counts of
    rounds and iterations, which pytest-benchmark chooses from the time it has."""
    bench = getattr(item, "funcargs", {}).get("benchmark")
    if bench is None:
        return None
    meta = getattr(bench, "stats", None)
    stats = getattr(meta, "stats", None)
    if meta is None or stats is None or not getattr(stats, "rounds", 0):
        return _benchmark_cannot_measure(item) or (
            "its evidence is a pytest-benchmark measurement and the benchmark did not run")
    n = stats.rounds
    tol = _benchmark_tolerance(item)
    group = meta.group or meta.name
    name = f"pytest-benchmark median, {group}"
    if tol is None:
        noise = 1.2533 * (stats.iqr / 1.349) / n ** 0.5 if n >= 4 else stats.median
        record.evidence.number(name, stats.median, unit="s", noise=noise)
    else:
        record.evidence.number(name, stats.median, unit="s", tolerance=tol)
    record.evidence.table(f"pytest-benchmark run, {group} (not compared: the mean weighs interrupted "
                          "rounds, and pytest-benchmark chooses the counts)",
                          [{"rounds": varies(n), "iterations per round": varies(meta.iterations),
                            "mean (s)": varies(stats.mean), "min (s)": varies(stats.min),
                            "max (s)": varies(stats.max)}])
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    record = item.stash.get(_RECORD_KEY, None)
    if record is not None:
        why = _benchmark_cannot_measure(item)
        if why:  # before the body: its own assertions on benchmark.stats would hide this
            pytest.fail(f"claim {item.nodeid} fails: {why}", pytrace=False)
        record.assertions = 0
    result = yield  # a failing assertion propagates from here as usual
    if record is not None:
        # pytest keeps its TempPathFactory here (no public accessor outside a fixture);
        # evidence is located relative to its basetemp
        _session(item.config).basetemp = item.config._tmp_path_factory.getbasetemp()
        try:
            problems = [f"claim {item.nodeid} fails: {p}" for p in filter(None, [_record_benchmark(item, record)])]
            if record.assertions == 0 and _rewritten_without_pass_hook(item):
                problems.append(f"claim {item.nodeid} cannot be judged: its module was loaded from a .pyc "
                                "that pytest's assertion rewriting wrote without the assertion-pass hook "
                                "(a run without pytest-dumpref?); delete that folder's __pycache__ and run again")
            problems = problems or _session(item.config).judge(record)
        except ClaimError as e:
            problems = [f"claim {item.nodeid} fails: {e}"]
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
    return result


def _rewritten_without_pass_hook(item) -> bool:
    code = getattr(getattr(item, "obj", None), "__code__", None)
    names = set(code.co_names) if code else set()
    return "_format_explanation" in names and "_check_if_assertion_pass_impl" not in names


def pytest_assertion_pass(item, lineno, orig, expl):
    """Counts the passing assert statements of a claim's test (its call phase only: a
    fixture's assertions set the stage, they do not decide the claim)."""
    record = item.stash.get(_RECORD_KEY, None)
    if record is not None and record.assertions is not None:
        record.assertions += 1


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
        if report.when == "call" and report.failed and call.excinfo is not None \
                and call.excinfo.errisinstance(AssertionError):
            # --dumpref-check: a failure the check does not judge the write-up by (a measured
            # conclusion on another machine, a claim the write-up does not establish) is
            # reported as a finding, the test skipped with it
            why = _session(item.config).failure_not_judged(record.nodeid, record.evidence.items, reason)
            if why is not None:
                report.outcome = "skipped"
                report.longrepr = (str(item.path), (item.location[1] or 0) + 1, FINDING + why)
                outcome, reason = "skipped", FINDING + why
        data = _session(item.config).finalize(record, outcome, reason)
        report.user_properties.append((_PROPERTY, json.dumps(data, sort_keys=True)))
    if record is not None and report.when == "call":
        record.assertions = None  # teardown's assertions are not the claim's
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
        self.collection_errors = 0

    def pytest_collectreport(self, report):
        if report.failed:
            self.collection_errors += 1

    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == _PROPERTY:
                _session(self.config).collect(json.loads(value))

    def pytest_sessionfinish(self, session, exitstatus):
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: the controller writes
        opt = self.config.getoption
        # A run that stopped early (-x, --maxfail) or was narrowed may have left claims out.
        narrowed = bool(opt("keyword") or opt("markexpr") or opt("lf", False) or opt("deselect", None)
                        or opt("stepwise", False) or session.shouldfail or session.shouldstop
                        or self.collection_errors)
        # Ctrl-C, a usage or collection error, an internal error: the run did not complete
        completed = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        dsession = _session(self.config)
        dsession.finish(completed, narrowed, _rootdir_relative_args(self.config))
        if dsession.failed() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        dsession = _session(config)
        for line in dsession.summary_lines(verbose=config.getoption("verbose") > 0):
            terminalreporter.write_line(line, red=line.startswith(("dumpref check FAILED", "dumpref FAILED")))
        if dsession.failed():
            # counted in pytest's own last line ("35 passed, 1 dumpref check failed"), whose
            # colour then is not green; pytest_unconfigure repeats what failed after it
            terminalreporter.stats.setdefault("dumpref check failed" if dsession.written is not None
                                              else "dumpref failed", []).append(dsession)

    def pytest_unconfigure(self, config):
        line = _session(config).failure_line() if not hasattr(config, "workerinput") else None
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if line and reporter is not None:
            reporter.write_line(line, red=True, bold=True)


_NO_SAVED_RUN = pytest.StashKey[str]()
_WARNING_FILTERS = pytest.StashKey[list]()
_NO_FILES = "Can't compare. No benchmark files in "


def _quiet_benchmark_compare(config) -> None:
    """--benchmark-compare with no saved run: pytest-benchmark warns while it configures, and
    the warning lands in the warnings summary.  It is held back until the session starts, where
    pytest_sessionstart below says it in one line."""
    if config.getoption("benchmark_compare", None):
        config.stash[_WARNING_FILTERS] = warnings.filters[:]
        warnings.filterwarnings("ignore", message=re.escape(_NO_FILES))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    saved = session.config.stash.get(_WARNING_FILTERS, None)
    if saved is None:
        return
    warnings.filters[:] = saved
    bs = getattr(session.config, "_benchmarksession", None)
    if bs is None or not bs.compare or hasattr(session.config, "workerinput"):
        return
    try:
        found = list(bs.storage.load() if bs.compare is True else bs.storage.load(bs.compare))
    except Exception:  # noqa: BLE001 - a broken storage is pytest-benchmark's to report
        return
    if not found:
        session.config.stash[_NO_SAVED_RUN] = (
            f"dumpref: no saved pytest-benchmark run in {bs.storage} to compare with: this run's "
            "timings are shown alone (save one with --benchmark-autosave)")


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    line = config.stash.get(_NO_SAVED_RUN, None)
    if line:
        terminalreporter.write_line(line)
