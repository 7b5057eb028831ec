"""A deterministic fuzz of the PJRT surface the device shows jax: buffers made from host data
of any element type code, shape and byte strides (zero-sized, huge, negative and misaligned
ones), read back through any host layout into destinations of any size, and executables run on
arguments of the wrong count, types and shapes.

Each call must succeed or return a PJRT_Error with a message, never crash: run in-process on
the plain build, and as `python pjrt_surface_fuzz.py LIBRARY SEED COUNT` under AddressSanitizer
(test_pjrt_surface_fuzz.py).  The fuzz is fair to the plugin: host data always covers every
byte the described array addresses, except for shapes whose bytes no memory could hold, which
the plugin must refuse before it reads (2^47 bytes and more: past a 47-bit address space).""" 
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np

from pytest_dumpref.pjrt.abi import PjrtApi, PjrtError

HERE = Path(__file__).parent
#: element sizes of the PJRT type codes the device takes (others must be refused)
SIZES = {"PRED": 1, "S8": 1, "S16": 2, "S32": 4, "S64": 8, "U8": 1, "U16": 2, "U32": 4,
         "U64": 8, "F16": 2, "F32": 4, "F64": 8, "BF16": 2, "C64": 8, "C128": 16,
         "F8E4M3FN": 1, "F8E5M2": 1, "S4": 1, "U4": 1}
HUGE = [1 << 31, 1 << 40, 1 << 62, (1 << 63) - 1]
PROGRAMS = ["add_one", "softmax", "reductions", "windows", "sort", "gather_scatter"]


