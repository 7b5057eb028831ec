"""Read the program jax hands to PJRT_Client_Compile, enough to run ``x + 1``.

The bytes (format "mlir") are a StableHLO portable artifact: MLIR bytecode whose ops and types
belong to the versioned ``vhlo`` dialect.  This reader is the part of the full plugin's C
reader (plugin_c/prog_bytecode.c, prog_vhlo.c) that one elementwise op needs, in Python, so a
builder can port it: the container's sections, its string, dialect, attribute/type and
properties tables, the IR as ops with numbered values, ranked tensor types, dense constants.
Only the standard library and numpy; run it on a file: ``python program_reader.py prog.bin``.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

SECTION_NAMES = ("string", "dialect", "attr_type", "attr_type_offset", "ir", "resource",
                 "resource_offset", "dialect_versions", "properties")
#: vhlo type codes (first varint of a type's custom encoding): the ones x + 1 needs
VHLO_DTYPES = {0: "bool", 4: "float32", 5: "float64", 13: "int32", 14: "int64"}
VHLO_RANKED_TENSOR, VHLO_TENSOR_ATTR = 20, 15
#: the ops :meth:`Program.run` runs
RUNS = ("vhlo.constant_v1", "vhlo.broadcast_in_dim_v1", "vhlo.add_v1", "vhlo.return_v1")


class Bytes:
    """A cursor over the artifact; every read is bounds-checked."""

    def __init__(self, data: bytes, at: int = 0, end: int | None = None):
        self.data, self.at, self.end = data, at, len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if self.at + n > self.end:
            raise ValueError(f"truncated at byte {self.at}: {n} more needed")
        self.at += n
        return self.data[self.at - n:self.at]

    def varint(self) -> int:
        """PrefixVarInt: the first byte's trailing zeros count the extra bytes (0: eight)."""
        first = self.take(1)[0]
        if first & 1:
            return first >> 1
        extra = 8 if first == 0 else (first & -first).bit_length() - 1
        value = int.from_bytes(bytes([first]) + self.take(extra), "little")
        return value >> 8 if first == 0 else value >> (extra + 1)

    def svarint(self) -> int:  # zigzag
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def flagged(self) -> tuple[int, bool]:  # a varint with a flag in its low bit
        v = self.varint()
        return v >> 1, bool(v & 1)

    def section(self) -> tuple[int, Bytes]:
        """id (low 7 bits; bit 7: aligned), length, [alignment, 0xCB padding], data."""
        id_and_align, length = self.take(1)[0], self.varint()
        if id_and_align & 0x80:
            alignment = self.varint()
            while self.at % alignment:
                if self.take(1) != b"\xcb":
                    raise ValueError(f"bad section padding at byte {self.at - 1}")
        body = Bytes(self.data, self.at, self.at + length)
        self.take(length)
        return id_and_align & 0x7F, body


