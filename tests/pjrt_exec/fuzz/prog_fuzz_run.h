/* prog_fuzz_run.h -- what every fuzzer of the program reader does with one input: parse it,
 * check the error it gives (a known code and a message), and run a program that parses on
 * zero-filled inputs.  Shared by the deterministic driver (prog_fuzz_main.c) and the
 * coverage-guided libFuzzer target (prog_libfuzzer.c), so both hold inputs to one contract. */
#ifndef PROG_FUZZ_RUN_H
#define PROG_FUZZ_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog.h"

typedef struct {
  long iterations, parsed, ran, invalid, unimplemented, exhausted;
} fuzz_counts;

/* Runs a parsed program on zero inputs when its buffers total at most `limit` bytes.
 * Buffers are allocated at an odd offset from malloc's alignment (`skew` bytes, 0 or 1..7)
 * so that the kernels' element accesses are exercised at every alignment a caller may give:
 * an input's address is the caller's choice (a PJRT host buffer, a numpy view). */
static int fuzz_run_zeros(const prog_program* p, size_t limit, size_t skew) {
  int ni = prog_num_inputs(p), no = prog_num_outputs(p);
  size_t total = 0;
  for (int k = 0; k < ni; k++)
    total += (size_t)prog_shape_elements(prog_input(p, k)) * prog_dtype_size(prog_input(p, k)->dtype);
  for (int k = 0; k < no; k++)
    total += (size_t)prog_shape_elements(prog_output(p, k)) * prog_dtype_size(prog_output(p, k)->dtype);
  if (total > limit) return -1;
  char** in = calloc((size_t)ni + 1, sizeof(char*));
  char** out = calloc((size_t)no + 1, sizeof(char*));
  const void** inp = calloc((size_t)ni + 1, sizeof(void*));
  void** outp = calloc((size_t)no + 1, sizeof(void*));
  /* exactly the bytes the shape needs past the skew: ASan sees any read past the end */
  for (int k = 0; k < ni; k++) {
    in[k] = calloc(1, (size_t)prog_shape_elements(prog_input(p, k)) * prog_dtype_size(prog_input(p, k)->dtype) + skew + 1);
    inp[k] = in[k] + skew;
  }
  for (int k = 0; k < no; k++) {
    out[k] = calloc(1, (size_t)prog_shape_elements(prog_output(p, k)) * prog_dtype_size(prog_output(p, k)->dtype) + skew + 1);
    outp[k] = out[k] + skew;
  }
  prog_status st;
  int code = prog_run(p, inp, outp, &st);
  if (code != PROG_OK && st.message[0] == 0) {
    fprintf(stderr, "run error %d without a message\n", code);
    abort();
  }
  for (int k = 0; k < ni; k++) free(in[k]);
  for (int k = 0; k < no; k++) free(out[k]);
  free(in);
  free(out);
  free(inp);
  free(outp);
  return code;
}

/* One input, start to end; aborts (a crash the fuzzers report) on a broken contract. */
static void fuzz_one(const unsigned char* data, size_t size, size_t limit, size_t skew,
                     fuzz_counts* c) {
  prog_status st;
  prog_program* p = prog_parse(data, size, &st);
  c->iterations++;
  if (p != NULL) {
    c->parsed++;
    if (fuzz_run_zeros(p, limit, skew) >= 0) c->ran++;
    prog_free(p);
    return;
  }
  if (st.message[0] == 0) { fprintf(stderr, "parse error without a message\n"); abort(); }
  if (st.code == PROG_INVALID_ARGUMENT) c->invalid++;
  else if (st.code == PROG_UNIMPLEMENTED) c->unimplemented++;
  else if (st.code == PROG_RESOURCE_EXHAUSTED) c->exhausted++;
  else { fprintf(stderr, "unexpected code %d: %s\n", st.code, st.message); abort(); }
}

#endif /* PROG_FUZZ_RUN_H */
