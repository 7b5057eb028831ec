/* prog_rt.c -- what every kernel uses (prog_interp.c and prog_ops_*.c): failing a run, element
 * loads and stores of any type with XLA's conversions (saturating float -> int, NaN -> 0,
 * round-to-nearest-even narrowing to bf16, f16 and the f8 types), the row-major strides of a
 * shape and the one strided copy that broadcast, transpose, slice, reverse and concatenate are.
 * It stands below the kernels and calls none of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

int rt_fail(run_ctx* r, int code, const char* msg, const char* op) {
  r->status->code = code;
  snprintf(r->status->message, sizeof r->status->message, "%s%s%s", msg, op ? " in " : "",
           op ? op : "");
  return code;
}

size_t rt_bytes(const prog_shape* s) {
  return (size_t)prog_shape_elements(s) * prog_dtype_size(s->dtype);
}

/* ---- narrow floats ---------------------------------------------------------------------- */

float rt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t rt_f32_to_bf16(float f) {  /* round to nearest even, NaN stays NaN */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float rt_f16_to_f32(uint16_t h) {
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

uint16_t rt_f32_to_f16(float f) {
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

/* f8: E4M3FN (bias 7, no infinities, NaN = all ones) and E5M2 (bias 15, IEEE-like). */
static double f8_decode(uint8_t v, int eb, int mb, int bias, bool fn) {
  int sign = v >> 7, e = (v >> mb) & ((1 << eb) - 1), m = v & ((1 << mb) - 1);
  double x;
  if (fn && e == (1 << eb) - 1 && m == (1 << mb) - 1) return NAN;
  if (!fn && e == (1 << eb) - 1) x = m ? NAN : INFINITY;
  else if (e == 0) x = ldexp(m, 1 - bias - mb);
  else x = ldexp(m + (1 << mb), e - bias - mb);
  return sign ? -x : x;
}

static uint8_t f8_encode(double x, int eb, int mb, int bias, bool fn) {
  uint8_t sign = signbit(x) ? 0x80 : 0;
  uint8_t nan = fn ? 0x7f : (uint8_t)(((1 << eb) - 1) << mb | (1 << (mb - 1)));
  if (isnan(x)) return sign | nan;
  double a = fabs(x);
  if (isinf(a)) return fn ? (sign | nan) : (uint8_t)(sign | ((1 << eb) - 1) << mb);
  int e;
  frexp(a, &e);
  e -= 1;                                  /* a = 1.f * 2^e */
  if (e < 1 - bias) e = 1 - bias;          /* subnormal range: fixed scale */
  double m = nearbyint(ldexp(a, mb - e));  /* mantissa with the implicit bit, rounded even */
  if (m >= (double)(2 << mb)) { m /= 2; e++; }
  int biased = m >= (double)(1 << mb) ? e + bias : 0;
  int man = (int)m & ((1 << mb) - 1);
  int top = fn ? (1 << eb) - 1 : (1 << eb) - 2;
  if (biased > top || (fn && biased == top && man == (1 << mb) - 1))
    return fn ? (sign | nan) : (uint8_t)(sign | ((1 << eb) - 1) << mb);
  return (uint8_t)(sign | biased << mb | man);
}

bool rt_is_float(prog_dtype t) {
  return t == PROG_F32 || t == PROG_F64 || t == PROG_BF16 || t == PROG_F16 ||
         t == PROG_F8E4M3FN || t == PROG_F8E5M2;
}

bool rt_is_unsigned(prog_dtype t) {
  return t == PROG_U8 || t == PROG_U16 || t == PROG_U32 || t == PROG_U64 || t == PROG_PRED ||
         t == PROG_U4;
}

/* ---- element access (a per-element switch: for convert and the rarer ops) ---------------- */

double rt_get_f(prog_dtype t, const void* p, int64_t i) {
  switch (t) {
    case PROG_F32: return LD(float, p, i);
    case PROG_F64: return LD(double, p, i);
    case PROG_BF16: return rt_bf16_to_f32(LD(uint16_t, p, i));
    case PROG_F16: return rt_f16_to_f32(LD(uint16_t, p, i));
    case PROG_F8E4M3FN: return f8_decode(((const uint8_t*)p)[i], 4, 3, 7, true);
    case PROG_F8E5M2: return f8_decode(((const uint8_t*)p)[i], 5, 2, 15, false);
    case PROG_U64: return (double)LD(uint64_t, p, i);
    case PROG_C64: return LD(float, p, 2 * i);  /* the real part */
    case PROG_C128: return LD(double, p, 2 * i);
    default: return (double)rt_get_i(t, p, i);
  }
}

static int64_t saturate(double x, double lo, double hi) {
  if (isnan(x)) return 0;
  if (x <= lo) return (int64_t)lo;
  if (x >= hi) return (int64_t)hi;
  return (int64_t)x;
}

int64_t rt_get_i(prog_dtype t, const void* p, int64_t i) {
  switch (t) {
    case PROG_PRED: return ((const uint8_t*)p)[i] != 0;
    case PROG_S8: return ((const int8_t*)p)[i];
    case PROG_U8: return ((const uint8_t*)p)[i];
    case PROG_S16: return LD(int16_t, p, i);
    case PROG_U16: return LD(uint16_t, p, i);
    case PROG_S32: return LD(int32_t, p, i);
    case PROG_U32: return LD(uint32_t, p, i);
    case PROG_S64: return LD(int64_t, p, i);
    case PROG_U64: return (int64_t)LD(uint64_t, p, i);
    case PROG_S4: return (int8_t)(uint8_t)(((const uint8_t*)p)[i] << 4) >> 4;
    case PROG_U4: return ((const uint8_t*)p)[i] & 0xf;
    case PROG_TOKEN: return 0;
    /* a float as an integer: saturated, NaN 0 (a plain cast is undefined out of range) */
    default: return saturate(rt_get_f(t, p, i), -9223372036854775808.0, 9223372036854774784.0);
  }
}

void rt_put(prog_dtype t, void* p, int64_t i, double f, int64_t n, bool from_float) {
  switch (t) {
    case PROG_C64:  /* a real value: imaginary part 0 */
      ST(float, p, 2 * i, from_float ? (float)f : (float)n);
      ST(float, p, 2 * i + 1, 0);
      return;
    case PROG_C128:
      ST(double, p, 2 * i, from_float ? f : (double)n);
      ST(double, p, 2 * i + 1, 0);
      return;
    case PROG_F32: ST(float, p, i, from_float ? (float)f : (float)n); return;
    case PROG_F64: ST(double, p, i, from_float ? f : (double)n); return;
    case PROG_BF16: ST(uint16_t, p, i, rt_f32_to_bf16(from_float ? (float)f : (float)n)); return;
    case PROG_F16: ST(uint16_t, p, i, rt_f32_to_f16(from_float ? (float)f : (float)n)); return;
    case PROG_F8E4M3FN:
      ((uint8_t*)p)[i] = f8_encode(from_float ? (double)(float)f : (double)n, 4, 3, 7, true);
      return;
    case PROG_F8E5M2:
      ((uint8_t*)p)[i] = f8_encode(from_float ? (double)(float)f : (double)n, 5, 2, 15, false);
      return;
    case PROG_PRED: ((uint8_t*)p)[i] = from_float ? f != 0 : n != 0; return;
    case PROG_S8: ((int8_t*)p)[i] = (int8_t)(from_float ? saturate(f, -128, 127) : n); return;
    case PROG_S4: ((uint8_t*)p)[i] = (uint8_t)((from_float ? saturate(f, -8, 7) : n) & 0xf); return;
    case PROG_TOKEN: return;  /* no bytes */
    case PROG_U4: ((uint8_t*)p)[i] = (uint8_t)((from_float ? saturate(f, 0, 15) : n) & 0xf); return;
    case PROG_U8: ((uint8_t*)p)[i] = (uint8_t)(from_float ? saturate(f, 0, 255) : n); return;
    case PROG_S16:
      ST(int16_t, p, i, (int16_t)(from_float ? saturate(f, -32768, 32767) : n));
      return;
    case PROG_U16: ST(uint16_t, p, i, (uint16_t)(from_float ? saturate(f, 0, 65535) : n)); return;
    case PROG_S32:
      ST(int32_t, p, i, (int32_t)(from_float ? saturate(f, -2147483648.0, 2147483647.0) : n));
      return;
    case PROG_U32:
      ST(uint32_t, p, i, (uint32_t)(from_float ? saturate(f, 0, 4294967295.0) : n));
      return;
    case PROG_S64:
      ST(int64_t, p, i, from_float ? saturate(f, -9223372036854775808.0, 9223372036854774784.0) : n);
      return;
    case PROG_U64:
      if (from_float) {
        ST(uint64_t, p, i, isnan(f) || f <= 0 ? 0 : f >= 18446744073709551615.0
                                                     ? UINT64_MAX : (uint64_t)f);
      } else {
        ST(uint64_t, p, i, (uint64_t)n);
      }
      return;
  }
}

/* Copies a `rank`-d box of elements: dst and src advance by their own (element) strides per
 * dimension.  Broadcast (stride 0), transpose, slice, reverse (negative strides) and
 * concatenate are all this one loop nest. */
void rt_strided_copy(size_t esize, int rank, const int64_t* dims, char* dst,
                     const int64_t* dst_strides, const char* src, const int64_t* src_strides) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  if (n == 0) return;
  if (rank == 0) {
    memcpy(dst, src, esize);
    return;
  }
  /* Merge dimensions that step through both arrays as one (a contiguous run, or a broadcast:
   * stride 0 on both sides of the merge) and drop those of size 1, so a broadcast or a copy of
   * rows becomes few long inner loops: memcpy, or one value stored along a row. */
  int64_t cd[PROG_MAX_RANK], cds[PROG_MAX_RANK], css[PROG_MAX_RANK];
  int cr = 0;
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1) continue;
    if (cr > 0 && cds[cr - 1] == dst_strides[d] * dims[d] && css[cr - 1] == src_strides[d] * dims[d]) {
      cd[cr - 1] *= dims[d];
      cds[cr - 1] = dst_strides[d];
      css[cr - 1] = src_strides[d];
      continue;
    }
    cd[cr] = dims[d];
    cds[cr] = dst_strides[d];
    css[cr] = src_strides[d];
    cr++;
  }
  if (cr == 0) {
    memcpy(dst, src, esize);
    return;
  }
  rank = cr;
  dims = cd;
  dst_strides = cds;
  src_strides = css;
  int64_t idx[PROG_MAX_RANK] = {0};
  int inner = rank - 1;
  int64_t len = dims[inner], ds = dst_strides[inner], ss = src_strides[inner];
  for (;;) {
    if (ds == 1 && ss == 1) {
      memmove(dst, src, (size_t)len * esize);
    } else if (ds == 1 && ss == 0 && esize == 4) {
      uint32_t v = LD(uint32_t, src, 0);
      for (int64_t i = 0; i < len; i++) ST(uint32_t, dst, i, v);
    } else switch (esize) {  /* the inner loop, by element size, so the compiler can tighten it */
      case 4:
        for (int64_t i = 0; i < len; i++) ST(uint32_t, dst, i * ds, LD(uint32_t, src, i * ss));
        break;
      case 8:
        for (int64_t i = 0; i < len; i++) ST(uint64_t, dst, i * ds, LD(uint64_t, src, i * ss));
        break;
      case 2:
        for (int64_t i = 0; i < len; i++) ST(uint16_t, dst, i * ds, LD(uint16_t, src, i * ss));
        break;
      case 1:
        for (int64_t i = 0; i < len; i++) dst[i * ds] = src[i * ss];
        break;
      default:
        for (int64_t i = 0; i < len; i++)
          memcpy(dst + i * ds * (int64_t)esize, src + i * ss * (int64_t)esize, esize);
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

void rt_strides(const prog_shape* s, int64_t* strides) {
  int64_t st = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    strides[d] = st;
    st *= s->dims[d];
  }
}
