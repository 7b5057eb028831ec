/* prog_libfuzzer.c -- a coverage-guided libFuzzer target for the program reader and the
 * interpreter (plugin_c/prog*.c): each input is parsed as an artifact (bytecode or text) and,
 * when it parses, run on zero-filled inputs, under the contract of prog_fuzz_run.h (a program
 * or an error with a known code and a message; never a crash or a sanitizer report).
 *
 * Built and run by run_libfuzzer.sh in this folder (clang -fsanitize=fuzzer,address,undefined),
 * seeded from ../corpus.  The buffers' offset from malloc's alignment is the input's size
 * modulo 8, so the fuzzer reaches every alignment without a byte of the input spent on it. */
#include <stddef.h>
#include <stdint.h>

#include "prog_fuzz_run.h"

/* Inputs and outputs above this are not run: a run must take milliseconds, not seconds. */
#define RUN_LIMIT ((size_t)1 << 20)

int LLVMFuzzerInitialize(int* argc, char*** argv);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  prog_set_loop_limit(200);  /* a mutated loop bound must not hang the fuzzer */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_counts counts = {0};
  fuzz_one(data, size, RUN_LIMIT, size % 8, &counts);
  return 0;
}
