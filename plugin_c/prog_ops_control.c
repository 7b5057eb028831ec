/* prog_ops_control.c -- while, case and if: regions run over the enclosing function's values.
 *
 * A while loop keeps its carried values in buffers of its own: the condition reads them, the
 * body writes the next ones into a second set, and the two swap, so no value is overwritten
 * while it is still read. */
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

static int64_t loop_limit;  /* set once, before any run (fuzzers) */

void prog_set_loop_limit(int64_t limit) { loop_limit = limit; }

/* Whether function f may write its result r into the buffer of its argument a, given that the
 * caller passes that one buffer as both: the result is made by a dynamic_update_slice of the
 * argument, or an elementwise op on it of the same type (both write each element after reading
 * it), or by a call whose callee may do the same with the argument passed once; and nothing
 * reads the argument after that instruction, nor returns it.  A scan's stacked outputs grow by
 * one slice an iteration (jax puts the update in a called function): in place, not by a copy of
 * the whole stack. */
static bool writes_in_place(const prog_program* p, const prog_func* f, int r, int a, int depth) {
  int arg = f->first_arg + a, id = f->results[r];
  if (depth > 8 || id < f->base || (id >= f->first_arg && id < f->first_arg + f->num_args))
    return false;
  for (int q = 0; q < f->num_results; q++)
    if (q != r && f->results[q] == id) return false;
  for (int i = 0; i < f->num_insns; i++) {
    const prog_insn* in = &f->insns[i];
    if (id < in->out || id >= in->out + in->num_out) continue;
    if (f->last_use[arg] != i) return false;
    int uses = 0, at = -1;
    for (int q = 0; q < in->num_in; q++)
      if (in->in[q] == arg) { uses++; at = q; }
    for (int q = 0; q < in->num_cap; q++)
      if (in->cap[q] == arg) return false;
    if (in->op == OP_CALL)
      return uses == 1 && writes_in_place(p, &p->funcs[in->iarg], id - in->out, at, depth + 1);
    bool same_bytes = rt_bytes(&in->shape) == rt_bytes(&f->values[arg]);
    if (in->op == OP_DYNAMIC_UPDATE_SLICE) return uses == 1 && at == 0 && same_bytes;
    return prog_ew_arity(in->op) > 0 &&
           in->num_out == 1 && in->in[0] == arg && same_bytes &&
           in->shape.dtype == f->values[arg].dtype && !rt_is_complex(in->shape.dtype);
  }
  return false;
}

/* Whether the while loop `in` (instruction `at` of f) may adopt the buffer of its operand k:
 * the function owns it, nothing reads it after the loop, the loop takes it once and its
 * regions do not also read it as an enclosing value. */
static bool may_adopt(const prog_func* f, const prog_insn* in, int at, const bool* owned, int k) {
  int id = in->in[k];
  if (owned == NULL || !owned[id] || f->last_use[id] != at) return false;
  for (int q = 0; q < in->num_in; q++)
    if (q != k && in->in[q] == id) return false;
  for (int q = 0; q < in->num_cap; q++)
    if (in->cap[q] == id) return false;
  return true;
}

static int run_while(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
                     void** vals, int depth) {
  bool* owned = r->owned;  /* the caller's ownership flags (see run_ctx), for this loop only */
  r->owned = NULL;
  int at = (int)(in - f->insns);
  int n = in->num_in;
  const prog_func *cond = &in->sub[0], *body = &in->sub[1];
  void** cur = calloc((size_t)n + 1, sizeof(void*));
  void** next = calloc((size_t)n + 1, sizeof(void*));
  void** out = calloc((size_t)n + 1, sizeof(void*));
  bool* same = calloc((size_t)n + 1, sizeof(bool));
  bool* inplace = calloc((size_t)n + 1, sizeof(bool));
  int code = PROG_OK;
  if (cur == NULL || next == NULL || out == NULL || same == NULL || inplace == NULL)
    code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  for (int k = 0; k < n && code == PROG_OK; k++) {
    size_t size = rt_bytes(&f->values[in->in[k]]);
    /* a value the body returns unchanged (scan's stacked inputs, its constants) is read where
     * it is, never written: the body's result is then its own argument, which rt_run_func does
     * not copy; one the body updates in place has one buffer, not two */
    same[k] = k < body->num_results && body->results[k] == body->first_arg + k;
    inplace[k] = !same[k] && k < body->num_results && writes_in_place(p, body, k, k, 0);
    /* an operand buffer nothing else reads becomes the loop's own: no copy */
    bool adopt = !same[k] && may_adopt(f, in, at, owned, k);
    cur[k] = same[k] ? vals[in->in[k]] : adopt ? vals[in->in[k]] : rt_alloc(size + 8);
    if (adopt) {
      vals[in->in[k]] = NULL;
      owned[in->in[k]] = false;
    }
    next[k] = same[k] || inplace[k] ? NULL : rt_alloc(size + 8);
    if ((!same[k] && cur[k] == NULL) || (!same[k] && !inplace[k] && next[k] == NULL))
      code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
    else if (!same[k] && !adopt)
      memcpy(cur[k], vals[in->in[k]], size);
  }
  for (int64_t iteration = 0; code == PROG_OK; iteration++) {
    if (loop_limit > 0 && iteration >= loop_limit) {
      code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "while loop ran past the iteration limit", in->vhlo_name);
      break;
    }
    uint8_t go = 0;
    void* cond_out = &go;
    code = rt_run_region(r, p, cond, vals, (const void* const*)cur, &cond_out, depth);
    if (code != PROG_OK || !go) break;
    for (int k = 0; k < n; k++) out[k] = same[k] || inplace[k] ? cur[k] : next[k];
    code = rt_run_region(r, p, body, vals, (const void* const*)cur, out, depth);
    for (int k = 0; k < n; k++)
      if (!same[k] && !inplace[k]) {
        void* t = cur[k];
        cur[k] = next[k];
        next[k] = t;
      }
  }
  if (code == PROG_OK)
    for (int k = 0; k < n; k++)  /* results nobody reads (scan's stacked inputs) are not copied */
      if (f->last_use[in->out + k] >= 0) {
        int id = in->out + k;
        if (owned != NULL && owned[id] && !same[k]) {  /* the result takes the loop's buffer */
          rt_free(vals[id]);
          vals[id] = cur[k];
          cur[k] = NULL;
        } else {
          memcpy(vals[id], cur[k], rt_bytes(&f->values[id]));
        }
      }
  for (int k = 0; k < n && cur != NULL && same != NULL; k++) {
    if (!same[k]) rt_free(cur[k]);
    if (next) rt_free(next[k]);
  }
  free(cur);
  free(next);
  free(out);
  free(same);
  free(inplace);
  return code;
}

int rt_control(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
               void** vals, int depth) {
  if (in->op == OP_WHILE) return run_while(r, p, f, in, vals, depth);
  int branch;
  if (in->op == OP_IF) {
    branch = *(const uint8_t*)vals[in->in[0]] ? 0 : 1;
  } else {
    /* an index out of range runs the last branch */
    int32_t index = LD(int32_t, vals[in->in[0]], 0);
    branch = index < 0 || index >= in->num_sub ? in->num_sub - 1 : index;
  }
  return rt_run_region(r, p, &in->sub[branch], vals, NULL, vals + in->out, depth);
}
