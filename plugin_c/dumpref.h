/* dumpref.h -- shared internals of the dumpref PJRT device.
 *
 * Every C file of the plugin includes this header.  It holds:
 *   - the objects behind PJRT's opaque handles (client, device, memory, buffer, event, error),
 *   - error construction (dr_error, dr_unimplemented),
 *   - the entry-point prologue DR_ENTER: call trace, knock-out, argument checks,
 *   - small helpers other families need (element sizes, ready events).
 *
 * The PJRT header itself comes from the installed `xla-cpu-pjrt` wheel (API 0.81); build.py
 * passes its folder with -I.  It is never copied into this repository.
 *
 * Conventions, so that a new family (programs, executables) slots in without surprises:
 *   - every entry point begins with DR_ENTER(PJRT_Name, args, last_field_read): it appends the
 *     name to the call trace, answers UNIMPLEMENTED when the name is knocked out, and answers
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
/* jaxlib matches memory kinds by name; "device" is the kind jax's own CPU device reports for
 * its default memory, so jax treats ours the same way. */
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

/* ---- call trace and knock-out (hooks.c) ------------------------------------------------ */

/* Appends `entry_point` and a newline to $DUMPREF_PJRT_TRACE (if set), one write() per call. */
void dr_trace(const char* entry_point);
/* True when `entry_point` is named in the comma-separated $DUMPREF_PJRT_DISABLE. */
bool dr_disabled(const char* entry_point);
/* The answer of a knocked-out entry point: UNIMPLEMENTED, naming it and the variable. */
PJRT_Error* dr_knocked_out(const char* entry_point);
/* Whether a struct_size covers the fields up to and including `last_field_end` bytes. */
PJRT_Error* dr_check_struct_size(const char* entry_point, const char* last_field,
                                 size_t given, size_t needed);

/* The prologue of every entry point (see the top of this file). */
#define DR_ENTER(fn, args, last_field)                                                     \
  do {                                                                                     \
    dr_trace(#fn);                                                                         \
    if (dr_disabled(#fn)) return dr_knocked_out(#fn);                                      \
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

/* The body of an entry point the device does not support (used by api.c's stub rows). */
#define DR_DEFINE_STUB(fn)                                                                 \
  __attribute__((unused)) static PJRT_Error* dr_stub_##fn(fn##_Args* args) {               \
    (void)args;                                                                            \
    dr_trace(#fn);                                                                         \
    return dr_unimplemented(#fn);                                                          \
  }

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
