/* prog_interp.c -- runs lowered programs on host arrays.
 *
 * Every shape relation was verified by prog_vhlo.c, so the kernels index without checks.  Each
 * value gets its own row-major buffer; a buffer is freed after the last instruction that reads
 * it.  Arithmetic follows XLA's CPU semantics where C would be undefined: integer overflow
 * wraps, integer division by zero gives -1 (remainder: the dividend), float->int conversion
 * saturates with NaN -> 0, and max/min propagate NaN.  bf16 computes in f32 and rounds back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

typedef struct {
  prog_status* status;
} run_ctx;

static int fail(run_ctx* r, int code, const char* msg, const char* op) {
  r->status->code = code;
  snprintf(r->status->message, sizeof r->status->message, "%s%s%s", msg, op ? " in " : "",
           op ? op : "");
  return code;
}

static size_t bytes_of(const prog_shape* s) {
  return (size_t)prog_shape_elements(s) * prog_dtype_size(s->dtype);
}

/* ---- bf16 ------------------------------------------------------------------------------- */

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {  /* round to nearest even, NaN stays NaN */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24);
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = ldexpf((float)(man | 0x400), (int)exp - 25);
  }
  return sign ? -f : f;
}

static uint16_t f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(f)) return sign | 0x7e00;
  float a = fabsf(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) return sign | (uint16_t)lrintf(a * 16777216.0f);  /* subnormal */
  int e;
  float m = frexpf(a, &e);                /* a = m * 2^e, m in [0.5, 1) */
  uint32_t man = (uint32_t)lrintf(m * 2048.0f);  /* 11 bits incl. the implicit one */
  if (man == 2048) { man = 1024; e++; }
  return sign | (uint16_t)(((uint32_t)(e + 14) << 10) | (man & 0x3ff));
}

/* ---- element access for convert (a per-element switch: convert is rare) ----------------- */

static bool is_int_type(prog_dtype t) { return t != PROG_F32 && t != PROG_F64 && t != PROG_BF16 && t != PROG_F16; }

static double get_f(prog_dtype t, const void* p, int64_t i) {
  switch (t) {
    case PROG_F32: return ((const float*)p)[i];
    case PROG_F64: return ((const double*)p)[i];
    case PROG_BF16: return bf16_to_f32(((const uint16_t*)p)[i]);
    case PROG_F16: return f16_to_f32(((const uint16_t*)p)[i]);
    default: return 0;
  }
}

static int64_t get_i(prog_dtype t, const void* p, int64_t i) {
  switch (t) {
    case PROG_PRED: return ((const uint8_t*)p)[i] != 0;
    case PROG_S8: return ((const int8_t*)p)[i];
    case PROG_U8: return ((const uint8_t*)p)[i];
    case PROG_S32: return ((const int32_t*)p)[i];
    case PROG_U32: return ((const uint32_t*)p)[i];
    case PROG_S64: return ((const int64_t*)p)[i];
    case PROG_U64: return (int64_t)((const uint64_t*)p)[i];
    default: return 0;
  }
}

static int64_t saturate(double x, double lo, double hi) {
  if (isnan(x)) return 0;
  if (x <= lo) return (int64_t)lo;
  if (x >= hi) return (int64_t)hi;
  return (int64_t)x;
}

static void put(prog_dtype t, void* p, int64_t i, double f, int64_t n, bool from_float) {
  switch (t) {
    case PROG_F32: ((float*)p)[i] = from_float ? (float)f : (float)n; return;
    case PROG_F64: ((double*)p)[i] = from_float ? f : (double)n; return;
    case PROG_BF16: ((uint16_t*)p)[i] = f32_to_bf16(from_float ? (float)f : (float)n); return;
    case PROG_F16: ((uint16_t*)p)[i] = f32_to_f16(from_float ? (float)f : (float)n); return;
    case PROG_PRED: ((uint8_t*)p)[i] = from_float ? f != 0 : n != 0; return;
    case PROG_S8: ((int8_t*)p)[i] = (int8_t)(from_float ? saturate(f, -128, 127) : n); return;
    case PROG_U8: ((uint8_t*)p)[i] = (uint8_t)(from_float ? saturate(f, 0, 255) : n); return;
    case PROG_S32:
      ((int32_t*)p)[i] = (int32_t)(from_float ? saturate(f, -2147483648.0, 2147483647.0) : n);
      return;
    case PROG_U32:
      ((uint32_t*)p)[i] = (uint32_t)(from_float ? saturate(f, 0, 4294967295.0) : n);
      return;
    case PROG_S64:
      ((int64_t*)p)[i] = from_float ? saturate(f, -9223372036854775808.0, 9223372036854774784.0) : n;
      return;
    case PROG_U64:
      if (from_float) {
        ((uint64_t*)p)[i] = isnan(f) || f <= 0 ? 0 : f >= 18446744073709551615.0
                                                     ? UINT64_MAX : (uint64_t)f;
      } else {
        ((uint64_t*)p)[i] = (uint64_t)n;
      }
      return;
  }
}

