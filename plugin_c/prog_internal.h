/* prog_internal.h -- what the three program files share (see prog.h for the family's shape).
 *
 * Errors: reading untrusted bytes has a failure point on nearly every line, so the reader
 * throws like Lua does: prog_fail() records the status and longjmps back to prog_parse().
 * Everything a parse allocates comes from one arena, freed in one go, so a throw leaks nothing.
 */
#ifndef PROG_INTERNAL_H
#define PROG_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <string.h>

#include "prog.h"

/* ---- arena and throwing context (prog_bytecode.c) ---------------------------------------- */

typedef struct prog_chunk prog_chunk;

typedef struct {
  jmp_buf on_error;
  prog_status* status;
  prog_chunk* chunks;   /* the arena: every allocation of one parse */
  size_t allocated;     /* bytes, bounded so a hostile count cannot exhaust memory */
} prog_ctx;

_Noreturn void prog_fail(prog_ctx* ctx, int code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Zeroed memory from the arena (n * size bytes, overflow-checked); throws when exhausted. */
void* prog_alloc(prog_ctx* ctx, size_t n, size_t size);
void prog_arena_free(prog_chunk* chunks);

/* ---- the bytecode container (prog_bytecode.c) -------------------------------------------- */

typedef struct {
  const uint8_t* p;
  const uint8_t* end;
  prog_ctx* ctx;
  const char* what;  /* what is being read, for error messages */
} bc_cursor;

uint64_t bc_varint(bc_cursor* c);
int64_t bc_svarint(bc_cursor* c);
uint8_t bc_byte(bc_cursor* c);
const uint8_t* bc_bytes(bc_cursor* c, size_t n);
/* A count of items that each take at least `min_item_bytes`: bounded by what is left. */
uint64_t bc_count(bc_cursor* c, size_t min_item_bytes);

/* One attribute or type of the attribute/type table, still encoded. */
typedef struct {
  const uint8_t* data;
  size_t size;
  int dialect;      /* index into bc_module.dialects */
  bool custom;      /* dialect encoding (else: the textual assembly form, NUL-terminated) */
} bc_entry;

typedef struct bc_op bc_op;

typedef struct {
  int num_args;
  int* arg_types;   /* type table indices */
  int* arg_values;  /* value ids (in the enclosing isolated scope) */
  int num_ops;
  bc_op* ops;
} bc_block;

typedef struct {
  int num_blocks;
  bc_block* blocks;
  int num_values;   /* values defined directly in this region */
} bc_region;

struct bc_op {
  int name;           /* index into bc_module.op_names */
  int attrs;          /* attribute index of the attribute dictionary, -1 when none */
  int props;          /* index into the properties section, -1 when none */
  int num_results;
  int* result_types;
  int first_result;   /* value id of result 0; results are consecutive */
  int num_operands;
  int* operands;      /* value ids */
  bool isolated;      /* regions start a fresh value scope */
  int num_regions;
  bc_region* regions;
};

typedef struct {
  int dialect;
  const char* name;   /* without the dialect prefix: "add_v1" */
} bc_op_name;

typedef struct {
  int version;
  const char* producer;
  int num_strings;
  const char** strings;
  int num_dialects;
  const char** dialects;
  int num_op_names;
  bc_op_name* op_names;
  int num_attrs, num_types;
  bc_entry* attrs;
  bc_entry* types;
  int num_props;
  const uint8_t** props;      /* start of each properties record (size varint, then data) */
  const uint8_t* props_end;
  bc_op top;          /* a synthetic op whose single region holds the top-level op (module) */
  prog_ctx* ctx;
} bc_module;

/* Reads the container; throws on malformed bytes. */
bc_module* bc_read(prog_ctx* ctx, const uint8_t* bytes, size_t size);
/* A cursor over an op's properties record: the inherent attributes of registered ops (for
 * VHLO ops, one attribute index per attribute, in declaration order). */
bc_cursor bc_props(const bc_module* m, int props);
/* Index of a dialect by name, or -1. */
int bc_dialect(const bc_module* m, const char* name);

/* ---- programs: lowered instructions (built by prog_vhlo.c, run by prog_interp.c) ---------- */

/* The classes of element types an elementwise op takes (ALLOWED in prog_ops_table.h). */
enum {
  EW_FLOATS = 1,        /* f32, f64, bf16, f16 */
  EW_COMPLEX = 2,       /* complex64, complex128 */
  EW_INTS = 4,          /* signed and unsigned integers of every width */
  EW_PRED = 8,          /* pred */
  EW_NO_S4 = 16,        /* ... but not s4 (popcnt) */
  EW_COMPLEX_ABS = 32,  /* a complex operand may give its real type (abs) */
};
#define EW_FLOAT_OPS (EW_FLOATS | EW_COMPLEX)       /* transcendental: floats and complex */
#define EW_REAL_OPS EW_FLOATS                       /* real floats only */
#define EW_BIT_OPS (EW_INTS | EW_PRED)              /* integers and pred */
#define EW_SHIFT_OPS EW_INTS                        /* integers, not pred */
#define EW_ORDERED (EW_FLOATS | EW_INTS | EW_PRED)  /* real numbers of every kind */
#define EW_NUMERIC (EW_ORDERED | EW_COMPLEX)        /* every number */

typedef enum {
  OP_CONSTANT, OP_IOTA,
  /* elementwise ops of prog_ops_table.h, one or two operands: OP_NEGATE ... OP_SHRL */
#define EW(NAME, ARITY, ALLOWED, V1, V2) OP_##NAME,
#include "prog_ops_table.h"
  OP_CONVERT, OP_COMPARE,
  OP_SELECT, OP_CLAMP, OP_IS_FINITE, OP_REDUCE_PRECISION, OP_BITCAST_CONVERT,
  OP_REAL, OP_IMAG, OP_COMPLEX,  /* complex numbers: parts, and one from two parts */
  /* shape */
  OP_BROADCAST, OP_RESHAPE, OP_TRANSPOSE, OP_SLICE, OP_CONCAT, OP_REVERSE, OP_PAD,
  OP_DYNAMIC_SLICE, OP_DYNAMIC_UPDATE_SLICE, OP_GATHER, OP_SCATTER,
  /* others */
  OP_DOT, OP_REDUCE, OP_REDUCE_GENERIC, OP_REDUCE_WINDOW, OP_CONVOLUTION, OP_SORT, OP_CALL,
  OP_WHILE, OP_CASE, OP_IF, OP_IDENTITY, OP_RNG_BIT_GENERATOR,
  OP_TRIANGULAR_SOLVE, OP_CHOLESKY, OP_FFT,
  OP_LINALG,  /* the custom calls Qr (iarg 0) and ProductOfElementaryHouseholderReflectors (1) */
} prog_opcode;

/* An elementwise op of prog_ops_table.h: its operand count (0 for every other opcode), and
 * the EW_* classes of element types it takes. */
static inline int prog_ew_arity(prog_opcode op) {
  switch (op) {
#define EW(NAME, ARITY, ALLOWED, V1, V2) case OP_##NAME: return ARITY;
#include "prog_ops_table.h"
    default: return 0;
  }
}

static inline unsigned prog_ew_allowed(prog_opcode op) {
  switch (op) {
#define EW(NAME, ARITY, ALLOWED, V1, V2) case OP_##NAME: return ALLOWED;
#include "prog_ops_table.h"
    default: return 0;
  }
}

/* rng_bit_generator's algorithm (iarg), as VHLO numbers it */
enum { PROG_RNG_DEFAULT = 0, PROG_RNG_THREE_FRY = 1, PROG_RNG_PHILOX = 2 };

enum { CMP_EQ, CMP_NE, CMP_GE, CMP_GT, CMP_LE, CMP_LT };
/* or'ed into a compare's direction (iarg) for compare_type TOTALORDER on floats: the order
 * -NaN < -inf < ... < -0 < +0 < ... < inf < NaN that jax's sort comparators ask for */
#define CMP_TOTAL 8
enum { RED_ADD, RED_MUL, RED_MAX, RED_MIN, RED_AND, RED_OR, RED_XOR, RED_GENERIC };

#define PROG_NP 16  /* integer-list parameters per instruction */

typedef struct prog_func prog_func;

typedef struct {
  prog_opcode op;
  const char* vhlo_name;     /* for messages */
  int num_in;
  int* in;                   /* value ids */
  int num_out;
  int out;                   /* value id of result 0 (results are consecutive) */
  prog_shape shape;          /* shape of result 0 */
  /* parameters, by op: dims (broadcast, reduce, reverse, concat [0]), permutation,
   * slice start/limit/stride, dot lhs_batch/rhs_batch/lhs_contract/rhs_contract, and the
   * dimension numbers of gather, scatter, convolution and windows (see prog_vhlo_ops.c) */
  int64_t p[PROG_NP][PROG_MAX_RANK];
  int np[PROG_NP];
  int iarg;                  /* comparison direction, reduction kind, iota dim, callee index */
  int iarg2;                 /* a second scalar parameter (sort: stable; precision: bits) */
  unsigned scalar_in;        /* bit k: operand k is one element, broadcast on the fly */
  const void* data;          /* constant: row-major elements of `shape` */
  int num_sub;               /* regions (while: cond, body; case: branches; sort: comparator) */
  prog_func* sub;
  int num_cap;               /* values of this function that the regions read */
  int* cap;
} prog_insn;

struct prog_func {
  const char* name;
  int base;                  /* a region: values 0 .. base-1 are its enclosing function's */
  int first_arg;             /* args are values first_arg .. first_arg+num_args-1 */
  int num_args;
  unsigned char* donated;    /* per arg: 1 when its buffer is donated (the argument carries
                                tf.aliasing_output or jax.buffer_donor); NULL when none is */
  int num_values;
  prog_shape* values;        /* shape of every value */
  int num_insns;
  prog_insn* insns;
  int num_results;
  int* results;              /* value ids returned */
  int* last_use;             /* per value: last instruction reading it (num_insns: returned) */
  int reduce_kind;           /* a region that is one binary op of its two args: RED_*, else
                                RED_GENERIC (reduce, scatter and window bodies) */
};

struct prog_program {
  prog_chunk* arena;
  const char* name;
  uint64_t fingerprint;
  int num_funcs;
  prog_func* funcs;
  int main;
};

/* Lowers the container's module to functions; throws UNIMPLEMENTED for what it cannot run. */
void vh_lower(prog_ctx* ctx, const bc_module* m, prog_program* program);

/* Reads MLIR text (StableHLO, generic or pretty form) into a program (prog_text.c). */
void prog_text_parse(prog_ctx* ctx, const char* text, size_t size, prog_program* program);

/* ---- element loads and stores ------------------------------------------------------------
 *
 * Every kernel reads and writes elements through these, never through a typed pointer: an
 * array's address is not the interpreter's to choose (a caller's buffer, a numpy view, an
 * element of another array passed by address to a region), and a typed access to an address
 * that is not a multiple of the type's size is undefined behaviour in C, which an optimizer may
 * turn into an aligned vector load that faults.  memcpy of a constant size is defined for any
 * address, and gcc and clang compile it at -O1 and above to the one plain move (and vectorize
 * loops of them) that the typed access would have been. */
#define RT_ACCESS(T)                                                                       \
  static inline T ld_##T(const void* p, int64_t i) {                                      \
    T v;                                                                                   \
    memcpy(&v, (const char*)p + i * (int64_t)sizeof(T), sizeof(T));                        \
    return v;                                                                              \
  }                                                                                        \
  static inline void st_##T(void* p, int64_t i, T v) {                                    \
    memcpy((char*)p + i * (int64_t)sizeof(T), &v, sizeof(T));                              \
  }
