/* prog_ops_complex.c -- complex64 and complex128: elementwise arithmetic and functions (C99
 * <complex.h>), equality, the part ops (real, imag, complex, abs) and the matrix product. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "prog_internal.h"

bool rt_is_complex(prog_dtype t) { return t == PROG_C64 || t == PROG_C128; }

#define COMPLEX_KERNELS(T, R, SUF)                                                         \
  static void unary_##SUF(prog_opcode op, const T* a, T* o, int64_t n) {                  \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = a[i];                                                                          \
      switch (op) {                                                                        \
        case OP_NEGATE: o[i] = -x; break;                                                  \
        case OP_EXP: o[i] = cexp##SUF(x); break;                                           \
        case OP_LOG: o[i] = clog##SUF(x); break;                                           \
        case OP_SQRT: o[i] = csqrt##SUF(x); break;                                         \
        case OP_RSQRT: o[i] = (R)1 / csqrt##SUF(x); break;                                 \
        case OP_TANH: o[i] = ctanh##SUF(x); break;                                         \
        case OP_SIN: o[i] = csin##SUF(x); break;                                           \
        case OP_COS: o[i] = ccos##SUF(x); break;                                           \
        case OP_TAN: o[i] = ctan##SUF(x); break;                                           \
        case OP_EXPM1: o[i] = cexp##SUF(x) - (R)1; break;                                  \
        case OP_LOG1P: o[i] = clog##SUF((R)1 + x); break;                                  \
        case OP_LOGISTIC: o[i] = (R)1 / ((R)1 + cexp##SUF(-x)); break;                     \
        case OP_SIGN: {                                                                    \
          R m = cabs##SUF(x);                                                              \
          o[i] = isnan(creal##SUF(x)) || isnan(cimag##SUF(x)) ? x : m == 0 ? (T)0 : x / m; \
          break;                                                                           \
        }                                                                                  \
        default: o[i] = x; break;                                                          \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  static void binary_##SUF(prog_opcode op, const T* a, const T* b, T* o, int64_t n) {     \
    for (int64_t i = 0; i < n; i++) {                                                      \
      switch (op) {                                                                        \
        case OP_ADD: o[i] = a[i] + b[i]; break;                                            \
        case OP_SUB: o[i] = a[i] - b[i]; break;                                            \
        case OP_MUL: o[i] = a[i] * b[i]; break;                                            \
        case OP_DIV: o[i] = a[i] / b[i]; break;                                            \
        case OP_POW:                                                                       \
          o[i] = (b[i] == 0) ? (T)1 : cpow##SUF(a[i], b[i]);                               \
          break;                                                                           \
        default: o[i] = 0; break;                                                          \
      }                                                                                    \
    }                                                                                      \
  }

COMPLEX_KERNELS(float complex, float, f)
COMPLEX_KERNELS(double complex, double, )

int rt_complex_elementwise(run_ctx* r, const prog_insn* in, const prog_shape* a,
                           void* const* args, void* o, int64_t n) {
  (void)r;
  bool c64 = a->dtype == PROG_C64 || in->shape.dtype == PROG_C64;
  switch (in->op) {
    case OP_COMPLEX:  /* two real parts -> one complex */
      for (int64_t i = 0; i < n; i++) {
        if (c64) ((float complex*)o)[i] = CMPLXF(((const float*)args[0])[i], ((const float*)args[1])[i]);
        else ((double complex*)o)[i] = CMPLX(((const double*)args[0])[i], ((const double*)args[1])[i]);
      }
      return PROG_OK;
    case OP_REAL: case OP_IMAG: case OP_ABS:
      if (!rt_is_complex(in->shape.dtype) && rt_is_complex(a->dtype)) {
        for (int64_t i = 0; i < n; i++) {
          if (c64) {
            float complex x = ((const float complex*)args[0])[i];
            ((float*)o)[i] = in->op == OP_REAL ? crealf(x) : in->op == OP_IMAG ? cimagf(x) : cabsf(x);
          } else {
            double complex x = ((const double complex*)args[0])[i];
            ((double*)o)[i] = in->op == OP_REAL ? creal(x) : in->op == OP_IMAG ? cimag(x) : cabs(x);
          }
        }
        return PROG_OK;
      }
      break;
    default: break;
  }
  bool binary = in->num_in == 2;
  if (c64) {
    if (binary) binary_f(in->op, args[0], args[1], o, n); else unary_f(in->op, args[0], o, n);
  } else {
    if (binary) binary_(in->op, args[0], args[1], o, n); else unary_(in->op, args[0], o, n);
  }
  return PROG_OK;
}

void rt_complex_compare(prog_dtype t, int dir, const void* a, const void* b, uint8_t* o, int64_t n) {
  size_t es = prog_dtype_size(t);
  for (int64_t i = 0; i < n; i++) {
    bool eq;
    if (t == PROG_C64) eq = ((const float complex*)a)[i] == ((const float complex*)b)[i];
    else eq = ((const double complex*)a)[i] == ((const double complex*)b)[i];
    (void)es;
    o[i] = dir == CMP_EQ ? eq : !eq;
  }
}

void rt_matmul_complex(prog_dtype t, const void* a, const void* b, void* c, int64_t M, int64_t N,
                       int64_t K) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) {
      if (t == PROG_C64) {
        float complex x = ((const float complex*)a)[i * K + k];
        const float complex* bk = (const float complex*)b + k * N;
        float complex* ci = (float complex*)c + i * N;
        for (int64_t j = 0; j < N; j++) ci[j] += x * bk[j];
      } else {
        double complex x = ((const double complex*)a)[i * K + k];
        const double complex* bk = (const double complex*)b + k * N;
        double complex* ci = (double complex*)c + i * N;
        for (int64_t j = 0; j < N; j++) ci[j] += x * bk[j];
      }
    }
}
