"""What LLVM made of XLA:CPU's loop kernels: whether a kernel moves its elements as vectors or
one at a time, read from the code XLA dumps beside the optimized module.

XLA:CPU (``--xla_dump_to``) writes each kernel of the loop emitter beside the module: jaxlib
0.10 as optimized LLVM IR (``<module>.<kernel>_kernel_module.ir-with-opt.ll``) and as an object
file (``<module>.obj-file.<kernel>_kernel_module.o``); jaxlib 0.12 as the object file alone.  The
IR is read where it was dumped; the object file, disassembled by binutils' ``objdump`` (or
``llvm-objdump``), where it was not.  Either gives a kernel's **vector access**:

* ``"none"``: it moves no element of memory in a vector.  IR: no vector type at all.  Object
  code: no packed access to memory, a packed access being a move or operation of several
  elements (``vmovups``, ``vmulps``, ``vmovdqu``, ``vpand`` ...) whose memory operand is not on
  the stack (a spilled register) and not an offset from ``%rip``; a broadcast, a one-element
  insert or extract and the scalar forms (``vmovss``, ``vaddsd`` ...) move one element;
* ``"stores"``: it stores vectors and loads none (IR: no ``= load <N x``);
* ``"loads"``: it loads vectors: vectorised.

``scalar_kernels`` calls a loop kernel scalar where its access is ``"none"``, or ``"stores"``
where it copies an operand of at least half as many elements as it writes: a pad of the rows
(``jnp.pad(x, ((1, 1), (1, 1)))``), whose padding rows are stored as vectors of the padding
value while the rows that hold the operand's elements are copied one element at a time, each
behind its bounds test (pad_tanh's unfused ``wrapped_pad``, f32[1026, 1026], ran 461 us in a
render of 2026-12-06 where its memory priced it at 134).  A broadcast stores vectors and
loads none too, but reads one element or a row: it stays vectorised.

The two readings agree on the loop kernels of the 34 programs of the decisions claim, fused
and unfused (174 kernels, jaxlib 0.10.2, 2026-12-06), but one: cumsum_exp's unfused
``wrapped_slice.3`` (f32[256, 64] of a pad), a copy LLVM unrolled element by element in its
IR, of which the x86 back end merged 8 neighbouring elements into one 32-byte move.  The IR
calls it scalar, its code one packed load (cumsum_exp is a program the model refuses, for
its reduce-windows).  The scalar calibration kernels (``calibrate.k_*_scalar``) and the pad
compile to the same instructions on jaxlib 0.10.2 and 0.12.0.1.

The other emitter's kernels (``<module>.__compute_module_<kernel>``: the one-op kernels the
fusion-wrapper makes, and some fused copies) are read for one thing, whether their loop
**copies its vectors through the stack**: jaxlib 0.10's do, jaxlib 0.12's do not
(``lean_kernels``).  On jaxlib 0.10.2 the loop of ``x * y`` saves the stack pointer, stores
each 16-float block of one operand to the stack as one 64-byte vector, reads it back as two
32-byte halves to multiply, stores the products to the stack as two halves and reads them
back as one 64-byte vector to store them: 134 instructions, 15 of them writing ``%rsp``, and
loads that the store buffer cannot forward (their sizes differ from the stores'), where
jaxlib 0.12.0.1's loop is 42 instructions without a stack access.  IR: a call to
``llvm.stackrestore``; object code: the stack pointer restored from a register other than
the frame pointer (``mov %r12,%rsp``).  Of the 34 programs' dumps, 191 of the 226 such kernels
on jaxlib 0.10.2 (the others: kernels of a few elements, iotas, scalar copies) and none of
the 231 on 0.12.0.1 (2026-12-07).

Object code of another architecture than x86-64, or with no disassembler on the ``PATH``, is
not read (``unread_why`` says which): its kernels are called neither scalar nor vectorised,
nor lean.  Nothing here imports jax or pytest.
"""
from __future__ import annotations

import glob
import re
import shutil
import subprocess
from pathlib import Path

from ..naming import describe
from ..hlo import parse_module

