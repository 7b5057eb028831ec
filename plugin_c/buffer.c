/* buffer.c -- PJRT_Buffer: arrays held by the device, and the two copies that move them
 * (host -> device in PJRT_Client_BufferFromHostBuffer, device -> host in ToHostBuffer).
 *
 * A buffer is always dense and row-major on the device.  The host side may be anything numpy
 * makes: jaxlib hands over raw numpy byte strides (transposed, sliced, negative), so both copies
 * go through one strided n-d copy.  Element types are only a size here: the device never looks
 * inside an element, so bf16, float8 and complex cost nothing extra.  int4 and uint4 arrive
 * from jaxlib as numpy holds them, one byte per element (the value in the low nibble, byte
 * strides in bytes), and are kept so; the other sub-byte types (int2, float4) are refused with
 * a message, never mis-copied.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dumpref.h"
#include "prog_internal.h"  /* rt_alloc, rt_free: device memory comes from the interpreter's pool */

#define DR_MAX_RANK 64

size_t dr_element_size(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED:
    case PJRT_Buffer_Type_S8:
    case PJRT_Buffer_Type_U8:
    case PJRT_Buffer_Type_F8E5M2:
    case PJRT_Buffer_Type_F8E4M3FN:
    case PJRT_Buffer_Type_F8E4M3B11FNUZ:
    case PJRT_Buffer_Type_F8E5M2FNUZ:
    case PJRT_Buffer_Type_F8E4M3FNUZ:
    case PJRT_Buffer_Type_F8E4M3:
    case PJRT_Buffer_Type_F8E3M4:
    case PJRT_Buffer_Type_F8E8M0FNU:
    case PJRT_Buffer_Type_S4:
    case PJRT_Buffer_Type_U4:
      return 1;
    case PJRT_Buffer_Type_S16:
    case PJRT_Buffer_Type_U16:
    case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
      return 2;
    case PJRT_Buffer_Type_S32:
    case PJRT_Buffer_Type_U32:
    case PJRT_Buffer_Type_F32:
      return 4;
    case PJRT_Buffer_Type_S64:
    case PJRT_Buffer_Type_U64:
    case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
      return 8;
    case PJRT_Buffer_Type_C128:
      return 16;
    default: /* INVALID, TOKEN, S2, U2, F4E2M1FN */
      return 0;
  }
}

const char* dr_type_name(PJRT_Buffer_Type type) {
  static const char* const names[] = {
      "INVALID", "PRED", "S8", "S16", "S32", "S64", "U8", "U16", "U32", "U64", "F16", "F32",
      "F64", "BF16", "C64", "C128", "F8E5M2", "F8E4M3FN", "F8E4M3B11FNUZ", "F8E5M2FNUZ",
      "F8E4M3FNUZ", "S4", "U4", "TOKEN", "S2", "U2", "F8E4M3", "F8E3M4", "F8E8M0FNU",
      "F4E2M1FN"};
  if ((unsigned)type < sizeof names / sizeof names[0]) return names[type];
  return "UNKNOWN";
}

/* ---- the device's memory: accounting ------------------------------------------------- */

static void account_alloc(PJRT_Client* c, size_t bytes) {
  long long now = atomic_fetch_add(&c->bytes_in_use, (long long)bytes) + (long long)bytes;
  atomic_fetch_add(&c->num_allocs, 1);
  atomic_fetch_add(&c->live_buffers, 1);
  long long peak = atomic_load(&c->peak_bytes_in_use);
  while (now > peak && !atomic_compare_exchange_weak(&c->peak_bytes_in_use, &peak, now)) {
  }
}

/* Frees the data exactly once, whichever of Delete / Destroy / the last external reference
 * gets here first. */
static void release_data(PJRT_Buffer* b) {
  if (atomic_exchange(&b->data_freed, true)) return;
  rt_free(b->data);
  b->data = NULL;
  atomic_fetch_sub(&b->client->bytes_in_use, (long long)b->byte_size);
}

