/* prog_vhlo_ops.c -- lowering of the ops with regions or many dimension numbers: control
 * flow (while, case, if, composite, optimization_barrier), indexing (pad, dynamic_slice,
 * dynamic_update_slice, gather, scatter), sort, reduce_window, convolution, and the bit-level
 * ops (is_finite, reduce_precision, bitcast_convert).
 *
 * As in prog_vhlo.c, every shape relation the interpreter relies on is checked here; what the
 * kernels in prog_ops_*.c index with at run time (gather/scatter/dynamic indices) they clamp
 * or bounds-check themselves.  Parameter rows of prog_insn.p, by op:
 *   pad                 p0 low, p1 high, p2 interior
 *   dynamic_slice       p0 slice sizes
 *   gather              p0 offset_dims, p1 collapsed_slice_dims, p2 start_index_map,
 *                       p3 slice_sizes, p4 operand_batching_dims, p5 start_indices_batching_dims;
 *                       iarg index_vector_dim
 *   scatter             p0 update_window_dims, p1 inserted_window_dims,
 *                       p2 scatter_dims_to_operand_dims, p4 input_batching_dims,
 *                       p5 scatter_indices_batching_dims; iarg index_vector_dim; iarg2 body kind
 *   reduce_window       p0 window, p1 strides, p2 base dilations, p3 window dilations,
 *                       p4 padding low, p5 padding high; iarg2 body kind
 *   convolution         p0 strides, p1 padding low, p2 padding high, p3 lhs dilation,
 *                       p4 rhs dilation, p5 window reversal, p6/p7/p8 input/kernel/output
 *                       spatial dims, p9 [in batch, in feature, kernel in feature, kernel out
 *                       feature, out batch, out feature, feature groups, batch groups]
 *   sort                iarg dimension, iarg2 stable
 *   reduce_precision    iarg exponent bits, iarg2 mantissa bits
 */
#include <string.h>

#include "prog_vhlo.h"

static bool contains(const int64_t* d, int n, int64_t x) {
  for (int k = 0; k < n; k++)
    if (d[k] == x) return true;
  return false;
}

static const prog_shape* result(lowering* L, int r) {
  return &L->f->values[L->op->first_result + r];
}

static void regions(lowering* L, prog_insn* in, int n) {
  check(L->v, L->op->num_regions == n, "wrong number of regions");
  in->num_sub = n;
  in->sub = prog_alloc(L->v->ctx, (size_t)n, sizeof(prog_func));
  for (int k = 0; k < n; k++) vh_lower_region(L, in, &L->op->regions[k], &in->sub[k]);
}

/* The results of a region must be shaped like `want` (count n). */
static void check_region_results(vh* v, const prog_func* sub, const prog_shape* want, int n,
                                 const char* what) {
  check(v, sub->num_results == n, what);
  for (int k = 0; k < n; k++) {
    const prog_shape* s = &sub->values[sub->results[k]];
    check(v, same_dims(s, &want[k]) && s->dtype == want[k].dtype, what);
  }
}

static void check_region_args(vh* v, const prog_func* sub, const prog_shape* want, int n,
                              const char* what) {
  check(v, sub->num_args == n, what);
  for (int k = 0; k < n; k++) {
    const prog_shape* s = &sub->values[sub->first_arg + k];
    check(v, same_dims(s, &want[k]) && s->dtype == want[k].dtype, what);
  }
}

/* Scalar shapes of the given value types, for region signatures. */
static prog_shape* scalars(vh* v, const prog_shape* types, int n, int repeat) {
  prog_shape* s = prog_alloc(v->ctx, (size_t)(n * repeat + 1), sizeof(prog_shape));
  for (int r = 0; r < repeat; r++)
    for (int k = 0; k < n; k++) s[r * n + k] = (prog_shape){types[k].dtype, 0, {0}};
  return s;
}

/* A [n, 2] i64 tensor of (low, high) pairs: padding of reduce_window and convolution. */
static int attr_pairs(vh* v, const bc_op* op, const char* name, int64_t* lo, int64_t* hi, int max) {
  int a = op_attr(v, op, name);
  if (a < 0) return -1;
  prog_shape s;
  const int64_t* data = attr_tensor(v, a, &s);
  if (s.dtype != PROG_S64 || s.rank != 2 || s.dims[1] != 2 || s.dims[0] > max)
    UNSUPPORTED(v, "unsupported padding attribute in %s", v->op);
  for (int64_t k = 0; k < s.dims[0]; k++) {
    lo[k] = data[2 * k];
    hi[k] = data[2 * k + 1];
  }
  return (int)s.dims[0];
}

static void need_types(vh* v, prog_dtype t, bool arithmetic) {
  if (arithmetic && !is_arithmetic(t))
    UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(t), v->op);
}

/* ---- control flow ----------------------------------------------------------------------- */

static void lower_while(lowering* L, prog_insn* in) {
  vh* v = L->v;
  int n = L->op->num_operands;
  check(v, L->op->num_results == n, "while results differ from its operands");
  prog_shape* types = prog_alloc(v->ctx, (size_t)n + 1, sizeof(prog_shape));
  for (int k = 0; k < n; k++) {
    types[k] = *operand(L, k);
    check(v, same_dims(&types[k], result(L, k)) && types[k].dtype == result(L, k)->dtype,
          "while results differ from its operands");
  }
  in->op = OP_WHILE;
  regions(L, in, 2);
  check_region_args(v, &in->sub[0], types, n, "while condition arguments");
  check_region_args(v, &in->sub[1], types, n, "while body arguments");
  prog_shape pred = {PROG_PRED, 0, {0}};
  check_region_results(v, &in->sub[0], &pred, 1, "while condition must return one pred");
  check_region_results(v, &in->sub[1], types, n, "while body results");
}

