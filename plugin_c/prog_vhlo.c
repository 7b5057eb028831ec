/* prog_vhlo.c -- what the bytecode means: VHLO types, attributes and ops, lowered to the
 * interpreter's instruction lists.
 *
 * Encodings follow the VHLO dialect's bytecode interface (type and attribute codes are stable
 * by design: StableHLO promises compatibility) and the builtin dialect's (dictionaries and
 * strings of op attributes, locations).  Everything is checked here, up front: an op, type or
 * attribute outside the supported set is refused with UNIMPLEMENTED naming it, and every shape
 * relation the interpreter relies on is verified, so prog_interp.c can index without checks.
 *
 * `sdy` (Shardy) ops and attributes carry sharding for many devices; on one device they mean
 * nothing, so module-level sdy ops (sdy.mesh) and sdy attributes on arguments are skipped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_vhlo.h"

/* Attributes, types and the checks every lowering makes are prog_vhlo_attr.c's. */

static void elementwise_checks(lowering* L, prog_insn* in, bool arithmetic) {
  for (int k = 0; k < in->num_in; k++) {
    check(L->v, same_dims(operand(L, k), &in->shape), "operand and result shapes differ");
    if (arithmetic && !is_arithmetic(operand(L, k)->dtype))
      UNSUPPORTED(L->v, "unsupported element type %s for %s",
                  prog_dtype_name(operand(L, k)->dtype), L->v->op);
  }
}

/* The ops of prog_ops_table.h: checks from the table's arity and element type classes. */
static void lower_elementwise(lowering* L, prog_insn* in, prog_opcode code, int arity) {
  vh* v = L->v;
  in->op = code;
  expect_operands(L, arity);
  elementwise_checks(L, in, true);
  unsigned allowed = prog_ew_allowed(code);
  prog_dtype at = operand(L, 0)->dtype;
  /* |z| of a complex z is real */
  bool complex_abs = arity == 1 && (allowed & EW_COMPLEX_ABS) && is_complex(at) &&
                     in->shape.dtype == (at == PROG_C64 ? PROG_F32 : PROG_F64);
  bool same = true;
  for (int k = 0; k < arity; k++) same &= operand(L, k)->dtype == in->shape.dtype;
  check(v, same || complex_abs, "element types differ");
  if (!ew_allows(allowed, at))
    UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(at), v->op);
  if ((allowed & EW_NO_S4) && at == PROG_S4) UNSUPPORTED(v, S4_POPCNT_REFUSED, v->op);
}

/* compare, convert, select, clamp: elementwise, with their own types and attributes */
static void lower_elementwise_more(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "compare_v1") == 0) {
    in->op = OP_COMPARE;
    expect_operands(L, 2);
    in->iarg = (int)attr_enum(v, need(v, op, "comparison_direction"), VH_CMP_DIR,
                              "comparison direction");
    check(v, in->iarg >= CMP_EQ && in->iarg <= CMP_LT, "unknown comparison direction");
    check(v, in->shape.dtype == PROG_PRED, "compare must give pred");
    prog_shape a = *operand(L, 0);
    check(v, a.dtype == operand(L, 1)->dtype, "element types differ");
    bool f8 = a.dtype == PROG_F8E4M3FN || a.dtype == PROG_F8E5M2;  /* compared as their values */
    if ((!is_arithmetic(a.dtype) && !f8) ||
        (is_complex(a.dtype) && in->iarg != CMP_EQ && in->iarg != CMP_NE))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(a.dtype), v->op);
    /* compare_type (VHLO ComparisonType: NOTYPE, FLOAT, TOTALORDER, SIGNED, UNSIGNED):
     * TOTALORDER orders NaNs too; ignoring it let a sort put a NaN among the numbers */
    int ct = op_attr(v, op, "compare_type");
    if (ct >= 0 && attr_enum(v, ct, VH_CMP_TYPE, "comparison type") == 2 && is_float(a.dtype))
      in->iarg |= CMP_TOTAL;
    a.dtype = PROG_PRED;
    check(v, same_dims(&a, &in->shape) && same_dims(operand(L, 1), &in->shape),
          "operand and result shapes differ");
  } else if (strcmp(name, "convert_v1") == 0) {
    in->op = OP_CONVERT;
    expect_operands(L, 1);
    check(v, same_dims(operand(L, 0), &in->shape), "operand and result shapes differ");
  } else if (strcmp(name, "select_v1") == 0) {
    in->op = OP_SELECT;
    expect_operands(L, 3);
    const prog_shape* p = operand(L, 0);
    check(v, p->dtype == PROG_PRED, "select predicate must be pred");
    check(v, p->rank == 0 || same_dims(p, &in->shape), "select predicate shape");
    check(v, same_dims(operand(L, 1), &in->shape) && same_dims(operand(L, 2), &in->shape),
          "operand and result shapes differ");
    check(v, operand(L, 1)->dtype == in->shape.dtype && operand(L, 2)->dtype == in->shape.dtype,
          "element types differ");
  } else {  /* clamp_v1 */
    in->op = OP_CLAMP;
    expect_operands(L, 3);
    for (int r = 0; r < 3; r++) {
      check(v, operand(L, r)->dtype == in->shape.dtype, "element types differ");
      check(v, r == 1 ? same_dims(operand(L, r), &in->shape)
                      : operand(L, r)->rank == 0 || same_dims(operand(L, r), &in->shape),
            "clamp operand shapes");
    }
    if (!is_arithmetic(in->shape.dtype) || is_complex(in->shape.dtype))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(in->shape.dtype),
                  v->op);
  }
}

