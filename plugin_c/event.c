/* event.c -- PJRT_Event: the device works synchronously, so every event is born ready.
 *
 * jaxlib still needs events: BufferFromHostBuffer hands one back for "done with the host
 * buffer", ToHostBuffer for "copy finished", and Buffer_ReadyEvent for "data is ready".
 * An event only remembers how the work ended; Error/Await/OnReady hand out fresh copies of
 * that outcome, because the caller owns (and destroys) every error it receives.
 */
#include <stdlib.h>
#include <string.h>

#include "dumpref.h"

PJRT_Event* dr_event_ready(void) { return calloc(1, sizeof(PJRT_Event)); }

PJRT_Event* dr_event_failed(PJRT_Error_Code code, const char* message) {
  if (message == NULL) message = "";
  size_t n = strlen(message);
  PJRT_Event* e = calloc(1, sizeof(PJRT_Event));
  char* copy = malloc(n + 1);
  if (e == NULL || copy == NULL) {
    free(e);
    free(copy);
    return NULL;
  }
  memcpy(copy, message, n + 1);
  e->code = code;
  e->message = copy;
  return e;
}

static PJRT_Error* outcome_of(const PJRT_Event* event) {
  return dr_error_from(event->code, event->message);
}

PJRT_Error* dr_Event_Destroy(PJRT_Event_Destroy_Args* args) {
  DR_ENTER(PJRT_Event_Destroy, args, event);
  if (args->event != NULL) {
    free(args->event->message);
    free(args->event);
  }
  return NULL;
}

PJRT_Error* dr_Event_IsReady(PJRT_Event_IsReady_Args* args) {
  DR_ENTER(PJRT_Event_IsReady, args, is_ready);
  DR_REQUIRE(PJRT_Event_IsReady, args->event);
  args->is_ready = true;
  return NULL;
}

PJRT_Error* dr_Event_Error(PJRT_Event_Error_Args* args) {
  DR_ENTER(PJRT_Event_Error, args, event);
  DR_REQUIRE(PJRT_Event_Error, args->event);
  return outcome_of(args->event);
}

PJRT_Error* dr_Event_Await(PJRT_Event_Await_Args* args) {
  DR_ENTER(PJRT_Event_Await, args, event);
  DR_REQUIRE(PJRT_Event_Await, args->event);
  return outcome_of(args->event);
}

PJRT_Error* dr_Event_OnReady(PJRT_Event_OnReady_Args* args) {
  DR_ENTER(PJRT_Event_OnReady, args, user_arg);
  DR_REQUIRE(PJRT_Event_OnReady, args->event);
  DR_REQUIRE(PJRT_Event_OnReady, args->callback);
  /* Already ready: run the callback now, on the caller's thread; it owns the error it gets. */
  args->callback(outcome_of(args->event), args->user_arg);
  return NULL;
}