static void lower_branches(lowering* L, prog_insn* in, bool is_if) {
  vh* v = L->v;
  expect_operands(L, 1);
  const prog_shape* index = operand(L, 0);
  check(v, index->rank == 0 && index->dtype == (is_if ? PROG_PRED : PROG_S32),
        is_if ? "if needs a pred scalar" : "case needs an s32 scalar index");
  in->op = is_if ? OP_IF : OP_CASE;
  check(v, L->op->num_regions >= 1 && (!is_if || L->op->num_regions == 2), "branch count");
  regions(L, in, L->op->num_regions);
  int n = L->op->num_results;
  prog_shape* types = prog_alloc(v->ctx, (size_t)n + 1, sizeof(prog_shape));
  for (int k = 0; k < n; k++) types[k] = *result(L, k);
  for (int b = 0; b < in->num_sub; b++) {
    check(v, in->sub[b].num_args == 0, "branches take no arguments");
    check_region_results(v, &in->sub[b], types, n, "branch results");
  }
}

/* ---- indexing --------------------------------------------------------------------------- */

static void lower_pad(lowering* L, prog_insn* in) {
  vh* v = L->v;
  expect_operands(L, 2);
  const prog_shape *a = operand(L, 0), *pv = operand(L, 1);
  check(v, pv->rank == 0 && pv->dtype == a->dtype && in->shape.dtype == a->dtype, "pad value");
  in->op = OP_PAD;
  static const char* names[3] = {"edge_padding_low", "edge_padding_high", "interior_padding"};
  for (int r = 0; r < 3; r++) {
    in->np[r] = attr_dims(v, need(v, L->op, names[r]), in->p[r], PROG_MAX_RANK);
    check(v, in->np[r] == a->rank, "pad attribute rank");
  }
  check(v, in->shape.rank == a->rank, "pad result rank");
  for (int d = 0; d < a->rank; d++) {
    check(v, in->p[2][d] >= 0 && in->p[2][d] < ((int64_t)1 << 32), "pad interior");
    int64_t lo = in->p[0][d], hi = in->p[1][d];
    check(v, lo > -((int64_t)1 << 40) && lo < ((int64_t)1 << 40) && hi > -((int64_t)1 << 40) &&
                 hi < ((int64_t)1 << 40), "pad bounds");
    int64_t size = a->dims[d] == 0 ? 0 : a->dims[d] + (a->dims[d] - 1) * in->p[2][d];
    check(v, lo + size + hi == in->shape.dims[d], "pad result shape");
  }
}

static void lower_dynamic_slice(lowering* L, prog_insn* in, bool update) {
  vh* v = L->v;
  const prog_shape* a = operand(L, 0);
  int first = update ? 2 : 1;
  check(v, L->op->num_operands == first + a->rank, "one start index per dimension");
  for (int k = first; k < L->op->num_operands; k++) {
    const prog_shape* s = operand(L, k);
    check(v, s->rank == 0 && !is_float(s->dtype) && s->dtype != PROG_PRED &&
                 s->dtype != PROG_F8E4M3FN && s->dtype != PROG_F8E5M2,
          "start indices must be integer scalars");
  }
  check(v, in->shape.dtype == a->dtype, "element types differ");
  if (update) {
    in->op = OP_DYNAMIC_UPDATE_SLICE;
    const prog_shape* u = operand(L, 1);
    check(v, same_dims(a, &in->shape) && u->dtype == a->dtype && u->rank == a->rank,
          "dynamic_update_slice shapes");
    for (int d = 0; d < a->rank; d++) check(v, u->dims[d] <= a->dims[d], "update larger than operand");
  } else {
    in->op = OP_DYNAMIC_SLICE;
    in->np[0] = attr_dims(v, need(v, L->op, "slice_sizes"), in->p[0], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && in->shape.rank == a->rank, "slice sizes");
    for (int d = 0; d < a->rank; d++)
      check(v, in->p[0][d] >= 0 && in->p[0][d] <= a->dims[d] && in->p[0][d] == in->shape.dims[d],
            "slice sizes");
  }
}

static bool int_index_type(prog_dtype t) {
  return !is_float(t) && t != PROG_PRED && t != PROG_F8E4M3FN && t != PROG_F8E5M2;
}

/* The batch dims of a gather/scatter: the dims of the indices other than index_vector_dim. */
static int index_batch(vh* v, const prog_shape* idx, int64_t ivd, int64_t* dims) {
  check(v, ivd >= 0 && ivd <= idx->rank, "index_vector_dim out of range");
  int n = 0;
  for (int d = 0; d < idx->rank; d++)
    if (d != ivd) dims[n++] = idx->dims[d];
  return n;
}

