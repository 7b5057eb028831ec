/* prog_ops_matmul.c -- the matrix product at the heart of dot_general: C += A B, C row-major
 * [M,N], A [M,K] and B [K,N] read through element strides (so a transposed operand is read in
 * place, not copied first).
 *
 * The loops of a packed GEMM: a KC x NC block of B and an MC x KC block of A are copied into
 * contiguous panels (B in NR-column strips, A in MR-row strips, zero-padded at the edges), and
 * a micro-kernel updates one MR x NR tile of C from one strip of each, holding the tile in
 * registers across KC steps.  The kernel is plain C over fixed-size arrays, which gcc and
 * clang vectorise at -O3; it is compiled once per instruction set (AVX-512, AVX2, the
 * baseline), the widest the CPU has chosen at run time (rt_isa, prog_ops_vec.c), since the
 * plugin is built for the machine's baseline.  Tile sizes were measured on the development machine (Zen 4): 8 x 32
 * floats under AVX-512 (16 vector accumulators of 32 registers), 4 x 32 under AVX2.
 *
 * Every element of C accumulates its products in k order.  The AVX-512 and AVX2 kernels take
 * one fused multiply-add per product (__builtin_fma/__builtin_fmaf, which gcc and clang inline
 * as vfmadd and vectorise under those targets); the baseline kernel, for a CPU that may have
 * no FMA unit (where fmaf would be a scalar library call), a rounded multiply and a rounded add
 * (FP contraction is off elsewhere), the naive loop's bits.  So the kernels do not agree bit
 * for bit: like XLA:CPU's own (Eigen, fused and blocked), the result is right to the error
 * bound of a K-term dot product, which tests/pjrt_exec/test_prog_matmul.py checks on every
 * kernel.  Fusing was measured (Intel Xeon, AVX-512, one core, in one run against
 * numpy's single-threaded BLAS): f32 256x256 from 0.61x numpy's throughput to 0.93x, 1024x1024
 * from 0.60x to 0.97x: a separate multiply and add per product takes two vector instructions
 * where one FMA does, which capped the kernel at about 105 GFLOPS.
 */
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

enum { KC = 256, MC = 128, NC = 512 };