RT_ACCESS(float)
RT_ACCESS(double)
RT_ACCESS(int8_t)
RT_ACCESS(uint8_t)
RT_ACCESS(int16_t)
RT_ACCESS(uint16_t)
RT_ACCESS(int32_t)
RT_ACCESS(uint32_t)
RT_ACCESS(int64_t)
RT_ACCESS(uint64_t)
#undef RT_ACCESS
/* LD(T, p, i): element i of the T array at p; ST(T, p, i, v) stores v there. */
#define LD(T, p, i) ld_##T((p), (i))
#define ST(T, p, i, v) st_##T((p), (i), (v))

/* ---- the interpreter's shared pieces (prog_rt.c; kernels in prog_ops_*.c) ---------------- */

typedef struct run_ctx run_ctx;
struct run_ctx {
  prog_status* status;
  /* prog_interp.c's runner of a region, set by prog_run: a kernel below it (prog_ops_*.c) runs
   * its op's regions (a loop body, a comparator, a reduction body) through this, so that it
   * need not call the file above it. */
  int (*run_region)(run_ctx* r, const prog_program* p, const prog_func* f,
                    void* const* parent_vals, const void* const* inputs, void* const* outputs,
                    int depth);
  /* rt_run_func's flags of which value buffers it owns, set just before it runs a while loop
   * and taken (reset to NULL) by the loop as it starts: the loop may then adopt an operand
   * buffer that nothing reads after it, and hand its final buffers to results the function
   * owns, instead of copying each (prog_ops_control.c). */
  bool* owned;
};