static void lower_gather(lowering* L, prog_insn* in) {
  vh* v = L->v;
  const bc_op* op = L->op;
  expect_operands(L, 2);
  const prog_shape *a = operand(L, 0), *idx = operand(L, 1);
  check(v, int_index_type(idx->dtype), "gather indices must be integers");
  check(v, in->shape.dtype == a->dtype, "element types differ");
  in->op = OP_GATHER;
  in->np[0] = opt_dims(v, op, "offset_dims", in->p[0], PROG_MAX_RANK);
  in->np[1] = opt_dims(v, op, "collapsed_slice_dims", in->p[1], PROG_MAX_RANK);
  in->np[2] = opt_dims(v, op, "start_index_map", in->p[2], PROG_MAX_RANK);
  in->np[3] = attr_dims(v, need(v, op, "slice_sizes"), in->p[3], PROG_MAX_RANK);
  in->np[4] = opt_dims(v, op, "operand_batching_dims", in->p[4], PROG_MAX_RANK);
  in->np[5] = opt_dims(v, op, "start_indices_batching_dims", in->p[5], PROG_MAX_RANK);
  in->iarg = (int)attr_int(v, need(v, op, "index_vector_dim"));
  int64_t batch[PROG_MAX_RANK];
  int nb = index_batch(v, idx, in->iarg, batch);
  int64_t vec = in->iarg < idx->rank ? idx->dims[in->iarg] : 1;
  check(v, in->np[3] == a->rank, "slice_sizes rank");
  check(v, vec == in->np[2], "start_index_map length differs from the index vector");
  check(v, in->np[4] == in->np[5], "batching dims");
  check_dims_list(v, in->p[1], in->np[1], a->rank, true);
  check_dims_list(v, in->p[2], in->np[2], a->rank, true);
  check_dims_list(v, in->p[4], in->np[4], a->rank, true);
  check_dims_list(v, in->p[5], in->np[5], idx->rank, true);
  for (int k = 0; k < in->np[5]; k++) check(v, in->p[5][k] != in->iarg, "batching dim is the index vector dim");
  for (int d = 0; d < a->rank; d++) {
    check(v, in->p[3][d] >= 0 && in->p[3][d] <= a->dims[d], "slice size out of range");
    if (contains(in->p[1], in->np[1], d) || contains(in->p[4], in->np[4], d))
      check(v, in->p[3][d] <= 1, "collapsed or batching dims must have slice size 1");
  }
  /* the result: batch dims in order, offset dims at their positions */
  int rank = nb + in->np[0];
  check(v, rank == in->shape.rank, "gather result rank");
  check_dims_list(v, in->p[0], in->np[0], rank, true);
  int bi = 0, oi = 0;
  for (int d = 0; d < rank; d++) {
    if (contains(in->p[0], in->np[0], d)) {
      /* the oi-th offset dim: the oi-th operand dim neither collapsed nor batching */
      int seen = -1, od = -1;
      for (int e = 0; e < a->rank && od < 0; e++)
        if (!contains(in->p[1], in->np[1], e) && !contains(in->p[4], in->np[4], e) && ++seen == oi) od = e;
      check(v, od >= 0, "more offset dims than operand dims left");
      check(v, in->shape.dims[d] == in->p[3][od], "gather offset dim size");
      oi++;
    } else {
      check(v, bi < nb && in->shape.dims[d] == batch[bi], "gather batch dim size");
      bi++;
    }
  }
  check(v, bi == nb, "gather batch dims");
  check(v, a->rank == in->np[0] + in->np[1] + in->np[4], "offset, collapsed and batching dims must cover the operand");
  for (int k = 0; k < in->np[4]; k++) {
    int64_t s = in->p[5][k], pos = s < in->iarg ? s : s - 1;
    check(v, idx->dims[s] == a->dims[in->p[4][k]] && pos < nb, "batching dim sizes");
  }
}

static void lower_scatter(lowering* L, prog_insn* in) {
  vh* v = L->v;
  const bc_op* op = L->op;
  int n = op->num_results;
  check(v, n >= 1 && op->num_operands == 2 * n + 1, "scatter operand count");
  const prog_shape *a = operand(L, 0), *idx = operand(L, n), *u = operand(L, n + 1);
  check(v, int_index_type(idx->dtype), "scatter indices must be integers");
  for (int k = 0; k < n; k++) {
    check(v, same_dims(operand(L, k), a) && same_dims(result(L, k), a) &&
                 result(L, k)->dtype == operand(L, k)->dtype, "scatter inputs and results");
    check(v, same_dims(operand(L, n + 1 + k), u) && operand(L, n + 1 + k)->dtype == operand(L, k)->dtype,
          "scatter updates");
  }
  in->op = OP_SCATTER;
  in->np[0] = opt_dims(v, op, "update_window_dims", in->p[0], PROG_MAX_RANK);
  in->np[1] = opt_dims(v, op, "inserted_window_dims", in->p[1], PROG_MAX_RANK);
  in->np[2] = opt_dims(v, op, "scatter_dims_to_operand_dims", in->p[2], PROG_MAX_RANK);
  in->np[4] = opt_dims(v, op, "input_batching_dims", in->p[4], PROG_MAX_RANK);
  in->np[5] = opt_dims(v, op, "scatter_indices_batching_dims", in->p[5], PROG_MAX_RANK);
  in->iarg = (int)attr_int(v, need(v, op, "index_vector_dim"));
  int64_t batch[PROG_MAX_RANK];
  int nb = index_batch(v, idx, in->iarg, batch);
  int64_t vec = in->iarg < idx->rank ? idx->dims[in->iarg] : 1;
  check(v, vec == in->np[2], "scatter_dims_to_operand_dims length differs from the index vector");
  check(v, in->np[4] == in->np[5], "batching dims");
  check_dims_list(v, in->p[0], in->np[0], u->rank, true);
  check_dims_list(v, in->p[1], in->np[1], a->rank, true);
  check_dims_list(v, in->p[2], in->np[2], a->rank, true);
  check_dims_list(v, in->p[4], in->np[4], a->rank, true);
  check_dims_list(v, in->p[5], in->np[5], idx->rank, true);
  check(v, a->rank == in->np[0] + in->np[1] + in->np[4], "window, inserted and batching dims must cover the operand");
  check(v, u->rank == nb + in->np[0], "scatter updates rank");
  int bi = 0, wi = 0;
  for (int d = 0; d < u->rank; d++) {
    if (contains(in->p[0], in->np[0], d)) {
      int seen = -1, od = -1;
      for (int e = 0; e < a->rank && od < 0; e++)
        if (!contains(in->p[1], in->np[1], e) && !contains(in->p[4], in->np[4], e) && ++seen == wi) od = e;
      check(v, od >= 0 && u->dims[d] <= a->dims[od], "scatter window larger than the operand");
      wi++;
    } else {
      check(v, bi < nb && u->dims[d] == batch[bi], "scatter update dims differ from the indices'");
      bi++;
    }
  }
  for (int k = 0; k < in->np[4]; k++)
    check(v, in->p[5][k] != in->iarg && idx->dims[in->p[5][k]] == a->dims[in->p[4][k]],
          "batching dim sizes");
  regions(L, in, 1);
  prog_shape* types = prog_alloc(v->ctx, (size_t)n + 1, sizeof(prog_shape));
  for (int k = 0; k < n; k++) types[k] = *operand(L, k);
  check_region_args(v, &in->sub[0], scalars(v, types, n, 2), 2 * n, "scatter update computation arguments");
  check_region_results(v, &in->sub[0], scalars(v, types, n, 1), n, "scatter update computation results");
  in->iarg2 = n == 1 && !is_complex(a->dtype) ? vh_region_kind(v, &in->sub[0]) : RED_GENERIC;
  /* `x.at[i].set(y)`: the body returns its second argument */
  const prog_func* body = &in->sub[0];
  if (n == 1 && body->num_insns == 0 && body->results[0] == body->first_arg + 1) in->iarg2 = -1;
}

