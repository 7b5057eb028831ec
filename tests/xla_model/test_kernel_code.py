"""Reading what LLVM made of XLA:CPU's loop kernels (xla/cpu/kernel_code.py): from their optimized
IR where the dump holds it (jaxlib 0.10), from their object code where it holds only that
(jaxlib 0.12); the two readings agree."""
from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
import pytest

from pytest_dumpref import examples
from pytest_dumpref.xla.cpu import calibrate, kernel_code

X = np.ones((1024, 1024), np.float32)
UNFUSED = {"xla_disable_hlo_passes": "fusion"}

# the loop kernels of three programs, by what their code moves as vectors: the pad of the rows
# stores vectors of the padding value and loads none; the broadcast of one element stores
# vectors; the pad fused with its tanh moves none; tanh(x) + 0.5 loads and stores vectors
PROGRAMS = {
    "pad_tanh unfused": (examples.pad_tanh, UNFUSED, {"wrapped_pad": "stores", "wrapped_broadcast": "stores"}),
    "pad_tanh fused": (examples.pad_tanh, None, {"*": "none"}),
    "tanh add": (lambda x: jnp.tanh(x) + 0.5, None, {"*": "loads"}),
}


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def program(request, tmp_path_factory):
    fn, options, expected = PROGRAMS[request.param]
    d = tmp_path_factory.mktemp(request.param.replace(" ", "-"))
    calibrate.dump_optimized(fn, [X], d, options)
    return next(d.glob("*.cpu_after_optimizations.txt")), expected


def _named(expected, names):
    if "*" in expected:
        return dict.fromkeys(names, expected["*"])
    return {next(n for n in names if n.startswith(prefix)): a for prefix, a in expected.items()}


def test_the_object_code_and_the_ir_give_each_kernel_the_same_vector_access(program):
    path, expected = program
    objects = kernel_code.kernel_objects(path)
    assert objects, "XLA:CPU dumps every loop kernel's object file beside the module"
    if why := kernel_code.unread_why(objects.values()):
        pytest.skip(why)
    from_code = kernel_code.object_accesses(objects)
    assert from_code == _named(expected, list(objects))
    irs = kernel_code.kernel_irs(path)
    if irs:       # jaxlib 0.10 dumps the IR too (0.12 does not): the two readings agree
        assert {n: kernel_code.ir_access(f.read_text()) for n, f in irs.items()} == from_code
        assert kernel_code.vector_accesses(path) == from_code
    else:         # where it does not, the object code is what is read
        assert kernel_code.vector_accesses(path) == from_code


# objdump -d --no-show-raw-insn, as binutils prints it, and llvm-objdump's form of two of the lines
DISASSEMBLY = """
a.o:     file format elf64-x86-64

Disassembly of section .ltext:

0000000000000000 <wrapped_pad>:
   0:\tpush   %rbp
  20:\tvmovss (%r11),%xmm0
  28:\tvmovss %xmm0,-0xfc(%rax,%rdx,1)
  31:\t{evex} vmovups %ymm0,0x100(%r9)
  39:\tvbroadcastss (%rcx),%ymm1
  41:\tvmovaps %xmm6,-0xa0(%rbp)
  48:\tvmovdqa64 -0x80(%rbp),%xmm22
  50:\tvmulps 0x40(%rip),%ymm1,%ymm2
  58:\tpop    %rbp

b.o:\tfile format elf64-x86-64

0000000000000000 <loop>:
      10:      \tvmovups\t(%rsi,%rax,4), %ymm0
      18:      \tvmulps\t0x20(%rsi,%rax,4), %ymm0, %ymm1
      20:      \tvmovups\t%ymm1, (%rdi,%rax,4)
      28:      \tvpaddd\t(%rdx), %xmm2, %xmm3
      30:      \tvpbroadcastd\t(%r8), %xmm17
      38:      \tpand\t(%rax), %xmm4
"""


def test_packed_loads_and_stores_are_counted_and_one_element_moves_spills_and_constants_are_not():
    counts = kernel_code.packed_accesses(DISASSEMBLY)
    # a.o: one packed store of the padding value; the scalar moves, the broadcast of one
    # element, the spills to the stack and the constant read at an offset from %rip are not
    # packed accesses.  b.o: loads by vmovups, vmulps, vpaddd and pand (SSE), one store
    assert counts == {"a.o": (0, 1), "b.o": (4, 1)}


def _elf(path, machine):
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    head[18:20] = machine.to_bytes(2, "little")
    path.write_bytes(bytes(head))
    return path


def test_object_code_that_cannot_be_read_here_is_said_so_and_called_neither(tmp_path, monkeypatch):
    arm = _elf(tmp_path / "m.obj-file.wrapped_pad_kernel_module.o", 183)        # aarch64
    assert kernel_code.unread_why([arm]) == f"object code that is not x86-64 ELF is not read: {arm}"
    assert kernel_code.object_accesses({"wrapped_pad": arm}) == {}
    x86 = _elf(tmp_path / "x.o", kernel_code.X86_64)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert kernel_code.unread_why([x86]).startswith("no disassembler on the PATH (objdump, llvm-objdump)")
    assert kernel_code.object_accesses({"k": x86}) == {}


