/* client.c -- PJRT_Client: the object jax creates first and asks for its devices and memories.
 *
 * One client owns one device with one memory; all three live in a single allocation, so a
 * client is made and freed in one step.  Create options and key-value store callbacks are for
 * multi-process set-ups and are ignored: this device is single-process.
 */
#include <stdlib.h>

#include "dumpref.h"

bool dr_client_owns_device(const PJRT_Client* client, const PJRT_Device* device) {
  return client != NULL && device == &client->device;
}

bool dr_client_owns_memory(const PJRT_Client* client, const PJRT_Memory* memory) {
  return client != NULL && memory == &client->memory;
}

PJRT_Error* dr_Client_Create(PJRT_Client_Create_Args* args) {
  /* `client` is the last field this function touches; the kv_try_get fields that follow it
   * are optional and unused. */
  DR_ENTER(PJRT_Client_Create, args, client);
  PJRT_Client* c = calloc(1, sizeof(PJRT_Client));
  if (c == NULL) return dr_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "PJRT_Client_Create: out of memory");
  c->device.description.id = 0;
  c->device.description.process_index = 0;
  c->device.local_hardware_id = 0;
  c->device.client = c;
  c->device.memories[0] = &c->memory;
  c->memory.id = 0;
  c->memory.client = c;
  c->memory.devices[0] = &c->device;
  c->devices[0] = &c->device;
  c->memories[0] = &c->memory;
  atomic_init(&c->bytes_in_use, 0);
  atomic_init(&c->peak_bytes_in_use, 0);
  atomic_init(&c->num_allocs, 0);
  atomic_init(&c->live_buffers, 0);
  args->client = c;
  return NULL;
}

PJRT_Error* dr_Client_Destroy(PJRT_Client_Destroy_Args* args) {
  DR_ENTER(PJRT_Client_Destroy, args, client);
  if (dr_executables_client_destroyed != NULL) dr_executables_client_destroyed(args->client);
  free(args->client);
  return NULL;
}

PJRT_Error* dr_Client_PlatformName(PJRT_Client_PlatformName_Args* args) {
  DR_ENTER(PJRT_Client_PlatformName, args, platform_name_size);
  DR_REQUIRE(PJRT_Client_PlatformName, args->client);
  args->platform_name = DR_PLATFORM_NAME;
  args->platform_name_size = sizeof DR_PLATFORM_NAME - 1;
  return NULL;
}

PJRT_Error* dr_Client_ProcessIndex(PJRT_Client_ProcessIndex_Args* args) {
  DR_ENTER(PJRT_Client_ProcessIndex, args, process_index);
  DR_REQUIRE(PJRT_Client_ProcessIndex, args->client);
  args->process_index = 0;
  return NULL;
}

PJRT_Error* dr_Client_PlatformVersion(PJRT_Client_PlatformVersion_Args* args) {
  DR_ENTER(PJRT_Client_PlatformVersion, args, platform_version_size);
  DR_REQUIRE(PJRT_Client_PlatformVersion, args->client);
  args->platform_version = DR_PLATFORM_VERSION;
  args->platform_version_size = sizeof DR_PLATFORM_VERSION - 1;
  return NULL;
}

PJRT_Error* dr_Client_Devices(PJRT_Client_Devices_Args* args) {
  DR_ENTER(PJRT_Client_Devices, args, num_devices);
  DR_REQUIRE(PJRT_Client_Devices, args->client);
  args->devices = args->client->devices;
  args->num_devices = 1;
  return NULL;
}

PJRT_Error* dr_Client_AddressableDevices(PJRT_Client_AddressableDevices_Args* args) {
  DR_ENTER(PJRT_Client_AddressableDevices, args, num_addressable_devices);
  DR_REQUIRE(PJRT_Client_AddressableDevices, args->client);
  args->addressable_devices = args->client->devices;
  args->num_addressable_devices = 1;
  return NULL;
}

PJRT_Error* dr_Client_LookupDevice(PJRT_Client_LookupDevice_Args* args) {
  DR_ENTER(PJRT_Client_LookupDevice, args, device);
  DR_REQUIRE(PJRT_Client_LookupDevice, args->client);
  if (args->id != args->client->device.description.id)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_LookupDevice: no device with id %d (the dumpref client has one "
                    "device, id 0)", args->id);
  args->device = &args->client->device;
  return NULL;
}

PJRT_Error* dr_Client_LookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args* args) {
  DR_ENTER(PJRT_Client_LookupAddressableDevice, args, addressable_device);
  DR_REQUIRE(PJRT_Client_LookupAddressableDevice, args->client);
  if (args->local_hardware_id != args->client->device.local_hardware_id)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_LookupAddressableDevice: no device with local hardware id %d "
                    "(the dumpref client has one, id 0)", args->local_hardware_id);
  args->addressable_device = &args->client->device;
  return NULL;
}

PJRT_Error* dr_Client_AddressableMemories(PJRT_Client_AddressableMemories_Args* args) {
  DR_ENTER(PJRT_Client_AddressableMemories, args, num_addressable_memories);
  DR_REQUIRE(PJRT_Client_AddressableMemories, args->client);
  args->addressable_memories = args->client->memories;
  args->num_addressable_memories = 1;
  return NULL;
}

/* One device: every replica and partition runs on device 0, and only a 1x1 assignment fits. */
PJRT_Error* dr_Client_DefaultDeviceAssignment(PJRT_Client_DefaultDeviceAssignment_Args* args) {
  DR_ENTER(PJRT_Client_DefaultDeviceAssignment, args, default_assignment);
  DR_REQUIRE(PJRT_Client_DefaultDeviceAssignment, args->client);
  if (args->num_replicas != 1 || args->num_partitions != 1)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_DefaultDeviceAssignment: %d replicas x %d partitions asked, "
                    "but the dumpref client has a single device", args->num_replicas,
                    args->num_partitions);
  if (args->default_assignment_size < 1)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_DefaultDeviceAssignment: default_assignment_size is 0");
  DR_REQUIRE(PJRT_Client_DefaultDeviceAssignment, args->default_assignment);
  args->default_assignment[0] = args->client->device.description.id;
  return NULL;
}
