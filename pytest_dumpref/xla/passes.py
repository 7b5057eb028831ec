"""What each pass changed: instructions, kernels, bytes, flops, a ranking, and an excerpt.

A dump taken with ``xla_dump_hlo_pass_re=.*`` holds the module after every pass that changed
it.  Walking the snapshots in execution order (the module before optimizations first, the
optimized module last), the difference between two consecutive ones is the work of the pass
named in the later file name (``...after_fusion.before_fusion-wrapper.txt``: ``fusion``).

Renumbering is noise: passes create instructions with fresh numeric suffixes (``add.123``
becomes ``add.124``) and metadata (op names, source lines) moves around.  Instructions are
compared by their text without metadata; a changed line whose text only differs in the
numeric suffixes of names is counted as renamed, not as changed.

``DEFINITIONS`` states every rule this module applies (which steps count as changes, which
instructions are compared and how they are matched, the score, how kernels are matched), in
words precise enough to recompute the figures without this package.  The write-up and
``tour`` print that text, so the prose is the code's own; tests recompute the figures from it.
"""
from __future__ import annotations

import operator
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dump import Dump, DumpError, DumpFolder, LazyHloFile, shown_name
from .hlo import PRIMITIVE_BITS, parse_shape
from .traffic import OPCODE_RULES, RUNS_COMPUTATIONS, instruction_kernels, is_bitcast_transpose
from .xla_private import cost_analysis

# A name's numeric suffix (``add.123`` -> ``add``; ``%`` is not a word character, so ``%add.1``
# starts at a word boundary too; ``.`` cannot occur inside the name, so the run is greedy).
_SUFFIX = re.compile(r"\b([A-Za-z_][\w\-]*)\.\d+\b")
# (a function, not the template r"\1": re expands a template in Python for every match)
_name_only = operator.methodcaller("group", 1)
_METADATA_TEXT = re.compile(r", metadata=\{[^{}]*\}")


# ---- the rules, in words ------------------------------------------------------------------

