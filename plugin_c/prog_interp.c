/* prog_interp.c -- runs lowered programs on host arrays: the instruction loop, element types,
 * elementwise kernels, data movement, dot_general and the common reductions.  Ops with
 * regions or index arithmetic live in prog_ops_*.c.
 *
 * Every shape relation was verified by prog_vhlo*.c, so the kernels index without checks.
 * Each value gets its own row-major buffer; a buffer is freed after the last instruction that
 * reads it.  Arithmetic follows XLA's CPU semantics where C would be undefined: integer
 * overflow wraps, integer division by zero gives -1 (remainder: the dividend), float->int
 * conversion saturates with NaN -> 0, and max/min propagate NaN.  bf16 and f16 compute in f32
 * and round back.  Subnormals are kept (XLA:CPU flushes them to zero; numpy keeps them).
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

/* complex elements through memcpy (see LD in prog_internal.h): C11 lays a complex number
 * out as its real and imaginary parts */
static inline double complex ld_c64(const void* p, int64_t i) {
  float complex z;
  memcpy(&z, (const char*)p + i * (int64_t)sizeof z, sizeof z);
  return z;
}
static inline double complex ld_c128(const void* p, int64_t i) {
  double complex z;
  memcpy(&z, (const char*)p + i * (int64_t)sizeof z, sizeof z);
  return z;
}
static inline void st_c64(void* p, int64_t i, float complex z) {
  memcpy((char*)p + i * (int64_t)sizeof z, &z, sizeof z);
}
static inline void st_c128(void* p, int64_t i, double complex z) {
  memcpy((char*)p + i * (int64_t)sizeof z, &z, sizeof z);
}

/* Element loads, stores and conversions, strides and the strided copy are prog_rt.c's. */

static void convert(const prog_shape* from, const void* a, const prog_shape* to, void* o) {
  int64_t n = prog_shape_elements(to);
  /* u64 -> float goes through the unsigned value; int -> int keeps the bits (wraps) */
  bool as_float = rt_is_float(from->dtype) || (from->dtype == PROG_U64 && rt_is_float(to->dtype));
  if (from->dtype == to->dtype) {
    memcpy(o, a, rt_bytes(to));
    return;
  }
  if (rt_is_complex(from->dtype) && rt_is_complex(to->dtype)) {  /* c64 <-> c128, both parts */
    for (int64_t i = 0; i < 2 * n; i++) {
      double x = from->dtype == PROG_C64 ? LD(float, a, i) : LD(double, a, i);
      if (to->dtype == PROG_C64) ST(float, o, i, (float)x); else ST(double, o, i, x);
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    if (as_float) rt_put(to->dtype, o, i, rt_get_f(from->dtype, a, i), 0, true);
    /* pred is a byte and converts as its value, as on XLA:CPU (a bool that numpy made from
     * another byte keeps it) */
    else if (from->dtype == PROG_PRED) rt_put(to->dtype, o, i, 0, ((const uint8_t*)a)[i], false);
    else rt_put(to->dtype, o, i, 0, rt_get_i(from->dtype, a, i), false);
  }
}

static void compare(prog_dtype t, int dir, const void* a, const void* b, uint8_t* o,
                    int64_t n);

/* ---- elementwise kernels ---------------------------------------------------------------- */

#define FMAXN(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) > (y) ? (x) : (y))
#define FMINN(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) < (y) ? (x) : (y))

/* The kernels are the expressions of prog_ops_table.h, each in its own loop: one switch on the
 * op and one on the element type per instruction, none per element.  An element is loaded
 * into x (and y), the expression's value stored; T names the element type in the expression
 * (a block-scope typedef), MF(fn) the C function fn of it. */
#define MF(fn) _Generic((T)0, float: fn##f, default: fn)

#define FLOAT_LOOP1(TY, EXPR)                                                              \
  {                                                                                        \
    typedef TY T;                                                                          \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = LD(TY, a, i);                                                                  \
      ST(TY, o, i, (T)(EXPR));                                                             \
    }                                                                                      \
  }
#define FLOAT_LOOP2(TY, EXPR)                                                              \
  {                                                                                        \
    typedef TY T;                                                                          \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = LD(TY, a, i), y = LD(TY, b, i);                                                \
      ST(TY, o, i, (T)(EXPR));                                                             \
    }                                                                                      \
  }
#define FLOAT_TYPES(LOOP, EXPR)                                                            \
  if (t == PROG_F32) LOOP(float, EXPR) else LOOP(double, EXPR)

/* f32 (t) or f64 */
static void unary_float(prog_opcode op, prog_dtype t, const void* a, void* o, int64_t n) {
  if (op == OP_TANH && t == PROG_F32) {  /* vectorised, per instruction set (prog_ops_vec.c) */
    rt_tanh_f32(a, o, n);
    return;
  }
  switch (op) {
#define KF1(NAME, EXPR) case OP_##NAME: FLOAT_TYPES(FLOAT_LOOP1, EXPR) break;
#include "prog_ops_table.h"
    default: break;
  }
}

static void binary_float(prog_opcode op, prog_dtype t, const void* a, const void* b, void* o,
                         int64_t n) {
  switch (op) {
#define KF2(NAME, EXPR) case OP_##NAME: FLOAT_TYPES(FLOAT_LOOP2, EXPR) break;
#include "prog_ops_table.h"
    default: break;
  }
}

static inline bool neg64(int64_t x) { return x < 0; }

/* x ** y on integers (IPOW in the table): square and multiply, wrapping through W */
#define INT_POW(T, W, SUF, SIGNED)                                                         \
  static T ipow_##SUF(T x, T y) {                                                          \
    if (SIGNED && neg64((int64_t)y))                                                       \
      return (T)(x == 1 ? 1 : (SIGNED && neg64((int64_t)x + 1 - 1) && x == (T)-1) ? ((y & 1) ? (T)-1 : 1) : 0); \
    W r = 1, b = (W)x;                                                                     \
    for (W e = (W)y; e > 0; e >>= 1, b *= b)                                               \
      if (e & 1) r *= b;                                                                   \
    return (T)r;                                                                           \
  }
INT_POW(int8_t, uint32_t, s8, 1)
INT_POW(int16_t, uint32_t, s16, 1)
INT_POW(int32_t, uint32_t, s32, 1)
INT_POW(int64_t, uint64_t, s64, 1)
INT_POW(uint8_t, uint32_t, u8, 0)
INT_POW(uint16_t, uint32_t, u16, 0)
INT_POW(uint32_t, uint32_t, u32, 0)
INT_POW(uint64_t, uint64_t, u64, 0)
#define IPOW(x, y)                                                                         \
  _Generic((T)0, int8_t: ipow_s8, int16_t: ipow_s16, int32_t: ipow_s32, int64_t: ipow_s64, \
           uint8_t: ipow_u8, uint16_t: ipow_u16, uint32_t: ipow_u32, uint64_t: ipow_u64)(x, y)

/* Integers of every width, signed or not: wrapping arithmetic through the unsigned type W (at
 * least 32 bits wide, so that no narrow product is promoted to a signed int). */
#define INT_CONTEXT(TY, WY, BITS_, SIGNED_, TMIN_)                                         \
  typedef TY T;                                                                            \
  typedef WY W;                                                                            \
  const unsigned BITS = BITS_;                                                             \
  const bool SIGNED = SIGNED_;                                                             \
  const T TMIN = (T)(TMIN_);                                                               \
  const unsigned long long MASK = ~0ull >> (64 - BITS);                                    \
  (void)sizeof(W); (void)SIGNED; (void)TMIN; (void)MASK;