class Program:
    def __init__(self, data: bytes):
        c = Bytes(data)
        if c.take(4) != b"ML\xefR":
            raise ValueError("not MLIR bytecode (no 'ML\\xefR' magic)")
        self.version = c.varint()
        end = data.index(b"\0", c.at)
        self.producer, c.at = data[c.at:end].decode(), end + 1
        s = {}
        while c.at < c.end:
            sid, body = c.section()
            s[SECTION_NAMES[sid]] = body
        self.strings = self._strings(s["string"])
        self._dialects(s["dialect"])
        self._attr_types(s["attr_type"], s["attr_type_offset"])
        self.props = []
        if "properties" in s:
            p = s["properties"]
            for _ in range(p.varint()):
                self.props.append(p.take(p.varint()))
        self.scope = 0  # values are numbered per region isolated from above
        self.top = self._block(s["ir"])

    def _strings(self, c: Bytes) -> list[str]:
        n = c.varint()
        lengths = [c.varint() for _ in range(n)][::-1]  # written last string first
        at, out = c.end - sum(lengths), []               # the NUL-terminated data ends it
        for length in lengths:
            out.append(c.data[at:at + length - 1].decode())
            at += length
        return out

    def _dialects(self, c: Bytes) -> None:
        self.dialects = []
        for _ in range(c.varint()):
            name, versioned = c.flagged()
            self.dialects.append(self.strings[name])
            if versioned:
                c.section()  # the dialect's version: not needed here
        self.op_names: list[str] = []
        total = c.varint()
        while len(self.op_names) < total:
            dialect, count = c.varint(), c.varint()
            for _ in range(count):
                self.op_names.append(f"{self.dialects[dialect]}.{self.strings[c.flagged()[0]]}")

    def _attr_types(self, data: Bytes, c: Bytes) -> None:
        """Attributes, then types: consecutive slices of the data, sized by the offset table."""
        counts, at = (c.varint(), c.varint()), data.at
        self.attrs: list[tuple[str, bool, bytes]] = []
        self.types: list[tuple[str, bool, bytes]] = []
        for table, n in zip((self.attrs, self.types), counts):
            while len(table) < n:
                dialect, count = c.varint(), c.varint()
                for _ in range(count):
                    size, custom = c.flagged()
                    table.append((self.dialects[dialect], custom, data.data[at:at + size]))
                    at += size

    def _block(self, c: Bytes) -> dict:
        n_ops, has_args = c.flagged()
        args = []
        if has_args:
            for _ in range(c.varint()):
                t, has_loc = c.flagged()
                if has_loc:
                    c.varint()
                args.append((self._value(), t))
            if c.take(1) != b"\0":
                raise NotImplementedError("use-list orders")
        return {"args": args, "ops": [self._op(c) for _ in range(n_ops)]}

    def _value(self) -> int:
        self.scope += 1
        return self.scope - 1

    def _op(self, c: Bytes) -> dict:
        op: dict[str, Any] = {"name": self.op_names[c.varint()], "results": [], "operands": [],
                              "regions": []}
        mask = c.take(1)[0]  # 1 attrs, 2 results, 4 operands, 8 successors, 16 regions,
        c.varint()           # 32 use-lists, 64 properties; then the location (an attribute)
        if mask & 1:
            op["attrs"] = c.varint()
        if mask & 64:
            op["props"] = self.props[c.varint()]
        if mask & 2:
            op["result_types"] = [c.varint() for _ in range(c.varint())]
        if mask & 4:
            op["operands"] = [c.varint() for _ in range(c.varint())]
        if mask & (8 | 32):
            raise NotImplementedError(f"{op['name']}: successors or use-list orders")
        op["results"] = [self._value() for _ in op.get("result_types", ())]
        if mask & 16:
            n, isolated = c.flagged()
            if not isolated:
                raise NotImplementedError(f"{op['name']}: a region not isolated from above")
            _, inner = c.section()  # isolated regions: one nested IR section, a fresh scope
            saved, self.scope = self.scope, 0
            for _ in range(n):
                if inner.varint():  # number of blocks (one here) ...
                    inner.varint()  # ... and of values the region defines
                    op["regions"].append(self._block(inner))
            self.scope = saved
        return op

    def tensor_type(self, i: int) -> tuple[str, tuple[int, ...]]:
        dialect, custom, raw = self.types[i]
        t = Bytes(raw)
        if dialect != "vhlo" or not custom or t.varint() != VHLO_RANKED_TENSOR:
            raise NotImplementedError(f"type {i}: only vhlo ranked tensors")
        dims = tuple(t.svarint() for _ in range(t.varint()))
        _, _, element = self.types[t.varint()]
        return VHLO_DTYPES[Bytes(element).varint()], dims

    def constant(self, op: dict) -> np.ndarray:
        """constant_v1's one property is its `value`: a vhlo tensor attribute."""
        dialect, custom, raw = self.attrs[Bytes(op["props"]).varint()]
        a = Bytes(raw)
        if dialect != "vhlo" or not custom or a.varint() != VHLO_TENSOR_ATTR:
            raise NotImplementedError("constant: only vhlo dense tensors")
        dtype, dims = self.tensor_type(a.varint())
        elements = np.frombuffer(a.take(a.varint()), dtype)
        if elements.size == 1:  # a splat stores one element
            return np.full(dims, elements[0], dtype)
        return elements.reshape(dims).copy()

    def main(self) -> dict:
        """The body of the module's one function (sharding ops, sdy.*, mean nothing on one
        device: jax puts an sdy.mesh beside the function)."""
        (module,) = self.top["ops"]
        funcs = [op for op in module["regions"][0]["ops"] if not op["name"].startswith("sdy.")]
        if len(funcs) != 1 or funcs[0]["name"] != "vhlo.func_v1":
            raise NotImplementedError("only a module holding one function")
        return funcs[0]["regions"][0]

    def listing(self) -> str:
        body = self.main()
        def types(ts):
            return ", ".join(f"{d}{list(s)}" for d, s in map(self.tensor_type, ts))
        lines = [f"main({', '.join(f'%{v}: {types([t])}' for v, t in body['args'])})"]
        for op in body["ops"]:
            res = ", ".join(f"%{v}" for v in op["results"])
            lines.append(f"  {res + ' = ' if res else ''}{op['name']}"
                         f"({', '.join(f'%{v}' for v in op['operands'])})"
                         + (f" {{value = {self.constant(op).tolist()}}}" if op["name"] == "vhlo.constant_v1" else "")
                         + (f" : {types(op['result_types'])}" if op["results"] else ""))
        return "\n".join(lines)

    def check(self) -> None:
        """Reads every op and type of main now (a device's Compile fails, not its Execute)."""
        self.listing()
        for op in self.main()["ops"]:
            if op["name"] not in RUNS:
                raise NotImplementedError(f"{op['name']}: not one of the ops this reader runs "
                                          f"({', '.join(RUNS)})")

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Runs main on numpy arrays: constant, broadcast of a scalar, add, return."""
        body = self.main()
        values = {v: np.asarray(x) for (v, _), x in zip(body["args"], inputs)}
        for v, t in body["args"]:
            dtype, dims = self.tensor_type(t)
            if values[v].dtype != dtype or values[v].shape != dims or len(inputs) != len(body["args"]):
                raise ValueError(f"argument %{v} is {values[v].dtype}{list(values[v].shape)}; "
                                 f"main takes {len(body['args'])} argument(s), this one {dtype}{list(dims)}")
        for op in body["ops"]:
            args = [values[v] for v in op["operands"]]
            name = op["name"]
            if name == "vhlo.return_v1":
                return args
            dtype, dims = self.tensor_type(op["result_types"][0])
            if name == "vhlo.constant_v1":
                y = self.constant(op)
            elif name == "vhlo.broadcast_in_dim_v1" and args[0].ndim == 0:
                y = np.broadcast_to(args[0], dims)
            elif name == "vhlo.add_v1":
                y = args[0] + args[1]
            else:
                raise NotImplementedError(f"{name}: not one of the ops this reader runs")
            if y.dtype != dtype or y.shape != dims:
                raise ValueError(f"{name} made {y.dtype}{list(y.shape)}, typed {dtype}{list(dims)}")
            values[op["results"][0]] = y
        raise ValueError("main has no return")


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        prog = Program(f.read())
    print(f"MLIR bytecode version {prog.version}, producer {prog.producer!r}")
    print(prog.listing())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    print(prog.run(x)[0])
