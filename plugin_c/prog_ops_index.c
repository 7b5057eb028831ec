/* prog_ops_index.c -- pad, dynamic_slice, dynamic_update_slice, gather and scatter.
 *
 * Run-time indices follow XLA: dynamic slice starts and gather starts are clamped so the
 * slice fits in the operand; a scatter window that does not fit entirely is skipped. */
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

static bool contains(const int64_t* d, int n, int64_t x) {
  for (int k = 0; k < n; k++)
    if (d[k] == x) return true;
  return false;
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Advances a multi-index over `dims`; false when it wrapped around. */
static bool next_index(int64_t* idx, const int64_t* dims, int rank) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

static int64_t linear(const int64_t* idx, const int64_t* st, int rank) {
  int64_t at = 0;
  for (int d = 0; d < rank; d++) at += idx[d] * st[d];
  return at;
}

static void pad(const prog_insn* in, const prog_shape* a, const char* src, const char* value,
                char* o) {
  size_t es = prog_dtype_size(a->dtype);
  int64_t n = prog_shape_elements(&in->shape);
  for (int64_t i = 0; i < n; i++) memcpy(o + (size_t)i * es, value, es);
  if (prog_shape_elements(a) == 0 || n == 0) return;
  int64_t ost[PROG_MAX_RANK], idx[PROG_MAX_RANK] = {0};
  rt_strides(&in->shape, ost);
  int64_t k = 0;
  do {
    bool inside = true;
    int64_t at = 0;
    for (int d = 0; d < a->rank && inside; d++) {
      int64_t pos = in->p[0][d] + idx[d] * (in->p[2][d] + 1);
      inside = pos >= 0 && pos < in->shape.dims[d];
      at += pos * ost[d];
    }
    if (inside) memcpy(o + (size_t)at * es, src + (size_t)k * es, es);
    k++;
  } while (next_index(idx, a->dims, a->rank));
}

static void dynamic_slice(const prog_func* f, const prog_insn* in, void** vals, bool update) {
  const prog_shape* a = &f->values[in->in[0]];
  size_t es = prog_dtype_size(a->dtype);
  int first = update ? 2 : 1;
  const prog_shape* box = update ? &f->values[in->in[1]] : &in->shape;
  int64_t start[PROG_MAX_RANK], ast[PROG_MAX_RANK], bst[PROG_MAX_RANK];
  rt_strides(a, ast);
  rt_strides(box, bst);
  const char* base = vals[in->in[0]];
  char* out = vals[in->out];
  int64_t at = 0;
  for (int d = 0; d < a->rank; d++) {
    const prog_shape* s = &f->values[in->in[first + d]];
    uint64_t u = s->dtype == PROG_U64 ? LD(uint64_t, vals[in->in[first + d]], 0) : 0;
    int64_t x = s->dtype == PROG_U64 ? (u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u)
                                     : rt_get_i(s->dtype, vals[in->in[first + d]], 0);
    start[d] = clamp64(x, 0, a->dims[d] - box->dims[d]);
    at += start[d] * ast[d];
  }
  if (update) {
    if (out != base) memcpy(out, base, rt_bytes(a));
    rt_strided_copy(es, a->rank, box->dims, out + (size_t)at * es, ast, vals[in->in[1]], bst);
  } else {
    rt_strided_copy(es, a->rank, box->dims, out, bst, base + (size_t)at * es, ast);
  }
}

/* The index vector of batch position `bpos` (over the index dims other than ivd): component k
 * of start_indices at that position. */
static int64_t index_component(const prog_shape* idx, const void* data, int ivd,
                               const int64_t* bpos, int k) {
  int64_t full[PROG_MAX_RANK], st[PROG_MAX_RANK];
  rt_strides(idx, st);
  int b = 0;
  for (int d = 0; d < idx->rank; d++) full[d] = d == ivd ? k : bpos[b++];
  int64_t at = linear(full, st, idx->rank);
  if (idx->dtype == PROG_U64) {
    uint64_t u = LD(uint64_t, data, at);
    return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
  }
  return rt_get_i(idx->dtype, data, at);
}

static void gather(const prog_func* f, const prog_insn* in, void** vals) {
  const prog_shape *a = &f->values[in->in[0]], *idx = &f->values[in->in[1]], *o = &in->shape;
  size_t es = prog_dtype_size(a->dtype);
  int ivd = in->iarg;
  int64_t n = prog_shape_elements(o);
  if (n == 0) return;
  int64_t ast[PROG_MAX_RANK], oidx[PROG_MAX_RANK] = {0};
  rt_strides(a, ast);
  /* which operand dim each offset dim of the result fills */
  int offset_to_operand[PROG_MAX_RANK], no = 0;
  for (int e = 0; e < a->rank; e++)
    if (!contains(in->p[1], in->np[1], e) && !contains(in->p[4], in->np[4], e))
      offset_to_operand[no++] = e;
  const char* src = vals[in->in[0]];
  char* out = vals[in->out];
  for (int64_t i = 0; i < n; i++, next_index(oidx, o->dims, o->rank)) {
    int64_t bpos[PROG_MAX_RANK], full[PROG_MAX_RANK] = {0};
    int nb = 0, oi = 0;
    for (int d = 0; d < o->rank; d++) {
      if (contains(in->p[0], in->np[0], d)) full[offset_to_operand[oi++]] += oidx[d];
      else bpos[nb++] = oidx[d];
    }
    for (int k = 0; k < in->np[2]; k++) {
      int64_t dim = in->p[2][k];
      int64_t s = index_component(idx, vals[in->in[1]], ivd, bpos, k);
      full[dim] += clamp64(s, 0, a->dims[dim] - in->p[3][dim]);
    }
    for (int k = 0; k < in->np[4]; k++) {
      int64_t sdim = in->p[5][k];
      full[in->p[4][k]] += bpos[sdim < ivd ? sdim : sdim - 1];
    }
    memcpy(out + (size_t)i * es, src + (size_t)linear(full, ast, a->rank) * es, es);
  }
}

/* One update: dst = body(dst, upd) for the single-operand bodies recognized at lowering. */
static void combine(prog_dtype t, int kind, void* dst, const void* upd) {
  if (kind == -1) {
    memcpy(dst, upd, prog_dtype_size(t));
    return;
  }
  if (t == PROG_F32 && (kind == RED_ADD || kind == RED_MUL)) {  /* in f32, as XLA adds */
    float x = LD(float, dst, 0), y = LD(float, upd, 0);
    ST(float, dst, 0, kind == RED_ADD ? x + y : x * y);
    return;
  }
  if (rt_is_float(t)) {
    double x = rt_get_f(t, dst, 0), y = rt_get_f(t, upd, 0);
    x = kind == RED_ADD ? x + y : kind == RED_MUL ? x * y
      : kind == RED_MAX ? (x != x ? x : y != y ? y : x > y ? x : y)
      : (x != x ? x : y != y ? y : x < y ? x : y);
    rt_put(t, dst, 0, x, 0, true);
    return;
  }
  if (t == PROG_U64) {
    uint64_t x = LD(uint64_t, dst, 0), y = LD(uint64_t, upd, 0);
    switch (kind) {
      case RED_ADD: x += y; break;
      case RED_MUL: x *= y; break;
      case RED_MAX: x = x > y ? x : y; break;
      case RED_MIN: x = x < y ? x : y; break;
      case RED_AND: x &= y; break;
      case RED_OR: x |= y; break;
      default: x ^= y; break;
    }
    ST(uint64_t, dst, 0, x);
    return;
  }
  int64_t x = rt_get_i(t, dst, 0), y = rt_get_i(t, upd, 0);
  uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
  switch (kind) {
    case RED_ADD: x = (int64_t)(ux + uy); break;
    case RED_MUL: x = (int64_t)(ux * uy); break;
    case RED_MAX: x = x > y ? x : y; break;
    case RED_MIN: x = x < y ? x : y; break;
    case RED_AND: x = x & y; break;
    case RED_OR: x = x | y; break;
    default: x = x ^ y; break;
  }
  if (t == PROG_PRED && kind == RED_ADD) x = x != 0;
  rt_put(t, dst, 0, 0, x, false);
}

static int scatter(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
                   void** vals, int depth) {
  int n = in->num_out;
  const prog_shape *a = &f->values[in->in[0]], *idx = &f->values[in->in[n]],
                   *u = &f->values[in->in[n + 1]];
  int ivd = in->iarg;
  for (int k = 0; k < n; k++)
    if (vals[in->out + k] != vals[in->in[k]]) memcpy(vals[in->out + k], vals[in->in[k]], rt_bytes(a));
  int64_t nu = prog_shape_elements(u);
  if (nu == 0 || prog_shape_elements(a) == 0) return PROG_OK;
  int64_t ast[PROG_MAX_RANK], uidx[PROG_MAX_RANK] = {0}, wsize[PROG_MAX_RANK];
  rt_strides(a, ast);
  int window_to_operand[PROG_MAX_RANK], nw = 0;
  for (int e = 0; e < a->rank; e++) {
    wsize[e] = 1;
    if (!contains(in->p[1], in->np[1], e) && !contains(in->p[4], in->np[4], e))
      window_to_operand[nw++] = e;
  }
  for (int j = 0; j < in->np[0]; j++) wsize[window_to_operand[j]] = u->dims[in->p[0][j]];
  const void* args[64];
  void* outs[32];
  int code = PROG_OK;
  for (int64_t i = 0; i < nu && code == PROG_OK; i++, next_index(uidx, u->dims, u->rank)) {
    int64_t bpos[PROG_MAX_RANK], start[PROG_MAX_RANK] = {0}, full[PROG_MAX_RANK];
    int nb = 0, wi = 0;
    for (int d = 0; d < u->rank; d++)
      if (!contains(in->p[0], in->np[0], d)) bpos[nb++] = uidx[d];
    for (int k = 0; k < in->np[2]; k++)
      start[in->p[2][k]] = index_component(idx, vals[in->in[n]], ivd, bpos, k);
    for (int k = 0; k < in->np[4]; k++) {
      int64_t sdim = in->p[5][k];
      start[in->p[4][k]] = bpos[sdim < ivd ? sdim : sdim - 1];
    }
    bool fits = true;
    for (int e = 0; e < a->rank; e++) fits &= start[e] >= 0 && start[e] <= a->dims[e] - wsize[e];
    if (!fits) continue;
    memcpy(full, start, sizeof full);
    for (int d = 0; d < u->rank; d++)
      if (contains(in->p[0], in->np[0], d)) full[window_to_operand[wi++]] += uidx[d];
    int64_t at = linear(full, ast, a->rank);
    if (in->iarg2 != RED_GENERIC) {
      size_t es = prog_dtype_size(a->dtype);
      combine(a->dtype, in->iarg2, (char*)vals[in->out] + (size_t)at * es,
              (const char*)vals[in->in[n + 1]] + (size_t)i * es);
      continue;
    }
    if (n > 32) return rt_fail(r, PROG_UNIMPLEMENTED, "scatter of more than 32 operands", in->vhlo_name);
    /* the body reads the current values and the updates, and writes scratch results that are
     * then stored: a body may read an element it also writes */
    uint64_t scratch[32][2];
    for (int k = 0; k < n; k++) {
      size_t es = prog_dtype_size(f->values[in->in[k]].dtype);
      args[k] = (const char*)vals[in->out + k] + (size_t)at * es;
      args[n + k] = (const char*)vals[in->in[n + 1 + k]] + (size_t)i * es;
      outs[k] = scratch[k];
    }
    code = rt_run_region(r, p, &in->sub[0], vals, args, outs, depth);
    for (int k = 0; k < n && code == PROG_OK; k++) {
      size_t es = prog_dtype_size(f->values[in->in[k]].dtype);
      memcpy((char*)vals[in->out + k] + (size_t)at * es, scratch[k], es);
    }
  }
  return code;
}

int rt_index(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
             void** vals, int depth) {
  switch (in->op) {
    case OP_PAD: pad(in, &f->values[in->in[0]], vals[in->in[0]], vals[in->in[1]], vals[in->out]); break;
    case OP_DYNAMIC_SLICE: dynamic_slice(f, in, vals, false); break;
    case OP_DYNAMIC_UPDATE_SLICE: dynamic_slice(f, in, vals, true); break;
    case OP_GATHER: gather(f, in, vals); break;
    default: return scatter(r, p, f, in, vals, depth);
  }
  return PROG_OK;
}