#define INT_LOOP1(TY, WY, BITS_, SIGNED_, TMIN_, EXPR)                                     \
  {                                                                                        \
    INT_CONTEXT(TY, WY, BITS_, SIGNED_, TMIN_)                                             \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = LD(TY, a, i);                                                                  \
      ST(TY, o, i, (T)(EXPR));                                                             \
    }                                                                                      \
  }
#define INT_LOOP2(TY, WY, BITS_, SIGNED_, TMIN_, EXPR)                                     \
  {                                                                                        \
    INT_CONTEXT(TY, WY, BITS_, SIGNED_, TMIN_)                                             \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = LD(TY, a, i), y = LD(TY, b, i);                                                \
      uint64_t s = (uint64_t)(W)y & MASK;                                                  \
      (void)s;                                                                             \
      ST(TY, o, i, (T)(EXPR));                                                             \
    }                                                                                      \
  }
#define INT_TYPES(LOOP, EXPR)                                                              \
  switch (t) {                                                                             \
    case PROG_S8: LOOP(int8_t, uint32_t, 8u, 1, INT8_MIN, EXPR) break;                     \
    case PROG_S16: LOOP(int16_t, uint32_t, 16u, 1, INT16_MIN, EXPR) break;                 \
    case PROG_S32: LOOP(int32_t, uint32_t, 32u, 1, INT32_MIN, EXPR) break;                 \
    case PROG_S64: LOOP(int64_t, uint64_t, 64u, 1, INT64_MIN, EXPR) break;                 \
    case PROG_U8: LOOP(uint8_t, uint32_t, 8u, 0, 0, EXPR) break;                           \
    case PROG_U16: LOOP(uint16_t, uint32_t, 16u, 0, 0, EXPR) break;                        \
    case PROG_U32: LOOP(uint32_t, uint32_t, 32u, 0, 0, EXPR) break;                        \
    default: LOOP(uint64_t, uint64_t, 64u, 0, 0, EXPR) break;                              \
  }

/* s8 ... u64 (t) */
static void unary_int(prog_opcode op, prog_dtype t, const void* a, void* o, int64_t n) {
  switch (op) {
#define KI1(NAME, EXPR) case OP_##NAME: INT_TYPES(INT_LOOP1, EXPR) break;
#include "prog_ops_table.h"
    default: break;
  }
}

static void binary_int(prog_opcode op, prog_dtype t, const void* a, const void* b, void* o,
                       int64_t n) {
  switch (op) {
#define KI2(NAME, EXPR) case OP_##NAME: INT_TYPES(INT_LOOP2, EXPR) break;
#include "prog_ops_table.h"
    default: break;
  }
}

/* pred is a one-bit integer (see the table: + is or, * is and, max is or, min is and). */
static void unary_pred(prog_opcode op, const uint8_t* a, uint8_t* o, int64_t n) {
  switch (op) {
#define KP1(NAME, EXPR)                                                                    \
  case OP_##NAME:                                                                          \
    for (int64_t i = 0; i < n; i++) {                                                      \
      bool x = a[i];                                                                       \
      o[i] = (uint8_t)((EXPR) != 0);                                                       \
    }                                                                                      \
    break;
#include "prog_ops_table.h"
    default: for (int64_t i = 0; i < n; i++) o[i] = a[i]; break;
  }
}

static void binary_pred(prog_opcode op, const uint8_t* a, const uint8_t* b, uint8_t* o,
                        int64_t n) {
  switch (op) {
#define KP2(NAME, EXPR)                                                                    \
  case OP_##NAME:                                                                          \
    for (int64_t i = 0; i < n; i++) {                                                      \
      bool x = a[i], y = b[i];                                                             \
      (void)y;                                                                             \
      o[i] = (uint8_t)((EXPR) != 0);                                                       \
    }                                                                                      \
    break;
#include "prog_ops_table.h"
    default: for (int64_t i = 0; i < n; i++) o[i] = 0; break;
  }
}

static float* widen(prog_dtype t, const void* a, int64_t n) {
  float* w = rt_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (w != NULL)
    for (int64_t i = 0; i < n; i++) {
      uint16_t h = LD(uint16_t, a, i);
      w[i] = t == PROG_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h);
    }
  return w;
}

/* 4-bit integers, element by element: values widened to int64 (s4 sign-extended, u4 not),
 * the result wrapped to 4 bits.  Shifts and bit counts see the 4 bits, as XLA's do. */
static int64_t int4_pow(int64_t x, int64_t y, bool is_signed) {
  if (is_signed && y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
  int64_t r = 1;
  for (int64_t e = 0; e < y; e++) r = (r * x) & 0xf;  /* y is at most 15 */
  return r;
}

static int64_t int4_unary(prog_opcode op, int64_t x, bool is_signed) {
  unsigned bits = (unsigned)x & 0xfu;
  switch (op) {
#define KN1(NAME, EXPR) case OP_##NAME: return EXPR;
#include "prog_ops_table.h"
    default: return 0;
  }
}

static int64_t int4_binary(prog_opcode op, int64_t x, int64_t y, bool is_signed) {
  int64_t lo = is_signed ? -8 : 0;
  unsigned s = (unsigned)y & 0xfu;
  int64_t sx = (int64_t)(int8_t)(uint8_t)(((unsigned)x & 0xfu) << 4) >> 4;
  switch (op) {
#define KN2(NAME, EXPR) case OP_##NAME: return EXPR;
#include "prog_ops_table.h"
    default: return 0;
  }
}

static void elementwise_int4(const prog_insn* in, prog_dtype t, const void* a, const void* b,
                             void* o, int64_t n) {
  bool is_signed = t == PROG_S4;
  for (int64_t i = 0; i < n; i++) {
    int64_t x = rt_get_i(t, a, i);
    int64_t v = b != NULL ? int4_binary(in->op, x, rt_get_i(t, b, i), is_signed)
                          : int4_unary(in->op, x, is_signed);
    ((uint8_t*)o)[i] = (uint8_t)(v & 0xf);
  }
}

static int elementwise_dense(run_ctx* r, const prog_insn* in, const prog_shape* a_shape,
                             void* const* args, void* o, int64_t n) {
  bool binary = in->num_in == 2;
  const void *a = args[0], *b = binary ? args[1] : NULL;
  if ((in->op == OP_REAL || in->op == OP_IMAG) && !rt_is_complex(a_shape->dtype)) {
    size_t es = prog_dtype_size(a_shape->dtype);  /* a real number is its own real part */
    if (in->op == OP_REAL) memcpy(o, a, (size_t)n * es); else memset(o, 0, (size_t)n * es);
    return PROG_OK;
  }
  if (in->op == OP_COMPLEX || in->op == OP_REAL || in->op == OP_IMAG || rt_is_complex(a_shape->dtype))
    return rt_complex_elementwise(r, in, a_shape, args, o, n);
  switch (a_shape->dtype) {
    case PROG_F32:
    case PROG_F64:
      if (binary) binary_float(in->op, a_shape->dtype, a, b, o, n);
      else unary_float(in->op, a_shape->dtype, a, o, n);
      return PROG_OK;
    case PROG_S8: case PROG_S16: case PROG_S32: case PROG_S64:
    case PROG_U8: case PROG_U16: case PROG_U32: case PROG_U64:
      if (binary) binary_int(in->op, a_shape->dtype, a, b, o, n);
      else unary_int(in->op, a_shape->dtype, a, o, n);
      return PROG_OK;
    case PROG_PRED:
      if (binary) binary_pred(in->op, a, b, o, n); else unary_pred(in->op, a, o, n);
      return PROG_OK;
    case PROG_S4:
    case PROG_U4:
      elementwise_int4(in, a_shape->dtype, a, b, o, n);
      return PROG_OK;
    case PROG_BF16:
    case PROG_F16: {
      prog_dtype t = a_shape->dtype;
      float *wa = widen(t, a, n), *wb = binary ? widen(t, b, n) : NULL;
      int code = PROG_OK;
      if (wa == NULL || (binary && wb == NULL)) {
        code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
      } else {
        if (binary) binary_float(in->op, PROG_F32, wa, wb, wa, n);
        else unary_float(in->op, PROG_F32, wa, wa, n);
        for (int64_t i = 0; i < n; i++)
          ST(uint16_t, o, i, t == PROG_BF16 ? rt_f32_to_bf16(wa[i]) : rt_f32_to_f16(wa[i]));
      }
      rt_free(wa);
      rt_free(wb);
      return code;
    }
    default:
      return rt_fail(r, PROG_UNIMPLEMENTED, "unsupported element type", in->vhlo_name);
  }
}

/* Elementwise with scalar operands (scalar_in): run the dense kernel block by block, the
 * scalar repeated across one small cache-resident block. */
#define BLOCK 2048

static int elementwise(run_ctx* r, const prog_insn* in, const prog_shape* a_shape,
                       void* const* args, void* o) {
  int64_t n = prog_shape_elements(&in->shape);
  if (in->scalar_in == 0) return elementwise_dense(r, in, a_shape, args, o, n);
  size_t es = prog_dtype_size(a_shape->dtype), os = prog_dtype_size(in->shape.dtype);
  bool narrow = a_shape->dtype == PROG_BF16 || a_shape->dtype == PROG_F16;
  int64_t block = narrow ? n : BLOCK;  /* narrow floats widen whole arrays */
  char* fill[2] = {NULL, NULL};
  int code = PROG_OK;
  for (int k = 0; k < 2; k++)
    if (in->scalar_in & (1u << k)) {
      fill[k] = malloc((size_t)(block > 0 ? block : 1) * es);
      if (fill[k] == NULL) { code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name); break; }
      for (int64_t i = 0; i < block; i++) memcpy(fill[k] + i * (int64_t)es, args[k], es);
    }
  for (int64_t at = 0; at < n && code == PROG_OK; at += block) {
    int64_t len = n - at < block ? n - at : block;
    void* part[2];
    for (int k = 0; k < 2; k++)
      part[k] = fill[k] ? (void*)fill[k] : (void*)((char*)args[k] + at * (int64_t)es);
    if (in->op == OP_COMPARE)
      compare(a_shape->dtype, in->iarg, part[0], part[1], (uint8_t*)o + at, len);
    else
      code = elementwise_dense(r, in, a_shape, part, (char*)o + at * (int64_t)os, len);
  }
  free(fill[0]);
  free(fill[1]);
  return code;
}

