"""Complex (c64, c128) triangular_solve, QR and Householder products, and through them eigh,
eigvalsh and svd of complex matrices, jitted on the dumpref device against jax's CPU backend.

Issue 20: the device refused them ("unsupported element type c64 for
vhlo.triangular_solve_v1", "... for the custom call Qr"), which failed 28 of jax-v0.10.2's
linalg_test.py cases that pass on the CPU, and every complex eigh: the QDWH divide-and-conquer
that pytest_dumpref/pjrt/jax_lowerings.py registers for the platform runs QR and triangular
solves of the input's type.

- triangular_solve: every combination of left_side, lower, transpose_a, conjugate_a and
  unit_diagonal (transpose_a with conjugate_a is the ADJOINT the device must conjugate for:
  the program text is checked to carry it), batched, c64 and c128, and a B with no columns;
- QR: jnp.linalg.qr reduced and complete, square, tall, wide, batched, one row, empty; a
  triangular matrix with a complex diagonal (LAPACK still reflects a column with nothing below
  the diagonal when its diagonal element is not real: R's diagonal comes out real) and one with
  a real diagonal (no reflection: tau 0), a zero column, matrices of tiny and of huge
  magnitude (1e-200 and 1e200 for c128); geqrf's raw Householder vectors and
  taus; householder_product of the CPU's own geqrf output, with as many taus as columns and
  with fewer;
- eigh (values, v diag(w) v^H the Hermitian matrix, v unitary), eigvalsh, and svd (values,
  u diag(s) vh the matrix) of complex matrices;
- a NaN in the input: an answer (not a crash), with NaNs in it.
Q and R are compared entry by entry: with LAPACK's convention (which the device follows) the
factorization is unique.  Errors are relative to the largest magnitude of the input (for R, X,
eigenvalues, reconstructions) or to 1 (for Q, the reflectors' v and taus, whose entries are of
size 1 at any scale), 1e-5 for c64 and 1e-12 for c128 (the device computes in complex double,
LAPACK in the type itself).
"""
from __future__ import annotations

import json

import pytest

from test_prog_jax_programs import plugin_library, run_script  # noqa: F401 (a fixture)