static void convert(const prog_shape* from, const void* a, const prog_shape* to, void* o) {
  int64_t n = prog_shape_elements(to);
  bool from_float = !is_int_type(from->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (from_float) put(to->dtype, o, i, get_f(from->dtype, a, i), 0, true);
    else put(to->dtype, o, i, 0, get_i(from->dtype, a, i), false);
  }
}

static void compare(prog_dtype t, int dir, const void* a, const void* b, uint8_t* o,
                    int64_t n);

/* ---- elementwise kernels ---------------------------------------------------------------- */

#define FMAXN(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) > (y) ? (x) : (y))
#define FMINN(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) < (y) ? (x) : (y))

#define FLOAT_UNARY(T, SUF)                                                                \
  static void unary_##SUF(prog_opcode op, const T* a, T* o, int64_t n) {                  \
    switch (op) {                                                                          \
      case OP_NEGATE: for (int64_t i = 0; i < n; i++) o[i] = -a[i]; break;                 \
      case OP_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabs##SUF(a[i]); break;          \
      case OP_EXP: for (int64_t i = 0; i < n; i++) o[i] = exp##SUF(a[i]); break;           \
      case OP_LOG: for (int64_t i = 0; i < n; i++) o[i] = log##SUF(a[i]); break;           \
      case OP_TANH: for (int64_t i = 0; i < n; i++) o[i] = tanh##SUF(a[i]); break;         \
      case OP_LOGISTIC:                                                                    \
        for (int64_t i = 0; i < n; i++) o[i] = (T)1 / ((T)1 + exp##SUF(-a[i]));            \
        break;                                                                             \
      case OP_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrt##SUF(a[i]); break;         \
      case OP_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / sqrt##SUF(a[i]); break; \
      case OP_SIGN:                                                                        \
        for (int64_t i = 0; i < n; i++)                                                    \
          o[i] = isnan(a[i]) ? a[i] : a[i] > 0 ? (T)1 : a[i] < 0 ? (T)-1 : a[i];           \
        break;                                                                             \
      case OP_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = floor##SUF(a[i]); break;       \
      case OP_CEIL: for (int64_t i = 0; i < n; i++) o[i] = ceil##SUF(a[i]); break;         \
      case OP_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = log1p##SUF(a[i]); break;       \
      case OP_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = expm1##SUF(a[i]); break;       \
      case OP_SIN: for (int64_t i = 0; i < n; i++) o[i] = sin##SUF(a[i]); break;           \
      case OP_COS: for (int64_t i = 0; i < n; i++) o[i] = cos##SUF(a[i]); break;           \
      default: break;                                                                      \
    }                                                                                      \
  }

#define FLOAT_BINARY(T, SUF)                                                               \
  static void binary_##SUF(prog_opcode op, const T* a, const T* b, T* o, int64_t n) {     \
    switch (op) {                                                                          \
      case OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; break;              \
      case OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; break;              \
      case OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;              \
      case OP_DIV: for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;              \
      case OP_REM: for (int64_t i = 0; i < n; i++) o[i] = fmod##SUF(a[i], b[i]); break;    \
      case OP_POW: for (int64_t i = 0; i < n; i++) o[i] = pow##SUF(a[i], b[i]); break;     \
      case OP_ATAN2: for (int64_t i = 0; i < n; i++) o[i] = atan2##SUF(a[i], b[i]); break; \
      case OP_MAX: for (int64_t i = 0; i < n; i++) o[i] = FMAXN(a[i], b[i]); break;        \
      case OP_MIN: for (int64_t i = 0; i < n; i++) o[i] = FMINN(a[i], b[i]); break;        \
      default: break;                                                                      \
    }                                                                                      \
  }

FLOAT_UNARY(float, f)
FLOAT_UNARY(double, )
FLOAT_BINARY(float, f)
FLOAT_BINARY(double, )