/* ---- sort, windows, convolution ------------------------------------------------------------ */

static void lower_sort(lowering* L, prog_insn* in) {
  vh* v = L->v;
  int n = L->op->num_operands;
  check(v, n >= 1 && L->op->num_results == n, "sort results differ from its operands");
  const prog_shape* a = operand(L, 0);
  prog_shape* types = prog_alloc(v->ctx, (size_t)n + 1, sizeof(prog_shape));
  for (int k = 0; k < n; k++) {
    types[k] = *operand(L, k);
    check(v, same_dims(&types[k], a) && same_dims(result(L, k), a) &&
                 result(L, k)->dtype == types[k].dtype, "sort operand shapes");
  }
  in->op = OP_SORT;
  int64_t d = attr_int(v, need(v, L->op, "dimension"));
  if (d < 0) d += a->rank;
  check(v, d >= 0 && (d < a->rank || (a->rank == 0 && d == 0)), "sort dimension");
  in->iarg = (int)d;
  int st = op_attr(v, L->op, "is_stable");
  in->iarg2 = st >= 0 ? attr_bool(v, st) : 0;
  regions(L, in, 1);
  prog_shape* args = prog_alloc(v->ctx, (size_t)(2 * n) + 1, sizeof(prog_shape));
  for (int k = 0; k < n; k++) args[2 * k] = args[2 * k + 1] = (prog_shape){types[k].dtype, 0, {0}};
  check_region_args(v, &in->sub[0], args, 2 * n, "sort comparator arguments");
  prog_shape pred = {PROG_PRED, 0, {0}};
  check_region_results(v, &in->sub[0], &pred, 1, "sort comparator must return one pred");
}

