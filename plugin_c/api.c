/* api.c -- the PJRT_Api table: one row per entry point, grouped by what needs it.
 *
 * Every row reads `traced_PJRT_Name`: the wrapper made by DR_IMPLEMENTED (the entry point is
 * `dr_Name`, in the file of its object family) or by DR_STUB (answers UNIMPLEMENTED with a
 * message naming the entry point).  No slot is ever NULL: jaxlib calls the slots of the set it
 * uses without checking, and a NULL one it calls crashes the process (measured by the map).
 *
 * To implement an entry point: define `dr_Name` in the file of its family and turn its
 * DR_STUB(PJRT_Name) line into DR_IMPLEMENTED(Name).
 *
 * Which rows a level really needs is not written here by hand: pytest_dumpref/pjrt/pjrt_map.py
 * measures it (call trace, then knock-out of each implemented entry point).
 */
#include "dumpref.h"

/* ---- implemented entry points ------------------------------------------------------------
 * DR_IMPLEMENTED(Name) declares dr_Name through the header's function type (so its signature
 * is checked) and defines traced_PJRT_Name, the wrapper the table points at: it writes the
 * call's trace record and answers UNIMPLEMENTED when the entry point is knocked out (hooks.c).
 * The error channel is traced but never knocked out: it is how jaxlib reads every failure. */
#define DR_IMPLEMENTED(name) PJRT_##name dr_##name; DR_TRACED(PJRT_##name, dr_##name)
#define DR_IMPLEMENTED_VOID(name) PJRT_##name dr_##name; DR_TRACED_VOID(PJRT_##name, dr_##name)
#define DR_IMPLEMENTED_CHANNEL(name) PJRT_##name dr_##name; DR_TRACED_CHANNEL(PJRT_##name, dr_##name)


DR_IMPLEMENTED(Buffer_CopyRawToHost)
DR_IMPLEMENTED(Buffer_CopyToDevice)
DR_IMPLEMENTED(Buffer_CopyToMemory)
DR_IMPLEMENTED(Buffer_DecreaseExternalReferenceCount)
DR_IMPLEMENTED(Buffer_Delete)
DR_IMPLEMENTED(Buffer_Destroy)
DR_IMPLEMENTED(Buffer_Device)
DR_IMPLEMENTED(Buffer_Dimensions)
DR_IMPLEMENTED(Buffer_DynamicDimensionIndices)
DR_IMPLEMENTED(Buffer_ElementType)
DR_IMPLEMENTED(Buffer_GetMemoryLayout)
DR_IMPLEMENTED(Buffer_IncreaseExternalReferenceCount)
DR_IMPLEMENTED(Buffer_IsDeleted)
DR_IMPLEMENTED(Buffer_IsOnCpu)
DR_IMPLEMENTED(Buffer_Memory)
DR_IMPLEMENTED(Buffer_OnDeviceSizeInBytes)
DR_IMPLEMENTED(Buffer_OpaqueDeviceMemoryDataPointer)
DR_IMPLEMENTED(Buffer_ReadyEvent)
DR_IMPLEMENTED(Buffer_ToHostBuffer)
DR_IMPLEMENTED(Buffer_UnpaddedDimensions)
DR_IMPLEMENTED(Buffer_UnsafePointer)
DR_IMPLEMENTED(Client_AddressableDevices)
DR_IMPLEMENTED(Client_AddressableMemories)
DR_IMPLEMENTED(Client_BufferFromHostBuffer)
DR_IMPLEMENTED(Client_Create)
DR_IMPLEMENTED(Client_DefaultDeviceAssignment)
DR_IMPLEMENTED(Client_Destroy)
DR_IMPLEMENTED(Client_Devices)
DR_IMPLEMENTED(Client_LookupAddressableDevice)
DR_IMPLEMENTED(Client_LookupDevice)
DR_IMPLEMENTED(Client_PlatformName)
DR_IMPLEMENTED(Client_PlatformVersion)
DR_IMPLEMENTED(Client_ProcessIndex)
DR_IMPLEMENTED(DeviceDescription_Attributes)
DR_IMPLEMENTED(DeviceDescription_DebugString)
DR_IMPLEMENTED(DeviceDescription_Id)
DR_IMPLEMENTED(DeviceDescription_Kind)
DR_IMPLEMENTED(DeviceDescription_ProcessIndex)
DR_IMPLEMENTED(DeviceDescription_ToString)
DR_IMPLEMENTED(Device_AddressableMemories)
DR_IMPLEMENTED(Device_DefaultMemory)
DR_IMPLEMENTED(Device_GetDescription)
DR_IMPLEMENTED(Device_IsAddressable)
DR_IMPLEMENTED(Device_LocalHardwareId)
DR_IMPLEMENTED(Device_MemoryStats)
DR_IMPLEMENTED_VOID(Error_Destroy)
DR_IMPLEMENTED_CHANNEL(Error_GetCode)
DR_IMPLEMENTED_VOID(Error_Message)
DR_IMPLEMENTED(Event_Await)
DR_IMPLEMENTED(Event_Destroy)
DR_IMPLEMENTED(Event_Error)
DR_IMPLEMENTED(Event_IsReady)
DR_IMPLEMENTED(Event_OnReady)
DR_IMPLEMENTED(Memory_AddressableByDevices)
DR_IMPLEMENTED(Memory_DebugString)
DR_IMPLEMENTED(Memory_Id)
DR_IMPLEMENTED(Memory_Kind)
DR_IMPLEMENTED(Memory_Kind_Id)
DR_IMPLEMENTED(Memory_ToString)
DR_IMPLEMENTED(Plugin_Attributes)
DR_IMPLEMENTED(Plugin_Initialize)

