/* prog_ops_sort.c -- sort: several operands sorted together along one dimension by a
 * comparator region.  A merge sort: stable whether or not the program asks for it, and
 * O(n log n) comparator calls whatever the comparator does. */
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

typedef struct {
  run_ctx* r;
  const prog_program* p;
  const prog_func* cmp;
  void** vals;
  int depth;
  int n;                 /* operands */
  const char** base;     /* each operand's data at the slice's first element */
  size_t* es;
  int64_t stride;        /* elements between neighbours along the sorted dimension */
  const void** args;     /* 2n comparator arguments */
  int code;
} sorter;

/* comparator(a, b): is element a ordered before element b? */
static bool less(sorter* s, int64_t a, int64_t b) {
  if (s->code != PROG_OK) return false;
  for (int k = 0; k < s->n; k++) {
    s->args[2 * k] = s->base[k] + (size_t)(a * s->stride) * s->es[k];
    s->args[2 * k + 1] = s->base[k] + (size_t)(b * s->stride) * s->es[k];
  }
  uint8_t result = 0;
  void* out = &result;
  s->code = rt_run_region(s->r, s->p, s->cmp, s->vals, s->args, &out, s->depth);
  return result != 0;
}

static void merge_sort(sorter* s, int64_t* idx, int64_t* tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2;
  merge_sort(s, idx, tmp, h);
  merge_sort(s, idx + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    /* take from the right only when it is strictly before: stable */
    if (less(s, idx[j], idx[i])) tmp[k++] = idx[j++];
    else tmp[k++] = idx[i++];
  }
  while (i < h) tmp[k++] = idx[i++];
  while (j < n) tmp[k++] = idx[j++];
  memcpy(idx, tmp, (size_t)n * sizeof(int64_t));
}

int rt_sort(run_ctx* r, const prog_program* p, const prog_func* f, const prog_insn* in,
            void** vals, int depth) {
  const prog_shape* a = &f->values[in->in[0]];
  int n = in->num_in, d = in->iarg;
  int64_t st[PROG_MAX_RANK];
  rt_strides(a, st);
  int64_t len = a->rank == 0 ? 1 : a->dims[d], total = prog_shape_elements(a);
  int64_t stride = a->rank == 0 ? 1 : st[d];
  int64_t* idx = malloc((size_t)(len + 1) * sizeof(int64_t));
  int64_t* tmp = malloc((size_t)(len + 1) * sizeof(int64_t));
  const char** base = calloc((size_t)n, sizeof(char*));
  size_t* es = calloc((size_t)n, sizeof(size_t));
  const void** args = calloc((size_t)(2 * n), sizeof(void*));
  sorter s = {r, p, &in->sub[0], vals, depth, n, base, es, stride, args, PROG_OK};
  if (!idx || !tmp || !base || !es || !args) {
    s.code = rt_fail(r, PROG_RESOURCE_EXHAUSTED, "out of memory", in->vhlo_name);
  } else if (len > 0 && total > 0) {
    for (int k = 0; k < n; k++) es[k] = prog_dtype_size(f->values[in->in[k]].dtype);
    /* every slice: the elements whose index along d is 0, visited in row-major order */
    for (int64_t start = 0; start < total && s.code == PROG_OK; start++) {
      if ((start / stride) % len != 0) continue;
      for (int k = 0; k < n; k++) base[k] = (const char*)vals[in->in[k]] + (size_t)start * es[k];
      for (int64_t i = 0; i < len; i++) idx[i] = i;
      merge_sort(&s, idx, tmp, len);
      if (s.code != PROG_OK) break;
      for (int k = 0; k < n; k++) {
        char* out = (char*)vals[in->out + k] + (size_t)start * es[k];
        for (int64_t i = 0; i < len; i++)
          memcpy(out + (size_t)(i * stride) * es[k], base[k] + (size_t)(idx[i] * stride) * es[k], es[k]);
      }
    }
  }
  free(idx);
  free(tmp);
  free(base);
  free(es);
  free(args);
  return s.code;
}
