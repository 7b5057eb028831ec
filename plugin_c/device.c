/* device.c -- what jax learns about the device: its description, the device itself, and its
 * one memory.
 *
 * Memories are all or nothing in jaxlib: once a device reports a default memory, the client's
 * memories, the device's memories and each memory's devices must all agree, or jaxlib fails a
 * CHECK.  So the three views below are built from the same two pointers in the client.
 */
#include "dumpref.h"

/* ---- PJRT_DeviceDescription ------------------------------------------------------------ */

#define DR_DEVICE_DEBUG_STRING "dumpref:0"
#define DR_DEVICE_TO_STRING "DumprefDevice(id=0)"

PJRT_Error* dr_DeviceDescription_Id(PJRT_DeviceDescription_Id_Args* args) {
  DR_ENTER(PJRT_DeviceDescription_Id, args, id);
  DR_REQUIRE(PJRT_DeviceDescription_Id, args->device_description);
  args->id = args->device_description->id;
  return NULL;
}

PJRT_Error* dr_DeviceDescription_ProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args* args) {
  DR_ENTER(PJRT_DeviceDescription_ProcessIndex, args, process_index);
  DR_REQUIRE(PJRT_DeviceDescription_ProcessIndex, args->device_description);
  args->process_index = args->device_description->process_index;
  return NULL;
}

PJRT_Error* dr_DeviceDescription_Attributes(PJRT_DeviceDescription_Attributes_Args* args) {
  DR_ENTER(PJRT_DeviceDescription_Attributes, args, attributes);
  DR_REQUIRE(PJRT_DeviceDescription_Attributes, args->device_description);
  args->num_attributes = 0;
  args->attributes = NULL;
  return NULL;
}

PJRT_Error* dr_DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args* args) {
  DR_ENTER(PJRT_DeviceDescription_Kind, args, device_kind_size);
  DR_REQUIRE(PJRT_DeviceDescription_Kind, args->device_description);
  args->device_kind = DR_DEVICE_KIND;
  args->device_kind_size = sizeof DR_DEVICE_KIND - 1;
  return NULL;
}

PJRT_Error* dr_DeviceDescription_DebugString(PJRT_DeviceDescription_DebugString_Args* args) {
  DR_ENTER(PJRT_DeviceDescription_DebugString, args, debug_string_size);
  DR_REQUIRE(PJRT_DeviceDescription_DebugString, args->device_description);
  args->debug_string = DR_DEVICE_DEBUG_STRING;
  args->debug_string_size = sizeof DR_DEVICE_DEBUG_STRING - 1;
  return NULL;
}

PJRT_Error* dr_DeviceDescription_ToString(PJRT_DeviceDescription_ToString_Args* args) {
  DR_ENTER(PJRT_DeviceDescription_ToString, args, to_string_size);
  DR_REQUIRE(PJRT_DeviceDescription_ToString, args->device_description);
  args->to_string = DR_DEVICE_TO_STRING;
  args->to_string_size = sizeof DR_DEVICE_TO_STRING - 1;
  return NULL;
}

/* ---- PJRT_Device ----------------------------------------------------------------------- */

PJRT_Error* dr_Device_GetDescription(PJRT_Device_GetDescription_Args* args) {
  DR_ENTER(PJRT_Device_GetDescription, args, device_description);
  DR_REQUIRE(PJRT_Device_GetDescription, args->device);
  args->device_description = &args->device->description;
  return NULL;
}

PJRT_Error* dr_Device_IsAddressable(PJRT_Device_IsAddressable_Args* args) {
  DR_ENTER(PJRT_Device_IsAddressable, args, is_addressable);
  DR_REQUIRE(PJRT_Device_IsAddressable, args->device);
  args->is_addressable = true;
  return NULL;
}

PJRT_Error* dr_Device_LocalHardwareId(PJRT_Device_LocalHardwareId_Args* args) {
  DR_ENTER(PJRT_Device_LocalHardwareId, args, local_hardware_id);
  DR_REQUIRE(PJRT_Device_LocalHardwareId, args->device);
  args->local_hardware_id = args->device->local_hardware_id;
  return NULL;
}

