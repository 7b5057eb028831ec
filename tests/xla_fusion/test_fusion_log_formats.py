"""The fusion log in both of the forms XLA writes it: an html page (jaxlib 0.9, 0.10) and a
zip app holding a SQLite ``fusions.db`` (jaxlib 0.11, 0.12).  The archive is built here the
way XLA lays it out, so this runs under any jaxlib; the suite's dump tests read the real one
under the jaxlib installed."""
from __future__ import annotations

import json
import sqlite3
import zipfile

import pytest

from pytest_dumpref.xla.cpu.fusion import (FusionLogError, fusion_log_files, read_fusion_log,
                                       read_fusion_log_file)

LINES = [
    "About to fuse |broadcast.1| into |multiply| inside InstructionFusion with may_duplicate=1",
    "Fused |broadcast.1| into |broadcast_multiply_fusion| inside InstructionFusion with may_duplicate=1",
    "Not fusing |divide| into |broadcast_multiply_fusion| as Fusion is not profitable. ; "
    "multi-output fusion not supported by this pass",
]


def _pyz(path, lines, table="frames"):
    db = path.parent / "fusions.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE metadata (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, label TEXT, graph_id INTEGER, "
                 f"to_highlight TEXT)")
    # inserted out of order: the reader orders by id, as the viewer does
    for i in reversed(range(len(lines))):
        conn.execute(f"INSERT INTO {table} VALUES (?, ?, ?, ?)", (i, lines[i], i, ""))
    conn.commit()
    conn.close()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__main__.py", "")
        z.write(db, "fusions.db")
    db.unlink()
    return path


def _html(path, lines):
    frames = [[k, line, ""] for k, line in enumerate(lines)]
    path.write_text(f"<script>\nconst frames = {json.dumps(frames)};\n</script>\n")
    return path


def test_the_archive_and_the_page_give_the_same_decisions(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    name = "main.1.module_0004.jit_f._fusion"
    from_pyz = read_fusion_log_file(_pyz(tmp_path / "a" / f"{name}.pyz", LINES))
    from_html = read_fusion_log_file(_html(tmp_path / "b" / f"{name}.html", LINES))
    assert [(d.producer, d.consumer, d.fused, d.reason, d.computation, d.fusion) for d in from_pyz] == \
        [(d.producer, d.consumer, d.fused, d.reason, d.computation, d.fusion) for d in from_html]
    assert [d.fused for d in from_pyz] == [True, False]
    assert from_pyz[1].consumer_origin == "multiply" and from_pyz[0].computation == "main.1"
    assert read_fusion_log(tmp_path / "b" / f"{name}.html") == from_html


def test_log_files_of_both_kinds_are_found_per_module(tmp_path):
    _pyz(tmp_path / "main.1.module_0004.jit_f._fusion.pyz", LINES)
    _html(tmp_path / "main.1.module_0006.jit_g._fusion.html", LINES)
    (tmp_path / "module_0004.jit_f.before_optimizations.txt").write_text("")
    assert [p.name for p in fusion_log_files(tmp_path)] == [
        "main.1.module_0004.jit_f._fusion.pyz", "main.1.module_0006.jit_g._fusion.html"]
    assert [p.name for p in fusion_log_files(tmp_path, "0006")] == ["main.1.module_0006.jit_g._fusion.html"]


@pytest.mark.parametrize("damage", ["not a zip", "no database", "no frames table"])
def test_a_damaged_archive_names_the_file(tmp_path, damage):
    p = tmp_path / "main.1.module_0004.jit_f._fusion.pyz"
    if damage == "not a zip":
        p.write_bytes(b"PK but not really")
    elif damage == "no database":
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("__main__.py", "")
    else:
        _pyz(p, LINES, table="something_else")
    with pytest.raises(FusionLogError) as e:
        read_fusion_log_file(p)
    assert str(p) in str(e.value)
