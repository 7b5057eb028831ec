"""A GPT-2 style training step (examples.gpt2_train_step: token and position embeddings by
gather, causal attention, the layers under lax.scan, cross-entropy, its gradient with the
scatter-add into the embeddings, an Adam update), jitted on the dumpref device, matches the
same step on XLA's CPU backend to f32 rounding level."""
from __future__ import annotations

import json

import pytest

from pytest_dumpref.pjrt.build import build_plugin
from test_prog_jax_programs import run_jax

RUNNER = """
import json, sys, jax, numpy as np
from pytest_dumpref import examples as ex
params, state, tokens = ex.gpt2_step_inputs()
step = jax.jit(ex.gpt2_train_step)
cpu, dev = jax.devices("cpu")[0], jax.devices("dumpref")[0]
want = step(*jax.device_put((params, state, tokens), cpu))
got = step(*jax.device_put((params, state, tokens), dev))
# and a second step from the first one's state, so the optimizer's moments are nonzero
want2 = step(want[0], want[1], jax.device_put(tokens, cpu))
got2 = step(got[0], got[1], jax.device_put(tokens, dev))
leaves = jax.tree_util.tree_leaves(got2)
print(json.dumps({"one": ex.max_errors(want, got), "two": ex.max_errors(want2, got2),
                  "loss": [float(want[2]), float(got[2]), float(want2[2]), float(got2[2])],
                  "platforms": sorted({d.platform for l in leaves for d in l.devices()}),
                  "n_leaves": len(leaves)}))
"""


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    library = build_plugin(folder / "plugin").path
    script = folder / "runner.py"
    script.write_text(RUNNER)
    done = run_jax(script, library, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_gpt2_step_runs_on_the_device(result):
    assert result["platforms"] == ["dumpref"]
    assert result["n_leaves"] > 20


def test_gpt2_step_matches_cpu(result):
    for step in ("one", "two"):
        # f32 throughout; the device sums in another order than XLA (f32 reductions in
        # double), so the two differ by rounding, amplified a little by Adam's division
        assert result[step]["max_rel"] < 1e-4, (step, result[step])
        assert result[step]["max_abs"] < 1e-4, (step, result[step])
    want1, got1, want2, got2 = result["loss"]
    assert abs(want1 - got1) < 1e-5 and abs(want2 - got2) < 1e-5
    assert want2 < want1  # the step trained: the second loss is lower
