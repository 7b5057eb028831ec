"""``python -m pytest_dumpref cost`` (xla/cpu/cost_cli.py) on dumps written as a reader writes them:
a plain jax process with ``XLA_FLAGS=--xla_dump_to=DIR`` and nothing more.  Rates are built
here (round numbers), so nothing is calibrated."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pytest_dumpref.__main__ import main
from pytest_dumpref.xla.cpu import calibrate, cost_model, kernel_code

MiB = 2 ** 20
PROGRAM = """
import jax, jax.numpy as jnp, numpy as np
x = np.ones((1024, 1024), np.float32)
def pad_tanh(x):            # LLVM leaves this kernel's loop scalar (cost_model's docstring)
    return jnp.pad(jnp.tanh(x), 1)
def double(x):              # 1,048,576 flops: PJRT runs it on its worker thread
    return x * 2
for fn in (jnp.tanh, pad_tanh, double):
    jax.jit(fn)(x).block_until_ready()
"""


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """A dump folder of three programs, written by a plain jax process with only --xla_dump_to."""
    folder = tmp_path_factory.mktemp("cli") / "dump"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUMPREF_")}
    env["XLA_FLAGS"] = f"--xla_dump_to={folder}"
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def _module(dump, name):
    (path,) = dump.glob(f"*.jit_{name}.cpu_after_optimizations.txt")
    return path


def _rates(path, **compute):
    r = cost_model.Rates(dispatch_inline_s=5e-6, dispatch_async_s=15e-6, launch_s=1e-6,
                         curve=[(1 * MiB, 10e-12), (64 * MiB, 40e-12)], cold_s_per_byte=40e-12, fault_s=1e-6,
                         compute={c: 1e-10 for c in cost_model.OP_CLASSES})
    r.compute.update(compute)
    return str(calibrate.save(r, path))


@pytest.fixture
def rates(tmp_path):
    return _rates(tmp_path / "rates.json")


def cost(capsys, *args):
    code = main(["cost", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_dump_folder_is_priced_module_by_module_with_the_kernels_ir(dump, tmp_path, capsys):
    """A folder: each *.cpu_after_optimizations.txt in it, sorted; with --xla_dump_to alone the
    kernels' code is there (IR or object files), and cost reads it (the pad's tanh: a scalar loop, at a rate
    here that makes it what bounds the kernel)."""
    rates = _rates(tmp_path / "rates.json", **{cost_model.scalar("tanh"): 1e-9})
    code, out, err = cost(capsys, dump, "--rates", rates, "--json")
    assert code == 0 and err == "", err
    got = [json.loads(line) for line in out.splitlines()]
    assert [g["file"] for g in got] == sorted(str(p) for p in dump.glob("*.cpu_after_optimizations.txt"))
    assert [g["module"] for g in got] == ["jit_tanh", "jit_pad_tanh", "jit_double"]
    assert all(g["buffer_assignment"] for g in got)
    (pad,) = got[1]["kernels"]
    if kernel_code.vector_accesses(_module(dump, "pad_tanh")):     # its IR, or its object code (jaxlib 0.12)
        assert pad["regime"] == "compute (tanh, scalar loop)", pad
    else:   # object code this machine cannot read: the kernel is priced as vectorised
        assert "scalar loop" not in pad["regime"] and list(dump.glob("*.jit_pad_tanh.obj-file.*.o")), pad
    # the same folder as text: one table per module, in the same order
    code, out, _ = cost(capsys, dump, "--rates", rates)
    assert code == 0 and [line.split(":")[0] for line in out.splitlines() if line.startswith(str(dump))] \
        == [g["file"] for g in got]


def test_a_folder_without_an_optimized_module_is_refused_by_name(tmp_path, rates, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = cost(capsys, empty, "--rates", rates)
    assert code == 2 and out == ""      # nothing to price: refused before rates are read or measured
    assert err.splitlines() == [f"error: {empty}: a folder with no '*.cpu_after_optimizations.txt' "
                                f"(write one with XLA_FLAGS=--xla_dump_to={empty} when running a jax program "
                                "on the CPU)"]


def test_the_module_before_optimizations_is_refused_with_the_file_to_give(dump, rates, capsys):
    optimized = _module(dump, "tanh")
    before = optimized.with_name(optimized.name.replace("cpu_after_optimizations", "before_optimizations"))
    assert before.is_file()
    code, out, err = cost(capsys, before, "--rates", rates)
    assert code == 2 and "kernel" not in out
    (line,) = err.splitlines()
    assert line.startswith(f"error: {before}: the module before XLA's optimizations")
    assert line.endswith(f"give its optimized module instead: {optimized}")
    # the files XLA writes beside the optimized module name it too
    ba = optimized.with_name(optimized.name[:-len(".txt")] + "-buffer-assignment.txt")
    code, _, err = cost(capsys, ba, "--rates", rates)
    assert code == 2 and err.strip().endswith(f"give its optimized module instead: {optimized}")
    # nor is XLA:GPU's optimized module
    gpu = dump.parent / "module_0000.jit_tanh.sm_9.0_gpu_after_optimizations.txt"
    gpu.write_text(optimized.read_text())
    code, _, err = cost(capsys, gpu, "--rates", rates)
    assert code == 2 and err.startswith(f"error: {gpu}: XLA:GPU's optimized module")
    # under any other name, an unscheduled module is not the optimized one either
    other = dump.parent / "tanh.hlo"
    other.write_text(before.read_text())
    code, _, err = cost(capsys, other, "--rates", rates)
    assert code == 2 and err.startswith(f"error: {other}: an unscheduled HLO module")


def test_a_snapshot_after_a_pass_is_refused_with_the_file_to_give(tmp_path, rates, capsys):
    import jax.numpy as jnp
    folder = tmp_path / "passes"
    calibrate.dump_optimized(jnp.tanh, [np.ones((8, 128), np.float32)], folder, {"xla_dump_hlo_pass_re": ".*"})
    (optimized,) = folder.glob("*.cpu_after_optimizations.txt")
    snapshots = sorted(p for p in folder.glob("*.txt") if ".after_" in p.name and "optimizations" not in p.name)
    assert snapshots
    code, out, err = cost(capsys, snapshots[-1], "--rates", rates)
    assert code == 2 and "kernel" not in out
    (line,) = err.splitlines()
    assert line.startswith(f"error: {snapshots[-1]}: a snapshot of the module after one of XLA's passes")
    assert line.endswith(f"give its optimized module instead: {optimized}")
    assert cost(capsys, folder, "--rates", rates)[0] == 0      # the folder: its optimized module


def test_the_output_says_what_time_it_predicts(dump, rates, capsys):
    code, out, _ = cost(capsys, _module(dump, "tanh"), "--rates", rates)
    assert code == 0
    assert out.splitlines()[0] == ("predicted time per call as pytest_dumpref/timing.py measures it: pinned to "
                                   "one core, single-threaded XLA (--xla_cpu_multi_thread_eigen=false), not "
                                   "plain multi-threaded jax's")
    assert out.splitlines()[1] == f"rates: {rates}"


def test_each_total_says_which_dispatch_it_uses_and_why(dump, rates, capsys):
    """tanh: 0 flops (transcendentals are not counted), inline; x * 2 over 2^20 elements: on
    the worker thread.  The total is that dispatch plus the kernels less the first launch."""
    tanh, double = _module(dump, "tanh"), _module(dump, "double")
    code, out, _ = cost(capsys, tanh, double, "--rates", rates)
    assert code == 0
    lines = out.splitlines()
    assert "  dispatch inline: 0 flops (transcendentals not counted), under 1,024: PJRT's CPU client runs " \
           "the call on the calling thread (on its worker thread: 15.0 us)" in lines
    assert "  dispatch worker thread: 1,048,576 flops, at least 1,024: PJRT's CPU client hands the call to " \
           "its worker thread (inline would be 5.0 us)" in lines
    totals = [line for line in lines if line.startswith("  total ")]
    assert [t.split(": dispatch ")[1].split(" and")[0] for t in totals] == ["5.0 us (inline)",
                                                                             "15.0 us (worker thread)"]
    code, out, _ = cost(capsys, tanh, double, "--rates", rates, "--json")
    a, b = (json.loads(line) for line in out.splitlines())
    assert (a["dispatch"], a["flops"], a["dispatch us"]) == ("inline", 0, pytest.approx(5.0))
    assert (b["dispatch"], b["flops"], b["dispatch us"]) == ("worker thread", 1024 * 1024, pytest.approx(15.0))
    for p in (a, b):
        assert p["total us"] == pytest.approx(p["dispatch us"] + sum(k["us"] for k in p["kernels"]) - 1.0)


def test_a_one_op_tanh_kernels_regime_names_its_class(dump, tmp_path, capsys):
    """jnp.tanh alone is one one-op loop kernel: priced at the rate 'tanh (one-op loop)', its
    regime prints 'compute (tanh)'; where the one-op floor is dearer, 'compute (one-op loop)'
    (the README's cost section says so: tests/docs/test_readme.py)."""
    tanh = _module(dump, "tanh")
    alone = _rates(tmp_path / "alone.json", **{cost_model.alone("tanh"): 1e-9})
    code, out, _ = cost(capsys, tanh, "--rates", alone, "--json")
    (k,) = json.loads(out)["kernels"]
    assert code == 0 and k["regime"] == "compute (tanh)" and k["compute us"] == pytest.approx(1024 * 1024 * 1e-3)
    floor = _rates(tmp_path / "floor.json", **{cost_model.alone("tanh"): 1e-13, cost_model.one_op_floor("unary"): 1e-9})
    code, out, _ = cost(capsys, tanh, "--rates", floor, "--json")
    assert code == 0 and json.loads(out)["kernels"][0]["regime"] == "compute (one-op loop (unary))"


def test_each_error_is_printed_once(dump, tmp_path, rates, capsys):
    """A file the model refuses (rope's strided slice), beside one it prices: without --json one line on
    stderr naming it and the other's table on stdout; with --json one JSON line each on stdout
    and nothing on stderr.  The exit code is 2 either way."""
    from pytest_dumpref import examples
    rope = tmp_path / "rope"
    calibrate.dump_optimized(examples.rope, [np.ones((1024, 1024), np.float32)], rope)
    (refused,) = rope.glob("*.cpu_after_optimizations.txt")
    good = _module(dump, "tanh")
    code, out, err = cost(capsys, refused, good, "--rates", rates)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"error: {refused}: cannot model ") and "strided slice" in line
    assert str(refused) not in out and f"{good}: jit_tanh, 1 kernels" in out
    code, out, err = cost(capsys, refused, good, "--rates", rates, "--json")
    assert code == 2 and err == ""
    first, second = (json.loads(line) for line in out.splitlines())
    assert first == {"file": str(refused), "error": line[len("error: "):]}
    assert second["file"] == str(good) and "error" not in second
    # a file that cannot be read: once, too
    missing = tmp_path / "missing.cpu_after_optimizations.txt"
    code, out, err = cost(capsys, missing, "--rates", rates)
    assert code == 2 and err.splitlines() == [f"error: {missing}: cannot read: No such file or directory"]
    code, out, err = cost(capsys, missing, "--rates", rates, "--json")
    assert code == 2 and err == "" and json.loads(out)["file"] == str(missing)
