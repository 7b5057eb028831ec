"""The device's matrix product (plugin_c/prog_ops_matmul.c, a packed GEMM with one micro-kernel
per instruction set) is right, on every kernel it may pick, to within the error bound of a
floating-point dot product, over shapes that cross the kernel's tile and block edges, transposed
and batched operands read in place, f32 and f64.

It is not the naive loop's result bit for bit, and this test no longer asks that (it did until
the AVX2 and AVX-512 kernels took fused multiply-adds: a separate multiply and add per product
capped the f32 kernel at about 0.6 of numpy's single-threaded BLAS, and XLA:CPU itself, Eigen,
fuses and blocks its sums, so no backend the device is checked against gives those bits either).
The check is a BLAS test's: against the product computed in higher precision (float64 for f32
operands, long double for f64), every element within K * eps * (|A| @ |B|) of it -- the
textbook bound on a K-term dot product summed in any order with one rounding per multiply and
add (gamma_K ~ K * eps / 2; a fused multiply-add rounds less), so it holds on every kernel
without being loose: at K = 1 it leaves room for one rounding of the one product, and a product
read from a wrong element or a dropped edge tile misses it by orders of magnitude.

DUMPREF_PJRT_ISA caps the kernel (base, avx2; unset: the widest the CPU has); on a CPU without
AVX2 the capped runs fall back to the baseline kernel and still must pass."""
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

def reference(a, b):
    # the exact-enough product: float64 for f32 operands, long double (at least float64) for f64
    hi = np.float64 if a.dtype == np.float32 else np.longdouble
    return np.matmul(a.astype(hi), b.astype(hi)), np.matmul(np.abs(a).astype(hi), np.abs(b).astype(hi))

out = {}
# (M, N, K): one element; under one tile; tile edges in every dimension; more than one KC block
# of k (256); more rows than one MC block (128) and columns than one NC block (512)
SHAPES = [(1, 1, 1), (7, 13, 5), (8, 32, 16), (37, 61, 99), (130, 45, 300), (9, 600, 20)]
for dt in ("float32", "float64"):
    for m, n, k in SHAPES:
        a, b = rng.randn(m, k).astype(dt), rng.randn(k, n).astype(dt)
        programs = {
            "plain": (lambda a, b: a @ b, a, b, reference(a, b)),
            # a^T b with a stored k x m: the lhs is read in place through its strides
            "lhs_t": (lambda at, b: jnp.einsum("km,kn->mn", at, b), np.ascontiguousarray(a.T), b, reference(a, b)),
            "rhs_t": (lambda a, bt: jnp.einsum("mk,nk->mn", a, bt), a, np.ascontiguousarray(b.T), reference(a, b)),
        }
        if m * n * k < 100000:
            ab, bb = rng.randn(3, m, k).astype(dt), rng.randn(3, k, n).astype(dt)
            programs["batched"] = (lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), ab, bb, reference(ab, bb))
        eps = np.finfo(dt).eps
        for name, (f, x, y, (want, absprod)) in programs.items():
            got = np.asarray(jax.jit(f)(jax.device_put(x, dev), jax.device_put(y, dev)))
            err = np.abs(got.astype(want.dtype) - want)
            bound = k * eps * absprod
            out[f"{dt}/{m}x{n}x{k}/{name}"] = {
                "dtype": str(got.dtype), "shape": list(got.shape),
                "within": bool(np.all(err <= bound)),
                # the worst element's share of its bound (typically ~1/sqrt(K) or less)
                "worst_share_of_bound": float(np.max(err / np.maximum(bound, np.finfo(dt).tiny))),
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
def test_matmul_within_the_dot_product_error_bound(plugin_library, tmp_path, isa):  # noqa: F811
    results = run_capped(plugin_library, tmp_path, isa)
    assert len(results) == 2 * (6 * 3 + 3)  # batched where m*n*k < 1e5
    for case, r in results.items():
        dt, mnk = case.split("/")[:2]
        m, n, _ = (int(v) for v in mnk.split("x"))
        assert r["dtype"] == dt and r["shape"][-2:] == [m, n], (case, r)
    wrong = {case: r for case, r in results.items() if not r["within"]}
    assert not wrong, wrong