#define COMPARE_LOOP(T, GET)                                                               \
  do {                                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                      \
      switch (dir) {                                                                       \
        case CMP_EQ: o[i] = GET(LD(T, a, i)) == GET(LD(T, b, i)); break;                   \
        case CMP_NE: o[i] = GET(LD(T, a, i)) != GET(LD(T, b, i)); break;                   \
        case CMP_GE: o[i] = GET(LD(T, a, i)) >= GET(LD(T, b, i)); break;                   \
        case CMP_GT: o[i] = GET(LD(T, a, i)) > GET(LD(T, b, i)); break;                    \
        case CMP_LE: o[i] = GET(LD(T, a, i)) <= GET(LD(T, b, i)); break;                   \
        default: o[i] = GET(LD(T, a, i)) < GET(LD(T, b, i)); break;                        \
      }                                                                                    \
    }                                                                                      \
  } while (0)
#define SAME(x) (x)

/* A float's bits as an integer key whose signed order is the total order: negative floats
 * (sign bit set) have their other bits flipped, so more negative sorts lower. */
static int64_t total_key(prog_dtype t, const void* p, int64_t i) {
  int64_t x;
  switch (t) {
    case PROG_F64: x = LD(int64_t, p, i); break;
    case PROG_F32: x = LD(int32_t, p, i); break;
    case PROG_BF16: case PROG_F16: x = LD(int16_t, p, i); break;
    default: x = ((const int8_t*)p)[i]; break;  /* the f8 types */
  }
  return x < 0 ? x ^ INT64_MAX : x;
}

static void compare(prog_dtype t, int dir, const void* a, const void* b, uint8_t* o,
                    int64_t n) {
  if (dir & CMP_TOTAL) {
    dir &= ~CMP_TOTAL;
    for (int64_t i = 0; i < n; i++) {
      int64_t x = total_key(t, a, i), y = total_key(t, b, i);
      o[i] = dir == CMP_EQ ? x == y : dir == CMP_NE ? x != y : dir == CMP_GE ? x >= y
           : dir == CMP_GT ? x > y : dir == CMP_LE ? x <= y : x < y;
    }
    return;
  }
  switch (t) {
    case PROG_F32: COMPARE_LOOP(float, SAME); break;
    case PROG_F64: COMPARE_LOOP(double, SAME); break;
    case PROG_S8: COMPARE_LOOP(int8_t, SAME); break;
    case PROG_S16: COMPARE_LOOP(int16_t, SAME); break;
    case PROG_S32: COMPARE_LOOP(int32_t, SAME); break;
    case PROG_S64: COMPARE_LOOP(int64_t, SAME); break;
    case PROG_U8: case PROG_PRED: COMPARE_LOOP(uint8_t, SAME); break;
    case PROG_U16: COMPARE_LOOP(uint16_t, SAME); break;
    case PROG_U32: COMPARE_LOOP(uint32_t, SAME); break;
    case PROG_U64: COMPARE_LOOP(uint64_t, SAME); break;
    case PROG_BF16: COMPARE_LOOP(uint16_t, rt_bf16_to_f32); break;
    case PROG_F16: COMPARE_LOOP(uint16_t, rt_f16_to_f32); break;
    case PROG_C64: case PROG_C128: rt_complex_compare(t, dir, a, b, o, n); break;
    case PROG_F8E4M3FN: case PROG_F8E5M2: {  /* as their values: NaN compares unordered */
      for (int64_t i = 0; i < n; i++) {
        double x = rt_get_f(t, a, i), y = rt_get_f(t, b, i);
        o[i] = dir == CMP_EQ ? x == y : dir == CMP_NE ? x != y : dir == CMP_GE ? x >= y
             : dir == CMP_GT ? x > y : dir == CMP_LE ? x <= y : x < y;
      }
      break;
    }
    case PROG_S4: case PROG_U4: {
      for (int64_t i = 0; i < n; i++) {
        int64_t x = rt_get_i(t, a, i), y = rt_get_i(t, b, i);
        o[i] = dir == CMP_EQ ? x == y : dir == CMP_NE ? x != y : dir == CMP_GE ? x >= y
             : dir == CMP_GT ? x > y : dir == CMP_LE ? x <= y : x < y;
      }
      break;
    }
    default: break;
  }
}

/* ---- data movement ---------------------------------------------------------------------- */

static void broadcast(const prog_insn* in, const prog_shape* a, const void* src, void* o) {
  int64_t a_st[PROG_MAX_RANK], o_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK] = {0};
  rt_strides(a, a_st);
  rt_strides(&in->shape, o_st);
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != 1) s_st[in->p[0][d]] = a_st[d];
  rt_strided_copy(prog_dtype_size(a->dtype), in->shape.rank, in->shape.dims, o, o_st, src, s_st);
}

