"""The plugin through jax, each run in a subprocess (jaxlib aborts on many PJRT errors)."""
from __future__ import annotations

import json

import pytest

from pytest_dumpref.pjrt.pjrt_map import LEVELS, OK_MARK, level_passed


def _json_line(run) -> dict:
    assert run.ok, run.why + "\n" + run.stderr[-3000:]
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: f"level{lv.number}-{lv.name}")
def test_level_passes_and_is_traced(_pjrt_built, level):
    run = _pjrt_built.run_jax(level.code)
    assert level_passed(run), run.why
    assert run.trace[:2] == ["PJRT_Plugin_Initialize", "PJRT_Client_Create"]


def test_level1_device_as_jax_sees_it(_pjrt_built):
    run = _pjrt_built.run_jax(
        "import json\nd = jax.devices('dumpref')\n"
        "print(json.dumps({'n': len(d), 'platform': d[0].platform, 'kind': d[0].device_kind,"
        " 'id': d[0].id, 'default': jax.default_backend(),"
        " 'memory': d[0].default_memory().kind}))\n")
    got = _json_line(run)
    # jax's default backend stays the CPU: the plugin registers below it and is used by name.
    assert got == {"n": 1, "platform": "dumpref", "kind": "dumpref", "id": 0, "default": "cpu",
                   "memory": "device"}
    # the chip claims' provenance shows is the kind the library reports, as jax sees it
    assert _pjrt_built.device_kind() == got["kind"]


ROUND_TRIP = r"""
import json, ml_dtypes
jax.config.update('jax_enable_x64', True)  # else jax narrows 64-bit arrays before the device
dev = jax.devices('dumpref')[0]
dtypes = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
          ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
base = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5) % 7
shapes = {
    '0-d': lambda a: a[0, 0, 0, 1],
    'empty': lambda a: a[:, :0],
    '1-d': lambda a: a[0, 0, 0],
    '4-d': lambda a: a,
    'transposed': lambda a: a[0].transpose(2, 0, 1),
    'strided': lambda a: a[:, ::2, 1::2, ::-1],
}
failures, checked = [], 0
for dt in dtypes:
    for name, make in shapes.items():
        host = np.asarray(make(base.astype(dt)))
        x = jax.device_put(host, dev)
        back = np.asarray(x)
        ok = (x.devices() == {dev} and back.dtype == host.dtype and back.shape == host.shape
              and back.tobytes() == np.ascontiguousarray(host).tobytes())
        x.delete()
        ok = ok and x.is_deleted()
        checked += 1
        if not ok:
            failures.append(f'{np.dtype(dt).name} {name}')
print(json.dumps({'checked': checked, 'failures': failures,
                  'bytes_in_use': dev.memory_stats()['bytes_in_use']}))
"""


def test_level2_every_shared_dtype_and_shape_class_round_trips(_pjrt_built):
    got = _json_line(_pjrt_built.run_jax(ROUND_TRIP, trace=False))
    assert got["failures"] == []
    assert got["checked"] == 17 * 6
    assert got["bytes_in_use"] == 0  # every deleted array gave its bytes back


CYCLES = r"""
import json, resource
dev = jax.devices('dumpref')[0]
a = np.ones((64, 64), np.float32)
def cycle(n):
    for _ in range(n):
        x = jax.device_put(a, dev)
        x.delete()
def rss_kib():
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith('VmRSS'))
cycle(1000)  # warm-up: jax's caches fill here
before = rss_kib()
cycle(10000)
after = rss_kib()
s = dev.memory_stats()
print(json.dumps({'rss_before_kib': before, 'rss_after_kib': after,
                  'bytes_in_use': s['bytes_in_use'], 'num_allocs': s['num_allocs']}))
"""


def test_ten_thousand_put_delete_cycles_keep_memory_flat(_pjrt_built):
    got = _json_line(_pjrt_built.run_jax(CYCLES, trace=False))
    assert got["num_allocs"] == 11000
    assert got["bytes_in_use"] == 0
    # 10,000 x 16 KiB = 160 MiB would pass through; a leak of even one array per cycle would
    # show as >= 160 MiB.  A few MiB of allocator slack is not a leak.
    assert got["rss_after_kib"] - got["rss_before_kib"] < 8 * 1024, got


def test_entry_point_can_be_switched_off(_pjrt_built):
    run = _pjrt_built.run_jax(
        "import json\nprint(json.dumps({'b': [d.platform for d in jax.devices()]}))\n"
        "jax.devices('dumpref')\n", env={"DUMPREF_PJRT": "0"}, trace=False)
    assert not run.ok and "dumpref" in run.why
    assert '{"b": ["cpu"]}' in run.stdout


def test_knocking_out_an_entry_point_is_reported(_pjrt_built):
    run = _pjrt_built.run_jax(LEVELS[0].code, disable=["PJRT_Client_Create"])
    assert not level_passed(run) and OK_MARK not in run.stdout
    assert "UNIMPLEMENTED (knocked out)" in run.why
    assert run.trace[:2] == ["PJRT_Plugin_Initialize", "PJRT_Client_Create"]
    assert "PJRT_Client_Devices" not in run.trace  # nothing after the failed create
