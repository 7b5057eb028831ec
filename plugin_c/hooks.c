/* hooks.c -- the call trace and the knock-out switch, both driven by the environment.
 *
 *   DUMPREF_PJRT_TRACE=FILE     append one record per entry-point call to FILE, in call order:
 *                               a line of JSON with the entry point, the args struct as jax
 *                               filled it (hex bytes, "in") and as the entry point left it
 *                               ("out"), the error code it answered, and notes an entry point
 *                               adds about what its pointer arguments point at (dr_trace_note).
 *                               pytest_dumpref/pjrt/trace.py decodes the bytes field by field
 *                               with the real pjrt_c_api.h, so the map shows what jax sent and
 *                               what the device filled without a hand-written list of fields.
 *                               One O_APPEND write() per record: records from several threads
 *                               never interleave, and nothing is lost if jaxlib aborts.
 *   DUMPREF_PJRT_DISABLE=A,B    entry points A and B are "knocked out": they answer
 *                               UNIMPLEMENTED at once, so a test can remove any of them without
 *                               rebuilding and see what breaks.
 *
 * Both are read once, at the first call, so they must be set before the process starts.  The
 * first record of a trace gives the library's load address, so that pointers the device handed
 * out (its constant strings) can be read back from the library file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dumpref.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int trace_fd = -1;
static char* disabled_list = NULL; /* ",A,B," so a name matches as ",name," */
static _Thread_local dr_call* current_call = NULL; /* where dr_trace_note writes */

static void read_environment(void) {
  const char* path = getenv("DUMPREF_PJRT_TRACE");
  if (path != NULL && path[0] != '\0')
    trace_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (trace_fd >= 0) {
    Dl_info info;
    char line[128];
    if (dladdr((void*)read_environment, &info) != 0) {
      int n = snprintf(line, sizeof line, "{\"library_base\": \"%p\"}\n", info.dli_fbase);
      ssize_t written = write(trace_fd, line, (size_t)n);
      (void)written;
    }
  }
  const char* disabled = getenv("DUMPREF_PJRT_DISABLE");
  if (disabled != NULL && disabled[0] != '\0') {
    size_t n = strlen(disabled);
    disabled_list = malloc(n + 3);
    if (disabled_list != NULL) {
      disabled_list[0] = ',';
      memcpy(disabled_list + 1, disabled, n);
      disabled_list[n + 1] = ',';
      disabled_list[n + 2] = '\0';
      for (char* p = disabled_list; *p; p++)
        if (*p == ' ') *p = ','; /* "A, B" works too */
    }
  }
}

static bool disabled(const char* entry_point) {
  if (disabled_list == NULL) return false;
  char needle[130];
  size_t n = strlen(entry_point);
  if (n > sizeof needle - 3) return false;
  needle[0] = ',';
  memcpy(needle + 1, entry_point, n);
  needle[n + 1] = ',';
  needle[n + 2] = '\0';
  return strstr(disabled_list, needle) != NULL;
}

PJRT_Error* dr_knocked_out(const char* entry_point) {
  return dr_error(PJRT_Error_Code_UNIMPLEMENTED,
                  "%s is knocked out (DUMPREF_PJRT_DISABLE) in the dumpref PJRT device",
                  entry_point);
}

/* ---- one call's record -------------------------------------------------------------------- */

/* The bytes of args the record keeps: the prefix both jax and our header know. */
static size_t known_size(const void* args, size_t header_size) {
  if (args == NULL) return 0;
  size_t given = *(const size_t*)args; /* every Args struct starts with struct_size */
  size_t n = given < header_size ? given : header_size;
  return n < DR_TRACE_ARGS_MAX ? n : DR_TRACE_ARGS_MAX;
}

static void append(char* line, size_t cap, size_t* len, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char* line, size_t cap, size_t* len, const char* fmt, ...) {
  if (*len >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap;
}

static void append_hex(char* line, size_t cap, size_t* len, const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n && *len + 2 < cap; i++) {
    line[(*len)++] = digits[bytes[i] >> 4];
    line[(*len)++] = digits[bytes[i] & 15];
  }
}