static void lower_reduce_window(lowering* L, prog_insn* in) {
  vh* v = L->v;
  const bc_op* op = L->op;
  int n = op->num_results;
  check(v, n >= 1 && op->num_operands == 2 * n, "reduce_window operand count");
  const prog_shape* a = operand(L, 0);
  int r = a->rank;
  in->op = OP_REDUCE_WINDOW;
  in->np[0] = attr_dims(v, need(v, op, "window_dimensions"), in->p[0], PROG_MAX_RANK);
  check(v, in->np[0] == r, "window rank");
  for (int k = 1; k <= 3; k++) {
    static const char* names[4] = {NULL, "window_strides", "base_dilations", "window_dilations"};
    in->np[k] = opt_dims(v, op, names[k], in->p[k], PROG_MAX_RANK);
    if (in->np[k] == 0)
      for (int d = 0; d < r; d++) in->p[k][d] = 1;
    else
      check(v, in->np[k] == r, "window attribute rank");
    in->np[k] = r;
  }
  int np = attr_pairs(v, op, "padding", in->p[4], in->p[5], PROG_MAX_RANK);
  if (np < 0) {
    memset(in->p[4], 0, sizeof in->p[4]);
    memset(in->p[5], 0, sizeof in->p[5]);
  } else {
    check(v, np == r, "padding rank");
  }
  in->np[4] = in->np[5] = r;
  prog_shape out = {a->dtype, r, {0}};
  for (int d = 0; d < r; d++) {
    int64_t w = in->p[0][d], s = in->p[1][d], bd = in->p[2][d], wd = in->p[3][d];
    int64_t lo = in->p[4][d], hi = in->p[5][d];
    check(v, w >= 1 && s >= 1 && bd >= 1 && wd >= 1 && w < (1 << 30) && s < (1 << 30) &&
                 bd < (1 << 30) && wd < (1 << 30) && lo > -(1 << 30) && lo < (1 << 30) &&
                 hi > -(1 << 30) && hi < (1 << 30), "window attributes");
    int64_t padded = (a->dims[d] == 0 ? 0 : (a->dims[d] - 1) * bd + 1) + lo + hi;
    int64_t extent = (w - 1) * wd + 1;
    out.dims[d] = padded < extent ? 0 : (padded - extent) / s + 1;
  }
  prog_shape* types = prog_alloc(v->ctx, (size_t)n + 1, sizeof(prog_shape));
  for (int k = 0; k < n; k++) {
    const prog_shape *x = operand(L, k), *init = operand(L, n + k);
    /* the body reads the elements in place, typed as the results: an input of another
     * element type would be read at the wrong width (see the reduce body check) */
    check(v, same_dims(x, a) && init->rank == 0 && init->dtype == result(L, k)->dtype,
          "reduce_window inputs");
    if (x->dtype != result(L, k)->dtype)
      UNSUPPORTED(v, "unsupported reduce_window of %s elements into %s results",
                  prog_dtype_name(x->dtype), prog_dtype_name(result(L, k)->dtype));
    out.dtype = result(L, k)->dtype;
    check(v, same_dims(&out, result(L, k)), "reduce_window result shape");
    types[k] = *result(L, k);
    need_types(v, x->dtype, false);
  }
  regions(L, in, 1);
  check_region_args(v, &in->sub[0], scalars(v, types, n, 2), 2 * n, "reduce_window body arguments");
  check_region_results(v, &in->sub[0], scalars(v, types, n, 1), n, "reduce_window body results");
  in->iarg2 = n == 1 && operand(L, 0)->dtype == types[0].dtype && !is_complex(types[0].dtype)
                  ? vh_region_kind(v, &in->sub[0]) : RED_GENERIC;
}

static void lower_convolution(lowering* L, prog_insn* in) {
  vh* v = L->v;
  const bc_op* op = L->op;
  expect_operands(L, 2);
  const prog_shape *x = operand(L, 0), *k = operand(L, 1);
  int r = x->rank, ns = r - 2;
  check(v, r >= 2 && k->rank == r && in->shape.rank == r, "convolution ranks");
  for (int t = 0; t < 3; t++) {
    prog_dtype dt = t == 0 ? x->dtype : t == 1 ? k->dtype : in->shape.dtype;
    if (!is_arithmetic(dt) || dt == PROG_PRED)
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(dt), v->op);
  }
  in->op = OP_CONVOLUTION;
  static const char* scalars_[8] = {"input_batch_dimension", "input_feature_dimension",
                                    "kernel_input_feature_dimension",
                                    "kernel_output_feature_dimension", "output_batch_dimension",
                                    "output_feature_dimension", "feature_group_count",
                                    "batch_group_count"};
  for (int t = 0; t < 8; t++) {
    int at = op_attr(v, op, scalars_[t]);
    in->p[9][t] = at < 0 ? (t >= 6 ? 1 : -1) : attr_int(v, at);
  }
  in->np[9] = 8;
  in->np[6] = attr_dims(v, need(v, op, "input_spatial_dimensions"), in->p[6], PROG_MAX_RANK);
  in->np[7] = attr_dims(v, need(v, op, "kernel_spatial_dimensions"), in->p[7], PROG_MAX_RANK);
  in->np[8] = attr_dims(v, need(v, op, "output_spatial_dimensions"), in->p[8], PROG_MAX_RANK);
  check(v, in->np[6] == ns && in->np[7] == ns && in->np[8] == ns, "spatial dimension counts");
  int64_t xd[PROG_MAX_RANK], kd[PROG_MAX_RANK], od[PROG_MAX_RANK];
  int nx = 0, nk = 0, no = 0;
  xd[nx++] = in->p[9][0]; xd[nx++] = in->p[9][1];
  kd[nk++] = in->p[9][2]; kd[nk++] = in->p[9][3];
  od[no++] = in->p[9][4]; od[no++] = in->p[9][5];
  for (int s = 0; s < ns; s++) { xd[nx++] = in->p[6][s]; kd[nk++] = in->p[7][s]; od[no++] = in->p[8][s]; }
  check_dims_list(v, xd, r, r, true);
  check_dims_list(v, kd, r, r, true);
  check_dims_list(v, od, r, r, true);
  int64_t G = in->p[9][6], BG = in->p[9][7];
  int64_t B = x->dims[in->p[9][0]], C = x->dims[in->p[9][1]];
  int64_t KI = k->dims[in->p[9][2]], KO = k->dims[in->p[9][3]];
  check(v, G >= 1 && BG >= 1 && (G == 1 || BG == 1), "group counts");
  check(v, C == KI * G && KO % G == 0 && KO % BG == 0 && B % BG == 0, "feature or batch group sizes");
  check(v, in->shape.dims[in->p[9][4]] == B / BG && in->shape.dims[in->p[9][5]] == KO,
        "convolution result batch or feature size");
  int a;
  in->np[0] = opt_dims(v, op, "window_strides", in->p[0], PROG_MAX_RANK);
  in->np[3] = opt_dims(v, op, "lhs_dilation", in->p[3], PROG_MAX_RANK);
  in->np[4] = opt_dims(v, op, "rhs_dilation", in->p[4], PROG_MAX_RANK);
  for (int t = 0; t < 3; t++) {
    int row = t == 0 ? 0 : t == 1 ? 3 : 4;
    if (in->np[row] == 0) for (int s = 0; s < ns; s++) in->p[row][s] = 1;
    else check(v, in->np[row] == ns, "window attribute rank");
    in->np[row] = ns;
  }
  in->np[5] = ns;
  memset(in->p[5], 0, sizeof in->p[5]);
  if ((a = op_attr(v, op, "window_reversal")) >= 0) {
    prog_shape s;
    const uint8_t* flags = attr_tensor(v, a, &s);
    check(v, s.dtype == PROG_PRED && s.rank == 1 && s.dims[0] == ns, "window_reversal");
    for (int t = 0; t < ns; t++) in->p[5][t] = flags[t];
  }
  int np = attr_pairs(v, op, "padding", in->p[1], in->p[2], PROG_MAX_RANK);
  if (np < 0) {
    memset(in->p[1], 0, sizeof in->p[1]);
    memset(in->p[2], 0, sizeof in->p[2]);
  } else {
    check(v, np == ns, "padding rank");
  }
  in->np[1] = in->np[2] = ns;
  for (int s = 0; s < ns; s++) {
    int64_t st = in->p[0][s], ld = in->p[3][s], rd = in->p[4][s], lo = in->p[1][s], hi = in->p[2][s];
    check(v, st >= 1 && ld >= 1 && rd >= 1 && st < (1 << 30) && ld < (1 << 30) && rd < (1 << 30) &&
                 lo > -(1 << 30) && lo < (1 << 30) && hi > -(1 << 30) && hi < (1 << 30),
          "convolution window attributes");
    int64_t in_size = x->dims[in->p[6][s]], ksize = k->dims[in->p[7][s]];
    int64_t padded = (in_size == 0 ? 0 : (in_size - 1) * ld + 1) + lo + hi;
    int64_t extent = ksize == 0 ? 0 : (ksize - 1) * rd + 1;
    int64_t want = padded < extent ? 0 : (padded - extent) / st + 1;
    check(v, in->shape.dims[in->p[8][s]] == want, "convolution result spatial size");
  }
}

