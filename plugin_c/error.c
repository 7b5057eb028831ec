/* error.c -- PJRT_Error objects and the three error entry points.
 *
 * jaxlib reads every failure through these, so they are the first thing any plugin needs:
 * without PJRT_Error_Message and PJRT_Error_GetCode an error cannot even be reported.
 * The three entry points return void or are the error channel itself, so they are traced but
 * cannot be knocked out (api.c).  The error struct is the plugin's own: jaxlib only ever holds
 * a pointer to it and reads it back through these three.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dumpref.h"

/* Returned when building an error fails for lack of memory; never freed. */
static struct {
  PJRT_Error error;
  char text[64];
} out_of_memory = {{PJRT_Error_Code_RESOURCE_EXHAUSTED, true, 38, {}},
                   "dumpref: out of memory making an error"};

static PJRT_Error* oom_error(void) { return &out_of_memory.error; }

static PJRT_Error* error_with_text(PJRT_Error_Code code, const char* text, size_t size) {
  PJRT_Error* e = malloc(sizeof(PJRT_Error) + size + 1);
  if (e == NULL) return oom_error();
  e->code = code;
  e->is_static = false;
  e->message_size = size;
  memcpy(e->message, text, size);
  e->message[size] = '\0';
  return e;
}

PJRT_Error* dr_error(PJRT_Error_Code code, const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof text) n = sizeof text - 1; /* long messages are cut, not lost */
  return error_with_text(code, text, (size_t)n);
}

PJRT_Error* dr_unimplemented(const char* entry_point) {
  return dr_error(PJRT_Error_Code_UNIMPLEMENTED,
                  "%s is not implemented by the dumpref PJRT device", entry_point);
}

PJRT_Error* dr_error_from(PJRT_Error_Code code, const char* message) {
  if (code == PJRT_Error_Code_OK) return NULL;
  if (message == NULL) message = "";
  return error_with_text(code, message, strlen(message));
}

/* ---- entry points ---------------------------------------------------------------------- */

void dr_Error_Destroy(PJRT_Error_Destroy_Args* args) {
  /* void: a bad argument cannot be reported, only ignored. */
  if (args == NULL || args->struct_size < PJRT_STRUCT_SIZE(PJRT_Error_Destroy_Args, error))
    return;
  if (args->error != NULL && !args->error->is_static) free(args->error);
}

void dr_Error_Message(PJRT_Error_Message_Args* args) {
  if (args == NULL || args->struct_size < PJRT_STRUCT_SIZE(PJRT_Error_Message_Args, message_size))
    return;
  if (args->error == NULL) {
    args->message = "";
    args->message_size = 0;
    return;
  }
  args->message = args->error->message;
  args->message_size = args->error->message_size;
}

PJRT_Error* dr_check_struct_size(const char* entry_point, const char* last_field, size_t given,
                                 size_t needed) {
  if (given >= needed) return NULL;
  return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                  "%s: struct_size is %zu bytes, but the fields up to '%s' need %zu", entry_point,
                  given, last_field, needed);
}

PJRT_Error* dr_Error_GetCode(PJRT_Error_GetCode_Args* args) {
  if (args == NULL)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "PJRT_Error_GetCode: args is NULL");
  PJRT_Error* size_error = dr_check_struct_size("PJRT_Error_GetCode", "code", args->struct_size,
                                                PJRT_STRUCT_SIZE(PJRT_Error_GetCode_Args, code));
  if (size_error != NULL) return size_error;
  DR_REQUIRE(PJRT_Error_GetCode, args->error);
  args->code = args->error->code;
  return NULL;
}