PJRT_Error* dr_Device_AddressableMemories(PJRT_Device_AddressableMemories_Args* args) {
  DR_ENTER(PJRT_Device_AddressableMemories, args, num_memories);
  DR_REQUIRE(PJRT_Device_AddressableMemories, args->device);
  args->memories = args->device->memories;
  args->num_memories = 1;
  return NULL;
}

PJRT_Error* dr_Device_DefaultMemory(PJRT_Device_DefaultMemory_Args* args) {
  DR_ENTER(PJRT_Device_DefaultMemory, args, memory);
  DR_REQUIRE(PJRT_Device_DefaultMemory, args->device);
  args->memory = args->device->memories[0];
  return NULL;
}

/* The counters the buffers keep; how a test sees that deleted buffers give their bytes back. */
PJRT_Error* dr_Device_MemoryStats(PJRT_Device_MemoryStats_Args* args) {
  DR_ENTER(PJRT_Device_MemoryStats, args, peak_pool_bytes_is_set);
  DR_REQUIRE(PJRT_Device_MemoryStats, args->device);
  PJRT_Client* c = args->device->client;
  args->bytes_in_use = atomic_load(&c->bytes_in_use);
  args->peak_bytes_in_use = atomic_load(&c->peak_bytes_in_use);
  args->peak_bytes_in_use_is_set = true;
  args->num_allocs = atomic_load(&c->num_allocs);
  args->num_allocs_is_set = true;
  args->largest_alloc_size_is_set = false;
  args->bytes_limit_is_set = false;
  args->bytes_reserved_is_set = false;
  args->peak_bytes_reserved_is_set = false;
  args->bytes_reservable_limit_is_set = false;
  args->largest_free_block_bytes_is_set = false;
  args->pool_bytes_is_set = false;
  args->peak_pool_bytes_is_set = false;
  return NULL;
}

/* ---- PJRT_Memory ----------------------------------------------------------------------- */

#define DR_MEMORY_DEBUG_STRING "dumpref:0 device memory"
#define DR_MEMORY_TO_STRING "MEMORY_SPACE(device, id=0)"

PJRT_Error* dr_Memory_Id(PJRT_Memory_Id_Args* args) {
  DR_ENTER(PJRT_Memory_Id, args, id);
  DR_REQUIRE(PJRT_Memory_Id, args->memory);
  args->id = args->memory->id;
  return NULL;
}

PJRT_Error* dr_Memory_Kind(PJRT_Memory_Kind_Args* args) {
  DR_ENTER(PJRT_Memory_Kind, args, kind_size);
  DR_REQUIRE(PJRT_Memory_Kind, args->memory);
  args->kind = DR_MEMORY_KIND;
  args->kind_size = sizeof DR_MEMORY_KIND - 1;
  return NULL;
}

PJRT_Error* dr_Memory_Kind_Id(PJRT_Memory_Kind_Id_Args* args) {
  DR_ENTER(PJRT_Memory_Kind_Id, args, kind_id);
  DR_REQUIRE(PJRT_Memory_Kind_Id, args->memory);
  args->kind_id = 0;
  return NULL;
}

PJRT_Error* dr_Memory_DebugString(PJRT_Memory_DebugString_Args* args) {
  DR_ENTER(PJRT_Memory_DebugString, args, debug_string_size);
  DR_REQUIRE(PJRT_Memory_DebugString, args->memory);
  args->debug_string = DR_MEMORY_DEBUG_STRING;
  args->debug_string_size = sizeof DR_MEMORY_DEBUG_STRING - 1;
  return NULL;
}

PJRT_Error* dr_Memory_ToString(PJRT_Memory_ToString_Args* args) {
  DR_ENTER(PJRT_Memory_ToString, args, to_string_size);
  DR_REQUIRE(PJRT_Memory_ToString, args->memory);
  args->to_string = DR_MEMORY_TO_STRING;
  args->to_string_size = sizeof DR_MEMORY_TO_STRING - 1;
  return NULL;
}

PJRT_Error* dr_Memory_AddressableByDevices(PJRT_Memory_AddressableByDevices_Args* args) {
  DR_ENTER(PJRT_Memory_AddressableByDevices, args, num_devices);
  DR_REQUIRE(PJRT_Memory_AddressableByDevices, args->memory);
  args->devices = args->memory->devices;
  args->num_devices = 1;
  return NULL;
}
