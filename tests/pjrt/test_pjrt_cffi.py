"""The plugin through cffi, without jax: the table, argument checks, errors, buffers.

Set DUMPREF_PJRT_TEST_LIBRARY to run these against another build (the sanitizer test does).
"""
from __future__ import annotations

import os
import re

import ml_dtypes
import numpy as np
import pytest

from pytest_dumpref.pjrt.abi import PjrtApi, PjrtError
from pytest_dumpref.pjrt.build import header_dir

ERROR_CHANNEL_VOID = ("PJRT_Error_Destroy", "PJRT_Error_Message")


@pytest.fixture(scope="module")
def api(request) -> PjrtApi:
    path = os.environ.get("DUMPREF_PJRT_TEST_LIBRARY")
    if path:
        return PjrtApi(path)
    return request.getfixturevalue("_pjrt_built").api


@pytest.fixture
def client(api):
    c = api.create_client()
    yield c
    api.destroy_client(c)


@pytest.fixture
def device(api, client):
    return api.first_device(client)


def _header_version() -> tuple[int, int]:
    text = (header_dir() / "pjrt_c_api.h").read_text()
    major = int(re.search(r"#define PJRT_API_MAJOR (\d+)", text).group(1))
    minor = int(re.search(r"#define PJRT_API_MINOR (\d+)", text).group(1))
    return major, minor


def _error_of(api, name, args):
    err = api.call_raw(name, args)
    return None if err == api.ffi.NULL else api.take_error(name, err)


# ---- the table ---------------------------------------------------------------------------


def test_api_version_and_size_are_the_headers(api):
    assert api.version == _header_version()
    assert api.struct_size == api.header_struct_size("PJRT_Api")


def test_every_slot_is_filled(api):
    names = api.slot_names
    assert len(names) == len(api.ffi.typeof("PJRT_Api").fields) - 3  # size, extensions, version
    empty = [n for n in names if api.slot(n) == api.ffi.NULL]
    assert empty == []


def test_null_args_get_invalid_argument_or_unimplemented_never_a_crash(api):
    answers = {}
    for name in api.slot_names:
        if name in ERROR_CHANNEL_VOID:
            api.slot(name)(api.ffi.NULL)  # void: must simply return
            continue
        e = _error_of(api, name, api.ffi.NULL)
        assert e is not None, f"{name} accepted NULL args"
        assert name in e.message, e
        answers[name] = e.code_name
    assert set(answers.values()) == {"INVALID_ARGUMENT", "UNIMPLEMENTED"}


def test_unimplemented_entry_points_name_themselves(api):
    e = _error_of(api, "PJRT_Client_TopologyDescription",
                  api.new_args("PJRT_Client_TopologyDescription"))
    assert e.code_name == "UNIMPLEMENTED"
    assert "PJRT_Client_TopologyDescription" in e.message


def test_struct_size_smaller_than_the_fields_read_is_invalid_argument(api):
    checked = 0
    for name in api.slot_names:
        fields = api.ffi.typeof(f"{name}_Args").fields
        if name in ERROR_CHANNEL_VOID or len(fields) <= 2:
            continue  # void, or nothing beyond struct_size/extension_start to read
        args = api.new_args(name)
        args.struct_size = fields[2][1].offset  # only struct_size and extension_start
        e = _error_of(api, name, args)
        assert e is not None and e.code_name in ("INVALID_ARGUMENT", "UNIMPLEMENTED"), (name, e)
        if e.code_name == "INVALID_ARGUMENT":
            assert "struct_size" in e.message and name in e.message, e
            checked += 1
    assert checked >= 50


def test_larger_struct_size_than_the_header_is_accepted(api):
    size = api.ffi.sizeof("PJRT_Client_Create_Args") + 64
    raw = api.ffi.new("char[]", size)
    args = api.ffi.cast("PJRT_Client_Create_Args*", raw)
    args.struct_size = size
    assert _error_of(api, "PJRT_Client_Create", args) is None
    api.destroy_client(args.client)


# ---- errors ------------------------------------------------------------------------------


