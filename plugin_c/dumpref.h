/* dumpref.h -- shared internals of the dumpref PJRT device.
 *
 * Every C file of the plugin includes this header.  It holds:
 *   - the objects behind PJRT's opaque handles (client, device, memory, buffer, event, error),
 *   - error construction (dr_error, dr_unimplemented),
 *   - the call trace and knock-out wrapper of every table slot (DR_TRACED), and the
 *     entry-point prologue DR_ENTER (argument checks),
 *   - small helpers other families need (element sizes, ready events).
 *
 * The PJRT header itself comes from the installed `xla-cpu-pjrt` wheel (API 0.81); build.py
 * passes its folder with -I.  It is never copied into this repository.
 *
 * Conventions, so that a new family (programs, executables) slots in without surprises:
 *   - every table slot points at a DR_TRACED wrapper (api.c): it writes the call's trace record
 *     and answers UNIMPLEMENTED when the entry point is knocked out (hooks.c).
 *   - every entry point begins with DR_ENTER(PJRT_Name, args, last_field_read): it answers
 *     INVALID_ARGUMENT for a NULL args or a struct_size smaller than the fields the function
 *     reads or writes.  A LARGER struct_size is normal (jax is newer than the header) and is
 *     accepted: we only ever touch the prefix we know.
 *   - pointer fields are checked with DR_REQUIRE before use.
 *   - everything is synchronous: work is done when the entry point returns, and the events we
 *     hand out are born ready (dr_event_ready / dr_event_failed).
 */
#ifndef DUMPREF_H
#define DUMPREF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt_c_api.h"

#define DR_PLATFORM_NAME "dumpref"
#define DR_PLATFORM_VERSION "dumpref 0.1 (PJRT C API 0.81)"
#define DR_DEVICE_KIND "dumpref"
/* Any name will do (the minimal plugin reports "hbm"); jax shows it as the memory's `kind`
 * and matches shardings' memory kinds against it.  "device" is what jax's CPU client reports. */
#define DR_MEMORY_KIND "device"

/* ---- objects behind the opaque handles ------------------------------------------------- */

struct PJRT_Error {
  PJRT_Error_Code code;
  bool is_static;       /* the out-of-memory error is a static object: never freed */
  size_t message_size;
  char message[];       /* NUL-terminated, message_size bytes before the NUL */
};

/* Work is synchronous, so an event is ready when it is made; it only carries the outcome. */
struct PJRT_Event {
  PJRT_Error_Code code; /* OK when the work succeeded */
  char* message;        /* NULL when code is OK */
};

struct PJRT_DeviceDescription {
  int id;
  int process_index;
};

struct PJRT_Memory {
  int id;
  PJRT_Client* client;
  PJRT_Device* devices[1]; /* the devices that can address this memory */
};

struct PJRT_Device {
  PJRT_DeviceDescription description;
  int local_hardware_id;
  PJRT_Client* client;
  PJRT_Memory* memories[1]; /* memories[0] is the default memory */
};

/* One client owns one device with one memory.  Counters feed PJRT_Device_MemoryStats, which is
 * how tests see that deleted buffers really give their bytes back. */
struct PJRT_Client {
  PJRT_Device device;
  PJRT_Memory memory;
  PJRT_Device* devices[1];
  PJRT_Memory* memories[1];
  atomic_llong bytes_in_use;
  atomic_llong peak_bytes_in_use;
  atomic_llong num_allocs;
  atomic_llong live_buffers;
};

/* A dense array in row-major order (minor_to_major = rank-1 .. 0). */
struct PJRT_Buffer {
  PJRT_Client* client;
  PJRT_Device* device;
  PJRT_Memory* memory;
  PJRT_Buffer_Type type;
  size_t num_dims;
  int64_t* dims;           /* num_dims entries (NULL when 0-d) */
  int64_t* minor_to_major; /* num_dims entries, for GetMemoryLayout */
  size_t byte_size;
  void* data;              /* NULL once freed (or when byte_size is 0) */
  atomic_bool deleted;     /* PJRT_Buffer_Delete was called: what IsDeleted reports */
  atomic_bool data_freed;  /* the bytes went back; later than `deleted` while referenced */
  atomic_int external_references;
};

/* ---- errors (error.c) ------------------------------------------------------------------ */