int rt_fail(run_ctx* r, int code, const char* msg, const char* op);
/* Buffers of values and kernel temporaries, reused across runs (prog_pool.c): rt_free only
 * what rt_alloc returned, never free(); NULL when out of memory. */
void* rt_alloc(size_t n);
void rt_free(void* p);
size_t rt_bytes(const prog_shape* s);
float rt_bf16_to_f32(uint16_t h);
uint16_t rt_f32_to_bf16(float f);
float rt_f16_to_f32(uint16_t h);
uint16_t rt_f32_to_f16(float f);
bool rt_is_float(prog_dtype t);
bool rt_is_unsigned(prog_dtype t);
/* Element i of an array of type t, as a double (floats) or an integer (the rest). */
double rt_get_f(prog_dtype t, const void* p, int64_t i);
int64_t rt_get_i(prog_dtype t, const void* p, int64_t i);
/* Stores f (from_float) or n into element i, converting as XLA's convert does. */
void rt_put(prog_dtype t, void* p, int64_t i, double f, int64_t n, bool from_float);
void rt_strides(const prog_shape* s, int64_t* strides);
void rt_strided_copy(size_t esize, int rank, const int64_t* dims, char* dst,
                     const int64_t* dst_strides, const char* src, const int64_t* src_strides);
/* Runs a function or region: parent_vals supplies values 0 .. base-1 of a region. */
int rt_run_func(run_ctx* r, const prog_program* p, const prog_func* f, void* const* parent_vals,
                const void* const* inputs, void* const* outputs, int depth);
