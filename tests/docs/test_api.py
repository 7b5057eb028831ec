"""docs/api.md, run: every fenced block is a Python example and every one runs here.

Blocks whose first line names a claim file (``# claims/test_x.py``) run as claims with pytest
(rendered; those without measured times then checked against what they rendered); the others run in order in one namespace,
as the page says (a notebook's cells), and each ``print(...)  # text`` line must print that
text every time it runs.  The objects the page lists must carry docstrings with an example.
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from gfm import all_problems, fenced_blocks

REPO = Path(__file__).resolve().parents[2]
API = REPO / "docs" / "api.md"
CLAIM_FILE = re.compile(r"^# (claims/test_\w+\.py)$")
EXPECTED = re.compile(r"^\s*print\(.*\)\s+#\s?(.*)$")

# (module, object) -> the heading of docs/api.md that documents it
OBJECTS = {
    ("pytest_dumpref.xla.dump", "Dump"): "`Dump`: one compiled program",
    ("pytest_dumpref.xla.dump", "Snapshot"): "`Snapshot`: the program after one pass",
    ("pytest_dumpref.xla.hlo", "HloModule"): "`HloModule`, `HloComputation`, `Instruction`, `Shape`",
    ("pytest_dumpref.xla.hlo", "HloComputation"): "`HloModule`, `HloComputation`, `Instruction`, `Shape`",
    ("pytest_dumpref.xla.hlo", "Instruction"): "`HloModule`, `HloComputation`, `Instruction`, `Shape`",
    ("pytest_dumpref.xla.hlo", "Shape"): "`HloModule`, `HloComputation`, `Instruction`, `Shape`",
    ("pytest_dumpref.xla.traffic", "ModuleTraffic"): "`ModuleTraffic` and `KernelTraffic`: bytes per kernel",
    ("pytest_dumpref.xla.traffic", "KernelTraffic"): "`ModuleTraffic` and `KernelTraffic`: bytes per kernel",
    ("pytest_dumpref.xla.cpu.fusion", "FusionDecision"): "`FusionDecision`: what the fusion pass decided",
    ("pytest_dumpref.pjrt.build", "BuiltPlugin"): "`BuiltPlugin`: the PJRT plugin, built freshly",
    ("pytest_dumpref.timing", "TimingResult"): "`TimingResult`: the timing fixture's result",
    ("pytest_dumpref.kinds", "Kind"): "`Kind`: one kind of evidence",
}


def blocks():
    out = fenced_blocks(API)
    assert out, "docs/api.md has no fenced blocks"
    return out


def claim_blocks():
    return [b for b in blocks() if CLAIM_FILE.match(b.text.splitlines()[0])]


def session_blocks():
    return [b for b in blocks() if not CLAIM_FILE.match(b.text.splitlines()[0])]


def test_every_block_is_python_and_is_run():
    found = blocks()
    assert all(b.lang == "python" for b in found), [(b.line, b.lang) for b in found if b.lang != "python"]
    assert len(claim_blocks()) + len(session_blocks()) == len(found)
    assert claim_blocks() and session_blocks()


def test_the_page_renders_on_github():
    assert all_problems(API) == []


class _Prints:
    """A ``print`` for the examples that records the line of the block it was called from."""

    def __init__(self, filename: str):
        self.filename, self.seen = filename, []

    def __call__(self, *args, sep=" ", end="\n", **kw):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        self.seen.append((frame.f_lineno if frame else None, sep.join(str(a) for a in args)))


def test_the_examples_run_in_order_and_print_what_they_say():
    namespace: dict = {"__name__": "api_examples"}
    for b in session_blocks():
        filename = f"docs/api.md:{b.line}"
        prints = _Prints(filename)
        namespace["print"] = prints
        expected = {n: m.group(1).strip() for n, line in enumerate(b.text.splitlines(), 1)
                    if (m := EXPECTED.match(line))}
        try:
            exec(compile(b.text, filename, "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"the example at docs/api.md:{b.line} failed: {type(e).__name__}: {e}") from e
        printed = {n for n, _ in prints.seen}
        missing = sorted(set(expected) - printed)
        assert not missing, f"docs/api.md:{b.line}: lines {missing} of the block printed nothing"
        for n, text in prints.seen:
            if n in expected:
                assert text == expected[n], (
                    f"docs/api.md, block at line {b.line}, its line {n}: printed {text!r}, "
                    f"the page says {expected[n]!r}")


def test_the_claim_examples_render_and_check(pytester):
    found = claim_blocks()
    pytester.mkdir("claims")
    for b in found:
        rel = CLAIM_FILE.match(b.text.splitlines()[0]).group(1)
        (pytester.path / rel).write_text(b.text)
    n_claims = sum(b.text.count("@pytest.mark.claim(") for b in found)
    res = pytester.runpytest("claims/", "--dumpref-report=writeup.md", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=n_claims)
    md = (pytester.path / "writeup.md").read_text()
    headings = re.findall(r"^### (.+)$", md, re.M)
    # what the page's "Claim titles" section says the headings are
    said = re.findall(r'"([^"]+)"', re.search(r"Rendered, these claims are headed (.+?)\.\n",
                                                API.read_text(), re.S).group(1).replace("\n", " "))
    assert said and set(said) <= set(headings), (said, headings)
    assert "| A/A difference per call | " in md
    # checked: the claims without measured times (a timing claim's few rounds on a loaded
    # two-core machine can move by more than their noise allows; the README's timing example
    # is the one that is checked, by tests/docs/test_readme.py)
    exact = [CLAIM_FILE.match(b.text.splitlines()[0]).group(1) for b in found
             if "(timing, " not in b.text]
    assert exact
    check = pytester.runpytest(*exact, "--dumpref-check=writeup.md", "-p", "no:cacheprovider")
    assert check.ret == 0, check.stdout.str()[-3000:]
    assert "every line of writeup.md reproduces" in check.stdout.str()


@pytest.mark.parametrize("where", sorted(OBJECTS), ids=lambda w: w[1])
def test_each_object_is_on_the_page_and_documented_with_an_example(where):
    module, name = where
    obj = getattr(importlib.import_module(module), name)
    doc = obj.__doc__ or ""
    assert "Example" in doc, f"{module}.{name}'s docstring has no example"
    assert f"## {OBJECTS[where]}\n" in API.read_text(), f"docs/api.md has no section for {name}"
    assert f"`{name}`" in API.read_text().split("## ")[0], f"the table at the top of docs/api.md omits {name}"


def test_the_package_says_where_its_api_is():
    import pytest_dumpref
    doc = pytest_dumpref.__doc__ or ""
    assert "docs/api.md" in doc and "init" in doc and "--dumpref-check" in doc


def test_counting_fusion_kernels_is_one_documented_line():
    from pytest_dumpref.xla.dump import Dump
    assert "len(d.fusion_kernels)" in API.read_text()
    assert "len(d.fusion_kernels)" in (Dump.fusion_kernels.__doc__ or "")
