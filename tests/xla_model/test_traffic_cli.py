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
        # cut inside the entry computation's ROOT line: two thirds of the text, the cut used
        # before, can land between two computations, and a module whose last computation is
        # whole is valid HLO (XLA takes the last computation as the entry), so whether it
        # failed depended on the dump's length
        root = text.rindex("ROOT ")
        target.write_text(text[: root + 12])
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


@pytest.mark.parametrize("damage", ["no allocation", "bad value line"])
def test_a_damaged_buffer_assignment_is_named_by_its_own_file(tmp_path, scan_dump, damage):
    """The sibling -buffer-assignment.txt is read with the module: what is wrong with it is
    said of its own file (and line), not of the module's; one with its header and no
    allocation (cut short) is refused, not read as a program without temporaries."""
    module = tmp_path / scan_dump.name
    module.write_text(scan_dump.read_text())
    ba = tmp_path / scan_dump.name.replace(".txt", "-buffer-assignment.txt")
    if damage == "no allocation":
        ba.write_text("BufferAssignment:\n\nTotal bytes used: 0\n")
    else:
        ba.write_text("BufferAssignment:\nallocation 0: size 64, parameter 0, shape |f32[16]| at ShapeIndex {}:\n"
                      " value: <<garbage>>\n")
    r = run_cli(module, "--no-xla")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {ba}"), r.stderr
    if damage == "bad value line":
        assert f"{ba}:3:" in errors[0], errors


TRITON_STYLE = """\
HloModule m

fused {
  p0 = f32[16]{0} parameter(0)
  ROOT n = f32[16]{0} negate(p0)
}

ENTRY main {
  p = f32[16]{0} parameter(0)
  ROOT f = f32[16]{0} fusion(p), kind=kCustom,
    calls=fused
}
"""


def test_batch_json_one_line_per_file_in_order(tmp_path, scan_dump):
    """Several files: one JSON object per line, in order; a file that cannot be read gets
    an 'error' and the run goes on; the exit code says not all succeeded."""
    triton = tmp_path / "triton_style.hlo"
    triton.write_text(TRITON_STYLE)
    missing = tmp_path / "missing.hlo"
    frob = tmp_path / "frob.hlo"
    frob.write_text(TRITON_STYLE.replace("negate(p0)", "frobnicate(p0)"))
    r = run_cli(scan_dump, missing, triton, frob, "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # each error once, in the JSON a reader of stdout parses (as `cost --json` does)
    assert "error:" not in r.stderr, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["file"] for row in rows] == [str(p) for p in (scan_dump, missing, triton, frob)]
    assert "error" in rows[1] and str(missing) in rows[1]["error"]
    assert "error" in rows[3] and f"{frob}:5:23:" in rows[3]["error"] and "frobnicate" in rows[3]["error"]
    for row in (rows[0], rows[2]):
        assert "error" not in row
        assert row["xla"]["bytes_accessed"] == \
            xla_private.cost_analysis(open(row["file"]).read())["bytes accessed"]
        explained = sum(d["ours"] - d["xla"] for d in row["discrepancies"])
        assert row["bytes_accessed"] - explained == row["xla"]["bytes_accessed"]
        assert all(set(d) >= {"instruction", "ours", "xla", "reason"} for d in row["discrepancies"])
    # the multi-line fusion calls its computation (it used to call nothing and crash)
    assert [k["opcode"] for k in rows[2]["kernels"]] == ["fusion"]


def test_batch_of_good_files_exits_zero_with_a_table_each(tmp_path, scan_dump):
    triton = tmp_path / "triton_style.hlo"
    triton.write_text(TRITON_STYLE)
    r = run_cli(scan_dump, triton)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("module ") == 2 and r.stdout.count("XLA bytes accessed") == 2
    assert "\r" not in r.stderr  # no progress bar when stderr is not a terminal


def test_progress_bar_on_a_terminal(tmp_path, scan_dump):
    """With stderr on a terminal (a pty here), a batch draws a bar and clears it."""
    import os
    import pty
    triton = tmp_path / "triton_style.hlo"
    triton.write_text(TRITON_STYLE)
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "pytest_dumpref", "traffic", str(scan_dump),
                            str(triton), "--no-xla", "--json"],
                           stdout=subprocess.PIPE, stderr=slave, text=True, timeout=120)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    assert p.returncode == 0
    assert len(p.stdout.splitlines()) == 2  # the bar never goes to stdout
    text = seen.decode(errors="replace")
    assert "\r" in text and "traffic [" in text and "/2" in text


def test_progress_bar_draws_only_on_a_terminal():
    import io

    from pytest_dumpref.xla.progress import ProgressBar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = ProgressBar(3, "files", stream, min_interval=0)
        for name in ("a", "b", "c"):
            bar.step(name)
        bar.close()
    assert pipe.getvalue() == ""
    out = tty.getvalue()
    assert "files [" in out and "3/3" in out and out.endswith("\r")


def test_damaged_attribute_value_is_one_line_naming_the_file(tmp_path):
    """A value the analysis needs but cannot read (dimensions={1 0}) is named, not a
    traceback."""
    bad = tmp_path / "bad_transpose.hlo"
    bad.write_text("HloModule m\n\nENTRY main {\n  p = f32[2,3]{1,0} parameter(0)\n"
                   "  ROOT t = f32[3,2]{1,0} transpose(p), dimensions={1 0}\n}\n")
    r = run_cli(bad, "--no-xla")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(bad) in errors[0] and "transpose t" in errors[0]
