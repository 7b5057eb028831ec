"""passes.py: what each pass changed, on hand-written snapshots and on a real compile."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pytest_dumpref.examples import softmax
from pytest_dumpref.xla.dump import Dump, DumpSession
from pytest_dumpref.xla.passes import pass_changes, rank_passes
from pytest_dumpref.xla.traffic import module_traffic

_M = """HloModule m, entry_computation_layout={{(f32[8]{{0}})->f32[8]{{0}}}}

ENTRY %main.1 (p.1: f32[8]) -> f32[8] {{
  %p.1 = f32[8]{{0}} parameter(0), metadata={{op_name="x"}}
{body}
}}
"""


def _write(folder: Path, states: list[tuple[str, str]]) -> Dump:
    """A dump folder by hand: the first state is before optimizations, the last optimized."""
    folder.mkdir()
    pre = "module_0007.m."
    (folder / f"{pre}before_optimizations.txt").write_text(_M.format(body=states[0][1]))
    for n, (name, body) in enumerate(states[1:-1]):
        (folder / f"{pre}{n:04d}.pipe.after_{name}.before_next.txt").write_text(_M.format(body=body))
    (folder / f"{pre}cpu_after_optimizations.txt").write_text(_M.format(body=states[-1][1]))
    return Dump.from_folder(folder)


def test_renumbering_and_metadata_are_not_changes(tmp_path):
    a = ('  %e.3 = f32[8]{0} exponential(%p.1), metadata={op_name="exp"}\n'
         '  ROOT %m.4 = f32[8]{0} multiply(%e.3, %e.3)')
    renamed = ('  %e.9 = f32[8]{0} exponential(%p.1), metadata={op_name="elsewhere"}\n'
               '  ROOT %m.10 = f32[8]{0} multiply(%e.9, %e.9)')
    rewritten = ('  %e.9 = f32[8]{0} exponential(%p.1)\n'
                 '  ROOT %m.10 = f32[8]{0} add(%e.9, %e.9)')
    d = _write(tmp_path / "d", [("in", a), ("renamer", renamed), ("simplifier", rewritten),
                                ("out", rewritten)])
    changes = pass_changes(d)
    assert [c.pass_name for c in changes] == ["simplifier"]
    (c,) = changes
    assert [(x.name, y.name) for x, y in c.rewritten] == [("m.10", "m.10")]
    assert not c.added and not c.removed
    before, after = c.excerpt()
    assert "- ROOT %m.10 = f32[8]{0} multiply(%e.9, %e.9)" in before
    assert "+ ROOT %m.10 = f32[8]{0} add(%e.9, %e.9)" in after


def test_added_and_removed_kernels_and_bytes(tmp_path):
    two = ('  %e.3 = f32[8]{0} exponential(%p.1)\n'
           '  %n.4 = f32[8]{0} negate(%e.3)\n'
           '  ROOT %m.5 = f32[8]{0} multiply(%n.4, %e.3)')
    one = '  ROOT %m.5 = f32[8]{0} multiply(%p.1, %p.1)'
    d = _write(tmp_path / "d", [("in", two), ("folder", one), ("out", one)])
    (c,) = pass_changes(d)
    assert sorted(i.name for i in c.removed) == ["e.3", "n.4"]
    assert c.figures_before.kernel_count == 3 and c.figures_after.kernel_count == 1
    # spill-style: exp reads 32 writes 32, negate 32/32, multiply 64/32 -> 128/96; then 64/32
    assert (c.figures_before.bytes_read, c.figures_before.bytes_written) == (128, 96)
    assert (c.figures_after.bytes_read, c.figures_after.bytes_written) == (64, 32)
    # m.5 still reads two f32[8] and writes one: the same kernel for the byte arithmetic
    assert [k[0] for k in c.kernels_removed] == ["e.3", "n.4"] and c.kernels_added == []
    # score: |64| / 128 + |64| / 96 + 3 changed instructions / 4 top-level instructions
    assert abs(c.score - (64 / 128 + 64 / 96 + 3 / 4)) < 1e-12


def test_an_unchanged_line_follows_its_operands_new_shape(tmp_path):
    # figures are kept per instruction between snapshots: s.4's line is the same text in both,
    # but its operand b.3 shrank, so what s.4 reads must follow
    wide = ('  %b.3 = f32[8]{0} negate(%p.1)\n'
            '  ROOT %s.4 = f32[2]{0} slice(%b.3), slice={[0:2]}')
    narrow = ('  %b.3 = f32[4]{0} slice(%p.1), slice={[0:4]}\n'
              '  ROOT %s.4 = f32[2]{0} slice(%b.3), slice={[0:2]}')
    d = _write(tmp_path / "d", [("in", wide), ("narrower", narrow), ("out", narrow)])
    (c,) = pass_changes(d)
    assert ("s.4", "f32[2]{0}", 32, 8) in c.figures_before.kernels
    assert ("s.4", "f32[2]{0}", 16, 8) in c.figures_after.kernels
    assert [i.name for _, i in c.rewritten] == ["b.3"]


def test_softmax_fusion_pass_against_xla(tmp_path):
    x = np.linspace(-1, 1, 64 * 128, dtype=np.float32).reshape(64, 128)
    d = DumpSession(tmp_path).dump(softmax, x)
    top = rank_passes(d, top=3)
    assert len(top) == 3 and top[0].score >= top[1].score >= top[2].score
    (fusion,) = [c for c in pass_changes(d) if c.pass_name == "fusion"]
    assert fusion.added and all(i.opcode == "fusion" for i in fusion.added)
    xb, xa = fusion.xla_bytes_accessed()
    assert fusion.figures_after.bytes_accessed == xa  # exact after fusion
    assert fusion.figures_after.bytes_accessed < fusion.figures_before.bytes_accessed
    fb, fa = fusion.flops()
    assert fb == fa > 0  # fusion moves work, it does not remove it
    # the figures carried from snapshot to snapshot are those of a fresh traffic accounting
    for c in pass_changes(d):
        t = module_traffic(c.after.module)
        assert c.figures_after.kernels == tuple(
            (k.path or k.name, str(k.output_shape), k.total_read, k.total_written)
            for k in t.kernels)
        assert (c.figures_after.bytes_read, c.figures_after.bytes_written) == \
            (t.bytes_read, t.bytes_written)
    text = fusion.after.path.read_text()
    _, after = fusion.excerpt()
    for line in after.splitlines():
        if line.startswith("+ "):
            assert line[2:].split(", metadata=")[0] in text


class _Tty:
    def __init__(self, tty: bool) -> None:
        self.tty, self.out = tty, []

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> None:
        self.out.append(s)

    def flush(self) -> None:
        pass


def test_progress_only_on_a_terminal():
    from pytest_dumpref.xla.passes import terminal_progress
    assert terminal_progress("m", _Tty(False)) is None
    tty = _Tty(True)
    report = terminal_progress("module_0001.jit_f", tty)
    report(1, 3)
    report(3, 3)
    assert tty.out[0].startswith("\rmodule_0001.jit_f: snapshot 1/3") and tty.out[-1].endswith("3/3\n")
