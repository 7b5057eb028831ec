/* prog_ops_fft.c -- fft: FFT and IFFT (complex to complex), RFFT (real to complex, the
 * non-negative frequencies: len/2+1 of them on the last axis) and IRFFT (back), over the last
 * one to three dimensions, as XLA defines them: the inverse transforms are scaled by 1/N.
 *
 * Computed in complex double whatever the type (c64 results are XLA's up to f32 rounding):
 * each axis in turn, every line along it transformed by an iterative radix-2 FFT when its
 * length is a power of two, else by the direct sum (O(n^2), exact twiddles from j*k mod n).
 * IRFFT inverts the outer axes first, then each line of the last axis from its len/2+1
 * coefficients, the rest being their conjugates (the imaginary parts of the zero and Nyquist
 * terms do not reach the real result, as in numpy's and XLA's irfft).
 */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

static const double TWO_PI = 6.283185307179586476925286766559;

static double complex twiddle(int64_t jk, int64_t n, int sign) {
  double a = sign * TWO_PI * (double)(jk % n) / (double)n;
  return cos(a) + sin(a) * I;
}

/* One line x[0..n) in place (sign -1: forward, +1: inverse, unscaled); scratch holds n. */
static void dft_line(double complex* x, int64_t n, int sign, double complex* scratch) {
  if (n <= 1) return;
  if ((n & (n - 1)) == 0) {
    for (int64_t i = 1, j = 0; i < n; i++) {  /* bit reversal */
      int64_t bit = n >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) { double complex t = x[i]; x[i] = x[j]; x[j] = t; }
    }
    for (int64_t len = 2; len <= n; len <<= 1)
      for (int64_t i = 0; i < n; i += len)
        for (int64_t k = 0; k < len / 2; k++) {
          double complex w = twiddle(k * (n / len), n, sign);
          double complex u = x[i + k], v = x[i + k + len / 2] * w;
          x[i + k] = u + v;
          x[i + k + len / 2] = u - v;
        }
    return;
  }
  for (int64_t k = 0; k < n; k++) {
    double complex s = 0;
    for (int64_t j = 0; j < n; j++) s += x[j] * twiddle((j * k) % n, n, sign);
    scratch[k] = s;
  }
  memcpy(x, scratch, (size_t)n * sizeof(double complex));
}

/* Every line of `data` (row-major, dims[0..rank)) along axis `axis`, with line length
 * dims[axis]. */
static void dft_axis(double complex* data, int rank, const int64_t* dims, int axis, int sign,
                     double complex* line, double complex* scratch) {
  int64_t n = dims[axis], inner = 1, outer = 1;
  for (int d = axis + 1; d < rank; d++) inner *= dims[d];
  for (int d = 0; d < axis; d++) outer *= dims[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double complex* base = data + o * n * inner + i;
      for (int64_t k = 0; k < n; k++) line[k] = base[k * inner];
      dft_line(line, n, sign, scratch);
      for (int64_t k = 0; k < n; k++) base[k * inner] = line[k];
    }
}

static double complex load_c(prog_dtype t, const void* p, int64_t i) {
  switch (t) {
    case PROG_C64: return LD(float, p, 2 * i) + LD(float, p, 2 * i + 1) * I;
    case PROG_C128: return LD(double, p, 2 * i) + LD(double, p, 2 * i + 1) * I;
    case PROG_F32: return LD(float, p, i);
    default: return LD(double, p, i);
  }
}

static void store_c(prog_dtype t, void* p, int64_t i, double complex z) {
  switch (t) {
    case PROG_C64: ST(float, p, 2 * i, (float)creal(z)); ST(float, p, 2 * i + 1, (float)cimag(z)); break;
    case PROG_C128: ST(double, p, 2 * i, creal(z)); ST(double, p, 2 * i + 1, cimag(z)); break;
    case PROG_F32: ST(float, p, i, (float)creal(z)); break;
    default: ST(double, p, i, creal(z)); break;
  }
}

int rt_fft(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args, void** vals) {
  const prog_shape* as = &f->values[in->in[0]];
  const prog_shape* os = &in->shape;
  int type = in->iarg, rank = as->rank, nfft = in->np[0], first = rank - nfft;
  /* the working array has the complex side's shape (RFFT: the input's, all of it, truncated
   * at the end; IRFFT: the input's, len/2+1 on the last axis) */
  const prog_shape* ws = as;
  int64_t n = prog_shape_elements(ws), maxlen = 1, total = 1;
  for (int k = 0; k < nfft; k++) {
    if (in->p[0][k] > maxlen) maxlen = in->p[0][k];
    total *= in->p[0][k];
  }
  if (prog_shape_elements(os) == 0) return PROG_OK;
  if (n == 0) {  /* RFFT of length 0 still has one (zero) coefficient per line */
    memset(vals[in->out], 0, rt_bytes(os));
    return PROG_OK;
  }
  double complex* w = malloc((size_t)n * sizeof(double complex));
  double complex* line = malloc((size_t)maxlen * sizeof(double complex));
  double complex* scratch = malloc((size_t)maxlen * sizeof(double complex));
  if (w == NULL || line == NULL || scratch == NULL) {
    free(w); free(line); free(scratch);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  for (int64_t i = 0; i < n; i++) w[i] = load_c(as->dtype, args[0], i);
  int sign = type == PROG_FFT || type == PROG_RFFT ? -1 : 1;
  int last = type == PROG_IRFFT ? rank - 1 : rank;  /* IRFFT's last axis is done below */
  for (int axis = first; axis < last; axis++)
    dft_axis(w, rank, ws->dims, axis, sign, line, scratch);
  void* o = vals[in->out];
  double scale = type == PROG_IFFT || type == PROG_IRFFT ? 1.0 / (double)total : 1.0;
  if (type == PROG_FFT || type == PROG_IFFT) {
    for (int64_t i = 0; i < n; i++) store_c(os->dtype, o, i, w[i] * scale);
  } else if (type == PROG_RFFT) {
    /* keep the first len/2+1 coefficients of every line of the last axis */
    int64_t len = as->dims[rank - 1], half = os->dims[rank - 1], lines = n / len;
    for (int64_t q = 0; q < lines; q++)
      for (int64_t k = 0; k < half; k++) store_c(os->dtype, o, q * half + k, w[q * len + k]);
  } else {
    int64_t half = as->dims[rank - 1], len = os->dims[rank - 1], lines = n / half;
    for (int64_t q = 0; q < lines; q++) {
      for (int64_t k = 0; k < len; k++)
        line[k] = k < half ? w[q * half + k] : conj(w[q * half + (len - k)]);
      dft_line(line, len, 1, scratch);
      for (int64_t k = 0; k < len; k++) store_c(os->dtype, o, q * len + k, creal(line[k]) * scale);
    }
  }
  free(w);
  free(line);
  free(scratch);
  return PROG_OK;
}
