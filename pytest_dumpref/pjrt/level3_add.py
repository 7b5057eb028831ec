"""Level 3 for ``jax.jit(lambda x: x + 1)``: the minimal plugin's table given the eight entry
points level 3 needs and OutputMemoryKinds (minimal.c's memory kind is "hbm", and jax takes an
output's kind to be "device" unless told), written in Python through cffi, so Study 3 can run
(and list) what Compile and Execute must produce before a builder writes it in C.

``install(library)`` loads the minimal plugin (plugin_c/minimal/minimal.c, levels 1 and 2), fills
its level-3 slots with the functions below, and must run before jax first asks for a device (jax
dlopens the same library and reads the same table).  The objects it makes follow minimal.c's own
structs, because minimal.c's Buffer_* and Error_* entry points read and free them: a buffer is
``MinimalBuffer`` (allocated with the C allocator: Buffer_Destroy frees it), an error
``MinimalError``.  The program is read by :mod:`.program_reader`.
"""
from __future__ import annotations

import inspect
from typing import Any

import cffi
import numpy as np

from . import abi, toolchain
from .abi import PJRT_TYPE_OF_DTYPE, _ffi
from .program_reader import Program

ffi = _ffi()
c = cffi.FFI()
c.cdef("""
typedef struct { int type; size_t num_dims, size; int64_t dims[16]; char* data; bool deleted; } MinimalBuffer;
typedef struct { int code; const char* message; } MinimalError;
void* calloc(size_t, size_t);
""")
libc = c.dlopen(None)
TYPE = {name: ffi.typeof("PJRT_Buffer_Type").relements[f"PJRT_Buffer_Type_{t}"]
        for name, t in PJRT_TYPE_OF_DTYPE.items()
        if name in ("float32", "float64", "int32", "int64", "bool")}
DTYPE = {v: np.dtype(k) for k, v in TYPE.items()}
# serialized DeviceAssignmentProto: replica_count 1, computation_count 1, one computation on
# device 0 (protobuf fields 1, 2 and 3 { field 1: 0 })
DEVICE_ASSIGNMENT = ffi.new("char[]", b"\x08\x01\x10\x01\x1a\x02\x08\x00")
keep: list[Any] = []          # every cffi object C may still point at
programs: dict[int, Any] = {}  # address of an executable handle -> the Program it runs
state: dict[str, Any] = {}
#: what jax sent and asked, for the study (printed by the snippet that runs this)
seen: dict = {"compile": [], "execute": [], "num_outputs": []}


def _error(code: str, message: str):
    e = c.cast("MinimalError*", libc.calloc(1, c.sizeof("MinimalError")))
    text = c.new("char[]", message.encode())
    keep.append(text)
    e.code, e.message = ffi.typeof("PJRT_Error_Code").relements[f"PJRT_Error_Code_{code}"], text
    return ffi.cast("PJRT_Error*", e)


def _handle(prog: Program):
    h = libc.calloc(1, 8)  # jax only passes it back: any unique address
    programs[int(c.cast("uintptr_t", h))] = prog
    return h


def _program(handle) -> Program:
    return programs[int(ffi.cast("uintptr_t", handle))]


@ffi.callback("PJRT_Error*(PJRT_Client_Compile_Args*)")
def compile_(a):
    p = a.program
    fmt = ffi.string(p.format, p.format_size).decode()
    seen["compile"].append({"format": fmt, "code": ffi.buffer(p.code, p.code_size)[:].hex(),
                            "compile_options_size": a.compile_options_size})
    if fmt != "mlir":
        return _error("INVALID_ARGUMENT", f"program format {fmt!r}, not 'mlir'")
    try:
        prog = Program(ffi.buffer(p.code, p.code_size)[:])
        prog.check()
    except (ValueError, NotImplementedError, KeyError, IndexError) as e:
        return _error("UNIMPLEMENTED", f"PJRT_Client_Compile: {e}")
    prog.plain = _handle(prog)  # what GetExecutable hands out (jax destroys it on its own)
    a.executable = ffi.cast("PJRT_LoadedExecutable*", _handle(prog))
    return ffi.NULL


@ffi.callback("PJRT_Error*(PJRT_LoadedExecutable_GetExecutable_Args*)")
def get_executable(a):
    a.executable = ffi.cast("PJRT_Executable*", _program(a.loaded_executable).plain)
    return ffi.NULL


@ffi.callback("PJRT_Error*(PJRT_LoadedExecutable_AddressableDevices_Args*)")
def addressable_devices(a):
    a.addressable_devices, a.num_addressable_devices = state["devices"], 1
    return ffi.NULL


@ffi.callback("void(PJRT_DeviceAssignmentSerialized*)")
def no_deleter(_):
    pass  # the bytes are a constant


@ffi.callback("PJRT_Error*(PJRT_LoadedExecutable_GetDeviceAssignment_Args*)")
def device_assignment(a):
    a.serialized_bytes, a.serialized_bytes_size = DEVICE_ASSIGNMENT, len(DEVICE_ASSIGNMENT) - 1
    a.serialized_device_assignment, a.serialized_device_assignment_deleter = ffi.NULL, no_deleter
    return ffi.NULL


@ffi.callback("PJRT_Error*(PJRT_Executable_NumOutputs_Args*)")
def num_outputs(a):
    body = _program(a.executable).main()
    a.num_outputs = len(next(op for op in body["ops"] if op["name"] == "vhlo.return_v1")["operands"])
    seen["num_outputs"].append(a.num_outputs)
    return ffi.NULL


KIND = ffi.new("char[]", b"hbm")  # minimal.c's memory kind (PJRT_Memory_Kind)
KINDS = ffi.new("const char*[1]", [KIND])
KIND_SIZES = ffi.new("size_t[1]", [3])


