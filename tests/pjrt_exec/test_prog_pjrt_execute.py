"""Compile and execute through the PJRT C API directly (cffi, no jax): what the executable
answers, and errors -- not crashes -- for bad programs, bad inputs and a destroyed client."""
from __future__ import annotations

import numpy as np
import pytest

import prog_artifacts as pa
from pytest_dumpref.pjrt.abi import PjrtApi, PjrtError
from pytest_dumpref.pjrt.build import build_plugin


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return pa.corpus(tmp_path_factory)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    return PjrtApi(build_plugin(tmp_path_factory.mktemp("prog-pjrt")).path)


@pytest.fixture
def client(api):
    c = api.create_client()
    yield c
    api.destroy_client(c)


def compile_program(api, client, code: bytes, fmt=b"mlir", options=b""):
    ffi = api.ffi
    keep = [ffi.new("char[]", code), ffi.new("char[]", fmt), ffi.new("char[]", options or b"\0")]
    program = ffi.new("PJRT_Program*")
    program.struct_size = ffi.sizeof("PJRT_Program")
    program.code, program.code_size = keep[0], len(code)
    program.format, program.format_size = keep[1], len(fmt)
    args = api.call("PJRT_Client_Compile", client=client, program=program,
                    compile_options=keep[2], compile_options_size=len(options))
    return args.executable


def execute(api, loaded, buffers, n_out, non_donatable=()):
    ffi = api.ffi
    arg_list = ffi.new("PJRT_Buffer*[]", buffers or 1)
    arg_lists = ffi.new("PJRT_Buffer**[]", [arg_list])
    outs = ffi.new("PJRT_Buffer*[]", max(n_out, 1))
    out_lists = ffi.new("PJRT_Buffer**[]", [outs])
    events = ffi.new("PJRT_Event*[]", 1)
    options = ffi.new("PJRT_ExecuteOptions*")
    options.struct_size = ffi.sizeof("PJRT_ExecuteOptions")
    exempt = ffi.new("int64_t[]", list(non_donatable) or 1)
    if non_donatable:
        options.non_donatable_input_indices = exempt
        options.num_non_donatable_input_indices = len(non_donatable)
    api.call("PJRT_LoadedExecutable_Execute", executable=loaded, options=options,
             argument_lists=arg_lists, num_devices=1, num_args=len(buffers),
             output_lists=out_lists, device_complete_events=events)
    return [outs[k] for k in range(n_out)], events[0]


def destroy_loaded(api, loaded):
    api.call("PJRT_LoadedExecutable_Destroy", executable=loaded)


def test_compile_execute_and_queries(api, client, folder):
    data, ins, expected = pa.load_case(folder, "softmax")
    loaded = compile_program(api, client, data)
    exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
    assert api.call("PJRT_Executable_NumOutputs", executable=exe).num_outputs == 1
    types = api.call("PJRT_Executable_OutputElementTypes", executable=exe)
    assert types.num_output_types == 1 and types.output_types[0] == api.lib.PJRT_Buffer_Type_F32
    dims = api.call("PJRT_Executable_OutputDimensions", executable=exe)
    assert dims.num_outputs == 1 and dims.dim_sizes[0] == 2 and list(dims.dims[0:2]) == [8, 32]
    name = api.call("PJRT_Executable_Name", executable=exe)
    assert api.ffi.string(name.executable_name, name.executable_name_size) == b"jit_softmax"
    fp = api.call("PJRT_Executable_Fingerprint", executable=exe)
    assert fp.executable_fingerprint_size == 16
    devices = api.call("PJRT_LoadedExecutable_AddressableDevices", executable=loaded)
    assert devices.num_addressable_devices == 1
    assert devices.addressable_devices[0] == api.first_device(client)
    da = api.call("PJRT_LoadedExecutable_GetDeviceAssignment", executable=loaded)
    assert da.serialized_bytes_size > 0
    api.call("PJRT_Executable_Destroy", executable=exe)

    device = api.first_device(client)
    x = api.buffer_from_numpy(client, device, ins[0])
    (out,), event = execute(api, loaded, [x], 1)
    assert api.call("PJRT_Event_IsReady", event=event).is_ready
    api.call("PJRT_Event_Await", event=event)
    api.destroy_event(event)
    got = api.to_numpy(out, np.float32)
    assert float(np.max(np.abs(got - expected[0]))) <= 1e-5 * float(np.max(np.abs(expected[0])))
    for b in (x, out):
        api.destroy_buffer(b)
    destroy_loaded(api, loaded)


