"""A cffi view of a PJRT plugin's ``PJRT_Api`` table, to call entry points without jax.

How the declarations are made: the real ``pjrt_c_api.h`` (from the ``xla-cpu-pjrt`` wheel) is
run through the C preprocessor with its ``#include`` lines removed (cffi knows ``size_t``,
``int64_t``, ``bool`` itself), then the one construct cffi cannot parse is dropped: the
``enum { X_STRUCT_SIZE = offsetof(...) + sizeof(...) }`` constants.  Every struct layout
therefore comes from the same header the plugin was compiled against; a hand-written subset
could silently drift from it.  The dropped ``*_STRUCT_SIZE`` constants are recomputed here from
the layouts (offset of the last field + its size) by :meth:`PjrtApi.header_struct_size`.
"""
from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

import cffi
import numpy as np

from .toolchain import find_compiler, header_dir

ERROR_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
               "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
               "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
               "DATA_LOSS", "UNAUTHENTICATED")

#: numpy dtype name -> PJRT_Buffer_Type enumerator (the dtypes numpy / ml_dtypes and jax share).
PJRT_TYPE_OF_DTYPE = {
    "bool": "PRED", "int8": "S8", "int16": "S16", "int32": "S32", "int64": "S64",
    "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "float16": "F16", "float32": "F32", "float64": "F64", "bfloat16": "BF16",
    "complex64": "C64", "complex128": "C128",
    "float8_e5m2": "F8E5M2", "float8_e4m3fn": "F8E4M3FN", "float8_e4m3b11fnuz": "F8E4M3B11FNUZ",
    "float8_e5m2fnuz": "F8E5M2FNUZ", "float8_e4m3fnuz": "F8E4M3FNUZ",
}


class PjrtError(Exception):
    """An error a PJRT entry point returned (already destroyed; code and message kept)."""

    def __init__(self, entry_point: str, code: int, message: str):
        self.entry_point, self.code, self.message = entry_point, code, message
        self.code_name = ERROR_CODES[code] if 0 <= code < len(ERROR_CODES) else f"code {code}"
        super().__init__(f"{entry_point} -> {self.code_name}: {message}")


@lru_cache(maxsize=1)
def header_cdef() -> str:
    """The preprocessed ``pjrt_c_api.h`` in a form cffi accepts (see the module docstring)."""
    text = (header_dir() / "pjrt_c_api.h").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#include"))
    done = subprocess.run([*find_compiler().split(), "-E", "-P", "-x", "c", "-"], input=text,
                          capture_output=True, text=True, check=True)
    cdef = re.sub(r"enum\s*\{\s*\w+_STRUCT_SIZE\s*=[^;]*;", "", done.stdout)
    return cdef + "\nconst PJRT_Api* GetPjrtApi(void);\n"


@lru_cache(maxsize=1)
def _ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(header_cdef())
    return ffi