/* constant, iota: values from attributes alone */
static void lower_source(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "constant_v1") == 0) {
    in->op = OP_CONSTANT;
    expect_operands(L, 0);
    prog_shape s;
    in->data = attr_tensor(v, need(v, op, "value"), &s);
    check(v, same_dims(&s, &in->shape) && s.dtype == in->shape.dtype,
          "constant value and result types differ");
  } else {  /* iota_v1 */
    in->op = OP_IOTA;
    expect_operands(L, 0);
    int64_t d = attr_int(v, need(v, op, "iota_dimension"));
    check(v, d >= 0 && d < in->shape.rank, "iota dimension out of range");
    in->iarg = (int)d;
    if (in->shape.dtype == PROG_PRED)
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(in->shape.dtype),
                  v->op);
  }
}

/* broadcast_in_dim, reshape, transpose, slice, concatenate, reverse */
static void lower_shape(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "broadcast_in_dim_v1") == 0) {
    in->op = OP_BROADCAST;
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->np[0] = attr_dims(v, need(v, op, "broadcast_dimensions"), in->p[0], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && a->dtype == in->shape.dtype, "broadcast operand");
    check_dims_list(v, in->p[0], in->np[0], in->shape.rank, true);
    for (int d = 0; d < a->rank; d++)
      check(v, a->dims[d] == 1 || a->dims[d] == in->shape.dims[in->p[0][d]],
            "broadcast dimension sizes");
  } else if (strcmp(name, "reshape_v1") == 0) {
    in->op = OP_RESHAPE;
    expect_operands(L, 1);
    check(v, prog_shape_elements(operand(L, 0)) == prog_shape_elements(&in->shape) &&
                 operand(L, 0)->dtype == in->shape.dtype,
          "reshape changes the element count or type");
  } else if (strcmp(name, "transpose_v1") == 0) {
    in->op = OP_TRANSPOSE;
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->np[0] = attr_dims(v, need(v, op, "permutation"), in->p[0], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && a->rank == in->shape.rank && a->dtype == in->shape.dtype,
          "transpose permutation");
    check_dims_list(v, in->p[0], in->np[0], a->rank, true);
    for (int d = 0; d < a->rank; d++)
      check(v, in->shape.dims[d] == a->dims[in->p[0][d]], "transpose result shape");
  } else if (strcmp(name, "slice_v1") == 0) {
    in->op = OP_SLICE;
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->np[0] = attr_dims(v, need(v, op, "start_indices"), in->p[0], PROG_MAX_RANK);
    in->np[1] = attr_dims(v, need(v, op, "limit_indices"), in->p[1], PROG_MAX_RANK);
    in->np[2] = attr_dims(v, need(v, op, "strides"), in->p[2], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && in->np[1] == a->rank && in->np[2] == a->rank &&
                 in->shape.rank == a->rank && a->dtype == in->shape.dtype,
          "slice ranks");
    for (int d = 0; d < a->rank; d++) {
      int64_t lo = in->p[0][d], hi = in->p[1][d], st = in->p[2][d];
      check(v, lo >= 0 && lo <= hi && hi <= a->dims[d] && st >= 1, "slice bounds");
      check(v, in->shape.dims[d] == (hi - lo + st - 1) / st, "slice result shape");
    }
  } else if (strcmp(name, "concatenate_v1") == 0) {
    in->op = OP_CONCAT;
    check(v, op->num_operands >= 1, "concatenate needs operands");
    int64_t d = attr_int(v, need(v, op, "dimension"));
    check(v, d >= 0 && d < in->shape.rank, "concatenate dimension");
    in->iarg = (int)d;
    int64_t total = 0;
    for (int r = 0; r < op->num_operands; r++) {
      const prog_shape* a = operand(L, r);
      check(v, a->rank == in->shape.rank && a->dtype == in->shape.dtype, "concatenate operands");
      for (int e = 0; e < a->rank; e++)
        check(v, e == d || a->dims[e] == in->shape.dims[e], "concatenate operand shapes");
      total += a->dims[d];
    }
    check(v, total == in->shape.dims[d], "concatenate result shape");
  } else {  /* reverse_v1 */
    in->op = OP_REVERSE;
    expect_operands(L, 1);
    check(v, same_dims(operand(L, 0), &in->shape) && operand(L, 0)->dtype == in->shape.dtype,
          "reverse shapes");
    in->np[0] = attr_dims(v, need(v, op, "dimensions"), in->p[0], PROG_MAX_RANK);
    check_dims_list(v, in->p[0], in->np[0], in->shape.rank, true);
  }
}