static void transpose(const prog_insn* in, const prog_shape* a, const void* src, void* o) {
  int64_t a_st[PROG_MAX_RANK], o_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  rt_strides(a, a_st);
  rt_strides(&in->shape, o_st);
  for (int d = 0; d < a->rank; d++) s_st[d] = a_st[in->p[0][d]];
  rt_strided_copy(prog_dtype_size(a->dtype), a->rank, in->shape.dims, o, o_st, src, s_st);
}

static void slice(const prog_insn* in, const prog_shape* a, const char* src, void* o) {
  int64_t a_st[PROG_MAX_RANK], o_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  size_t es = prog_dtype_size(a->dtype);
  rt_strides(a, a_st);
  rt_strides(&in->shape, o_st);
  for (int d = 0; d < a->rank; d++) {
    src += (int64_t)es * in->p[0][d] * a_st[d];
    s_st[d] = a_st[d] * in->p[2][d];
  }
  rt_strided_copy(es, a->rank, in->shape.dims, o, o_st, src, s_st);
}

static void reverse(const prog_insn* in, const char* src, void* o) {
  int64_t st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  size_t es = prog_dtype_size(in->shape.dtype);
  rt_strides(&in->shape, st);
  memcpy(s_st, st, sizeof st);
  if (prog_shape_elements(&in->shape) == 0) return;
  for (int k = 0; k < in->np[0]; k++) {
    int d = (int)in->p[0][k];
    src += (int64_t)es * (in->shape.dims[d] - 1) * st[d];
    s_st[d] = -st[d];
  }
  rt_strided_copy(es, in->shape.rank, in->shape.dims, o, st, src, s_st);
}

static void concatenate(const prog_insn* in, const prog_shape* values, void* const* args,
                        char* o) {
  int64_t o_st[PROG_MAX_RANK], a_st[PROG_MAX_RANK];
  size_t es = prog_dtype_size(in->shape.dtype);
  rt_strides(&in->shape, o_st);
  int dim = in->iarg;
  for (int k = 0; k < in->num_in; k++) {
    const prog_shape* a = &values[in->in[k]];
    rt_strides(a, a_st);
    rt_strided_copy(es, a->rank, a->dims, o, o_st, args[k], a_st);
    o += (int64_t)es * a->dims[dim] * o_st[dim];
  }
}

static void iota(const prog_insn* in, void* o) {
  int64_t st[PROG_MAX_RANK];
  rt_strides(&in->shape, st);
  int64_t n = prog_shape_elements(&in->shape), size = in->shape.dims[in->iarg];
  for (int64_t i = 0; i < n; i++) {
    int64_t v = (i / st[in->iarg]) % size;
    rt_put(in->shape.dtype, o, i, (double)v, v, false);
  }
}