@pytest.mark.parametrize("fmt, code, expected", [
    (b"hlo", b"\x08\x01", "INVALID_ARGUMENT"),
    (b"mlir", b"module {}", "INVALID_ARGUMENT"),
    (b"mlir", b"ML\xefR\x0d", "INVALID_ARGUMENT"),
])
def test_compile_refuses_other_formats_and_garbage(api, client, fmt, code, expected):
    with pytest.raises(PjrtError) as err:
        compile_program(api, client, code, fmt=fmt)
    assert err.value.code_name == expected
    assert "PJRT_Client_Compile" in err.value.message


def test_compile_names_an_unsupported_op(api, client, folder):
    data, _, _ = pa.load_case(folder, "softmax")
    name = next(n for n in (b"exponential_v2\x00", b"exponential_v1\x00") if n in data)
    with pytest.raises(PjrtError) as err:
        compile_program(api, client, data.replace(name, b"exponential_v9\x00"))
    assert err.value.code_name == "UNIMPLEMENTED" and "vhlo.exponential_v9" in err.value.message


def test_compile_options_with_two_replicas_are_refused(api, client, folder):
    data, _, _ = pa.load_case(folder, "add_one")
    # CompileOptionsProto { executable_build_options (3) { num_replicas (4): 2 } }
    with pytest.raises(PjrtError) as err:
        compile_program(api, client, data, options=b"\x1a\x02\x20\x02")
    assert err.value.code_name == "UNIMPLEMENTED" and "2 replicas" in err.value.message
    # ...and ones it cannot read are ignored
    destroy_loaded(api, compile_program(api, client, data, options=b"\xff\xff\xff"))


@pytest.mark.parametrize("bad", ["dtype", "shape", "count", "deleted"])
def test_execute_rejects_bad_inputs(api, client, folder, bad):
    data, ins, _ = pa.load_case(folder, "add_one")
    loaded = compile_program(api, client, data)
    device = api.first_device(client)
    x = ins[0]
    arrays = {"dtype": [x.astype(np.float64)], "shape": [x[:2].copy()], "count": [x, x],
              "deleted": [x]}[bad]
    buffers = [api.buffer_from_numpy(client, device, a) for a in arrays]
    if bad == "deleted":
        api.call("PJRT_Buffer_Delete", buffer=buffers[0])
    with pytest.raises(PjrtError) as err:
        execute(api, loaded, buffers, 1)
    assert err.value.code_name == "INVALID_ARGUMENT"
    assert {"dtype": "expects f32[4]", "shape": "expects f32[4]", "count": "2 arguments",
            "deleted": "deleted"}[bad] in err.value.message
    for b in buffers:
        api.destroy_buffer(b)
    destroy_loaded(api, loaded)


def test_execute_after_client_destroyed_is_an_error(api, folder):
    data, _, _ = pa.load_case(folder, "add_one")
    client = api.create_client()
    loaded = compile_program(api, client, data)
    api.destroy_client(client)
    with pytest.raises(PjrtError) as err:
        execute(api, loaded, [], 1)
    assert err.value.code_name == "FAILED_PRECONDITION" and "destroyed" in err.value.message
    destroy_loaded(api, loaded)


#: Three arguments: %a donated with jax.buffer_donor, %b with tf.aliasing_output, %c not.
DONATING = """func.func public @main(%a: tensor<3xf32> {jax.buffer_donor = true},
    %b: tensor<3xf32> {tf.aliasing_output = 0 : i32}, %c: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %a, %b : tensor<3xf32>
  %1 = stablehlo.multiply %0, %c : tensor<3xf32>
  return %1 : tensor<3xf32>
}"""


def donating_program(form):
    if form == "text":
        return DONATING.encode()
    if form == "generic":  # arg_attrs = [{...}, {...}, {}] among the function's properties
        from jax._src.interpreters import mlir
        from jaxlib.mlir import ir
        with mlir.make_ir_context():
            module = ir.Module.parse(DONATING)
            return module.operation.get_asm(print_generic_op_form=True).encode()
    from jaxlib.mlir.dialects import stablehlo  # the portable artifact jax would send
    return stablehlo.serialize_portable_artifact_str(DONATING, "1.10.0")