/* ---- bits ------------------------------------------------------------------------------- */

/* is_finite, reduce_precision, bitcast_convert */
void vh_lower_bits(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  expect_operands(L, 1);
  const prog_shape* a = operand(L, 0);
  if (strcmp(name, "is_finite_v1") == 0) {
    in->op = OP_IS_FINITE;
    check(v, same_dims(a, &in->shape) && in->shape.dtype == PROG_PRED && is_float(a->dtype),
          "is_finite takes floats and gives pred");
  } else if (strcmp(name, "reduce_precision_v1") == 0) {
    in->op = OP_REDUCE_PRECISION;
    check(v, same_dims(a, &in->shape) && in->shape.dtype == a->dtype, "operand and result differ");
    if (!is_float(a->dtype))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(a->dtype), v->op);
    int64_t e = attr_int(v, need(v, L->op, "exponent_bits"));
    int64_t m = attr_int(v, need(v, L->op, "mantissa_bits"));
    check(v, e >= 1 && e <= 11 && m >= 0 && m <= 52, "precision bits out of range");
    in->iarg = (int)e;
    in->iarg2 = (int)m;
  } else {
    in->op = OP_BITCAST_CONVERT;
    /* 4-bit elements are held one per byte but bitcast as 4 bits: compare the bits */
    int64_t bits_in = (a->dtype == PROG_S4 || a->dtype == PROG_U4) ? 4 : 8 * (int64_t)prog_dtype_size(a->dtype);
    int64_t bits_out = (in->shape.dtype == PROG_S4 || in->shape.dtype == PROG_U4)
                           ? 4 : 8 * (int64_t)prog_dtype_size(in->shape.dtype);
    check(v, a->dtype != PROG_TOKEN && in->shape.dtype != PROG_TOKEN &&
                 prog_shape_elements(a) * bits_in == prog_shape_elements(&in->shape) * bits_out,
          "bitcast_convert changes the bit count");
    /* the element sizes (in bits) must relate by the minor dimension (or be equal) */
    int64_t ea = bits_in, eo = bits_out;
    if (ea != eo) {
      const prog_shape* wide = ea > eo ? a : &in->shape;
      const prog_shape* narrow = ea > eo ? &in->shape : a;
      size_t ratio = (size_t)(ea > eo ? ea / eo : eo / ea);
      check(v, narrow->rank == wide->rank + 1 && (size_t)narrow->dims[narrow->rank - 1] == ratio,
            "bitcast_convert between sizes needs a minor dimension of the size ratio");
    }
  }
}

/* ---- the op families (prog_vhlo.c's table `lowerings` maps VHLO names to them) ------- */

/* Qr: a[..., m, n] -> (the Householder vectors below R, taus[..., min(m, n)]);
 * ProductOfElementaryHouseholderReflectors: (a[..., m, n], taus[..., k]) -> Q[..., m, n]. */
