/* prog_ops_linalg.c -- the QR factorization jax asks for on a platform without LAPACK: the
 * custom calls `Qr` (a -> Householder vectors below R, and their taus) and
 * `ProductOfElementaryHouseholderReflectors` (those back to Q), which XLA expands itself.
 *
 * The reflector of column j follows XLA's (and LAPACK's dlarfg) convention: with alpha the
 * diagonal element and s the norm of the elements below it, beta = -sign(alpha) * hypot(alpha,
 * s) (sign(0) = +1), tau = (beta - alpha) / beta, v = x / (alpha - beta) with v[j] = 1; when
 * s is 0 the column is left as it is (tau 0).  It is computed column by column (XLA blocks the
 * columns, which changes only the rounding), in double, on any float type, over leading batch
 * dimensions.
 */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

/* Householder QR of one m x n matrix a (row-major, in place), taus[min(m, n)]. */
static void qr_one(double* a, double* taus, int64_t m, int64_t n) {
  int64_t k = m < n ? m : n;
  for (int64_t j = 0; j < k; j++) {
    double alpha = a[j * n + j], s = 0;
    for (int64_t i = j + 1; i < m; i++) s += a[i * n + j] * a[i * n + j];
    if (s == 0) {
      taus[j] = 0;
      continue;
    }
    double beta = (alpha >= 0 ? -1.0 : 1.0) * sqrt(alpha * alpha + s);
    double tau = (beta - alpha) / beta, scale = 1.0 / (alpha - beta);
    for (int64_t i = j + 1; i < m; i++) a[i * n + j] *= scale;  /* v below the diagonal */
    /* the trailing columns: a[:, c] -= tau * v (v . a[:, c]), v = (1, a[j+1:, j]) */
    for (int64_t c = j + 1; c < n; c++) {
      double dot = a[j * n + c];
      for (int64_t i = j + 1; i < m; i++) dot += a[i * n + j] * a[i * n + c];
      dot *= tau;
      a[j * n + c] -= dot;
      for (int64_t i = j + 1; i < m; i++) a[i * n + c] -= dot * a[i * n + j];
    }
    a[j * n + j] = beta;
    taus[j] = tau;
  }
}

/* Q (m x n) = H_0 H_1 ... H_{k-1} applied to the first n columns of the identity, each
 * H_j = I - tau_j v_j v_j^T with v_j = (0.., 1, a[j+1:, j]). */
static void householder_product_one(const double* a, const double* taus, double* q, int64_t m,
                                    int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t c = 0; c < n; c++) q[i * n + c] = i == c ? 1.0 : 0.0;
  for (int64_t j = k - 1; j >= 0; j--) {
    double tau = taus[j];
    if (tau == 0) continue;
    for (int64_t c = 0; c < n; c++) {
      double dot = q[j * n + c];
      for (int64_t i = j + 1; i < m; i++) dot += a[i * n + j] * q[i * n + c];
      dot *= tau;
      q[j * n + c] -= dot;
      for (int64_t i = j + 1; i < m; i++) q[i * n + c] -= dot * a[i * n + j];
    }
  }
}

int rt_linalg(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
              void** vals) {
  const prog_shape* x = &f->values[in->in[0]];
  int rank = x->rank;
  int64_t m = x->dims[rank - 2], n = x->dims[rank - 1], batch = 1;
  for (int d = 0; d < rank - 2; d++) batch *= x->dims[d];
  prog_dtype t = x->dtype;
  bool qr = in->iarg == 0;
  int64_t k = qr ? (m < n ? m : n) : f->values[in->in[1]].dims[rank - 2];
  double* a = malloc((size_t)(m * n + 1) * sizeof(double));
  double* taus = malloc((size_t)(k + 1) * sizeof(double));
  double* q = qr ? NULL : malloc((size_t)(m * n + 1) * sizeof(double));
  if (a == NULL || taus == NULL || (!qr && q == NULL)) {
    free(a), free(taus), free(q);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t i = 0; i < m * n; i++) a[i] = rt_get_f(t, args[0], b * m * n + i);
    if (qr) {
      qr_one(a, taus, m, n);
      for (int64_t i = 0; i < m * n; i++) rt_put(t, vals[in->out], b * m * n + i, a[i], 0, true);
      for (int64_t j = 0; j < k; j++) rt_put(t, vals[in->out + 1], b * k + j, taus[j], 0, true);
    } else {
      for (int64_t j = 0; j < k; j++) taus[j] = rt_get_f(t, args[1], b * k + j);
      householder_product_one(a, taus, q, m, n, k);
      for (int64_t i = 0; i < m * n; i++) rt_put(t, vals[in->out], b * m * n + i, q[i], 0, true);
    }
  }
  free(a), free(taus), free(q);
  return PROG_OK;
}

/* triangular_solve: op(A) X = B (left_side) or X op(A) = B, A's `lower` (or upper) triangle
 * with its diagonal (ones when unit_diagonal), op the identity or the transpose (ADJOINT is the
 * transpose: real types only).  Substitution in double, per batch and per right-hand side.
 * in->p[0]: {left_side, lower, unit_diagonal, transpose}. */