PJRT_Buffer* dr_buffer_new(PJRT_Client* client, PJRT_Buffer_Type type, const int64_t* dims,
                           size_t num_dims, PJRT_Error** error) {
  size_t element = dr_element_size(type);
  if (type == PJRT_Buffer_Type_TOKEN && num_dims == 0) {
    element = 0;  /* a token: no dims, no bytes (what executables give for !stablehlo.token) */
  } else if (element == 0) {
    *error = dr_error(PJRT_Error_Code_UNIMPLEMENTED,
                      "the dumpref device does not hold element type %s (%d)", dr_type_name(type),
                      (int)type);
    return NULL;
  }
  if (num_dims > DR_MAX_RANK) {
    *error = dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "rank %zu exceeds the dumpref limit %d",
                      num_dims, DR_MAX_RANK);
    return NULL;
  }
  if (num_dims > 0 && dims == NULL) {
    *error = dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "dims is NULL for a rank-%zu array",
                      num_dims);
    return NULL;
  }
  size_t bytes = element;
  for (size_t i = 0; i < num_dims; i++) {
    if (dims[i] < 0) {
      *error = dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "dimension %zu is negative (%lld)", i,
                        (long long)dims[i]);
      return NULL;
    }
    if (dims[i] != 0 && bytes > SIZE_MAX / (size_t)dims[i]) {
      *error = dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "array size overflows size_t");
      return NULL;
    }
    bytes *= (size_t)dims[i];
  }
  PJRT_Buffer* b = calloc(1, sizeof(PJRT_Buffer));
  int64_t* shape = num_dims ? malloc(2 * num_dims * sizeof(int64_t)) : NULL;
  /* From the pool (prog_pool.c), not malloc: a training step's outputs are megabytes made
   * afresh every step, which glibc maps and unmaps each time, so every step paid a page fault
   * per 4 KiB of them (measured, GPT-2 step at d_model 128: 23.2-23.7 ms a step with malloc's
   * defaults, 21.4 with its mmap and trim thresholds raised out of reach, one core). */
  void* data = bytes ? rt_alloc(bytes) : NULL;
  if (b == NULL || (num_dims && shape == NULL) || (bytes && data == NULL)) {
    free(b);
    free(shape);
    rt_free(data);
    *error = dr_error(PJRT_Error_Code_RESOURCE_EXHAUSTED,
                      "the dumpref device could not allocate %zu bytes", bytes);
    return NULL;
  }
  b->client = client;
  b->device = &client->device;
  b->memory = &client->memory;
  b->type = type;
  b->num_dims = num_dims;
  b->dims = shape;
  b->minor_to_major = shape ? shape + num_dims : NULL;
  for (size_t i = 0; i < num_dims; i++) {
    shape[i] = dims[i];
    shape[num_dims + i] = (int64_t)(num_dims - 1 - i); /* row-major */
  }
  b->byte_size = bytes;
  b->data = data;
  atomic_init(&b->deleted, false);
  atomic_init(&b->data_freed, false);
  atomic_init(&b->external_references, 0);
  account_alloc(client, bytes);
  *error = NULL;
  return b;
}

static void destroy_buffer(PJRT_Buffer* b) {
  release_data(b);
  atomic_fetch_sub(&b->client->live_buffers, 1);
  free(b->dims);
  free(b);
}

/* ---- strided copies -------------------------------------------------------------------- */

static void dense_strides(const int64_t* dims, size_t n, size_t element, int64_t* strides) {
  /* Unsigned: a zero-element array may have a huge dimension beside its 0 ([0, 2^63-1]), whose
   * product overflows int64 (undefined); such an array is never copied (copy_strided returns
   * at its 0), so its strides only need to be computed without undefined behaviour. */
  uint64_t s = (uint64_t)element;
  for (size_t i = n; i-- > 0;) {
    strides[i] = (int64_t)s;
    s *= (uint64_t)dims[i];
  }
}

/* Copies an n-d array element by element (or run by run when the innermost dimension is
 * contiguous on both sides).  Strides are in bytes and may be negative. */
