/* prog_fuzz_main.c -- a bounded mutation fuzzer for the program reader (plugin_c/prog*.c).
 *
 *   prog_fuzz SECONDS SEED artifact...
 *
 * Mutates real artifacts (truncation, byte flips, varint-sized overwrites, insertions,
 * deletions, splices between artifacts), parses each result, and runs every program that
 * parses on zero-filled inputs.  Every input must give a program or an error with a known code
 * and a message; a crash, a sanitizer report or a leak (when built with -fsanitize=address)
 * fails the run.  Prints one summary line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prog.h"

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
  b.data = malloc(b.size + 1);
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

/* Runs a parsed program on zero inputs, if it is small enough to be worth it. */
static int run_zeros(const prog_program* p) {
  int ni = prog_num_inputs(p), no = prog_num_outputs(p);
  size_t total = 0;
  for (int k = 0; k < ni; k++)
    total += (size_t)prog_shape_elements(prog_input(p, k)) * prog_dtype_size(prog_input(p, k)->dtype);
  for (int k = 0; k < no; k++)
    total += (size_t)prog_shape_elements(prog_output(p, k)) * prog_dtype_size(prog_output(p, k)->dtype);
  if (total > ((size_t)64 << 20)) return -1;
  const void** in = calloc((size_t)ni + 1, sizeof(void*));
  void** out = calloc((size_t)no + 1, sizeof(void*));
  for (int k = 0; k < ni; k++)
    in[k] = calloc(1, (size_t)prog_shape_elements(prog_input(p, k)) * prog_dtype_size(prog_input(p, k)->dtype) + 1);
  for (int k = 0; k < no; k++)
    out[k] = calloc(1, (size_t)prog_shape_elements(prog_output(p, k)) * prog_dtype_size(prog_output(p, k)->dtype) + 1);
  prog_status st;
  int code = prog_run(p, in, out, &st);
  for (int k = 0; k < ni; k++) free((void*)in[k]);
  for (int k = 0; k < no; k++) free(out[k]);
  free(in);
  free(out);
  return code;
}

int main(int argc, char** argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s SECONDS SEED artifact...\n", argv[0]); return 2; }
  double seconds = atof(argv[1]);
  rng_state = strtoull(argv[2], NULL, 10) * 2 + 1;
  int n = argc - 3;
  blob* corpus = calloc((size_t)n, sizeof(blob));
  prog_set_loop_limit(1000);  /* a mutated loop bound must not hang the fuzzer */
  for (int k = 0; k < n; k++) corpus[k] = read_file(argv[3 + k]);
  long iterations = 0, parsed = 0, ran = 0, invalid = 0, unimplemented = 0, exhausted = 0;
  clock_t start = clock();
  while ((double)(clock() - start) / CLOCKS_PER_SEC < seconds) {
    blob m = mutate(corpus, n);
    prog_status st;
    prog_program* p = prog_parse(m.data, m.size, &st);
    iterations++;
    if (p != NULL) {
      parsed++;
      if (run_zeros(p) >= 0) ran++;
      prog_free(p);
    } else {
      if (st.message[0] == 0) { fprintf(stderr, "error without a message\n"); return 1; }
      if (st.code == PROG_INVALID_ARGUMENT) invalid++;
      else if (st.code == PROG_UNIMPLEMENTED) unimplemented++;
      else if (st.code == PROG_RESOURCE_EXHAUSTED) exhausted++;
      else { fprintf(stderr, "unexpected code %d: %s\n", st.code, st.message); return 1; }
    }
    free(m.data);
  }
  for (int k = 0; k < n; k++) free(corpus[k].data);
  free(corpus);
  printf("iterations=%ld parsed=%ld ran=%ld invalid_argument=%ld unimplemented=%ld "
         "resource_exhausted=%ld\n", iterations, parsed, ran, invalid, unimplemented, exhausted);
  return 0;
}
