"""Level 3 for ``jax.jit(lambda x: x + 1)`` on the minimal plugin, from the page: minimal.c's
level-3 slots filled from Python (:mod:`.level3_add`) before jax asks for the device, the
program jax sends read by :mod:`.program_reader`, and what Study 3 records of the run (its
notes and listings), so the claim holds only its sentences and assertions.
"""
from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

from .minimal import MEMORY_KIND, MEMORY_KIND_LINE, edited_minimal, plain_registration
from .pjrt_map import level_passed
from .trace import as_run, run_jax

# Level 3 for x + 1 on the minimal plugin: its table's level-3 slots filled from Python
# (pytest_dumpref/pjrt/level3_add.py) before jax asks for the device.
ADD_ONE = """
import json, os
from pytest_dumpref.pjrt import level3_add
level3_add.install(os.environ['PJRT_NAMES_AND_LIBRARY_PATHS'].split(':', 1)[1], leave_out=LEAVE_OUT)
dev = jax.devices('dumpref')[0]
a = np.arange(6, dtype=np.float32).reshape(2, 3)
y = jax.jit(lambda x: x + 1)(jax.device_put(a, dev))
assert y.devices() == {dev} and (np.asarray(y) == a + 1).all(), y
print(json.dumps(level3_add.seen))
print('DUMPREF-LEVEL-OK', flush=True)
"""


def run(library, leave_out=()):
    """ADD_ONE run against ``library``, the slots ``leave_out`` names left unfilled."""
    code = ADD_ONE.replace("LEAVE_OUT", repr(tuple(leave_out)))
    return run_jax(library, code, trace=False, env=plain_registration(library))


#: How python -c names the file of the code it runs (run_jax runs snippets so): the artifact's
#: string table holds it.
CALLER_FILE = "<string>"


def artifact_note(sent: dict, prog, code: bytes) -> str:
    """What the x + 1 artifact is (``prog``: its program_reader.Program; ``sent``: what
    level3_add saw jax pass to Compile), and why its byte count is this snippet's."""
    return (f"The artifact: format {sent['format']!r}; magic ML\\xefR; producer "
            f"{prog.producer!r}; dialects {', '.join(prog.dialects)}; op names "
            f"{', '.join(prog.op_names)}; sha256 {hashlib.sha256(code).hexdigest()}. "
            f"jax also sent {sent['compile_options_size']} bytes of compile options "
            "(a serialized CompileOptionsProto), which this device ignores. The count and "
            "the hash are this snippet's: the string table ("
            f"{', '.join(repr(t) for t in prog.strings)}) holds where x + 1 was written "
            f"(file {CALLER_FILE!r}, as python -c names it, and the functions around it), "
            f"the argument's name and the device's memory kind {MEMORY_KIND!r}, so the same "
            "x + 1 written in a file of your own sends a different count; the ops do not "
            "change. (The code_size in the levels' tables is another program's: level 3's "
            "snippet, jnp.tanh(t) @ t.T + 1.)")


def rows(built, run_all, tmp_path: Path) -> list[dict]:
    """x + 1 on the minimal plugin by which level-3 slots it fills: all of level3_add.py's
    (``run_all``, already made), without OutputMemoryKinds, and without it on a copy of minimal.c
    whose memory kind is jax's default 'device' (built in ``tmp_path``)."""
    kind_device = edited_minimal(tmp_path, "kind device", MEMORY_KIND_LINE,
                                 MEMORY_KIND_LINE.replace(MEMORY_KIND, "device"))
    variants = [("all of level3_add.py's slots", built, ()),
                ("without PJRT_Executable_OutputMemoryKinds", built,
                 ("PJRT_Executable_OutputMemoryKinds",)),
                ("without it, and minimal.c's memory kind 'hbm' edited to 'device'", kind_device,
                 ("PJRT_Executable_OutputMemoryKinds",))]
    out = []
    for name, lib, leave_out in variants:
        r = run_all if not leave_out else run(lib.path, leave_out)
        out.append({"minimal.c plus": name, "x + 1 ran": "yes" if level_passed(r) else "no",
                     "how it ended": r.why if not level_passed(r) else "printed the mark"})
    return out


#: What Compile and Execute must produce, said in words once x + 1 ran (the level-3 claim).
COMPILE_AND_EXECUTE = (
    "What Compile and Execute must produce. Compile: read program->code (code_size bytes, "
    "format 'mlir') before returning (jax keeps no copy for the device), and hand back a "
    "PJRT_LoadedExecutable* of the device's own; GetExecutable hands back a PJRT_Executable* "
    "that jax destroys with Executable_Destroy (a handle of its own: LoadedExecutable_Destroy "
    "frees the loaded one); NumOutputs is main's return count; AddressableDevices is the "
    "client's device array; GetDeviceAssignment gives the 8 bytes of level 3's fill table (a "
    "DeviceAssignmentProto: 1 replica, 1 computation, on device 0) and a deleter function "
    "that may do nothing. Execute: argument_lists[d][i] are jax's input buffers; "
    "output_lists[d] is an array of NumOutputs slots that jax allocated: write a new "
    "PJRT_Buffer* into each (jax destroys it), shaped and typed as main's result types say; "
    "if device_complete_events is not NULL, put a ready event in [d]. An output's memory kind "
    "is 'device' unless OutputMemoryKinds names another (the table above). The format: an "
    "op is its name (an index into the dialect section's op names: vhlo.add_v1), its result "
    "types (indices into the type table; vhlo type code 20 is a ranked tensor: rank, dims as "
    "zigzag varints, element type, whose code 4 is f32) and its operands (value numbers); "
    "constant_v1's value is its one property, a vhlo tensor attribute (code 15) holding the "
    "raw bytes. program_reader.py below reads all of it, to port.")


def record_listings(evidence) -> None:
    """The listings the level-3 claim prints: program_reader.py and level3_add.py whole, what
    level3_add.py imports from the package, and the x + 1 snippet as it ran."""
    # imported here, not above: level3_add reads the real pjrt_c_api.h through cffi on import
    from . import level3_add, program_reader
    evidence.excerpt("pytest_dumpref/pjrt/program_reader.py, the whole file (reads the artifact; "
                     "python program_reader.py prog.bin lists and runs it)",
                     inspect.getsource(program_reader), lang="python", fold=True)
    evidence.excerpt("pytest_dumpref/pjrt/level3_add.py, the whole file (level 3 for x + 1 on "
                     "minimal.c, in Python through cffi: the C a builder writes, entry point by "
                     "entry point)", inspect.getsource(level3_add), lang="python", fold=True)
    evidence.excerpt("what level3_add.py imports from the package (abi.py, toolchain.py), the "
                     "whole of it", level3_add.imports_listing(), lang="python", fold=True)
    evidence.excerpt("what ran, in a fresh Python with minimal.c's library registered by "
                     "PJRT_NAMES_AND_LIBRARY_PATHS", as_run(ADD_ONE.replace("LEAVE_OUT", "()")),
                     lang="python", fold=True)
