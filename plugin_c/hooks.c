/* hooks.c -- the call trace and the knock-out switch, both driven by the environment.
 *
 *   DUMPREF_PJRT_TRACE=FILE     append each entry point's name to FILE, one per line, in call
 *                               order.  One O_APPEND write() per call: lines from several
 *                               threads never interleave, and nothing is lost if jaxlib aborts.
 *   DUMPREF_PJRT_DISABLE=A,B    entry points A and B answer UNIMPLEMENTED, so a test can remove
 *                               any of them without rebuilding.
 *
 * Both are read once, at the first call, so they must be set before the process starts.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dumpref.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int trace_fd = -1;
static char* disabled_list = NULL; /* ",A,B," so a name matches as ",name," */

static void read_environment(void) {
  const char* path = getenv("DUMPREF_PJRT_TRACE");
  if (path != NULL && path[0] != '\0')
    trace_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
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

void dr_trace(const char* entry_point) {
  pthread_once(&once, read_environment);
  if (trace_fd < 0) return;
  char line[128];
  size_t n = strlen(entry_point);
  if (n > sizeof line - 2) n = sizeof line - 2;
  memcpy(line, entry_point, n);
  line[n] = '\n';
  ssize_t written = write(trace_fd, line, n + 1);
  (void)written; /* a trace is best effort: the device works without it */
}

bool dr_disabled(const char* entry_point) {
  pthread_once(&once, read_environment);
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

PJRT_Error* dr_check_struct_size(const char* entry_point, const char* last_field, size_t given,
                                 size_t needed) {
  if (given >= needed) return NULL;
  return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                  "%s: struct_size is %zu bytes, but the fields up to '%s' need %zu", entry_point,
                  given, last_field, needed);
}