/* dot_general (v1, and v2 with its precision attributes, which change nothing here) */
static void lower_dot(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  in->op = OP_DOT;
  expect_operands(L, 2);
  const prog_shape *a = operand(L, 0), *b = operand(L, 1);
  static const char* names[4] = {"lhs_batching_dimensions", "rhs_batching_dimensions",
                                 "lhs_contracting_dimensions", "rhs_contracting_dimensions"};
  for (int r = 0; r < 4; r++) {
    int at = op_attr(v, op, names[r]);
    in->np[r] = at < 0 ? 0 : attr_dims(v, at, in->p[r], PROG_MAX_RANK);
    check_dims_list(v, in->p[r], in->np[r], (r % 2 == 0 ? a : b)->rank, true);
  }
  /* preferred_element_type: the operands may be narrower than the result (bf16 x bf16 ->
   * f32, s8 x s8 -> s32); the products accumulate in the result's precision or better;
   * pred products are and, their sums or; f8 operands are widened to f32 */
  prog_check_dot_shapes(v, in, a, b);
}

/* reduce: a fast kernel for one input under one binary op, else the body element by element */
static void lower_reduce(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  int n = op->num_operands / 2;
  check(v, n >= 1 && op->num_operands == 2 * n && op->num_results == n,
        "reduce needs as many inputs, init values and results");
  check(v, op->num_regions == 1, "reduce needs one body");
  int64_t dims[PROG_MAX_RANK];
  int nd = attr_dims(v, need(v, op, "dimensions"), dims, PROG_MAX_RANK);
  const prog_shape* a0 = operand(L, 0);
  check_dims_list(v, dims, nd, a0->rank, true);
  for (int r = 0; r < n; r++) {
    const prog_shape *a = operand(L, r), *init = operand(L, n + r);
    check(v, same_dims(a, a0), "reduce inputs differ in shape");
    check(v, init->rank == 0 && init->dtype == L->f->values[op->first_result + r].dtype,
          "reduce init value");
    prog_shape want = {a->dtype, 0, {0}};
    for (int d = 0; d < a->rank; d++) {
      bool reduced = false;
      for (int q = 0; q < nd; q++) reduced |= dims[q] == d;
      if (!reduced) want.dims[want.rank++] = a->dims[d];
    }
    want.dtype = init->dtype;
    check(v, same_dims(&want, &L->f->values[op->first_result + r]), "reduce result shape");
  }
  in->np[0] = nd;
  memcpy(in->p[0], dims, sizeof dims);
  in->num_sub = 1;
  in->sub = prog_alloc(v->ctx, 1, sizeof(prog_func));
  vh_lower_region(L, in, &op->regions[0], in->sub);
  check(v, in->sub->num_args == 2 * n && in->sub->num_results == n, "reduce body signature");
  /* The body runs on one element of each input at a time, passed by address into the
   * input's buffer: its arguments must be scalars of exactly the element types the buffers
   * hold.  Without this a mutated program whose body took s64 over a u8 input read 8 bytes
   * at every byte offset (misaligned, and past the end of the last element). */
  for (int r = 0; r < n; r++) {
    const prog_func* b = in->sub;
    const prog_shape *acc = &b->values[b->first_arg + r], *x = &b->values[b->first_arg + n + r];
    const prog_shape* res = &b->values[b->results[r]];
    prog_dtype rt = L->f->values[op->first_result + r].dtype;
    check(v, acc->rank == 0 && acc->dtype == rt && res->rank == 0 && res->dtype == rt &&
                 x->rank == 0, "reduce body signature");
    if (x->dtype != operand(L, r)->dtype)
      UNSUPPORTED(v, "unsupported reduce whose body takes %s elements of a %s input",
                  prog_dtype_name(x->dtype), prog_dtype_name(operand(L, r)->dtype));
  }
  int kind = vh_region_kind(v, in->sub);
  if (is_complex(a0->dtype) && kind != RED_ADD && kind != RED_MUL) kind = RED_GENERIC;
  if (n == 1 && kind != RED_GENERIC && a0->dtype == in->shape.dtype &&
      !(kind == RED_AND || kind == RED_OR || kind == RED_XOR ? is_float(a0->dtype) : false) &&
      is_arithmetic(a0->dtype)) {
    in->op = OP_REDUCE;
    in->iarg = kind;
  } else {
    in->op = OP_REDUCE_GENERIC;
  }
}

