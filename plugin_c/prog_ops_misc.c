/* prog_ops_misc.c -- the bit-level ops: is_finite, reduce_precision, bitcast_convert. */
#include <math.h>
#include <string.h>

#include "prog_internal.h"

/* Rounds the mantissa to `m` bits (to nearest even) and the exponent range to `e` bits, the
 * way XLA does: on the bits of a value with `man` mantissa and `exp` exponent bits. */
static uint64_t reduce_bits(uint64_t x, int man, int exp, int e, int m) {
  uint64_t sign = (uint64_t)1 << (man + exp);
  if (m < man) {
    uint64_t last = (uint64_t)1 << (man - m);
    uint64_t bias = (last >> 1) - 1 + ((x & last) >> (man - m));
    x = (x + bias) & ~(last - 1);
  }
  if (e < exp) {
    uint64_t exp_mask = (((uint64_t)1 << exp) - 1) << man;
    int64_t ebias = ((int64_t)1 << (exp - 1)) - 1, rbias = ((int64_t)1 << (e - 1)) - 1;
    uint64_t xe = x & exp_mask;
    uint64_t max_e = (uint64_t)(ebias + rbias) << man, min_e = (uint64_t)(ebias - rbias) << man;
    if (xe > max_e) x = (x & sign) | exp_mask;
    else if (xe <= min_e) x = x & sign;
  }
  return x;
}

static double reduce_precision(double v, bool f64, int e, int m) {
  if (isnan(v)) return m > 0 ? v : INFINITY;  /* with no mantissa bits, NaN becomes infinity */
  if (f64) {
    uint64_t b;
    memcpy(&b, &v, 8);
    b = reduce_bits(b, 52, 11, e, m);
    memcpy(&v, &b, 8);
    return v;
  }
  float f = (float)v;
  uint32_t b;
  memcpy(&b, &f, 4);
  b = (uint32_t)reduce_bits(b, 23, 8, e < 8 ? e : 8, m < 23 ? m : 23);
  memcpy(&f, &b, 4);
  return f;
}

int rt_misc(run_ctx* r, const prog_insn* in, const prog_shape* a, void* const* args, void* o) {
  (void)r;
  int64_t n = prog_shape_elements(a);
  switch (in->op) {
    case OP_IS_FINITE:
      for (int64_t i = 0; i < n; i++) ((uint8_t*)o)[i] = isfinite(rt_get_f(a->dtype, args[0], i));
      break;
    case OP_REDUCE_PRECISION:
      for (int64_t i = 0; i < n; i++)
        rt_put(a->dtype, o, i,
               reduce_precision(rt_get_f(a->dtype, args[0], i), a->dtype == PROG_F64, in->iarg,
                                in->iarg2), 0, true);
      break;
    default: {  /* bitcast_convert: the same bits (little-endian, minor dimension last) */
      prog_dtype to = in->shape.dtype;
      bool narrow_in = a->dtype == PROG_S4 || a->dtype == PROG_U4;
      bool narrow_out = to == PROG_S4 || to == PROG_U4;
      if (!narrow_in && !narrow_out) {
        memcpy(o, args[0], rt_bytes(a));
      } else if (narrow_in && narrow_out) {  /* s4 <-> u4: the nibbles */
        for (int64_t i = 0; i < n; i++) ((uint8_t*)o)[i] = ((const uint8_t*)args[0])[i] & 0xf;
      } else if (narrow_out) {  /* each byte of the source is two nibbles, the low one first */
        const uint8_t* src = args[0];
        for (int64_t i = 0; i < 2 * (int64_t)rt_bytes(a); i++)
          ((uint8_t*)o)[i] = (uint8_t)((src[i / 2] >> (4 * (i % 2))) & 0xf);
      } else {  /* two nibbles make each byte of the result */
        const uint8_t* src = args[0];
        size_t bytes = rt_bytes(&in->shape);
        for (size_t i = 0; i < bytes; i++)
          ((uint8_t*)o)[i] = (uint8_t)((src[2 * i] & 0xf) | (src[2 * i + 1] & 0xf) << 4);
      }
      break;
    }
  }
  return PROG_OK;
}