static void copy_strided(char* dst, const int64_t* dst_strides, const char* src,
                         const int64_t* src_strides, const int64_t* dims, size_t n,
                         size_t element) {
  for (size_t i = 0; i < n; i++)
    if (dims[i] == 0) return;
  if (n == 0) {
    memcpy(dst, src, element);
    return;
  }
  int64_t index[DR_MAX_RANK] = {0};
  size_t inner = n - 1;
  bool inner_run = dst_strides[inner] == (int64_t)element && src_strides[inner] == (int64_t)element;
  for (;;) {
    int64_t d = 0, s = 0;
    for (size_t i = 0; i < inner; i++) {
      d += index[i] * dst_strides[i];
      s += index[i] * src_strides[i];
    }
    if (inner_run) {
      memcpy(dst + d, src + s, (size_t)dims[inner] * element);
    } else {
      for (int64_t k = 0; k < dims[inner]; k++)
        memcpy(dst + d + k * dst_strides[inner], src + s + k * src_strides[inner], element);
    }
    /* advance the outer index like an odometer */
    size_t i = inner;
    for (;;) {
      if (i == 0) return;
      i--;
      if (++index[i] < dims[i]) break;
      index[i] = 0;
    }
  }
}

/* Byte strides of a host layout (NULL = dense row-major).  Tiled layouts are accepted without
 * tiles, i.e. as a permutation of the dimensions. */
static PJRT_Error* host_layout_strides(const char* fn, const PJRT_Buffer_MemoryLayout* layout,
                                       const int64_t* dims, size_t n, size_t element,
                                       int64_t* strides) {
  if (layout == NULL) {
    dense_strides(dims, n, element, strides);
    return NULL;
  }
  /* The layout's struct_size is not read: jaxlib 0.10.2 leaves it 0 (copying an array to
   * another backend's device) and jaxlib 0.12 leaves it unset (2 or 4, from run to run) while
   * filling the fields it means.  The fields themselves are checked instead: a known type, as
   * many strides or minor_to_major entries as the array has dimensions. */
  if (layout->type == PJRT_Buffer_MemoryLayout_Type_Strides) {
    if (layout->strides.num_byte_strides != n || (n && layout->strides.byte_strides == NULL))
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "%s: layout has %zu byte strides for a rank-%zu array", fn,
                      layout->strides.num_byte_strides, n);
    for (size_t i = 0; i < n; i++) strides[i] = layout->strides.byte_strides[i];
    return NULL;
  }
  if (layout->type != PJRT_Buffer_MemoryLayout_Type_Tiled)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: unknown layout type %d", fn,
                    (int)layout->type);
  if (layout->tiled.num_tiles != 0)
    return dr_error(PJRT_Error_Code_UNIMPLEMENTED, "%s: tiled layouts (%zu tiles) are not "
                    "supported by the dumpref device", fn, layout->tiled.num_tiles);
  if (layout->tiled.minor_to_major_size != n || (n && layout->tiled.minor_to_major == NULL))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "%s: minor_to_major has %zu entries for a rank-%zu array", fn,
                    layout->tiled.minor_to_major_size, n);
  bool seen[DR_MAX_RANK] = {false};
  uint64_t s = (uint64_t)element;   /* unsigned, as in dense_strides: [0, 2^63-1] may overflow */
  for (size_t k = 0; k < n; k++) {
    int64_t dim = layout->tiled.minor_to_major[k];
    if (dim < 0 || (size_t)dim >= n || seen[dim])
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "%s: minor_to_major is not a permutation of 0..%zu", fn, n - 1);
    seen[dim] = true;
    strides[dim] = (int64_t)s;
    s *= (uint64_t)dims[dim];
  }
  return NULL;
}

/* Bytes a host array with these strides spans (strides must be >= 0 on the host side). */
static PJRT_Error* host_extent(const char* fn, const int64_t* dims, const int64_t* strides,
                              size_t n, size_t element, size_t* extent) {
  size_t last = 0;
  for (size_t i = 0; i < n; i++) {
    if (dims[i] == 0) {
      *extent = 0;
      return NULL;
    }
    if (strides[i] < 0)
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "%s: negative host stride %lld in dimension %zu", fn, (long long)strides[i], i);
    last += (size_t)(dims[i] - 1) * (size_t)strides[i];
  }
  *extent = last + element;
  return NULL;
}

