/* prog_ops_window.c -- reductions that run their body region (several operands, argmax and
 * friends), reduce_window (pooling, cumulative sums) and convolution. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

#define MAXN 16  /* operands of a variadic reduce */

static bool next_index(int64_t* idx, const int64_t* dims, int rank) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

/* acc_k = body(acc_0..acc_{n-1}, x_0..x_{n-1}); acc and x point at scalars. */
static int apply(run_ctx* r, const prog_program* p, const prog_func* body, void** vals,
                 int depth, int n, void** acc, const void* const* x, void** scratch,
                 const prog_shape* types) {
  const void* args[2 * MAXN] = {NULL};
  void* outs[MAXN] = {NULL};
  for (int k = 0; k < n; k++) {
    args[k] = acc[k];
    args[n + k] = x[k];
    outs[k] = scratch[k];
  }
  int code = rt_run_region(r, p, body, vals, args, outs, depth);
  for (int k = 0; k < n && code == PROG_OK; k++)
    memcpy(acc[k], scratch[k], prog_dtype_size(types[k].dtype));
  return code;
}

static int reduce_generic(run_ctx* r, const prog_program* p, const prog_func* f,
                          const prog_insn* in, void** vals, int depth) {
  int n = in->num_out;
  if (n > MAXN) return rt_fail(r, PROG_UNIMPLEMENTED, "reduce of more than 16 operands", in->vhlo_name);
  const prog_shape* a = &f->values[in->in[0]];
  bool reduced[PROG_MAX_RANK] = {false};
  for (int q = 0; q < in->np[0]; q++) reduced[in->p[0][q]] = true;
  int64_t ast[PROG_MAX_RANK], ost[PROG_MAX_RANK], idx[PROG_MAX_RANK] = {0};
  rt_strides(a, ast);
  rt_strides(&in->shape, ost);
  prog_shape types[MAXN];
  uint64_t scratch_mem[MAXN][2];
  void* scratch[MAXN];
  void* acc[MAXN];
  const void* x[MAXN];
  int64_t no = prog_shape_elements(&in->shape);
  for (int k = 0; k < n; k++) {
    types[k] = f->values[in->out + k];
    scratch[k] = scratch_mem[k];
    size_t es = prog_dtype_size(types[k].dtype);
    for (int64_t i = 0; i < no; i++) memcpy((char*)vals[in->out + k] + (size_t)i * es, vals[in->in[n + k]], es);
  }
  int64_t total = prog_shape_elements(a);
  int code = PROG_OK;
  for (int64_t i = 0; i < total && code == PROG_OK; i++, next_index(idx, a->dims, a->rank)) {
    int64_t at = 0;
    int od = 0;
    for (int d = 0; d < a->rank; d++)
      if (!reduced[d]) at += idx[d] * ost[od++];
    for (int k = 0; k < n; k++) {
      size_t es = prog_dtype_size(types[k].dtype);
      acc[k] = (char*)vals[in->out + k] + (size_t)at * es;
      x[k] = (const char*)vals[in->in[k]] + (size_t)i * prog_dtype_size(f->values[in->in[k]].dtype);
    }
    code = apply(r, p, &in->sub[0], vals, depth, n, acc, x, scratch, types);
  }
  return code;
}

/* A window fold on one operand with a recognized body, in double (floats) or 64-bit integers. */
static double fold_f(int kind, double acc, double x) {
  switch (kind) {
    case RED_ADD: return acc + x;
    case RED_MUL: return acc * x;
    case RED_MAX: return isnan(acc) ? acc : isnan(x) ? x : acc > x ? acc : x;
    default: return isnan(acc) ? acc : isnan(x) ? x : acc < x ? acc : x;
  }
}

static int64_t fold_i(int kind, int64_t acc, int64_t x, bool is_unsigned) {
  switch (kind) {
    case RED_ADD: return (int64_t)((uint64_t)acc + (uint64_t)x);
    case RED_MUL: return (int64_t)((uint64_t)acc * (uint64_t)x);
    case RED_MAX: return is_unsigned ? ((uint64_t)acc > (uint64_t)x ? acc : x) : acc > x ? acc : x;
    case RED_MIN: return is_unsigned ? ((uint64_t)acc < (uint64_t)x ? acc : x) : acc < x ? acc : x;
    case RED_AND: return acc & x;
    case RED_OR: return acc | x;
    default: return acc ^ x;
  }
}