IR_TAIL = "_kernel_module.ir-with-opt.ll"
OBJECT_TAIL = "_kernel_module.o"
COMPUTE_MODULE = "__compute_module_"               # the other emitter's kernels' files
STACK_RESTORE_IR = "@llvm.stackrestore"
STACK_RESTORE = re.compile(r"^\s*[0-9a-f]+:\s+mov\s+%(?!rbp\b|rsp\b)[a-z0-9]+,%rsp\s*$", re.M)
VECTOR_TYPE = re.compile(r"<\d+ x (?:float|double|half|bfloat|i\d+)>")
VECTOR_LOAD = re.compile(r"= load <\d+ x ")
DISASSEMBLERS = ("objdump", "llvm-objdump") + tuple(f"llvm-objdump-{v}" for v in range(20, 13, -1))
X86_64 = 62                                    # ELF e_machine of x86-64

# x86 mnemonics that move or compute one element, though some name a vector register
ONE_ELEMENT = re.compile(r"^(?:v?p?broadcast|v?pinsr|v?pextr|v?movd$|v?movq$|v?insertps|v?extractps)|(?:ss|sd)$")
PACKED = re.compile(r"(?:ps|pd)$|^(?:vp|v?movdq|v(?:insert|extract)[if](?:128|32x4|64x2|32x8|64x4))")
INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(.*)$")
FILE_FORMAT = re.compile(r"^(.*\S):\s+file format (\S+)\s*$")
OPERAND = re.compile(r"[^,(]*\([^)]*\)|[^,]+")


class KernelCodeError(ValueError):
    """A kernel's object file the disassembler could not read; the message names the file."""


def _module_prefix(path: Path) -> str:
    """``module_NNNN.<module>.``, what every file XLA wrote for the module ``path`` begins with."""
    named = describe(path.name)
    return (named[0] if named else path.name) + "."


def _dumped(path, head: str, tail: str) -> dict:
    """kernel name -> each file ``<module>.<head><kernel><tail>`` XLA:CPU dumped beside the
    optimized module ``path``."""
    path = Path(path)
    prefix = _module_prefix(path) + head
    return {f.name[len(prefix):-len(tail)]: f for f in path.parent.glob(f"{glob.escape(prefix)}*{tail}")}


def kernel_irs(path) -> dict:
    """kernel name -> path of its optimized LLVM IR, as XLA:CPU dumps it beside the optimized
    module ``path`` (``<module>.<kernel>_kernel_module.ir-with-opt.ll``).

    Only the loop emitter's kernels.  The other emitter's (``<module>.__compute_module_<kernel>
    .ir-with-opt.ll``: the one-op kernels, and some fused copies) are priced at rates measured
    on kernels of that emitter, scalar where theirs are: the one-op transpose the calibration
    times (``k_transpose_alone``, a ``wrapped_copy``) holds no vector type, as transpose_add's
    unfused ``wrapped_copy`` does not.  In the 34 programs' dumps (jax 0.10.2, 2026-12-06) 17
    of the 226 such kernels are scalar: that copy; kernels of one element (a loss's f32[]
    multiply); scan_rnn's (refused: a while loop); and in transformer_block and
    causal_attention, copies of 64K-128K elements that keep the minor dimension
    (``wrapped_copy``, ``copy_bitcast_fusion``), which the model prices on their memory alone.
    Whether those run slower than their memory, being scalar, is not measured."""
    return _dumped(path, "", IR_TAIL)


def kernel_objects(path) -> dict:
    """kernel name -> path of its object file, as XLA:CPU dumps it beside the optimized module
    ``path`` (``<module>.obj-file.<kernel>_kernel_module.o``): the loop emitter's kernels."""
    return _dumped(path, "obj-file.", OBJECT_TAIL)


def ir_access(ir: str) -> str:
    """A kernel's vector access (the module's docstring) from its optimized LLVM IR."""
    if not VECTOR_TYPE.search(ir):
        return "none"
    return "loads" if VECTOR_LOAD.search(ir) else "stores"