def test_error_functions(api):
    err = api.call_raw("PJRT_Client_TopologyDescription",
                       api.new_args("PJRT_Client_TopologyDescription"))
    code = api.new_args("PJRT_Error_GetCode", error=err)
    assert api.call_raw("PJRT_Error_GetCode", code) == api.ffi.NULL
    assert code.code == api.lib.PJRT_Error_Code_UNIMPLEMENTED
    msg = api.new_args("PJRT_Error_Message", error=err)
    api.slot("PJRT_Error_Message")(msg)
    text = api.ffi.string(msg.message, msg.message_size).decode()
    assert len(text) == msg.message_size and "PJRT_Client_TopologyDescription" in text
    api.slot("PJRT_Error_Destroy")(api.new_args("PJRT_Error_Destroy", error=err))
    # NULL error: GetCode refuses, Message answers empty, Destroy does nothing
    e = _error_of(api, "PJRT_Error_GetCode", api.new_args("PJRT_Error_GetCode"))
    assert e.code_name == "INVALID_ARGUMENT"
    msg = api.new_args("PJRT_Error_Message")
    api.slot("PJRT_Error_Message")(msg)
    assert msg.message_size == 0
    api.slot("PJRT_Error_Destroy")(api.new_args("PJRT_Error_Destroy"))


# ---- client, device, memory --------------------------------------------------------------


def test_client_describes_one_device_with_one_memory(api, client, device):
    name = api.call("PJRT_Client_PlatformName", client=client)
    assert api.ffi.string(name.platform_name, name.platform_name_size) == b"dumpref"
    mems = api.call("PJRT_Client_AddressableMemories", client=client)
    dev_mems = api.call("PJRT_Device_AddressableMemories", device=device)
    default = api.call("PJRT_Device_DefaultMemory", device=device).memory
    assert mems.num_addressable_memories == dev_mems.num_memories == 1
    assert mems.addressable_memories[0] == dev_mems.memories[0] == default
    by = api.call("PJRT_Memory_AddressableByDevices", memory=default)
    assert by.num_devices == 1 and by.devices[0] == device
    with pytest.raises(PjrtError, match="no device with id 7"):
        api.call("PJRT_Client_LookupDevice", client=client, id=7)


# ---- buffers -----------------------------------------------------------------------------

_base = np.arange(60, dtype=np.float32).reshape(6, 10)
ARRAYS = {
    "contiguous": _base,
    "transposed": _base.T,
    "strided": _base[::2, ::3],
    "reversed": _base[::-1, ::-2],
    "0-d": np.array(3.5, np.float64),
    "empty": np.zeros((0, 4), np.int32),
    "bool": np.array([[True, False, True]]),
    "bf16 transposed": _base.astype(ml_dtypes.bfloat16).T,
    "complex128": (np.arange(6) + 1j * np.arange(6)).reshape(2, 3)[:, ::2],
    "int64 3-d view": np.arange(48, dtype=np.int64).reshape(2, 4, 6).transpose(2, 0, 1),
    "float8_e4m3fn": np.arange(8).astype(ml_dtypes.float8_e4m3fn),
}


@pytest.mark.parametrize("kind", ARRAYS)
def test_buffer_round_trip_with_numpy_byte_strides(api, client, device, kind):
    a = ARRAYS[kind]
    buf = api.buffer_from_numpy(client, device, a)
    try:
        et = api.call("PJRT_Buffer_ElementType", buffer=buf).type
        assert et == getattr(api.lib, "PJRT_Buffer_Type_" + {
            "float32": "F32", "float64": "F64", "int32": "S32", "bool": "PRED", "bfloat16": "BF16",
            "complex128": "C128", "int64": "S64", "float8_e4m3fn": "F8E4M3FN"}[a.dtype.name])
        size = api.call("PJRT_Buffer_OnDeviceSizeInBytes", buffer=buf).on_device_size_in_bytes
        assert size == a.nbytes
        back = api.to_numpy(buf, a.dtype)
        assert back.shape == a.shape and back.tobytes() == np.ascontiguousarray(a).tobytes()
    finally:
        api.destroy_buffer(buf)


def test_buffer_placed_by_memory_instead_of_device(api, client, device):
    memory = api.call("PJRT_Device_DefaultMemory", device=device).memory
    a = np.arange(5, dtype=np.uint16)
    buf = api.buffer_from_numpy(client, None, a, memory=memory)
    assert api.call("PJRT_Buffer_Device", buffer=buf).device == device
    assert (api.to_numpy(buf, a.dtype) == a).all()
    api.destroy_buffer(buf)


