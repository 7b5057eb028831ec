"""TPU dump folders read by the one naming table (naming.py): module names with the TPU's
.cl_<id>, sub-pass snapshots, the backend read from the files; and GPU names, from XLA's own
naming, on names alone."""
import pytest

from pytest_dumpref.xla import naming
from pytest_dumpref.xla.dump import Dump, DumpFolder
from pytest_dumpref.xla.passes import tour

EVERY_PASS = ["softmax/fused", "softmax/unfused", "softmax_8192/fused", "layernorm/fused", "layernorm/unfused",
              "mlp/fused", "mlp/unfused", "transformer_block/fused", "transformer_block/unfused",
              "adam_update/fused", "adam_update/unfused"]


@pytest.mark.parametrize("variant", EVERY_PASS)
def test_every_pass_dump_of_the_tpu_reads_whole(tpu_corpus, variant):
    d = Dump.from_folder(tpu_corpus / variant)
    d.check_complete()                       # steps 0000.. without a gap, both ends present
    assert d.backend == "tpu"
    assert naming.BACKENDS["tpu"].module_suffix and d.name.rsplit(".", 1)[1].startswith("cl_")
    assert d.optimized.entry.instructions
    # the fusion pass is tpu_fusion, in two pipelines (none when it is disabled); XLA:CPU's
    # "fusion" never runs here
    seen = d.passes_seen()
    assert ("tpu_fusion" in seen) == variant.endswith("/fused") and "fusion" not in seen
    assert {s.pipeline for s in d.snapshots if s.after == "tpu_fusion"} <= {"Main_fusion",
                                                                          "multi_output_fusion_and_bf16_folding"}


def test_sub_pass_snapshots_are_steps_of_the_pass_that_writes_them(tpu_corpus):
    d = Dump.from_folder(tpu_corpus / "softmax_8192/fused")
    by_step = {s.step: s for s in d.snapshots}
    # written from inside layout-assignment (the snapshot before says it is about to run)
    assert by_step[19].before == "layout-assignment"
    assert (by_step[20].pipeline, by_step[20].after, by_step[20].before) == \
        ("tpu-tiling-rewriter", "layout-assignment", "tiling_rewriter")
    assert (by_step[21].pipeline, by_step[21].after, by_step[21].before) == \
        ("tpu-tiling-rewriter", "tiling_propagation", None)
    assert (by_step[41].pipeline, by_step[41].after) == ("copy-insertion", "adding_copies_to_resolve_interference")
    assert len(d.snapshots) == 60


def test_the_tour_ranks_the_tpu_compile(tpu_corpus):
    report = tour(tpu_corpus / "softmax_8192/fused", top=10, xla=False)
    (m,) = report["modules"]
    assert "error" not in m
    assert m["passes"][0]["pass"] == "tpu_fusion"
    # the tiled sizes of the TPU: the optimized program's bytes are its cost analysis's
    assert m["optimized"]["bytes_read"] + m["optimized"]["bytes_written"] == 1_073_906_176


def test_a_folder_without_snapshots_still_lists_its_tpu_module(tpu_corpus):
    (mf,) = DumpFolder(tpu_corpus / "gelu/fused").modules
    assert mf.backend == "tpu" and mf.optimized is not None and mf.buffer_assignment is not None


@pytest.mark.parametrize("stage, expected", [
    ("Main_fusion.after_tpu_fusion.before_pipeline-end", ("Main_fusion", "tpu_fusion", "pipeline-end")),
    ("copy-insertion.after_adding_copies_to_resolve_interference",
     ("copy-insertion", "adding_copies_to_resolve_interference", None)),
    ("tpu-tiling-rewriter.before_tiling_rewriter", ("tpu-tiling-rewriter", "pipeline-start", "tiling_rewriter")),
    ("HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper",
     ("HLO_passes_after_layout_assignment", "fusion", "fusion-wrapper")),
])
def test_stage_names(stage, expected):
    st = naming.parse_stage(stage)
    assert (st.pipeline, st.after, st.before) == expected


def test_a_stage_name_that_is_none_of_them_is_refused():
    with pytest.raises(ValueError):
        naming.parse_stage("just-a-name")


GPU_NAMES = [
    "module_0004.jit_softmax.before_optimizations.txt",
    "module_0004.jit_softmax.0000.gpu-hlo-passes.after_pipeline-start.before_cse.txt",
    "module_0004.jit_softmax.0012.fusion.after_priority-fusion.before_pipeline-end.txt",
    "module_0004.jit_softmax.sm_9.0_gpu_after_optimizations.txt",
    "module_0004.jit_softmax.sm_9.0_gpu_after_optimizations-buffer-assignment.txt",
    "module_0004.jit_softmax.sm_9.0_gpu_after_optimizations-memory-usage-report.txt",
    "module_0004.jit_softmax.ir-no-opt.ll",
]


def test_gpu_file_names_by_the_table(tmp_path):
    for name in GPU_NAMES:
        (tmp_path / name).write_text("")
    (mf,) = DumpFolder(tmp_path).modules
    assert mf.backend == "gpu"
    assert mf.optimized.name == GPU_NAMES[3]
    assert mf.buffer_assignment.name == GPU_NAMES[4] and mf.memory_usage_report.name == GPU_NAMES[5]
    assert [step for step, _, _ in mf.snapshot_paths] == [0, 12]
    assert naming.describe("module_0004.jit_f.gfx942_gpu_after_optimizations.txt")[1].platform == "gfx942_gpu_"
    assert naming.backend_of_names("jit_f", ["gfx942_gpu_after_optimizations.txt"]) == "gpu"


def test_cpu_file_names_by_the_table():
    key, what = naming.describe("module_0004.jit_softmax.cpu_after_optimizations.txt")
    assert key == "module_0004.jit_softmax" and what.kind == "optimized" and what.platform == "cpu_"
    assert naming.backend_of_names("jit_softmax", ["cpu_after_optimizations.txt"]) == "cpu"
    assert naming.backend_of_names("jit_softmax", ["before_optimizations.txt"]) is None