def disassembler() -> str | None:
    """The first of ``DISASSEMBLERS`` on the PATH, or None."""
    return next((p for p in map(shutil.which, DISASSEMBLERS) if p), None)


def _elf_machine(path: Path) -> int | None:
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:      # little-endian ELF only
        return None
    return int.from_bytes(head[18:20], "little")


def unread_why(objects) -> str | None:
    """Why the object files ``objects`` cannot be read here, or None when they can."""
    if not objects:
        return None
    if disassembler() is None:
        return f"no disassembler on the PATH ({', '.join(DISASSEMBLERS[:2])}) to read the kernels' object code"
    other = sorted(str(f) for f in objects if _elf_machine(Path(f)) != X86_64)
    if other:
        return f"object code that is not x86-64 ELF is not read: {other[0]}"
    return None


def packed_accesses(disassembly: str) -> dict:
    """object file -> (packed loads, packed stores), from ``objdump -d`` output (AT&T syntax)
    of one or more files.  Accesses to the stack (spilled registers: ``%rsp``, ``%rbp``) and at
    an offset from ``%rip`` are not counted."""
    counts: dict = {}
    current = None
    for line in disassembly.replace("\t", " ").splitlines():
        head = FILE_FORMAT.match(line)
        if head:
            current = head.group(1)
            counts[current] = [0, 0]
            continue
        m = INSTRUCTION.match(line)
        if m is None or current is None:
            continue
        words = [w for w in m.group(1).split() if not w.startswith("{")]     # {evex}, {vex}
        if not words:
            continue
        mnemonic, operands = words[0], "".join(words[1:])
        if ONE_ELEMENT.search(mnemonic) or not (PACKED.search(mnemonic) or (mnemonic.startswith("p") and "%xmm" in operands)):
            continue
        parts = [o.strip() for o in OPERAND.findall(operands)]
        memory = [i for i, o in enumerate(parts) if "(" in o]
        if not memory or any(r in parts[i] for i in memory for r in ("%rsp", "%rbp", "%rip")):
            continue
        counts[current][1 if memory[-1] == len(parts) - 1 else 0] += 1
    return {f: tuple(c) for f, c in counts.items()}


def object_accesses(objects: dict) -> dict:
    """kernel name -> vector access (the module's docstring) from the object files ``objects``
    (kernel name -> path), disassembled in one call; {} where they cannot be read here
    (``unread_why``).  Raises KernelCodeError, naming the file, where the disassembler fails on
    one (``cost`` then reports it as bad input, never a traceback)."""
    return {name: _access(f, text) for name, (f, text) in _read(objects).items()}


