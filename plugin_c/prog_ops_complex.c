/* prog_ops_complex.c -- complex64 and complex128: elementwise arithmetic and functions (C99
 * <complex.h>), equality, the part ops (real, imag, complex, abs) and the matrix product. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "prog_internal.h"

bool rt_is_complex(prog_dtype t) { return t == PROG_C64 || t == PROG_C128; }

/* Complex elements through memcpy, never a typed pointer: correct at any address (see LD in
 * prog_internal.h); C11 lays a complex number out as its real and imaginary parts, and memcpy
 * builds one with an infinite or NaN part exactly (glibc's CMPLX exists only under gcc).
 * Named by the kernels' suffix: f (complex64) and none (complex128). */
#define COMPLEX_ACCESS(T, SUF)                                                             \
  static inline T ldc_##SUF(const void* p, int64_t i) {                                   \
    T z;                                                                                   \
    memcpy(&z, (const char*)p + i * (int64_t)sizeof z, sizeof z);                          \
    return z;                                                                              \
  }                                                                                        \
  static inline void stc_##SUF(void* p, int64_t i, T z) {                                 \
    memcpy((char*)p + i * (int64_t)sizeof z, &z, sizeof z);                                \
  }
COMPLEX_ACCESS(float complex, f)
COMPLEX_ACCESS(double complex, )

#define COMPLEX_KERNELS(T, R, SUF)                                                         \
  static void unary_##SUF(prog_opcode op, const void* a, void* o, int64_t n) {             \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = ldc_##SUF(a, i);                                                               \
      switch (op) {                                                                        \
        case OP_NEGATE: stc_##SUF(o, i, -x); break;                                        \
        case OP_EXP: stc_##SUF(o, i, cexp##SUF(x)); break;                                 \
        case OP_LOG: stc_##SUF(o, i, clog##SUF(x)); break;                                 \
        case OP_SQRT: stc_##SUF(o, i, csqrt##SUF(x)); break;                               \
        case OP_RSQRT: stc_##SUF(o, i, (R)1 / csqrt##SUF(x)); break;                       \
        case OP_TANH: stc_##SUF(o, i, ctanh##SUF(x)); break;                               \
        case OP_SIN: stc_##SUF(o, i, csin##SUF(x)); break;                                 \
        case OP_COS: stc_##SUF(o, i, ccos##SUF(x)); break;                                 \
        case OP_TAN: stc_##SUF(o, i, ctan##SUF(x)); break;                                 \
        case OP_EXPM1: stc_##SUF(o, i, cexp##SUF(x) - (R)1); break;                        \
        case OP_LOG1P: stc_##SUF(o, i, clog##SUF((R)1 + x)); break;                        \
        case OP_LOGISTIC: stc_##SUF(o, i, (R)1 / ((R)1 + cexp##SUF(-x))); break;           \
        case OP_SIGN: {                                                                    \
          R m = cabs##SUF(x);                                                              \
          stc_##SUF(o, i, isnan(creal##SUF(x)) || isnan(cimag##SUF(x)) ? x : m == 0 ? (T)0 : x / m); \
          break;                                                                           \
        }                                                                                  \
        default: stc_##SUF(o, i, x); break;                                                \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  static void binary_##SUF(prog_opcode op, const void* a, const void* b, void* o, int64_t n) { \
    for (int64_t i = 0; i < n; i++) {                                                      \
      switch (op) {                                                                        \
        case OP_ADD: stc_##SUF(o, i, ldc_##SUF(a, i) + ldc_##SUF(b, i)); break;            \
        case OP_SUB: stc_##SUF(o, i, ldc_##SUF(a, i) - ldc_##SUF(b, i)); break;            \
        case OP_MUL: stc_##SUF(o, i, ldc_##SUF(a, i) * ldc_##SUF(b, i)); break;            \
        case OP_DIV: stc_##SUF(o, i, ldc_##SUF(a, i) / ldc_##SUF(b, i)); break;            \
        case OP_POW:                                                                       \
          stc_##SUF(o, i, (ldc_##SUF(b, i) == 0) ? (T)1 : cpow##SUF(ldc_##SUF(a, i), ldc_##SUF(b, i))); \
          break;                                                                           \
        default: stc_##SUF(o, i, 0); break;                                                \
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
        if (c64) {  /* the parts, stored as the layout of a complex number */
          ST(float, o, 2 * i, LD(float, args[0], i));
          ST(float, o, 2 * i + 1, LD(float, args[1], i));
        } else {
          ST(double, o, 2 * i, LD(double, args[0], i));
          ST(double, o, 2 * i + 1, LD(double, args[1], i));
        }
      }
      return PROG_OK;
    case OP_REAL: case OP_IMAG: case OP_ABS:
      if (!rt_is_complex(in->shape.dtype) && rt_is_complex(a->dtype)) {
        for (int64_t i = 0; i < n; i++) {
          if (c64) {
            float complex x = ldc_f(args[0], i);
            ST(float, o, i, in->op == OP_REAL ? crealf(x) : in->op == OP_IMAG ? cimagf(x) : cabsf(x));
          } else {
            double complex x = ldc_(args[0], i);
            ST(double, o, i, in->op == OP_REAL ? creal(x) : in->op == OP_IMAG ? cimag(x) : cabs(x));
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
    if (t == PROG_C64) eq = ldc_f(a, i) == ldc_f(b, i);
    else eq = ldc_(a, i) == ldc_(b, i);
    (void)es;
    o[i] = dir == CMP_EQ ? eq : !eq;
  }
}

void rt_matmul_complex(prog_dtype t, const void* a, const void* b, void* c, int64_t M, int64_t N,
                       int64_t K) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) {
      /* c may be the caller's output buffer: element accesses, not typed rows */
      if (t == PROG_C64) {
        float complex x = ldc_f(a, i * K + k);
        for (int64_t j = 0; j < N; j++)
          stc_f(c, i * N + j, ldc_f(c, i * N + j) + x * ldc_f(b, k * N + j));
      } else {
        double complex x = ldc_(a, i * K + k);
        for (int64_t j = 0; j < N; j++)
          stc_(c, i * N + j, ldc_(c, i * N + j) + x * ldc_(b, k * N + j));
      }
    }
}