/* Runs a region (one level deeper): through the runner prog_run set in r. */
static inline int rt_run_region(run_ctx* r, const prog_program* p, const prog_func* f,
                                void* const* parent_vals, const void* const* inputs,
                                void* const* outputs, int depth) {
  return r->run_region(r, p, f, parent_vals, inputs, outputs, depth);
}

/* kernels of prog_ops_*.c; each returns PROG_OK or fails through rt_fail */
int rt_control(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
               void** vals, int depth);                          /* while, case, if */
int rt_sort(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
            void** vals, int depth);
int rt_index(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
             void** vals, int depth);       /* pad, dynamic (update) slice, gather, scatter */
int rt_window(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
              void** vals, int depth);      /* generic reduce, reduce_window, convolution */
/* Householder QR and the product of its reflectors (prog_ops_linalg.c) */
int rt_linalg(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
              void** vals);
int rt_triangular_solve(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
                        void** vals);
/* Cholesky factors of a batch of Hermitian positive definite matrices (iarg: lower) */
int rt_cholesky(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args,
                void** vals);
/* FFT, IFFT, RFFT, IRFFT (iarg) over the last np[0] dimensions, lengths p[0] (prog_ops_fft.c) */
int rt_fft(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args, void** vals);
enum { PROG_FFT = 0, PROG_IFFT = 1, PROG_RFFT = 2, PROG_IRFFT = 3 };
/* rng_bit_generator: new state and bits as XLA:CPU computes them (prog_ops_rng.c) */
int rt_rng(run_ctx* r, const prog_func* f, const prog_insn* in, void* const* args, void** vals);
int rt_misc(run_ctx* r, const prog_insn* in, const prog_shape* a, void* const* args, void* o);
                                            /* is_finite, reduce_precision, bitcast_convert */
/* Elementwise ops on complex numbers (and real/imag/complex/abs between complex and real),
 * over n elements (prog_ops_complex.c). */
int rt_complex_elementwise(run_ctx* r, const prog_insn* in, const prog_shape* a,
                           void* const* args, void* o, int64_t n);
void rt_complex_compare(prog_dtype t, int dir, const void* a, const void* b, uint8_t* o, int64_t n);
/* C[M,N] += A[M,K] B[K,N] on complex64 (float pairs) or complex128 (double pairs). */
void rt_matmul_complex(prog_dtype t, const void* a, const void* b, void* c, int64_t M, int64_t N,
                       int64_t K);
bool rt_is_complex(prog_dtype t);

/* C[M,N] += A[M,K] B[K,N], C row-major and at its type's alignment, element (i,k) of A at
 * a[i*ars + k*acs] and (k,j) of B at b[k*brs + j*bcs] (any alignment); products added in k
 * order, fused multiply-adds under AVX2/AVX-512 (prog_ops_matmul.c: within a dot product's
 * error bound, not the naive loop's bits).  -1 when out of memory. */
int rt_matmul_f32(const void* a, int64_t ars, int64_t acs, const void* b, int64_t brs,
                  int64_t bcs, float* c, int64_t M, int64_t N, int64_t K);
int rt_matmul_f64(const void* a, int64_t ars, int64_t acs, const void* b, int64_t brs,
                  int64_t bcs, double* c, int64_t M, int64_t N, int64_t K);

/* The widest instruction set the kernels compiled once per set may use (prog_ops_vec.c):
 * detected once; DUMPREF_PJRT_ISA=base or avx2 caps it. */
typedef enum { RT_ISA_BASE, RT_ISA_AVX2, RT_ISA_AVX512 } rt_isa_kind;
rt_isa_kind rt_isa(void);
/* tanh over n f32 elements (any alignment, o may be a): correctly rounded but for the rare
 * value within ~1e-14 of a rounding boundary; rt_tanhf is one element of it. */
void rt_tanh_f32(const void* a, void* o, int64_t n);
float rt_tanhf(float x);

#endif /* PROG_INTERNAL_H */