def test_an_object_file_the_disassembler_refuses_is_named(tmp_path):
    if kernel_code.disassembler() is None:
        pytest.skip("no disassembler on the PATH")
    broken = _elf(tmp_path / "m.obj-file.wrapped_pad_kernel_module.o", kernel_code.X86_64)   # a header, no sections
    with pytest.raises(kernel_code.KernelCodeError, match=r"m\.obj-file\.wrapped_pad_kernel_module\.o"):
        kernel_code.object_accesses({"wrapped_pad": broken})
    # a ValueError, which `cost` reports as bad input naming the file, not as an internal error
    assert issubclass(kernel_code.KernelCodeError, ValueError)


def test_a_module_whose_kernels_code_is_missing_has_no_scalar_kernel(tmp_path_factory):
    d = tmp_path_factory.mktemp("stripped")
    calibrate.dump_optimized(examples.pad_tanh, [X], d, UNFUSED)
    for f in d.iterdir():
        if f.name.endswith((kernel_code.IR_TAIL, kernel_code.OBJECT_TAIL)):
            os.remove(f)
    path = next(d.glob("*.cpu_after_optimizations.txt"))
    assert kernel_code.vector_accesses(path) == {} and kernel_code.scalar_kernels(path) == frozenset()


# ---- the other emitter's kernels: do they copy their vectors through the stack? ------------

def _jaxlib() -> tuple:
    import jaxlib
    return tuple(int(p) for p in jaxlib.__version__.split(".")[:2])


def test_a_one_op_kernel_is_lean_where_its_loop_copies_no_vector_through_the_stack(tmp_path_factory):
    """x * y unfused is the fusion-wrapper's one-op kernel (``__compute_module_wrapped_multiply``):
    jaxlib 0.10's loop saves and restores the stack pointer to copy its vectors through the
    stack, jaxlib 0.12's does not; the IR (where dumped) and the object code say the same, and
    facts() hands the model both of what the code says."""
    d = tmp_path_factory.mktemp("one-op-multiply")
    calibrate.dump_optimized(lambda a, b: a * b, [X, X], d, UNFUSED)
    path = next(d.glob("*.cpu_after_optimizations.txt"))
    code = kernel_code.compute_module_code(path)
    assert list(code) == ["wrapped_multiply"]
    objects = {n: f for n, f in code.items() if f.suffix == ".o"} or {
        "wrapped_multiply": next(d.glob(f"*obj-file.{kernel_code.COMPUTE_MODULE}wrapped_multiply.o"))}
    if why := kernel_code.unread_why(objects.values()):
        pytest.skip(why)
    lean = kernel_code.lean_kernels(path)
    assert lean == (frozenset({"wrapped_multiply"}) if _jaxlib() >= (0, 12) else frozenset())
    if code["wrapped_multiply"].suffix == ".ll":      # jaxlib 0.10: the object code, read alone, agrees
        restores = kernel_code.STACK_RESTORE.search(kernel_code._disassemble(objects)["wrapped_multiply"])
        assert (restores is None) == ("wrapped_multiply" in lean)
    assert kernel_code.facts(path) == {"scalar_kernels": kernel_code.scalar_kernels(path), "lean_kernels": lean}


def test_the_stack_pointer_restored_from_a_register_is_a_stack_copy_and_a_frame_is_not():
    restore = ["  f3:\tmov    %r12,%rsp", "  10:      \tmov\t%rax,%rsp"]
    frame = ["  0:\tsub    $0x40,%rsp", "  25d:\tlea    -0x28(%rbp),%rsp", "  26:\tmov    %rbp,%rsp",
             "  a7:\tmov    %rsp,%r12", "  ce:\tlea    -0x40(%rsi),%rsp"]
    for line in restore:
        assert kernel_code.STACK_RESTORE.search(line.replace("\t", " ")), line
    for line in frame:
        assert not kernel_code.STACK_RESTORE.search(line.replace("\t", " ")), line


def test_a_kernel_whose_code_is_not_read_is_not_lean(tmp_path_factory, monkeypatch):
    d = tmp_path_factory.mktemp("one-op-stripped")
    calibrate.dump_optimized(lambda a, b: a * b, [X, X], d, UNFUSED)
    path = next(d.glob("*.cpu_after_optimizations.txt"))
    monkeypatch.setenv("PATH", str(d / "nothing-here"))          # no disassembler
    for f in d.glob(f"*{kernel_code.COMPUTE_MODULE}*.ll"):
        os.remove(f)
    assert kernel_code.compute_module_code(path) and kernel_code.lean_kernels(path) == frozenset()