void vh_lower_householder(lowering* L, prog_insn* in, bool qr) {
  vh* v = L->v;
  const bc_op* op = L->op;
  expect_operands(L, qr ? 1 : 2);
  check(v, op->num_results == (qr ? 2 : 1), qr ? "Qr gives two results" : "one result");
  const prog_shape* a = operand(L, 0);
  const char* what = qr ? "custom call Qr" : "custom call ProductOfElementaryHouseholderReflectors";
  if (!is_float(a->dtype) && !is_complex(a->dtype))
    UNSUPPORTED(v, "unsupported element type %s for the %s", prog_dtype_name(a->dtype), what);
  check(v, a->rank >= 2, "a matrix (or a batch of them)");
  check(v, same_dims(result(L, 0), a) && result(L, 0)->dtype == a->dtype, "result 0 is a's shape");
  int64_t m = a->dims[a->rank - 2], n = a->dims[a->rank - 1];
  const prog_shape* taus = qr ? result(L, 1) : operand(L, 1);
  check(v, taus->dtype == a->dtype && taus->rank == a->rank - 1, "taus' type and rank");
  for (int d = 0; d < a->rank - 2; d++) check(v, taus->dims[d] == a->dims[d], "taus' batch dims");
  int64_t k = taus->dims[taus->rank - 1];
  check(v, qr ? k == (m < n ? m : n) : k <= m && k <= n, "taus' length");
  in->op = OP_LINALG;
  in->iarg = qr ? 0 : 1;
}

/* while, case, if, composite (a call of its decomposition), optimization_barrier */
void vh_lower_control(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "while_v1") == 0) {
    lower_while(L, in);
  } else if (strcmp(name, "case_v1") == 0 || strcmp(name, "if_v1") == 0) {
    lower_branches(L, in, name[0] == 'i');
  } else if (strcmp(name, "composite_v1") == 0) {
    /* a named group of ops (top_k, erf_inv ...) with its meaning as a function: run that */
    in->op = OP_CALL;
    const char* callee = attr_string(v, need(v, op, "decomposition"));
    int f = find_func(v->program, callee);
    if (f < 0) MALFORMED(v, "malformed program: composite of unknown function '%s'", callee);
    in->iarg = f;
  } else {  /* optimization_barrier_v1 */
    in->op = OP_IDENTITY;
    check(v, op->num_operands == op->num_results, "optimization_barrier arity");
    for (int k = 0; k < op->num_operands; k++)
      check(v, same_dims(operand(L, k), result(L, k)) && operand(L, k)->dtype == result(L, k)->dtype,
            "optimization_barrier types");
  }
}

/* pad, dynamic_slice, dynamic_update_slice, gather, scatter */
void vh_lower_index(lowering* L, prog_insn* in, const char* name) {
  if (strcmp(name, "pad_v1") == 0) lower_pad(L, in);
  else if (strcmp(name, "dynamic_slice_v1") == 0 || strcmp(name, "dynamic_update_slice_v1") == 0)
    lower_dynamic_slice(L, in, name[8] == 'u');
  else if (strcmp(name, "gather_v1") == 0 || strcmp(name, "gather_v2") == 0) lower_gather(L, in);
  else lower_scatter(L, in);  /* scatter_v1, scatter_v2 */
}

void vh_lower_sort(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  lower_sort(L, in);
}

/* reduce_window, convolution */
void vh_lower_window(lowering* L, prog_insn* in, const char* name) {
  if (strcmp(name, "reduce_window_v1") == 0) lower_reduce_window(L, in);
  else lower_convolution(L, in);
}

/* real, imag, complex: between complex numbers and their parts */
void vh_lower_parts(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  if (strcmp(name, "real_v1") == 0 || strcmp(name, "imag_v1") == 0) {
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->op = name[0] == 'r' ? OP_REAL : OP_IMAG;
    prog_dtype part = a->dtype == PROG_C64 ? PROG_F32 : a->dtype == PROG_C128 ? PROG_F64 : a->dtype;
    check(v, same_dims(a, &in->shape) && in->shape.dtype == part && is_float(part),
          "real/imag take complex or float and give the part's type");
  } else {  /* complex_v1 */
    expect_operands(L, 2);
    const prog_shape *a = operand(L, 0), *b = operand(L, 1);
    in->op = OP_COMPLEX;
    check(v, same_dims(a, &in->shape) && same_dims(b, &in->shape) && a->dtype == b->dtype &&
                 ((a->dtype == PROG_F32 && in->shape.dtype == PROG_C64) ||
                  (a->dtype == PROG_F64 && in->shape.dtype == PROG_C128)),
          "complex takes two f32 (f64) parts and gives c64 (c128)");
  }
}