/* A layout jax passed, as a trace note: its type and, tiled, minor_to_major and the tiles. */
static void note_layout(const char* key, const PJRT_Buffer_MemoryLayout* layout) {
  if (layout == NULL) return;
  if (layout->type == PJRT_Buffer_MemoryLayout_Type_Tiled)
    dr_trace_note(key, "{\"type\": \"tiled\", \"minor_to_major_size\": %zu, \"num_tiles\": %zu}",
                  layout->tiled.minor_to_major_size, layout->tiled.num_tiles);
  else
    dr_trace_note(key, "{\"type\": \"strides\", \"num_byte_strides\": %zu}",
                  layout->strides.num_byte_strides);
  char m2m[64];
  snprintf(m2m, sizeof m2m, "%s.minor_to_major", key);
  if (layout->type == PJRT_Buffer_MemoryLayout_Type_Tiled)
    dr_trace_note_i64s(m2m, layout->tiled.minor_to_major, layout->tiled.minor_to_major_size);
}

/* ---- host -> device -------------------------------------------------------------------- */

PJRT_Error* dr_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* args) {
  DR_ENTER(PJRT_Client_BufferFromHostBuffer, args, buffer);
  DR_REQUIRE(PJRT_Client_BufferFromHostBuffer, args->client);
  PJRT_Client* c = args->client;
  /* jaxlib names the destination by device, or by memory (newer jax), or both. */
  if (args->device == NULL && args->memory == NULL)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_BufferFromHostBuffer: neither device nor memory is given");
  if (args->device != NULL && !dr_client_owns_device(c, args->device))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_BufferFromHostBuffer: device does not belong to this client");
  if (args->memory != NULL && !dr_client_owns_memory(c, args->memory))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_BufferFromHostBuffer: memory does not belong to this client");
  if (args->device_layout != NULL) {
    /* Only the device's own layout (dense row-major) can be asked for. */
    int64_t want[DR_MAX_RANK], got[DR_MAX_RANK];
    if (args->num_dims > DR_MAX_RANK || (args->num_dims && args->dims == NULL))
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "PJRT_Client_BufferFromHostBuffer: bad dims");
    PJRT_Error* e = host_layout_strides("PJRT_Client_BufferFromHostBuffer", args->device_layout,
                                        args->dims, args->num_dims, 1, got);
    if (e != NULL) return e;
    dense_strides(args->dims, args->num_dims, 1, want);
    for (size_t i = 0; i < args->num_dims; i++)
      if (args->dims[i] > 1 && got[i] != want[i])
        return dr_error(PJRT_Error_Code_UNIMPLEMENTED,
                        "PJRT_Client_BufferFromHostBuffer: the dumpref device stores arrays "
                        "row-major only; another device_layout was asked for");
  }
  if (args->byte_strides != NULL && args->num_byte_strides != args->num_dims)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_BufferFromHostBuffer: %zu byte strides for a rank-%zu array",
                    args->num_byte_strides, args->num_dims);
  if (dr_tracing()) { /* what the pointers point at, for the map (hooks.c) */
    dr_trace_note_i64s("dims", args->dims, args->num_dims);
    if (args->byte_strides != NULL)
      dr_trace_note_i64s("byte_strides", args->byte_strides, args->num_byte_strides);
    note_layout("device_layout", args->device_layout);
  }
  PJRT_Error* error = NULL;
  PJRT_Buffer* b = dr_buffer_new(c, args->type, args->dims, args->num_dims, &error);
  if (b == NULL) return error;
  if (b->byte_size > 0) {
    if (args->data == NULL) {
      size_t bytes = b->byte_size;
      destroy_buffer(b);
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "PJRT_Client_BufferFromHostBuffer: data is NULL for %zu bytes", bytes);
    }
    size_t element = dr_element_size(b->type);
    int64_t dst_strides[DR_MAX_RANK], src_strides[DR_MAX_RANK];
    dense_strides(b->dims, b->num_dims, element, dst_strides);
    if (args->byte_strides != NULL)
      memcpy(src_strides, args->byte_strides, b->num_dims * sizeof(int64_t));
    else
      memcpy(src_strides, dst_strides, b->num_dims * sizeof(int64_t));
    copy_strided(b->data, dst_strides, args->data, src_strides, b->dims, b->num_dims, element);
  }
  /* The copy is finished before we return, whatever the host_buffer_semantics asked for, so
   * the host buffer is free at once. */
  args->done_with_host_buffer = dr_event_ready();
  args->buffer = b;
  return NULL;
}

/* ---- device -> host -------------------------------------------------------------------- */

static PJRT_Error* require_live(const char* fn, PJRT_Buffer* b) {
  if (atomic_load(&b->deleted))
    return dr_error(PJRT_Error_Code_FAILED_PRECONDITION, "%s: the buffer has been deleted", fn);
  return NULL;
}

