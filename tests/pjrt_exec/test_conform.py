"""A public PJRT conformance harness run against the plugin: `python -m pypjrt.conform LIB`
(pypjrt 0.1.1).  It compiles StableHLO as MLIR text, so this is also the check that
PJRT_Client_Compile takes text as well as bytecode.  No check may FAIL; what the plugin does
not offer is reported UNSUPPORTED, and that list is kept here so that a regression (or a
newly offered capability) shows as a diff."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_dumpref.pjrt.build import build_plugin

pytest.importorskip("pypjrt.conform")

#: What the dumpref device does not implement, as the harness names it.
UNSUPPORTED = [
    "client.topology_description",
    "compile.compiled_memory_stats",
    "compile.cost_analysis",
    "compile.deserialize_and_load",
    "compile.optimized_program",
    "compile.serialize",
    "device.clear_memory_stats",
    "device.execute_context",
    "topology.create_by_name",
    "topology.from_client",
    "transfer.async_host_to_device",
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conform")
    library = build_plugin(folder / "plugin").path
    out = folder / "report.json"
    done = subprocess.run([sys.executable, "-m", "pypjrt.conform", str(library), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert out.exists(), f"conform wrote no report (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(out.read_text()), done


def by_result(report, result):
    return sorted(c["id"] for c in report["checks"] if c["result"] == result)


def test_conform_has_no_failures(report):
    data, done = report
    failures = [(c["id"], c["detail"]) for c in data["checks"] if c["result"] == "fail"]
    assert failures == [], failures
    assert done.returncode == 0, done.stdout[-2000:]


def test_conform_compiles_and_runs_mlir_text(report):
    data, _ = report
    results = {c["id"]: c["result"] for c in data["checks"]}
    assert results["compile.stablehlo_text"] == "pass"
    executes = [k for k in results if k.startswith("execute.")]
    assert executes and all(results[k] == "pass" for k in executes), executes


def test_conform_unsupported_list_is_the_known_one(report):
    data, _ = report
    assert by_result(data, "unsupported") == UNSUPPORTED
