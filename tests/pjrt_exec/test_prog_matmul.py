"""The device's matrix product (plugin_c/prog_ops_matmul.c, a packed GEMM with one micro-kernel
per instruction set) gives, on every kernel it may pick, exactly the naive loop's result: each
output element accumulates its products in k order, one rounded multiply and one rounded add at
a time.  numpy computes that order as K whole-array steps (c = c + a[:, k] * b[k]), so the
device's bytes are compared with it for equality, over shapes that cross the kernel's tile and
block edges, transposed and batched operands read in place, f32 and f64.

DUMPREF_PJRT_ISA caps the kernel (base, avx2; unset: the widest the CPU has); on a CPU without
AVX2 the capped runs fall back to the baseline kernel and still must agree."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_prog_jax_programs import HERE, plugin_library  # noqa: F401 (a fixture)

SCRIPT = r'''
import json
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
dev = jax.devices("dumpref")[0]
rng = np.random.RandomState(5)

def naive(a, b):
    # batch x M x K times batch x K x N, products added in k order, each step rounded
    c = np.zeros(a.shape[:-1] + b.shape[-1:], a.dtype)
    for k in range(a.shape[-1]):
        c = c + a[..., :, k:k + 1] * b[..., k:k + 1, :]
    return c

out = {}
# (M, N, K): one element; under one tile; tile edges in every dimension; more than one KC block
# of k (256); more rows than one MC block (128) and columns than one NC block (512)
SHAPES = [(1, 1, 1), (7, 13, 5), (8, 32, 16), (37, 61, 99), (130, 45, 300), (9, 600, 20)]
for dt in ("float32", "float64"):
    for m, n, k in SHAPES:
        a, b = rng.randn(m, k).astype(dt), rng.randn(k, n).astype(dt)
        programs = {
            "plain": (lambda a, b: a @ b, a, b, naive(a, b)),
            # a^T b with a stored k x m: the lhs is read in place through its strides
            "lhs_t": (lambda at, b: jnp.einsum("km,kn->mn", at, b), np.ascontiguousarray(a.T), b, naive(a, b)),
            "rhs_t": (lambda a, bt: jnp.einsum("mk,nk->mn", a, bt), a, np.ascontiguousarray(b.T), naive(a, b)),
        }
        if m * n * k < 100000:
            ab, bb = rng.randn(3, m, k).astype(dt), rng.randn(3, k, n).astype(dt)
            programs["batched"] = (lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), ab, bb, naive(ab, bb))
        for name, (f, x, y, want) in programs.items():
            got = np.asarray(jax.jit(f)(jax.device_put(x, dev), jax.device_put(y, dev)))
            out[f"{dt}/{m}x{n}x{k}/{name}"] = {
                "exact": bool(got.dtype == want.dtype and got.tobytes() == want.tobytes()),
                "max_abs_diff": float(np.max(np.abs(got.astype(np.float64) - want))),
            }
print(json.dumps(out))
'''


def run_capped(library, folder, isa):
    script = folder / "matmul.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, DUMPREF_PJRT_LIBRARY=str(library), JAX_PLATFORMS="")
    env.pop("DUMPREF_PJRT_ISA", None)
    if isa != "widest":
        env["DUMPREF_PJRT_ISA"] = isa
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=HERE.parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isa", ["base", "avx2", "widest"])
def test_matmul_is_the_naive_loop_bit_for_bit(plugin_library, tmp_path, isa):  # noqa: F811
    results = run_capped(plugin_library, tmp_path, isa)
    assert len(results) == 2 * (6 * 3 + 3)  # batched where m*n*k < 1e5
    wrong = {case: r for case, r in results.items() if not r["exact"]}
    assert not wrong, wrong