PJRT_Error* dr_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* args) {
  DR_ENTER(PJRT_Buffer_ToHostBuffer, args, event);
  DR_REQUIRE(PJRT_Buffer_ToHostBuffer, args->src);
  PJRT_Buffer* b = args->src;
  if (dr_tracing()) note_layout("host_layout", args->host_layout);
  PJRT_Error* e = require_live("PJRT_Buffer_ToHostBuffer", b);
  if (e != NULL) return e;
  size_t element = dr_element_size(b->type);
  int64_t dst_strides[DR_MAX_RANK], src_strides[DR_MAX_RANK];
  e = host_layout_strides("PJRT_Buffer_ToHostBuffer", args->host_layout, b->dims, b->num_dims,
                          element, dst_strides);
  if (e != NULL) return e;
  size_t needed = 0;
  e = host_extent("PJRT_Buffer_ToHostBuffer", b->dims, dst_strides, b->num_dims, element, &needed);
  if (e != NULL) return e;
  if (args->dst == NULL) { /* a size query: no copy, no event */
    args->dst_size = needed;
    args->event = NULL;
    return NULL;
  }
  if (args->dst_size < needed)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Buffer_ToHostBuffer: dst_size %zu is smaller than the %zu bytes needed",
                    args->dst_size, needed);
  if (b->byte_size > 0) {
    dense_strides(b->dims, b->num_dims, element, src_strides);
    copy_strided(args->dst, dst_strides, b->data, src_strides, b->dims, b->num_dims, element);
  }
  args->event = dr_event_ready();
  return NULL;
}

PJRT_Error* dr_Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args* args) {
  DR_ENTER(PJRT_Buffer_CopyRawToHost, args, event);
  DR_REQUIRE(PJRT_Buffer_CopyRawToHost, args->buffer);
  PJRT_Buffer* b = args->buffer;
  PJRT_Error* e = require_live("PJRT_Buffer_CopyRawToHost", b);
  if (e != NULL) return e;
  if (args->offset < 0 || args->transfer_size < 0 ||
      (uint64_t)args->offset + (uint64_t)args->transfer_size > b->byte_size)
    return dr_error(PJRT_Error_Code_OUT_OF_RANGE,
                    "PJRT_Buffer_CopyRawToHost: bytes [%lld, +%lld) outside a %zu-byte buffer",
                    (long long)args->offset, (long long)args->transfer_size, b->byte_size);
  if (args->transfer_size > 0) {
    DR_REQUIRE(PJRT_Buffer_CopyRawToHost, args->dst);
    memcpy(args->dst, (char*)b->data + args->offset, (size_t)args->transfer_size);
  }
  args->event = dr_event_ready();
  return NULL;
}

/* ---- device -> device: a copy on the one device ------------------------------------- */

/* A new buffer holding `src`'s elements (jax.device_put(x, may_alias=False) and friends). */
static PJRT_Error* copy_buffer(const char* fn, PJRT_Buffer* src, PJRT_Buffer** dst) {
  PJRT_Error* e = require_live(fn, src);
  if (e != NULL) return e;
  PJRT_Buffer* b = dr_buffer_new(src->client, src->type, src->dims, src->num_dims, &e);
  if (b == NULL) return e;
  if (b->byte_size > 0) memcpy(b->data, src->data, b->byte_size);
  *dst = b;
  return NULL;
}

PJRT_Error* dr_Buffer_CopyToDevice(PJRT_Buffer_CopyToDevice_Args* args) {
  DR_ENTER(PJRT_Buffer_CopyToDevice, args, dst_buffer);
  DR_REQUIRE(PJRT_Buffer_CopyToDevice, args->buffer);
  DR_REQUIRE(PJRT_Buffer_CopyToDevice, args->dst_device);
  if (!dr_client_owns_device(args->buffer->client, args->dst_device))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Buffer_CopyToDevice: dst_device is not a device of this buffer's client");
  return copy_buffer("PJRT_Buffer_CopyToDevice", args->buffer, &args->dst_buffer);
}

