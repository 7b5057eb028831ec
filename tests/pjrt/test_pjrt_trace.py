"""The structured call trace (plugin_c/hooks.c) as the map reads it (pytest_dumpref/pjrt/calls.py):
one record per call, decoded with the real header, from a real jax run in a subprocess."""
from __future__ import annotations

import json

import pytest

from pytest_dumpref.pjrt.calls import out_fields
from pytest_dumpref.pjrt.pjrt_map import LEVELS, level_passed


@pytest.fixture(scope="module")
def level2(_pjrt_built):
    run = _pjrt_built.run_jax(LEVELS[1].code)
    assert level_passed(run), run.why
    return run, run.calls(_pjrt_built.path)


def test_every_call_has_a_record_with_the_headers_struct_size(level2):
    run, calls = level2
    assert run.library_base is not None
    assert [c.fn for c in calls] == run.trace and len(calls) > 100
    assert all(c.struct_size == c.header_size for c in calls), \
        {(c.fn, c.struct_size, c.header_size) for c in calls if c.struct_size != c.header_size}


def test_inputs_outputs_and_notes_are_decoded(level2):
    _, calls = level2
    name = next(c for c in calls if c.fn == "PJRT_Client_PlatformName")
    assert name.outputs == {"platform_name": "'dumpref'", "platform_name_size": 7}
    assert name.inputs == {"client": "PJRT_Client_Create.client"}  # the handle, by where it came from
    put = next(c for c in calls if c.fn == "PJRT_Client_BufferFromHostBuffer")
    assert put.inputs["type"] == "PJRT_Buffer_Type_F32" and put.inputs["device_layout"] == "NULL"
    assert put.notes == {"dims": [4, 3], "byte_strides": [4, 16]}  # the transposed f32 view
    assert set(put.outputs) == {"buffer", "done_with_host_buffer"}
    get = next(c for c in calls if c.fn == "PJRT_Buffer_ToHostBuffer")
    assert get.notes["host_layout"] == {"type": "tiled", "minor_to_major_size": 2, "num_tiles": 0}
    assert get.inputs["src"] == "PJRT_Client_BufferFromHostBuffer.buffer"


def test_a_knocked_out_call_is_recorded_as_such(_pjrt_built):
    run = _pjrt_built.run_jax(LEVELS[0].code, disable=["PJRT_DeviceDescription_Kind"])
    assert not level_passed(run)
    calls = run.calls(_pjrt_built.path)
    kind = next(c for c in calls if c.fn == "PJRT_DeviceDescription_Kind")
    assert kind.knocked_out and kind.outputs == {} and "device_description" in kind.inputs
    # a record cut short by the abort would be kept by name: every record here is whole
    assert all(not r.get("truncated") for r in run.records)


def test_outputs_come_from_the_headers_out_marks():
    outs = out_fields()
    assert {"platform_name", "platform_name_size"} <= outs["PJRT_Client_PlatformName_Args"]
    assert "client" not in outs["PJRT_Client_PlatformName_Args"]


def test_trace_lines_are_json(_pjrt_built, tmp_path):
    trace = tmp_path / "t.jsonl"
    run = _pjrt_built.run_jax(LEVELS[0].code, trace=False, env={"DUMPREF_PJRT_TRACE": str(trace)})
    assert level_passed(run), run.why
    lines = trace.read_text().splitlines()
    first, records = json.loads(lines[0]), [json.loads(x) for x in lines[1:]]
    assert set(first) == {"library_base"}
    assert records[0]["fn"] == "PJRT_Plugin_Initialize" and records[0]["error"] is None
    assert {"fn", "args", "struct_size", "in", "out", "error", "knocked_out", "notes"} == set(records[0])
