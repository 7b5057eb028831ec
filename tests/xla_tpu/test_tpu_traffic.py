"""Bytes as the TPU counts them (pytest_dumpref/xla/tpu/counting.py), from the text alone,
against the TPU's own cost analysis recorded beside each module of the corpus; and each
kernel's HBM and VMEM bytes apart."""
import json
import subprocess
import sys

import pytest

from pytest_dumpref.xla.hlo import parse_module, parse_shape
from pytest_dumpref.xla.traffic import counting_for, module_traffic, parse_buffer_assignment, xla_float32_total
from pytest_dumpref.xla.tpu import counting

from tpu_corpus import corpus_variants, cost_of, optimized_file

VARIANTS = corpus_variants()


def test_the_corpus_holds_enough_programs():
    programs = {v.split("/")[0] for v in VARIANTS}
    assert len(programs) >= 12 and len(VARIANTS) == 2 * len(programs)
    assert {"flax_mlp_forward", "flax_mlp_train_step", "optax_adamw_update"} <= programs


@pytest.mark.parametrize("variant", VARIANTS)
def test_bytes_accessed_as_the_tpu_counts_them(tpu_corpus, variant):
    folder = tpu_corpus / variant
    path = optimized_file(folder)
    module = parse_module(path.read_text(), source=str(path))
    assert counting_for(module).backend == "tpu"
    xla = cost_of(folder)["bytes accessed"]
    assert xla_float32_total(module) == xla
    # every difference from spill-style is named by instruction; none is left unexplained
    traffic = module_traffic(module, xla_cost=cost_of(folder))
    found = traffic.compare_with_xla()
    assert not [d for d in found if d.instruction == "(unexplained)"]
    assert all(d.reason for d in found)
    rounded = [d for d in found if d.instruction == "(float32 rounding)"]
    assert not rounded or xla > 2 ** 24


@pytest.mark.parametrize("text, size", [
    ("f32[]{:T(128)}", 512),                         # a scalar fills a 128-element tile
    ("f32[8192,8192]{1,0:T(8,128)}", 268_435_456),    # tiles fit: no padding
    ("f32[1024,4]{0,1:T(4,128)}", 16_384),            # 4 x 1024 in layout order
    ("f32[3,5]{1,0:T(8,128)}", 4 * 8 * 128),          # both dimensions padded
    ("f32[2,3,5]{2,1,0:T(8,128)}", 2 * 8 * 128 * 4),  # the dimension above the tile is not
    ("bf16[16,128]{1,0:T(8,128)(2,1)}", 16 * 128 * 2),   # the second tile pads nothing more
    ("f32[1000]{0:T(1024)S(1)}", 4096),
    ("u32[]{:S(2)}", 4),                              # untiled: its elements
])
def test_tiled_bytes(text, size):
    assert counting.tiled_bytes(parse_shape(text)) == size


def test_the_cost_analysis_sizes_of_contexts_and_tuples():
    assert counting.xla_size(parse_shape("u32[]{:S(2)}")) == counting.SYNC_FLAG_BYTES == 4096
    assert counting.xla_size(parse_shape("(f32[8]{0:T(1024)}, u32[]{:S(2)})")) == 512


def test_softmax_8192_round_trips_through_hbm_what_the_seed_says(tpu_corpus):
    """x read three times, the output written once; the row maxima and sums stay in VMEM; the
    -inf of the row max is a scalar constant that lives in HBM (the buffer assignment puts it in
    an allocation of color 0, the default memory space), read once at its tile's 512 B."""
    folder = tpu_corpus / "softmax_8192/fused"
    path = optimized_file(folder)
    traffic = module_traffic(parse_module(path.read_text(), source=str(path)))
    x = 8192 * 8192 * 4
    assert traffic.hbm_bytes == 4 * x + 512 == 1_073_742_336
    spaces = traffic.bytes_by_memory_space()
    assert spaces["HBM"] == (3 * x + 512, x)
    assert spaces["VMEM"] == (3 * 8192 * 4, 2 * 8192 * 4)   # two row vectors written, read 3 times
    ba = parse_buffer_assignment(next(folder.glob("*-buffer-assignment.txt")).read_text())
    (constant,) = [a for a in ba if [v.name for v in a.values] == ["constant.3"]]
    assert constant.kinds == ("constant",) and constant.color == 0 and constant.size == 512
    (rows,) = [a for a in ba if "reduce_max.7" in [v.name for v in a.values]]
    assert rows.color == 1 and {v.name for v in rows.values} == {"reduce_max.7", "fusion.1"}
    reduce_max = next(k for k in traffic.kernels if k.name == "reduce_max.7")
    assert reduce_max.spaces == {"HBM": (x + 512, 0), "VMEM": (0, 8192 * 4)}


def test_an_async_copy_is_one_kernel_that_reads_hbm_and_writes_vmem(tpu_corpus):
    path = optimized_file(tpu_corpus / "softmax/fused")
    traffic = module_traffic(parse_module(path.read_text(), source=str(path)))
    by_name = {k.name: k for k in traffic.kernels}
    x = 1024 * 1024 * 4
    assert by_name["copy-start"].spaces == {"HBM": (x, 0), "VMEM": (0, x)}
    assert by_name["copy-done"].bytes_accessed == 0


def test_traffic_json_reports_hbm_bytes(tpu_corpus):
    path = optimized_file(tpu_corpus / "softmax_8192/fused")
    done = subprocess.run([sys.executable, "-m", "pytest_dumpref", "traffic", "--json", str(path)],
                          capture_output=True, text=True, check=True)
    data = json.loads(done.stdout)
    assert data["backend"] == "tpu" and data["hbm_bytes"] == 1_073_742_336
    assert data["xla"]["bytes_accessed"] == 1_073_906_176 and "tpu/counting.py" in data["xla_counted_by"]
    assert {k["name"]: k["bytes_by_memory_space"]["HBM"] for k in data["kernels"]}["fusion"] == \
        {"read": 268_435_456, "written": 268_435_456}


def test_cost_refuses_a_tpu_module_by_name_before_measuring_anything(tpu_corpus):
    path = optimized_file(tpu_corpus / "softmax_8192/fused")
    done = subprocess.run([sys.executable, "-m", "pytest_dumpref", "cost", str(path),
                           str(tpu_corpus / "gelu/fused")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    first, second = done.stderr.splitlines()
    assert str(path) in first and "compiled for TPU" in first and "XLA:CPU modules only" in first
    assert "gelu/fused" in second and "compiled for TPU" in second


def test_the_cpu_cost_model_refuses_a_tpu_module_in_python_too(tpu_corpus):
    from pytest_dumpref.xla.cpu.cost_model import CostModelError, analyse
    path = optimized_file(tpu_corpus / "gelu/fused")
    with pytest.raises(CostModelError, match="compiled for TPU"):
        analyse(path.read_text(), source=str(path))