PJRT_Error* dr_Buffer_CopyToMemory(PJRT_Buffer_CopyToMemory_Args* args) {
  DR_ENTER(PJRT_Buffer_CopyToMemory, args, dst_buffer);
  DR_REQUIRE(PJRT_Buffer_CopyToMemory, args->buffer);
  DR_REQUIRE(PJRT_Buffer_CopyToMemory, args->dst_memory);
  if (!dr_client_owns_memory(args->buffer->client, args->dst_memory))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Buffer_CopyToMemory: dst_memory is not a memory of this buffer's client");
  return copy_buffer("PJRT_Buffer_CopyToMemory", args->buffer, &args->dst_buffer);
}

/* ---- life cycle ------------------------------------------------------------------------ */

PJRT_Error* dr_Buffer_Destroy(PJRT_Buffer_Destroy_Args* args) {
  DR_ENTER(PJRT_Buffer_Destroy, args, buffer);
  PJRT_Buffer* b = args->buffer;
  if (b != NULL) destroy_buffer(b);
  return NULL;
}

PJRT_Error* dr_Buffer_Delete(PJRT_Buffer_Delete_Args* args) {
  DR_ENTER(PJRT_Buffer_Delete, args, buffer);
  DR_REQUIRE(PJRT_Buffer_Delete, args->buffer);
  /* While someone outside holds a reference to the raw data, keep it; the last
   * DecreaseExternalReferenceCount frees it. */
  atomic_store(&args->buffer->deleted, true);
  if (atomic_load(&args->buffer->external_references) == 0) release_data(args->buffer);
  return NULL;
}

PJRT_Error* dr_Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args* args) {
  DR_ENTER(PJRT_Buffer_IsDeleted, args, is_deleted);
  DR_REQUIRE(PJRT_Buffer_IsDeleted, args->buffer);
  args->is_deleted = atomic_load(&args->buffer->deleted);
  return NULL;
}

PJRT_Error* dr_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* args) {
  DR_ENTER(PJRT_Buffer_ReadyEvent, args, event);
  DR_REQUIRE(PJRT_Buffer_ReadyEvent, args->buffer);
  /* Data is ready when the buffer exists; a deleted buffer's event carries the error. */
  args->event = atomic_load(&args->buffer->deleted)
                    ? dr_event_failed(PJRT_Error_Code_FAILED_PRECONDITION,
                                      "PJRT_Buffer_ReadyEvent: the buffer has been deleted")
                    : dr_event_ready();
  if (args->event == NULL)
    return dr_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "PJRT_Buffer_ReadyEvent: out of memory");
  return NULL;
}

/* ---- what the buffer is ---------------------------------------------------------------- */

PJRT_Error* dr_Buffer_ElementType(PJRT_Buffer_ElementType_Args* args) {
  DR_ENTER(PJRT_Buffer_ElementType, args, type);
  DR_REQUIRE(PJRT_Buffer_ElementType, args->buffer);
  args->type = args->buffer->type;
  return NULL;
}

PJRT_Error* dr_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args* args) {
  DR_ENTER(PJRT_Buffer_Dimensions, args, num_dims);
  DR_REQUIRE(PJRT_Buffer_Dimensions, args->buffer);
  args->dims = args->buffer->dims;
  args->num_dims = args->buffer->num_dims;
  return NULL;
}

/* No dynamic dimensions on this device: unpadded dims are the dims. */
PJRT_Error* dr_Buffer_UnpaddedDimensions(PJRT_Buffer_UnpaddedDimensions_Args* args) {
  DR_ENTER(PJRT_Buffer_UnpaddedDimensions, args, num_dims);
  DR_REQUIRE(PJRT_Buffer_UnpaddedDimensions, args->buffer);
  args->unpadded_dims = args->buffer->dims;
  args->num_dims = args->buffer->num_dims;
  return NULL;
}

PJRT_Error* dr_Buffer_DynamicDimensionIndices(PJRT_Buffer_DynamicDimensionIndices_Args* args) {
  DR_ENTER(PJRT_Buffer_DynamicDimensionIndices, args, num_dynamic_dims);
  DR_REQUIRE(PJRT_Buffer_DynamicDimensionIndices, args->buffer);
  args->dynamic_dim_indices = NULL;
  args->num_dynamic_dims = 0;
  return NULL;
}

