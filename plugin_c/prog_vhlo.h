/* prog_vhlo.h -- what the lowering files share: prog_vhlo_attr.c (types, attributes and the
 * checks, below the others), prog_vhlo_ops.c (control flow, indexing, sort, windows,
 * convolution and the other ops with many attributes) and prog_vhlo.c (the elementwise, shape,
 * dot and reduce ops, the table of families, functions and regions, above the others). */
#ifndef PROG_VHLO_H
#define PROG_VHLO_H

#include "prog_internal.h"

typedef struct lowering lowering;

typedef struct {
  prog_ctx* ctx;
  const bc_module* m;
  int builtin, vhlo;
  prog_program* program;
  const char* op;   /* the op being lowered, for messages */
  /* prog_vhlo.c's lowering of a region, set by vh_lower: a family below it (prog_vhlo_ops.c)
   * lowers its op's regions through this, so that it need not call the file above it. */
  void (*lower_region)(lowering* L, prog_insn* in, const bc_region* r, prog_func* sub);
} vh;

#define FAIL(V, code, ...) prog_fail((V)->ctx, code, __VA_ARGS__)
#define UNSUPPORTED(V, ...) prog_fail((V)->ctx, PROG_UNIMPLEMENTED, __VA_ARGS__)
#define MALFORMED(V, ...) prog_fail((V)->ctx, PROG_INVALID_ARGUMENT, __VA_ARGS__)

enum { BUILTIN_DICT = 1, BUILTIN_STRING = 2, BUILTIN_FLAT_SYMBOL = 4 };
enum { VH_ARRAY = 1, VH_BOOL = 2, VH_CMP_DIR = 3, VH_CMP_TYPE = 4, VH_DICT = 6, VH_FFT_TYPE = 7, VH_FLOAT = 8,
       VH_INTEGER = 9, VH_PRECISION = 11, VH_RNG_ALGORITHM = 12, VH_STRING = 14, VH_TENSOR = 15, VH_TRANSPOSE = 16, VH_TYPE = 17 };

/* The op being lowered, in the function (or region) being built. */
struct lowering {
  vh* v;
  prog_func* f;
  const bc_op* op;
  bool* defined;     /* per value of f: defined before this op */
};

/* popcnt on s4: XLA:CPU counts the bits of the sign-extended byte (popcnt(-1) = 8, which
 * wraps to -8), the StableHLO spec the 4 bits (4).  Rather than give numbers that differ from
 * one of them, the device refuses it (u4 is the same under both). */
#define S4_POPCNT_REFUSED                                                                  \
  "unsupported element type s4 for %s (XLA:CPU counts the bits of the sign-extended byte, " \
  "StableHLO the 4 bits; the dumpref device refuses rather than differ from either)"

/* attributes (prog_vhlo_attr.c) */
const char* attr_string(vh* v, int i);
const char* string_at(vh* v, bc_cursor* c);   /* a string-table index read at c */
/* A vhlo attribute's code and a cursor after it, without throwing: false for entries of other
 * dialects or in textual form. */
bool peek_vhlo_attr(vh* v, int i, uint64_t* code, bc_cursor* c);
int op_attr(vh* v, const bc_op* op, const char* name);  /* -1 when absent */
int need(vh* v, const bc_op* op, const char* name);     /* malformed when absent */
int64_t attr_int(vh* v, int i);
bool attr_bool(vh* v, int i);
uint64_t attr_enum(vh* v, int i, uint64_t expected_code, const char* what);
const void* attr_tensor(vh* v, int i, prog_shape* shape);
int attr_dims(vh* v, int i, int64_t* out, int max);
/* An optional dimension list: its count, 0 when the op lacks the attribute. */
int opt_dims(vh* v, const bc_op* op, const char* name, int64_t* out, int max);
prog_shape tensor_type(vh* v, int i);

/* checks */
bool same_dims(const prog_shape* a, const prog_shape* b);
void check(vh* v, bool ok, const char* what);
void check_dims_list(vh* v, const int64_t* d, int n, int rank, bool distinct);
bool is_float(prog_dtype t);
bool is_complex(prog_dtype t);
bool is_arithmetic(prog_dtype t);
const prog_shape* operand(lowering* L, int k);
void expect_operands(lowering* L, int n);
int find_func(prog_program* p, const char* name);

/* dot_general's dimension numbers (in->p[0..3]: lhs/rhs batch, lhs/rhs contracting, already
 * range-checked) against its operands and result: equal counts, equal batch and contracting
 * sizes, and the result shape (batch dims, lhs free dims, rhs free dims).  One check for the
 * bytecode and the text readers (prog.c). */
void prog_check_dot_shapes(vh* v, const prog_insn* in, const prog_shape* lhs, const prog_shape* rhs);

/* Lowers region `r` of the current op into `sub`: a function over the enclosing function's
 * values (captured) and the region's block arguments.  Records what it captures in `in`. */
static inline void vh_lower_region(lowering* L, prog_insn* in, const bc_region* r,
                                   prog_func* sub) {
  L->v->lower_region(L, in, r, sub);
}
/* The RED_* kind of a region that is one binary op of its two arguments, else RED_GENERIC. */
int vh_region_kind(vh* v, const prog_func* sub);

/* Folds scalar broadcasts and computes last uses, once a function's instructions are built. */
void vh_finish_func(vh* v, prog_func* f);
/* The opcode of an elementwise VHLO op ("add_v1", prog_ops_table.h) and its operand count,
 * or -1. */
int vh_elementwise(const char* name, int* arity);
/* Whether an elementwise op whose element type classes are `allowed` (EW_*) takes t. */
bool ew_allows(unsigned allowed, prog_dtype t);

/* The custom calls Qr (qr) and ProductOfElementaryHouseholderReflectors (prog_vhlo_ops.c). */
void vh_lower_householder(lowering* L, prog_insn* in, bool qr);

/* A lowering of one op family: reads the op of L named `name` (VHLO, "add_v1") into `in`,
 * whose results' shapes are set; throws what it cannot run.  prog_vhlo.c's table `lowerings`
 * maps names to them; the families of prog_vhlo_ops.c: */
typedef void (*vh_lower_fn)(lowering* L, prog_insn* in, const char* name);
void vh_lower_control(lowering* L, prog_insn* in, const char* name);  /* while, case, if, ... */
void vh_lower_index(lowering* L, prog_insn* in, const char* name);    /* pad, gather, ... */
void vh_lower_sort(lowering* L, prog_insn* in, const char* name);
void vh_lower_window(lowering* L, prog_insn* in, const char* name);   /* reduce_window, conv */
void vh_lower_bits(lowering* L, prog_insn* in, const char* name);     /* is_finite, ... */
void vh_lower_parts(lowering* L, prog_insn* in, const char* name);    /* real, imag, complex */
void vh_lower_linalg(lowering* L, prog_insn* in, const char* name);   /* triangular_solve, ... */
void vh_lower_rng(lowering* L, prog_insn* in, const char* name);
void vh_lower_dimension_size(lowering* L, prog_insn* in, const char* name);

#endif /* PROG_VHLO_H */