static void lower_call(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  in->op = OP_CALL;
  const char* callee = attr_string(v, need(v, L->op, "callee"));
  int f = find_func(v->program, callee);
  if (f < 0) MALFORMED(v, "malformed program: call of unknown function '%s'", callee);
  in->iarg = f;
  /* argument and result shapes are checked once every function's signature is known */
}

/* Tokens order side effects, which this device has none of: they are made (create_token,
 * after_all), passed through calls and barriers, and returned; any other op on one is refused
 * by name (in lower_op). */
static void lower_token(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  for (int r = 0; r < op->num_operands; r++)
    check(v, operand(L, r)->dtype == PROG_TOKEN, "after_all takes tokens");
  check(v, op->num_results == 1 && in->shape.dtype == PROG_TOKEN, "a token op gives one token");
  static const char no_bytes[1];
  in->op = OP_CONSTANT;  /* a token has no bytes: nothing to compute */
  in->data = no_bytes;
  in->num_in = 0;
}

/* a library call (LAPACK, FFI): the few run here, the rest refused by name */
static void lower_custom_call(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  int t = op_attr(v, op, "call_target_name");
  const char* target = t >= 0 ? attr_string(v, t) : "?";
  /* the two XLA expands itself, which jax sends a platform without LAPACK for a QR */
  if (strcmp(target, "Qr") == 0 || strcmp(target, "ProductOfElementaryHouseholderReflectors") == 0) {
    vh_lower_householder(L, in, target[0] == 'Q');
    return;
  }
  /* jax's lax.dce_sink (checkify uses it): a value marked used, against XLA's dead-code
   * elimination.  It has no result, and an instruction no one reads is never run. */
  if (strcmp(target, "dce_sink") == 0) {
    check(v, op->num_results == 0, "dce_sink gives no result");
    in->shape = (prog_shape){.dtype = PROG_TOKEN, .rank = 0};
    in->op = OP_IDENTITY;
    return;
  }
  UNSUPPORTED(v, "unsupported custom call '%s' (%s): the dumpref interpreter runs StableHLO "
              "ops only (and the custom calls Qr, ProductOfElementaryHouseholderReflectors, "
              "dce_sink)", target, v->op);
}

/* What an op may be given beyond one non-token result each (lower_op checks the rest). */
enum {
  LOWER_RESULTS = 1,  /* any number of results (the lowering checks them) */
  LOWER_TOKENS = 2,   /* token operands and results */
};

/* Every op but the elementwise ones of prog_ops_table.h, by VHLO name. */
static const struct {
  const char* name;
  vh_lower_fn lower;
  unsigned flags;
} lowerings[] = {
    {"compare_v1", lower_elementwise_more, 0},
    {"convert_v1", lower_elementwise_more, 0},
    {"select_v1", lower_elementwise_more, 0},
    {"clamp_v1", lower_elementwise_more, 0},
    {"constant_v1", lower_source, 0},
    {"iota_v1", lower_source, 0},
    {"get_dimension_size_v1", vh_lower_dimension_size, 0},
    {"broadcast_in_dim_v1", lower_shape, 0},
    {"reshape_v1", lower_shape, 0},
    {"transpose_v1", lower_shape, 0},
    {"slice_v1", lower_shape, 0},
    {"concatenate_v1", lower_shape, 0},
    {"reverse_v1", lower_shape, 0},
    {"pad_v1", vh_lower_index, 0},
    {"dynamic_slice_v1", vh_lower_index, 0},
    {"dynamic_update_slice_v1", vh_lower_index, 0},
    {"gather_v1", vh_lower_index, 0},
    {"gather_v2", vh_lower_index, 0},
    {"scatter_v1", vh_lower_index, LOWER_RESULTS},
    {"scatter_v2", vh_lower_index, LOWER_RESULTS},
    {"dot_general_v1", lower_dot, 0},
    {"dot_general_v2", lower_dot, 0},
    {"reduce_v1", lower_reduce, LOWER_RESULTS},
    {"reduce_window_v1", vh_lower_window, LOWER_RESULTS},
    {"convolution_v1", vh_lower_window, 0},
    {"sort_v1", vh_lower_sort, LOWER_RESULTS},
    {"call_v1", lower_call, LOWER_RESULTS | LOWER_TOKENS},
    {"while_v1", vh_lower_control, LOWER_RESULTS},
    {"case_v1", vh_lower_control, LOWER_RESULTS},
    {"if_v1", vh_lower_control, LOWER_RESULTS},
    {"composite_v1", vh_lower_control, LOWER_RESULTS},
    {"optimization_barrier_v1", vh_lower_control, LOWER_RESULTS | LOWER_TOKENS},
    {"create_token_v1", lower_token, LOWER_RESULTS | LOWER_TOKENS},
    {"after_all_v1", lower_token, LOWER_RESULTS | LOWER_TOKENS},
    {"custom_call_v1", lower_custom_call, LOWER_RESULTS},
    {"is_finite_v1", vh_lower_bits, 0},
    {"reduce_precision_v1", vh_lower_bits, 0},
    {"bitcast_convert_v1", vh_lower_bits, 0},
    {"real_v1", vh_lower_parts, 0},
    {"imag_v1", vh_lower_parts, 0},
    {"complex_v1", vh_lower_parts, 0},
    {"triangular_solve_v1", vh_lower_linalg, 0},
    {"cholesky_v1", vh_lower_linalg, 0},
    {"fft_v1", vh_lower_linalg, 0},
    {"rng_bit_generator_v1", vh_lower_rng, LOWER_RESULTS},
};