/* executable.c (level 3: compile and run programs) */
DR_IMPLEMENTED(Client_Compile)
DR_IMPLEMENTED(Executable_Destroy)
DR_IMPLEMENTED(Executable_Name)
DR_IMPLEMENTED(Executable_NumReplicas)
DR_IMPLEMENTED(Executable_NumPartitions)
DR_IMPLEMENTED(Executable_NumOutputs)
DR_IMPLEMENTED(Executable_SizeOfGeneratedCodeInBytes)
DR_IMPLEMENTED(Executable_OutputElementTypes)
DR_IMPLEMENTED(Executable_OutputDimensions)
DR_IMPLEMENTED(Executable_OutputMemoryKinds)
DR_IMPLEMENTED(Executable_Fingerprint)
DR_IMPLEMENTED(LoadedExecutable_Destroy)
DR_IMPLEMENTED(LoadedExecutable_GetExecutable)
DR_IMPLEMENTED(LoadedExecutable_AddressableDevices)
DR_IMPLEMENTED(LoadedExecutable_Delete)
DR_IMPLEMENTED(LoadedExecutable_IsDeleted)
DR_IMPLEMENTED(LoadedExecutable_Execute)
DR_IMPLEMENTED(LoadedExecutable_Fingerprint)
DR_IMPLEMENTED(LoadedExecutable_GetDeviceAssignment)

/* ---- entry points this device does not (yet) support -------------------------------- */

DR_STUB(PJRT_Executable_GetCostAnalysis)
DR_STUB(PJRT_Executable_OptimizedProgram)
DR_STUB(PJRT_Executable_Serialize)
DR_STUB(PJRT_Executable_DeserializeAndLoad)
DR_STUB(PJRT_CopyToDeviceStream_Destroy)
DR_STUB(PJRT_CopyToDeviceStream_AddChunk)
DR_STUB(PJRT_CopyToDeviceStream_TotalBytes)
DR_STUB(PJRT_CopyToDeviceStream_GranuleSize)
DR_STUB(PJRT_CopyToDeviceStream_CurrentBytes)
DR_STUB(PJRT_TopologyDescription_Create)
DR_STUB(PJRT_TopologyDescription_Destroy)
DR_STUB(PJRT_TopologyDescription_PlatformName)
DR_STUB(PJRT_TopologyDescription_PlatformVersion)
DR_STUB(PJRT_TopologyDescription_GetDeviceDescriptions)
DR_STUB(PJRT_TopologyDescription_Serialize)
DR_STUB(PJRT_TopologyDescription_Attributes)
DR_STUB(PJRT_Compile)
DR_STUB(PJRT_Client_CreateViewOfDeviceBuffer)
DR_STUB(PJRT_Client_TopologyDescription)
DR_STUB(PJRT_Executable_GetCompiledMemoryStats)
DR_STUB(PJRT_ExecuteContext_Create)
DR_STUB(PJRT_ExecuteContext_Destroy)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_Destroy)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_TransferData)
DR_STUB(PJRT_Client_CreateBuffersForAsyncHostToDevice)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_Device)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_BufferCount)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_BufferSize)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_SetBufferError)
DR_STUB(PJRT_AsyncHostToDeviceTransferManager_AddMetadata)
DR_STUB(PJRT_Client_DmaMap)
DR_STUB(PJRT_Client_DmaUnmap)
DR_STUB(PJRT_Client_CreateUninitializedBuffer)
DR_STUB(PJRT_Client_UpdateGlobalProcessInfo)
DR_STUB(PJRT_TopologyDescription_Deserialize)
DR_STUB(PJRT_Client_CreateAliasBuffer)
DR_STUB(PJRT_Client_FulfillAliasBuffer)