static void select_(const prog_insn* in, const prog_shape* p, void* const* args, char* o) {
  int64_t n = prog_shape_elements(&in->shape);
  size_t es = prog_dtype_size(in->shape.dtype);
  const uint8_t* pred = args[0];
  const char *t = args[1], *f = args[2];
  if (p->rank == 0 && in->shape.rank > 0) {
    memcpy(o, pred[0] ? t : f, (size_t)n * es);
    return;
  }
  if (es == 4) {
    for (int64_t i = 0; i < n; i++) ST(uint32_t, o, i, pred[i] ? LD(uint32_t, t, i) : LD(uint32_t, f, i));
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(o + i * (int64_t)es, (pred[i] ? t : f) + i * (int64_t)es, es);
}

static void clamp(const prog_insn* in, const prog_shape* values, void* const* args, void* o) {
  int64_t n = prog_shape_elements(&in->shape);
  bool lo_scalar = values[in->in[0]].rank == 0, hi_scalar = values[in->in[2]].rank == 0;
  prog_dtype t = in->shape.dtype;
  for (int64_t i = 0; i < n; i++) {
    int64_t li = lo_scalar ? 0 : i, hi = hi_scalar ? 0 : i;
    if (t == PROG_U64) {
      uint64_t x = LD(uint64_t, args[1], i), lo = LD(uint64_t, args[0], li),
               h = LD(uint64_t, args[2], hi);
      x = x < lo ? lo : x;
      ST(uint64_t, o, i, x > h ? h : x);
    } else if (!rt_is_float(t)) {
      int64_t x = rt_get_i(t, args[1], i), lo = rt_get_i(t, args[0], li), h = rt_get_i(t, args[2], hi);
      x = x < lo ? lo : x;
      rt_put(t, o, i, 0, x > h ? h : x, false);
    } else {
      double x = rt_get_f(t, args[1], i), lo = rt_get_f(t, args[0], li), h = rt_get_f(t, args[2], hi);
      x = FMINN(FMAXN(x, lo), h);
      rt_put(t, o, i, x, 0, true);
    }
  }
}

/* ---- dot_general ------------------------------------------------------------------------ */

/* Copies `a` so its dimensions come in the order `order` (a permutation), contiguously. */
static void gather_dims(const prog_shape* a, const void* src, const int* order, void* dst) {
  prog_shape t = *a;
  int64_t a_st[PROG_MAX_RANK], t_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  rt_strides(a, a_st);
  for (int d = 0; d < a->rank; d++) {
    t.dims[d] = a->dims[order[d]];
    s_st[d] = a_st[order[d]];
  }
  rt_strides(&t, t_st);
  rt_strided_copy(prog_dtype_size(a->dtype), a->rank, t.dims, dst, t_st, src, s_st);
}

/* The order batch, free, contracting (lhs) or batch, contracting, free (rhs), and the sizes. */
static void dot_layout(const prog_shape* s, const int64_t* batch, int nb, const int64_t* contract,
                       int nc, bool contract_first, int* order, int64_t* free_size) {
  int k = 0;
  bool used[PROG_MAX_RANK] = {false};
  for (int r = 0; r < nb; r++) { order[k++] = (int)batch[r]; used[batch[r]] = true; }
  for (int r = 0; r < nc; r++) used[contract[r]] = true;
  int free_at = contract_first ? nb + nc : nb, contract_at = contract_first ? nb : s->rank - nc;
  int f = free_at;
  *free_size = 1;
  for (int d = 0; d < s->rank; d++)
    if (!used[d]) { order[f++] = d; *free_size *= s->dims[d]; }
  for (int r = 0; r < nc; r++) order[contract_at + r] = (int)contract[r];
}

/* The type the products accumulate in: f32 for f32 and narrower floats, f64, or a wrapping
 * 64-bit integer (its low bits are those of any narrower wrapping accumulation). */
typedef enum { WORK_F32, WORK_F64, WORK_I64 } work_type;

static work_type dot_work(prog_dtype a, prog_dtype b, prog_dtype out) {
  if (a == PROG_F64 || b == PROG_F64 || out == PROG_F64) return WORK_F64;
  if (rt_is_float(a) || rt_is_float(b) || rt_is_float(out)) return WORK_F32;
  return WORK_I64;
}

/* The operand, permuted to `order`, in the work type. */
static void* dot_operand(const prog_shape* s, const void* src, const int* order, work_type w,
                         int64_t n) {
  size_t ws = w == WORK_F32 ? 4 : 8;
  bool native = (w == WORK_F32 && s->dtype == PROG_F32) || (w == WORK_F64 && s->dtype == PROG_F64) ||
                (w == WORK_I64 && s->dtype == PROG_S64);
  void* out = rt_alloc((size_t)n * ws + 8);
  if (out == NULL) return NULL;
  if (native) {
    gather_dims(s, src, order, out);
    return out;
  }
  void* tmp = rt_alloc((size_t)n * prog_dtype_size(s->dtype) + 8);
  if (tmp == NULL) { rt_free(out); return NULL; }
  gather_dims(s, src, order, tmp);
  /* out is rt_alloc's (malloc's alignment): typed stores are safe on the work copies */
  for (int64_t i = 0; i < n; i++) {
    if (w == WORK_F32) ((float*)out)[i] = (float)rt_get_f(s->dtype, tmp, i);
    else if (w == WORK_F64) ((double*)out)[i] = rt_get_f(s->dtype, tmp, i);
    else ((int64_t*)out)[i] = rt_get_i(s->dtype, tmp, i);
  }
  rt_free(tmp);
  return out;
}

/* The operand permuted to `order`, as complex numbers of type ct. */
static void* complex_operand(const prog_shape* s, const void* src, const int* order, prog_dtype ct,
                             int64_t n) {
  size_t cs = prog_dtype_size(ct);
  void* out = rt_alloc((size_t)n * cs + 16);
  void* tmp = rt_alloc((size_t)n * prog_dtype_size(s->dtype) + 16);
  if (out == NULL || tmp == NULL) { rt_free(out); rt_free(tmp); return NULL; }
  gather_dims(s, src, order, tmp);
  prog_shape flat = {s->dtype, 1, {n}}, to = {ct, 1, {n}};
  convert(&flat, tmp, &to, out);
  rt_free(tmp);
  return out;
}

static int dot_complex(run_ctx* r, const prog_insn* in, const prog_shape* as, const prog_shape* bs,
                       const void* a_src, const void* b_src, void* o, const int* ao, const int* bo,
                       int64_t M, int64_t N, int64_t K, int64_t nbatch) {
  prog_dtype ct = in->shape.dtype;
  if (!rt_is_complex(ct))
    return rt_fail(r, PROG_UNIMPLEMENTED, "a complex product with a real result", in->vhlo_name);
  size_t cs = prog_dtype_size(ct);
  void* a = complex_operand(as, a_src, ao, ct, nbatch * M * K);
  void* b = complex_operand(bs, b_src, bo, ct, nbatch * K * N);
  if (a == NULL || b == NULL) {
    rt_free(a); rt_free(b);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  memset(o, 0, (size_t)(nbatch * M * N) * cs);
  for (int64_t q = 0; q < nbatch; q++)
    rt_matmul_complex(ct, (const char*)a + (size_t)(q * M * K) * cs, (const char*)b + (size_t)(q * K * N) * cs,
                      (char*)o + (size_t)(q * M * N) * cs, M, N, K);
  rt_free(a);
  rt_free(b);
  return PROG_OK;
}

/* The element stride of dimensions dims[0..n) of s read as one dimension (in that order), or
 * -1 when they are not evenly spaced; dimensions of size 1 do not count, and a group of none is
 * one element (stride 0). */
static int64_t group_stride(const prog_shape* s, const int64_t* st, const int* dims, int n) {
  int64_t stride = 0, expect = -1;
  for (int q = n - 1; q >= 0; q--) {
    int d = dims[q];
    if (s->dims[d] == 1) continue;
    if (expect >= 0 && st[d] != expect) return -1;
    if (expect < 0) stride = st[d];
    expect = st[d] * s->dims[d];
  }
  return stride;
}

/* Strides of an operand's batch, rows and columns in place (lhs: batch, free, contracting;
 * rhs: batch, contracting, free, as dot_layout orders them); false when a group is not evenly
 * spaced and the operand must be copied into that order first. */
static bool dot_strides(const prog_shape* s, const int* order, int nb, int nc, bool contract_first,
                        int64_t* batch, int64_t* rows, int64_t* cols) {
  int64_t st[PROG_MAX_RANK];
  rt_strides(s, st);
  int nf = s->rank - nb - nc;
  int n_rows = contract_first ? nc : nf, n_cols = contract_first ? nf : nc;
  *batch = group_stride(s, st, order, nb);
  *rows = group_stride(s, st, order + nb, n_rows);
  *cols = group_stride(s, st, order + nb + n_rows, n_cols);
  return *batch >= 0 && *rows >= 0 && *cols >= 0;
}

static int dot(run_ctx* r, const prog_insn* in, const prog_shape* as, const prog_shape* bs,
               const void* a_src, const void* b_src, void* o) {
  int ao[PROG_MAX_RANK], bo[PROG_MAX_RANK];
  int64_t M, N, K = 1, nbatch = 1;
  dot_layout(as, in->p[0], in->np[0], in->p[2], in->np[2], false, ao, &M);
  dot_layout(bs, in->p[1], in->np[1], in->p[3], in->np[3], true, bo, &N);
  for (int k = 0; k < in->np[0]; k++) nbatch *= as->dims[in->p[0][k]];
  for (int k = 0; k < in->np[2]; k++) K *= as->dims[in->p[2][k]];
  prog_dtype ot = in->shape.dtype;
  if (rt_is_complex(ot) || rt_is_complex(as->dtype) || rt_is_complex(bs->dtype))
    return dot_complex(r, in, as, bs, a_src, b_src, o, ao, bo, M, N, K, nbatch);
  work_type w = dot_work(as->dtype, bs->dtype, ot);
  size_t ws = w == WORK_F32 ? 4 : 8;
  /* the matmul kernels take typed rows: they write the output in place only when it is at its
   * type's alignment (always, for the interpreter's own buffers), else into a temporary */
  bool native_out = ((w == WORK_F32 && ot == PROG_F32) || (w == WORK_F64 && ot == PROG_F64) ||
                     (w == WORK_I64 && ot == PROG_S64)) && (uintptr_t)o % ws == 0;
  prog_dtype wt = w == WORK_F32 ? PROG_F32 : w == WORK_F64 ? PROG_F64 : PROG_S64;
  /* operands already in the work type are read in place when their dimension groups are evenly
   * spaced (a transposed matrix, a batch of them); the rest are copied in order first */
  int nb = in->np[0], nc = in->np[2];
  int64_t a_bs, a_rs, a_cs, b_bs, b_rs, b_cs;
  bool a_in_place = w != WORK_I64 && as->dtype == wt &&
                    dot_strides(as, ao, nb, nc, false, &a_bs, &a_rs, &a_cs);
  bool b_in_place = w != WORK_I64 && bs->dtype == wt &&
                    dot_strides(bs, bo, nb, nc, true, &b_bs, &b_rs, &b_cs);
  void* a = a_in_place ? NULL : dot_operand(as, a_src, ao, w, nbatch * M * K);
  void* b = b_in_place ? NULL : dot_operand(bs, b_src, bo, w, nbatch * K * N);
  void* c = native_out ? o : rt_alloc((size_t)(nbatch * M * N) * ws + 8);
  if ((!a_in_place && a == NULL) || (!b_in_place && b == NULL) || c == NULL) {
    rt_free(a); rt_free(b); if (!native_out) rt_free(c);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  if (!a_in_place) { a_bs = M * K; a_rs = K; a_cs = 1; }
  if (!b_in_place) { b_bs = K * N; b_rs = N; b_cs = 1; }
  const char* A = a_in_place ? a_src : a;
  const char* B = b_in_place ? b_src : b;
  memset(c, 0, (size_t)(nbatch * M * N) * ws);
  int code = PROG_OK;
  bool empty = M == 0 || N == 0 || K == 0;  /* C is zeros; an empty operand may be NULL */
  for (int64_t q = 0; q < nbatch && code == PROG_OK && !empty; q++) {
    const char *Aq = A + (size_t)(q * a_bs) * ws, *Bq = B + (size_t)(q * b_bs) * ws;
    int rc = 0;
    if (w == WORK_F32)
      rc = rt_matmul_f32(Aq, a_rs, a_cs, Bq, b_rs, b_cs, (float*)c + q * M * N, M, N, K);
    else if (w == WORK_F64)
      rc = rt_matmul_f64(Aq, a_rs, a_cs, Bq, b_rs, b_cs, (double*)c + q * M * N, M, N, K);
    else {
      const uint64_t *A64 = (const uint64_t*)Aq, *B64 = (const uint64_t*)Bq;
      uint64_t* C = (uint64_t*)c + q * M * N;
      for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
          for (int64_t j = 0; j < N; j++) C[i * N + j] += A64[i * K + k] * B64[k * N + j];
    }
    if (rc != 0) code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  if (!native_out) {
    int64_t n = nbatch * M * N;
    for (int64_t i = 0; i < n && code == PROG_OK; i++) {
      if (w == WORK_I64) rt_put(ot, o, i, 0, ot == PROG_PRED ? ((int64_t*)c)[i] != 0 : ((int64_t*)c)[i], false);
      else rt_put(ot, o, i, w == WORK_F32 ? ((float*)c)[i] : ((double*)c)[i], 0, true);
    }
    rt_free(c);
  }
  rt_free(a);
  rt_free(b);
  return code;
}

/* ---- reduce with a recognized body ------------------------------------------------------ */

/* A float reduction folds each result's elements in the order of the reduced dimensions, one
 * at a time, into a double (ACC).  Over src laid out [len, outer] (cols) the outer
 * accumulators advance together, a row of src at a time (the loop vectorises); over
 * [outer, len] four rows advance together, so four dependency chains overlap.  Every result
 * sees the same operations in the same order either way. */
#define REDUCE_COLS(T, ACC, OP)                                                            \
  for (int64_t i = 0; i < len; i++) {                                                      \
    const char* row = (const char*)src + i * outer * (int64_t)sizeof(T);                   \
    for (int64_t q = 0; q < outer; q++) {                                                  \
      ACC v = LD(T, row, q);                                                               \
      acc[q] = OP(acc[q], v);                                                              \
    }                                                                                      \
  }
#define REDUCE_ROWS4(T, ACC, OP)                                                           \
  for (int64_t i = 0; i < len; i++) {                                                      \
    ACC v0 = LD(T, r0, i), v1 = LD(T, r0, len + i), v2 = LD(T, r0, 2 * len + i),           \
        v3 = LD(T, r0, 3 * len + i);                                                       \
    a0 = OP(a0, v0);                                                                       \
    a1 = OP(a1, v1);                                                                       \
    a2 = OP(a2, v2);                                                                       \
    a3 = OP(a3, v3);                                                                       \
  }
#define RED_ADD_OP(x, y) ((x) + (y))
#define RED_MUL_OP(x, y) ((x) * (y))
#define RED_MAX_OP(x, y) FMAXN(x, y)
#define RED_MIN_OP(x, y) FMINN(x, y)
#define REDUCE_FLOAT(T, ACC)                                                               \
  do {                                                                                     \
    T init = LD(T, init_p, 0);                                                             \
    if (cols) {                                                                            \
      ACC* acc = accbuf;                                                                   \
      for (int64_t q = 0; q < outer; q++) acc[q] = init;                                   \
      switch (kind) {                                                                      \
        case RED_ADD: REDUCE_COLS(T, ACC, RED_ADD_OP) break;                               \
        case RED_MUL: REDUCE_COLS(T, ACC, RED_MUL_OP) break;                               \
        case RED_MAX: REDUCE_COLS(T, ACC, RED_MAX_OP) break;                               \
        case RED_MIN: REDUCE_COLS(T, ACC, RED_MIN_OP) break;                               \
        default: break;                                                                    \
      }                                                                                    \
      for (int64_t q = 0; q < outer; q++) ST(T, o, q, (T)acc[q]);                          \
      break;                                                                               \
    }                                                                                      \
    int64_t q0 = 0;                                                                        \
    for (; q0 + 4 <= outer; q0 += 4) {                                                     \
      const char* r0 = (const char*)src + q0 * len * (int64_t)sizeof(T);                   \
      ACC a0 = init, a1 = init, a2 = init, a3 = init;                                      \
      switch (kind) {                                                                      \
        case RED_ADD: REDUCE_ROWS4(T, ACC, RED_ADD_OP) break;                              \
        case RED_MUL: REDUCE_ROWS4(T, ACC, RED_MUL_OP) break;                              \
        case RED_MAX: REDUCE_ROWS4(T, ACC, RED_MAX_OP) break;                              \
        case RED_MIN: REDUCE_ROWS4(T, ACC, RED_MIN_OP) break;                              \
        default: break;                                                                    \
      }                                                                                    \
      ST(T, o, q0, (T)a0);                                                                 \
      ST(T, o, q0 + 1, (T)a1);                                                             \
      ST(T, o, q0 + 2, (T)a2);                                                             \
      ST(T, o, q0 + 3, (T)a3);                                                             \
    }                                                                                      \
    for (int64_t q = q0; q < outer; q++) {                                                 \
      const char* row = (const char*)src + q * len * (int64_t)sizeof(T);                   \
      ACC acc = init;                                                                      \
      switch (kind) {                                                                      \
        case RED_ADD: for (int64_t i = 0; i < len; i++) acc += LD(T, row, i); break;       \
        case RED_MUL: for (int64_t i = 0; i < len; i++) acc *= LD(T, row, i); break;       \
        case RED_MAX: for (int64_t i = 0; i < len; i++) acc = FMAXN(acc, (ACC)LD(T, row, i)); break; \
        case RED_MIN: for (int64_t i = 0; i < len; i++) acc = FMINN(acc, (ACC)LD(T, row, i)); break; \
        default: break;                                                                    \
      }                                                                                    \
      ST(T, o, q, (T)acc);                                                                 \
    }                                                                                      \
  } while (0)

#define REDUCE_INT(T, W)                                                                   \
  do {                                                                                     \
    for (int64_t q = 0; q < outer; q++) {                                                  \
      const char* row = (const char*)src + q * len * (int64_t)sizeof(T);                   \
      T acc = LD(T, init_p, 0);                                                            \
      for (int64_t i = 0; i < len; i++) {                                                  \
        switch (kind) {                                                                    \
          case RED_ADD: acc = (T)((W)acc + (W)LD(T, row, i)); break;                       \
          case RED_MUL: acc = (T)((W)acc * (W)LD(T, row, i)); break;                       \
          case RED_MAX: acc = acc > LD(T, row, i) ? acc : LD(T, row, i); break;            \
          case RED_MIN: acc = acc < LD(T, row, i) ? acc : LD(T, row, i); break;            \
          case RED_AND: acc = acc & LD(T, row, i); break;                                  \
          case RED_XOR: acc = acc ^ LD(T, row, i); break;                                  \
          default: acc = acc | LD(T, row, i); break;                                       \
        }                                                                                  \
      }                                                                                    \
      ST(T, o, q, acc);                                                                    \
    }                                                                                      \
  } while (0)

/* Moves the reduced dimensions last (a copy, unless they already are), then folds each row.
 * f32 sums accumulate in double: the result is at least as accurate as XLA's. */
static int reduce(run_ctx* r, const prog_insn* in, const prog_shape* a, const void* a_src,
                  const void* init_p, void* o) {
  int order[PROG_MAX_RANK], k = 0;
  bool reduced[PROG_MAX_RANK] = {false};
  for (int q = 0; q < in->np[0]; q++) reduced[in->p[0][q]] = true;
  for (int d = 0; d < a->rank; d++) if (!reduced[d]) order[k++] = d;
  bool in_place = true;
  for (int q = 0; q < in->np[0]; q++) order[k++] = (int)in->p[0][q];
  for (int d = 0; d < a->rank; d++) in_place &= order[d] == d;
  int64_t len = 1, outer = prog_shape_elements(&in->shape);
  for (int q = 0; q < in->np[0]; q++) len *= a->dims[in->p[0][q]];
  size_t es = prog_dtype_size(a->dtype);
  int kind = in->iarg;
  /* f32/f64 min, max, sum and product over dimensions that are not the trailing ones: src is
   * read (or gathered) reduced dimensions first, [len, outer], and folded column-wise */
  bool cols = !in_place && (a->dtype == PROG_F32 || a->dtype == PROG_F64) &&
              (kind == RED_ADD || kind == RED_MUL || kind == RED_MAX || kind == RED_MIN);
  bool cols_in_place = true;
  if (cols) {
    k = 0;
    for (int q = 0; q < in->np[0]; q++) order[k++] = (int)in->p[0][q];
    for (int d = 0; d < a->rank; d++) if (!reduced[d]) order[k++] = d;
    for (int d = 0; d < a->rank; d++) cols_in_place &= order[d] == d;
  }
  void* tmp = NULL;
  double* accbuf = NULL;
  const void* src = a_src;
  if (cols) {
    accbuf = rt_alloc((size_t)(outer > 0 ? outer : 1) * sizeof(double));
    if (accbuf == NULL) return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  if (!in_place && !(cols && cols_in_place)) {
    tmp = rt_alloc((size_t)prog_shape_elements(a) * es + 8);
    if (tmp == NULL) {
      rt_free(accbuf);
      return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
    }
    gather_dims(a, a_src, order, tmp);
    src = tmp;
  }
  switch (a->dtype) {
    case PROG_F32: REDUCE_FLOAT(float, double); break;
    case PROG_F64: REDUCE_FLOAT(double, double); break;
    case PROG_S8: REDUCE_INT(int8_t, uint32_t); break;
    case PROG_S16: REDUCE_INT(int16_t, uint32_t); break;
    case PROG_S32: REDUCE_INT(int32_t, uint32_t); break;
    case PROG_S64: REDUCE_INT(int64_t, uint64_t); break;
    case PROG_U8: REDUCE_INT(uint8_t, uint32_t); break;
    case PROG_U16: REDUCE_INT(uint16_t, uint32_t); break;
    case PROG_U32: REDUCE_INT(uint32_t, uint32_t); break;
    case PROG_U64: REDUCE_INT(uint64_t, uint64_t); break;
    case PROG_PRED: {
      const uint8_t* x = src;
      uint8_t* y = o;
      for (int64_t q = 0; q < outer; q++) {
        uint8_t acc = *(const uint8_t*)init_p != 0;
        for (int64_t i = 0; i < len; i++)
          acc = (kind == RED_ADD || kind == RED_OR || kind == RED_MAX) ? (acc | x[q * len + i])
              : kind == RED_XOR ? (acc ^ x[q * len + i]) : (acc & x[q * len + i]);
        y[q] = acc;
      }
      break;
    }
    case PROG_C64:
    case PROG_C128: {
      bool c64 = a->dtype == PROG_C64;
      for (int64_t q = 0; q < outer; q++) {
        double complex acc = c64 ? ld_c64(init_p, 0) : ld_c128(init_p, 0);
        for (int64_t i = 0; i < len; i++) {
          double complex x = c64 ? ld_c64(src, q * len + i) : ld_c128(src, q * len + i);
          acc = kind == RED_ADD ? acc + x : acc * x;
        }
        if (c64) st_c64(o, q, (float complex)acc); else st_c128(o, q, acc);
      }
      break;
    }
    case PROG_BF16:
    case PROG_F16: {
      bool bf = a->dtype == PROG_BF16;
      for (int64_t q = 0; q < outer; q++) {
        uint16_t h = LD(uint16_t, init_p, 0);
        double acc = bf ? rt_bf16_to_f32(h) : rt_f16_to_f32(h);
        for (int64_t i = 0; i < len; i++) {
          uint16_t xh = LD(uint16_t, src, q * len + i);
          double v = bf ? rt_bf16_to_f32(xh) : rt_f16_to_f32(xh);
          acc = kind == RED_ADD ? acc + v : kind == RED_MUL ? acc * v
              : kind == RED_MAX ? FMAXN(acc, v) : FMINN(acc, v);
        }
        ST(uint16_t, o, q, bf ? rt_f32_to_bf16((float)acc) : rt_f32_to_f16((float)acc));
      }
      break;
    }
    default: break;
  }
  rt_free(tmp);
  rt_free(accbuf);
  return PROG_OK;
}

/* ---- the instruction loop --------------------------------------------------------------- */

static int run_insn(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
                    void** vals, int depth) {
  void* args[64];
  void** argv = in->num_in <= 64 ? args : malloc(sizeof(void*) * (size_t)in->num_in);
  if (argv == NULL) return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  for (int k = 0; k < in->num_in; k++) argv[k] = vals[in->in[k]];
  void* o = vals[in->out];
  const prog_shape* a = in->num_in > 0 ? &f->values[in->in[0]] : NULL;
  int code = PROG_OK;
  switch (in->op) {
    case OP_CONSTANT: memcpy(o, in->data, rt_bytes(&in->shape)); break;
    case OP_IOTA: iota(in, o); break;
    case OP_CONVERT: convert(a, argv[0], &in->shape, o); break;
    case OP_COMPARE:
      if (in->scalar_in) code = elementwise(r, in, a, argv, o);
      else compare(a->dtype, in->iarg, argv[0], argv[1], o, prog_shape_elements(&in->shape));
      break;
    case OP_SELECT: select_(in, a, argv, o); break;
    case OP_CLAMP: clamp(in, f->values, argv, o); break;
    case OP_BROADCAST: broadcast(in, a, argv[0], o); break;
    case OP_RESHAPE: if (o != argv[0]) memcpy(o, argv[0], rt_bytes(&in->shape)); break;
    case OP_TRANSPOSE: transpose(in, a, argv[0], o); break;
    case OP_SLICE: slice(in, a, argv[0], o); break;
    case OP_CONCAT: concatenate(in, f->values, argv, o); break;
    case OP_REVERSE: reverse(in, argv[0], o); break;
    case OP_DOT: code = dot(r, in, a, &f->values[in->in[1]], argv[0], argv[1], o); break;
    case OP_REDUCE: code = reduce(r, in, a, argv[0], argv[1], o); break;
    case OP_IDENTITY:  /* optimization_barrier: its results are its operands */
      for (int k = 0; k < in->num_out; k++)
        if (vals[in->out + k] != argv[k])
          memcpy(vals[in->out + k], argv[k], rt_bytes(&f->values[in->out + k]));
      break;
    case OP_CALL:
      code = rt_run_func(r, p, &p->funcs[in->iarg], NULL, (const void* const*)argv,
                         vals + in->out, depth + 1);
      break;
    case OP_WHILE: case OP_CASE: case OP_IF: code = rt_control(r, p, f, in, vals, depth); break;
    case OP_SORT: code = rt_sort(r, p, f, in, vals, depth); break;
    case OP_PAD: case OP_DYNAMIC_SLICE: case OP_DYNAMIC_UPDATE_SLICE: case OP_GATHER:
    case OP_SCATTER:
      code = rt_index(r, p, f, in, vals, depth);
      break;
    case OP_REDUCE_GENERIC: case OP_REDUCE_WINDOW: case OP_CONVOLUTION:
      code = rt_window(r, p, f, in, vals, depth);
      break;
    case OP_IS_FINITE: case OP_REDUCE_PRECISION: case OP_BITCAST_CONVERT:
      code = rt_misc(r, in, a, argv, o);
      break;
    case OP_RNG_BIT_GENERATOR: code = rt_rng(r, f, in, argv, vals); break;
    case OP_LINALG: code = rt_linalg(r, f, in, argv, vals); break;
    case OP_TRIANGULAR_SOLVE: code = rt_triangular_solve(r, f, in, argv, vals); break;
    case OP_CHOLESKY: code = rt_cholesky(r, f, in, argv, vals); break;
    case OP_FFT: code = rt_fft(r, f, in, argv, vals); break;
    default: code = elementwise(r, in, a, argv, o); break;
  }
  if (argv != args) free(argv);
  return code;
}

static bool is_arg(const prog_func* f, int id) {
  return id >= f->first_arg && id < f->first_arg + f->num_args;
}

/* The operand (0 or 1) of elementwise instruction `in` (instruction k of f) whose buffer its
 * result may take, or -1: a real or integer op whose result has the operand's type and bytes,
 * the operand a buffer this function owns that nothing reads after k (nor the instruction
 * again, as its other operand or a region's capture).  The kernels take o == a or o == b. */
static int ew_reusable(const prog_func* f, const prog_insn* in, const bool* owned, int k) {
  int arity = prog_ew_arity(in->op);
  if (arity == 0 || in->num_cap > 0 || rt_is_complex(in->shape.dtype)) return -1;
  for (int q = 0; q < in->num_in && q < arity; q++) {
    int id = in->in[q];
    if (!owned[id] || f->last_use[id] != k || (in->scalar_in & (1u << q))) continue;
    if (f->values[id].dtype != in->shape.dtype || rt_bytes(&f->values[id]) != rt_bytes(&in->shape))
      continue;
    if (in->num_in == 2 && in->in[1 - q] == id) continue;
    return q;
  }
  return -1;
}

/* Values live in `vals`; `owned` says which buffers the loop allocated (arguments and a
 * region's enclosing values are borrowed, and a value the function returns is written straight
 * into its output buffer). */
int rt_run_func(run_ctx* r, const prog_program* p, const prog_func* f, void* const* parent_vals,
                const void* const* inputs, void* const* outputs, int depth) {
  if (depth > 64) return rt_fail(r, PROG_INTERNAL, "call depth exceeded", f->name);
  size_t nv = (size_t)(f->num_values > 0 ? f->num_values : 1);
  void** vals = calloc(nv, sizeof(void*));
  bool* owned = calloc(nv, sizeof(bool));
  int* direct = calloc(nv, sizeof(int));  /* 1 + index of the output a value is written to */
  if (vals == NULL || owned == NULL || direct == NULL) {
    free(vals); free(owned); free(direct);
    return rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", f->name);
  }
  for (int k = 0; k < f->base; k++) vals[k] = parent_vals[k];
  for (int k = 0; k < f->num_args; k++) vals[f->first_arg + k] = (void*)inputs[k];
  for (int k = 0; k < f->num_results; k++) {
    int id = f->results[k];
    if (id >= f->base && !is_arg(f, id) && direct[id] == 0 && outputs[k] != NULL)
      direct[id] = k + 1;
  }
  int code = PROG_OK;
  for (int k = 0; k < f->num_insns && code == PROG_OK; k++) {
    const prog_insn* in = &f->insns[k];
    bool live = false;  /* an instruction nobody reads (e.g. a folded broadcast) is skipped */
    for (int q = 0; q < in->num_out; q++) live |= f->last_use[in->out + q] >= 0;
    if (live) {
      for (int q = 0; q < in->num_out && code == PROG_OK; q++) {
        int id = in->out + q;
        if (direct[id]) {
          vals[id] = outputs[direct[id] - 1];
        } else if (in->num_out == 1 && ew_reusable(f, in, owned, k) >= 0) {
          /* an elementwise op whose operand dies here writes over that operand (each element
           * is read before it is written): no fresh buffer, and the result lands in lines the
           * operand just brought into cache */
          int src = in->in[ew_reusable(f, in, owned, k)];
          vals[id] = vals[src];
          owned[id] = true;
          owned[src] = false;
        } else if (in->op == OP_RESHAPE && owned[in->in[0]] && f->last_use[in->in[0]] == k) {
          /* a reshape is its operand's bytes: when nothing reads the operand after it, the
           * buffer changes hands instead of being copied (run_insn then sees src == dst) */
          vals[id] = vals[in->in[0]];
          owned[id] = true;
          owned[in->in[0]] = false;
        } else {
          vals[id] = rt_alloc(rt_bytes(&f->values[id]) + 8);
          owned[id] = vals[id] != NULL;
          if (vals[id] == NULL) code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
        }
      }
      r->owned = in->op == OP_WHILE ? owned : NULL;
      if (code == PROG_OK) code = run_insn(r, p, f, in, vals, depth);
      r->owned = NULL;
    }
    /* free what no later instruction reads */
    for (int q = 0; q < in->num_in + in->num_cap; q++) {
      int id = q < in->num_in ? in->in[q] : in->cap[q - in->num_in];
      if (owned[id] && f->last_use[id] == k) {
        rt_free(vals[id]);
        vals[id] = NULL;
        owned[id] = false;
      }
    }
    for (int q = 0; q < in->num_out; q++) {
      int id = in->out + q;
      if (owned[id] && f->last_use[id] < 0) {
        rt_free(vals[id]);
        vals[id] = NULL;
        owned[id] = false;
      }
    }
  }
  if (code == PROG_OK)
    for (int k = 0; k < f->num_results; k++) {
      int id = f->results[k];
      if (vals[id] != outputs[k]) memmove(outputs[k], vals[id], rt_bytes(&f->values[id]));
    }
  for (size_t k = 0; k < nv; k++)
    if (owned[k]) rt_free(vals[k]);
  free(vals);
  free(owned);
  free(direct);
  return code;
}

static int run_region(run_ctx* r, const prog_program* p, const prog_func* f,
                      void* const* parent_vals, const void* const* inputs, void* const* outputs,
                      int depth) {
  return rt_run_func(r, p, f, parent_vals, inputs, outputs, depth + 1);
}

int prog_run(const prog_program* p, const void* const* inputs, void* const* outputs,
             prog_status* status) {
  prog_status ignored;
  run_ctx r = {status != NULL ? status : &ignored, run_region, NULL};
  r.status->code = PROG_OK;
  r.status->message[0] = 0;
  if (p == NULL) return rt_fail(&r, PROG_INVALID_ARGUMENT, "no program", NULL);
  const prog_func* f = &p->funcs[p->main];
  for (int k = 0; k < f->num_args; k++)
    if (inputs[k] == NULL && rt_bytes(&f->values[k]) > 0)
      return rt_fail(&r, PROG_INVALID_ARGUMENT, "missing input buffer", f->name);
  return rt_run_func(&r, p, f, NULL, inputs, outputs, 0);
}