static void lower_op(lowering* L, prog_insn* in) {
  vh* v = L->v;
  const bc_op* op = L->op;
  const char* name = v->m->op_names[op->name].name;
  in->vhlo_name = v->op;
  in->num_in = op->num_operands;
  in->in = op->operands;
  in->num_out = op->num_results;
  in->out = op->first_result;
  /* Sharding annotations mean nothing on one device.  In a portable artifact an sdy op in a
   * function body sits between two builtin.unrealized_conversion_casts (VHLO types to builtin
   * types and back), its value unchanged: all three run as the identity, shapes carried over
   * from the operand (the builtin types need not be read). */
  const char* dialect = v->m->dialects[v->m->op_names[op->name].dialect];
  bool passthrough = (strcmp(dialect, "builtin") == 0 && strcmp(name, "unrealized_conversion_cast") == 0) ||
                     (strcmp(dialect, "sdy") == 0 && (strcmp(name, "sharding_constraint") == 0 ||
                                                       strcmp(name, "reshard") == 0));
  if (passthrough) {
    check(v, op->num_operands == op->num_results && op->num_results >= 1, "a cast has one result per operand");
    for (int r = 0; r < op->num_operands; r++) L->f->values[op->first_result + r] = *operand(L, r);
    in->shape = L->f->values[op->first_result];
    in->op = OP_IDENTITY;
    return;
  }
  for (int r = 0; r < op->num_results; r++) {
    prog_shape s = tensor_type(v, op->result_types[r]);
    if (r == 0) in->shape = s;
    L->f->values[op->first_result + r] = s;
  }
  for (int r = 0; r < op->num_operands; r++) operand(L, r);
  int arity = 0, code = vh_elementwise(name, &arity);
  int row = -1;
  for (size_t k = 0; code < 0 && row < 0 && k < sizeof lowerings / sizeof lowerings[0]; k++)
    if (strcmp(lowerings[k].name, name) == 0) row = (int)k;
  unsigned flags = row >= 0 ? lowerings[row].flags : 0;
  if (!(flags & LOWER_TOKENS)) {
    for (int r = 0; r < op->num_operands + op->num_results; r++) {
      const prog_shape* s = r < op->num_operands ? operand(L, r)
                                                 : &L->f->values[op->first_result + r - op->num_operands];
      if (s->dtype == PROG_TOKEN)
        UNSUPPORTED(v, "unsupported: a token operand or result of %s (the dumpref device passes "
                       "tokens through calls and returns only)", v->op);
    }
  }
  if (!(flags & LOWER_RESULTS) && op->num_results != 1)
    UNSUPPORTED(v, "unsupported: %s with %d results", v->op, op->num_results);
  if (code >= 0) {
    lower_elementwise(L, in, (prog_opcode)code, arity);
  } else if (row >= 0) {
    lowerings[row].lower(L, in, name);
  } else {
    UNSUPPORTED(v, "unsupported op %s.%s (the dumpref interpreter does not implement it)",
                dialect, name);
  }
}

/* ---- functions and the module ----------------------------------------------------------- */

static const bc_op* func_body_return(vh* v, const bc_block* b) {
  if (b->num_ops == 0) MALFORMED(v, "malformed program: empty function body");
  const bc_op* ret = &b->ops[b->num_ops - 1];
  if (strcmp(v->m->op_names[ret->name].name, "return_v1") != 0 ||
      v->m->op_names[ret->name].dialect != v->vhlo)
    MALFORMED(v, "malformed program: function body does not end in return");
  return ret;
}

