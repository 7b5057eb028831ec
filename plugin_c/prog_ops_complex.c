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

/* sign(z) = z / |z| (0 at 0, NaN parts kept): SIGN's kernel in prog_ops_table.h */
static inline float complex csign_f(float complex x) {
  float m = cabsf(x);
  return isnan(crealf(x)) || isnan(cimagf(x)) ? x : m == 0 ? (float complex)0 : x / m;
}
static inline double complex csign_(double complex x) {
  double m = cabs(x);
  return isnan(creal(x)) || isnan(cimag(x)) ? x : m == 0 ? (double complex)0 : x / m;
}

/* The kernels are the KC expressions of prog_ops_table.h, each in its own loop (one switch
 * per instruction): T the complex type, R the real one, MC(fn) the C function fn of T. */
#define MC(fn) _Generic((T)0, float complex: fn##f, default: fn)
#define COMPLEX_LOOP1(TY, RY, SUF, EXPR)                                                   \
  {                                                                                        \
    typedef TY T;                                                                          \
    typedef RY R;                                                                          \
    (void)sizeof(R);                                                                       \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = ldc_##SUF(a, i);                                                               \
      stc_##SUF(o, i, (T)(EXPR));                                                          \
    }                                                                                      \
  }
#define COMPLEX_LOOP2(TY, RY, SUF, EXPR)                                                   \
  {                                                                                        \
    typedef TY T;                                                                          \
    typedef RY R;                                                                          \
    (void)sizeof(R);                                                                       \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = ldc_##SUF(a, i), y = ldc_##SUF(b, i);                                          \
      stc_##SUF(o, i, (T)(EXPR));                                                          \
    }                                                                                      \
  }
#define COMPLEX_TYPES(LOOP, EXPR)                                                          \
  if (c64) LOOP(float complex, float, f, EXPR) else LOOP(double complex, double, , EXPR)

/* complex64 (c64) or complex128; an op without a complex kernel copies its operand */
static void unary_complex(prog_opcode op, bool c64, const void* a, void* o, int64_t n) {
  switch (op) {
#define KC1(NAME, EXPR) case OP_##NAME: COMPLEX_TYPES(COMPLEX_LOOP1, EXPR) break;
#include "prog_ops_table.h"
    default:
      memmove(o, a, (size_t)n * (c64 ? sizeof(float complex) : sizeof(double complex)));
      break;
  }
}

/* an op without a complex kernel gives 0 */
static void binary_complex(prog_opcode op, bool c64, const void* a, const void* b, void* o,
                           int64_t n) {
  switch (op) {
#define KC2(NAME, EXPR) case OP_##NAME: COMPLEX_TYPES(COMPLEX_LOOP2, EXPR) break;
#include "prog_ops_table.h"
    default: memset(o, 0, (size_t)n * (c64 ? sizeof(float complex) : sizeof(double complex))); break;
  }
}

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
  if (in->num_in == 2) binary_complex(in->op, c64, args[0], args[1], o, n);
  else unary_complex(in->op, c64, args[0], o, n);
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
