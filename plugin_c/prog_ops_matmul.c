/* prog_ops_matmul.c -- the matrix product at the heart of dot_general: C += A B, row-major,
 * A[M,K], B[K,N], C[M,N].
 *
 * Blocked for the cache: a panel of KB rows of B (NB columns wide) stays in L2 while four rows
 * of C are updated from it at once, so each loaded element of B feeds four multiply-adds and
 * the innermost loop over j streams contiguous rows the compiler vectorizes.  Every element of
 * C still accumulates its products in k order, one by one (no reassociation), so the result
 * is the same as the naive loop's, bit for bit.
 */
#include "prog_internal.h"

enum { NB = 512, KB = 128 };

#define MATMUL_BLOCKED(T, NAME)                                                            \
  void NAME(const T* a, const T* b, T* c, int64_t M, int64_t N, int64_t K) {               \
    for (int64_t j0 = 0; j0 < N; j0 += NB) {                                               \
      int64_t jn = N - j0 < NB ? N - j0 : NB;                                              \
      for (int64_t k0 = 0; k0 < K; k0 += KB) {                                             \
        int64_t kn = K - k0 < KB ? K - k0 : KB;                                            \
        int64_t i = 0;                                                                     \
        for (; i + 4 <= M; i += 4) {                                                       \
          T* restrict c0 = c + i * N + j0;                                                 \
          T* restrict c1 = c0 + N;                                                         \
          T* restrict c2 = c1 + N;                                                         \
          T* restrict c3 = c2 + N;                                                         \
          for (int64_t k = k0; k < k0 + kn; k++) {                                         \
            const T* restrict bk = b + k * N + j0;                                         \
            T a0 = a[i * K + k], a1 = a[(i + 1) * K + k], a2 = a[(i + 2) * K + k],         \
              a3 = a[(i + 3) * K + k];                                                     \
            for (int64_t j = 0; j < jn; j++) {                                             \
              T x = bk[j];                                                                 \
              c0[j] += a0 * x;                                                             \
              c1[j] += a1 * x;                                                             \
              c2[j] += a2 * x;                                                             \
              c3[j] += a3 * x;                                                             \
            }                                                                              \
          }                                                                                \
        }                                                                                  \
        for (; i < M; i++) {                                                               \
          T* restrict ci = c + i * N + j0;                                                 \
          for (int64_t k = k0; k < k0 + kn; k++) {                                         \
            const T* restrict bk = b + k * N + j0;                                         \
            T x = a[i * K + k];                                                            \
            for (int64_t j = 0; j < jn; j++) ci[j] += x * bk[j];                           \
          }                                                                                \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }

MATMUL_BLOCKED(float, rt_matmul_f32)
MATMUL_BLOCKED(double, rt_matmul_f64)