def test_to_host_buffer_in_a_column_major_layout_and_size_query(api, client, device):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    buf = api.buffer_from_numpy(client, device, a)
    m2m = api.ffi.new("int64_t[]", [0, 1])  # dimension 0 fastest: Fortran order
    layout = api.ffi.new("PJRT_Buffer_MemoryLayout*")
    layout.struct_size = api.ffi.sizeof("PJRT_Buffer_MemoryLayout")
    layout.type = api.lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    layout.tiled.struct_size = api.ffi.sizeof("PJRT_Buffer_MemoryLayout_Tiled")
    layout.tiled.minor_to_major = m2m
    layout.tiled.minor_to_major_size = 2
    query = api.call("PJRT_Buffer_ToHostBuffer", src=buf, host_layout=layout)
    assert query.dst_size == a.nbytes and query.event == api.ffi.NULL
    out = np.zeros(a.size, np.int32)
    args = api.call("PJRT_Buffer_ToHostBuffer", src=buf, host_layout=layout,
                    dst=api.ffi.from_buffer(out), dst_size=out.nbytes)
    api.destroy_event(args.event)
    assert out.tobytes() == np.asfortranarray(a).tobytes(order="A")
    small = np.zeros(2, np.int32)
    with pytest.raises(PjrtError, match="dst_size 8 is smaller"):
        api.call("PJRT_Buffer_ToHostBuffer", src=buf, dst=api.ffi.from_buffer(small), dst_size=8)
    api.destroy_buffer(buf)


def test_delete_releases_memory_and_later_reads_fail(api, client, device):
    def in_use():
        return api.call("PJRT_Device_MemoryStats", device=device).bytes_in_use

    before = in_use()
    buf = api.buffer_from_numpy(client, device, np.ones((256, 256), np.float32))
    assert in_use() == before + 256 * 256 * 4
    api.call("PJRT_Buffer_Delete", buffer=buf)
    assert api.call("PJRT_Buffer_IsDeleted", buffer=buf).is_deleted
    assert in_use() == before
    with pytest.raises(PjrtError, match="FAILED_PRECONDITION.*deleted"):
        api.to_numpy(buf, np.float32)
    ready = api.call("PJRT_Buffer_ReadyEvent", buffer=buf).event
    with pytest.raises(PjrtError, match="deleted"):
        api.call("PJRT_Event_Await", event=ready)
    api.destroy_event(ready)
    api.destroy_buffer(buf)
    assert in_use() == before


def test_sub_byte_and_unknown_types_are_refused_by_name(api, client, device):
    dims = api.ffi.new("int64_t[]", [4])
    data = api.ffi.new("char[]", 4)
    for kind, word in (("S2", "S2"), ("F4E2M1FN", "F4E2M1FN"), ("TOKEN", "TOKEN")):
        with pytest.raises(PjrtError, match=f"UNIMPLEMENTED.*{word}"):
            api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=data,
                     type=getattr(api.lib, f"PJRT_Buffer_Type_{kind}"), dims=dims, num_dims=1,
                     device=device)


def test_int4_buffers_hold_one_byte_per_element(api, client, device):
    """S4/U4 arrive as numpy holds them (one byte each, the value in the low nibble)."""
    dims = api.ffi.new("int64_t[]", [5])
    raw = bytes([0x0f, 0x02, 0x08, 0x07, 0x00])  # int4 -1, 2, -8, 7, 0
    data = api.ffi.new("char[]", raw)
    for kind in ("S4", "U4"):
        buf = api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=data,
                       type=getattr(api.lib, f"PJRT_Buffer_Type_{kind}"), dims=dims, num_dims=1,
                       device=device).buffer
        assert api.call("PJRT_Buffer_OnDeviceSizeInBytes", buffer=buf).on_device_size_in_bytes == 5
        assert api.to_numpy(buf, np.uint8).tobytes() == raw
        api.destroy_buffer(buf)