class Surface:
    def __init__(self, api: PjrtApi, seed: int):
        self.api, self.ffi, self.rng = api, api.ffi, random.Random(seed)
        self.client = api.create_client()
        self.device = api.first_device(self.client)
        self.counts = {"ok": 0, "error": 0}

    def call(self, name, **fields):
        """The call's args, or None when it returned an error (which must have a message)."""
        try:
            args = self.api.call(name, **fields)
        except PjrtError as e:
            assert e.message, (name, e)
            self.counts["error"] += 1
            return None
        self.counts["ok"] += 1
        return args

    # -- drawing arguments ----------------------------------------------------------------------
    def type_code(self):
        r = self.rng.random()
        if r < 0.8:
            name = self.rng.choice(sorted(SIZES))
            return getattr(self.api.lib, f"PJRT_Buffer_Type_{name}"), SIZES[name]
        return self.rng.choice([0, 31, 32, 99, 255, 1 << 30]), 4  # unknown codes (an unsigned enum)

    def dims(self):
        rank = self.rng.choice([0, 1, 1, 2, 2, 3, 4, 17])  # 17: past the device's rank limit
        out = []
        for _ in range(rank):
            r = self.rng.random()
            out.append(0 if r < 0.1 else -self.rng.randint(1, 3) if r < 0.15
                       else self.rng.choice(HUGE) if r < 0.2 else self.rng.randint(1, 5))
        return out

    def strides(self, dims, esize):
        """None (dense), or byte strides: numpy-like permuted, negative, zero or misaligned."""
        if self.rng.random() < 0.4:
            return None
        if not all(0 <= d < (1 << 20) for d in dims):  # a huge shape: any small strides
            return [self.rng.choice([0, esize, -esize, 1 << 20]) for _ in dims]
        dense, step = [], esize
        for d in reversed(dims):
            dense.insert(0, step)
            step *= max(d, 1)
        out = []
        for s in dense:
            r = self.rng.random()
            out.append(-s if r < 0.2 else 0 if r < 0.3 else s + self.rng.randint(1, 3) if r < 0.45
                       else s * self.rng.randint(1, 3))
        if self.rng.random() < 0.3:
            self.rng.shuffle(out)
        if self.rng.random() < 0.05:
            out = out[:-1]  # fewer strides than dims
        return out

    # -- the calls --------------------------------------------------------------------------------
    def from_host(self):
        code, esize = self.type_code()
        dims = self.dims()
        strides = self.strides(dims, esize)
        ffi = self.ffi
        keep = []
        c_dims = ffi.new("int64_t[]", dims or [0])
        fields = dict(client=self.client, type=code, dims=c_dims, num_dims=len(dims),
                      host_buffer_semantics=self.api.lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
                      device=self.device)
        # the bytes the description addresses, from element 0's address
        lo = hi = 0
        sizable = all(0 <= d < (1 << 20) for d in dims)
        if strides is not None:
            fields.update(byte_strides=ffi.new("int64_t[]", strides or [0]),
                          num_byte_strides=len(strides))
            keep.append(fields["byte_strides"])
        if sizable and all(d > 0 for d in dims):
            st = strides if strides is not None and len(strides) == len(dims) else None
            if st is None:
                n = int(np.prod(dims)) if dims else 1
                hi = n * esize
            else:
                for d, s in zip(dims, st):
                    (lo, hi) = (lo + min(0, (d - 1) * s), hi + max(0, (d - 1) * s))
                hi += esize
        if hi - lo > (64 << 20):
            return None  # a fair description this large is not worth the memory here
        if not sizable and all(d >= 0 for d in dims) and 0 < int(np.prod(dims, dtype=object)) * esize < (1 << 47):
            # memory could hold it (malloc may well succeed), so the plugin may rightly read
            # that many bytes of host data, which no test can give it: not a fair call
            return None
        if sizable:
            # element 0 sits -lo bytes into the backing, at an offset drawn 0..7 from its start
            # (jax hands over numpy's data, which may sit at any offset of a larger array)
            skew = self.rng.randrange(8)
            backing = ffi.new("char[]", hi - lo + 8)
            keep.append(backing)
            no_data = hi == lo and self.rng.random() < 0.5  # no elements: NULL is fine too
            fields["data"] = ffi.NULL if no_data else ffi.cast("char*", backing) + skew - lo
        else:
            fields["data"] = ffi.new("char[]", 64)  # must be refused without reading it all
            keep.append(fields["data"])
        args = self.call("PJRT_Client_BufferFromHostBuffer", **fields)
        if args is None:
            return None
        self.api.destroy_event(args.done_with_host_buffer)
        return args.buffer

    def to_host(self, buf):
        ffi = self.ffi
        need = self.call("PJRT_Buffer_ToHostBuffer", src=buf)
        size = need.dst_size if need is not None else 0
        fields = dict(src=buf)
        keep = []
        if self.rng.random() < 0.4:
            dims = self.call("PJRT_Buffer_Dimensions", buffer=buf)
            rank = dims.num_dims if dims is not None else 0
            m2m = list(range(rank))
            self.rng.shuffle(m2m)
            r = self.rng.random()
            if r < 0.15 and m2m:
                m2m[0] = self.rng.choice([-1, rank, 1 << 40])
            elif r < 0.3 and len(m2m) > 1:
                m2m[1] = m2m[0]  # a repeated dimension
            elif r < 0.4:
                m2m = m2m + [0]  # one too many
            layout = ffi.new("PJRT_Buffer_MemoryLayout*")
            layout.struct_size = ffi.sizeof("PJRT_Buffer_MemoryLayout")
            layout.type = self.api.lib.PJRT_Buffer_MemoryLayout_Type_Tiled
            layout.tiled.struct_size = ffi.sizeof("PJRT_Buffer_MemoryLayout_Tiled")
            c_m2m = ffi.new("int64_t[]", m2m or [0])
            layout.tiled.minor_to_major, layout.tiled.minor_to_major_size = c_m2m, len(m2m)
            keep += [layout, c_m2m]
            fields["host_layout"] = layout
        give = self.rng.choice([size, size, max(size - 1, 0), size + 7, 0])
        dst = ffi.new("char[]", give + 8)
        skew = self.rng.randrange(8)
        fields.update(dst=ffi.cast("char*", dst) + skew, dst_size=give)
        args = self.call("PJRT_Buffer_ToHostBuffer", **fields)
        if args is not None and args.event != ffi.NULL:
            self.call("PJRT_Event_Await", event=args.event)
            self.api.destroy_event(args.event)

    def execute(self, loaded, buffers):
        ffi = self.ffi
        args = [self.rng.choice(buffers) for _ in range(self.rng.choice([0, 1, 1, 2, 3]))] if buffers else []
        arg_list = ffi.new("PJRT_Buffer*[]", args or 1)
        arg_lists = ffi.new("PJRT_Buffer**[]", [arg_list])
        outs = ffi.new("PJRT_Buffer*[]", 8)
        out_lists = ffi.new("PJRT_Buffer**[]", [outs])
        options = ffi.new("PJRT_ExecuteOptions*")
        options.struct_size = ffi.sizeof("PJRT_ExecuteOptions")
        # every argument non-donatable: a buffer may be passed twice, and is reused later
        exempt = ffi.new("int64_t[]", list(range(len(args))) or [0])
        options.non_donatable_input_indices, options.num_non_donatable_input_indices = exempt, len(args)
        exe = self.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded)
        n_out = self.call("PJRT_Executable_NumOutputs", executable=exe.executable).num_outputs
        done = self.call("PJRT_LoadedExecutable_Execute", executable=loaded, options=options,
                         argument_lists=arg_lists, num_devices=1, num_args=len(args),
                         output_lists=out_lists, device_complete_events=ffi.NULL)
        if done is not None:
            for k in range(n_out):
                self.api.destroy_buffer(outs[k])

    def compile(self, name):
        ffi = self.ffi
        code = (HERE / "corpus" / "seeds" / f"{name}.mlir").read_bytes()
        keep = [ffi.new("char[]", code), ffi.new("char[]", b"mlir"), ffi.new("char[]", b"\0")]
        program = ffi.new("PJRT_Program*")
        program.struct_size = ffi.sizeof("PJRT_Program")
        program.code, program.code_size = keep[0], len(code)
        program.format, program.format_size = keep[1], 4
        args = self.api.call("PJRT_Client_Compile", client=self.client, program=program,
                             compile_options=keep[2], compile_options_size=0)
        return args.executable

    def run(self, count):
        loaded = [self.compile(n) for n in PROGRAMS]
        live = []
        for _ in range(count):
            buf = self.from_host()
            if buf is not None:
                self.to_host(buf)
                live.append(buf)
            if live and self.rng.random() < 0.3:
                self.execute(self.rng.choice(loaded), live)
            while len(live) > 6:
                self.api.destroy_buffer(live.pop(self.rng.randrange(len(live))))
        for b in live:
            self.api.destroy_buffer(b)
        for x in loaded:
            self.api.call("PJRT_LoadedExecutable_Destroy", executable=x)
        self.api.destroy_client(self.client)
        return self.counts


def fuzz(library, seed: int, count: int) -> dict:
    return Surface(PjrtApi(str(library)), seed).run(count)


if __name__ == "__main__":
    print(fuzz(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
