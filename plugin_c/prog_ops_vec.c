/* prog_ops_vec.c -- the instruction set the widest kernels may use, chosen once when the plugin
 * first asks (the plugin is built for the machine's baseline), and the elementwise kernels
 * that are worth a copy per instruction set: f32 tanh.
 *
 * tanh of an f32 is computed in double from the exact widening of x: y = 2|x| (at most 20:
 * tanh(10) rounds to 1 in f32), expm1(y) from its Taylor series below y = 0.6 and as
 * exp(y) - 1 above it (y = k ln2 + r, |r| <= ln2/2, exp(r) to its r^12 term, 2^k made from
 * its bits), then tanh|x| = expm1(y) / (expm1(y) + 2), rounded once to f32 and given x's sign;
 * NaN gives x + x (quiet), +-inf gives +-1, -0 gives -0.  The double value is within about
 * 1e-14 of tanh|x| relative, so the f32 result is tanh(x) correctly rounded unless the exact
 * value lies within that distance of a rounding boundary; checked over every positive f32
 * against (float)tanh((double)x) of glibc (see the commit that added this file).  glibc's
 * tanhf, used before, is a scalar call of about 13 ns an element on the development Xeon;
 * this loop, with no branch and no call (selects are bit masks), vectorises: 2.7 ns under
 * AVX2, 2.0 under AVX-512.  Multiplies and adds stay separate (FP contraction off, as
 * everywhere in the plugin), so every variant gives the same bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static rt_isa_kind detect_isa(void) {
  rt_isa_kind best = RT_ISA_BASE;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
    best = RT_ISA_AVX512;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    best = RT_ISA_AVX2;
#endif
  /* DUMPREF_PJRT_ISA=base|avx2 caps the choice, so the tests can run every variant on one
   * machine and check they agree bit for bit */
  const char* cap = getenv("DUMPREF_PJRT_ISA");
  if (cap != NULL && strcmp(cap, "base") == 0) best = RT_ISA_BASE;
  if (cap != NULL && strcmp(cap, "avx2") == 0 && best > RT_ISA_AVX2) best = RT_ISA_AVX2;
  return best;
}

rt_isa_kind rt_isa(void) {
  static int cached = -1;  /* detection is idempotent: a race only repeats it */
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    v = (int)detect_isa();
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return (rt_isa_kind)v;
}

/* c ? a : b through bit masks, which the vectoriser takes where it refuses a branch */
static inline double sel_d(int c, double a, double b) {
  uint64_t ua, ub, m = (uint64_t)0 - (uint64_t)c;
  memcpy(&ua, &a, sizeof ua);
  memcpy(&ub, &b, sizeof ub);
  ua = (ua & m) | (ub & ~m);
  memcpy(&a, &ua, sizeof a);
  return a;
}

static inline float sel_f(int c, float a, float b) {
  uint32_t ua, ub, m = (uint32_t)0 - (uint32_t)c;
  memcpy(&ua, &a, sizeof ua);
  memcpy(&ub, &b, sizeof ub);
  ua = (ua & m) | (ub & ~m);
  memcpy(&a, &ua, sizeof a);
  return a;
}

static inline float tanh_f32(float xf) {
  double ax = fabs((double)xf);
  double y = 2.0 * sel_d(ax < 10.0, ax, 10.0);
  /* expm1(y) for y < 0.6: the Taylor series to y^14/14! (truncation below 1e-15 relative) */
  double s = 1.0 / 87178291200.0;
  s = s * y + 1.0 / 6227020800.0;
  s = s * y + 1.0 / 479001600.0;
  s = s * y + 1.0 / 39916800.0;
  s = s * y + 1.0 / 3628800.0;
  s = s * y + 1.0 / 362880.0;
  s = s * y + 1.0 / 40320.0;
  s = s * y + 1.0 / 5040.0;
  s = s * y + 1.0 / 720.0;
  s = s * y + 1.0 / 120.0;
  s = s * y + 1.0 / 24.0;
  s = s * y + 1.0 / 6.0;
  s = s * y + 0.5;
  s = s * y + 1.0;
  s = s * y;
  /* exp(y) - 1 otherwise: k = round(y / ln2) in the low bits of kd (the 1.5 * 2^52 trick),
   * r = y - k ln2 (ln2 in two parts, the first exact times any k here), exp(r) to r^12/12! */
  double kd = y * 1.4426950408889634 + 0x1.8p52;
  uint64_t kb;
  memcpy(&kb, &kd, sizeof kb);
  kd -= 0x1.8p52;
  double r = (y - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
  double p = 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  uint64_t sb = (kb << 52) + 0x3FF0000000000000ULL;  /* 2^k: 0 <= k <= 29 */
  double scale;
  memcpy(&scale, &sb, sizeof scale);
  double big = p * scale - 1.0;
  double em1 = sel_d(y < 0.6, s, big);
  float t = (float)(em1 / (em1 + 2.0));
  t = copysignf(t, xf);
  float q = xf + xf;
  return sel_f(xf != xf, q, t);
}

#define TANH_VARIANT(NAME, ATTR)                                                           \
  ATTR static void NAME(const void* a, void* o, int64_t n) {                               \
    for (int64_t i = 0; i < n; i++) ST(float, o, i, tanh_f32(LD(float, a, i)));            \
  }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_VARIANTS 1
TANH_VARIANT(tanh_f32_avx512, __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))))
TANH_VARIANT(tanh_f32_avx2, __attribute__((target("avx2,fma"))))
#endif
TANH_VARIANT(tanh_f32_base, )

void rt_tanh_f32(const void* a, void* o, int64_t n) {
  switch (rt_isa()) {
#ifdef HAVE_X86_VARIANTS
    case RT_ISA_AVX512: tanh_f32_avx512(a, o, n); break;
    case RT_ISA_AVX2: tanh_f32_avx2(a, o, n); break;
#endif
    default: tanh_f32_base(a, o, n); break;
  }
}

float rt_tanhf(float x) { return tanh_f32(x); }