def test_copy_to_memory_and_device_make_independent_copies(api, client, device):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    src = api.buffer_from_numpy(client, device, a)
    memory = api.call("PJRT_Device_DefaultMemory", device=device).memory
    copies = [api.call("PJRT_Buffer_CopyToMemory", buffer=src, dst_memory=memory).dst_buffer,
              api.call("PJRT_Buffer_CopyToDevice", buffer=src, dst_device=device).dst_buffer]
    api.call("PJRT_Buffer_Delete", buffer=src)
    for c in copies:
        assert c != src and (api.to_numpy(c, np.float32) == a).all()
        assert api.call("PJRT_Buffer_Memory", buffer=c).memory == memory
    with pytest.raises(PjrtError, match="PJRT_Buffer_CopyToMemory.*deleted"):
        api.call("PJRT_Buffer_CopyToMemory", buffer=src, dst_memory=memory)
    other = api.create_client()
    try:
        with pytest.raises(PjrtError, match="INVALID_ARGUMENT.*not a device of this buffer's client"):
            api.call("PJRT_Buffer_CopyToDevice", buffer=copies[0], dst_device=api.first_device(other))
    finally:
        api.destroy_client(other)
    for b in (src, *copies):
        api.destroy_buffer(b)


def test_to_host_buffer_takes_a_layout_whose_struct_size_jaxlib_left_unset(api, client, device):
    """jaxlib 0.10.2 copies an array to another backend through ToHostBuffer with a host
    layout it fills but whose struct_size it leaves 0, jaxlib 0.12 with one it leaves unset (2
    or 4 from run to run): the fields are read, and checked, whatever the size says."""
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    buf = api.buffer_from_numpy(client, device, a)
    m2m = api.ffi.new("int64_t[]", [1, 0])
    layout = api.ffi.new("PJRT_Buffer_MemoryLayout*")
    layout.struct_size = 0
    layout.type = api.lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    layout.tiled.minor_to_major = m2m
    layout.tiled.minor_to_major_size = 2
    out = np.zeros(6, np.int32)
    args = api.call("PJRT_Buffer_ToHostBuffer", src=buf, host_layout=layout,
                    dst=api.ffi.from_buffer(out), dst_size=out.nbytes)
    api.destroy_event(args.event)
    assert (out == a.ravel()).all()
    for size in (2, 4):       # what jaxlib 0.12 leaves there
        layout.struct_size = size
        out[:] = 0
        args = api.call("PJRT_Buffer_ToHostBuffer", src=buf, host_layout=layout,
                        dst=api.ffi.from_buffer(out), dst_size=out.nbytes)
        api.destroy_event(args.event)
        assert (out == a.ravel()).all()
    layout.tiled.minor_to_major_size = 3   # the fields are what is checked
    with pytest.raises(PjrtError, match="minor_to_major has 3 entries for a rank-2 array"):
        api.call("PJRT_Buffer_ToHostBuffer", src=buf, host_layout=layout,
                 dst=api.ffi.from_buffer(out), dst_size=out.nbytes)
    api.destroy_buffer(buf)


def test_bad_buffer_arguments_are_invalid_argument(api, client, device):
    dims = api.ffi.new("int64_t[]", [-1])
    with pytest.raises(PjrtError, match="INVALID_ARGUMENT.*negative"):
        api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=api.ffi.new("char[]", 4),
                 type=api.lib.PJRT_Buffer_Type_F32, dims=dims, num_dims=1, device=device)
    with pytest.raises(PjrtError, match="neither device nor memory"):
        api.call("PJRT_Client_BufferFromHostBuffer", client=client, type=api.lib.PJRT_Buffer_Type_F32)
    other = api.create_client()
    try:
        with pytest.raises(PjrtError, match="does not belong"):
            api.call("PJRT_Client_BufferFromHostBuffer", client=client,
                     type=api.lib.PJRT_Buffer_Type_F32, device=api.first_device(other))
    finally:
        api.destroy_client(other)


def test_events_are_born_ready_and_on_ready_runs_the_callback(api):
    seen = []

    @api.ffi.callback("void(PJRT_Error*, void*)")
    def on_ready(err, user_arg):
        seen.append(err == api.ffi.NULL)
        if err != api.ffi.NULL:
            api.take_error("callback", err)

    c = api.create_client()
    buf = api.buffer_from_numpy(c, api.first_device(c), np.zeros(3, np.float32))
    event = api.call("PJRT_Buffer_ReadyEvent", buffer=buf).event
    assert api.call("PJRT_Event_IsReady", event=event).is_ready
    api.call("PJRT_Event_OnReady", event=event, callback=on_ready, user_arg=api.ffi.NULL)
    assert seen == [True]
    api.destroy_event(event)
    api.destroy_buffer(buf)
    api.destroy_client(c)
