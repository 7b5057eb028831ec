"""The TPU's own fusion log (tpu_fusion's *_fusion.html), read by the backend-neutral reader:
every decision with the compiler's reason and the source line that decided it, grouped by
reason; the command line on the corpus's folders, fused and unfused."""
import json
import subprocess
import sys

import pytest
from tpu_corpus import corpus_variants

from pytest_dumpref.xla.fusion_log import (fusion_decisions_in_folder, fusion_log_files, reason_clauses,
                                          refusals, refusals_by_reason)

VARIANTS = corpus_variants()


def test_softmax_keeps_its_row_max_out_of_both_fusions_and_the_log_says_why(tpu_corpus):
    decisions = fusion_decisions_in_folder(tpu_corpus / "softmax_8192/fused")
    assert [d.producer for d in decisions if d.fused][:2] == ["sub.7", "subtract_exponential_fusion"]
    first = refusals(decisions, producer="reduce_max.7", consumer="fusion")[0]
    assert [(c.text, c.source) for c in reason_clauses(first.reason)] == [
        ("Not fusing MOF", "platforms/xla/service/jellyfish/tpu_instruction_fusion.cc:4582"),
        ("Not allowed", "platforms/xla/service/jellyfish/tpu_instruction_fusion.cc:4151")]
    assert reason_clauses(first.reason)[-1].via == ("third_party/tensorflow/compiler/xla/service/decision.h:119",)
    groups = {str(c): [(d.producer, d.consumer) for d in g] for c, g in refusals_by_reason(decisions).items()}
    assert groups["Not allowed (platforms/xla/service/jellyfish/tpu_instruction_fusion.cc:4151)"] == \
        [("reduce_max.7", "fusion"), ("reduce_max.7", "fusion.1")]


def test_every_fused_log_of_the_corpus_reads(tpu_corpus):
    read = 0
    for variant in VARIANTS:
        folder = tpu_corpus / variant
        if not fusion_log_files(folder):
            continue
        decisions = fusion_decisions_in_folder(folder)
        assert decisions, variant       # (scan_rnn's pass refuses all it logs: fused is no must)
        # every refusal the TPU logs names the source line of each of its reasons
        assert all(c.source for d in decisions if not d.fused for c in reason_clauses(d.reason)), variant
        read += 1
    assert read >= 12


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_fusion_command_reads_every_folder_of_the_corpus(tpu_corpus, variant):
    folder = tpu_corpus / variant
    done = subprocess.run([sys.executable, "-m", "pytest_dumpref", "fusion", "--json", str(folder)],
                          capture_output=True, text=True, timeout=120)
    if variant.endswith("/fused") and not fusion_log_files(folder):
        # the corpus keeps logs under 300 KB (and flax's MLP's); a folder without one says so
        assert done.returncode == 2 and "xla_dump_fusion_visualization" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    (m,) = json.loads(done.stdout)["modules"]
    assert m["backend"] == "tpu"
    if variant.endswith("/unfused"):
        assert m["fused"] == 0 and "disabled tpu_fusion" in m["note"]
    else:
        assert m["fused"] + m["refused"] == len(m["decisions"]) > 0
        assert all(r["source"] for r in m["refusals_by_reason"])