/* Integers: wrapping arithmetic through the unsigned type U. */
#define INT_KERNELS(T, U, SUF, TMIN, BITS)                                                       \
  static void unary_##SUF(prog_opcode op, const T* a, T* o, int64_t n) {                  \
    switch (op) {                                                                          \
      case OP_NEGATE: for (int64_t i = 0; i < n; i++) o[i] = (T)(0 - (U)a[i]); break;      \
      case OP_ABS:                                                                         \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? (T)(0 - (U)a[i]) : a[i];         \
        break;                                                                             \
      case OP_SIGN: for (int64_t i = 0; i < n; i++) o[i] = (T)((a[i] > 0) - (a[i] < 0)); break; \
      case OP_NOT: for (int64_t i = 0; i < n; i++) o[i] = (T)~a[i]; break;                 \
      default: break;                                                                      \
    }                                                                                      \
  }                                                                                        \
  static T ipow_##SUF(T x, T y) {                                                          \
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;                       \
    U r = 1, b = (U)x;                                                                     \
    for (T e = y; e > 0; e >>= 1, b *= b)                                                  \
      if (e & 1) r *= b;                                                                   \
    return (T)r;                                                                           \
  }                                                                                        \
  static void binary_##SUF(prog_opcode op, const T* a, const T* b, T* o, int64_t n) {     \
    switch (op) {                                                                          \
      case OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = (T)((U)a[i] + (U)b[i]); break;   \
      case OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = (T)((U)a[i] - (U)b[i]); break;   \
      case OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = (T)((U)a[i] * (U)b[i]); break;   \
      case OP_DIV:                                                                         \
        for (int64_t i = 0; i < n; i++)                                                    \
          o[i] = b[i] == 0 ? (T)-1 : (a[i] == TMIN && b[i] == -1) ? TMIN : a[i] / b[i];    \
        break;                                                                             \
      case OP_REM:                                                                         \
        for (int64_t i = 0; i < n; i++)                                                    \
          o[i] = b[i] == 0 ? a[i] : (a[i] == TMIN && b[i] == -1) ? 0 : a[i] % b[i];        \
        break;                                                                             \
      case OP_POW: for (int64_t i = 0; i < n; i++) o[i] = ipow_##SUF(a[i], b[i]); break;   \
      case OP_MAX: for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i]; break; \
      case OP_MIN: for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i] ? a[i] : b[i]; break; \
      case OP_AND: for (int64_t i = 0; i < n; i++) o[i] = a[i] & b[i]; break;              \
      case OP_OR: for (int64_t i = 0; i < n; i++) o[i] = a[i] | b[i]; break;               \
      case OP_XOR: for (int64_t i = 0; i < n; i++) o[i] = a[i] ^ b[i]; break;              \
      /* shifts by the bit width or more: 0, or the sign for arithmetic right shifts */     \
      case OP_SHL:                                                                         \
        for (int64_t i = 0; i < n; i++)                                                    \
          o[i] = (U)b[i] >= BITS ? 0 : (T)((U)a[i] << b[i]);                               \
        break;                                                                             \
      case OP_SHRL:                                                                        \
        for (int64_t i = 0; i < n; i++)                                                    \
          o[i] = (U)b[i] >= BITS ? 0 : (T)((U)a[i] >> b[i]);                               \
        break;                                                                             \
      case OP_SHRA:                                                                        \
        for (int64_t i = 0; i < n; i++)                                                    \
          o[i] = (U)b[i] >= BITS ? (a[i] < 0 ? -1 : 0)                                     \
                                 : (T)(a[i] < 0 ? ~(~(U)a[i] >> b[i]) : (U)a[i] >> b[i]);  \
        break;                                                                             \
      default: break;                                                                      \
    }                                                                                      \
  }

INT_KERNELS(int32_t, uint32_t, s32, INT32_MIN, 32u)
INT_KERNELS(int64_t, uint64_t, s64, INT64_MIN, 64u)

/* pred is a one-bit integer: + is or, * is and, max is or, min is and. */
static void unary_pred(prog_opcode op, const uint8_t* a, uint8_t* o, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    o[i] = op == OP_NOT ? !a[i] : op == OP_SIGN || op == OP_ABS ? a[i] : a[i];  /* -x == x */
}

static void binary_pred(prog_opcode op, const uint8_t* a, const uint8_t* b, uint8_t* o,
                        int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    bool x = a[i], y = b[i];
    switch (op) {
      case OP_ADD: case OP_OR: case OP_MAX: o[i] = x | y; break;
      case OP_MUL: case OP_AND: case OP_MIN: o[i] = x & y; break;
      case OP_SUB: case OP_XOR: o[i] = x ^ y; break;
      case OP_DIV: o[i] = y ? x : 1; break;  /* x/0 = -1, i.e. true */
      case OP_REM: o[i] = y ? 0 : x; break;
      case OP_POW: o[i] = x | !y; break;
      default: o[i] = 0; break;
    }
  }
}

static float* widen_bf16(const uint16_t* a, int64_t n) {
  float* w = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (w != NULL)
    for (int64_t i = 0; i < n; i++) w[i] = bf16_to_f32(a[i]);
  return w;
}