static int reduce_window(run_ctx* r, const prog_program* p, const prog_func* f,
                         const prog_insn* in, void** vals, int depth) {
  int n = in->num_out;
  if (n > MAXN) return rt_fail(r, PROG_UNIMPLEMENTED, "reduce_window of more than 16 operands", in->vhlo_name);
  const prog_shape* a = &f->values[in->in[0]];
  const prog_shape* o = &f->values[in->out];
  int rank = a->rank;
  int64_t ast[PROG_MAX_RANK], oidx[PROG_MAX_RANK] = {0};
  rt_strides(a, ast);
  int64_t no = prog_shape_elements(o), nwin = 1;
  for (int d = 0; d < rank; d++) nwin *= in->p[0][d];
  prog_shape types[MAXN];
  uint64_t scratch_mem[MAXN][2];
  void* scratch[MAXN];
  void* acc[MAXN];
  const void* x[MAXN];
  for (int k = 0; k < n; k++) { types[k] = f->values[in->out + k]; scratch[k] = scratch_mem[k]; }
  int kind = in->iarg2;
  prog_dtype t = a->dtype;
  int code = PROG_OK;
  for (int64_t i = 0; i < no && code == PROG_OK; i++, next_index(oidx, o->dims, rank)) {
    double facc = 0;
    int64_t iacc = 0;
    if (kind != RED_GENERIC) {
      if (rt_is_float(t)) facc = rt_get_f(t, vals[in->in[1]], 0);
      else iacc = rt_get_i(t, vals[in->in[1]], 0);
    } else {
      for (int k = 0; k < n; k++) {
        size_t es = prog_dtype_size(types[k].dtype);
        acc[k] = (char*)vals[in->out + k] + (size_t)i * es;
        memcpy(acc[k], vals[in->in[n + k]], es);
      }
    }
    int64_t w[PROG_MAX_RANK] = {0};
    for (int64_t j = 0; j < nwin && code == PROG_OK; j++, next_index(w, in->p[0], rank)) {
      bool pad = false;
      int64_t at = 0;
      for (int d = 0; d < rank && !pad; d++) {
        int64_t pos = oidx[d] * in->p[1][d] + w[d] * in->p[3][d] - in->p[4][d];
        if (pos < 0 || pos % in->p[2][d] != 0 || pos / in->p[2][d] >= a->dims[d]) pad = true;
        else at += (pos / in->p[2][d]) * ast[d];
      }
      /* a padded (or base-dilated) position holds the init value */
      if (kind != RED_GENERIC) {
        if (rt_is_float(t)) facc = fold_f(kind, facc, pad ? rt_get_f(t, vals[in->in[1]], 0) : rt_get_f(t, vals[in->in[0]], at));
        else iacc = fold_i(kind, iacc, pad ? rt_get_i(t, vals[in->in[1]], 0) : rt_get_i(t, vals[in->in[0]], at), rt_is_unsigned(t));
        continue;
      }
      for (int k = 0; k < n; k++) {
        size_t es = prog_dtype_size(f->values[in->in[k]].dtype);
        x[k] = pad ? vals[in->in[n + k]] : (const char*)vals[in->in[k]] + (size_t)at * es;
      }
      code = apply(r, p, &in->sub[0], vals, depth, n, acc, x, scratch, types);
    }
    if (kind != RED_GENERIC) {
      if (rt_is_float(t)) rt_put(t, vals[in->out], i, facc, 0, true);
      else rt_put(t, vals[in->out], i, 0, iacc, false);
    }
  }
  return code;
}

/* Element i as a complex number (a real one has imaginary part 0). */
static double complex get_c(prog_dtype t, const void* p, int64_t i) {
  /* memcpy: correct at any address (see LD in prog_internal.h) */
  if (t == PROG_C64) {
    float complex z;
    memcpy(&z, (const char*)p + i * (int64_t)sizeof z, sizeof z);
    return z;
  }
  if (t == PROG_C128) {
    double complex z;
    memcpy(&z, (const char*)p + i * (int64_t)sizeof z, sizeof z);
    return z;
  }
  return rt_get_f(t, p, i);
}