def _disassemble(objects: dict) -> dict:
    """kernel name -> ``objdump -d`` text of its object file (``objects``: kernel name -> path),
    all disassembled in one call; raises KernelCodeError naming a file it could not read."""
    tool = disassembler()
    done = subprocess.run([str(tool), "-d", "--no-show-raw-insn", *map(str, objects.values())],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KernelCodeError(f"{tool} -d failed on {sorted(map(str, objects.values()))[0]}: "
                              f"{done.stderr.strip()[-500:]}")
    lines: dict = {}               # file -> its lines, from its "file format" line on
    current: list | None = None
    for line in done.stdout.splitlines():
        head = FILE_FORMAT.match(line)
        if head:
            current = lines.setdefault(head.group(1), [])
        if current is not None:
            current.append(line)
    missing = [str(f) for f in objects.values() if str(f) not in lines]
    if missing:
        raise KernelCodeError(f"{tool} -d printed no disassembly of {missing[0]}")
    return {name: "\n".join(lines[str(f)]) for name, f in objects.items()}


LOOP, COMPUTE = "loop", "compute"               # the two emitters (the module's docstring)


def compute_module_code(path) -> dict:
    """kernel name -> the code of each kernel of the other emitter (``__compute_module_``) of
    the optimized module ``path``: its optimized IR where dumped
    (``<module>.__compute_module_<kernel>.ir-with-opt.ll``), else its object file
    (``<module>.obj-file.__compute_module_<kernel>.o``)."""
    return {**_dumped(path, f"obj-file.{COMPUTE_MODULE}", ".o"), **_dumped(path, COMPUTE_MODULE, ".ir-with-opt.ll")}


def _read(files: dict) -> dict:
    """key -> (file, text) for ``files`` (key -> path): an IR file's text, an object file's
    disassembly, the object files in one disassembler call; an object file that cannot be
    read here (``unread_why``) is left out."""
    code = {k: (f, f.read_text()) for k, f in files.items() if f.suffix == ".ll"}
    objects = {k: f for k, f in files.items() if k not in code}
    if objects and not unread_why(objects.values()):
        code.update({k: (objects[k], text) for k, text in _disassemble(objects).items()})
    return code


def read_code(path) -> dict:
    """(emitter, kernel name) -> (file, text) of every kernel whose code XLA:CPU dumped beside
    the optimized module ``path`` and that can be read here: the loop emitter's (``LOOP``) and
    the other's (``COMPUTE``), each from its IR where that was dumped, else from its object
    file, all the object files disassembled in one call.  ``vector_accesses``,
    ``scalar_kernels`` and ``lean_kernels`` take it, so that one reading serves all three."""
    path = Path(path)
    loop = {**kernel_objects(path), **kernel_irs(path)}
    return _read({**{(LOOP, n): f for n, f in loop.items()},
                  **{(COMPUTE, n): f for n, f in compute_module_code(path).items()}})


def _access(f: Path, text: str) -> str:
    """A loop kernel's vector access from its IR or its disassembly."""
    if f.suffix == ".ll":
        return ir_access(text)
    loads, stores = next(iter(packed_accesses(text).values()), (0, 0))
    return "loads" if loads else ("stores" if stores else "none")


def vector_accesses(path, code: dict | None = None) -> dict:
    """kernel name -> vector access of each loop kernel of the optimized module ``path``:
    from its IR where that was dumped, from its object code where only that was
    (``code``: ``read_code(path)``, read here when not given)."""
    code = read_code(path) if code is None else code
    return {name: _access(f, text) for (emitter, name), (f, text) in code.items() if emitter == LOOP}


def scalar_kernels(path, code: dict | None = None) -> frozenset:
    """The loop kernels of the optimized module ``path`` that LLVM left scalar (the module's
    docstring: a vector access of ``"none"``, or of ``"stores"`` where the kernel copies an
    operand at least half its output's size).  A kernel whose code is not read is not among
    them.  ``code``: as ``vector_accesses``."""
    access = vector_accesses(path, code)
    scalar = {name for name, a in access.items() if a == "none"}
    unloaded = [name for name, a in access.items() if a == "stores"]
    if unloaded:
        entry = parse_module(Path(path).read_text(), source=str(path)).entry
        for name in unloaded:
            if name not in entry:
                continue
            inst = entry.instruction(name)
            if inst.shape.is_tuple:
                continue
            sizes = [entry.instruction(o).shape for o in inst.operands]
            if any(not s.is_tuple and 2 * s.element_count >= inst.shape.element_count for s in sizes):
                scalar.add(name)
    return frozenset(scalar)


def lean_kernels(path, code: dict | None = None) -> frozenset:
    """The other emitter's kernels of the optimized module ``path`` whose code was read and
    does not copy its vectors through the stack (the module's docstring).  A kernel whose
    code is not read here (``unread_why``) is not among them.  ``code``: as
    ``vector_accesses``."""
    code = read_code(path) if code is None else code
    return frozenset(name for (emitter, name), (f, text) in code.items() if emitter == COMPUTE and not (
        STACK_RESTORE_IR in text if f.suffix == ".ll" else STACK_RESTORE.search(text)))


def facts(path) -> dict:
    """What the code dumped beside the optimized module ``path`` tells the cost model, as the
    keyword arguments of ``cost_model.analyse`` and ``cost_model.predict_text``: its scalar
    loop kernels and its lean one-op kernels, from one reading of the code (``read_code``)."""
    code = read_code(path)
    return {"scalar_kernels": scalar_kernels(path, code), "lean_kernels": lean_kernels(path, code)}
