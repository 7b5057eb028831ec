/* prog.h -- programs: StableHLO read and run in plain C.
 *
 * JAX hands PJRT_Client_Compile a StableHLO portable artifact: MLIR bytecode in the `vhlo`
 * dialect (plus `sdy` sharding annotations and source locations); other PJRT clients send
 * StableHLO as MLIR text under the same format "mlir".  This family reads either, one concern
 * per file, each standing above the ones it uses (tests/pjrt_exec/test_c_link_graph.py):
 *   prog.c           parse, signature queries, free: the top, calling the readers below;
 *   prog_text.c      MLIR text (pretty or generic form) for the elementwise and shape subset;
 *   prog_vhlo.c      the VHLO meaning of the bytecode's tree: elementwise, shape, dot and
 *                    reduce ops, the table of op families, functions and regions, lowered to a
 *                    flat instruction list per function (checked up front: anything outside the
 *                    supported set is refused with UNIMPLEMENTED naming it);
 *   prog_vhlo_ops.c  the lowering of control flow, indexing, sort, windows, convolution and
 *                    the bit-level ops;
 *   prog_vhlo_attr.c types, attributes and the shape checks every lowering makes;
 *   prog_bytecode.c  the MLIR bytecode container: sections, strings, dialects, op names, the
 *                    attribute/type table, and the IR as a generic tree of operations;
 *   prog_interp.c    the interpreter's loop and common kernels (elementwise, data movement,
 *                    dot_general, recognised reductions), with the rest in prog_ops_*.c
 *                    (control, index, sort, window, misc, complex, matmul, fft, rng:
 *                    rng_bit_generator, linalg: QR, triangular_solve and cholesky);
 *   prog_rt.c        element loads, stores and conversions, strides: what every kernel uses;
 *   prog_pool.c      the buffers of values, reused across runs;
 *   prog_dtype.c     element types and shapes, the bottom.
 * A region is lowered and run by the files above the families that own it (prog_vhlo.c,
 * prog_interp.c) through a pointer they set in their context, so no file calls one above it.
 *
 * This header is independent of PJRT (no pjrt_c_api.h), so tests can drive it through cffi.
 * Status codes use PJRT_Error_Code's numbers so the PJRT layer can pass them through unchanged.
 */
#ifndef PROG_H
#define PROG_H

#include <stddef.h>
#include <stdint.h>

/* The VHLO version the reader knows and the plugin reports as `stablehlo_current_version`.
 * 1.0.0 was the oldest version jax honours, but some programs cannot be written in it at all
 * (jax then fails with "Failed to serialize StableHLO to plugin version 1.0.0": dot_general
 * with an `algorithm`, tanh/exponential with a `result_accuracy`); from 1.9.0 on they can.
 * The reader reads the ops in the forms they take up to this version (the _v2 forms of
 * dot_general, gather, scatter and the transcendental ops included). */
#define PROG_STABLEHLO_MAJOR 1
#define PROG_STABLEHLO_MINOR 10
#define PROG_STABLEHLO_PATCH 0

enum {
  PROG_OK = 0,
  PROG_INVALID_ARGUMENT = 3,  /* malformed or truncated bytes, wrong inputs */
  PROG_RESOURCE_EXHAUSTED = 8,
  PROG_UNIMPLEMENTED = 12,    /* a well-formed program outside the supported set */
  PROG_INTERNAL = 13,
};

/* Element types the interpreter holds.  Values are private to this family; the PJRT layer maps
 * them to PJRT_Buffer_Type. */
typedef enum {
  PROG_PRED = 1, PROG_S32, PROG_S64, PROG_F32, PROG_F64, PROG_BF16,
  PROG_S8, PROG_U8, PROG_U32, PROG_U64, PROG_F16, PROG_S16, PROG_U16,
  PROG_F8E4M3FN, PROG_F8E5M2,  /* f8: moved and converted only */
  PROG_C64, PROG_C128,         /* complex: (real, imaginary) pairs of f32 or f64 */
  PROG_S4, PROG_U4,            /* 4-bit integers: one byte per element, the value in the low
                                  nibble (as ml_dtypes and jaxlib hold them; the high nibble is
                                  ignored on read and written 0) */
  PROG_TOKEN,                  /* !stablehlo.token: a 0-d value of no bytes, only passed on */
} prog_dtype;

#define PROG_MAX_RANK 16

typedef struct {
  int code;            /* PROG_OK or an error code above */
  char message[512];
} prog_status;

typedef struct {
  prog_dtype dtype;
  int rank;
  int64_t dims[PROG_MAX_RANK];
} prog_shape;

typedef struct prog_program prog_program;

/* Reads an artifact.  Returns the program, or NULL with `status` saying why. */
prog_program* prog_parse(const void* bytes, size_t size, prog_status* status);
void prog_free(prog_program* program);

/* The signature of the entry function (`main`). */
int prog_num_inputs(const prog_program* program);
int prog_num_outputs(const prog_program* program);
const prog_shape* prog_input(const prog_program* program, int i);
const prog_shape* prog_output(const prog_program* program, int i);
/* Whether the caller donates input i's buffer: the entry function's argument carries
 * `tf.aliasing_output` (an output may reuse it) or `jax.buffer_donor = true`.  The PJRT layer
 * invalidates a donated buffer after a successful run (outputs are always fresh buffers). */
int prog_input_donated(const prog_program* program, int i);
/* The module's name (`jit_f`), for PJRT_Executable_Name. */
const char* prog_name(const prog_program* program);
/* A 64-bit hash (FNV-1a) of the artifact bytes, for PJRT_Executable_Fingerprint. */
uint64_t prog_fingerprint(const prog_program* program);

size_t prog_dtype_size(prog_dtype dtype);
const char* prog_dtype_name(prog_dtype dtype);
/* Number of elements of a shape (1 for 0-d). */
int64_t prog_shape_elements(const prog_shape* shape);

/* Runs the entry function: inputs[i] holds prog_input(i) in row-major order, outputs[i] must
 * have room for prog_output(i).  Returns PROG_OK or an error code (and fills `status`). */
int prog_run(const prog_program* program, const void* const* inputs, void* const* outputs,
             prog_status* status);

/* Bounds the iterations of any one while loop (0, the default: unbounded).  A program may
 * loop forever as XLA's would; fuzzers that run mutated programs set a bound, and a loop that
 * reaches it fails with RESOURCE_EXHAUSTED. */
void prog_set_loop_limit(int64_t limit);

#endif /* PROG_H */
