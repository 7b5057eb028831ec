"""passes.py: what each pass changed, on hand-written snapshots and on a real compile."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_dumpref.examples import softmax, transformer_block, transformer_params
from pytest_dumpref.xla.dump import Dump, DumpSession
from pytest_dumpref.xla.passes import (DEFINITIONS, XLA_COST_LISTING, pass_changes,
                                       rank_passes, states)
from pytest_dumpref.xla.traffic import FREE_OPCODES, module_traffic

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


# ---- the rules as DEFINITIONS states them, recomputed without passes.py ----------------------
#
# A reader has the words, not the code: these helpers follow DEFINITIONS clause by clause
# (on the project's parser, which only splits lines into names, operands and attributes), and
# the figures and scores of passes.py must come out the same on a real compile.

_SUFFIX_RE = re.compile(r"\b([A-Za-z_][\w\-]*)\.\d+\b")
_META_RE = re.compile(r", metadata=\{[^{}]*\}")


def _no_suffix(text):
    return _SUFFIX_RE.sub(r"\1", text)


def _line(inst):
    return _META_RE.sub("", inst.line.strip())


def _compared(module):
    """DEFINITIONS["instructions"]: the entry and what its call/while/conditional reach."""
    comps, todo = [], [module.entry.name]
    while todo:
        name = todo.pop()
        if name in [c.name for c in comps]:
            continue
        comps.append(module.computations[name])
        todo += [c for i in comps[-1].instructions if i.opcode in ("call", "while", "conditional")
                 for c in i.called]
    return [(c.name, i) for c in comps for i in c.instructions]


def _callee_text(module, names):
    return tuple(tuple((_no_suffix(_line(i)), _callee_text(module, i.called))
                       for i in module.computations[n].instructions) for n in names)


def _match(a, b):
    """DEFINITIONS["matching"]: (added, removed, rewritten, renamed) counts."""
    def unchanged(m, comp, i):
        return (_no_suffix(comp), _line(i), _callee_text(m, i.called))

    def reduced(m, comp, i):
        line = _line(i)
        return (_no_suffix(comp), _no_suffix(line[line.index(" = "):]), _callee_text(m, i.called))

    A, B = _compared(a), _compared(b)
    common = Counter(unchanged(a, *x) for x in A) & Counter(unchanged(b, *x) for x in B)

    def rest(m, items):  # what round (1) leaves: each common key pairs once
        left, out = Counter(common), []
        for x in items:
            key = unchanged(m, *x)
            if left[key]:
                left[key] -= 1
            else:
                out.append(x)
        return out

    rest_a, rest_b = rest(a, A), rest(b, B)
    by_name = {i.name: (c, i) for c, i in rest_a}
    rewritten = renamed = 0
    later = []
    for c, i in rest_b:
        hit = by_name.pop(i.name, None)
        if hit is None:
            later.append((c, i))
        elif reduced(a, *hit) == reduced(b, c, i):
            renamed += 1
        else:
            rewritten += 1
    pool = Counter(reduced(a, *x) for x in by_name.values())
    added = 0
    for x in later:
        if pool[reduced(b, *x)]:
            pool[reduced(b, *x)] -= 1
            renamed += 1
        else:
            added += 1
    return added, sum(pool.values()), rewritten, renamed


def _is_bitcast_transpose(comp, inst):
    """DEFINITIONS["kernels"]: the transpose's dimensions in the order of the result's
    minor-to-major layout give the operand's minor-to-major layout."""
    operand = comp.instruction(inst.operands[0]).shape
    dims = [int(d) for d in inst.attrs["dimensions"].strip("{}").split(",")]
    return operand.element_type == inst.shape.element_type and \
        tuple(dims[d] for d in inst.shape.minor_to_major) == operand.minor_to_major


def _kernels(module, comp=None, prefix=""):
    """DEFINITIONS["kernels"] and ["bytes"] (no while or conditional in these programs):
    (name, output shape, bytes read, bytes written); every operand slot is read."""
    comp = comp or module.entry
    out = []
    for i in comp.instructions:
        if i.opcode in FREE_OPCODES or (i.opcode == "transpose" and _is_bitcast_transpose(comp, i)):
            continue
        assert i.opcode not in ("while", "conditional")
        if i.opcode == "call":
            out += _kernels(module, module.computations[i.called[0]], prefix + i.name + "/")
            continue
        read = sum(comp.instruction(o).shape.byte_size for o in i.operands)
        out.append((prefix + i.name, str(i.shape), read, i.shape.byte_size))
    return out


