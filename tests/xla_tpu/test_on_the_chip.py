"""What needs the chip itself: the dump fixtures compiling for the TPU, run where jax's default
backend is one (marked ``tpu``; tests/conftest.py skips them elsewhere).  Everything they read
afterwards is tested without a chip on the corpus."""
import numpy as np
import pytest

from pytest_dumpref.examples import softmax
from pytest_dumpref.xla.dump import DumpError, DumpSession
from pytest_dumpref.xla.traffic import xla_float32_total

pytestmark = pytest.mark.tpu


def test_dump_and_unfused_compile_for_the_tpu(tmp_path):
    x = np.ones((1024, 1024), np.float32)
    session = DumpSession(tmp_path)
    fused = session.dump(softmax, x)
    plain = session.unfused(softmax, x, passes=["tpu_fusion"])
    assert fused.backend == plain.backend == "tpu"
    fused.check_complete()
    assert "tpu_fusion" in fused.passes_seen() and "tpu_fusion" not in plain.passes_seen()
    # the TPU's own cost analysis and the tiled rules count the same bytes, fused and not
    for d in (fused, plain):
        cost = d.compiled.cost_analysis()
        assert xla_float32_total(d.optimized) == cost["bytes accessed"]
        assert not [x for x in d.traffic_report.compare_with_xla(cost) if x.instruction == "(unexplained)"]
    assert plain.traffic_report.hbm_bytes > fused.traffic_report.hbm_bytes


def test_the_cpu_fusion_pass_is_refused_on_the_tpu_naming_its_own(tmp_path):
    x = np.ones((256, 256), np.float32)
    with pytest.raises(DumpError, match="'fusion' never ran.*tpu_fusion"):
        DumpSession(tmp_path).unfused(softmax, x, passes=["fusion"])


def test_the_same_compile_gives_the_same_manifest(tmp_path):
    """What a claim hashes as evidence is deterministic on the TPU too."""
    x = np.ones((512, 512), np.float32)
    a = DumpSession(tmp_path / "a").dump(softmax, x).write_manifest().read_text()
    b = DumpSession(tmp_path / "b").dump(softmax, x).write_manifest().read_text()
    assert a == b