SCRIPT = r'''
import json, re
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
from jax import lax
from jax._src.lax.linalg import geqrf

cpu, dev = jax.devices("cpu")[0], jax.devices("dumpref")[0]
rng = np.random.RandomState(20)

def H(x):
    return np.conj(np.swapaxes(x, -1, -2))

def cplx(dt, shape):
    return (rng.randn(*shape) + 1j * rng.randn(*shape)).astype(dt)

def hermitian(dt, shape):
    a = cplx(dt, shape)
    return ((a + H(a)) / 2).astype(dt)

def rel(g, e, scale):
    return float(np.max(np.abs(np.asarray(g, np.complex128) - e))) / scale if np.size(e) else 0.0

cases = []  # (name, kind, function, args)
for dt in ("complex64", "complex128"):
    m = 5
    # a triangle whose substitution stays well conditioned (off-diagonal entries of 1/m's
    # size): the comparison then measures the solve, not the conditioning of random triangles
    a = (cplx(dt, (2, m, m)) / m + (2 + 1j) * np.eye(m)).astype(dt)
    b_left, b_right = cplx(dt, (2, m, 3)), cplx(dt, (2, 3, m))
    for left in (True, False):
        for lower in (True, False):
            for transpose_a in (False, True):
                for conjugate_a in (False, True):
                    for unit in (False, True):
                        flags = dict(left_side=left, lower=lower, transpose_a=transpose_a,
                                     conjugate_a=conjugate_a, unit_diagonal=unit)
                        name = "_".join(k for k, v in flags.items() if v) or "none"
                        f = lambda a, b, flags=flags: lax.linalg.triangular_solve(a, b, **flags)
                        cases.append((f"{dt}/triangular_solve/{name}", "triangular_solve", f,
                                      (a, b_left if left else b_right)))
    cases.append((f"{dt}/triangular_solve/no_columns", "triangular_solve",
                  lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
                  (a[0], np.zeros((m, 0), dt))))

    shapes = ((4, 4), (6, 3), (3, 6), (2, 5, 3), (2, 3, 5), (1, 4), (4, 1), (0, 3), (3, 0))
    for shape in shapes:
        s = "x".join(map(str, shape))
        x = cplx(dt, shape)
        for mode in ("reduced", "complete"):
            cases.append((f"{dt}/qr_{mode}/{s}", "qr",
                          lambda a, mode=mode: jnp.linalg.qr(a, mode=mode), (x,)))
        cases.append((f"{dt}/geqrf/{s}", "geqrf", geqrf, (x,)))
    triangular = np.triu(cplx(dt, (4, 4)))
    special = {"triangular_complex_diagonal": triangular,
               "triangular_real_diagonal": (triangular - 1j * np.diag(np.diag(triangular).imag)).astype(dt),
               "zero_column": cplx(dt, (5, 4)) * np.array([1, 0, 1, 1])}
    # magnitudes whose squares leave the type's range (c128 squares in double, as the device
    # computes: the norms must be scaled, as LAPACK scales them)
    tiny, huge = (1e-30, 1e30) if dt == "complex64" else (1e-200, 1e200)
    special["tiny"] = cplx(dt, (5, 3)) * tiny
    special["huge"] = cplx(dt, (5, 3)) * huge
    for label, x in special.items():
        x = np.asarray(x, dt)
        cases.append((f"{dt}/qr_complete/{label}", "qr",
                      lambda a: jnp.linalg.qr(a, mode="complete"), (x,)))
        cases.append((f"{dt}/geqrf/{label}", "geqrf", geqrf, (x,)))
    for shape, k in (((5, 3), 3), ((4, 4), 4), ((2, 6, 4), 4), ((5, 4), 2), ((3, 3), 0)):
        h, taus = (np.asarray(r) for r in jax.jit(geqrf)(jax.device_put(cplx(dt, shape), cpu)))
        taus = taus[..., :k]
        cases.append((f"{dt}/householder_product/{'x'.join(map(str, shape))}_k{k}",
                      "householder_product", lax.linalg.householder_product, (h, taus)))

    for shape in ((1, 1), (2, 2), (3, 3), (5, 5), (8, 8), (3, 4, 4)):
        s = "x".join(map(str, shape))
        cases.append((f"{dt}/eigh/{s}", "eigh", jnp.linalg.eigh, (hermitian(dt, shape),)))
        cases.append((f"{dt}/eigvalsh/{s}", "eigvalsh", jnp.linalg.eigvalsh,
                      (hermitian(dt, shape),)))
    for shape in ((4, 4), (5, 3), (2, 3, 4)):
        cases.append((f"{dt}/svd/{'x'.join(map(str, shape))}", "svd",
                      lambda a: jnp.linalg.svd(a, full_matrices=False), (cplx(dt, shape),)))

    poisoned = cplx(dt, (4, 4))
    poisoned[2, 1] = np.nan
    cases.append((f"{dt}/nan/qr", "nan", jnp.linalg.qr, (poisoned,)))
    cases.append((f"{dt}/nan/triangular_solve", "nan",
                  lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
                  (np.tril(poisoned) + 4 * np.eye(4, dtype=dt), cplx(dt, (4, 2)))))

out = {}
for name, kind, f, args in cases:
    fj = jax.jit(f)
    e = jax.tree.map(np.asarray, fj(*(jax.device_put(x, cpu) for x in args)))
    try:
        got = fj(*(jax.device_put(x, dev) for x in args))
        places = sorted({d.platform for r in jax.tree.leaves(got) for d in r.devices()})
        g = jax.tree.map(np.asarray, got)
    except Exception as exc:  # a refusal is a failure of its case, not of the run
        out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        continue
    same_types = [(str(x.dtype), x.shape) for x in jax.tree.leaves(g)] == \
        [(str(x.dtype), x.shape) for x in jax.tree.leaves(e)]
    record = {"places": places, "same_types": bool(same_types)}
    if kind == "nan":
        record["has_nan"] = bool(any(np.isnan(x).any() for x in jax.tree.leaves(g)))
        out[name] = record
        continue
    double = args[0].dtype == np.complex128
    a = args[0]
    scale = float(np.max(np.abs(a))) if np.size(a) else 1.0
    errs = {}
    if kind == "triangular_solve":
        # lowered for the device (its arguments there): on the CPU it is a LAPACK call
        text = fj.lower(*(jax.device_put(x, dev) for x in args)).as_text()
        record["transpose"] = re.findall(r"transpose\s*(\w+)>", text)
        errs["x"] = rel(g, e, float(np.max(np.abs(e))) if np.size(e) else 1.0)
    elif kind == "qr":  # Q's entries are of size 1 whatever the matrix's, R's of a's size
        q, r = g
        errs["q"] = rel(q, e[0], 1.0)
        errs["r"] = rel(r, e[1], scale)
        errs["rebuilt"] = rel(q @ r, a, scale)
    elif kind == "geqrf":  # R on and above the diagonal, the reflectors' v below it, and taus
        (h, taus), (eh, etaus) = g, e
        errs["r"] = rel(np.triu(h), np.triu(eh), scale)
        errs["v"] = rel(np.tril(h, -1), np.tril(eh, -1), 1.0)
        errs["taus"] = rel(taus, etaus, 1.0)
    elif kind == "householder_product":
        errs["q"] = rel(g, e, 1.0)
    elif kind == "eigh":
        w, v = g
        errs["eigenvalues"] = rel(w, e[0], scale)
        errs["rebuilt"] = rel((v * w[..., None, :]) @ H(v), a, scale)
        errs["unitary"] = rel(H(v) @ v, np.eye(v.shape[-1]), 1.0)
    elif kind == "eigvalsh":
        errs["eigenvalues"] = rel(g, e, scale)
    else:  # svd: singular values are unique, vectors only up to a phase
        u, s, vh = g
        errs["singular_values"] = rel(s, e[1], scale)
        errs["rebuilt"] = rel((u * s[..., None, :]) @ vh, a, scale)
        errs["u_unitary"] = rel(H(u) @ u, np.eye(s.shape[-1]), 1.0)
    record["finite"] = bool(all(np.all(np.isfinite(x)) for x in jax.tree.leaves(g)))
    record["errors"] = {k: (v if np.isfinite(v) else 1e300) for k, v in errs.items()}
    record["tol"] = 1e-12 if double else 1e-5
    out[name] = record
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(plugin_library, tmp_path_factory):  # noqa: F811
    text = run_script(plugin_library, tmp_path_factory.mktemp("complex-linalg"),
                      "complex_linalg.py", SCRIPT)
    return json.loads(text.strip().splitlines()[-1])


def check(results, dtype, kinds):
    chosen = {k: v for k, v in results.items()
              if k.startswith(dtype + "/") and k.split("/")[1] in kinds}
    assert chosen, (dtype, kinds)
    bad = {k: v for k, v in chosen.items()
           if "error" in v or v["places"] != ["dumpref"] or not v["same_types"]
           or not v["finite"] or max(v["errors"].values()) > v["tol"]}
    assert not bad, json.dumps(bad, indent=1)
    return chosen


DTYPES = ["complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_triangular_solve_matches_cpu(results, dtype):
    """All 32 flag combinations and a B without columns; the device sees ADJOINT exactly
    where jax asks for transpose_a and conjugate_a together (conjugate_a alone is a conj op
    jax puts before the solve)."""
    chosen = check(results, dtype, ("triangular_solve",))
    assert len(chosen) == 32 + 1
    for name, v in chosen.items():
        flags = name.split("/")[2]
        want = ("ADJOINT" if "conjugate_a" in flags else "TRANSPOSE") \
            if "transpose_a" in flags else "NO_TRANSPOSE"
        assert v["transpose"] == [want], (name, v["transpose"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_qr_matches_cpu(results, dtype):
    """Q and R of jnp.linalg.qr (reduced and complete) and geqrf's raw output, entry by entry."""
    chosen = check(results, dtype, ("qr_reduced", "qr_complete", "geqrf"))
    assert len(chosen) == 9 * 3 + 5 * 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_householder_product_matches_cpu(results, dtype):
    assert len(check(results, dtype, ("householder_product",))) == 5


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_of_complex_hermitian_matches_cpu(results, dtype):
    """Eigenvalues as the CPU's, v diag(w) v^H the matrix, v unitary; eigvalsh; and svd."""
    assert len(check(results, dtype, ("eigh", "eigvalsh", "svd"))) == 6 * 2 + 3


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_input_gives_nans_not_a_crash(results, dtype):
    chosen = {k: v for k, v in results.items() if k.startswith(f"{dtype}/nan/")}
    assert len(chosen) == 2
    bad = {k: v for k, v in chosen.items() if "error" in v or v["places"] != ["dumpref"]
           or not v["same_types"] or not v["has_nan"]}
    assert not bad, bad