class PjrtApi:
    """The ``PJRT_Api`` table of one loaded plugin library."""

    def __init__(self, path):
        self.path = Path(path)
        self.ffi = _ffi()
        self.lib = self.ffi.dlopen(str(self.path))
        self.table = self.lib.GetPjrtApi()
        if self.table == self.ffi.NULL:
            raise RuntimeError(f"{self.path}: GetPjrtApi returned NULL")

    # -- the table ----------------------------------------------------------------------------
    @property
    def version(self) -> tuple[int, int]:
        v = self.table.pjrt_api_version
        return (v.major_version, v.minor_version)

    @property
    def struct_size(self) -> int:
        return self.table.struct_size

    @property
    def slot_names(self) -> list[str]:
        """Every entry point of the table, in the header's order."""
        return [name for name, _ in self.ffi.typeof("PJRT_Api").fields
                if name.startswith("PJRT_") and name != "pjrt_api_version"]

    def slot(self, name: str):
        return getattr(self.table, name)

    def header_struct_size(self, struct: str) -> int:
        """``<struct>_STRUCT_SIZE`` as the header defines it: end of the last field."""
        name, field = self.ffi.typeof(struct).fields[-1]
        return field.offset + self.ffi.sizeof(field.type)

    # -- calling ------------------------------------------------------------------------------
    def new_args(self, entry_point: str, **fields):
        """A zeroed ``<entry_point>_Args`` with struct_size set and the given fields filled."""
        args = self.ffi.new(f"{entry_point}_Args*")
        args.struct_size = self.ffi.sizeof(f"{entry_point}_Args")
        for k, v in fields.items():
            setattr(args, k, v)
        return args

    def call_raw(self, entry_point: str, args):
        """Call a slot; returns the ``PJRT_Error*`` (NULL on success), which the caller owns."""
        return self.slot(entry_point)(args)

    def call(self, entry_point: str, **fields):
        """Call a slot with fresh args; return the args, or raise :class:`PjrtError`."""
        args = self.new_args(entry_point, **fields)
        err = self.call_raw(entry_point, args)
        if err != self.ffi.NULL:
            raise self.take_error(entry_point, err)
        return args

    def take_error(self, entry_point: str, err) -> PjrtError:
        """Read an error's code and message through the plugin, then destroy it."""
        code_args = self.new_args("PJRT_Error_GetCode", error=err)
        failed = self.call_raw("PJRT_Error_GetCode", code_args)
        if failed != self.ffi.NULL:
            raise RuntimeError("PJRT_Error_GetCode failed on an error the plugin returned")
        msg_args = self.new_args("PJRT_Error_Message", error=err)
        self.slot("PJRT_Error_Message")(msg_args)
        message = self.ffi.string(msg_args.message, msg_args.message_size).decode(errors="replace")
        self.slot("PJRT_Error_Destroy")(self.new_args("PJRT_Error_Destroy", error=err))
        return PjrtError(entry_point, int(code_args.code), message)

    # -- the few objects tests need -------------------------------------------------------------
    def create_client(self):
        return self.call("PJRT_Client_Create").client

    def destroy_client(self, client) -> None:
        self.call("PJRT_Client_Destroy", client=client)

    def first_device(self, client):
        return self.call("PJRT_Client_Devices", client=client).devices[0]

    def buffer_from_numpy(self, client, device, array: np.ndarray, *, memory=None):
        """Host -> device with the array's own byte strides (transposed/strided views included)."""
        kind = PJRT_TYPE_OF_DTYPE[array.dtype.name]
        dims = self.ffi.new("int64_t[]", list(array.shape) or [0])
        strides = self.ffi.new("int64_t[]", list(array.strides) or [0])
        # The address of element [0, 0, ...]: with the byte strides it describes any view,
        # transposed or reversed (cffi's from_buffer only takes contiguous arrays).
        data = (self.ffi.cast("void*", array.__array_interface__["data"][0]) if array.size
                else self.ffi.NULL)
        args = self.call("PJRT_Client_BufferFromHostBuffer", client=client, data=data,
                         type=getattr(self.lib, f"PJRT_Buffer_Type_{kind}"), dims=dims,
                         num_dims=array.ndim, byte_strides=strides, num_byte_strides=array.ndim,
                         host_buffer_semantics=self.lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
                         device=device if memory is None else self.ffi.NULL,
                         memory=memory if memory is not None else self.ffi.NULL)
        self.destroy_event(args.done_with_host_buffer)
        return args.buffer

    def to_numpy(self, buffer, dtype) -> np.ndarray:
        """Device -> host into a fresh C-contiguous array."""
        dims_args = self.call("PJRT_Buffer_Dimensions", buffer=buffer)
        shape = tuple(dims_args.dims[i] for i in range(dims_args.num_dims))
        out = np.empty(shape, dtype=dtype)
        dst = self.ffi.from_buffer(out) if out.size else self.ffi.NULL
        args = self.call("PJRT_Buffer_ToHostBuffer", src=buffer, dst=dst, dst_size=out.nbytes)
        if args.event != self.ffi.NULL:
            self.call("PJRT_Event_Await", event=args.event)
            self.destroy_event(args.event)
        return out

    def destroy_event(self, event) -> None:
        if event != self.ffi.NULL:
            self.call("PJRT_Event_Destroy", event=event)

    def destroy_buffer(self, buffer) -> None:
        self.call("PJRT_Buffer_Destroy", buffer=buffer)