/* printf-style; never returns NULL (falls back to a static out-of-memory error). */
PJRT_Error* dr_error(PJRT_Error_Code code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* UNIMPLEMENTED, naming the entry point. */
PJRT_Error* dr_unimplemented(const char* entry_point);
/* A copy of (code, message) as a new error; NULL when code is OK. */
PJRT_Error* dr_error_from(PJRT_Error_Code code, const char* message);
/* NULL when a struct_size covers the fields up to and including `last_field` (`needed`
 * bytes), else INVALID_ARGUMENT naming the entry point and the field (error.c). */
PJRT_Error* dr_check_struct_size(const char* entry_point, const char* last_field,
                                 size_t given, size_t needed);

/* ---- call trace and knock-out (hooks.c) ------------------------------------------------ */

#define DR_TRACE_ARGS_MAX 512  /* bytes of an args struct a record keeps (the largest is ~200) */
#define DR_TRACE_LINE_MAX 4096

/* One entry-point call while it runs: the args as jax passed them, and the notes the entry
 * point adds about what its pointer arguments point at. */
typedef struct dr_call {
  const char* name;
  const void* args;
  size_t size; /* bytes of args recorded */
  unsigned char before[DR_TRACE_ARGS_MAX];
  char notes[1024];
  size_t notes_len;
  struct dr_call* outer; /* the call this one was made from (inside a callback), or NULL */
  char* pending;         /* records of the calls made inside this one, written after it */
  size_t pending_len;
} dr_call;

/* Starts a call's record; true when the entry point is knocked out (the record is written). */
bool dr_call_begin(dr_call* call, const char* entry_point, const void* args, size_t header_size,
                   bool may_knock_out);
/* Writes the record: args as the entry point left them, and the error it answered. */
void dr_call_end(dr_call* call, const void* args, const PJRT_Error* result);
/* Adds "key": value (printf-formatted JSON) to the record of the call running on this thread. */
void dr_trace_note(const char* key, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void dr_trace_note_i64s(const char* key, const int64_t* values, size_t n);
/* Whether a trace is being written (notes that cost something are skipped otherwise). */
bool dr_tracing(void);
/* The answer of a knocked-out entry point: UNIMPLEMENTED, naming it and the variable. */
PJRT_Error* dr_knocked_out(const char* entry_point);

/* The function a table slot points at (api.c): the call's trace record and the knock-out
 * switch around the implementation `impl`, so no entry point has to remember either. */
#define DR_TRACED(fn, impl)                                                                \
  static PJRT_Error* traced_##fn(fn##_Args* args) {                                        \
    dr_call call_;                                                                         \
    if (dr_call_begin(&call_, #fn, args, sizeof(fn##_Args), true))                         \
      return dr_knocked_out(#fn);                                                          \
    PJRT_Error* error_ = impl(args);                                                       \
    dr_call_end(&call_, args, error_);                                                     \
    return error_;                                                                         \
  }
/* The same for the error channel: traced, never knocked out (it is how failures are read). */
#define DR_TRACED_VOID(fn, impl)                                                           \
  static void traced_##fn(fn##_Args* args) {                                               \
    dr_call call_;                                                                         \
    dr_call_begin(&call_, #fn, args, sizeof(fn##_Args), false);                            \
    impl(args);                                                                            \
    dr_call_end(&call_, args, NULL);                                                       \
  }
#define DR_TRACED_CHANNEL(fn, impl)                                                        \
  static PJRT_Error* traced_##fn(fn##_Args* args) {                                        \
    dr_call call_;                                                                         \
    dr_call_begin(&call_, #fn, args, sizeof(fn##_Args), false);                            \
    PJRT_Error* error_ = impl(args);                                                       \
    dr_call_end(&call_, args, error_);                                                     \
    return error_;                                                                         \
  }

/* The argument checks every entry point begins with (see the top of this file). */
#define DR_ENTER(fn, args, last_field)                                                     \
  do {                                                                                     \
    if ((args) == NULL)                                                                    \
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, #fn ": args is NULL");             \
    PJRT_Error* dr_size_error_ = dr_check_struct_size(                                     \
        #fn, #last_field, (args)->struct_size, PJRT_STRUCT_SIZE(fn##_Args, last_field));   \
    if (dr_size_error_ != NULL) return dr_size_error_;                                     \
  } while (0)

/* A pointer argument the entry point cannot do without. */
#define DR_REQUIRE(fn, pointer)                                                            \
  do {                                                                                     \
    if ((pointer) == NULL)                                                                 \
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, #fn ": " #pointer " is NULL");     \
  } while (0)

/* An entry point the device does not support: answers UNIMPLEMENTED naming itself, through
 * the same traced wrapper as the others (api.c's stub rows). */
#define DR_STUB(fn)                                                                        \
  static PJRT_Error* stub_##fn(fn##_Args* args) {                                          \
    (void)args;                                                                            \
    return dr_unimplemented(#fn);                                                          \
  }                                                                                        \
  DR_TRACED(fn, stub_##fn)

/* ---- events (event.c) ------------------------------------------------------------------ */

/* A new event that is already ready; NULL only when out of memory. */
PJRT_Event* dr_event_ready(void);
/* A new ready event that carries an error (code must not be OK). */
PJRT_Event* dr_event_failed(PJRT_Error_Code code, const char* message);

/* ---- element types and buffers (buffer.c) ---------------------------------------------- */

/* Bytes per element, or 0 for types this device does not hold (sub-byte, token, invalid). */
size_t dr_element_size(PJRT_Buffer_Type type);
/* The name of a buffer type, for messages ("F32", "BF16", ...). */
const char* dr_type_name(PJRT_Buffer_Type type);
/* A new dense buffer of the given type and dims on `client`'s device; data uninitialised.
 * On failure returns NULL and sets *error. */
PJRT_Buffer* dr_buffer_new(PJRT_Client* client, PJRT_Buffer_Type type, const int64_t* dims,
                           size_t num_dims, PJRT_Error** error);

/* ---- plugin attributes (plugin.c) ---------------------------------------------------- */

/* Optional: a program reader may define this (a strong definition in its own file) to add
 * plugin attributes such as `stablehlo_current_version`; the array must live for the whole
 * process.  Left undefined, the weak declaration makes it NULL and the list is empty. */
__attribute__((weak, visibility("hidden"))) const PJRT_NamedValue* dr_program_attributes(size_t* count);

/* ---- client internals (client.c) ------------------------------------------------------- */

/* Defined by executable.c: detaches the loaded executables of a client being destroyed, so a
 * later Execute answers an error instead of touching freed memory. */
__attribute__((weak)) void dr_executables_client_destroyed(PJRT_Client* client);

/* Whether `device` / `memory` belong to `client` (guards against foreign handles). */
bool dr_client_owns_device(const PJRT_Client* client, const PJRT_Device* device);
bool dr_client_owns_memory(const PJRT_Client* client, const PJRT_Memory* memory);

#endif /* DUMPREF_H */
