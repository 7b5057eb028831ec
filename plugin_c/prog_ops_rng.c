/* prog_ops_rng.c -- rng_bit_generator, with the bits XLA:CPU gives.
 *
 * StableHLO leaves the bits of each algorithm to the implementation; jax compares them with
 * what XLA produces, so the device follows XLA's expansion of the op (its RngBitGenerator
 * expander and the Philox / ThreeFry builders): DEFAULT is Philox on XLA:CPU.  The state is
 * u64[2]: word 0 is the key, word 1 the counter, and only the counter advances.
 *
 * Philox4x32-10: the 128-bit counter is (low = state[1], high = state[0]); block i encrypts
 * counter + i under the key's two 32-bit halves and yields four words; 32-bit (and narrower,
 * truncated) outputs take the words in order, 64-bit outputs pair words (0,1) and (2,3) low
 * word first.  The counter advances by the number of blocks.
 *
 * ThreeFry2x32-20: counter state[1] + j encrypts to two words.  64-bit outputs use element j's
 * counter for both halves.  32-bit outputs halve the shape along one dimension (the first of
 * even size, else the largest), so element q of that dimension takes word q % 2 of the
 * counter of its half-shape position q / 2; the counter advances by the half shape's size.
 * Only the results are computed here, element by element, from those rules.
 */
#include <string.h>

#include "prog_internal.h"

static void philox_block(uint32_t x[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)x[0] * 0xD2511F53u, p1 = (uint64_t)x[2] * 0xCD9E8D57u;
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0, y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1, y3 = (uint32_t)p0;
    x[0] = y0, x[1] = y1, x[2] = y2, x[3] = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

static uint32_t rotl32(uint32_t v, int d) { return (v << d) | (v >> (32 - d)); }

static void threefry_block(uint32_t x[2], uint32_t k0, uint32_t k1) {
  static const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  x[0] += ks[0];
  x[1] += ks[1];
  for (int group = 0; group < 5; group++) {
    for (int r = 0; r < 4; r++) {
      x[0] += x[1];
      x[1] = rotl32(x[1], rot[(group % 2) * 4 + r]);
      x[1] ^= x[0];
    }
    x[0] += ks[(group + 1) % 3];
    x[1] += ks[(group + 2) % 3] + (uint32_t)(group + 1);
  }
}

static void put_bits(prog_dtype t, void* o, int64_t i, uint64_t bits) {
  switch (t) {
    case PROG_U8: ((uint8_t*)o)[i] = (uint8_t)bits; break;
    case PROG_U16: ST(uint16_t, o, i, (uint16_t)bits); break;
    case PROG_U32: ST(uint32_t, o, i, (uint32_t)bits); break;
    default: ST(uint64_t, o, i, bits); break;
  }
}

static void philox(const uint64_t* state, uint64_t* new_state, const prog_shape* s, void* o) {
  int64_t n = prog_shape_elements(s);
  bool wide = s->dtype == PROG_U64;
  int64_t words = wide ? 2 * n : n, blocks = (words + 3) / 4;
  uint32_t k0 = (uint32_t)state[0], k1 = (uint32_t)(state[0] >> 32);
  uint64_t low = state[1], high = state[0];
  for (int64_t b = 0; b < blocks; b++) {
    uint64_t lo = low + (uint64_t)b, hi = high + (lo < low);
    uint32_t x[4] = {(uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32)};
    philox_block(x, k0, k1);
    if (wide) {
      for (int w = 0; w < 2 && 2 * b + w < n; w++)
        put_bits(s->dtype, o, 2 * b + w, (uint64_t)x[2 * w] | (uint64_t)x[2 * w + 1] << 32);
    } else {
      for (int w = 0; w < 4 && 4 * b + w < n; w++) put_bits(s->dtype, o, 4 * b + w, x[w]);
    }
  }
  new_state[0] = state[0];
  new_state[1] = low + (uint64_t)blocks;  /* XLA keeps the low word only */
}

static void threefry(const uint64_t* state, uint64_t* new_state, const prog_shape* s, void* o) {
  int64_t n = prog_shape_elements(s);
  uint32_t k0 = (uint32_t)state[0], k1 = (uint32_t)(state[0] >> 32);
  uint64_t counter = state[1];
  new_state[0] = state[0];
  if (s->dtype == PROG_U64) {
    for (int64_t j = 0; j < n; j++) {
      uint64_t c = counter + (uint64_t)j;
      uint32_t x[2] = {(uint32_t)c, (uint32_t)(c >> 32)};
      threefry_block(x, k0, k1);
      put_bits(s->dtype, o, j, (uint64_t)x[0] | (uint64_t)x[1] << 32);
    }
    new_state[1] = counter + (uint64_t)n;
    return;
  }
  /* the half shape: one dimension (split) becomes ceil(d / 2) */
  int split = -1;
  for (int d = 0; d < s->rank && split < 0; d++)
    if (s->dims[d] % 2 == 0) split = d;
  if (split < 0)
    for (int d = 0; d < s->rank; d++)
      if (split < 0 || s->dims[d] > s->dims[split]) split = d;
  int64_t half_elems = 1;
  int64_t half[PROG_MAX_RANK];
  for (int d = 0; d < s->rank; d++) {
    half[d] = d == split ? (s->dims[d] + 1) / 2 : s->dims[d];
    half_elems *= half[d];
  }
  new_state[1] = counter + (uint64_t)half_elems;  /* a 0-d output: half shape [1] */
  if (s->rank == 0) {
    uint32_t x[2] = {(uint32_t)counter, (uint32_t)(counter >> 32)};
    threefry_block(x, k0, k1);
    put_bits(s->dtype, o, 0, x[0]);
    return;
  }
  int64_t idx[PROG_MAX_RANK] = {0};
  for (int64_t j = 0; j < n; j++) {
    int64_t h = 0;  /* the row-major position in the half shape */
    for (int d = 0; d < s->rank; d++) h = h * half[d] + (d == split ? idx[d] / 2 : idx[d]);
    uint64_t c = counter + (uint64_t)h;
    uint32_t x[2] = {(uint32_t)c, (uint32_t)(c >> 32)};
    threefry_block(x, k0, k1);
    put_bits(s->dtype, o, j, x[idx[split] % 2]);
    for (int d = s->rank - 1; d >= 0; d--) {
      if (++idx[d] < s->dims[d]) break;
      idx[d] = 0;
    }
  }
}

int rt_rng(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args, void** vals) {
  (void)r;
  uint64_t state[2], new_state[2];
  memcpy(state, args[0], sizeof state);  /* the caller's buffer, at any alignment */
  const prog_shape* s = &f->values[in->out + 1];
  if (in->iarg == PROG_RNG_THREE_FRY) threefry(state, new_state, s, vals[in->out + 1]);
  else philox(state, new_state, s, vals[in->out + 1]);
  memcpy(vals[in->out], new_state, sizeof new_state);
  return PROG_OK;
}