static int elementwise_dense(run_ctx* r, const prog_insn* in, const prog_shape* a_shape,
                             void* const* args, void* o, int64_t n) {
  bool binary = in->num_in == 2;
  const void *a = args[0], *b = binary ? args[1] : NULL;
  switch (a_shape->dtype) {
    case PROG_F32:
      if (binary) binary_f(in->op, a, b, o, n); else unary_f(in->op, a, o, n);
      return PROG_OK;
    case PROG_F64:
      if (binary) binary_(in->op, a, b, o, n); else unary_(in->op, a, o, n);
      return PROG_OK;
    case PROG_S32:
      if (binary) binary_s32(in->op, a, b, o, n); else unary_s32(in->op, a, o, n);
      return PROG_OK;
    case PROG_S64:
      if (binary) binary_s64(in->op, a, b, o, n); else unary_s64(in->op, a, o, n);
      return PROG_OK;
    case PROG_PRED:
      if (binary) binary_pred(in->op, a, b, o, n); else unary_pred(in->op, a, o, n);
      return PROG_OK;
    case PROG_BF16: {
      float *wa = widen_bf16(a, n), *wb = binary ? widen_bf16(b, n) : NULL;
      int code = PROG_OK;
      if (wa == NULL || (binary && wb == NULL)) {
        code = fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
      } else {
        if (binary) binary_f(in->op, wa, wb, wa, n); else unary_f(in->op, wa, wa, n);
        for (int64_t i = 0; i < n; i++) ((uint16_t*)o)[i] = f32_to_bf16(wa[i]);
      }
      free(wa);
      free(wb);
      return code;
    }
    default:
      return fail(r, PROG_UNIMPLEMENTED, "unsupported element type", in->vhlo_name);
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
  int64_t block = a_shape->dtype == PROG_BF16 ? n : BLOCK;  /* bf16 widens whole arrays */
  char* fill[2] = {NULL, NULL};
  int code = PROG_OK;
  for (int k = 0; k < 2; k++)
    if (in->scalar_in & (1u << k)) {
      fill[k] = malloc((size_t)(block > 0 ? block : 1) * es);
      if (fill[k] == NULL) { code = fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name); break; }
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

#define COMPARE_LOOP(T)                                                                    \
  do {                                                                                     \
    const T *x = a, *y = b;                                                                \
    for (int64_t i = 0; i < n; i++) {                                                      \
      switch (dir) {                                                                       \
        case CMP_EQ: o[i] = x[i] == y[i]; break;                                           \
        case CMP_NE: o[i] = x[i] != y[i]; break;                                           \
        case CMP_GE: o[i] = x[i] >= y[i]; break;                                           \
        case CMP_GT: o[i] = x[i] > y[i]; break;                                            \
        case CMP_LE: o[i] = x[i] <= y[i]; break;                                           \
        default: o[i] = x[i] < y[i]; break;                                                \
      }                                                                                    \
    }                                                                                      \
  } while (0)

static void compare(prog_dtype t, int dir, const void* a, const void* b, uint8_t* o,
                    int64_t n) {
  switch (t) {
    case PROG_F32: COMPARE_LOOP(float); break;
    case PROG_F64: COMPARE_LOOP(double); break;
    case PROG_S32: COMPARE_LOOP(int32_t); break;
    case PROG_S64: COMPARE_LOOP(int64_t); break;
    case PROG_PRED: COMPARE_LOOP(uint8_t); break;
    case PROG_BF16: {
      const uint16_t *x = a, *y = b;
      for (int64_t i = 0; i < n; i++) {
        float fx = bf16_to_f32(x[i]), fy = bf16_to_f32(y[i]);
        o[i] = dir == CMP_EQ ? fx == fy : dir == CMP_NE ? fx != fy : dir == CMP_GE ? fx >= fy
             : dir == CMP_GT ? fx > fy : dir == CMP_LE ? fx <= fy : fx < fy;
      }
      break;
    }
    default: break;
  }
}

/* ---- data movement ---------------------------------------------------------------------- */

/* Copies a `rank`-d box of elements: dst and src advance by their own (element) strides per
 * dimension.  Broadcast (stride 0), transpose, slice, reverse (negative strides) and
 * concatenate are all this one loop nest. */
static void strided_copy(size_t esize, int rank, const int64_t* dims, char* dst,
                         const int64_t* dst_strides, const char* src,
                         const int64_t* src_strides) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  if (n == 0) return;
  if (rank == 0) {
    memcpy(dst, src, esize);
    return;
  }
  int64_t idx[PROG_MAX_RANK] = {0};
  int inner = rank - 1;
  int64_t len = dims[inner], ds = dst_strides[inner], ss = src_strides[inner];
  for (;;) {
    switch (esize) {  /* the inner loop, by element size, so the compiler can tighten it */
      case 4:
        for (int64_t i = 0; i < len; i++)
          ((uint32_t*)(void*)dst)[i * ds] = ((const uint32_t*)(const void*)src)[i * ss];
        break;
      case 8:
        for (int64_t i = 0; i < len; i++)
          ((uint64_t*)(void*)dst)[i * ds] = ((const uint64_t*)(const void*)src)[i * ss];
        break;
      case 2:
        for (int64_t i = 0; i < len; i++)
          ((uint16_t*)(void*)dst)[i * ds] = ((const uint16_t*)(const void*)src)[i * ss];
        break;
      default:
        for (int64_t i = 0; i < len; i++) dst[i * ds] = src[i * ss];
        break;
    }
    int d = inner - 1;  /* odometer over the outer dimensions */
    for (; d >= 0; d--) {
      dst += (int64_t)esize * dst_strides[d];
      src += (int64_t)esize * src_strides[d];
      if (++idx[d] < dims[d]) break;
      dst -= (int64_t)esize * dst_strides[d] * dims[d];
      src -= (int64_t)esize * src_strides[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

static void row_major_strides(const prog_shape* s, int64_t* strides) {
  int64_t st = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    strides[d] = st;
    st *= s->dims[d];
  }
}

static void broadcast(const prog_insn* in, const prog_shape* a, const void* src, void* o) {
  int64_t a_st[PROG_MAX_RANK], o_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK] = {0};
  row_major_strides(a, a_st);
  row_major_strides(&in->shape, o_st);
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != 1) s_st[in->p[0][d]] = a_st[d];
  strided_copy(prog_dtype_size(a->dtype), in->shape.rank, in->shape.dims, o, o_st, src, s_st);
}

static void transpose(const prog_insn* in, const prog_shape* a, const void* src, void* o) {
  int64_t a_st[PROG_MAX_RANK], o_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  row_major_strides(a, a_st);
  row_major_strides(&in->shape, o_st);
  for (int d = 0; d < a->rank; d++) s_st[d] = a_st[in->p[0][d]];
  strided_copy(prog_dtype_size(a->dtype), a->rank, in->shape.dims, o, o_st, src, s_st);
}

static void slice(const prog_insn* in, const prog_shape* a, const char* src, void* o) {
  int64_t a_st[PROG_MAX_RANK], o_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  size_t es = prog_dtype_size(a->dtype);
  row_major_strides(a, a_st);
  row_major_strides(&in->shape, o_st);
  for (int d = 0; d < a->rank; d++) {
    src += (int64_t)es * in->p[0][d] * a_st[d];
    s_st[d] = a_st[d] * in->p[2][d];
  }
  strided_copy(es, a->rank, in->shape.dims, o, o_st, src, s_st);
}

static void reverse(const prog_insn* in, const char* src, void* o) {
  int64_t st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  size_t es = prog_dtype_size(in->shape.dtype);
  row_major_strides(&in->shape, st);
  memcpy(s_st, st, sizeof st);
  if (prog_shape_elements(&in->shape) == 0) return;
  for (int k = 0; k < in->np[0]; k++) {
    int d = (int)in->p[0][k];
    src += (int64_t)es * (in->shape.dims[d] - 1) * st[d];
    s_st[d] = -st[d];
  }
  strided_copy(es, in->shape.rank, in->shape.dims, o, st, src, s_st);
}

static void concatenate(const prog_insn* in, const prog_shape* values, void* const* args,
                        char* o) {
  int64_t o_st[PROG_MAX_RANK], a_st[PROG_MAX_RANK];
  size_t es = prog_dtype_size(in->shape.dtype);
  row_major_strides(&in->shape, o_st);
  int dim = in->iarg;
  for (int k = 0; k < in->num_in; k++) {
    const prog_shape* a = &values[in->in[k]];
    row_major_strides(a, a_st);
    strided_copy(es, a->rank, a->dims, o, o_st, args[k], a_st);
    o += (int64_t)es * a->dims[dim] * o_st[dim];
  }
}

static void iota(const prog_insn* in, void* o) {
  int64_t st[PROG_MAX_RANK];
  row_major_strides(&in->shape, st);
  int64_t n = prog_shape_elements(&in->shape), size = in->shape.dims[in->iarg];
  for (int64_t i = 0; i < n; i++) {
    int64_t v = (i / st[in->iarg]) % size;
    put(in->shape.dtype, o, i, (double)v, v, false);
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
    const uint32_t *a = (const void*)t, *b = (const void*)f;
    uint32_t* out = (void*)o;
    for (int64_t i = 0; i < n; i++) out[i] = pred[i] ? a[i] : b[i];
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
    if (is_int_type(t)) {
      int64_t x = get_i(t, args[1], i), lo = get_i(t, args[0], li), h = get_i(t, args[2], hi);
      x = x < lo ? lo : x;
      put(t, o, i, 0, x > h ? h : x, false);
    } else {
      double x = get_f(t, args[1], i), lo = get_f(t, args[0], li), h = get_f(t, args[2], hi);
      x = FMINN(FMAXN(x, lo), h);
      put(t, o, i, x, 0, true);
    }
  }
}

/* ---- dot_general ------------------------------------------------------------------------ */

/* Copies `a` so its dimensions come in the order `order` (a permutation), contiguously. */
static void gather_dims(const prog_shape* a, const void* src, const int* order, void* dst) {
  prog_shape t = *a;
  int64_t a_st[PROG_MAX_RANK], t_st[PROG_MAX_RANK], s_st[PROG_MAX_RANK];
  row_major_strides(a, a_st);
  for (int d = 0; d < a->rank; d++) {
    t.dims[d] = a->dims[order[d]];
    s_st[d] = a_st[order[d]];
  }
  row_major_strides(&t, t_st);
  strided_copy(prog_dtype_size(a->dtype), a->rank, t.dims, dst, t_st, src, s_st);
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

/* c += x * b over a row: restrict lets the compiler vectorize it. */
static void axpy_f(float* restrict c, const float* restrict b, float x, int64_t n) {
  for (int64_t j = 0; j < n; j++) c[j] += x * b[j];
}
static void axpy_(double* restrict c, const double* restrict b, double x, int64_t n) {
  for (int64_t j = 0; j < n; j++) c[j] += x * b[j];
}

/* Row-by-row (i, k, j) so the innermost loop streams contiguous rows of B and C. */
#define MATMUL(T, AXPY)                                                                    \
  do {                                                                                     \
    const T *A = a, *B = b;                                                                \
    T* C = o;                                                                              \
    memset(C, 0, (size_t)(nbatch * M * N) * sizeof(T));                                   \
    for (int64_t q = 0; q < nbatch; q++)                                                   \
      for (int64_t i = 0; i < M; i++)                                                      \
        for (int64_t k = 0; k < K; k++)                                                    \
          AXPY(C + (q * M + i) * N, B + (q * K + k) * N, A[(q * M + i) * K + k], N);       \
  } while (0)

#define MATMUL_WRAP(T, U)                                                                  \
  do {                                                                                     \
    const T *A = a, *B = b;                                                                \
    T* C = o;                                                                              \
    memset(C, 0, (size_t)(nbatch * M * N) * sizeof(T));                                   \
    for (int64_t q = 0; q < nbatch; q++)                                                   \
      for (int64_t i = 0; i < M; i++)                                                      \
        for (int64_t k = 0; k < K; k++)                                                    \
          for (int64_t j = 0; j < N; j++) {                                                \
            T* c = &C[(q * M + i) * N + j];                                                \
            *c = (T)((U)*c + (U)A[(q * M + i) * K + k] * (U)B[(q * K + k) * N + j]);        \
          }                                                                                \
  } while (0)

static int dot(run_ctx* r, const prog_insn* in, const prog_shape* as, const prog_shape* bs,
               const void* a_src, const void* b_src, void* o) {
  int ao[PROG_MAX_RANK], bo[PROG_MAX_RANK];
  int64_t M, N, K = 1, nbatch = 1;
  dot_layout(as, in->p[0], in->np[0], in->p[2], in->np[2], false, ao, &M);
  dot_layout(bs, in->p[1], in->np[1], in->p[3], in->np[3], true, bo, &N);
  for (int k = 0; k < in->np[0]; k++) nbatch *= as->dims[in->p[0][k]];
  for (int k = 0; k < in->np[2]; k++) K *= as->dims[in->p[2][k]];
  size_t es = prog_dtype_size(as->dtype);
  bool is_bf16 = as->dtype == PROG_BF16;
  size_t work_es = is_bf16 ? 4 : es;
  void* a = malloc((size_t)(nbatch * M * K) * work_es + 8);
  void* b = malloc((size_t)(nbatch * K * N) * work_es + 8);
  void* c = is_bf16 ? malloc((size_t)(nbatch * M * N) * 4 + 8) : o;
  if (a == NULL || b == NULL || c == NULL) {
    free(a); free(b); if (is_bf16) free(c);
    return fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  }
  gather_dims(as, a_src, ao, a);
  gather_dims(bs, b_src, bo, b);
  if (is_bf16) {  /* widen in place from the back: the bf16 data occupies the first half */
    for (int64_t i = nbatch * M * K - 1; i >= 0; i--) ((float*)a)[i] = bf16_to_f32(((uint16_t*)a)[i]);
    for (int64_t i = nbatch * K * N - 1; i >= 0; i--) ((float*)b)[i] = bf16_to_f32(((uint16_t*)b)[i]);
  }
  void* out = o;
  o = c;
  switch (as->dtype) {
    case PROG_F32: case PROG_BF16: MATMUL(float, axpy_f); break;
    case PROG_F64: MATMUL(double, axpy_); break;
    case PROG_S32: MATMUL_WRAP(int32_t, uint32_t); break;
    case PROG_S64: MATMUL_WRAP(int64_t, uint64_t); break;
    default: break;
  }
  if (is_bf16) {
    for (int64_t i = 0; i < nbatch * M * N; i++) ((uint16_t*)out)[i] = f32_to_bf16(((float*)c)[i]);
    free(c);
  }
  free(a);
  free(b);
  return PROG_OK;
}

/* ---- reduce ----------------------------------------------------------------------------- */

#define REDUCE_FLOAT(T, ACC)                                                               \
  do {                                                                                     \
    const T* x = src;                                                                      \
    T* y = o;                                                                              \
    T init = *(const T*)init_p;                                                            \
    for (int64_t q = 0; q < outer; q++) {                                                  \
      const T* row = x + q * len;                                                          \
      ACC acc = init;                                                                      \
      switch (kind) {                                                                      \
        case RED_ADD: for (int64_t i = 0; i < len; i++) acc += row[i]; break;              \
        case RED_MUL: for (int64_t i = 0; i < len; i++) acc *= row[i]; break;              \
        case RED_MAX: for (int64_t i = 0; i < len; i++) acc = FMAXN(acc, (ACC)row[i]); break; \
        case RED_MIN: for (int64_t i = 0; i < len; i++) acc = FMINN(acc, (ACC)row[i]); break; \
        default: break;                                                                    \
      }                                                                                    \
      y[q] = (T)acc;                                                                       \
    }                                                                                      \
  } while (0)

#define REDUCE_INT(T, U)                                                                   \
  do {                                                                                     \
    const T* x = src;                                                                      \
    T* y = o;                                                                              \
    for (int64_t q = 0; q < outer; q++) {                                                  \
      const T* row = x + q * len;                                                          \
      T acc = *(const T*)init_p;                                                           \
      for (int64_t i = 0; i < len; i++) {                                                  \
        switch (kind) {                                                                    \
          case RED_ADD: acc = (T)((U)acc + (U)row[i]); break;                              \
          case RED_MUL: acc = (T)((U)acc * (U)row[i]); break;                              \
          case RED_MAX: acc = acc > row[i] ? acc : row[i]; break;                          \
          case RED_MIN: acc = acc < row[i] ? acc : row[i]; break;                          \
          case RED_AND: acc = acc & row[i]; break;                                         \
          default: acc = acc | row[i]; break;                                              \
        }                                                                                  \
      }                                                                                    \
      y[q] = acc;                                                                          \
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
  void* tmp = NULL;
  const void* src = a_src;
  if (!in_place) {
    tmp = malloc((size_t)prog_shape_elements(a) * es + 8);
    if (tmp == NULL) return fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
    gather_dims(a, a_src, order, tmp);
    src = tmp;
  }
  int kind = in->iarg;
  switch (a->dtype) {
    case PROG_F32: REDUCE_FLOAT(float, double); break;
    case PROG_F64: REDUCE_FLOAT(double, double); break;
    case PROG_S32: REDUCE_INT(int32_t, uint32_t); break;
    case PROG_S64: REDUCE_INT(int64_t, uint64_t); break;
    case PROG_PRED: {
      const uint8_t* x = src;
      uint8_t* y = o;
      for (int64_t q = 0; q < outer; q++) {
        uint8_t acc = *(const uint8_t*)init_p != 0;
        for (int64_t i = 0; i < len; i++)
          acc = (kind == RED_ADD || kind == RED_OR || kind == RED_MAX) ? (acc | x[q * len + i])
                                                                      : (acc & x[q * len + i]);
        y[q] = acc;
      }
      break;
    }
    case PROG_BF16: {
      const uint16_t* x = src;
      uint16_t* y = o;
      for (int64_t q = 0; q < outer; q++) {
        double acc = bf16_to_f32(*(const uint16_t*)init_p);
        for (int64_t i = 0; i < len; i++) {
          double v = bf16_to_f32(x[q * len + i]);
          acc = kind == RED_ADD ? acc + v : kind == RED_MUL ? acc * v
              : kind == RED_MAX ? FMAXN(acc, v) : FMINN(acc, v);
        }
        y[q] = f32_to_bf16((float)acc);
      }
      break;
    }
    default: break;
  }
  free(tmp);
  return PROG_OK;
}

/* ---- the instruction loop --------------------------------------------------------------- */

static int run_func(run_ctx* r, const prog_program* p, const prog_func* f,
                    const void* const* inputs, void* const* outputs, int depth);

static int run_insn(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
                    void** vals, int depth) {
  void* args[64];
  void** argv = in->num_in <= 64 ? args : malloc(sizeof(void*) * (size_t)in->num_in);
  if (argv == NULL) return fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  for (int k = 0; k < in->num_in; k++) argv[k] = vals[in->in[k]];
  void* o = vals[in->out];
  const prog_shape* a = in->num_in > 0 ? &f->values[in->in[0]] : NULL;
  int code = PROG_OK;
  switch (in->op) {
    case OP_CONSTANT: memcpy(o, in->data, bytes_of(&in->shape)); break;
    case OP_IOTA: iota(in, o); break;
    case OP_CONVERT: convert(a, argv[0], &in->shape, o); break;
    case OP_COMPARE:
      if (in->scalar_in) code = elementwise(r, in, a, argv, o);
      else compare(a->dtype, in->iarg, argv[0], argv[1], o, prog_shape_elements(&in->shape));
      break;
    case OP_SELECT: select_(in, a, argv, o); break;
    case OP_CLAMP: clamp(in, f->values, argv, o); break;
    case OP_BROADCAST: broadcast(in, a, argv[0], o); break;
    case OP_RESHAPE: memcpy(o, argv[0], bytes_of(&in->shape)); break;
    case OP_TRANSPOSE: transpose(in, a, argv[0], o); break;
    case OP_SLICE: slice(in, a, argv[0], o); break;
    case OP_CONCAT: concatenate(in, f->values, argv, o); break;
    case OP_REVERSE: reverse(in, argv[0], o); break;
    case OP_DOT: code = dot(r, in, a, &f->values[in->in[1]], argv[0], argv[1], o); break;
    case OP_REDUCE: code = reduce(r, in, a, argv[0], argv[1], o); break;
    case OP_CALL:
      code = run_func(r, p, &p->funcs[in->iarg], (const void* const*)argv, vals + in->out,
                      depth + 1);
      break;
    default: code = elementwise(r, in, a, argv, o); break;
  }
  if (argv != args) free(argv);
  return code;
}

/* Values live in `vals`; `owned` says which buffers the loop allocated (arguments are borrowed,
 * and a value the function returns is written straight into its output buffer). */
static int run_func(run_ctx* r, const prog_program* p, const prog_func* f,
                    const void* const* inputs, void* const* outputs, int depth) {
  if (depth > 64) return fail(r, PROG_INTERNAL, "call depth exceeded", f->name);
  size_t nv = (size_t)(f->num_values > 0 ? f->num_values : 1);
  void** vals = calloc(nv, sizeof(void*));
  bool* owned = calloc(nv, sizeof(bool));
  int* direct = calloc(nv, sizeof(int));  /* 1 + index of the output a value is written to */
  if (vals == NULL || owned == NULL || direct == NULL) {
    free(vals); free(owned); free(direct);
    return fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", f->name);
  }
  for (int k = 0; k < f->num_args; k++) vals[k] = (void*)inputs[k];
  for (int k = 0; k < f->num_results; k++) {
    int id = f->results[k];
    if (id >= f->num_args && direct[id] == 0 && outputs[k] != NULL) direct[id] = k + 1;
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
        } else {
          vals[id] = malloc(bytes_of(&f->values[id]) + 8);
          owned[id] = vals[id] != NULL;
          if (vals[id] == NULL) code = fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
        }
      }
      if (code == PROG_OK) code = run_insn(r, p, f, in, vals, depth);
    }
    /* free what no later instruction reads */
    for (int q = 0; q < in->num_in; q++) {
      int id = in->in[q];
      if (owned[id] && f->last_use[id] == k) {
        free(vals[id]);
        vals[id] = NULL;
        owned[id] = false;
      }
    }
    for (int q = 0; q < in->num_out; q++) {
      int id = in->out + q;
      if (owned[id] && f->last_use[id] < 0) {
        free(vals[id]);
        vals[id] = NULL;
        owned[id] = false;
      }
    }
  }
  if (code == PROG_OK)
    for (int k = 0; k < f->num_results; k++) {
      int id = f->results[k];
      if (vals[id] != outputs[k]) memcpy(outputs[k], vals[id], bytes_of(&f->values[id]));
    }
  for (size_t k = 0; k < nv; k++)
    if (owned[k]) free(vals[k]);
  free(vals);
  free(owned);
  free(direct);
  return code;
}

int prog_run(const prog_program* p, const void* const* inputs, void* const* outputs,
             prog_status* status) {
  prog_status ignored;
  run_ctx r = {status != NULL ? status : &ignored};
  r.status->code = PROG_OK;
  r.status->message[0] = 0;
  if (p == NULL) return fail(&r, PROG_INVALID_ARGUMENT, "no program", NULL);
  const prog_func* f = &p->funcs[p->main];
  for (int k = 0; k < f->num_args; k++)
    if (inputs[k] == NULL && bytes_of(&f->values[k]) > 0)
      return fail(&r, PROG_INVALID_ARGUMENT, "missing input buffer", f->name);
  return run_func(&r, p, f, inputs, outputs, 0);
}