int rt_triangular_solve(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
                        void** vals) {
  const prog_shape *as = &f->values[in->in[0]], *bs = &f->values[in->in[1]];
  int rank = bs->rank;
  bool left = in->p[0][0], lower = in->p[0][1], unit = in->p[0][2], trans = in->p[0][3];
  int64_t m = as->dims[rank - 1], rows = bs->dims[rank - 2], cols = bs->dims[rank - 1], batch = 1;
  for (int d = 0; d < rank - 2; d++) batch *= bs->dims[d];
  prog_dtype t = bs->dtype;
  double* T = malloc((size_t)(m * m + 1) * sizeof(double));
  double* x = malloc((size_t)(rows * cols + 1) * sizeof(double));
  if (T == NULL || x == NULL) {
    free(T), free(x);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  /* Solving from the left with T = op(A) (or, from the right, with T^T on B's rows): the
   * system's matrix S is lower triangular when `lower` and the transposes cancel. */
  bool s_lower = lower != trans;
  if (!left) s_lower = !s_lower;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < m; j++) {
        bool kept = i == j || (lower ? j < i : j > i);
        double v = i == j && unit ? 1.0 : kept ? rt_get_f(t, args[0], b * m * m + i * m + j) : 0.0;
        /* S[i][j] = op(A)[i][j] from the left, op(A)[j][i] from the right */
        bool flip = trans != !left;
        if (flip) T[j * m + i] = v; else T[i * m + j] = v;
      }
    for (int64_t i = 0; i < rows * cols; i++) x[i] = rt_get_f(t, args[1], b * rows * cols + i);
    /* S y = c for each right-hand side: B's columns from the left, its rows from the right */
    int64_t nrhs = left ? cols : rows;
    for (int64_t q = 0; q < nrhs; q++) {
      for (int64_t step = 0; step < m; step++) {
        int64_t i = s_lower ? step : m - 1 - step;
        double sum = left ? x[i * cols + q] : x[q * cols + i];
        for (int64_t j = 0; j < m; j++) {
          if (j == i || (s_lower ? j > i : j < i)) continue;
          sum -= T[i * m + j] * (left ? x[j * cols + q] : x[q * cols + j]);
        }
        sum /= T[i * m + i];
        if (left) x[i * cols + q] = sum; else x[q * cols + i] = sum;
      }
    }
    for (int64_t i = 0; i < rows * cols; i++) rt_put(t, vals[in->out], b * rows * cols + i, x[i], 0, true);
  }
  free(T), free(x);
  return PROG_OK;
}

/* Element i of a float or complex array as a double complex number. */
static double complex get_c(prog_dtype t, const void* p, int64_t i) {
  if (t == PROG_C64) return LD(float, p, 2 * i) + LD(float, p, 2 * i + 1) * I;
  if (t == PROG_C128) return LD(double, p, 2 * i) + LD(double, p, 2 * i + 1) * I;
  return rt_get_f(t, p, i);
}

static void put_c(prog_dtype t, void* p, int64_t i, double complex z) {
  if (t == PROG_C64) {
    ST(float, p, 2 * i, (float)creal(z));
    ST(float, p, 2 * i + 1, (float)cimag(z));
  } else if (t == PROG_C128) {
    ST(double, p, 2 * i, creal(z));
    ST(double, p, 2 * i + 1, cimag(z));
  } else {
    rt_put(t, p, i, creal(z), 0, true);
  }
}

/* Cholesky: A = L L^H (lower) or U^H U (upper), reading only that triangle of A, as XLA
 * does; the other triangle of the result is zero.  A matrix that is not positive definite (a
 * pivot that is not > 0, or NaN) gives a matrix of NaNs, as XLA:CPU's does.  Computed in double
 * (complex double for c64/c128) column by column (Cholesky-Banachiewicz), so f32 results are
 * XLA's up to rounding. */
int rt_cholesky(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
                void** vals) {
  const prog_shape* as = &f->values[in->in[0]];
  prog_dtype t = as->dtype;
  int rank = as->rank;
  bool lower = in->iarg != 0;
  int64_t m = as->dims[rank - 1], batch = 1;
  for (int d = 0; d < rank - 2; d++) batch *= as->dims[d];
  double complex* L = malloc((size_t)(m * m + 1) * sizeof(double complex));
  if (L == NULL) return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  for (int64_t b = 0; b < batch; b++) {
    const int64_t at = b * m * m;
    bool ok = true;
    for (int64_t i = 0; i < m * m; i++) L[i] = 0;
    /* the lower triangle of A: A[i][j] (lower) or conj(A[j][i]) (from the upper triangle) */
    for (int64_t j = 0; j < m && ok; j++) {
      double complex d = lower ? get_c(t, args[0], at + j * m + j) : conj(get_c(t, args[0], at + j * m + j));
      for (int64_t k = 0; k < j; k++) d -= L[j * m + k] * conj(L[j * m + k]);
      double dr = creal(d);
      if (!(dr > 0)) { ok = false; break; }
      double pivot = sqrt(dr);
      L[j * m + j] = pivot;
      for (int64_t i = j + 1; i < m; i++) {
        double complex s = lower ? get_c(t, args[0], at + i * m + j) : conj(get_c(t, args[0], at + j * m + i));
        for (int64_t k = 0; k < j; k++) s -= L[i * m + k] * conj(L[j * m + k]);
        L[i * m + j] = s / pivot;
      }
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < m; j++) {
        /* upper: U = L^H, U[i][j] = conj(L[j][i]) */
        double complex z = !ok ? NAN + (rt_is_complex(t) ? NAN * I : 0)
                         : lower ? L[i * m + j] : conj(L[j * m + i]);
        put_c(t, vals[in->out], at + i * m + j, z);
      }
  }
  free(L);
  return PROG_OK;
}