/* Direct convolution, accumulating in double (floats, complex) or wrapping 64-bit integers. */
static int convolution(run_ctx* r, const prog_func* f, const prog_insn* in, void** vals) {
  (void)r;
  const prog_shape *x = &f->values[in->in[0]], *k = &f->values[in->in[1]], *o = &in->shape;
  int ns = x->rank - 2;
  const int64_t* dn = in->p[9];
  int64_t xst[PROG_MAX_RANK], kst[PROG_MAX_RANK], oidx[PROG_MAX_RANK] = {0};
  rt_strides(x, xst);
  rt_strides(k, kst);
  int64_t G = dn[6], BG = dn[7];
  int64_t KI = k->dims[dn[2]], KO = k->dims[dn[3]], B = x->dims[dn[0]];
  int64_t out_per_group = KO / G, out_per_bgroup = KO / BG, batch_per_bgroup = B / BG;
  int64_t ksp[PROG_MAX_RANK], nk = 1;
  for (int s = 0; s < ns; s++) { ksp[s] = k->dims[in->p[7][s]]; nk *= ksp[s]; }
  bool cplx = rt_is_complex(o->dtype);
  bool is_int = !cplx && !rt_is_float(x->dtype) && !rt_is_float(k->dtype) && !rt_is_float(o->dtype);
  int64_t no = prog_shape_elements(o);
  for (int64_t i = 0; i < no; i++, next_index(oidx, o->dims, o->rank)) {
    int64_t ob = oidx[dn[4]], of = oidx[dn[5]];
    int64_t g = of / out_per_group, bg = of / out_per_bgroup;
    int64_t xb = bg * batch_per_bgroup + ob;
    double facc = 0;
    double complex cacc = 0;
    uint64_t iacc = 0;
    if (nk > 0 && KI > 0) {
      int64_t kw[PROG_MAX_RANK] = {0};
      for (int64_t j = 0; j < nk; j++, next_index(kw, ksp, ns)) {
        int64_t xat = xb * xst[dn[0]], kat = of * kst[dn[3]];
        bool skip = false;
        for (int s = 0; s < ns && !skip; s++) {
          int64_t kk = in->p[5][s] ? ksp[s] - 1 - kw[s] : kw[s];
          int64_t pos = oidx[in->p[8][s]] * in->p[0][s] + kw[s] * in->p[4][s] - in->p[1][s];
          int64_t ld = in->p[3][s];
          if (pos < 0 || pos % ld != 0 || pos / ld >= x->dims[in->p[6][s]]) skip = true;
          xat += (pos / ld) * xst[in->p[6][s]];
          kat += kk * kst[in->p[7][s]];
        }
        if (skip) continue;
        for (int64_t c = 0; c < KI; c++) {
          int64_t xa = xat + (g * KI + c) * xst[dn[1]], ka = kat + c * kst[dn[2]];
          if (cplx)
            cacc += get_c(x->dtype, vals[in->in[0]], xa) * get_c(k->dtype, vals[in->in[1]], ka);
          else if (is_int)
            iacc += (uint64_t)rt_get_i(x->dtype, vals[in->in[0]], xa) *
                    (uint64_t)rt_get_i(k->dtype, vals[in->in[1]], ka);
          else
            facc += rt_get_f(x->dtype, vals[in->in[0]], xa) * rt_get_f(k->dtype, vals[in->in[1]], ka);
        }
      }
    }
    if (cplx && o->dtype == PROG_C64) {
      float complex z = (float complex)cacc;
      memcpy((char*)vals[in->out] + i * (int64_t)sizeof z, &z, sizeof z);
    } else if (cplx) {
      memcpy((char*)vals[in->out] + i * (int64_t)sizeof cacc, &cacc, sizeof cacc);
    }
    else if (is_int) rt_put(o->dtype, vals[in->out], i, 0, (int64_t)iacc, false);
    else rt_put(o->dtype, vals[in->out], i, facc, 0, true);
  }
  return PROG_OK;
}

int rt_window(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
              void** vals, int depth) {
  switch (in->op) {
    case OP_REDUCE_GENERIC: return reduce_generic(r, p, f, in, vals, depth);
    case OP_REDUCE_WINDOW: return reduce_window(r, p, f, in, vals, depth);
    default: return convolution(r, f, in, vals);
  }
}
