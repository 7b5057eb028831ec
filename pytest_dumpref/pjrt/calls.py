"""The plugin's call records, decoded field by field with the real ``pjrt_c_api.h``.

A record (``plugin_c/hooks.c``) keeps an entry point's args struct twice, as bytes: as jax
passed it and as the entry point left it.  Here each field is read back through cffi's view of
the header (:mod:`.abi`), so nothing about the structs is typed by hand:

- an **output** is a field whose bytes the entry point changed, or, when it succeeded, one the
  header marks ``// out`` or ``// in/out``; every other field (and every ``in/out`` one, as jax
  passed it) is an **input** jax set;
- enums read as their names (``PJRT_Buffer_Type_F32``); a pointer reads ``NULL``, or names the
  latest earlier output that handed out the same address, of the same type, not destroyed since
  (``PJRT_Client_Create.client``), or ``set``; a ``const char*`` with a ``<name>_size`` beside it reads as the string when it points
  into the library's own constants (read from the library file at the same offset);
- what the entry point noted about memory behind a pointer (dims, byte strides, layouts) is kept
  as given.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .abi import ERROR_CODES, _ffi
from .toolchain import header_dir

HEADER_FIELDS = ("struct_size", "extension_start")


@dataclass
class Call:
    fn: str
    struct_size: int | None        # what jax put in args->struct_size (None: args was NULL)
    header_size: int               # the header's <Args>_STRUCT_SIZE (end of the last field)
    inputs: dict[str, object]
    outputs: dict[str, object]
    error: str | None              # the error code answered, None when it succeeded
    knocked_out: bool = False
    notes: dict[str, object] = field(default_factory=dict)


@lru_cache(maxsize=2)
def _marked_fields(both_ways: bool) -> dict[str, set[str]]:
    text = (header_dir() / "pjrt_c_api.h").read_text()
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"^struct (\w+_Args) \{(.*?)^\};", text, re.S | re.M):
        names = set()
        for line in m.group(2).splitlines():
            fm = re.match(r"\s*[^/]*?(\w+)\s*(?:\[[^\]]*\])?;\s*//\s*(in/)?out\b", line)
            if fm and (fm.group(2) or not both_ways):
                names.add(fm.group(1))
        found[m.group(1)] = names
    return found


def out_fields() -> dict[str, set[str]]:
    """Args struct -> the fields its header comment marks as outputs (``// out``, ``// in/out``)."""
    return _marked_fields(False)


def in_out_fields() -> dict[str, set[str]]:
    """Args struct -> the fields marked ``// in/out``: shown both as jax sent and as filled."""
    return _marked_fields(True)


def _pointee(cname: str) -> str:
    return cname.replace("const", "").replace(" ", "")


class _Library:
    """Reads constant bytes of the library file at a run-time address (ELF64 program headers)."""

    def __init__(self, path: Path, base: int | None):
        self.base, self.data, self.segments = base, b"", []
        try:
            self.data = Path(path).read_bytes()
        except OSError:
            return
        if self.data[:4] != b"\x7fELF" or self.data[4] != 2:
            return
        phoff, = struct.unpack_from("<Q", self.data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", self.data, 0x36)
        for i in range(phnum):
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
                "<IIQQQQ", self.data, phoff + i * phentsize)
            if p_type == 1:  # PT_LOAD
                self.segments.append((p_vaddr, p_filesz, p_offset))

    def string(self, address: int, size: int) -> str | None:
        if self.base is None or not address:
            return None
        vaddr = address - self.base
        for start, length, offset in self.segments:
            if start <= vaddr and vaddr + size <= start + length:
                at = offset + vaddr - start
                return self.data[at:at + size].decode(errors="replace")
        return None  # not a constant of the library (heap, or jax's own memory)


def _flatten(ffi, ctype, raw: bytes, offset: int, prefix: str, out: dict) -> None:
    for name, f in ctype.fields:
        if name is None:
            continue
        at = offset + f.offset
        t = f.type
        size = ffi.sizeof(t)
        if at + size > len(raw):
            continue  # beyond the prefix jax and the header share
        key = prefix + name
        if t.kind in ("struct", "union"):
            _flatten(ffi, t, raw, at, key + ".", out)
        elif t.kind == "pointer" or t.kind == "function":
            out[key] = ("ptr", int.from_bytes(raw[at:at + size], "little"), t.cname)
        elif t.kind == "enum":
            value = int.from_bytes(raw[at:at + size], "little", signed=True)
            out[key] = ("val", t.elements.get(value, value))
        elif t.kind == "primitive":
            signed = not (t.cname.startswith(("u", "size_t", "_Bool", "bool", "char")))
            value = int.from_bytes(raw[at:at + size], "little", signed=signed)
            if t.cname in ("_Bool", "bool"):
                value = bool(value)
            out[key] = ("val", value)
        elif t.kind == "array":
            out[key] = ("val", raw[at:at + size].hex())


def _struct_size(ffi, ctype) -> int:
    """``<Args>_STRUCT_SIZE`` as the header defines it: the end of the last field."""
    name, f = ctype.fields[-1]
    return f.offset + ffi.sizeof(f.type)


def decode_records(records: list[dict], library: Path, library_base: int | None) -> list[Call]:
    ffi = _ffi()
    lib = _Library(library, library_base)
    outs = out_fields()
    both_ways = in_out_fields()
    # (address, pointee type) -> "fn.field" of the latest output holding it; the type matters
    # because an object's first member shares its address (the full plugin's client and device)
    handed_out: dict[tuple[int, str], str] = {}
    calls = []
    for rec in records:
        fn = rec["fn"]
        ctype = ffi.typeof(f"{fn}_Args")
        before = bytes.fromhex(rec.get("in", ""))
        after = bytes.fromhex(rec.get("out", ""))
        fin: dict = {}
        fout: dict = {}
        _flatten(ffi, ctype, before, 0, "", fin)
        _flatten(ffi, ctype, after, 0, "", fout)
        marked = outs.get(f"{fn}_Args", set())
        inputs, outputs = {}, {}

        def show(key, kind_value, fields):
            kind, value = kind_value[0], kind_value[1]
            if kind != "ptr":
                return value
            if value == 0:
                return "NULL"
            size = fields.get(key + "_size")
            if "char" in kind_value[2] and size and size[0] == "val":
                text = lib.string(value, size[1])
                if text is not None:
                    return repr(text)
            return handed_out.get((value, _pointee(kind_value[2])), "set")

        both = both_ways.get(f"{fn}_Args", set())
        for key, kv in fin.items():
            top = key.split(".")[0]
            if key in HEADER_FIELDS:
                continue
            if top in both or not (top in marked or (key in fout and fout[key] != kv)):
                inputs[key] = show(key, kv, fin)
        succeeded = rec.get("error") is None and not rec.get("knocked_out")
        for key, kv in fout.items():
            top = key.split(".")[0]
            # a marked output counts when the call succeeded; after an error, only what changed
            if key in HEADER_FIELDS or not ((top in marked and succeeded) or fin.get(key) != kv):
                continue
            outputs[key] = show(key, kv, fout)
        if fn.endswith("_Destroy"):  # the object is gone: its address may come back as another
            for kv in fin.values():
                if kv[0] == "ptr" and kv[1]:
                    handed_out.pop((kv[1], _pointee(kv[2])), None)
        for key in [k for k in outputs if outputs.get(k + "_is_set") is False]:
            del outputs[key]  # the device said it did not fill it: the bytes are jax's garbage
        for key, kv in fout.items():
            if kv[0] == "ptr" and kv[1] and key in outputs:
                handed_out[(kv[1], _pointee(kv[2]))] = f"{fn}.{key}"
        code = rec.get("error")
        calls.append(Call(
            fn=fn, struct_size=rec.get("struct_size") if rec.get("args") else None,
            header_size=_struct_size(ffi, ctype), inputs=inputs, outputs=outputs,
            error=None if code is None else (ERROR_CODES[code] if 0 <= code < len(ERROR_CODES)
                                             else str(code)),
            knocked_out=bool(rec.get("knocked_out")), notes=dict(rec.get("notes") or {})))
    return calls