@pytest.mark.parametrize("form", ["text", "generic", "artifact"])
@pytest.mark.parametrize("exempt", [(), (1,), (0, 1)])
def test_execute_invalidates_donated_inputs(api, client, form, exempt):
    """Arguments marked jax.buffer_donor or tf.aliasing_output are donated: after a run they
    report deleted (and refuse reads), unless ExecuteOptions.non_donatable_input_indices
    exempts them; the result is right either way."""
    loaded = compile_program(api, client, donating_program(form))
    device = api.first_device(client)
    arrays = [np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32),
              np.array([2, 2, 2], np.float32)]
    buffers = [api.buffer_from_numpy(client, device, a) for a in arrays]
    (out,), event = execute(api, loaded, buffers, 1, non_donatable=exempt)
    api.destroy_event(event)
    np.testing.assert_array_equal(api.to_numpy(out, np.float32), (arrays[0] + arrays[1]) * 2)
    deleted = [bool(api.call("PJRT_Buffer_IsDeleted", buffer=b).is_deleted) for b in buffers]
    assert deleted == [0 not in exempt, 1 not in exempt, False]
    if deleted[0]:
        with pytest.raises(PjrtError) as err:
            api.to_numpy(buffers[0], np.float32)
        assert "deleted" in err.value.message
    for b in (*buffers, out):
        api.destroy_buffer(b)
    destroy_loaded(api, loaded)


def test_execute_refuses_a_donated_buffer_passed_twice(api, client):
    """f(donate(a), a) is an error before anything runs, as on XLA:CPU; the buffer survives."""
    loaded = compile_program(api, client, donating_program("text"))
    device = api.first_device(client)
    a = api.buffer_from_numpy(client, device, np.ones(3, np.float32))
    c = api.buffer_from_numpy(client, device, np.ones(3, np.float32))
    with pytest.raises(PjrtError) as err:
        execute(api, loaded, [a, a, c], 1)
    assert err.value.code_name == "INVALID_ARGUMENT" and "passed only once" in err.value.message
    assert not api.call("PJRT_Buffer_IsDeleted", buffer=a).is_deleted
    np.testing.assert_array_equal(api.to_numpy(a, np.float32), np.ones(3, np.float32))
    for b in (a, c):
        api.destroy_buffer(b)
    destroy_loaded(api, loaded)


def _field(number, payload: bytes) -> bytes:
    """A length-delimited protobuf field (payloads here are < 128 bytes)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def _override(name: str, *, string=None, boolean=None) -> bytes:
    """CompileOptionsProto.env_option_overrides (field 7) entry: jax's compiler_options."""
    value = _field(1, string.encode()) if string is not None else bytes([2 << 3, int(boolean)])
    return _field(7, _field(1, name.encode()) + _field(2, value))


@pytest.mark.parametrize("options, message", [
    (_override("invalid_key", string="invalid_value"), "No such compile option: 'invalid_key'"),
    (_override("xla_embed_ir_in_executable", string="invalid_value"),
     "While setting option xla_embed_ir_in_executable, 'invalid_value' is not a valid bool value."),
    (_override("xla_dump_max_hlo_modules", string="many"), "is not a valid int32 value."),
    (_override("xla_embed_ir_in_executable", boolean=True) + _override("nope", boolean=True),
     "No such compile option: 'nope'"),
])
def test_compile_refuses_invalid_xla_options(api, client, folder, options, message):
    """compiler_options XLA would refuse are refused as XLA refuses them (INVALID_ARGUMENT with
    its message); valid ones are accepted, whatever their value, and ignored."""
    data, _, _ = pa.load_case(folder, "add_one")
    with pytest.raises(PjrtError) as err:
        compile_program(api, client, data, options=options)
    assert err.value.code_name == "INVALID_ARGUMENT" and message in err.value.message
    assert "PJRT_Client_Compile" in err.value.message
    fine = (_override("xla_embed_ir_in_executable", boolean=True) +
            _override("xla_embed_ir_in_executable", string="False") +
            _override("xla_dump_max_hlo_modules", string="200") +
            _override("xla_some_flag_this_device_does_not_know", string="x"))
    destroy_loaded(api, compile_program(api, client, data, options=fine))