def _element_bytes_text() -> str:
    """The byte width of every element type, grouped, from the table hlo.py sizes arrays with
    (so the stated rule cannot drift from the sizes used)."""
    whole: dict[int, list[str]] = {}
    sub: list[str] = []
    for t, bits in PRIMITIVE_BITS.items():
        if t in ("token", "opaque"):
            continue
        (sub if bits < 8 else whole.setdefault(bits // 8, [])).append(t)
    groups = "; ".join(f"{n} B: {', '.join(ts)}" for n, ts in sorted(whole.items()))
    return (f"{groups}; the sub-byte types ({', '.join(sub)}) 1 B each, unless the layout packs "
            "them (E(b) in the layout, as in {0:E(4)}: ceil(count * b / 8) bytes for the array); "
            f"and, whatever their dimensions, a token array {_array_bytes_of('token')} B and an "
            f"opaque one {_array_bytes_of('opaque')} B (a pointer)")


def _array_bytes_of(element_type: str) -> int:
    return parse_shape(f"{element_type}[]").byte_size


_ELEMENT_BYTES = _element_bytes_text()


def _kernels_text() -> str:
    """What is a kernel, from traffic's opcode table (the one the walkers read): the opcodes
    that move nothing, those that do so for some instructions (in the table's words), and
    those that run computations instead (how often, in the table's words)."""
    free = sorted(op for op, r in OPCODE_RULES.items() if r.moves_nothing is True)
    sometimes = [r.words for r in OPCODE_RULES.values() if callable(r.moves_nothing)]
    runs = {op: r.runs for op, r in OPCODE_RULES.items() if r.runs and r.runs.spill_style}
    names = list(runs)
    how_often = "; ".join(r.words for r in runs.values() if r.words)
    return (
        "Kernel: an instruction of the entry computation that runs code of its own and so reads "
        "its operands from memory and writes its result; a fusion is one kernel. Not kernels: "
        + ", ".join(free) + "".join(f", and {w}" for w in sometimes)
        + f" A {', '.join(names[:-1])} or {names[-1]} is not itself a kernel: it runs the "
        "kernels of the computations it calls, found by this same rule inside them (so their "
        "parameters are not kernels either, and a kernel there reads its operands, the "
        f"callee's parameters included, at their shapes): {how_often}. Such kernels are "
        "named <call>/<instruction> (nested: <call>/<while>/<instruction>).")

#
# One entry per rule, in the order a reader needs them.  Each names what the code below does;
# a change of the code that changes a rule changes its text here.
DEFINITIONS: dict[str, str] = {
    "states": (
        "Program states, in order: the module before optimizations (*.before_optimizations.txt), "
        "every pass snapshot by its step number SSSS (module_NNNN.<module>.SSSS.<pipeline>."
        "after_<pass>.before_<next>.txt), and the optimized module "
        "(*.<platform>_after_optimizations.txt). A step is a pair of consecutive states; it is "
        "the work of the <pass> named after 'after_' in the later file's name."),
    "changed": (
        "A step changed the program unless (a) the two files are byte-identical, (b) they are "
        "equal once metadata={...} is removed from every instruction (the HloModule header line "
        "is not compared), or (c) every instruction matches as unchanged or renamed (rules "
        "below) and the kernels are the same up to their names and order (the same output "
        "shapes, layouts included, with the same bytes read and written). Each state is compared with the one just before it, counted or not."),
    "instructions": (
        "Instructions compared: every instruction of the entry computation and of the "
        "computations it reaches, transitively, through call, while (body and condition) and "
        "conditional (branches); parameters, constants and tuples included. Fused computations, "
        "reduce and sort regions and other called computations are part of the instruction "
        "that calls them: a change inside one changes its caller. (A dump file's FileNames, "
        "FunctionNames, FileLocations and StackFrames sections, before the computations, hold "
        "source locations, not instructions.)"),
    "matching": (
        "Matching the instructions of a step, in four rounds, each pairing one to one what the "
        "rounds before left over. A line here is the instruction as XLA printed it (ROOT, its "
        "own name, shape with layout, opcode, operands, attributes) with the metadata={...} "
        "attribute removed whole (its braces may nest); the text of the computations an "
        "instruction calls is their lines, and those of every computation they call in turn, "
        "with every numeric name suffix (.123) dropped. (1) Unchanged: in a computation of the "
        "same name once numeric suffixes are dropped, the same line, and for an instruction "
        "that calls computations the same text of those. (2) The same name on both sides, "
        "numeric suffix included (add.12 and add.12), wherever it sits (XLA keeps names unique "
        "in a module): renamed if the two lines are equal once the instruction's own name, ROOT "
        "and every numeric name suffix are dropped from them, the computations they call have "
        "the same text, and their computations the same name without suffix; so an operand "
        "that now names another instruction of the same base name (subtract.7 -> subtract.5) "
        "makes a renaming; rewritten otherwise. (3) Equal, so reduced, to an instruction of a "
        "computation of the same name without suffix on the other side: renamed. (4) Left "
        "over: added (later state) or removed (earlier state). Instructions changed = added + "
        "removed + rewritten; renamed ones are not counted."),
    "kernels": _kernels_text(),
    "bytes": (
        "Bytes, spill-style: a kernel reads the whole of each operand slot (an operand used "
        "twice, as in multiply(x, x), is read twice) and writes the whole of its result; an "
        "array's size is its element count (a bounded dynamic dimension <=N counted as N) "
        "times its element type's bytes, " + _ELEMENT_BYTES + "; a tuple's size is the sum "
        "of its parts' (not XLA's table of pointers). A state's bytes read and written are "
        "the sums over its kernels."),
    "xla bytes": (
        "XLA's figures, 'bytes accessed' and 'flops', are XLA's own HloCostAnalysis of the same "
        "snapshot text, shown beside the counts above. Its 'bytes accessed' follows rules of its "
        "own per instruction, which differ from spill-style at instructions that can be named "
        "(python -m pytest_dumpref traffic FILE names each, with the reason), and it adds the "
        "per-instruction amounts in float32, which above 2**24 (16 MiB) cannot hold every "
        "integer: a total above that comes out a few bytes off. '(float32 rounding)' in a table "
        "of differences is that, not an instruction: the exact sum of XLA's per-instruction "
        "amounts (ours) beside its float32 total, which replaying its additions in its order "
        "(traffic.xla_float32_total) gives exactly."),
    "score": (
        "Score of a step: |d bytes read| / R0 + |d bytes written| / W0 + instructions "
        "changed / N0, d between the two states of the step, where R0 and W0 are the bytes "
        "read and written and N0 the number of instructions compared (as above) of the module "
        "before optimizations. Ranked highest first; ties go to the earlier step."),
    "kernels matched": (
        "Kernels removed and added by a step: a kernel of the earlier state is removed unless "
        "the later state has one with the same name, output shape (with layout), bytes read "
        "and bytes written; added likewise the other way round; paired one to one. A kernel "
        "that kept its name but moves other bytes is both removed and added. Tables by shape "
        "group them by output shape without its layout."),
}

WORDS = (
    "Words used in this study. Traced program: the module as jax hands it to XLA, before any "
    "optimization pass (the dump's *.before_optimizations.txt; the first pass snapshots have the "
    "same text). Optimized program: the module after the last pass (*.cpu_after_optimizations.txt). "
    "Pass snapshot: the module as written after one pass run; with xla_dump_hlo_pass_re=.* XLA "
    "writes one after each pass run that reports a change (its text can still equal the one "
    "before), plus one at the start of each pipeline. "
    "XLA's cost analysis: XLA's own HloCostAnalysis of one snapshot file ('bytes accessed', "
    "'flops'), computed by the listing below. The restated XLA rules: HloCostAnalysis's "
    "per-instruction rules for bytes accessed, rewritten in Python (traffic.xla_rule_bytes) so "
    "that every difference between the two accountings is pinned on a named instruction with its "
    "reason, in the 'where spill-style and XLA's accounting differ' tables; the 'unexplained' "
    "number is what is left over, and is 0. Rule (xla bytes) below says what '(float32 "
    "rounding)' in those tables means; where it is a table's only cause, the table is folded.")

# How PassChange.excerpt and show_line mark the HLO they copy, in words.
EXCERPT_MARKS = (
    "How the HLO excerpts of this study are marked: lines are copied from the dump file named in "
    "the title, except that each instruction's metadata (op name, source file and line) is "
    "shortened to metadata={...}. In before/after excerpts, '-' marks a line the pass removed or "
    "rewrote and '+' a line it added or rewrote (a rewritten instruction appears on both sides); "
    "unmarked lines are context, one line either side of a marked one (a line only renamed, by "
    "the matching rule under the ranking, is not marked); '...' stands for lines left out; a "
    "computation header "
    "longer than 100 characters is cut and ends in ' ...{'; '(N more changed lines not shown)' "
    "counts the changed lines beyond the first eight. File names are shown as module_NNNN.<name>: "
    "XLA numbers modules by a per-process compile counter (module_0000 for the first compile of a "
    "fresh process, module_0038 if 38 compiles came before), while the rest of the name is the "
    "same in every run.")


#: What each pass the pass study annotates does, in words: the note each of its pass claims
#: opens with, keyed by the pass's name in the dump (algsimp: its first run; the claim on its
#: second run says what that run is).
WHAT_THE_PASS_DOES = {
    "fusion": (
        "fusion (InstructionFusion, CPU policy in cpu_instruction_fusion.cc) fuses a "
        "producer into its consumer when the producer is cheap or used once, so the "
        "value is recomputed inside the consumer's loop instead of stored."),
    "algsimp": (
        "algsimp (AlgebraicSimplifier) applies local rewrites that keep the value: "
        "x/c -> x*(1/c), reshape(reshape(x)) -> reshape(x), transpose with the "
        "identity permutation -> x, and so on, to a fixed point."),
    "dot_decomposer": (
        "dot_decomposer (DotDecomposer) rewrites each dot with batch or several "
        "contracting/non-contracting dimensions into [batch, rows, cols] canonical "
        "form: transpose the operands, reshape them to 2-D (or 3-D), dot, reshape back."),
    "reshape-decomposer": (
        "reshape-decomposer (ReshapeDecomposer) replaces a reshape whose input and "
        "output layouts make it a no-op by a bitcast, and splits the others into "
        "copy + bitcast."),
    "dot-library-rewriter": (
        "dot-library-rewriter (CPU) outlines dots and the reductions and elementwise "
        "ops around them that a library supports into kCustom fusions the CPU runtime "
        "runs with YNNPACK."),
    "call-inliner": (
        "call-inliner (CallInliner) replaces each call instruction by the body of "
        "the computation it calls."),
    "cse": (
        "cse (HloCSE) replaces an instruction by an identical one (same opcode, "
        "operands and attributes) computed earlier."),
    "reshape-mover": (
        "reshape-mover (ReshapeMover) sinks reshapes and transposes below "
        "elementwise operations when that lets them cancel."),
    "layout-assignment": (
        "layout-assignment (CpuLayoutAssignment) picks a physical layout for every "
        "array, constrained by what each kernel needs, and inserts copies where a "
        "producer's layout differs from what its consumer requires."),
}


def record_rules(evidence, *keys: str, words: dict | None = None) -> None:
    """Record the rules of DEFINITIONS that a claim's numbers rest on, as the code states
    them, in one folded table (a rule is said once, where a claim first uses it), after
    ``words`` (name -> text) that the rules use."""
    rows = [{"rule": k, "what it says": v} for k, v in (words or {}).items()]
    rows += [{"rule": f"Rule ({key})", "what it says": DEFINITIONS[key]} for key in keys]
    evidence.table(f"the rules these counts follow: {', '.join(list(words or ()) + list(keys))} "
                   "(passes.DEFINITIONS, as the code states them)", rows, fold=True)


def shape_without_layout(shape: str) -> str:
    """``f32[4,128]{1,0}`` -> ``f32[4,128]`` (tuples too): how the by-shape tables group kernels."""
    return re.sub(r"\{[^{}]*\}", "", shape)


# ---- the figures of one program state ---------------------------------------------------

@dataclass
class Figures:
    """Bytes and kernels of one module, spill-style (traffic.py): every kernel of the entry
    computation reads its operands from memory and writes its result.  ``kernels`` holds
    (name, output shape, bytes read, bytes written) per kernel; loop bodies count once per
    trip."""
    bytes_read: int
    bytes_written: int
    kernels: tuple = ()

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)


def figures_of(module, memo: _KernelMemo | None = None) -> Figures:
    """The figures of ``module``; ``memo`` carries kernel figures over from modules seen
    before (successive snapshots of one compile)."""
    return (memo or _KernelMemo()).figures(module)


class _KernelMemo:
    """Kernel figures of successive modules, each entry instruction's computed once.

    The kernels are traffic.py's (``module_traffic(m).kernels``), but only the kernels: the
    restated XLA rules and the reasons for differences that module_traffic also works out are
    not needed for a pass's figures.  A kernel of the entry computation that is not control
    flow reads its operands and writes its result, so its figures depend on the instruction
    and its operands' shapes alone: they are kept per (instruction object, operand objects),
    both shared by the parser between snapshots, so an unchanged line costs one look-up.
    Loops, calls and conditionals (few, and their kernels live in other computations) are
    walked afresh each time."""

    def __init__(self) -> None:
        self._by_instruction: dict[tuple, tuple] = {}

    def figures(self, module) -> Figures:
        comp = module.entry
        operand = comp.instruction
        memo = self._by_instruction
        kernels: list = []
        for inst in comp.instructions:
            if inst.opcode in RUNS_COMPUTATIONS:
                kernels.extend(_kernel_figures(k) for k in instruction_kernels(module, comp, inst))
                continue
            key = (inst, *[operand(o) for o in inst.operands])
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = tuple(_kernel_figures(k) for k in instruction_kernels(module, comp, inst))
            kernels.extend(hit)
        return Figures(sum(k[2] for k in kernels), sum(k[3] for k in kernels), tuple(kernels))


def _kernel_figures(k) -> tuple:
    return (k.path or k.name, str(k.output_shape), int(k.total_read), int(k.total_written))


@dataclass(frozen=True)
class Baseline:
    """R0, W0 and N0 of the score: the module before optimizations' bytes read and written
    and its instructions compared (DEFINITIONS["score"])."""
    bytes_read: int
    bytes_written: int
    instructions: int


def baseline_of(module, memo: _KernelMemo | None = None) -> Baseline:
    f = figures_of(module, memo)
    return Baseline(f.bytes_read, f.bytes_written, len(_top_level(module)))


# ---- one step ----------------------------------------------------------------------------

@dataclass
class State(LazyHloFile):
    """One program state in the sequence: a snapshot, or the module before/after optimization."""
    label: str
    pass_name: str
    pipeline: str
    step: int | None
    path: Path
    _module: object = field(default=None, repr=False)
    _text: str | None = field(default=None, repr=False)


@dataclass
class PassChange:
    """What one run of one pass changed (the difference between two consecutive states).

    ``score`` ranks passes (see ``rank_passes``).  Byte figures come from traffic.py on the
    module before and after; ``flops()`` asks XLA's HloCostAnalysis (on demand: it parses the
    module again with XLA's parser)."""
    position: int
    before: State
    after: State
    added: list
    removed: list
    rewritten: list          # (old instruction, new instruction) pairs with the same name
    renamed_pairs: list      # (old, new) pairs that differ only in names (noise, not counted)
    figures_before: Figures
    figures_after: Figures
    baseline: Baseline | None = None  # R0, W0, N0 of the score
    score: float = 0.0

    @property
    def pass_name(self) -> str:
        return self.after.pass_name

    @property
    def pipeline(self) -> str:
        return self.after.pipeline

    @property
    def step(self):
        return self.after.step

    @property
    def renamed(self) -> int:
        return len(self.renamed_pairs)

    @property
    def instructions_changed(self) -> int:
        return len(self.added) + len(self.removed) + len(self.rewritten)

    def identities_removed(self) -> tuple[list, list]:
        """The identity transposes (a permutation that keeps the order of dimensions) and the
        identity broadcasts (to their operand's own shape) this pass run removed."""
        module = self.before.module
        same_dims = [i for i in self.removed if i.opcode in ("transpose", "broadcast")
                     and module.instruction(i.operands[0]).shape.dims == i.shape.dims]
        transposes = [i for i in same_dims if i.opcode == "transpose" and
                      i.attrs["dimensions"] == "{" + ",".join(map(str, range(len(i.shape.dims)))) + "}"]
        return transposes, [i for i in same_dims if i.opcode == "broadcast"]

    def repointed(self) -> list[tuple]:
        """Renamed pairs whose operands changed: users the pass pointed at another instruction
        (by the matching rule a renaming, not a change)."""
        return [(a, b) for a, b in self.renamed_pairs if a.operands != b.operands]

    @property
    def kernels_added(self) -> list[tuple]:
        """(name, shape, bytes read, bytes written) of kernels only the later module has."""
        return _kernel_difference(self.figures_after, self.figures_before)

    @property
    def kernels_removed(self) -> list[tuple]:
        return _kernel_difference(self.figures_before, self.figures_after)

    def flops(self) -> tuple[float, float]:
        """(flops before, flops after) from XLA's own HloCostAnalysis."""
        # HloCostAnalysis leaves out a property that stayed 0 (a module that only moves data)
        return _xla_cost(self.before).get("flops", 0.0), _xla_cost(self.after).get("flops", 0.0)

    def xla_bytes_accessed(self) -> tuple[float, float]:
        return (_xla_cost(self.before).get("bytes accessed", 0.0),
                _xla_cost(self.after).get("bytes accessed", 0.0))

    def excerpt(self, max_lines: int = 8) -> tuple[str, str]:
        """(before, after): the changed lines of each side with one line of context, other
        lines elided with ``...``; metadata is shown as ``metadata={...}``."""
        removed = {id(i) for i in self.removed} | {id(a) for a, _ in self.rewritten}
        added = {id(i) for i in self.added} | {id(b) for _, b in self.rewritten}
        return (_excerpt(self.before.module, removed, "-", max_lines),
                _excerpt(self.after.module, added, "+", max_lines))

    def shape_rows(self) -> list[dict]:
        """The kernels the pass removed and added, by output shape (without layout): unchanged
        kernels cancel, so the change in bytes is what the removed kernels moved minus what
        the added ones move, shape by shape."""
        rem, add = by_shape(self.kernels_removed), by_shape(self.kernels_added)
        rows = []
        for shape in sorted(set(rem) | set(add)):
            rc, rr, rw = rem.get(shape, (0, 0, 0))
            ac, ar, aw = add.get(shape, (0, 0, 0))
            rows.append({"kernel output shape": shape, "removed": rc, "added": ac,
                         "bytes read (removed - added)": rr - ar, "bytes written (removed - added)": rw - aw})
        return rows

    def record(self, evidence) -> list[dict]:
        """Record what every pass claim shows of one pass run: the excerpts, the step, score,
        kernel, byte and instruction counts, the by-shape table; returns its rows."""
        name, fb, fa = self.pass_name, self.figures_before, self.figures_after
        before, after = self.excerpt(max_lines=8)
        evidence.excerpt(f"before {name} ({shown_name(self.before.path)})", before, lang="hlo", fold=True)
        evidence.excerpt(f"after {name} ({shown_name(self.after.path)})", after, lang="hlo", fold=True)
        evidence.number("step", self.step)
        evidence.number("score", round(self.score, 6))
        evidence.number("kernels before", fb.kernel_count)
        evidence.number("kernels after", fa.kernel_count)
        for what, b, a in (("read", fb.bytes_read, fa.bytes_read), ("written", fb.bytes_written, fa.bytes_written)):
            evidence.number(f"bytes {what} before", b, unit="B")
            evidence.number(f"bytes {what} after", a, unit="B")
        evidence.number("instructions added", len(self.added))
        evidence.number("instructions removed", len(self.removed))
        evidence.number("instructions rewritten", len(self.rewritten))
        rows = self.shape_rows()
        evidence.table(f"kernels {name} removed and added, by output shape (kernels matched by "
                       f"name, shape and bytes, as stated under the ranking)", rows, fold=True)
        return rows

    def record_opcode_counts(self, evidence, plurals: dict[str, str]) -> None:
        """Record how many instructions of each opcode the entry computation held before and
        after the pass run, opcode by opcode; ``plurals`` (opcode -> its plural: ``divide`` ->
        ``divides``) names them (``divides before``, ``divides after``)."""
        for opcode, plural in plurals.items():
            evidence.number(f"{plural} before", count_opcode(self.before.module, opcode))
            evidence.number(f"{plural} after", count_opcode(self.after.module, opcode))

    def record_identities_removed(self, evidence) -> tuple[list, list]:
        """Record how many identity transposes and identity broadcasts the pass run removed
        (``identities_removed``); returns them."""
        transposes, broadcasts = self.identities_removed()
        evidence.number("identity transposes removed", len(transposes))
        evidence.number("identity broadcasts removed", len(broadcasts))
        return transposes, broadcasts

    def record_kernels_removed_of(self, evidence, shape: str) -> tuple[int, int, int]:
        """Record how many kernels with output ``shape`` (without layout) the pass run removed
        and the bytes they wrote; returns their (count, bytes read, bytes written)."""
        removed = by_shape(self.kernels_removed)[shape]
        evidence.number(f"{shape} kernels removed", removed[0])
        evidence.number(f"bytes written by the removed {shape} kernels", removed[2], unit="B")
        return removed

    def record_kernels_writing(self, evidence, nbytes: int, title: str) -> list[tuple]:
        """Record, under ``title``, the kernels of the later state that write ``nbytes``;
        returns them (name, shape, bytes read, bytes written)."""
        kernels = [k for k in self.figures_after.kernels if k[3] == nbytes]
        evidence.table(title, [{"kernel": k[0], "shape": k[1], "bytes written": k[3]} for k in kernels],
                       fold=True)
        return kernels

    def record_entry_of_shape(self, evidence, shape: str) -> list:
        """Record, as an excerpt, the instructions of the earlier state's entry computation
        whose result has ``shape`` (without layout), in order, parameters and bitcasts left
        out (not kernels: they run no code); returns them."""
        chain = [i for i in self.before.module.entry.instructions
                 if str(i.shape).startswith(shape) and i.opcode not in ("parameter", "bitcast")]
        evidence.excerpt(f"the {shape} kernels before {self.pass_name} (entry computation of "
                         f"{shown_name(self.before.path)}, in order)", show_lines(chain), lang="hlo", fold=True)
        return chain

    def record_fusion(self, evidence, kernel: str, title: str):
        """Record, under ``title``, the later state's fusion ``kernel`` and the computation it
        fuses, as dumped; returns that computation."""
        fusion = self.after.module.entry.instruction(kernel)
        body = self.after.module.computations[fusion.called[0]]
        evidence.excerpt(title, show_line(fusion) + "\n" + show_computation(body), lang="hlo", fold=True)
        return body

    def record_repointed(self, evidence) -> list[tuple]:
        """Record the renamed instructions (not counted), how many of them are users the pass
        pointed at another instruction (``repointed``), and those users before and after;
        returns the repointed pairs."""
        repointed = self.repointed()
        evidence.number("instructions renamed (not counted)", self.renamed)
        evidence.number("of them users whose operand now names the surviving copy", len(repointed))
        evidence.excerpt(f"users {self.pass_name} pointed at the surviving copies ('-' before, '+' after; "
                         "counted as renamed)", show_pairs(repointed), lang="hlo", fold=True)
        return repointed

    def record_removed(self, evidence, opcode: str, title: str) -> list:
        """Record, under ``title``, the instructions of ``opcode`` the pass run removed, as
        dumped (show_lines), in order; returns them."""
        removed = [i for i in self.removed if i.opcode == opcode]
        evidence.excerpt(title, show_lines(removed), lang="hlo", fold=True)
        return removed

    def record_added(self, evidence, opcode: str, title: str) -> list:
        """Record, under ``title``, the instructions of ``opcode`` the pass run added, as
        dumped (show_lines), in order; returns them."""
        added = [i for i in self.added if i.opcode == opcode]
        evidence.excerpt(title, show_lines(added), lang="hlo", fold=True)
        return added

    def record_replaced(self, evidence, opcode: str) -> tuple[list, list]:
        """Record the instructions of ``opcode`` the pass run removed beside those it added, in
        order, as a table of (name = shape) pairs; returns (removed, added)."""
        old = [i for i in self.removed if i.opcode == opcode]
        new = [i for i in self.added if i.opcode == opcode]
        evidence.table(f"{opcode}s before and after", [
            {"before": f"{a.name} = {a.shape}", "after": f"{b.name} = {b.shape}"} for a, b in zip(old, new)], fold=True)
        return old, new

    def to_dict(self, *, excerpts: bool = True, flops: bool = False) -> dict:
        fb, fa = self.figures_before, self.figures_after
        out: dict[str, Any] = {
            "pass": self.pass_name, "pipeline": self.pipeline, "step": self.step,
            "before_file": str(self.before.path), "after_file": str(self.after.path),
            "score": round(self.score, 6),
            "instructions": {"added": [i.name for i in self.added],
                             "removed": [i.name for i in self.removed],
                             "rewritten": [b.name for _, b in self.rewritten],
                             "renamed": self.renamed},
            "kernels": {"before": fb.kernel_count, "after": fa.kernel_count,
                        "added": [_kernel_dict(k) for k in self.kernels_added],
                        "removed": [_kernel_dict(k) for k in self.kernels_removed]},
            "bytes_read": {"before": fb.bytes_read, "after": fa.bytes_read},
            "bytes_written": {"before": fb.bytes_written, "after": fa.bytes_written},
        }
        if flops:
            b, a = self.flops()
            out["flops"] = {"before": b, "after": a}
        if excerpts:
            eb, ea = self.excerpt()
            out["excerpt"] = {"before": eb, "after": ea}
        return out


def opcode_rows(instructions, column: str) -> list:
    """How many of ``instructions`` each opcode has, as a table with a header row (opcode,
    ``column``), opcodes in alphabetical order."""
    return [["opcode", column]] + sorted(Counter(i.opcode for i in instructions).items())


def count_opcode(module, opcode: str) -> int:
    """Instructions of ``module``'s entry computation with this opcode."""
    return sum(1 for i in module.entry.instructions if i.opcode == opcode)


def by_shape(kernels) -> dict:
    """shape (without layout) -> (count, bytes read, bytes written) over kernels (name,
    shape, read, written)."""
    out: dict = {}
    for _, shape, r, w in kernels:
        key = shape_without_layout(shape)
        c, rr, ww = out.get(key, (0, 0, 0))
        out[key] = (c + 1, rr + r, ww + w)
    return out


def record_xla_agreement(evidence, *sides) -> list:
    """For each (label, state): our spill-style totals, XLA's HloCostAnalysis of the same
    text, and the named instructions where the two accountings differ, all sides in one
    table (folded when XLA's float32 rounding, one rule stated once, is its only cause).
    Returns (traffic, cost, unexplained bytes) per side: what XLA's total leaves over once
    its rules, restated per instruction, are added up (exactly, or through its float32 sum)."""
    from .traffic import module_traffic
    out, rows = [], []
    for label, state in sides:
        t = module_traffic(state.module)
        cost = cost_analysis(state.text, source=str(state.path))
        diffs = t.compare_with_xla(cost)
        unexplained = sum(x.ours - x.xla for x in diffs if x.instruction == "(unexplained)")
        evidence.number(f"XLA bytes accessed {label}", cost["bytes accessed"], unit="B")
        evidence.number(f"XLA flops {label}", cost["flops"])
        evidence.number(f"bytes the restated XLA rules leave unexplained {label}", unexplained, unit="B")
        rows += [{"program": label, "instruction": x.instruction, "ours (B)": x.ours,
                  "XLA (B)": int(x.xla) if float(x.xla).is_integer() else x.xla, "why": x.reason}
                 for x in diffs if x.instruction != "(unexplained)"]
        out.append((t, cost, unexplained))
    rounding_only = all(r["instruction"] == "(float32 rounding)" for r in rows)
    if rows:
        evidence.table("where spill-style and XLA's accounting differ"
                       + (": only XLA's float32 rounding, rule (xla bytes)" if rounding_only else ""),
                       rows, fold=True if rounding_only else None)
    return out


def plot_bytes(changes: list, path: Path, title: str) -> list:
    """Draw bytes read and written after each pass run that changed the program (the traced
    program first) with matplotlib into ``path``; returns the (label, Figures) points drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    points = [("traced", changes[0].figures_before)] + \
        [(f"{c.step:04d} {c.pass_name}", c.figures_after) for c in changes]
    labels = [p[0] for p in points]
    read = [p[1].bytes_read / 2**20 for p in points]
    written = [p[1].bytes_written / 2**20 for p in points]
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    ax.step(range(len(points)), read, where="post", label="bytes read (MiB)")
    ax.step(range(len(points)), written, where="post", label="bytes written (MiB)")
    ax.set_xticks(range(len(points)), labels, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("MiB, spill-style")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return points


@dataclass
class PassStudy:
    """One dump walked pass by pass: every step that changed the program, the ``top`` ranked,
    and the steps that did not, each with its reason."""
    dump: Dump
    changes: list
    top: list
    skipped: list  # (state, reason) of every step that did not change the program

    @classmethod
    def of(cls, dump: Dump, top: int = 10) -> "PassStudy":
        skipped: list = []
        changes = pass_changes(dump, skipped=skipped)
        return cls(dump, changes, ranked(changes, top), skipped)

    def rank(self, n: int) -> PassChange:
        return self.top[n - 1]

    def record_dump(self, evidence) -> None:
        """Record the dump every claim on this study reads (Dump.record): its manifest, hashed,
        and what it was compiled with."""
        self.dump.record(evidence, f"XLA dump of {self.dump.what}, every pass (manifest)")

    def record_pass(self, evidence, ch: PassChange, what: str = "") -> tuple[list[dict], list]:
        """Record what every claim on one pass run ``ch`` of this study shows: the dump, what
        the pass does (``what``, else WHAT_THE_PASS_DOES), the run's excerpts, counts and
        by-shape table (PassChange.record), and XLA's accounting of both sides
        (record_xla_agreement).  Returns (the by-shape rows, the agreement of the side before
        and of the side after) for the claim to judge."""
        self.record_dump(evidence)
        evidence.note(what or WHAT_THE_PASS_DOES[ch.pass_name])
        rows = ch.record(evidence)
        return rows, record_xla_agreement(evidence, (f"before {ch.pass_name}", ch.before),
                                          (f"after {ch.pass_name}", ch.after))

    def record_steps(self, evidence) -> None:
        """Record which steps changed the program, by the rule stated: the counts of snapshots,
        steps and pass runs, why each other step did not count, and the table of those steps."""
        record_rules(evidence, "states", "changed", words={"words": WORDS, "excerpt marks": EXCERPT_MARKS})
        reasons = Counter(why for _, why in self.skipped)
        evidence.number("pass snapshots written", len(self.dump.snapshots))
        evidence.number("steps (pairs of consecutive states, the traced and optimized programs "
                        "included)", len(self.dump.snapshots) + 1)
        evidence.number("steps whose two files are byte-identical", reasons["byte-identical"])
        evidence.number("steps that only changed metadata", reasons["metadata only"])
        evidence.number("steps that only renamed or reordered instructions", reasons["renaming or order only"])
        evidence.number("pass runs that changed the program", len(self.changes))
        evidence.table("the steps that did not change the program, and why", [
            {"step": "-" if st.step is None else st.step, "after": st.pass_name, "why not": why}
            for st, why in self.skipped], fold=True)

    def record_ends(self, evidence) -> tuple[Figures, Figures]:
        """Record the kernels and bytes of the traced and the optimized program, after the
        rules they are counted by; returns their figures (traced, optimized)."""
        record_rules(evidence, "kernels", "bytes", "xla bytes")
        fb, fa = self.changes[0].figures_before, self.changes[-1].figures_after
        evidence.number("kernels traced", fb.kernel_count)
        evidence.number("kernels optimized", fa.kernel_count)
        evidence.number("bytes read traced", fb.bytes_read, unit="B")
        evidence.number("bytes written traced", fb.bytes_written, unit="B")
        evidence.number("bytes read optimized", fa.bytes_read, unit="B")
        evidence.number("bytes written optimized", fa.bytes_written, unit="B")
        return fb, fa

    def record_traced_transposes(self, evidence) -> tuple[list, list]:
        """Record the traced program's transposes and how many of them the TransposeIsBitcast
        test makes bitcasts (so not kernels); returns (transposes, those bitcasts)."""
        traced = self.changes[0].before.module
        transposes = [i for i in traced.entry.instructions if i.opcode == "transpose"]
        relabels = [i for i in transposes if is_bitcast_transpose(traced.entry, i)]
        evidence.number("transposes in the traced program", len(transposes))
        evidence.number("of them bitcasts by the TransposeIsBitcast test, so not kernels", len(relabels))
        evidence.excerpt("the traced program's transposes (entry computation of "
                         f"{shown_name(self.dump.files.before_optimizations)})",
                         show_lines(transposes), lang="hlo", fold=True)
        return transposes, relabels

    def record_repeated_operands(self, evidence) -> list:
        """Record the traced program's kernels that name an operand twice and the bytes read
        through each repeated operand's second slot (each slot is read); returns those kernels."""
        traced = self.changes[0].before.module
        kernel_names = {k[0] for k in self.changes[0].figures_before.kernels}
        repeated = [i for i in traced.entry.instructions
                    if i.name in kernel_names and len(set(i.operands)) < len(i.operands)]
        again = sum(traced.entry.instruction(o).shape.byte_size
                    for i in repeated for n, o in enumerate(i.operands) if o in i.operands[:n])
        evidence.excerpt("the traced program's kernels that name an operand twice (jnp.square in "
                         "each layer norm, x ** 3 in the GELU): each slot is read",
                         show_lines(repeated), lang="hlo", fold=True)
        evidence.number("bytes read traced through a repeated operand's second slot", again, unit="B")
        return repeated

    def record_baseline(self, evidence) -> tuple[Baseline, int, list[str]]:
        """Record R0, W0 and N0 (what the score divides by) and where N0's instructions are:
        the entry computation and the computations it calls.  Returns (baseline, instructions
        of the entry computation, the called computations' names)."""
        base = self.changes[0].baseline
        traced = self.changes[0].before.module
        entry = len(traced.entry.instructions)
        callees = sorted({c for i in traced.entry.instructions if i.opcode in ("call", "while", "conditional")
                          for c in i.called})
        evidence.number("R0: bytes read by the traced program", base.bytes_read, unit="B")
        evidence.number("W0: bytes written by the traced program", base.bytes_written, unit="B")
        evidence.number("N0: instructions of the traced program compared", base.instructions)
        evidence.number("of them in the entry computation", entry)
        evidence.number(f"of them in the computations it calls ({', '.join(callees)})",
                        base.instructions - entry)
        return base, entry, callees

    def record_ranking(self, evidence) -> tuple[Baseline, int, list[str]]:
        """Record the ranking after the rules it rests on: R0, W0 and N0 (record_baseline), the
        ``top`` pass runs (top_rows) and what the table's instruction columns mean.  Returns
        record_baseline's (baseline, instructions of the entry computation, called
        computations)."""
        record_rules(evidence, "instructions", "matching", "score", "kernels matched")
        baseline = self.record_baseline(evidence)
        how_many = {10: "ten"}.get(len(self.top), str(len(self.top)))  # as the claims' sentences say it
        evidence.table(f"the {how_many} pass runs with the highest score", self.top_rows(), fold=True)
        evidence.note("+instr, -instr, ~instr: instructions added, removed and rewritten; the "
                      "score's instructions changed are their sum.")
        return baseline

    def top_rows(self) -> list[dict]:
        """The ranked pass runs, one row each: score, instruction counts, kernels and bytes."""
        return [{"rank": n, "pass": c.pass_name, "step": c.step, "pipeline": c.pipeline,
                 "score": round(c.score, 4), "+instr": len(c.added), "-instr": len(c.removed),
                 "~instr": len(c.rewritten), "renamed (not counted)": c.renamed,
                 "kernels": f"{c.figures_before.kernel_count} -> {c.figures_after.kernel_count}",
                 "bytes read": f"{c.figures_before.bytes_read:,} -> {c.figures_after.bytes_read:,}",
                 "bytes written": f"{c.figures_before.bytes_written:,} -> {c.figures_after.bytes_written:,}"}
                for n, c in enumerate(self.top, start=1)]

    def record_bytes_plot(self, evidence, path: Path, title: str) -> None:
        """Draw bytes read and written after each pass run that changed the program into
        ``path`` (plot_bytes) and record the figure and its points."""
        points = plot_bytes(self.changes, path, title)
        evidence.figure("bytes read and written across the pass sequence (drawn with matplotlib)", path)
        evidence.table("bytes after each pass that changed the program", [
            {"state": lab, "bytes read": f.bytes_read, "bytes written": f.bytes_written}
            for lab, f in points], fold=True)

    def falls(self) -> list[tuple[int, str]]:
        """(fall in bytes accessed (spill-style), pass name) of every pass run that changed
        the program, in order; a fall below 0 is a rise."""
        return [(c.figures_before.bytes_accessed - c.figures_after.bytes_accessed, c.pass_name)
                for c in self.changes]

    def record_largest_fall(self, evidence) -> tuple[int, str]:
        """Record the largest fall in bytes accessed of one pass run; returns (that fall, the
        pass's name)."""
        largest = max(self.falls())
        evidence.number("largest fall in bytes accessed, spill-style", largest[0], unit="B")
        return largest


def _kernel_difference(a: Figures, b: Figures) -> list[tuple]:
    """Kernels of ``a`` that ``b`` lacks: compared by (name, shape, bytes), so a kernel that
    kept its name but changed what it moves counts on both sides."""
    left: dict[tuple, int] = {}
    for k in b.kernels:
        left[k] = left.get(k, 0) + 1
    out = []
    for k in a.kernels:
        if left.get(k, 0):
            left[k] -= 1
        else:
            out.append(k)
    return out


def _kernel_dict(k: tuple) -> dict:
    return {"name": k[0], "shape": k[1], "bytes_read": k[2], "bytes_written": k[3]}


# ---- walking a dump ------------------------------------------------------------------------

def states(dump: Dump) -> list[State]:
    """The module before optimizations, every snapshot, the optimized module: in order."""
    dump.check_complete()
    before, optimized = dump.files.before_optimizations, dump.files.optimized
    assert before is not None and optimized is not None, "check_complete raises without them"
    out = [State("before optimizations", "(input)", "", None, before)]
    for s in dump.snapshots:
        out.append(State(s.label, s.after, s.pipeline, s.step, s.path))
    out.append(State("after optimizations", "(after the last dumped pass)", "", None, optimized))
    return out


def pass_changes(dump: Dump, *, progress: Callable[[int, int], None] | None = None,
                 skipped: list | None = None) -> list[PassChange]:
    """Every step that changed the program (DEFINITIONS["changed"]), in order.  ``skipped``,
    if given, receives ``(state, reason)`` for every other step.

    Snapshots share most of their text, and the work of a step grows with what its pass
    changed rather than with the module: a file byte-identical to the previous one is not
    parsed at all (about half of them: every ``pipeline-start``); the parser returns the same
    computation and instruction objects for unchanged text, so signatures, the diff and the
    kernel figures reuse what was worked out for those objects at an earlier step."""
    seq = states(dump)
    base = seq[0].module
    norm = _Normalizer()
    kernels = _KernelMemo()
    base_figures = figures_of(base, kernels)
    base_line = baseline_of(base, kernels)
    out: list[PassChange] = []
    prev, prev_sig, prev_fig = seq[0], _signature(base), base_figures
    skip = skipped.append if skipped is not None else (lambda item: None)
    prev_text = prev.text
    for i, cur in enumerate(seq[1:], start=1):
        if progress:
            progress(i, len(seq) - 1)
        text = cur.text
        if text == prev_text:  # the same bytes: the same program, no need to parse
            cur._module, cur._text, prev._text = prev.module, None, None
            prev = cur
            skip((cur, "byte-identical"))
            continue
        prev._text = None  # texts are only needed for this comparison
        prev_text = text
        mod = cur.module
        sig = _signature(mod)
        if sig == prev_sig:  # only metadata changed
            prev = cur
            skip((cur, "metadata only"))
            continue
        fig = figures_of(mod, kernels)
        added, removed, rewritten, renamed = _diff(prev.module, mod, norm)
        if not (added or removed or rewritten) and _same_figures(fig, prev_fig):
            # only renumbering or instruction order: not a change of the program (the
            # figures move on too, so that the next step's kernels carry this state's names)
            prev, prev_sig, prev_fig = cur, sig, fig
            skip((cur, "renaming or order only"))
            continue
        ch = PassChange(i, prev, cur, added, removed, rewritten, renamed, prev_fig, fig, base_line)
        ch.score = _score(ch, base_line)
        out.append(ch)
        prev, prev_sig, prev_fig = cur, sig, fig
    prev._text = None
    return out


def rank_passes(dump: Dump, top: int = 10, *, progress=None) -> list[PassChange]:
    """The ``top`` pass runs that changed the program most, highest score first.

    Score (DEFINITIONS["score"]): the share of the input program that the pass changed,
    summed over three views: ``|Δ bytes read| / R0 + |Δ bytes written| / W0 + instructions
    changed / N0``, where R0, W0 and N0 are the bytes read, bytes written and instructions
    compared of the module before optimizations.  Why: a ranking by bytes alone misses passes that restructure the program
    without moving bytes (layout, simplification), one by instruction count alone ranks a
    renaming sweep over a fusion; normalising by the input program makes the three terms
    comparable ("fusion removed 40 % of the bytes written" = 0.4) and independent of the
    program's size.  Flops are reported, not scored: XLA's cost analysis re-parses each
    module and would dominate the analysis time.
    """
    return ranked(pass_changes(dump, progress=progress), top)


def ranked(changes: list[PassChange], top: int = 10) -> list[PassChange]:
    """``changes`` by score, highest first (earlier first on ties), the first ``top``."""
    return sorted(changes, key=lambda c: (-c.score, c.position))[:top]


def _same_figures(a: Figures, b: Figures) -> bool:
    """Equal bytes and the same kernels up to their names (renaming is not a change)."""
    return (a.bytes_read, a.bytes_written) == (b.bytes_read, b.bytes_written) and \
        sorted(k[1:] for k in a.kernels) == sorted(k[1:] for k in b.kernels)


def _score(ch: PassChange, base: Baseline) -> float:
    fb, fa = ch.figures_before, ch.figures_after
    # (max(1, ...): a module that moves no bytes, or has no instructions, divides by one)
    r0, w0, n0 = max(1, base.bytes_read), max(1, base.bytes_written), max(1, base.instructions)
    return (abs(fa.bytes_read - fb.bytes_read) / r0 + abs(fa.bytes_written - fb.bytes_written) / w0
            + ch.instructions_changed / n0)


# ---- comparing two modules ---------------------------------------------------------------
#
# Consecutive snapshots share most of their lines, and the parser (hlo.py) returns the same
# HloComputation object for a computation whose text did not change and the same Instruction
# object for a line that did not change.  Everything below leans on that: results derived
# from a computation's text alone are kept with the computation (``HloComputation.memo``), and
# the diff compares objects before it compares text, so the work of one step grows with what
# the pass changed, not with the size of the module.

def _signature(module) -> tuple:
    """Equal for modules whose text without metadata is equal.  The canonical lines of each
    computation are kept with the (shared) computation, so a module costs one tuple per
    changed computation, and two signatures compare by identity where nothing changed."""
    return tuple((name, _canonical_lines(comp)) for name, comp in module.computations.items())


def _canonical_lines(comp) -> tuple:
    hit = comp.memo.get("passes.canonical")
    if hit is None:
        hit = comp.memo["passes.canonical"] = tuple(i.canonical for i in comp.instructions)
    return hit


def _top_computations(module) -> list:
    """The entry computation and the computations it reaches through control flow (while
    bodies, branches, calls): the level where kernels live.  Fused computations and reducers
    are part of the instruction that calls them.  Kept with the module."""
    hit = module.__dict__.get("_dumpref_top")
    if hit is not None:
        return hit
    seen, order, todo = set(), [], [module.entry.name]
    while todo:
        name = todo.pop()
        if name in seen or name not in module.computations:
            continue
        seen.add(name)
        comp = module.computations[name]
        order.append(comp)
        for inst in comp.instructions:
            if inst.opcode in RUNS_COMPUTATIONS:
                todo.extend(inst.called)
    module.__dict__["_dumpref_top"] = order
    return order


def _top_level(module) -> list[tuple[str, object]]:
    """(computation name, instruction) for every instruction of ``_top_computations``."""
    return [(c.name, i) for c in _top_computations(module) for i in c.instructions]


def _instruction_ids(comp) -> frozenset:
    hit = comp.memo.get("passes.ids")
    if hit is None:
        hit = comp.memo["passes.ids"] = frozenset(id(i) for i in comp.instructions)
    return hit


def _callers(comp) -> tuple:
    """The instructions of ``comp`` that call computations (fusions, reduces, loops...)."""
    hit = comp.memo.get("passes.callers")
    if hit is None:
        hit = comp.memo["passes.callers"] = tuple(i for i in comp.instructions if i.called)
    return hit


class _Normalizer:
    """Text of an instruction without numeric name suffixes, and signatures of the bodies it
    calls, cached per instruction object (the parser shares them between snapshots).

    A body signature is interned as a small integer (equal integers = equal signatures):
    signatures are nested tuples, which Python re-hashes on every dictionary look-up."""

    def __init__(self) -> None:
        self._norm: dict[int, tuple] = {}
        self._comp: dict[str, str] = {}
        self._interned: dict[tuple, int] = {}
        self._leaf_sig: dict[int, tuple] = {}  # id(computation) -> (computation, token)

    def norm(self, inst) -> str:
        hit = self._norm.get(id(inst))
        if hit is not None and hit[0] is inst:
            return hit[1]
        text = _SUFFIX.sub(_name_only, inst.canonical)
        self._norm[id(inst)] = (inst, text)
        return text

    def comp_name(self, name: str) -> str:
        hit = self._comp.get(name)
        if hit is None:
            hit = self._comp[name] = _SUFFIX.sub(_name_only, name)
        return hit

    def body(self, module, inst) -> tuple:
        """Signature of the computations ``inst`` calls (fused bodies, loop bodies,
        reducers), names without suffixes; cached per module and computation."""
        if not inst.called:
            return ()
        # per module and per normalizer: the tokens are this normalizer's
        owner, cache = module.__dict__.get("_dumpref_bodies", (None, None))
        if owner is not self:
            cache = {}
            module.__dict__["_dumpref_bodies"] = (self, cache)
        return tuple(self._comp_sig(module, c, cache, 0) for c in inst.called)

    def same_bodies(self, a, b, inst, same_objects: dict) -> bool:
        """Do the computations ``inst`` calls hold the same instruction objects in both
        modules (cheap), or failing that the same text without suffixes?  ``same_objects``
        remembers, for this pair of modules, which computations are the very same objects
        all the way down (the common case: the pass did not touch them)."""
        if all(self._same_objects(a, b, c, same_objects, 0) for c in inst.called):
            return True
        return all(self._ids(a, c) == self._ids(b, c) for c in inst.called) or \
            self.body(a, inst) == self.body(b, inst)

    def _same_objects(self, a, b, name: str, memo: dict, depth: int) -> bool:
        hit = memo.get(name)
        if hit is None:
            ca, cb = a.computations.get(name), b.computations.get(name)
            hit = ca is cb and (ca is None or depth > 16 or all(
                self._same_objects(a, b, c, memo, depth + 1) for c in ca.callees))
            memo[name] = hit
        return hit

    def _ids(self, module, name: str, depth: int = 0):
        cache = module.__dict__.setdefault("_dumpref_body_ids", {})
        hit = cache.get(name)
        if hit is None:
            comp = module.computations.get(name)
            if comp is None or depth > 16:
                return ()
            hit = tuple(id(i) if not i.called else
                        (id(i),) + tuple(self._ids(module, c, depth + 1) for c in i.called)
                        for i in comp.instructions)
            cache[name] = hit
        return hit

    def _comp_sig(self, module, name: str, cache: dict, depth: int):
        hit = cache.get(name)
        if hit is not None:
            return hit
        comp = module.computations.get(name)
        if comp is None or depth > 16:
            return -1  # the signature of a missing computation: ()
        if not comp.callees:  # a leaf: its signature is its own text, whatever the module
            leaf = self._leaf_sig.get(id(comp))
            if leaf is not None and leaf[0] is comp:
                cache[name] = leaf[1]
                return leaf[1]
        sig = tuple(self.norm(i) if not i.called else
                    (self.norm(i),) + tuple(self._comp_sig(module, c, cache, depth + 1) for c in i.called)
                    for i in comp.instructions)
        token = self._interned.setdefault(sig, len(self._interned))
        if not comp.callees:
            self._leaf_sig[id(comp)] = (comp, token)
        cache[name] = token
        return token


def _diff(a, b, norm: _Normalizer):
    """(added, removed, rewritten pairs, renamed pairs) between two modules' instructions
    compared (DEFINITIONS["instructions"] and ["matching"])."""
    comps_a, comps_b = _top_computations(a), _top_computations(b)
    # Fast path: an instruction object present on both sides (in the same computation, and
    # calling bodies that did not change) is unchanged, whatever else moved.  A computation
    # that is the same object on both sides only needs its calling instructions checked.
    b_by_name = {c.name: c for c in comps_b}
    a_names = {c.name for c in comps_a}
    same_objects: dict = {}
    ta: list[tuple] = []
    matched: dict = {}
    for ca in comps_a:
        cb = b_by_name.get(ca.name)
        if cb is None:
            ta.extend((ca.name, i) for i in ca.instructions)
            continue
        if ca is cb:
            changed = {id(i) for i in _callers(ca) if not norm.same_bodies(a, b, i, same_objects)}
            if changed:
                ta.extend((ca.name, i) for i in ca.instructions if id(i) in changed)
            matched[ca.name] = (False, changed)
            continue
        ids_b = _instruction_ids(cb)
        same = set()
        for inst in ca.instructions:
            if id(inst) in ids_b and (not inst.called or norm.same_bodies(a, b, inst, same_objects)):
                same.add(id(inst))
            else:
                ta.append((ca.name, inst))
        matched[ca.name] = (True, same)
    tb: list[tuple] = []
    for cb in comps_b:
        if cb.name not in a_names:
            tb.extend((cb.name, i) for i in cb.instructions)
            continue
        is_matched_set, ids = matched[cb.name]
        if is_matched_set:
            tb.extend((cb.name, i) for i in cb.instructions if id(i) not in ids)
        elif ids:
            tb.extend((cb.name, i) for i in cb.instructions if id(i) in ids)

    def exact(module, comp, inst):
        return (norm.comp_name(comp), inst.canonical, norm.body(module, inst))

    count: dict = {}
    keys_a = [exact(a, comp, inst) for comp, inst in ta]
    for k in keys_a:
        count[k] = count.get(k, 0) + 1
    only_b = []
    for comp, inst in tb:
        k = exact(b, comp, inst)
        if count.get(k, 0) > 0:
            count[k] -= 1
        else:
            only_b.append((comp, inst))
    only_a = []
    for k, (comp, inst) in zip(keys_a, ta):
        if count.get(k, 0) > 0:
            count[k] -= 1
            only_a.append((comp, inst))
    # pair by name: same name, different text = rewritten (unless only suffixes differ)
    by_name_a = {inst.name: (comp, inst) for comp, inst in only_a}
    rewritten, renamed = [], []
    rest_b = []
    for comp, inst in only_b:
        hit = by_name_a.pop(inst.name, None)
        if hit is None:
            rest_b.append((comp, inst))
            continue
        if _loose(a, hit[0], hit[1], norm) == _loose(b, comp, inst, norm):
            renamed.append((hit[1], inst))
        else:
            rewritten.append((hit[1], inst))
    # pair the rest by text without suffixes: renamed
    loose_a: dict = {}
    for comp, inst in by_name_a.values():
        loose_a.setdefault(_loose(a, comp, inst, norm), []).append(inst)
    added = []
    for comp, inst in rest_b:
        bucket = loose_a.get(_loose(b, comp, inst, norm))
        if bucket:
            renamed.append((bucket.pop(), inst))
        else:
            added.append(inst)
    removed = [i for bucket in loose_a.values() for i in bucket]
    if len(removed) > 1:
        order_a = {id(i): n for n, (_, i) in enumerate(_top_level(a))}
        removed.sort(key=lambda i: order_a[id(i)])
    return added, removed, rewritten, renamed


def _loose(module, comp, inst, norm: _Normalizer):
    text = norm.norm(inst)
    text = text[text.index(" = "):]  # the instruction's own name does not matter
    return (norm.comp_name(comp), text, norm.body(module, inst))


# ---- excerpts ------------------------------------------------------------------------------

def show_line(inst) -> str:
    """The instruction's line as dumped, with metadata elided."""
    return _METADATA_TEXT.sub(", metadata={...}", inst.line)


def show_lines(insts) -> str:
    """Instructions' lines as dumped (show_line), one a line."""
    return "\n".join(show_line(i) for i in insts)


def show_pairs(pairs) -> str:
    """(before, after) instruction pairs as a diff: '- ' the line before, '+ ' the line after."""
    return "\n".join(f"- {show_line(a).strip()}\n+ {show_line(b).strip()}" for a, b in pairs)


def show_computation(comp) -> str:
    """A computation as dumped, its header, every instruction (show_line) and its closing
    brace, so that any line can be found in the dump by searching for its first part."""
    return "\n".join([comp.header] + [show_line(i) for i in comp.instructions] + ["}"])


AS_DUMPED = "as dumped, metadata={...} shortened"


def record_entry(evidence, what: str, source) -> None:
    """Record the entry computation of ``source`` as a folded HLO excerpt (show_computation),
    titled ``what``, how it is shown and the file it is from (shown_name).  ``source``: a
    Snapshot (the module a pass saw or wrote) or a Dump (its optimized module)."""
    if isinstance(source, Dump):
        module, path = source.optimized, source.files.optimized
    else:
        module, path = source.module, source.path
    evidence.excerpt(f"{what}, {AS_DUMPED} ({shown_name(path)})", show_computation(module.entry),
                     lang="hlo", fold=True)


def _excerpt(module, marked: set, sign: str, max_lines: int) -> str:
    out: list[str] = []
    shown = 0
    hidden = 0
    for comp in module.computations.values():
        insts = comp.instructions
        hits = [n for n, i in enumerate(insts) if id(i) in marked]
        if not hits:
            continue
        header = comp.header if len(comp.header) <= 100 else comp.header[:96] + " ...{"
        out.append(header)
        keep: set[int] = set()
        for n in hits:
            keep.update((n - 1, n, n + 1))
        last = -1
        for n, inst in enumerate(insts):
            if n not in keep:
                continue
            if shown >= max_lines:
                hidden += sum(1 for h in hits if h >= n)
                break
            if n > last + 1:
                out.append("  ...")
            out.append(("%s " % sign if id(inst) in marked else "  ") + show_line(inst).strip())
            shown += 1
            last = n
        else:
            if last < len(insts) - 1:
                out.append("  ...")
            out.append("}")
            continue
        out.append("  ...")
        out.append("}")
        break
    if hidden:
        out.append(f"  ({hidden} more changed lines not shown)")
    if not out:
        out.append("(no top-level instruction changed on this side)")
    return "\n".join(out)


# ---- XLA's own numbers -------------------------------------------------------------------

# XLA's HloCostAnalysis of any HLO text file, with plain jax 0.10.2 and nothing of this package:
# the calls xla_private.cost_analysis makes, as a script a reader saves and runs on dump files.
# Compiled.cost_analysis() only reaches the two ends of a compile; this reaches every pass
# snapshot.  Tests run this exact text in a subprocess and compare its output with
# xla_private.cost_analysis of the same files.
XLA_COST_LISTING = """\
# xla_cost.py: XLA's own cost analysis of HLO text files (private jaxlib API of jax 0.10.2)
#   python xla_cost.py DUMP/*.txt   prints, per HLO module file: bytes accessed, flops, file
import sys

import jax  # first: it sets up jaxlib's logging, which jaxlib._hlo alone leaves verbose
from jax._src import xla_bridge
from jax._src.lib import _jax

try:
    from jaxlib._hlo import hlo_module_from_text  # XLA's own HLO parser (jaxlib 0.10)
except ImportError:
    hlo_module_from_text = _jax.hlo_module_from_text  # (jaxlib 0.9)

cpu = xla_bridge.get_backend("cpu")  # CPU shape sizes, as Compiled.cost_analysis() on CPU
for path in sys.argv[1:]:
    text = open(path).read()
    if not text.startswith("HloModule "):  # buffer assignments and other reports
        continue
    cost = _jax.hlo_module_cost_analysis(cpu, hlo_module_from_text(text))  # HloCostAnalysis
    print(f"{cost['bytes accessed']:.0f} {cost['flops']:.0f} {path}")
"""


_COST_CACHE: dict[str, dict] = {}


def _xla_cost(state: State) -> dict:
    key = str(state.path)
    if key not in _COST_CACHE:
        try:
            _COST_CACHE[key] = cost_analysis(state.text, source=key)
        except ValueError as e:
            raise DumpError(str(e)) from None
    return _COST_CACHE[key]


# ---- progress on a terminal ----------------------------------------------------------------

def terminal_progress(label: str, stream=None):
    """A progress callback that rewrites one stderr line, only when stderr is a terminal."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    last = [0.0]

    def report(i: int, n: int) -> None:
        now = time.monotonic()
        if now - last[0] < 0.2 and i < n:
            return
        last[0] = now
        stream.write(f"\r{label}: snapshot {i}/{n}" + ("\n" if i >= n else ""))
        stream.flush()
    return report


# ---- a tour of a dump folder ---------------------------------------------------------------

def tour(folder, *, module: str | None = None, top: int = 10, xla: bool = True,
         progress_stream=None) -> dict:
    """Analyse every module of a dump folder (or the one named): the ranked passes with their
    byte arithmetic and excerpts, as plain data.  A module that cannot be analysed gets an
    ``error`` naming the file instead, and the others are still analysed.  Raises DumpError
    when the folder holds no dumps or no module of that name."""
    df = DumpFolder(folder)
    found = df.find(module)
    if not found:
        raise DumpError(f"{df.folder}: no module {module!r} (modules: "
                        f"{', '.join(m.key for m in df.modules)})")
    out: dict[str, Any] = {"folder": str(df.folder), "definitions": dict(DEFINITIONS),
                           "modules": []}
    for mf in found:
        entry: dict = {"module": mf.key, "name": mf.name, "snapshots": len(mf.snapshot_paths)}
        try:
            d = Dump(mf)
            progress = terminal_progress(mf.key, progress_stream) if progress_stream else None
            changes = pass_changes(d, progress=progress)
            top_changes = ranked(changes, top)
            first = changes[0].figures_before if changes else figures_of(d.before_optimizations)
            last = changes[-1].figures_after if changes else first
            entry["input"] = _figures_dict(first)
            entry["optimized"] = _figures_dict(last)
            entry["passes_that_changed"] = len(changes)
            base = changes[0].baseline if changes else None
            base = base or baseline_of(d.before_optimizations)  # pass_changes gives every one
            entry["baseline"] = {"R0": base.bytes_read, "W0": base.bytes_written,
                                 "N0": base.instructions}
            entry["passes"] = []
            entry["backend"] = mf.backend
            for rank, c in enumerate(top_changes, start=1):
                item = {"rank": rank, **c.to_dict(excerpts=True)}
                if xla and mf.backend not in (None, "cpu"):
                    # the jaxlib here is XLA:CPU's: its cost analysis would count this module
                    # as XLA:CPU counts; the bytes above are this backend's own (traffic.py)
                    item["xla"] = {"error": f"not asked: XLA's cost analysis here is XLA:CPU's, and this module was "
                                            f"compiled for {mf.backend}; its bytes above are counted as {mf.backend} "
                                            f"counts them"}
                elif xla:
                    try:
                        fb, fa = c.flops()
                        xb, xa = c.xla_bytes_accessed()
                        item["xla"] = {"flops": {"before": fb, "after": fa},
                                       "bytes_accessed": {"before": xb, "after": xa}}
                    except Exception as e:  # XLA's parser may reject what ours accepts
                        item["xla"] = {"error": str(e)}
                entry["passes"].append(item)
        except DumpError as e:
            entry["error"] = str(e)
        out["modules"].append(entry)
    return out


def _figures_dict(f: Figures) -> dict:
    return {"kernels": f.kernel_count, "bytes_read": f.bytes_read,
            "bytes_written": f.bytes_written}
