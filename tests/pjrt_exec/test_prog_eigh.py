"""eigh, eigvalsh, svd and polar, jitted on the dumpref device against jax's CPU backend.

jax lowers eigh only for cpu, gpu and tpu, so each of these once failed before it reached the
device: "MLIR translation rule for primitive 'eigh' not found for platform dumpref" (146 of
jax-v0.10.2's tests, in linalg_test, lax_scipy_test, svd_test, eigh_test, lobpcg_test, ...;
svd's lowering calls eigh).  pytest_dumpref/pjrt/jax_lowerings.py registers jax's own QDWH
divide-and-conquer for the platform; this runs it.

Eigenvectors and singular vectors are fixed only up to sign (and within a repeated eigenvalue,
up to rotation), so they are not compared with the CPU's: the decomposition must rebuild the
matrix (v diag(w) v^H, u diag(s) vh, u p), its vectors must be orthonormal, and the eigenvalues
and singular values (unique) must match the CPU's.  Errors are relative to the largest
magnitude of the matrix: at most 1e-5 for f32, 1e-12 for f64.  Shapes: 1x1 (the recursion's
base case), 2x2 to 17x17, batched, a matrix with repeated eigenvalues, one of rank 1, the
upper triangle read alone (UPLO="U" without symmetrising), and subset_by_index; and a batch
in which one matrix has a NaN or an inf: NaNs for it.
Complex types are in test_prog_complex_linalg.py, with the complex QR and triangular solves
that their QDWH iterations run.
"""
from __future__ import annotations

import json

import pytest

from test_prog_jax_programs import plugin_library, run_script  # noqa: F401 (a fixture)

