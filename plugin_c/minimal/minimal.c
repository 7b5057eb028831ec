/* minimal.c -- the smallest PJRT plugin that jax 0.10.2 lists (level 1) and holds arrays on
 * (level 2), written from the map of Study 3: only the entry points the map found needed are
 * real; every other slot answers UNIMPLEMENTED (a NULL slot that jax calls crashes it).
 *
 * Build against the real header, from the xla-cpu-pjrt wheel:
 *   cc -std=c11 -O2 -Wall -Wextra -fPIC -shared -I<xla_cpu_pjrt>/include -o libdumpref_minimal.so minimal.c
 * Register it with jax:  PJRT_NAMES_AND_LIBRARY_PATHS=dumpref:$PWD/libdumpref_minimal.so
 *
 * It trusts its caller (jax): no argument checks.  One client, one device, one memory, all
 * static; work is synchronous, so the one event is born ready.
 */
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"

typedef PJRT_Error* Err;
#define OK NULL
#define STR(field, text) (a->field = text, a->field##_size = sizeof text - 1)

/* ---- errors: the plugin's own struct; jax reads it back through the three Error_* ---------- */
struct PJRT_Error { PJRT_Error_Code code; const char* message; };

static Err error(PJRT_Error_Code code, const char* message) {
  PJRT_Error* e = malloc(sizeof *e);
  e->code = code;
  e->message = message;
  return e;
}
static void Error_Destroy(PJRT_Error_Destroy_Args* a) { free(a->error); }
static void Error_Message(PJRT_Error_Message_Args* a) {
  a->message = a->error->message;
  a->message_size = strlen(a->error->message);
}
static Err Error_GetCode(PJRT_Error_GetCode_Args* a) { a->code = a->error->code; return OK; }

/* ---- the objects behind the handles ------------------------------------------------------- */
static struct PJRT_Client { int unused; } client;
static struct PJRT_Device { int unused; } device;
static struct PJRT_DeviceDescription { int unused; } description;
static struct PJRT_Memory { int unused; } memory;
static struct PJRT_Event { int unused; } ready; /* every event: the work is done when we return */
struct PJRT_Buffer {
  PJRT_Buffer_Type type;
  size_t num_dims, size;
  int64_t dims[16];
  char* data;
  bool deleted;
};
static PJRT_Device* devices[] = {&device};
static PJRT_Memory* memories[] = {&memory};

/* ---- level 1: the plugin, the client, its device and memory ------------------------------- */
static Err Plugin_Initialize(PJRT_Plugin_Initialize_Args* a) { (void)a; return OK; }
static Err Plugin_Attributes(PJRT_Plugin_Attributes_Args* a) { a->num_attributes = 0; return OK; }
static Err Client_Create(PJRT_Client_Create_Args* a) { a->client = &client; return OK; }
static Err Client_Destroy(PJRT_Client_Destroy_Args* a) { (void)a; return OK; }
static Err Client_PlatformName(PJRT_Client_PlatformName_Args* a) { STR(platform_name, "dumpref"); return OK; }
static Err Client_PlatformVersion(PJRT_Client_PlatformVersion_Args* a) { STR(platform_version, "minimal"); return OK; }
static Err Client_Devices(PJRT_Client_Devices_Args* a) { a->devices = devices; a->num_devices = 1; return OK; }
static Err Client_AddressableDevices(PJRT_Client_AddressableDevices_Args* a) {
  a->addressable_devices = devices;
  a->num_addressable_devices = 1;
  return OK;
}
static Err Client_AddressableMemories(PJRT_Client_AddressableMemories_Args* a) {
  a->addressable_memories = memories;
  a->num_addressable_memories = 1;
  return OK;
}
static Err Client_LookupDevice(PJRT_Client_LookupDevice_Args* a) {
  if (a->id != 0) return error(PJRT_Error_Code_INVALID_ARGUMENT, "no such device id");
  a->device = &device;
  return OK;
}
static Err Device_GetDescription(PJRT_Device_GetDescription_Args* a) { a->device_description = &description; return OK; }
static Err Device_IsAddressable(PJRT_Device_IsAddressable_Args* a) { a->is_addressable = true; return OK; }
static Err Device_LocalHardwareId(PJRT_Device_LocalHardwareId_Args* a) { a->local_hardware_id = 0; return OK; }
static Err Device_AddressableMemories(PJRT_Device_AddressableMemories_Args* a) { a->memories = memories; a->num_memories = 1; return OK; }
static Err Device_DefaultMemory(PJRT_Device_DefaultMemory_Args* a) { a->memory = &memory; return OK; }
static Err DeviceDescription_Id(PJRT_DeviceDescription_Id_Args* a) { a->id = 0; return OK; }
static Err DeviceDescription_ProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args* a) { a->process_index = 0; return OK; }
static Err DeviceDescription_Attributes(PJRT_DeviceDescription_Attributes_Args* a) { a->num_attributes = 0; return OK; }
static Err DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args* a) { STR(device_kind, "dumpref"); return OK; }
static Err DeviceDescription_DebugString(PJRT_DeviceDescription_DebugString_Args* a) { STR(debug_string, "dumpref:0"); return OK; }
static Err DeviceDescription_ToString(PJRT_DeviceDescription_ToString_Args* a) { STR(to_string, "MinimalDevice(id=0)"); return OK; }
static Err Memory_Kind(PJRT_Memory_Kind_Args* a) { STR(kind, "hbm"); return OK; }
static Err Memory_AddressableByDevices(PJRT_Memory_AddressableByDevices_Args* a) { a->devices = devices; a->num_devices = 1; return OK; }
/* Printing a memory asks for these; jaxlib aborts the whole process when either answers with
 * an error (LogFatalIfPjrtError), so they are needed as soon as a reader prints one. */
