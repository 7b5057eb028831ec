/* prog_ops_linalg.c -- the QR factorization jax asks for on a platform without LAPACK: the
 * custom calls `Qr` (a -> Householder vectors below R, and their taus) and
 * `ProductOfElementaryHouseholderReflectors` (those back to Q), which XLA expands itself; and
 * triangular_solve and cholesky.
 *
 * The reflector of column j follows XLA's (and LAPACK's dlarfg) convention: with alpha the
 * diagonal element and s the norm of the elements below it, beta = -sign(alpha) * hypot(alpha,
 * s) (sign(0) = +1, the norm scaled as LAPACK's dnrm2 scales it, so that no square under- or
 * overflows), tau = (beta - alpha) / beta, v = x / (alpha - beta) with v[j] = 1; when the
 * elements below alpha are all 0 the column is left as it is (tau 0).  It is computed column
 * by column (XLA blocks the columns, which changes only the rounding), in double, on any float
 * type, over leading batch dimensions.  Complex matrices (c64, c128) follow
 * zlarfg/zgeqr2/zung2r, in complex double: beta = -sign(re alpha) * |(alpha, s)| is real,
 * tau = ((beta - re alpha) - i im alpha) / beta, H = I - tau v v^H, R = H^H ... applied from
 * the left (so with conj(tau)), Q = H_0 H_1 ...; a column is left alone (tau 0) only when s is
 * 0 and alpha is real: a complex alpha alone is still reflected, which makes every diagonal
 * element of R real, as LAPACK's are.
 */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

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