static const PJRT_Api api = {
    .struct_size = PJRT_Api_STRUCT_SIZE,
    .extension_start = NULL,
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE,
                         .extension_start = NULL,
                         .major_version = PJRT_API_MAJOR,
                         .minor_version = PJRT_API_MINOR},

  /* Errors: how jaxlib reads any failure, at every level. Void or the error channel itself, so
   * traced but never knocked out. */
  .PJRT_Error_Destroy = traced_PJRT_Error_Destroy,
  .PJRT_Error_Message = traced_PJRT_Error_Message,
  .PJRT_Error_GetCode = traced_PJRT_Error_GetCode,

  /* The plugin: jaxlib initialises it once after dlopen and reads its attributes. */
  .PJRT_Plugin_Initialize = traced_PJRT_Plugin_Initialize,
  .PJRT_Plugin_Attributes = traced_PJRT_Plugin_Attributes,

  /* Level 1 -- jax.devices("dumpref") lists the device: the client, its devices, their
   * descriptions, and the memories (all or nothing: client, device and memory views must agree). */
  .PJRT_Client_Create = traced_PJRT_Client_Create,
  .PJRT_Client_Destroy = traced_PJRT_Client_Destroy,
  .PJRT_Client_PlatformName = traced_PJRT_Client_PlatformName,
  .PJRT_Client_ProcessIndex = traced_PJRT_Client_ProcessIndex,
  .PJRT_Client_PlatformVersion = traced_PJRT_Client_PlatformVersion,
  .PJRT_Client_Devices = traced_PJRT_Client_Devices,
  .PJRT_Client_AddressableDevices = traced_PJRT_Client_AddressableDevices,
  .PJRT_Client_LookupDevice = traced_PJRT_Client_LookupDevice,
  .PJRT_Client_LookupAddressableDevice = traced_PJRT_Client_LookupAddressableDevice,
  .PJRT_Client_AddressableMemories = traced_PJRT_Client_AddressableMemories,
  .PJRT_DeviceDescription_Id = traced_PJRT_DeviceDescription_Id,
  .PJRT_DeviceDescription_ProcessIndex = traced_PJRT_DeviceDescription_ProcessIndex,
  .PJRT_DeviceDescription_Attributes = traced_PJRT_DeviceDescription_Attributes,
  .PJRT_DeviceDescription_Kind = traced_PJRT_DeviceDescription_Kind,
  .PJRT_DeviceDescription_DebugString = traced_PJRT_DeviceDescription_DebugString,
  .PJRT_DeviceDescription_ToString = traced_PJRT_DeviceDescription_ToString,
  .PJRT_Device_GetDescription = traced_PJRT_Device_GetDescription,
  .PJRT_Device_IsAddressable = traced_PJRT_Device_IsAddressable,
  .PJRT_Device_LocalHardwareId = traced_PJRT_Device_LocalHardwareId,
  .PJRT_Device_AddressableMemories = traced_PJRT_Device_AddressableMemories,
  .PJRT_Device_DefaultMemory = traced_PJRT_Device_DefaultMemory,
  .PJRT_Device_MemoryStats = traced_PJRT_Device_MemoryStats,
  .PJRT_Memory_Id = traced_PJRT_Memory_Id,
  .PJRT_Memory_Kind = traced_PJRT_Memory_Kind,
  .PJRT_Memory_Kind_Id = traced_PJRT_Memory_Kind_Id,
  .PJRT_Memory_DebugString = traced_PJRT_Memory_DebugString,
  .PJRT_Memory_ToString = traced_PJRT_Memory_ToString,
  .PJRT_Memory_AddressableByDevices = traced_PJRT_Memory_AddressableByDevices,

  /* Level 2 -- device_put / np.asarray round trips and deletion: buffers, the two copies, and
   * the events jaxlib waits on (born ready: the device is synchronous). */
  .PJRT_Client_BufferFromHostBuffer = traced_PJRT_Client_BufferFromHostBuffer,
  .PJRT_Buffer_Destroy = traced_PJRT_Buffer_Destroy,
  .PJRT_Buffer_ElementType = traced_PJRT_Buffer_ElementType,
  .PJRT_Buffer_Dimensions = traced_PJRT_Buffer_Dimensions,
  .PJRT_Buffer_UnpaddedDimensions = traced_PJRT_Buffer_UnpaddedDimensions,
  .PJRT_Buffer_DynamicDimensionIndices = traced_PJRT_Buffer_DynamicDimensionIndices,
  .PJRT_Buffer_GetMemoryLayout = traced_PJRT_Buffer_GetMemoryLayout,
  .PJRT_Buffer_OnDeviceSizeInBytes = traced_PJRT_Buffer_OnDeviceSizeInBytes,
  .PJRT_Buffer_Device = traced_PJRT_Buffer_Device,
  .PJRT_Buffer_Memory = traced_PJRT_Buffer_Memory,
  .PJRT_Buffer_Delete = traced_PJRT_Buffer_Delete,
  .PJRT_Buffer_IsDeleted = traced_PJRT_Buffer_IsDeleted,
  .PJRT_Buffer_ToHostBuffer = traced_PJRT_Buffer_ToHostBuffer,
  .PJRT_Buffer_CopyRawToHost = traced_PJRT_Buffer_CopyRawToHost,
  .PJRT_Buffer_IsOnCpu = traced_PJRT_Buffer_IsOnCpu,
  .PJRT_Buffer_ReadyEvent = traced_PJRT_Buffer_ReadyEvent,
  .PJRT_Buffer_UnsafePointer = traced_PJRT_Buffer_UnsafePointer,
  .PJRT_Buffer_IncreaseExternalReferenceCount = traced_PJRT_Buffer_IncreaseExternalReferenceCount,
  .PJRT_Buffer_DecreaseExternalReferenceCount = traced_PJRT_Buffer_DecreaseExternalReferenceCount,
  .PJRT_Buffer_OpaqueDeviceMemoryDataPointer = traced_PJRT_Buffer_OpaqueDeviceMemoryDataPointer,
  .PJRT_Event_Destroy = traced_PJRT_Event_Destroy,
  .PJRT_Event_IsReady = traced_PJRT_Event_IsReady,
  .PJRT_Event_Error = traced_PJRT_Event_Error,
  .PJRT_Event_Await = traced_PJRT_Event_Await,
  .PJRT_Event_OnReady = traced_PJRT_Event_OnReady,

  /* Level 3 -- jit: compile a StableHLO program and execute it (programs: prog_*.c,
   * executables: executable.c).  The default device assignment is asked for at compile time. */
  .PJRT_Client_DefaultDeviceAssignment = traced_PJRT_Client_DefaultDeviceAssignment,
  .PJRT_Client_Compile = traced_PJRT_Client_Compile,
  .PJRT_Executable_Destroy = traced_PJRT_Executable_Destroy,
  .PJRT_Executable_Name = traced_PJRT_Executable_Name,
  .PJRT_Executable_NumReplicas = traced_PJRT_Executable_NumReplicas,
  .PJRT_Executable_NumPartitions = traced_PJRT_Executable_NumPartitions,
  .PJRT_Executable_NumOutputs = traced_PJRT_Executable_NumOutputs,
  .PJRT_Executable_SizeOfGeneratedCodeInBytes = traced_PJRT_Executable_SizeOfGeneratedCodeInBytes,
  .PJRT_Executable_GetCostAnalysis = traced_PJRT_Executable_GetCostAnalysis,
  .PJRT_Executable_OutputMemoryKinds = traced_PJRT_Executable_OutputMemoryKinds,
  .PJRT_Executable_OptimizedProgram = traced_PJRT_Executable_OptimizedProgram,
  .PJRT_Executable_Serialize = traced_PJRT_Executable_Serialize,
  .PJRT_Executable_OutputElementTypes = traced_PJRT_Executable_OutputElementTypes,
  .PJRT_Executable_OutputDimensions = traced_PJRT_Executable_OutputDimensions,
  .PJRT_Executable_Fingerprint = traced_PJRT_Executable_Fingerprint,
  .PJRT_Executable_GetCompiledMemoryStats = traced_PJRT_Executable_GetCompiledMemoryStats,
  .PJRT_LoadedExecutable_Destroy = traced_PJRT_LoadedExecutable_Destroy,
  .PJRT_LoadedExecutable_GetExecutable = traced_PJRT_LoadedExecutable_GetExecutable,
  .PJRT_LoadedExecutable_AddressableDevices = traced_PJRT_LoadedExecutable_AddressableDevices,
  .PJRT_LoadedExecutable_Delete = traced_PJRT_LoadedExecutable_Delete,
  .PJRT_LoadedExecutable_IsDeleted = traced_PJRT_LoadedExecutable_IsDeleted,
  .PJRT_LoadedExecutable_Execute = traced_PJRT_LoadedExecutable_Execute,
  .PJRT_LoadedExecutable_Fingerprint = traced_PJRT_LoadedExecutable_Fingerprint,
  .PJRT_LoadedExecutable_GetDeviceAssignment = traced_PJRT_LoadedExecutable_GetDeviceAssignment,
  .PJRT_Executable_DeserializeAndLoad = traced_PJRT_Executable_DeserializeAndLoad,
  .PJRT_ExecuteContext_Create = traced_PJRT_ExecuteContext_Create,
  .PJRT_ExecuteContext_Destroy = traced_PJRT_ExecuteContext_Destroy,

  /* Not supported by this device: multi-device copies, streams, topologies, async transfer
   * managers, DMA, alias buffers, multi-process state.  Each answers UNIMPLEMENTED naming itself. */
  .PJRT_Buffer_CopyToDevice = traced_PJRT_Buffer_CopyToDevice,
  .PJRT_CopyToDeviceStream_Destroy = traced_PJRT_CopyToDeviceStream_Destroy,
  .PJRT_CopyToDeviceStream_AddChunk = traced_PJRT_CopyToDeviceStream_AddChunk,
  .PJRT_CopyToDeviceStream_TotalBytes = traced_PJRT_CopyToDeviceStream_TotalBytes,
  .PJRT_CopyToDeviceStream_GranuleSize = traced_PJRT_CopyToDeviceStream_GranuleSize,
  .PJRT_CopyToDeviceStream_CurrentBytes = traced_PJRT_CopyToDeviceStream_CurrentBytes,
  .PJRT_TopologyDescription_Create = traced_PJRT_TopologyDescription_Create,
  .PJRT_TopologyDescription_Destroy = traced_PJRT_TopologyDescription_Destroy,
  .PJRT_TopologyDescription_PlatformName = traced_PJRT_TopologyDescription_PlatformName,
  .PJRT_TopologyDescription_PlatformVersion = traced_PJRT_TopologyDescription_PlatformVersion,
  .PJRT_TopologyDescription_GetDeviceDescriptions = traced_PJRT_TopologyDescription_GetDeviceDescriptions,
  .PJRT_TopologyDescription_Serialize = traced_PJRT_TopologyDescription_Serialize,
  .PJRT_TopologyDescription_Attributes = traced_PJRT_TopologyDescription_Attributes,
  .PJRT_Compile = traced_PJRT_Compile,
  .PJRT_Buffer_CopyToMemory = traced_PJRT_Buffer_CopyToMemory,
  .PJRT_Client_CreateViewOfDeviceBuffer = traced_PJRT_Client_CreateViewOfDeviceBuffer,
  .PJRT_Client_TopologyDescription = traced_PJRT_Client_TopologyDescription,
  .PJRT_AsyncHostToDeviceTransferManager_Destroy = traced_PJRT_AsyncHostToDeviceTransferManager_Destroy,
  .PJRT_AsyncHostToDeviceTransferManager_TransferData = traced_PJRT_AsyncHostToDeviceTransferManager_TransferData,
  .PJRT_Client_CreateBuffersForAsyncHostToDevice = traced_PJRT_Client_CreateBuffersForAsyncHostToDevice,
  .PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer = traced_PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer,
  .PJRT_AsyncHostToDeviceTransferManager_Device = traced_PJRT_AsyncHostToDeviceTransferManager_Device,
  .PJRT_AsyncHostToDeviceTransferManager_BufferCount = traced_PJRT_AsyncHostToDeviceTransferManager_BufferCount,
  .PJRT_AsyncHostToDeviceTransferManager_BufferSize = traced_PJRT_AsyncHostToDeviceTransferManager_BufferSize,
  .PJRT_AsyncHostToDeviceTransferManager_SetBufferError = traced_PJRT_AsyncHostToDeviceTransferManager_SetBufferError,
  .PJRT_AsyncHostToDeviceTransferManager_AddMetadata = traced_PJRT_AsyncHostToDeviceTransferManager_AddMetadata,
  .PJRT_Client_DmaMap = traced_PJRT_Client_DmaMap,
  .PJRT_Client_DmaUnmap = traced_PJRT_Client_DmaUnmap,
  .PJRT_Client_CreateUninitializedBuffer = traced_PJRT_Client_CreateUninitializedBuffer,
  .PJRT_Client_UpdateGlobalProcessInfo = traced_PJRT_Client_UpdateGlobalProcessInfo,
  .PJRT_TopologyDescription_Deserialize = traced_PJRT_TopologyDescription_Deserialize,
  .PJRT_Client_CreateAliasBuffer = traced_PJRT_Client_CreateAliasBuffer,
  .PJRT_Client_FulfillAliasBuffer = traced_PJRT_Client_FulfillAliasBuffer,
};

/* The one symbol jaxlib looks up after dlopen. */
__attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi(void) { return &api; }