@pytest.fixture(scope="module")
def block_dump(tmp_path_factory):
    """Study 1's program, smaller (a few seconds): the same passes run on it."""
    import jax
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(np.random.default_rng(1).standard_normal((2, 32, 64)).astype(np.float32), cpu)
    params = jax.device_put(transformer_params(64, 256, seed=0), cpu)
    return DumpSession(tmp_path_factory.mktemp("block")).dump(transformer_block, x, params, 4)


def test_the_stated_rules_give_the_figures_and_scores(block_dump):
    skipped = []
    changes = pass_changes(block_dump, skipped=skipped)
    seq = states(block_dump)
    assert len(changes) + len(skipped) == len(seq) - 1  # every step is counted or skipped
    base = seq[0].module
    kernels0 = _kernels(base)
    r0, w0 = sum(k[2] for k in kernels0), sum(k[3] for k in kernels0)
    n0 = len(_compared(base))
    assert (changes[0].baseline.bytes_read, changes[0].baseline.bytes_written,
            changes[0].baseline.instructions) == (r0, w0, n0)
    assert any(i.opcode == "transpose" for i in base.entry.instructions)
    for c in changes:
        a, b = c.before.module, c.after.module
        assert _match(a, b) == (len(c.added), len(c.removed), len(c.rewritten), c.renamed), c.pass_name
        ka, kb = _kernels(a), _kernels(b)
        assert (tuple(ka), tuple(kb)) == (c.figures_before.kernels, c.figures_after.kernels)
        d_read = abs(sum(k[2] for k in kb) - sum(k[2] for k in ka))
        d_written = abs(sum(k[3] for k in kb) - sum(k[3] for k in ka))
        assert c.score == pytest.approx(d_read / r0 + d_written / w0 +
                                        (len(c.added) + len(c.removed) + len(c.rewritten)) / n0)
        # DEFINITIONS["kernels matched"]: by name, shape and bytes, one to one
        removed = Counter(ka) - Counter(kb)
        assert Counter(c.kernels_removed) == removed and Counter(c.kernels_added) == Counter(kb) - Counter(ka)
    reasons = Counter(r for _, r in skipped)
    assert set(reasons) <= {"byte-identical", "metadata only", "renaming or order only"}
    assert reasons["byte-identical"] > 0


def test_a_repointed_operand_of_the_same_base_name_is_a_renaming(tmp_path):
    # what cse does to the users of the copy it removes: the operand now names the survivor
    two = ('  %s.3 = f32[8]{0} negate(%p.1)\n'
           '  %s.4 = f32[8]{0} negate(%p.1)\n'
           '  ROOT %m.5 = f32[8]{0} multiply(%s.3, %s.4)')
    one = ('  %s.3 = f32[8]{0} negate(%p.1)\n'
           '  ROOT %m.5 = f32[8]{0} multiply(%s.3, %s.3)')
    d = _write(tmp_path / "d", [("in", two), ("cse", one), ("out", one)])
    (c,) = pass_changes(d)
    assert [i.name for i in c.removed] == ["s.4"] and not c.added and not c.rewritten
    assert c.renamed == 1  # m.5: multiply(s.3, s.4) -> multiply(s.3, s.3)
    # a repeated operand is read once per slot: m.5 still reads 64 B
    assert ("m.5", "f32[8]{0}", 64, 32) in c.figures_after.kernels


def test_header_and_order_alone_are_not_changes_and_names_move_on(tmp_path):
    a = ('  %e.3 = f32[8]{0} exponential(%p.1)\n'
         '  %n.4 = f32[8]{0} negate(%p.1)\n'
         '  ROOT %m.5 = f32[8]{0} multiply(%e.3, %n.4)')
    a_metadata = a.replace("(%p.1)\n", '(%p.1), metadata={op_name="moved"}\n')
    reordered = ('  %n.7 = f32[8]{0} negate(%p.1)\n'
                 '  %e.6 = f32[8]{0} exponential(%p.1)\n'
                 '  ROOT %m.8 = f32[8]{0} multiply(%e.6, %n.7)')
    folded = ('  %e.6 = f32[8]{0} exponential(%p.1)\n'
              '  ROOT %m.8 = f32[8]{0} multiply(%e.6, %e.6)')
    d = _write(tmp_path / "d", [("in", a), ("annotator", a_metadata), ("scheduler", reordered),
                                ("folder", folded), ("out", folded)])
    header = d.snapshots[0].path  # and a module header attribute
    header.write_text(header.read_text().replace("HloModule m,", "HloModule m, is_scheduled=true,"))
    skipped = []
    (c,) = pass_changes(d, skipped=skipped)
    assert [(s.pass_name, why) for s, why in skipped] == [
        ("annotator", "metadata only"), ("scheduler", "renaming or order only"),
        ("(after the last dumped pass)", "byte-identical")]
    assert c.pass_name == "folder" and [i.name for i in c.removed] == ["n.7"]
    # the kernels removed carry the names of the state just before (the renamed one)
    assert [k[0] for k in c.kernels_removed] == ["n.7"]