PJRT_Error* dr_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args* args) {
  DR_ENTER(PJRT_Buffer_GetMemoryLayout, args, layout);
  DR_REQUIRE(PJRT_Buffer_GetMemoryLayout, args->buffer);
  memset(&args->layout, 0, sizeof args->layout);
  args->layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  args->layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  args->layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  args->layout.tiled.minor_to_major = args->buffer->minor_to_major;
  args->layout.tiled.minor_to_major_size = args->buffer->num_dims;
  args->layout.tiled.num_tiles = 0;
  return NULL;
}

PJRT_Error* dr_Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args* args) {
  DR_ENTER(PJRT_Buffer_OnDeviceSizeInBytes, args, on_device_size_in_bytes);
  DR_REQUIRE(PJRT_Buffer_OnDeviceSizeInBytes, args->buffer);
  args->on_device_size_in_bytes = args->buffer->byte_size;
  return NULL;
}

PJRT_Error* dr_Buffer_Device(PJRT_Buffer_Device_Args* args) {
  DR_ENTER(PJRT_Buffer_Device, args, device);
  DR_REQUIRE(PJRT_Buffer_Device, args->buffer);
  args->device = args->buffer->device;
  return NULL;
}

PJRT_Error* dr_Buffer_Memory(PJRT_Buffer_Memory_Args* args) {
  DR_ENTER(PJRT_Buffer_Memory, args, memory);
  DR_REQUIRE(PJRT_Buffer_Memory, args->buffer);
  args->memory = args->buffer->memory;
  return NULL;
}

/* False on purpose: the data does live in host memory, but answering true invites jaxlib to
 * alias it as a numpy array instead of copying it out through ToHostBuffer, and the point of
 * this device is to exercise the path a real accelerator takes. */
PJRT_Error* dr_Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args* args) {
  DR_ENTER(PJRT_Buffer_IsOnCpu, args, is_on_cpu);
  DR_REQUIRE(PJRT_Buffer_IsOnCpu, args->buffer);
  args->is_on_cpu = false;
  return NULL;
}

/* ---- raw access for interop (dlpack and friends) --------------------------------------- */

PJRT_Error* dr_Buffer_UnsafePointer(PJRT_Buffer_UnsafePointer_Args* args) {
  DR_ENTER(PJRT_Buffer_UnsafePointer, args, buffer_pointer);
  DR_REQUIRE(PJRT_Buffer_UnsafePointer, args->buffer);
  args->buffer_pointer = (uintptr_t)args->buffer->data;
  return NULL;
}

PJRT_Error* dr_Buffer_OpaqueDeviceMemoryDataPointer(
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args* args) {
  DR_ENTER(PJRT_Buffer_OpaqueDeviceMemoryDataPointer, args, device_memory_ptr);
  DR_REQUIRE(PJRT_Buffer_OpaqueDeviceMemoryDataPointer, args->buffer);
  args->device_memory_ptr = args->buffer->data;
  return NULL;
}

PJRT_Error* dr_Buffer_IncreaseExternalReferenceCount(
    PJRT_Buffer_IncreaseExternalReferenceCount_Args* args) {
  DR_ENTER(PJRT_Buffer_IncreaseExternalReferenceCount, args, buffer);
  DR_REQUIRE(PJRT_Buffer_IncreaseExternalReferenceCount, args->buffer);
  PJRT_Error* e = require_live("PJRT_Buffer_IncreaseExternalReferenceCount", args->buffer);
  if (e != NULL) return e;
  atomic_fetch_add(&args->buffer->external_references, 1);
  return NULL;
}

PJRT_Error* dr_Buffer_DecreaseExternalReferenceCount(
    PJRT_Buffer_DecreaseExternalReferenceCount_Args* args) {
  DR_ENTER(PJRT_Buffer_DecreaseExternalReferenceCount, args, buffer);
  DR_REQUIRE(PJRT_Buffer_DecreaseExternalReferenceCount, args->buffer);
  int before = atomic_load(&args->buffer->external_references);
  do {
    if (before == 0)
      return dr_error(PJRT_Error_Code_FAILED_PRECONDITION,
                      "PJRT_Buffer_DecreaseExternalReferenceCount: the count is already 0");
  } while (!atomic_compare_exchange_weak(&args->buffer->external_references, &before, before - 1));
  if (before == 1 && atomic_load(&args->buffer->deleted)) release_data(args->buffer);
  return NULL;
}