/* Householder QR of one m x n matrix a (row-major, in place), taus[min(m, n)]. */
static void qr_one(double* a, double* taus, int64_t m, int64_t n) {
  int64_t k = m < n ? m : n;
  for (int64_t j = 0; j < k; j++) {
    double alpha = a[j * n + j], big = fabs(alpha);
    bool below = false;  /* a nonzero (or NaN) element under the diagonal */
    for (int64_t i = j + 1; i < m; i++) {
      below = below || a[i * n + j] != 0;
      big = fmax(big, fabs(a[i * n + j]));
    }
    if (!below) {
      taus[j] = 0;
      continue;
    }
    /* The norm of (alpha, x) scaled by its largest part, as LAPACK's dnrm2 and dlapy2 scale it:
     * f64 elements below 1e-154 (or above 1e154) would square to 0 (or inf), and the column be
     * taken as already reduced (or its tau be NaN).  The scale is the power of two 2^-e of big
     * (big = f 2^e, 1/2 <= f < 1), so scaling is exact: where no square underflows or
     * overflows, beta is bit for bit the unscaled sqrt(alpha^2 + |x|^2). */
    int e;
    frexp(big, &e);
    double unit = ldexp(1.0, -e), s = 0;
    for (int64_t i = j + 1; i < m; i++) {
      double x = a[i * n + j] * unit;
      s += x * x;
    }
    double ua = alpha * unit;
    double beta = (alpha >= 0 ? -1.0 : 1.0) * ldexp(sqrt(ua * ua + s), e);
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

/* qr_one on complex numbers (zgeqr2): the reflector of column j is H = I - tau v v^H with
 * beta real, and the trailing columns get H^H (conj(tau)), as zgeqr2 applies them. */
static void qr_one_c(double complex* a, double complex* taus, int64_t m, int64_t n) {
  int64_t k = m < n ? m : n;
  for (int64_t j = 0; j < k; j++) {
    double complex alpha = a[j * n + j];
    double ar = creal(alpha), ai = cimag(alpha);
    /* The norm of (alpha, x) scaled by its largest part, as LAPACK's dznrm2 and dlapy3 scale
     * it: c128 elements below 1e-154 (or above 1e154) would square to 0 (or inf), and the
     * column would be taken as already reduced (or its tau be NaN). */
    double big = fmax(fabs(ar), fabs(ai));
    bool below = false;  /* a nonzero element under the diagonal */
    for (int64_t i = j + 1; i < m; i++) {
      double complex x = a[i * n + j];
      double p = fmax(fabs(creal(x)), fabs(cimag(x)));
      below = below || p != 0;
      big = fmax(big, p);
    }
    if (!below && ai == 0) {
      taus[j] = 0;
      continue;
    }
    double sum = (ar / big) * (ar / big) + (ai / big) * (ai / big);
    for (int64_t i = j + 1; i < m; i++) {
      double xr = creal(a[i * n + j]) / big, xi = cimag(a[i * n + j]) / big;
      sum += xr * xr + xi * xi;
    }
    double beta = (ar >= 0 ? -1.0 : 1.0) * big * sqrt(sum);
    double complex tau = (beta - ar) / beta - (ai / beta) * I;
    double complex scale = 1.0 / (alpha - beta);
    for (int64_t i = j + 1; i < m; i++) a[i * n + j] *= scale;  /* v below the diagonal */
    /* the trailing columns: a[:, c] -= conj(tau) v (v^H a[:, c]), v = (1, a[j+1:, j]) */
    double complex ctau = conj(tau);
    for (int64_t c = j + 1; c < n; c++) {
      double complex dot = a[j * n + c];
      for (int64_t i = j + 1; i < m; i++) dot += conj(a[i * n + j]) * a[i * n + c];
      dot *= ctau;
      a[j * n + c] -= dot;
      for (int64_t i = j + 1; i < m; i++) a[i * n + c] -= dot * a[i * n + j];
    }
    a[j * n + j] = beta;
    taus[j] = tau;
  }
}

/* householder_product_one on complex numbers (zung2r): Q = H_0 ... H_{k-1} on the first n
 * columns of the identity, H_j = I - tau_j v_j v_j^H (tau itself, not its conjugate).  Columns
 * c < j are skipped: H_j touches rows j.. only, where those columns of H_{j+1} ... I are still
 * zero, so their dot products are exactly 0. */
static void householder_product_one_c(const double complex* a, const double complex* taus,
                                      double complex* q, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t c = 0; c < n; c++) q[i * n + c] = i == c ? 1.0 : 0.0;
  for (int64_t j = k - 1; j >= 0; j--) {
    double complex tau = taus[j];
    if (tau == 0) continue;
    for (int64_t c = j; c < n; c++) {
      double complex dot = q[j * n + c];
      for (int64_t i = j + 1; i < m; i++) dot += conj(a[i * n + j]) * q[i * n + c];
      dot *= tau;
      q[j * n + c] -= dot;
      for (int64_t i = j + 1; i < m; i++) q[i * n + c] -= dot * a[i * n + j];
    }
  }
}

/* rt_linalg for c64 and c128: the same batch loop in complex double. */
static int linalg_complex(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
                          void** vals, int64_t batch, int64_t m, int64_t n, int64_t k) {
  prog_dtype t = f->values[in->in[0]].dtype;
  bool qr = in->iarg == 0;
  double complex* a = malloc((size_t)(m * n + 1) * sizeof(double complex));
  double complex* taus = malloc((size_t)(k + 1) * sizeof(double complex));
  double complex* q = qr ? NULL : malloc((size_t)(m * n + 1) * sizeof(double complex));
  if (a == NULL || taus == NULL || (!qr && q == NULL)) {
    free(a), free(taus), free(q);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t i = 0; i < m * n; i++) a[i] = get_c(t, args[0], b * m * n + i);
    if (qr) {
      qr_one_c(a, taus, m, n);
      for (int64_t i = 0; i < m * n; i++) put_c(t, vals[in->out], b * m * n + i, a[i]);
      for (int64_t j = 0; j < k; j++) put_c(t, vals[in->out + 1], b * k + j, taus[j]);
    } else {
      for (int64_t j = 0; j < k; j++) taus[j] = get_c(t, args[1], b * k + j);
      householder_product_one_c(a, taus, q, m, n, k);
      for (int64_t i = 0; i < m * n; i++) put_c(t, vals[in->out], b * m * n + i, q[i]);
    }
  }
  free(a), free(taus), free(q);
  return PROG_OK;
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
  if (rt_is_complex(t)) return linalg_complex(r, f, in, args, vals, batch, m, n, k);
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

/* triangular_solve on c64 and c128: rt_triangular_solve's substitution in complex double, with
 * A's elements conjugated first under ADJOINT (op(A) = conj(A)^T).  From the right the system's
 * matrix is op(A)^T, a plain transpose of op(A): X op(A) = B is op(A)^T X^T = B^T. */
static int triangular_solve_complex(run_ctx* r, const prog_insn* in, prog_dtype t, int64_t m,
                                    int64_t rows, int64_t cols, int64_t batch,
                                    void* const* args, void** vals) {
  bool left = in->p[0][0], lower = in->p[0][1], unit = in->p[0][2], trans = in->p[0][3];
  bool adjoint = in->p[0][4];
  double complex* T = malloc((size_t)(m * m + 1) * sizeof(double complex));
  double complex* x = malloc((size_t)(rows * cols + 1) * sizeof(double complex));
  if (T == NULL || x == NULL) {
    free(T), free(x);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  bool s_lower = lower != trans;
  if (!left) s_lower = !s_lower;
  bool flip = trans != !left;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < m; j++) {
        bool kept = i == j || (lower ? j < i : j > i);
        double complex v = i == j && unit ? 1.0 : kept ? get_c(t, args[0], b * m * m + i * m + j) : 0.0;
        if (adjoint) v = conj(v);
        if (flip) T[j * m + i] = v; else T[i * m + j] = v;
      }
    for (int64_t i = 0; i < rows * cols; i++) x[i] = get_c(t, args[1], b * rows * cols + i);
    int64_t nrhs = left ? cols : rows;
    for (int64_t q = 0; q < nrhs; q++) {
      for (int64_t step = 0; step < m; step++) {
        int64_t i = s_lower ? step : m - 1 - step;
        double complex sum = left ? x[i * cols + q] : x[q * cols + i];
        for (int64_t j = 0; j < m; j++) {
          if (j == i || (s_lower ? j > i : j < i)) continue;
          sum -= T[i * m + j] * (left ? x[j * cols + q] : x[q * cols + j]);
        }
        sum /= T[i * m + i];
        if (left) x[i * cols + q] = sum; else x[q * cols + i] = sum;
      }
    }
    for (int64_t i = 0; i < rows * cols; i++) put_c(t, vals[in->out], b * rows * cols + i, x[i]);
  }
  free(T), free(x);
  return PROG_OK;
}

/* triangular_solve: op(A) X = B (left_side) or X op(A) = B, A's `lower` (or upper) triangle
 * with its diagonal (ones when unit_diagonal), op the identity, the transpose or the adjoint
 * (the transpose on real types; complex ones go to triangular_solve_complex).  Substitution in
 * double, per batch and per right-hand side.
 * in->p[0]: {left_side, lower, unit_diagonal, transpose (or adjoint), adjoint}. */
int rt_triangular_solve(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
                        void** vals) {
  const prog_shape *as = &f->values[in->in[0]], *bs = &f->values[in->in[1]];
  int rank = bs->rank;
  bool left = in->p[0][0], lower = in->p[0][1], unit = in->p[0][2], trans = in->p[0][3];
  int64_t m = as->dims[rank - 1], rows = bs->dims[rank - 2], cols = bs->dims[rank - 1], batch = 1;
  for (int d = 0; d < rank - 2; d++) batch *= bs->dims[d];
  prog_dtype t = bs->dtype;
  if (rt_is_complex(t)) return triangular_solve_complex(r, in, t, m, rows, cols, batch, args, vals);
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