def test_definitions_name_the_rules_the_code_applies():
    text = " ".join(DEFINITIONS.values())
    for opcode in FREE_OPCODES:
        assert opcode in DEFINITIONS["kernels"]
    assert "TransposeIsBitcast" in text and "R0" in text and "N0" in text
    assert list(DEFINITIONS) == ["states", "changed", "instructions", "matching", "kernels",
                                 "bytes", "xla bytes", "score", "kernels matched"]


def test_definitions_state_the_byte_size_hlo_gives_every_element_type():
    """DEFINITIONS["bytes"] lists each element type under a byte width ("2 B: s16, u16, f16,
    bf16"); read back, every type the parser knows is stated once, with the size it gives an
    array of that type, and a packed sub-byte layout gives what the stated formula gives."""
    from pytest_dumpref.xla.hlo import PRIMITIVE_BITS, parse_shape
    text = DEFINITIONS["bytes"]
    stated = {}
    for n, names in re.findall(r"(\d+) B: ([a-z0-9, ]+?)(?=;)", text):
        for t in names.split(", "):
            stated[t] = int(n)
    sub = re.search(r"the sub-byte types \(([a-z0-9, ]+)\) 1 B each", text).group(1).split(", ")
    stated.update({t: 1 for t in sub})
    stated.update({t: int(n) for t, n in re.findall(r"\b(token|opaque) (?:array|one) (\d+) B", text)})
    assert sorted(stated) == sorted(PRIMITIVE_BITS)
    for t, n in stated.items():
        assert parse_shape(f"{t}[3]").byte_size == (0 if t == "token" else 3 * n if t != "opaque" else n), t
    for t in sub:  # packed: ceil(count * b / 8)
        assert parse_shape(f"{t}[5]{{0:E(4)}}").byte_size == -(-5 * 4 // 8)
    assert "bf16" in stated and stated["bf16"] == 2 and stated["c128"] == 16 and stated["pred"] == 1
    # bounded dynamic dimensions at their bound, as stated
    assert "<=N counted as N" in text and parse_shape("f32[<=8]").byte_size == 32


def test_definitions_say_a_call_is_no_kernel_and_where_the_transpose_test_reads_layouts():
    k = DEFINITIONS["kernels"]
    assert "A call, while or conditional is not itself a kernel" in k
    assert "parameters are not kernels" in k
    assert "looked up by that name in the transpose's own computation" in k
    assert "a copy or a reshape is a kernel whatever its layouts" in k


def test_the_cost_listing_runs_with_plain_jax_and_gives_xla_private_numbers(block_dump, tmp_path):
    from pytest_dumpref.xla.xla_private import cost_analysis
    script = tmp_path / "xla_cost.py"
    script.write_text(XLA_COST_LISTING)
    files = [block_dump.files.before_optimizations, block_dump.snapshots[len(block_dump.snapshots) // 2].path,
             block_dump.files.optimized]
    env = dict(os.environ, DUMPREF_PJRT="0")  # plain jax: this project's device not loaded
    env.pop("XLA_FLAGS", None)
    # a buffer assignment among the files is passed over, as with DUMP/*.txt
    args = [*map(str, files[:2]), str(block_dump.files.buffer_assignment), str(files[2])]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(files)
    for line, f in zip(lines, files):
        nbytes, flops, path = line.split(" ", 2)
        cost = cost_analysis(Path(f).read_text(), source=str(f))
        assert path == str(f)
        assert (float(nbytes), float(flops)) == (round(cost["bytes accessed"]), round(cost["flops"]))