@ffi.callback("PJRT_Error*(PJRT_Executable_OutputMemoryKinds_Args*)")
def output_memory_kinds(a):
    a.num_outputs = 1
    a.memory_kinds, a.memory_kind_sizes = KINDS, KIND_SIZES
    return ffi.NULL


def _array(buffer) -> np.ndarray:
    b = c.cast("MinimalBuffer*", buffer)
    shape = tuple(b.dims[d] for d in range(b.num_dims))
    return np.frombuffer(c.buffer(b.data, b.size), DTYPE[b.type]).reshape(shape)


def _buffer(x: np.ndarray):
    b = c.cast("MinimalBuffer*", libc.calloc(1, c.sizeof("MinimalBuffer")))
    b.type, b.num_dims, b.size = TYPE[x.dtype.name], x.ndim, x.nbytes
    for d, n in enumerate(x.shape):
        b.dims[d] = n
    b.data = c.cast("char*", libc.calloc(1, x.nbytes + 1))
    c.memmove(b.data, np.ascontiguousarray(x).tobytes(), x.nbytes)
    return ffi.cast("PJRT_Buffer*", b)


@ffi.callback("PJRT_Error*(PJRT_LoadedExecutable_Execute_Args*)")
def execute(a):
    prog = _program(a.executable)
    seen["execute"].append({
        "num_devices": a.num_devices, "num_args": a.num_args,
        "output_lists": "NULL" if a.output_lists == ffi.NULL else "set by jax",
        "output_lists[0][0] before": "NULL" if a.output_lists[0][0] == ffi.NULL else "set",
        "device_complete_events": "NULL" if a.device_complete_events == ffi.NULL else "set by jax",
        "execute_device": "NULL" if a.execute_device == ffi.NULL else "set",
        "inputs": [[str(x.dtype), list(x.shape)] for x in
                   (_array(a.argument_lists[0][i]) for i in range(a.num_args))]})
    for d in range(a.num_devices):  # jax allocated output_lists[num_devices][num_outputs]
        try:
            outs = prog.run(*[_array(a.argument_lists[d][i]) for i in range(a.num_args)])
        except (ValueError, NotImplementedError, KeyError) as e:  # nothing written: jax reads the error
            return _error("INTERNAL", f"PJRT_LoadedExecutable_Execute: {e}")
        for k, y in enumerate(outs):
            a.output_lists[d][k] = _buffer(y)  # jax destroys each with PJRT_Buffer_Destroy
        if a.device_complete_events != ffi.NULL:
            a.device_complete_events[d] = state["ready"]  # the work is done: a ready event
    return ffi.NULL


@ffi.callback("PJRT_Error*(PJRT_Executable_Destroy_Args*)")
def destroy_executable(a):
    return ffi.NULL  # the handle stays in `programs`: freed with the process


@ffi.callback("PJRT_Error*(PJRT_LoadedExecutable_Destroy_Args*)")
def destroy_loaded(a):
    return ffi.NULL


SLOTS = {"PJRT_Client_Compile": compile_, "PJRT_LoadedExecutable_GetExecutable": get_executable,
         "PJRT_LoadedExecutable_AddressableDevices": addressable_devices,
         "PJRT_LoadedExecutable_GetDeviceAssignment": device_assignment,
         "PJRT_Executable_NumOutputs": num_outputs,
         "PJRT_Executable_OutputMemoryKinds": output_memory_kinds, "PJRT_LoadedExecutable_Execute": execute,
         "PJRT_Executable_Destroy": destroy_executable,
         "PJRT_LoadedExecutable_Destroy": destroy_loaded}


def install(library: str, leave_out=()) -> None:
    """Fills the level-3 slots of `library`'s table (minimal.c), but those in `leave_out`."""
    lib = ffi.dlopen(library)
    keep.append(lib)
    api = ffi.cast("PJRT_Api*", lib.GetPjrtApi())
    for name, fn in SLOTS.items():
        if name not in leave_out:
            setattr(api, name, fn)
    # minimal.c's device array and its ready event, asked of its own entry points
    client = ffi.new("PJRT_Client_Create_Args*", {"struct_size": ffi.sizeof("PJRT_Client_Create_Args")})
    api.PJRT_Client_Create(client)
    devs = ffi.new("PJRT_Client_AddressableDevices_Args*", {
        "struct_size": ffi.sizeof("PJRT_Client_AddressableDevices_Args"), "client": client.client})
    api.PJRT_Client_AddressableDevices(devs)
    state["devices"] = devs.addressable_devices
    state["ready"] = ffi.cast("PJRT_Event*", libc.calloc(1, 8))  # minimal.c never reads an event
    keep.extend([client, devs])


def imports_listing() -> str:
    """What this file takes from the rest of the package, as source: ``_ffi`` (cffi's view of
    the real pjrt_c_api.h) with what it calls, and the dtype table, so the listing of this file
    runs beside it without the package."""
    parts = ["# from pytest_dumpref/pjrt/abi.py and toolchain.py: what level3_add.py imports,\n"
             "# runnable on its own (pip install cffi xla-cpu-pjrt; the wheel's include/ folder\n"
             "# holds the real pjrt_c_api.h)\n"
             "import importlib.util\nimport os\nimport re\nimport shutil\nimport subprocess\n"
             "from functools import lru_cache\nfrom pathlib import Path\n\nimport cffi",
             inspect.getsource(toolchain.BuildError),
             f"PJRT_TYPE_OF_DTYPE = {PJRT_TYPE_OF_DTYPE!r}"]
    parts += [inspect.getsource(f) for f in (toolchain.header_dir, toolchain.find_compiler,
                                              abi.header_cdef, abi._ffi)]
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"
