"""No circles among the C files of the device: a file stands above the files it uses.

File A uses file B when A's object file has an undefined symbol that B's defines, read with
`nm -P` from each plugin_c/*.c compiled alone, so a call through a header's prototype counts
wherever it is.  Where a family below must reach back up (a loop body lowered or run by the
dispatcher above the loop's family), it goes through a pointer the file above sets in its
context (prog_vhlo.h's `lower_region`, prog_internal.h's `run_region`), which is what the
test sees: no symbol of the file above.

    python -m pytest tests/pjrt/test_c_link_graph.py -q
    python tests/pjrt/test_c_link_graph.py        # prints every file's uses and the circles
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, also when run as a script
from graph_circles import circles  # noqa: E402

from pytest_dumpref.pjrt.toolchain import find_compiler, header_dir, plugin_source_dir  # noqa: E402

DEFINED = set("TDBRC")   # text, data, bss, read-only, common: global definitions


def link_graph(src: Path, out: Path, include: Path | None = None) -> dict:
    """File stem -> the stems of the files whose symbols its object uses."""
    defined: dict[str, str] = {}
    undefined: dict[str, set] = {}
    for c in sorted(src.glob("*.c")):
        obj = out / (c.stem + ".o")
        flags = ["-std=c11", "-O0", "-c", f"-I{src}"] + ([f"-I{include}"] if include else [])
        subprocess.run([find_compiler(), *flags, str(c), "-o", str(obj)], check=True,
                       capture_output=True, text=True)
        undefined[c.stem] = set()
        symbols = subprocess.run(["nm", "-P", str(obj)], check=True, capture_output=True,
                                 text=True).stdout
        for line in symbols.splitlines():
            name, kind = line.split()[:2]
            if kind == "U":
                undefined[c.stem].add(name)
            elif kind in DEFINED:
                defined[name] = c.stem
    return {f: {defined[s] for s in names if s in defined and defined[s] != f}
            for f, names in undefined.items()}


def test_the_device_has_no_circle_among_its_c_files(tmp_path):
    graph = link_graph(plugin_source_dir(), tmp_path, header_dir())
    assert len(graph) > 20 and graph["prog_interp"] >= {"prog_rt", "prog_ops_window"}
    assert circles(graph) == []


def test_a_circle_through_a_prototype_is_found(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "low.c").write_text("int high(int);\nint low(int x) { return x ? high(x - 1) : 0; }\n")
    (src / "high.c").write_text("int low(int);\nint high(int x) { return low(x); }\n")
    (src / "apart.c").write_text("int low(int);\nint apart(void) { return low(3); }\n")
    (tmp_path / "o").mkdir()
    graph = link_graph(src, tmp_path / "o")
    assert graph["apart"] == {"low"}
    assert circles(graph) == [["high", "low"]]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        g = link_graph(plugin_source_dir(), Path(d), header_dir())
    for f in sorted(g):
        print(f, "->", ", ".join(sorted(g[f])))
    print("circles:", circles(g))
