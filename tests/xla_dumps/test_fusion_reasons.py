"""The compiler's own fusion decisions, read back from the fusion visualization log."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_dumpref.examples import softmax
from pytest_dumpref.xla.dump import DumpSession
from pytest_dumpref.xla.cpu.fusion import FusionLogError, fusion_decisions, read_fusion_log, refusals

X = np.linspace(-1, 1, 256 * 256, dtype=np.float32).reshape(256, 256)


def test_softmax_decisions_in_the_compilers_words(tmp_path):
    decisions = fusion_decisions(softmax, X, folder=tmp_path)
    assert decisions and all(d.pass_name == "fusion" for d in decisions)
    fused = [d for d in decisions if d.fused]
    # the division by the row sum: a cheap broadcast is fused into the multiply ...
    assert any(d.producer.startswith("broadcast") and d.consumer_origin == "multiply"
               and d.fusion == "broadcast_multiply_fusion" for d in fused)
    # ... and XLA refuses to fuse the (expensive) divide into it, saying why
    (no,) = refusals(decisions, producer="divide", consumer="multiply")
    assert no.consumer == "broadcast_multiply_fusion"
    assert no.reason.startswith("Fusion is not profitable.")
    # library fusions made by dot-library-rewriter are off limits to loop fusion
    assert any("not loop-fusible" in d.reason for d in refusals(decisions))
    # every fusion the log announces is in the optimized module
    d = DumpSession(tmp_path / "again").dump(softmax, X, passes="^$")
    assert not list(d.folder.glob("*_fusion.html"))  # not by default: slow on big programs
    # asked for later, the log comes from a second compile with the same options
    again = d.fusion_decisions()
    assert [(x.producer, x.consumer, x.fused, x.reason) for x in again] == \
        [(x.producer, x.consumer, x.fused, x.reason) for x in decisions]
    assert all("fusion-log" in x.file for x in again)
    names = {i.name for i in d.optimized.entry.instructions}
    assert {x.fusion for x in fused} <= names


def test_a_page_without_a_log_is_named(tmp_path):
    p = tmp_path / "main.module_0001.jit_f._fusion.html"
    p.write_text("<html><body>nothing</body></html>")
    with pytest.raises(FusionLogError, match=f"{p}: no 'const frames"):
        read_fusion_log(p)