SCRIPT = r'''
import json
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
from jax import lax

cpu, dev = jax.devices("cpu")[0], jax.devices("dumpref")[0]
rng = np.random.RandomState(7)

def H(x):
    return np.conj(np.swapaxes(x, -1, -2))

def symmetric(dt, shape):
    a = rng.randn(*shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dt)

def repeated(dt):  # eigenvalues 1, 1, 2, 2, 2, 3
    q, _ = np.linalg.qr(rng.randn(6, 6))
    return (q @ np.diag([1., 1., 2., 2., 2., 3.]) @ q.T).astype(dt)

def rank_one(dt):
    x = rng.randn(7, 1)
    return (x @ x.T).astype(dt)

def sym_upper(a):  # the Hermitian matrix whose upper triangle is a's
    u = np.triu(a)
    return u + H(np.triu(a, 1))

def eigh_U(a):
    return jnp.linalg.eigh(a, UPLO="U", symmetrize_input=False)

def subset(a):  # the three largest eigenpairs (CPU: no subset_by_index, compared with its full)
    n = a.shape[-1]
    v, w = lax.linalg.eigh(a, subset_by_index=(n - 3, n))
    return w, v

def rel(g, e, scale):
    return float(np.max(np.abs(np.asarray(g, np.complex128) - e))) / scale if np.size(e) else 0.0

cases = []
for dt in ("float32", "float64"):
    for shape in ((1, 1), (2, 2), (3, 3), (5, 5), (8, 8), (16, 16), (17, 17), (3, 4, 4),
                  (2, 2, 6, 6)):
        cases.append((f"{dt}/eigh/{'x'.join(map(str, shape))}", "eigh", symmetric(dt, shape)))
        cases.append((f"{dt}/eigvalsh/{'x'.join(map(str, shape))}", "eigvalsh",
                      symmetric(dt, shape)))
    cases.append((f"{dt}/eigh/repeated", "eigh", repeated(dt)))
    cases.append((f"{dt}/eigh/rank_one", "eigh", rank_one(dt)))
    cases.append((f"{dt}/eigh/upper_unsymmetrised", "eigh_U", rng.randn(6, 6).astype(dt)))
    for k in range(4):  # jax's own subset path (not used) was wrong for about half of these
        cases.append((f"{dt}/eigh/subset_by_index_{k}", "subset", symmetric(dt, (9, 9))))
    for fill in ("nan", "inf"):  # the second matrix of the batch only: the first is finite
        a = symmetric(dt, (2, 5, 5))
        a[1, 2, 3] = a[1, 3, 2] = float(fill)
        cases.append((f"{dt}/nonfinite/{fill}", "nonfinite", a))
    for shape in ((1, 1), (2, 3), (5, 3), (3, 5), (8, 8), (2, 6, 4), (3, 4, 7)):
        a = rng.randn(*shape).astype(dt)
        cases.append((f"{dt}/svd/{'x'.join(map(str, shape))}", "svd", a))
        cases.append((f"{dt}/svdvals/{'x'.join(map(str, shape))}", "svdvals", a))
    for shape in ((4, 4), (6, 3)):
        a = rng.randn(*shape).astype(dt)
        for method in ("qdwh", "svd"):
            cases.append((f"{dt}/polar_{method}/{'x'.join(map(str, shape))}", "polar_" + method, a))

functions = {
    "eigh": jnp.linalg.eigh, "eigh_U": eigh_U, "subset": subset, "nonfinite": jnp.linalg.eigh,
    "eigvalsh": jnp.linalg.eigvalsh,
    "svd": lambda a: jnp.linalg.svd(a, full_matrices=False),
    "svdvals": lambda a: jnp.linalg.svd(a, compute_uv=False),
    "polar_qdwh": lambda a: jax.scipy.linalg.polar(a, method="qdwh"),
    "polar_svd": lambda a: jax.scipy.linalg.polar(a, method="svd"),
}

out = {}
for name, kind, a in cases:
    f = jax.jit(functions[kind])
    full = "eigh" if kind == "subset" else kind
    e = jax.tree.map(np.asarray, jax.jit(functions[full])(jax.device_put(a, cpu)))
    try:
        got = f(jax.device_put(a, dev))
        places = sorted({d.platform for r in jax.tree.leaves(got) for d in r.devices()})
        g = jax.tree.map(np.asarray, got)
    except Exception as exc:  # a refusal is a failure of its case, not of the run
        out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        continue
    if kind == "nonfinite":
        out[name] = {"places": places,
                     "eigenvalues_nan_as_cpu": bool(np.array_equal(np.isnan(g[0]), np.isnan(e[0]))),
                     "first_finite": all(bool(np.isfinite(x[0]).all()) for x in g),
                     "second_nan": all(bool(np.isnan(x[1]).all()) for x in g)}
        continue
    double = a.dtype == np.float64
    scale = float(np.max(np.abs(a))) or 1.0
    errs = {}
    if kind in ("eigh", "eigh_U", "subset"):
        w, v = g
        target = sym_upper(a) if kind == "eigh_U" else (a + H(a)) / 2
        if kind == "subset":
            errs["eigenvalues"] = rel(w, e[0][..., -3:], scale)
            errs["eigenpairs"] = rel(target @ v, v * w[..., None, :], scale)
        else:
            errs["eigenvalues"] = rel(w, e[0], scale)
            errs["rebuilt"] = rel((v * w[..., None, :]) @ H(v), target, scale)
        k = v.shape[-1]
        errs["orthonormal"] = rel(H(v) @ v, np.eye(k), 1.0)
    elif kind == "eigvalsh":
        errs["eigenvalues"] = rel(g, e, scale)
    elif kind == "svd":
        u, s, vh = g
        errs["singular_values"] = rel(s, e[1], scale)
        errs["rebuilt"] = rel((u * s[..., None, :]) @ vh, a, scale)
        k = s.shape[-1]
        errs["u_orthonormal"] = rel(H(u) @ u, np.eye(k), 1.0)
        errs["v_orthonormal"] = rel(vh @ H(vh), np.eye(k), 1.0)
    elif kind == "svdvals":
        errs["singular_values"] = rel(g, e, scale)
    else:  # polar: a = u p, u has orthonormal columns, p is positive semi-definite (unique)
        u, p = g
        errs["rebuilt"] = rel(u @ p, a, scale)
        errs["u_orthonormal"] = rel(H(u) @ u, np.eye(u.shape[-1]), 1.0)
        errs["u_vs_cpu"] = rel(u, e[0], 1.0)
        errs["p_vs_cpu"] = rel(p, e[1], scale)
    if kind == "subset":  # the CPU's full decomposition, cut to the three largest
        e = (e[0][..., -3:], e[1][..., -3:])
    same_types = [(str(x.dtype), x.shape) for x in jax.tree.leaves(g)] == \
        [(str(x.dtype), x.shape) for x in jax.tree.leaves(e)]
    finite = all(np.all(np.isfinite(x)) for x in jax.tree.leaves(g))
    errs = {k: (v if np.isfinite(v) else 1e300) for k, v in errs.items()}
    out[name] = {"errors": errs, "tol": 1e-12 if double else 1e-5, "places": places,
                 "same_types": bool(same_types), "finite": bool(finite)}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):  # noqa: F811
    text = run_script(plugin_library, tmp_path_factory.mktemp("eigh"), "eigh.py", SCRIPT)
    return json.loads(text.strip().splitlines()[-1])


def check(results, kinds):
    chosen = {k: v for k, v in results.items() if k.split("/")[1] in kinds}
    assert chosen, kinds
    bad = {k: v for k, v in chosen.items()
           if "error" in v or v["places"] != ["dumpref"] or not v["same_types"]
           or not v["finite"] or max(v["errors"].values()) > v["tol"]}
    assert not bad, json.dumps(bad, indent=1)
    return chosen


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eigh_matches_cpu(results, dtype):
    """Eigenvalues as the CPU's, v diag(w) v^T the (symmetrised) matrix, v orthonormal:
    jnp.linalg.eigh, eigvalsh, UPLO="U" unsymmetrised and lax.linalg.eigh's subset_by_index."""
    chosen = check({k: v for k, v in results.items() if k.startswith(dtype + "/")},
                   ("eigh", "eigvalsh"))
    assert len(chosen) == 2 * 9 + 3 + 4


def test_eigh_of_a_matrix_with_nan_or_inf_is_nan(results):
    """NaN eigenvalues and eigenvectors for that matrix of the batch, a finite answer for the
    other, and an answer at all: the divide-and-conquer never sees the NaN (given one it splits
    a block into itself and the empty one for ever).  The eigenvalues' NaNs are the CPU's; its
    eigenvectors are not compared: LAPACK leaves some finite columns given an inf."""
    chosen = {k: v for k, v in results.items() if k.split("/")[1] == "nonfinite"}
    assert len(chosen) == 4
    bad = {k: v for k, v in chosen.items() if v.get("places") != ["dumpref"]
           or not (v["eigenvalues_nan_as_cpu"] and v["first_finite"] and v["second_nan"])}
    assert not bad, bad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_svd_matches_cpu(results, dtype):
    """Singular values as the CPU's, u diag(s) vh the matrix, u and v orthonormal."""
    chosen = check({k: v for k, v in results.items() if k.startswith(dtype + "/")},
                   ("svd", "svdvals"))
    assert len(chosen) == 2 * 7


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_polar_matches_cpu(results, dtype):
    """jax.scipy.linalg.polar by QDWH (no eigh) and by SVD (eigh): u p the matrix, and u and p
    as the CPU's (the polar decomposition of a full-rank matrix is unique)."""
    chosen = check({k: v for k, v in results.items() if k.startswith(dtype + "/")},
                   ("polar_qdwh", "polar_svd"))
    assert len(chosen) == 2 * 2