static Err Memory_DebugString(PJRT_Memory_DebugString_Args* a) { STR(debug_string, "dumpref:0 memory hbm"); return OK; }
static Err Memory_ToString(PJRT_Memory_ToString_Args* a) { STR(to_string, "MinimalMemory(id=0, kind=hbm)"); return OK; }

/* ---- level 2: buffers, the two host transfers, events ------------------------------------- */
static size_t element_size(PJRT_Buffer_Type t) {
  switch (t) {
    case PJRT_Buffer_Type_PRED: case PJRT_Buffer_Type_S8: case PJRT_Buffer_Type_U8: return 1;
    case PJRT_Buffer_Type_S16: case PJRT_Buffer_Type_U16: case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16: return 2;
    case PJRT_Buffer_Type_S32: case PJRT_Buffer_Type_U32: case PJRT_Buffer_Type_F32: return 4;
    case PJRT_Buffer_Type_S64: case PJRT_Buffer_Type_U64: case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64: return 8;
    case PJRT_Buffer_Type_C128: return 16;
    default: return 0;
  }
}

/* jax hands numpy's byte strides (a transposed view arrives as strides, not as a copy), or
 * NULL for a dense row-major array; the device keeps every array dense and row-major. */
static Err Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* a) {
  size_t es = element_size(a->type), count = 1;
  if (es == 0 || a->num_dims > 16) return error(PJRT_Error_Code_UNIMPLEMENTED, "unsupported array");
  PJRT_Buffer* b = calloc(1, sizeof *b);
  b->type = a->type;
  b->num_dims = a->num_dims;
  for (size_t d = 0; d < a->num_dims; d++) count *= (size_t)(b->dims[d] = a->dims[d]);
  b->size = count * es;
  b->data = malloc(b->size + 1);
  int64_t index[16] = {0};
  for (size_t k = 0; k < count; k++) { /* element k of the row-major order */
    const char* from = (const char*)a->data + k * es;
    if (a->byte_strides != NULL) {
      from = a->data;
      for (size_t d = 0; d < a->num_dims; d++) from += index[d] * a->byte_strides[d];
      for (size_t d = a->num_dims; d-- > 0 && ++index[d] == b->dims[d];) index[d] = 0;
    }
    memcpy(b->data + k * es, from, es);
  }
  a->buffer = b;
  a->done_with_host_buffer = &ready; /* jax waits on it (OnReady) before freeing its copy */
  return OK;
}

/* jax sends a host_layout, tiled with minor_to_major = rank-1..0 and no tiles: dense row-major,
 * the device's own layout, so the copy is one memcpy.  A NULL dst asks for the size. */
