"""``python -m pytest_dumpref traffic FILE``: run as a user would, in a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from pytest_dumpref import examples
from pytest_dumpref.xla import xla_private


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pytest_dumpref", "traffic", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def scan_dump(tmp_path_factory):
    """A dump folder of the scan program; returns its optimized module file."""
    d = tmp_path_factory.mktemp("scan-dump")
    args = (np.ones((4, 32), np.float32), np.ones((10, 4, 32), np.float32),
            np.ones((32, 32), np.float32))
    jax.jit(examples.scan_rnn).lower(*args).compile(
        compiler_options={"xla_dump_to": str(d), "xla_dump_hlo_as_text": True})
    return next(d.glob("*.cpu_after_optimizations.txt"))


def test_json_report(scan_dump):
    r = run_cli(scan_dump, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    xla = xla_private.cost_analysis(scan_dump.read_text())
    assert data["module"] == "jit_scan_rnn"
    assert data["bytes_accessed"] == data["bytes_read"] + data["bytes_written"] == \
        sum((k["bytes_read"] + k["bytes_written"]) * k["executions"] for k in data["kernels"])
    assert data["xla"]["bytes_accessed"] == xla["bytes accessed"]
    assert data["xla"]["flops"] == xla["flops"]
    # the sibling buffer assignment was found and read
    assert data["buffer_assignment"].endswith("-buffer-assignment.txt") and data["temp_bytes"] > 0
    named = {d["instruction"] for d in data["discrepancies"]}
    assert any(n.startswith("while") for n in named)
    explained = sum(d["ours"] - d["xla"] for d in data["discrepancies"])
    assert data["bytes_accessed"] - explained == xla["bytes accessed"]


def test_table_report(scan_dump):
    r = run_cli(scan_dump)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "bytes accessed" in out and "XLA bytes accessed" in out and "XLA flops" in out
    assert "known_trip_count=10" in out
    assert "while" in out and "kLoop" in out


def test_no_xla_touches_no_private_api(scan_dump):
    r = run_cli(scan_dump, "--json", "--no-xla")
    assert r.returncode == 0, r.stderr
    assert "xla" not in json.loads(r.stdout)


@pytest.mark.parametrize("kind", ["truncated", "not-hlo", "missing", "binary", "folder",
                                  "empty", "undefined-operand"])
def test_bad_input_is_one_line_naming_the_file(tmp_path, scan_dump, kind):
    text = scan_dump.read_text()
    target = tmp_path / f"{kind}.txt"
    if kind == "truncated":
        target.write_text(text[: len(text) * 2 // 3])
    elif kind == "not-hlo":
        target.write_text("This is a write-up, not a module.\n")
    elif kind == "binary":
        target.write_bytes(b"\x7fELF\x00\xff\xfe" * 50)
    elif kind == "folder":
        target.mkdir()
    elif kind == "empty":
        target.write_text("")
    elif kind == "undefined-operand":
        target.write_text(text.replace("copy(%h0.1)", "copy(%h0.missing)"))
    r = run_cli(target)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(target) in errors[0], r.stderr
    assert r.stdout == ""