/* Which arguments are donated: arg_attrs is an array of one dictionary per argument (name,
 * value pairs); jax marks a donated argument with `tf.aliasing_output = N` (an output may take
 * its buffer) or `jax.buffer_donor = true`.  Anything else in the dictionaries is skipped. */
static void read_donors(vh* v, int arg_attrs, prog_func* f) {
  uint64_t code;
  bc_cursor c;
  if (!peek_vhlo_attr(v, arg_attrs, &code, &c) || code != VH_ARRAY) return;
  c.what = "argument attributes";
  uint64_t n = bc_count(&c, 1);
  for (uint64_t k = 0; k < n && k < (uint64_t)f->num_args; k++) {
    bc_cursor d;
    if (!peek_vhlo_attr(v, (int)bc_varint(&c), &code, &d) || code != VH_DICT) continue;
    d.what = "argument attribute dictionary";
    uint64_t pairs = bc_count(&d, 2);
    for (uint64_t q = 0; q < pairs; q++) {
      int name = (int)bc_varint(&d), value = (int)bc_varint(&d);
      bc_cursor s;
      if (!peek_vhlo_attr(v, name, &code, &s) || code != VH_STRING) continue;
      const char* key = string_at(v, &s);
      bool donor = strcmp(key, "tf.aliasing_output") == 0;
      if (strcmp(key, "jax.buffer_donor") == 0) {
        bc_cursor b;
        donor = peek_vhlo_attr(v, value, &code, &b) && code == VH_BOOL && bc_varint(&b) != 0;
      }
      if (!donor) continue;
      if (f->donated == NULL)
        f->donated = prog_alloc(v->ctx, (size_t)f->num_args, sizeof(unsigned char));
      f->donated[k] = 1;
    }
  }
}

/* Reads a function's signature (before any body is lowered, so calls can be checked). */
static void declare_func(vh* v, const bc_op* op, prog_func* f) {
  v->op = "vhlo.func_v1";
  f->name = attr_string(v, need(v, op, "sym_name"));
  check(v, op->num_regions == 1 && op->regions[0].num_blocks == 1,
        "function needs one body block (control flow is not supported)");
  const bc_region* r = &op->regions[0];
  const bc_block* b = &r->blocks[0];
  f->num_args = b->num_args;
  f->num_values = r->num_values;
  f->values = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(prog_shape));
  for (int k = 0; k < b->num_args; k++) {
    check(v, b->arg_values[k] == k, "argument numbering");
    f->values[k] = tensor_type(v, b->arg_types[k]);
  }
  int arg_attrs = op_attr(v, op, "arg_attrs");
  if (arg_attrs >= 0) read_donors(v, arg_attrs, f);
  const bc_op* ret = func_body_return(v, b);
  f->num_results = ret->num_operands;
  f->results = ret->operands;
}

static bool is_binary_elementwise(prog_opcode op) {
  return prog_ew_arity(op) == 2 || op == OP_COMPARE;
}

/* jax writes `x + 1` as a broadcast of a scalar constant, then the add.  A binary elementwise
 * op reads such a scalar in place (flag in scalar_in) instead of a materialized copy; the
 * broadcast, left without readers, is then skipped by the interpreter. */
static void fold_scalar_broadcasts(vh* v, prog_func* f) {
  int* producer = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(int));
  for (int k = 0; k < f->num_values; k++) producer[k] = -1;
  for (int k = 0; k < f->num_insns; k++)
    for (int r = 0; r < f->insns[k].num_out; r++) producer[f->insns[k].out + r] = k;
  for (int k = 0; k < f->num_insns; k++) {
    prog_insn* in = &f->insns[k];
    if (!is_binary_elementwise(in->op)) continue;
    for (int r = 0; r < 2; r++) {
      int p = producer[in->in[r]];
      if (p < 0 || f->insns[p].op != OP_BROADCAST) continue;
      const prog_shape* src = &f->values[f->insns[p].in[0]];
      if (prog_shape_elements(src) != 1 || prog_shape_elements(&in->shape) <= 1) continue;
      in->in[r] = f->insns[p].in[0];
      in->scalar_in |= 1u << r;
    }
  }
}

/* Lowers the ops of block `b` (all but its return) into `f`, whose values up to the block's
 * arguments are set up and marked in `defined`. */