/* triangular_solve, cholesky, fft */
void vh_lower_linalg(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "triangular_solve_v1") == 0) {
    expect_operands(L, 2);
    const prog_shape *a = operand(L, 0), *b = operand(L, 1);
    if (!is_float(b->dtype) && !is_complex(b->dtype))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(b->dtype), v->op);
    check(v, a->dtype == b->dtype && same_dims(b, &in->shape) && in->shape.dtype == b->dtype &&
                 a->rank == b->rank && a->rank >= 2, "triangular_solve types and ranks");
    int rank = a->rank;
    for (int d = 0; d < rank - 2; d++) check(v, a->dims[d] == b->dims[d], "triangular_solve batch dims");
    bool left = attr_bool(v, need(v, op, "left_side"));
    check(v, a->dims[rank - 1] == a->dims[rank - 2] &&
                 a->dims[rank - 1] == b->dims[left ? rank - 2 : rank - 1],
          "triangular_solve: a square a of b's size");
    uint64_t tr = attr_enum(v, need(v, op, "transpose_a"), VH_TRANSPOSE, "transpose");
    check(v, tr >= 1 && tr <= 3, "triangular_solve transpose_a");
    in->op = OP_TRIANGULAR_SOLVE;
    in->p[0][0] = left;
    in->p[0][1] = attr_bool(v, need(v, op, "lower"));
    in->p[0][2] = attr_bool(v, need(v, op, "unit_diagonal"));
    in->p[0][3] = tr != 1;  /* TRANSPOSE or ADJOINT (the same on real numbers) */
    in->p[0][4] = tr == 3;  /* ADJOINT: complex elements are conjugated too */
    in->np[0] = 5;
  } else if (strcmp(name, "cholesky_v1") == 0) {
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    if (!is_float(a->dtype) && !is_complex(a->dtype))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(a->dtype), v->op);
    check(v, same_dims(a, &in->shape) && in->shape.dtype == a->dtype && a->rank >= 2 &&
                 a->dims[a->rank - 1] == a->dims[a->rank - 2],
          "cholesky takes square matrices and gives their type and shape");
    in->op = OP_CHOLESKY;
    in->iarg = attr_bool(v, need(v, op, "lower"));
  } else {  /* fft_v1 */
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    uint64_t type = attr_enum(v, need(v, op, "fft_type"), VH_FFT_TYPE, "fft type");
    check(v, type <= PROG_IRFFT, "fft_type is FFT, IFFT, RFFT or IRFFT");
    int n = attr_dims(v, need(v, op, "fft_length"), in->p[0], PROG_MAX_RANK);
    check(v, n >= 1 && n <= 3 && n <= a->rank && a->rank == in->shape.rank,
          "fft over 1 to 3 of the operand's last dimensions");
    bool c2c = type == PROG_FFT || type == PROG_IFFT;
    prog_dtype ct = type == PROG_RFFT ? (a->dtype == PROG_F64 ? PROG_C128 : PROG_C64) : a->dtype;
    prog_dtype rt = type == PROG_IRFFT ? (a->dtype == PROG_C128 ? PROG_F64 : PROG_F32) : ct;
    if (c2c || type == PROG_IRFFT) {
      if (a->dtype != PROG_C64 && a->dtype != PROG_C128)
        UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(a->dtype), v->op);
    } else if (a->dtype != PROG_F32 && a->dtype != PROG_F64) {
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(a->dtype), v->op);
    }
    check(v, in->shape.dtype == rt, "fft result type");
    int lead = a->rank - n;
    for (int d = 0; d < lead; d++) check(v, a->dims[d] == in->shape.dims[d], "fft batch dims");
    for (int k = 0; k < n; k++) {
      int64_t len = in->p[0][k], ad = a->dims[lead + k], od = in->shape.dims[lead + k];
      bool last = k == n - 1;
      check(v, len >= 0, "fft lengths are not negative");  /* jnp.fft.fft of f32[0]: 0 */
      /* the real side has the lengths; the complex side of RFFT/IRFFT has len/2+1 last */
      int64_t half = len / 2 + 1;
      bool ok = c2c ? ad == len && od == len
              : type == PROG_RFFT ? ad == len && od == (last ? half : len)
              : od == len && ad == (last ? half : len);
      check(v, ok, "fft lengths and the operand's and result's dimensions");
    }
    in->np[0] = n;
    in->op = OP_FFT;
    in->iarg = (int)type;
  }
}

void vh_lower_rng(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  /* the bits XLA:CPU gives (prog_ops_rng.c): a u64[2] state, unsigned integer results */
  expect_operands(L, 1);
  check(v, op->num_results == 2, "rng_bit_generator gives a state and the bits");
  const prog_shape *state = operand(L, 0), *bits = result(L, 1);
  check(v, same_dims(state, result(L, 0)) && state->dtype == result(L, 0)->dtype,
        "rng_bit_generator's output state differs from its initial state");
  if (state->dtype != PROG_U64 || state->rank != 1 || state->dims[0] != 2)
    UNSUPPORTED(v, "unsupported state %s[%lld] for %s (the device takes u64[2], as jax passes)",
                prog_dtype_name(state->dtype), state->rank ? (long long)state->dims[0] : 0LL,
                v->op);
  if (bits->dtype != PROG_U8 && bits->dtype != PROG_U16 && bits->dtype != PROG_U32 &&
      bits->dtype != PROG_U64)
    UNSUPPORTED(v, "unsupported element type %s for %s (the device gives u8, u16, u32, u64)",
                prog_dtype_name(bits->dtype), v->op);
  uint64_t algorithm = attr_enum(v, need(v, op, "rng_algorithm"), VH_RNG_ALGORITHM,
                                 "rng algorithm");
  if (algorithm > PROG_RNG_PHILOX)
    UNSUPPORTED(v, "unsupported rng algorithm %llu for %s", (unsigned long long)algorithm, v->op);
  in->op = OP_RNG_BIT_GENERATOR;
  in->iarg = algorithm == PROG_RNG_THREE_FRY ? PROG_RNG_THREE_FRY : PROG_RNG_PHILOX;  /* DEFAULT: Philox, as on XLA:CPU */
}

void vh_lower_dimension_size(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  expect_operands(L, 1);
  int64_t d = attr_int(v, need(v, op, "dimension"));
  check(v, d >= 0 && d < operand(L, 0)->rank && in->shape.rank == 0 && in->shape.dtype == PROG_S32,
        "get_dimension_size");
  int32_t* size = prog_alloc(v->ctx, 1, sizeof(int32_t));
  *size = (int32_t)operand(L, 0)->dims[d];
  in->op = OP_CONSTANT;
  in->data = size;
  in->num_in = 0;
}
