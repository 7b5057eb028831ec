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

static int run_while(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
                     void** vals, int depth) {
  int n = in->num_in;
  const prog_func *cond = &in->sub[0], *body = &in->sub[1];
  void** cur = calloc((size_t)n + 1, sizeof(void*));
  void** next = calloc((size_t)n + 1, sizeof(void*));
  void** out = calloc((size_t)n + 1, sizeof(void*));
  bool* same = calloc((size_t)n + 1, sizeof(bool));
  int code = PROG_OK;
  if (cur == NULL || next == NULL || out == NULL || same == NULL)
    code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  for (int k = 0; k < n && code == PROG_OK; k++) {
    size_t size = rt_bytes(&f->values[in->in[k]]);
    /* a value the body returns unchanged (scan's stacked inputs, its constants) stays in its
     * buffer: the body's result is then its own argument, which rt_run_func does not copy */
    same[k] = k < body->num_results && body->results[k] == body->first_arg + k;
    cur[k] = rt_alloc(size + 8);
    next[k] = same[k] ? NULL : rt_alloc(size + 8);
    if (cur[k] == NULL || (!same[k] && next[k] == NULL))
      code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
    else
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
    for (int k = 0; k < n; k++) out[k] = same[k] ? cur[k] : next[k];
    code = rt_run_region(r, p, body, vals, (const void* const*)cur, out, depth);
    for (int k = 0; k < n; k++)
      if (!same[k]) {
        void* t = cur[k];
        cur[k] = next[k];
        next[k] = t;
      }
  }
  if (code == PROG_OK)
    for (int k = 0; k < n; k++) memcpy(vals[in->out + k], cur[k], rt_bytes(&f->values[in->out + k]));
  for (int k = 0; k < n; k++) {
    if (cur) rt_free(cur[k]);
    if (next) rt_free(next[k]);
  }
  free(cur);
  free(next);
  free(out);
  free(same);
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