/* The micro-kernel: tile c (row stride ldc) += ap (kc x MR, k-major) times bp (kc x NR). */
#define GEMM_VARIANT(T, NAME, ATTR, MR, NR, MAC)                                             \
  ATTR static void NAME##_kernel(int64_t kc, const T* restrict ap, const T* restrict bp,    \
                                 T* restrict c, int64_t ldc) {                              \
    T acc[MR][NR];                                                                         \
    for (int i = 0; i < MR; i++)                                                           \
      for (int j = 0; j < NR; j++) acc[i][j] = c[i * ldc + j];                             \
    for (int64_t k = 0; k < kc; k++)                                                       \
      for (int i = 0; i < MR; i++) {                                                       \
        T x = ap[k * MR + i];                                                              \
        for (int j = 0; j < NR; j++) acc[i][j] = MAC(x, bp[k * NR + j], acc[i][j]);          \
      }                                                                                    \
    for (int i = 0; i < MR; i++)                                                           \
      for (int j = 0; j < NR; j++) c[i * ldc + j] = acc[i][j];                             \
  }                                                                                        \
  ATTR static void NAME(const void* a, int64_t ars, int64_t acs, const void* b, int64_t brs, \
                        int64_t bcs, T* c, int64_t M, int64_t N, int64_t K, T* ap, T* bp) { \
    for (int64_t j0 = 0; j0 < N; j0 += NC) {                                               \
      int64_t nc = N - j0 < NC ? N - j0 : NC;                                              \
      for (int64_t k0 = 0; k0 < K; k0 += KC) {                                             \
        int64_t kc = K - k0 < KC ? K - k0 : KC;                                            \
        for (int64_t jr = 0; jr < nc; jr += NR)                                            \
          for (int64_t k = 0; k < kc; k++)                                                 \
            for (int j = 0; j < NR; j++)                                                   \
              bp[jr * kc + k * NR + j] =                                                   \
                  jr + j < nc ? LD(T, b, (k0 + k) * brs + (j0 + jr + j) * bcs) : (T)0;     \
        for (int64_t i0 = 0; i0 < M; i0 += MC) {                                           \
          int64_t mc = M - i0 < MC ? M - i0 : MC;                                          \
          for (int64_t ir = 0; ir < mc; ir += MR)                                          \
            for (int64_t k = 0; k < kc; k++)                                               \
              for (int i = 0; i < MR; i++)                                                 \
                ap[ir * kc + k * MR + i] =                                                 \
                    ir + i < mc ? LD(T, a, (i0 + ir + i) * ars + (k0 + k) * acs) : (T)0;   \
          for (int64_t jr = 0; jr < nc; jr += NR)                                          \
            for (int64_t ir = 0; ir < mc; ir += MR) {                                      \
              T* cij = c + (i0 + ir) * N + j0 + jr;                                        \
              if (ir + MR <= mc && jr + NR <= nc) {                                        \
                NAME##_kernel(kc, ap + ir * kc, bp + jr * kc, cij, N);                     \
                continue;                                                                  \
              }                                                                            \
              /* an edge tile: through a full-size copy, its padding computed and dropped */ \
              T tile[MR * NR];                                                             \
              int64_t mr = mc - ir < MR ? mc - ir : MR, nr = nc - jr < NR ? nc - jr : NR;  \
              for (int i = 0; i < MR; i++)                                                 \
                for (int j = 0; j < NR; j++)                                               \
                  tile[i * NR + j] = i < mr && j < nr ? cij[i * N + j] : (T)0;             \
              NAME##_kernel(kc, ap + ir * kc, bp + jr * kc, tile, NR);                     \
              for (int i = 0; i < mr; i++)                                                 \
                for (int j = 0; j < nr; j++) cij[i * N + j] = tile[i * NR + j];            \
            }                                                                              \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }

#define MAC_SEPARATE(x, y, acc) ((acc) + (x) * (y))

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_VARIANTS 1
#define ATTR_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define ATTR_AVX2 __attribute__((target("avx2,fma")))
GEMM_VARIANT(float, gemm_f32_avx512, ATTR_AVX512, 8, 32, __builtin_fmaf)
GEMM_VARIANT(float, gemm_f32_avx2, ATTR_AVX2, 4, 32, __builtin_fmaf)
GEMM_VARIANT(double, gemm_f64_avx512, ATTR_AVX512, 8, 16, __builtin_fma)
GEMM_VARIANT(double, gemm_f64_avx2, ATTR_AVX2, 4, 16, __builtin_fma)
#endif
GEMM_VARIANT(float, gemm_f32_base, , 4, 8, MAC_SEPARATE)
GEMM_VARIANT(double, gemm_f64_base, , 4, 4, MAC_SEPARATE)

/* The widest tile of all variants, for the panel buffers. */
enum { MR_MAX = 8, NR_MAX = 32 };

#define MATMUL_ENTRY(T, SUF)                                                               \
  int rt_matmul_##SUF(const void* a, int64_t ars, int64_t acs, const void* b, int64_t brs,  \
                      int64_t bcs, T* c, int64_t M, int64_t N, int64_t K) {                 \
    if (M <= 0 || N <= 0 || K <= 0) return 0;                                              \
    T* ap = rt_alloc(sizeof(T) * (size_t)(MC + MR_MAX) * KC);                                \
    T* bp = rt_alloc(sizeof(T) * (size_t)(NC + NR_MAX) * KC);                                \
    if (ap == NULL || bp == NULL) { rt_free(ap); rt_free(bp); return -1; }                       \
    switch (rt_isa()) {                                                                   \
      VARIANT_CASES_##SUF                                                                  \
      default: gemm_##SUF##_base(a, ars, acs, b, brs, bcs, c, M, N, K, ap, bp); break;     \
    }                                                                                      \
    rt_free(ap);                                                                           \
    rt_free(bp);                                                                           \
    return 0;                                                                              \
  }

#ifdef HAVE_X86_VARIANTS
#define VARIANT_CASES(SUF)                                                                 \
  case RT_ISA_AVX512: gemm_##SUF##_avx512(a, ars, acs, b, brs, bcs, c, M, N, K, ap, bp); break; \
  case RT_ISA_AVX2: gemm_##SUF##_avx2(a, ars, acs, b, brs, bcs, c, M, N, K, ap, bp); break;
#else
#define VARIANT_CASES(SUF)
#endif
#define VARIANT_CASES_f32 VARIANT_CASES(f32)
#define VARIANT_CASES_f64 VARIANT_CASES(f64)

MATMUL_ENTRY(float, f32)
MATMUL_ENTRY(double, f64)
