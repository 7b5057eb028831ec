"""Lowerings jax has for no platform but cpu, gpu and tpu, registered for the dumpref platform.

jax lowers ``eigh`` (jnp.linalg.eigh, eigvalsh, and through them svd, polar, pinv, lstsq,
matrix_rank, ...) to a LAPACK or cuSOLVER custom call on cpu and gpu, and on tpu to a
divide-and-conquer written in jax itself (``jax._src.tpu.linalg.eigh``: QDWH polar
decompositions split the spectrum until the blocks are small).  A plugin platform is neither,
so every program with an eigh failed to lower before it reached the device: "MLIR translation
rule for primitive 'eigh' not found for platform dumpref".

The tpu rule itself cannot be reused as it stands: blocks of up to 256 rows (every matrix of
jax's tests) go to the TPU's own Jacobi kernel, the custom call "Eigh", which only a TPU runs.
jax's divide-and-conquer ``eigh`` (the function under the tpu rule) takes the size at which it
stops recursing, though, and with ``termination_size=1`` it recurses down to blocks of one row,
whose decomposition is trivial (the comment in its ``base_case`` says as much: a base case that
sorts, as LAPACK does, is only right with size 1; jax's lax_scipy_spectral_dac_test runs it so
on the CPU).  This module registers that: the tpu rule's symmetrisation from the chosen
triangle, then jax's ``eigh(..., termination_size=1)``, and the 1x1 base case as a few ops.
Everything it emits is ordinary StableHLO (matmuls, QR, triangular solves, loops), which the
device runs.

The ``svd`` primitive needs nothing here: jax registers its QDWH-based lowering
(``jax._src.tpu.linalg.svd``) for every platform, and it calls eigh.

This uses jax's private modules, so :func:`register` checks what it uses and never raises: a
jax without them (or with a different ``eigh`` signature) gets a warning and no rule, which
leaves eigh failing to lower as before, and jax starts.
"""
from __future__ import annotations

import inspect
import logging
from typing import Any

logger = logging.getLogger(__name__)


def register(platform: str) -> bool:
    """Register the eigh lowering for ``platform`` (a platform jax already knows: call it after
    ``xla_bridge.register_plugin``).  Returns whether it was registered."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.lax import linalg as lax_linalg
        from jax._src.tpu.linalg import eigh as tpu_eigh
        needed = {"termination_size", "sort_eigenvalues", "subset_by_index"}
        missing = needed - set(inspect.signature(tpu_eigh.eigh).parameters)
        if missing:
            raise TypeError(f"jax._src.tpu.linalg.eigh.eigh has no {sorted(missing)}")
        lowering = _eigh_lowering(mlir, lax_linalg, tpu_eigh)
        mlir.register_lowering(lax_linalg.eigh_p, lowering, platform=platform)
    except Exception as e:  # never stop jax from starting
        logger.warning("dumpref: no eigh lowering for platform %r (jax's eigh stays "
                       "unavailable there): %s: %s", platform, type(e).__name__, e)
        return False
    return True


def _eigh_lowering(mlir: Any, lax_linalg: Any, tpu_eigh: Any) -> Any:
    import numpy as np
    import jax
    from jax import lax
    import jax.numpy as jnp

    implementation = getattr(lax_linalg, "EighImplementation", None)
    qdwh = getattr(implementation, "QDWH", None)

    def transpose(x: Any) -> Any:
        return jnp.swapaxes(x, -1, -2)

    def hermitian_from_triangle(x: Any, lower: bool) -> Any:
        """The Hermitian matrix whose ``lower`` (or upper) triangle is x's, as the tpu rule
        (``_eigh_qdwh_impl``) forms it: only that triangle of the operand is read, and the
        imaginary part of the diagonal is dropped."""
        n = x.shape[-1]
        mask = jnp.tri(n, dtype=bool) if lower else ~jnp.tri(n, k=-1, dtype=bool)
        if jnp.iscomplexobj(x):
            strict = jnp.tri(n, k=-1, dtype=bool) if lower else ~jnp.tri(n, dtype=bool)
            re = jnp.where(mask, x.real, transpose(x.real))
            im = jnp.where(strict, x.imag, 0)
            im = jnp.where(mask, im, -transpose(im))
            return lax.complex(re, im)
        return jnp.where(mask, x, transpose(x))

    def eigh_impl(x: Any, *, lower: bool, sort_eigenvalues: bool,
                  subset_by_index: tuple[int, int] | None) -> list[Any]:
        n = x.shape[-1]
        real = np.finfo(x.dtype).dtype  # f32 for f32 and c64, f64 for f64 and c128
        if n == 0:
            return [x, jnp.zeros(x.shape[:-1], real)]
        if n == 1:  # the recursion's base case: the eigenvector 1, the eigenvalue the entry
            return [jnp.ones_like(x), x[..., 0].real.astype(real)]
        flat = hermitian_from_triangle(x, lower).reshape((-1, n, n))
        subset = None if subset_by_index in (None, (0, n)) else tuple(subset_by_index)

        def decompose(h: Any) -> tuple[Any, Any]:
            # The whole decomposition, then the subset: jax's eigh(subset_by_index=...) with
            # termination_size=1 gives wrong eigenvalues (in jax 0.10.2, on the CPU backend
            # too, for 14 of 30 random 9x9 matrices, the 3 largest): it skips the blocks
            # outside the range, whose stale entries then take part in the final sort.
            w, v = tpu_eigh.eigh(h, termination_size=1,
                                 sort_eigenvalues=sort_eigenvalues or subset is not None)
            if subset is not None:
                w, v = w[subset[0]:subset[1]], v[:, subset[0]:subset[1]]
            return v, w

        def not_a_number(h: Any) -> tuple[Any, Any]:
            v, w = jax.eval_shape(decompose, h)
            return jnp.full(v.shape, np.nan, v.dtype), jnp.full(w.shape, np.nan, w.dtype)

        def one(h: Any) -> tuple[Any, Any]:
            # A matrix with an inf or a NaN gets NaNs (as the cpu rule gives where LAPACK
            # fails).  The divide-and-conquer must not see one: its split of a NaN block has
            # rank NaN, converted to 0, so it pushes the same block again, for ever (and the
            # device runs a program to its end: the process hangs).
            return lax.cond(jnp.all(jnp.isfinite(h)), decompose, not_a_number, h)

        if x.ndim == 2:  # no loop around a single matrix
            v, w = (r[None] for r in one(flat[0]))
        else:
            v, w = lax.map(one, flat)
        return [v.reshape(x.shape[:-2] + v.shape[1:]),
                w.reshape(x.shape[:-2] + w.shape[1:]).astype(real)]

    def lowering(ctx: Any, operand: Any, *, lower: bool, sort_eigenvalues: bool,
                 subset_by_index: tuple[int, int] | None, algorithm: Any = None) -> Any:
        # None is the default; QDWH is what this is.  QR and Jacobi are refused, as the tpu
        # rule refuses QR and the cpu rule refuses QDWH and Jacobi.
        if algorithm is not None and algorithm != qdwh:
            raise NotImplementedError(
                f"eigh algorithm {algorithm} is not supported on the dumpref platform "
                "(only QDWH, the default)")
        return mlir.lower_fun(eigh_impl, multiple_results=True)(
            ctx, operand, lower=lower, sort_eigenvalues=sort_eigenvalues,
            subset_by_index=subset_by_index)

    return lowering