static void lower_body(vh* v, const bc_block* b, prog_func* f, bool* defined) {
  f->num_insns = b->num_ops - 1;
  f->insns = prog_alloc(v->ctx, (size_t)f->num_insns, sizeof(prog_insn));
  lowering L = {v, f, NULL, defined};
  for (int k = 0; k < f->num_insns; k++) {
    const bc_op* o = &b->ops[k];
    char name[96];
    snprintf(name, sizeof name, "%s.%s", v->m->dialects[v->m->op_names[o->name].dialect],
             v->m->op_names[o->name].name);
    v->op = name;
    if (o->num_results > 0 &&
        (o->first_result < f->base || o->first_result + o->num_results > f->num_values))
      MALFORMED(v, "malformed program: %s results outside the function's values", name);
    L.op = o;
    lower_op(&L, &f->insns[k]);
    f->insns[k].vhlo_name = prog_alloc(v->ctx, strlen(name) + 1, 1);
    strcpy((char*)f->insns[k].vhlo_name, name);
    for (int r = 0; r < o->num_results; r++) defined[o->first_result + r] = true;
  }
  v->op = "vhlo.return_v1";
  for (int k = 0; k < f->num_results; k++) {
    int id = f->results[k];
    check(v, id >= 0 && id < f->num_values && defined[id], "returns an undefined value");
  }
  vh_finish_func(v, f);
}

void vh_finish_func(vh* v, prog_func* f) {
  fold_scalar_broadcasts(v, f);
  /* last use of each value, so the interpreter can free intermediates early; what a region
   * reads counts as read by the op that owns the region */
  f->last_use = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(int));
  for (int k = 0; k < f->num_values; k++) f->last_use[k] = -1;
  for (int k = 0; k < f->num_insns; k++) {
    for (int r = 0; r < f->insns[k].num_in; r++) f->last_use[f->insns[k].in[r]] = k;
    for (int r = 0; r < f->insns[k].num_cap; r++) f->last_use[f->insns[k].cap[r]] = k;
  }
  for (int k = 0; k < f->num_results; k++) f->last_use[f->results[k]] = f->num_insns;
}

static void lower_func(vh* v, const bc_op* op, prog_func* f) {
  bool* defined = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(bool));
  for (int k = 0; k < f->num_args; k++) defined[k] = true;
  lower_body(v, &op->regions[0].blocks[0], f, defined);
}

static void lower_region(lowering* L, prog_insn* in, const bc_region* r, prog_func* sub) {
  vh* v = L->v;
  const char* owner = v->op;
  const prog_func* parent = L->f;
  check(v, r->num_blocks == 1, "a region needs exactly one block");
  const bc_block* b = &r->blocks[0];
  int base = L->op->isolated ? 0 : parent->num_values;
  sub->name = owner;
  sub->base = base;
  sub->first_arg = base;
  sub->num_args = b->num_args;
  sub->num_values = base + r->num_values;
  sub->values = prog_alloc(v->ctx, (size_t)(sub->num_values > 0 ? sub->num_values : 1),
                           sizeof(prog_shape));
  bool* defined = prog_alloc(v->ctx, (size_t)(sub->num_values > 0 ? sub->num_values : 1),
                             sizeof(bool));
  if (base > 0) {
    memcpy(sub->values, parent->values, (size_t)base * sizeof(prog_shape));
    memcpy(defined, L->defined, (size_t)base * sizeof(bool));
  }
  for (int k = 0; k < b->num_args; k++) {
    check(v, b->arg_values[k] == base + k && base + k < sub->num_values, "region argument numbering");
    sub->values[base + k] = tensor_type(v, b->arg_types[k]);
    defined[base + k] = true;
  }
  const bc_op* ret = func_body_return(v, b);
  sub->num_results = ret->num_operands;
  sub->results = ret->operands;
  lower_body(v, b, sub, defined);
  v->op = owner;
  /* what the region reads of the enclosing function: operands, nested captures, results */
  int extra = 0;
  for (int k = 0; k < sub->num_insns; k++) extra += sub->insns[k].num_in + sub->insns[k].num_cap;
  extra += sub->num_results;
  int* cap = prog_alloc(v->ctx, (size_t)(in->num_cap + extra + 1), sizeof(int));
  if (in->num_cap > 0) memcpy(cap, in->cap, (size_t)in->num_cap * sizeof(int));
  int n = in->num_cap;
  for (int k = 0; k <= sub->num_insns; k++) {
    const prog_insn* x = k < sub->num_insns ? &sub->insns[k] : NULL;
    int count = x ? x->num_in + x->num_cap : sub->num_results;
    for (int q = 0; q < count; q++) {
      int id = !x ? sub->results[q] : q < x->num_in ? x->in[q] : x->cap[q - x->num_in];
      if (id >= base) continue;
      bool seen = false;
      for (int j = 0; j < n && !seen; j++) seen = cap[j] == id;
      if (!seen) cap[n++] = id;
    }
  }
  in->cap = cap;
  in->num_cap = n;
}