static void write_record(dr_call* c, const void* args_after, const PJRT_Error* result,
                         bool knocked_out) {
  char line[DR_TRACE_LINE_MAX];
  size_t len = 0, cap = sizeof line - 2;
  append(line, cap, &len, "{\"fn\": \"%s\", \"args\": %s, \"struct_size\": %zu, \"in\": \"",
         c->name, c->args == NULL ? "null" : "\"set\"",
         c->args == NULL ? (size_t)0 : *(const size_t*)c->args);
  append_hex(line, cap, &len, c->before, c->size);
  append(line, cap, &len, "\", \"out\": \"");
  if (args_after != NULL) append_hex(line, cap, &len, args_after, c->size);
  append(line, cap, &len, "\", \"error\": ");
  if (result == NULL)
    append(line, cap, &len, "null");
  else
    append(line, cap, &len, "%d", (int)result->code);
  append(line, cap, &len, ", \"knocked_out\": %s, \"notes\": {%.*s}}", knocked_out ? "true" : "false",
         (int)c->notes_len, c->notes);
  line[len++] = '\n';
  if (c->outer != NULL) { /* a call made inside another (a callback): after the outer's record */
    char* grown = realloc(c->outer->pending, c->outer->pending_len + len);
    if (grown == NULL) return;
    memcpy(grown + c->outer->pending_len, line, len);
    c->outer->pending = grown;
    c->outer->pending_len += len;
    return;
  }
  /* One write for the record and the calls made inside it: records stay in the order the
   * calls began, and never interleave with another thread's. */
  if (c->pending_len == 0) {
    ssize_t written = write(trace_fd, line, len);
    (void)written; /* a trace is best effort: the device works without it */
    return;
  }
  char* all = realloc(c->pending, c->pending_len + len);
  if (all == NULL) return;
  memmove(all + len, all, c->pending_len);
  memcpy(all, line, len);
  c->pending = all;
  ssize_t written = write(trace_fd, all, c->pending_len + len);
  (void)written;
}

bool dr_call_begin(dr_call* c, const char* entry_point, const void* args, size_t header_size,
                   bool may_knock_out) {
  pthread_once(&once, read_environment);
  c->name = entry_point;
  c->args = args;
  c->size = known_size(args, header_size);
  c->notes_len = 0;
  c->pending = NULL;
  c->pending_len = 0;
  c->outer = current_call;
  if (trace_fd >= 0 && c->size > 0) memcpy(c->before, args, c->size);
  if (may_knock_out && disabled(entry_point)) {
    if (trace_fd >= 0) write_record(c, NULL, NULL, true);
    return true;
  }
  current_call = c;
  return false;
}

void dr_call_end(dr_call* c, const void* args, const PJRT_Error* result) {
  current_call = c->outer;
  if (trace_fd >= 0) write_record(c, args, result, false);
  free(c->pending);
}

void dr_trace_note(const char* key, const char* fmt, ...) {
  dr_call* c = current_call;
  if (c == NULL || trace_fd < 0) return;
  size_t cap = sizeof c->notes;
  append(c->notes, cap, &c->notes_len, "%s\"%s\": ", c->notes_len ? ", " : "", key);
  if (c->notes_len >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(c->notes + c->notes_len, cap - c->notes_len, fmt, ap);
  va_end(ap);
  if (n > 0) c->notes_len = c->notes_len + (size_t)n < cap ? c->notes_len + (size_t)n : cap;
}

void dr_trace_note_i64s(const char* key, const int64_t* values, size_t n) {
  dr_call* c = current_call;
  if (c == NULL || trace_fd < 0) return;
  char list[512];
  size_t len = 0;
  append(list, sizeof list, &len, "[");
  for (size_t i = 0; values != NULL && i < n; i++)
    append(list, sizeof list, &len, "%s%lld", i ? ", " : "", (long long)values[i]);
  append(list, sizeof list, &len, "]");
  dr_trace_note(key, "%.*s", (int)len, list);
}

bool dr_tracing(void) {
  pthread_once(&once, read_environment);
  return trace_fd >= 0;
}
