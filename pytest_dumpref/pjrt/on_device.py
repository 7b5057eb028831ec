"""Whole programs on the dumpref device against XLA's CPU backend, in one subprocess each.

Study 3 runs these snippets with the plugin registered and prints them as they ran: each
computes the same jitted program on ``jax.devices('dumpref')[0]`` and ``jax.devices('cpu')[0]``
and prints one JSON line of what it fed the program and how far the two results are apart.
"""
from __future__ import annotations

# The block of Study 1, at its shapes: the program the pass study compiles is the one the
# device runs.  The reference is XLA's own CPU backend, in the same subprocess.
BLOCK_SHAPES = {"x": (4, 128, 256)}
BLOCK_RUN = """
from pytest_dumpref.examples import transformer_block, transformer_params
import functools, json
x = np.random.default_rng(1).standard_normal((4, 128, 256)).astype(np.float32)
params = transformer_params(256, 1024)
f = jax.jit(functools.partial(transformer_block, n_heads=4))
dev, cpu = jax.devices('dumpref')[0], jax.devices('cpu')[0]
got = f(jax.device_put(x, dev), jax.device_put(params, dev))
want = np.asarray(f(jax.device_put(x, cpu), jax.device_put(params, cpu)))
got_host = np.asarray(got)
err = float(np.max(np.abs(got_host - want)) / np.max(np.abs(want)))
print(json.dumps({"x": [str(x.dtype), list(x.shape)],
                  "device": str(list(got.devices())[0]), "shape": list(got_host.shape),
                  "dtype": str(got_host.dtype), "max_rel_err": err}))
"""

# A whole model trains on the device: pytest_dumpref/examples.py's GPT-2 style step (vocab 64,
# 16 positions, d_model 32, 2 layers, batch 2), two Adam steps from the same start on the
# device and on XLA's CPU backend, in one subprocess.
GPT2_SHAPES = {"tokens": (2, 17), "wte": (64, 32), "wpe": (17, 32), "blocks.w1": (2, 32, 64)}
GPT2_RUN = """
from pytest_dumpref import examples as ex
import json
params, state, tokens = ex.gpt2_step_inputs()
step = jax.jit(ex.gpt2_train_step)
dev, cpu = jax.devices('dumpref')[0], jax.devices('cpu')[0]
got = step(*jax.device_put((params, state, tokens), dev))
want = step(*jax.device_put((params, state, tokens), cpu))
got2 = step(got[0], got[1], jax.device_put(tokens, dev))
want2 = step(want[0], want[1], jax.device_put(tokens, cpu))
err = ex.max_errors((want, want2), (got, got2))
leaves = jax.tree_util.tree_leaves((got, got2))
print(json.dumps({"params": {k: [str(a.dtype), list(a.shape)] for k, a in
                             [("tokens", tokens), ("wte", params["wte"]), ("wpe", params["wpe"]),
                              ("blocks.w1", params["blocks"]["w1"])]},
                  "platforms": sorted({d.platform for l in leaves for d in l.devices()}),
                  "outputs": len(leaves), "loss": [float(want[2]), float(got[2]), float(want2[2]), float(got2[2])],
                  **err}))
"""