static void check_call_tree(vh* v, prog_program* p, const prog_func* fn, int depth, int* state);

/* Calls must match the callee's signature, and no function may reach itself (the interpreter
 * recurses on calls). */
static void check_calls(vh* v, prog_program* p, int f, int depth, int* state) {
  if (state[f] == 2) return;
  if (state[f] == 1 || depth > 64) UNSUPPORTED(v, "unsupported: recursive function calls");
  state[f] = 1;
  check_call_tree(v, p, &p->funcs[f], depth, state);
  state[f] = 2;
}

static void check_call_tree(vh* v, prog_program* p, const prog_func* fn, int depth, int* state) {
  if (depth > 64) UNSUPPORTED(v, "unsupported: regions or calls nested too deeply");
  for (int k = 0; k < fn->num_insns; k++) {
    prog_insn* in = &fn->insns[k];
    for (int s = 0; s < in->num_sub; s++) check_call_tree(v, p, &in->sub[s], depth + 1, state);
    if (in->op != OP_CALL) continue;
    prog_func* callee = &p->funcs[in->iarg];
    v->op = in->vhlo_name;
    check(v, in->num_in == callee->num_args && in->num_out == callee->num_results,
          "call arity differs from the callee's");
    for (int r = 0; r < in->num_in; r++) {
      const prog_shape *a = &fn->values[in->in[r]], *b = &callee->values[r];
      check(v, same_dims(a, b) && a->dtype == b->dtype, "call argument types");
    }
    for (int r = 0; r < in->num_out; r++) {
      const prog_shape *a = &fn->values[in->out + r], *b = &callee->values[callee->results[r]];
      check(v, same_dims(a, b) && a->dtype == b->dtype, "call result types");
    }
    check_calls(v, p, in->iarg, depth + 1, state);
  }
}

void vh_lower(prog_ctx* ctx, const bc_module* m, prog_program* p) {
  vh v = {ctx, m, bc_dialect(m, "builtin"), bc_dialect(m, "vhlo"), p, "module", lower_region};
  if (v.vhlo < 0) {
    if (bc_dialect(m, "stablehlo") >= 0)
      UNSUPPORTED(&v, "unsupported: native stablehlo bytecode (producer %s); the dumpref "
                      "reader reads StableHLO portable artifacts (vhlo)", m->producer);
    UNSUPPORTED(&v, "unsupported: no vhlo dialect in the program (producer %s)", m->producer);
  }
  const bc_block* top = &m->top.regions[0].blocks[0];
  if (top->num_ops != 1 || strcmp(m->op_names[top->ops[0].name].name, "module") != 0 ||
      top->ops[0].num_regions != 1 || top->ops[0].regions[0].num_blocks != 1)
    MALFORMED(&v, "malformed program: expected a single builtin.module");
  const bc_op* module = &top->ops[0];
  p->name = "module";
  if (module->props >= 0) {  /* builtin.module: optional sym_name, stored as (index << 1 | set) */
    bc_cursor c = bc_props(m, module->props);
    uint64_t name = bc_varint(&c);
    if ((name & 1) && (name >> 1) < (uint64_t)m->num_attrs) p->name = attr_string(&v, (int)(name >> 1));
  }
  const bc_block* body = &module->regions[0].blocks[0];

  int num_funcs = 0;
  for (int k = 0; k < body->num_ops; k++) {
    const bc_op_name* n = &m->op_names[body->ops[k].name];
    if (n->dialect == v.vhlo && strcmp(n->name, "func_v1") == 0) num_funcs++;
    else if (strcmp(m->dialects[n->dialect], "sdy") != 0)
      UNSUPPORTED(&v, "unsupported module-level op %s.%s", m->dialects[n->dialect], n->name);
  }
  p->num_funcs = num_funcs;
  p->funcs = prog_alloc(ctx, (size_t)num_funcs, sizeof(prog_func));
  const bc_op** ops = prog_alloc(ctx, (size_t)num_funcs, sizeof(bc_op*));
  int f = 0;
  for (int k = 0; k < body->num_ops; k++)
    if (m->op_names[body->ops[k].name].dialect == v.vhlo) {
      ops[f] = &body->ops[k];
      declare_func(&v, ops[f], &p->funcs[f]);
      f++;
    }
  p->main = find_func(p, "main");
  if (p->main < 0) MALFORMED(&v, "malformed program: no function named main");
  for (f = 0; f < num_funcs; f++) lower_func(&v, ops[f], &p->funcs[f]);
  int* state = prog_alloc(ctx, (size_t)num_funcs, sizeof(int));
  check_calls(&v, p, p->main, 0, state);
}