static Err Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* a) {
  if (a->dst == NULL) { a->dst_size = a->src->size; return OK; }
  memcpy(a->dst, a->src->data, a->src->size);
  a->event = &ready;
  return OK;
}
static Err Buffer_Delete(PJRT_Buffer_Delete_Args* a) { a->buffer->deleted = true; return OK; }
static Err Buffer_Destroy(PJRT_Buffer_Destroy_Args* a) { free(a->buffer->data); free(a->buffer); return OK; }
static Err Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args* a) { a->is_deleted = a->buffer->deleted; return OK; }
static Err Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args* a) { a->is_on_cpu = false; return OK; }
static Err Buffer_ElementType(PJRT_Buffer_ElementType_Args* a) { a->type = a->buffer->type; return OK; }
static Err Buffer_Dimensions(PJRT_Buffer_Dimensions_Args* a) { a->dims = a->buffer->dims; a->num_dims = a->buffer->num_dims; return OK; }
static Err Buffer_Device(PJRT_Buffer_Device_Args* a) { a->device = &device; return OK; }
static Err Buffer_Memory(PJRT_Buffer_Memory_Args* a) { a->memory = &memory; return OK; }
/* block_until_ready and is_ready: the buffer's event, then whether it is ready and its error
 * (none).  jaxlib aborts the process when Buffer_ReadyEvent fails. */
static Err Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* a) { a->event = &ready; return OK; }
/* The event is ready when jax gets it: call back at once, say so, and report no error. */
static Err Event_OnReady(PJRT_Event_OnReady_Args* a) { a->callback(OK, a->user_arg); return OK; }
static Err Event_IsReady(PJRT_Event_IsReady_Args* a) { a->is_ready = true; return OK; }
static Err Event_Error(PJRT_Event_Error_Args* a) { (void)a; return OK; }
static Err Event_Destroy(PJRT_Event_Destroy_Args* a) { (void)a; return OK; }

/* ---- the table ---------------------------------------------------------------------------- */
#define SLOT(name) .PJRT_##name = name
static PJRT_Api api = {
    .struct_size = PJRT_Api_STRUCT_SIZE,
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE,
                         .major_version = PJRT_API_MAJOR, .minor_version = PJRT_API_MINOR},
    SLOT(Error_Destroy), SLOT(Error_Message), SLOT(Error_GetCode),
    SLOT(Plugin_Initialize), SLOT(Plugin_Attributes),
    SLOT(Client_Create), SLOT(Client_Destroy), SLOT(Client_PlatformName),
    SLOT(Client_PlatformVersion), SLOT(Client_Devices), SLOT(Client_AddressableDevices),
    SLOT(Client_AddressableMemories), SLOT(Client_LookupDevice),
    SLOT(Device_GetDescription), SLOT(Device_IsAddressable), SLOT(Device_LocalHardwareId),
    SLOT(Device_AddressableMemories), SLOT(Device_DefaultMemory),
    SLOT(DeviceDescription_Id), SLOT(DeviceDescription_ProcessIndex),
    SLOT(DeviceDescription_Attributes), SLOT(DeviceDescription_Kind),
    SLOT(DeviceDescription_DebugString), SLOT(DeviceDescription_ToString),
    SLOT(Memory_Kind), SLOT(Memory_AddressableByDevices),
    SLOT(Memory_DebugString), SLOT(Memory_ToString),
    SLOT(Client_BufferFromHostBuffer), SLOT(Buffer_ToHostBuffer), SLOT(Buffer_Delete),
    SLOT(Buffer_Destroy), SLOT(Buffer_IsDeleted), SLOT(Buffer_IsOnCpu), SLOT(Buffer_ElementType),
    SLOT(Buffer_Dimensions), SLOT(Buffer_Device), SLOT(Buffer_Memory), SLOT(Buffer_ReadyEvent),
    SLOT(Event_OnReady), SLOT(Event_IsReady), SLOT(Event_Error), SLOT(Event_Destroy),
};

/* Every slot not filled above: jax calls some of them (the map's "called, not needed") and
 * carries on when they answer UNIMPLEMENTED.  Every entry point takes one args pointer and
 * returns PJRT_Error* (the two void ones are filled above), so one function serves them all. */
static Err unimplemented(void* args) {
  (void)args;
  return error(PJRT_Error_Code_UNIMPLEMENTED, "not implemented by the minimal dumpref plugin");
}

__attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi(void) {
  typedef void (*any_fn)(void);
  any_fn* slot = (any_fn*)&api.PJRT_Error_Destroy;
  for (; (char*)slot < (char*)&api + sizeof api; slot++)
    if (*slot == NULL) *slot = (any_fn)unimplemented;
  return &api;
}
