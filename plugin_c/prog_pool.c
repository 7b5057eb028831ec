/* prog_pool.c -- the interpreter's buffers: values, loop state, kernel temporaries.
 *
 * A program allocates and frees the same sizes run after run (a jitted training step, every
 * iteration of a while loop), and glibc hands blocks above its mmap threshold back to the kernel
 * on free, so each run paid a page fault per 4 KiB of every large buffer: in a GPT-2 training
 * step (d_model 128, 4 layers, batch 8) 40 % of the samples were the kernel's page faults and
 * brk/munmap (perf).  Freed blocks of 4 KiB and more are kept here instead, on free lists by size
 * class (powers of two and 1.5 times them), up to POOL_CAP bytes in all, for any thread.
 *
 * Under AddressSanitizer nothing is kept: a use after free must stay visible to it.
 */
#include <pthread.h>
#include <stdlib.h>

#include "prog_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define POOL_KEEPS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_KEEPS 0
#endif
#endif
#ifndef POOL_KEEPS
#define POOL_KEEPS 1
#endif

enum { POOL_MIN_LOG = 12, POOL_CLASSES = 2 * (48 - POOL_MIN_LOG) };
#define POOL_CAP ((size_t)256 << 20)

/* Precedes every block; 64 bytes keep the block at malloc's alignment and on a cache line
 * boundary whenever malloc's block is on one. */
typedef union pool_header {
  struct {
    int cls;                   /* size class, -1: a small block, never kept */
    union pool_header* next;   /* on a free list */
  } h;
  char pad[64];
} pool_header;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_header* pool_free[POOL_CLASSES];
static size_t pool_kept;

static size_t class_size(int c) {
  size_t base = (size_t)1 << (POOL_MIN_LOG + c / 2);
  return c % 2 ? base + base / 2 : base;
}

void* rt_alloc(size_t n) {
  int cls = -1;
  if (n >= ((size_t)1 << POOL_MIN_LOG))
    for (int c = 0; c < POOL_CLASSES; c++)
      if (class_size(c) >= n) { cls = c; break; }
  if (cls >= 0 && POOL_KEEPS) {
    pthread_mutex_lock(&pool_lock);
    pool_header* b = pool_free[cls];
    if (b != NULL) {
      pool_free[cls] = b->h.next;
      pool_kept -= class_size(cls);
    }
    pthread_mutex_unlock(&pool_lock);
    if (b != NULL) return b + 1;
  }
  size_t size = cls >= 0 ? class_size(cls) : n;
  if (size > SIZE_MAX - sizeof(pool_header)) return NULL;
  pool_header* b = malloc(sizeof(pool_header) + size);
  if (b == NULL) return NULL;
  b->h.cls = cls;
  return b + 1;
}

void rt_free(void* p) {
  if (p == NULL) return;
  pool_header* b = (pool_header*)p - 1;
  if (b->h.cls >= 0 && POOL_KEEPS) {
    size_t size = class_size(b->h.cls);
    pthread_mutex_lock(&pool_lock);
    bool keep = pool_kept + size <= POOL_CAP;
    if (keep) {
      b->h.next = pool_free[b->h.cls];
      pool_free[b->h.cls] = b;
      pool_kept += size;
    }
    pthread_mutex_unlock(&pool_lock);
    if (keep) return;
  }
  free(b);
}
