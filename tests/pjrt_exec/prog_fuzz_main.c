/* prog_fuzz_main.c -- a deterministic mutation fuzzer for the program reader (plugin_c/prog*.c).
 *
 *   prog_fuzz COUNT SEED artifact...     COUNT mutants of the artifacts, from SEED
 *   prog_fuzz --replay file...           each file once (the regression corpus)
 *
 * Mutates real artifacts (truncation, byte flips, varint-sized overwrites, insertions,
 * deletions, splices between artifacts), parses each result, and runs every program that
 * parses on zero-filled inputs (fuzz/prog_fuzz_run.h).  Every input must give a program or an
 * error with a known code and a message; a crash, a sanitizer report or a leak (when built with
 * -fsanitize=address) fails the run.  Prints one summary line.
 *
 * The number of mutants, not a time budget, bounds the run: every machine tries the same
 * inputs, however fast it is, so a failure seen on one reproduces on any other.  With
 * PROG_FUZZ_SAVE=path set, each mutant is written to `path` before it runs: after a crash the
 * file holds the input that caused it (how the corpus's inputs were made).  Each mutant's
 * buffers sit at an offset of 0 to 7 bytes from malloc's alignment, drawn from the seed too. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/prog_fuzz_run.h"

typedef struct { unsigned char* data; size_t size; } blob;

static uint64_t rng_state;
static uint64_t rnd(void) {  /* xorshift64*: reproducible from the seed */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static blob read_file(const char* path) {
  blob b = {0};
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  fseek(f, 0, SEEK_END);
  b.size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  b.data = malloc(b.size ? b.size : 1);  /* exactly its size: see the mutants */
  if (fread(b.data, 1, b.size, f) != b.size) { perror(path); exit(2); }
  fclose(f);
  return b;
}

/* One mutant of `src` (fresh allocation, up to twice the size plus slack). */
static blob mutate(const blob* corpus, int n) {
  const blob* src = &corpus[below((size_t)n)];
  size_t cap = src->size * 2 + 64;
  blob m = {malloc(cap), src->size};
  memcpy(m.data, src->data, src->size);
  int rounds = 1 + (int)below(4);
  for (int r = 0; r < rounds; r++) {
    switch (below(6)) {
      case 0: m.size = below(m.size + 1); break;                               /* truncate */
      case 1: if (m.size) m.data[below(m.size)] ^= (unsigned char)(1u << below(8)); break;
      case 2: if (m.size) m.data[below(m.size)] = (unsigned char)rnd(); break;
      case 3: {                                                               /* big varint */
        if (m.size < 10) break;
        size_t at = below(m.size - 9);
        m.data[at] = below(2) ? 0x00 : (unsigned char)(rnd() & 0xfe);
        for (int k = 1; k < 9; k++) m.data[at + k] = (unsigned char)rnd();
        break;
      }
      case 4: {                                                               /* delete */
        if (!m.size) break;
        size_t at = below(m.size), len = 1 + below(16);
        if (at + len > m.size) len = m.size - at;
        memmove(m.data + at, m.data + at + len, m.size - at - len);
        m.size -= len;
        break;
      }
      default: {                                                              /* splice */
        const blob* other = &corpus[below((size_t)n)];
        if (!other->size) break;
        size_t from = below(other->size), len = 1 + below(32), at = below(m.size + 1);
        if (from + len > other->size) len = other->size - from;
        if (m.size + len > cap) break;
        memmove(m.data + at + len, m.data + at, m.size - at);
        memcpy(m.data + at, other->data + from, len);
        m.size += len;
      }
    }
  }
  return m;
}

static void save(const char* path, const blob* m) {
  FILE* f = fopen(path, "wb");
  if (!f) { perror(path); exit(2); }
  fwrite(m->data, 1, m->size, f);
  fclose(f);
}

#define RUN_LIMIT ((size_t)64 << 20)  /* bytes of inputs and outputs worth running */

int main(int argc, char** argv) {
  fuzz_counts c = {0};
  prog_set_loop_limit(1000);  /* a mutated loop bound must not hang the fuzzer */
  if (argc >= 2 && strcmp(argv[1], "--replay") == 0) {
    /* each corpus input at malloc's alignment and at an odd offset from it */
    for (int k = 2; k < argc; k++) {
      blob b = read_file(argv[k]);
      fuzz_one(b.data, b.size, RUN_LIMIT, 0, &c);
      fuzz_one(b.data, b.size, RUN_LIMIT, 3, &c);
      free(b.data);
    }
  } else {
    if (argc < 4) {
      fprintf(stderr, "usage: %s COUNT SEED artifact... | --replay file...\n", argv[0]);
      return 2;
    }
    long count = atol(argv[1]);
    rng_state = strtoull(argv[2], NULL, 10) * 2 + 1;
    const char* save_to = getenv("PROG_FUZZ_SAVE");
    /* PROG_FUZZ_ALIGNED=1: the same mutants, every buffer at malloc's alignment (to tell a
     * fault of the element accesses from one of the program's checks) */
    bool aligned = getenv("PROG_FUZZ_ALIGNED") != NULL;
    int n = argc - 3;
    blob* corpus = calloc((size_t)n, sizeof(blob));
    for (int k = 0; k < n; k++) corpus[k] = read_file(argv[3 + k]);
    for (long i = 0; i < count; i++) {
      blob m = mutate(corpus, n);
      size_t skew = (size_t)(rnd() % 8);  /* drawn after the mutant: part of the sequence */
      if (aligned) skew = 0;
      if (save_to) save(save_to, &m);
      /* parsed from an allocation of exactly its size: ASan sees a read one byte past it */
      unsigned char* exact = malloc(m.size ? m.size : 1);
      memcpy(exact, m.data, m.size);
      free(m.data);
      fuzz_one(exact, m.size, RUN_LIMIT, skew, &c);
      free(exact);
    }
    for (int k = 0; k < n; k++) free(corpus[k].data);
    free(corpus);
  }
  printf("iterations=%ld parsed=%ld ran=%ld invalid_argument=%ld unimplemented=%ld "
         "resource_exhausted=%ld\n", c.iterations, c.parsed, c.ran, c.invalid, c.unimplemented,
         c.exhausted);
  return 0;
}
