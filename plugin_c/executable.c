/* executable.c -- compile and execute: PJRT_Client_Compile, PJRT_Executable_*,
 * PJRT_LoadedExecutable_*, and the plugin attribute that tells jax which StableHLO to send.
 *
 * Compile reads the program with prog_parse (prog.h): a StableHLO portable artifact or StableHLO
 * MLIR text in (both come as format "mlir"), a checked program out, or an error (UNIMPLEMENTED naming what is unsupported, INVALID_ARGUMENT
 * for malformed bytes).  Execute runs it synchronously with prog_run on the input buffers'
 * host memory and returns new buffers and ready events.
 *
 * Donation: an argument the program marks donated (`tf.aliasing_output` or `jax.buffer_donor`,
 * as jax writes them for donate_argnums) and the options do not exempt
 * (non_donatable_input_indices) is invalidated after a successful run, as PJRT_Buffer_Delete
 * would; outputs are always fresh buffers (a copy, never an alias).
 *
 * Ownership: a PJRT_Executable is a reference-counted view of one program.  The loaded
 * executable holds one reference; PJRT_LoadedExecutable_GetExecutable hands out another, which
 * the caller releases with PJRT_Executable_Destroy.
 *
 * Executing after the client is gone: client.c calls dr_executables_client_destroyed(), which
 * detaches every loaded executable of that client, so Execute answers FAILED_PRECONDITION
 * instead of touching freed memory.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dumpref.h"
#include "prog.h"

struct PJRT_Executable {
  atomic_int references;
  prog_program* program;
  char name[128];
  char fingerprint[17];       /* hex of prog_fingerprint */
  size_t num_outputs;
  PJRT_Buffer_Type* output_types;
  int64_t* output_dims;       /* all outputs' dims, concatenated */
  size_t* output_ranks;
  const char** output_memory_kinds;
  size_t* output_memory_kind_sizes;
};

struct PJRT_LoadedExecutable {
  PJRT_Executable* executable;
  PJRT_Client* client;        /* NULL once the client is destroyed */
  bool deleted;
  PJRT_LoadedExecutable* next;/* the registry of live loaded executables */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static PJRT_LoadedExecutable* registry;

void dr_executables_client_destroyed(PJRT_Client* client) {
  pthread_mutex_lock(&registry_lock);
  for (PJRT_LoadedExecutable* e = registry; e != NULL; e = e->next)
    if (e->client == client) e->client = NULL;
  pthread_mutex_unlock(&registry_lock);
}

/* ---- the StableHLO version jax should target -------------------------------------------- */

static const int64_t stablehlo_version[3] = {PROG_STABLEHLO_MAJOR, PROG_STABLEHLO_MINOR,
                                             PROG_STABLEHLO_PATCH};
static const PJRT_NamedValue program_attributes[] = {{
    .struct_size = PJRT_NamedValue_STRUCT_SIZE,
    .name = "stablehlo_current_version",
    .name_size = sizeof "stablehlo_current_version" - 1,
    .type = PJRT_NamedValue_kInt64List,
    .int64_array_value = stablehlo_version,
    .value_size = 3,
}};

const PJRT_NamedValue* dr_program_attributes(size_t* count) {
  *count = sizeof program_attributes / sizeof program_attributes[0];
  return program_attributes;
}

/* ---- element types ---------------------------------------------------------------------- */

static PJRT_Buffer_Type buffer_type(prog_dtype t) {
  switch (t) {
    case PROG_PRED: return PJRT_Buffer_Type_PRED;
    case PROG_S8: return PJRT_Buffer_Type_S8;
    case PROG_U8: return PJRT_Buffer_Type_U8;
    case PROG_S32: return PJRT_Buffer_Type_S32;
    case PROG_U32: return PJRT_Buffer_Type_U32;
    case PROG_S64: return PJRT_Buffer_Type_S64;
    case PROG_U64: return PJRT_Buffer_Type_U64;
    case PROG_F16: return PJRT_Buffer_Type_F16;
    case PROG_BF16: return PJRT_Buffer_Type_BF16;
    case PROG_F32: return PJRT_Buffer_Type_F32;
    case PROG_F64: return PJRT_Buffer_Type_F64;
    case PROG_S16: return PJRT_Buffer_Type_S16;
    case PROG_U16: return PJRT_Buffer_Type_U16;
    case PROG_F8E4M3FN: return PJRT_Buffer_Type_F8E4M3FN;
    case PROG_F8E5M2: return PJRT_Buffer_Type_F8E5M2;
    case PROG_C64: return PJRT_Buffer_Type_C64;
    case PROG_C128: return PJRT_Buffer_Type_C128;
    case PROG_S4: return PJRT_Buffer_Type_S4;
    case PROG_U4: return PJRT_Buffer_Type_U4;
    case PROG_TOKEN: return PJRT_Buffer_Type_TOKEN;
  }
  return PJRT_Buffer_Type_INVALID;
}

/* ---- compile options -------------------------------------------------------------------- */

/* Reads a protobuf varint; false when truncated. */
static bool pb_varint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* Finds varint field `want` of `msg`; false when absent or malformed. */
static bool pb_find(const uint8_t* p, const uint8_t* end, uint64_t want, uint64_t* value,
                    const uint8_t** sub, const uint8_t** sub_end) {
  while (p < end) {
    uint64_t key, v;
    if (!pb_varint(&p, end, &key)) return false;
    switch (key & 7) {
      case 0:
        if (!pb_varint(&p, end, &v)) return false;
        if ((key >> 3) == want && value != NULL) { *value = v; return true; }
        break;
      case 1: if (end - p < 8) return false; p += 8; break;
      case 5: if (end - p < 4) return false; p += 4; break;
      case 2:
        if (!pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
        if ((key >> 3) == want && sub != NULL) { *sub = p; *sub_end = p + v; return true; }
        p += v;
        break;
      default: return false;
    }
  }
  return false;
}

/* The XLA options jax passes as `compiler_options` arrive as env_option_overrides
 * (CompileOptionsProto field 7: map entries {1: name, 2: OptionOverrideProto {1: string,
 * 2: bool, 3: int64, 4: double}}).  XLA applies each to its DebugOptions and refuses a name
 * DebugOptions lacks ("No such compile option") or a value of the wrong type.  There is no
 * compiler here for them to steer, so they are accepted and ignored -- but refused as XLA
 * refuses them where this device can tell: a name outside DebugOptions' `xla_` naming, and a
 * wrong value for the few options whose type is listed below (a misspelt `xla_` name is
 * accepted: the device holds no list of every XLA flag). */
static const struct {
  const char* name;
  const char* type; /* as protobuf names it in XLA's message */
} known_options[] = {
    {"xla_embed_ir_in_executable", "bool"}, {"xla_dump_hlo_as_text", "bool"},
    {"xla_dump_hlo_as_proto", "bool"},      {"xla_dump_fusion_visualization", "bool"},
    {"xla_cpu_multi_thread_eigen", "bool"}, {"xla_dump_max_hlo_modules", "int32"},
    {"xla_dump_to", "string"},              {"xla_dump_hlo_pass_re", "string"},
    {"xla_dump_hlo_module_re", "string"},
};

static bool parse_int(const char* s, size_t n) {
  size_t k = 0, digits = 0;
  if (k < n && (s[k] == '-' || s[k] == '+')) k++;
  for (; k < n && s[k] >= '0' && s[k] <= '9'; k++) digits++;
  return digits > 0 && k == n;
}

static PJRT_Error* check_option(const uint8_t* entry, const uint8_t* end) {
  const uint8_t *name, *name_end, *value, *value_end;
  if (!pb_find(entry, end, 1, NULL, &name, &name_end)) return NULL;  /* not ours to judge */
  int n = (int)(name_end - name);
  if (n < 4 || memcmp(name, "xla_", 4) != 0)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_Compile: No such compile option: '%.*s'", n, (const char*)name);
  if (!pb_find(entry, end, 2, NULL, &value, &value_end)) return NULL;
  const char* type = NULL;
  for (size_t k = 0; k < sizeof known_options / sizeof known_options[0] && type == NULL; k++)
    if (strlen(known_options[k].name) == (size_t)n && memcmp(known_options[k].name, name, (size_t)n) == 0)
      type = known_options[k].type;
  if (type == NULL || strcmp(type, "string") == 0) return NULL;
  const uint8_t *str, *str_end;
  uint64_t v;
  if (pb_find(value, value_end, 1, NULL, &str, &str_end)) {  /* a string: parsed as XLA does */
    const char* t = (const char*)str;
    size_t len = (size_t)(str_end - str);
    bool ok = strcmp(type, "bool") == 0 ? (len == 4 && memcmp(t, "True", 4) == 0) ||
                                              (len == 5 && memcmp(t, "False", 5) == 0)
                                        : parse_int(t, len);
    if (ok) return NULL;
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_Compile: While setting option %.*s, '%.*s' is not a valid %s "
                    "value.", n, (const char*)name, (int)len, t, type);
  }
  bool is_bool = pb_find(value, value_end, 2, &v, NULL, NULL);
  bool is_int = !is_bool && pb_find(value, value_end, 3, &v, NULL, NULL);
  if ((strcmp(type, "bool") == 0 && is_bool) || (strcmp(type, "int32") == 0 && is_int))
    return NULL;
  return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                  "PJRT_Client_Compile: While setting option %.*s, the %s value is not a valid "
                  "%s value.", n, (const char*)name,
                  is_bool ? "bool" : is_int ? "integer" : "floating-point", type);
}

/* Only replicas and partitions matter to a one-device interpreter: both must be 1.  The XLA
 * options are checked (above) and ignored; every other compile option (layouts...) is ignored
 * -- there is no compiler here for them to steer.  Options we cannot parse are ignored too:
 * they are jaxlib's own serialization, not user input. */
static PJRT_Error* check_compile_options(const char* options, size_t size) {
  const uint8_t *build, *build_end;
  const uint8_t* p = (const uint8_t*)options;
  if (options == NULL) return NULL;
  /* every env_option_overrides entry (field 7, repeated) */
  for (const uint8_t *at = p, *end = p + size; at < end;) {
    uint64_t key, len;
    if (!pb_varint(&at, end, &key)) break;
    if ((key & 7) == 0) { if (!pb_varint(&at, end, &len)) break; continue; }
    if ((key & 7) == 1) { if (end - at < 8) break; at += 8; continue; }
    if ((key & 7) == 5) { if (end - at < 4) break; at += 4; continue; }
    if ((key & 7) != 2 || !pb_varint(&at, end, &len) || len > (uint64_t)(end - at)) break;
    if ((key >> 3) == 7) {
      PJRT_Error* error = check_option(at, at + len);
      if (error != NULL) return error;
    }
    at += len;
  }
  if (!pb_find(p, p + size, 3, NULL, &build, &build_end)) return NULL;
  uint64_t replicas = 1, partitions = 1;
  pb_find(build, build_end, 4, &replicas, NULL, NULL);
  pb_find(build, build_end, 5, &partitions, NULL, NULL);
  if (replicas > 1 || partitions > 1)
    return dr_error(PJRT_Error_Code_UNIMPLEMENTED,
                    "PJRT_Client_Compile: the dumpref device runs one replica and one partition "
                    "(asked for %llu replicas, %llu partitions)",
                    (unsigned long long)replicas, (unsigned long long)partitions);
  return NULL;
}

/* ---- compile ---------------------------------------------------------------------------- */

static void executable_release(PJRT_Executable* e) {
  if (e == NULL || atomic_fetch_sub(&e->references, 1) != 1) return;
  prog_free(e->program);
  free(e->output_types);
  free(e->output_dims);
  free(e->output_ranks);
  free(e->output_memory_kinds);
  free(e->output_memory_kind_sizes);
  free(e);
}

static PJRT_Executable* executable_new(prog_program* program) {
  PJRT_Executable* e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  atomic_init(&e->references, 1);
  e->program = program;
  snprintf(e->name, sizeof e->name, "%s", prog_name(program));
  snprintf(e->fingerprint, sizeof e->fingerprint, "%016llx",
           (unsigned long long)prog_fingerprint(program));
  size_t n = (size_t)prog_num_outputs(program), total = 0;
  for (size_t k = 0; k < n; k++) total += (size_t)prog_output(program, (int)k)->rank;
  e->num_outputs = n;
  e->output_types = calloc(n + 1, sizeof(PJRT_Buffer_Type));
  e->output_dims = calloc(total + 1, sizeof(int64_t));
  e->output_ranks = calloc(n + 1, sizeof(size_t));
  e->output_memory_kinds = calloc(n + 1, sizeof(char*));
  e->output_memory_kind_sizes = calloc(n + 1, sizeof(size_t));
  if (!e->output_types || !e->output_dims || !e->output_ranks || !e->output_memory_kinds ||
      !e->output_memory_kind_sizes) {
    e->program = NULL;
    executable_release(e);
    return NULL;
  }
  int64_t* dims = e->output_dims;
  for (size_t k = 0; k < n; k++) {
    const prog_shape* s = prog_output(program, (int)k);
    e->output_types[k] = buffer_type(s->dtype);
    e->output_ranks[k] = (size_t)s->rank;
    for (int d = 0; d < s->rank; d++) *dims++ = s->dims[d];
    e->output_memory_kinds[k] = DR_MEMORY_KIND;
    e->output_memory_kind_sizes[k] = sizeof DR_MEMORY_KIND - 1;
  }
  return e;
}

PJRT_Error* dr_Client_Compile(PJRT_Client_Compile_Args* args) {
  DR_ENTER(PJRT_Client_Compile, args, executable);
  DR_REQUIRE(PJRT_Client_Compile, args->client);
  DR_REQUIRE(PJRT_Client_Compile, args->program);
  const PJRT_Program* program = args->program;
  if (dr_tracing()) /* what the program pointer points at, for the map (hooks.c) */
    dr_trace_note("program", "{\"format\": \"%.*s\", \"code_size\": %zu, \"starts_with\": \"%s\"}",
                  program->format && program->format_size < 16 ? (int)program->format_size : 0,
                  program->format ? program->format : "", program->code_size,
                  program->code != NULL && program->code_size >= 4 &&
                          memcmp(program->code, "ML\xefR", 4) == 0 ? "MLIR bytecode magic" : "no bytecode magic");
  if (program->format == NULL || program->format_size != 4 ||
      memcmp(program->format, "mlir", 4) != 0)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_Compile: program format '%.*s' is not supported; the dumpref "
                    "device reads format \"mlir\" (a StableHLO portable artifact)",
                    program->format ? (int)program->format_size : 0,
                    program->format ? program->format : "");
  PJRT_Error* error = check_compile_options(args->compile_options, args->compile_options_size);
  if (error != NULL) return error;
  prog_status status;
  prog_program* p = prog_parse(program->code, program->code_size, &status);
  if (p == NULL)
    return dr_error((PJRT_Error_Code)status.code, "PJRT_Client_Compile: %s", status.message);
  PJRT_LoadedExecutable* loaded = calloc(1, sizeof *loaded);
  PJRT_Executable* e = executable_new(p);
  if (loaded == NULL || e == NULL) {
    free(loaded);
    if (e != NULL) executable_release(e); else prog_free(p);
    return dr_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "PJRT_Client_Compile: out of memory");
  }
  loaded->executable = e;
  loaded->client = args->client;
  pthread_mutex_lock(&registry_lock);
  loaded->next = registry;
  registry = loaded;
  pthread_mutex_unlock(&registry_lock);
  args->executable = loaded;
  return NULL;
}

/* ---- executable queries ----------------------------------------------------------------- */

PJRT_Error* dr_Executable_Destroy(PJRT_Executable_Destroy_Args* args) {
  DR_ENTER(PJRT_Executable_Destroy, args, executable);
  executable_release(args->executable);
  return NULL;
}

PJRT_Error* dr_Executable_Name(PJRT_Executable_Name_Args* args) {
  DR_ENTER(PJRT_Executable_Name, args, executable_name_size);
  DR_REQUIRE(PJRT_Executable_Name, args->executable);
  args->executable_name = args->executable->name;
  args->executable_name_size = strlen(args->executable->name);
  return NULL;
}

PJRT_Error* dr_Executable_NumReplicas(PJRT_Executable_NumReplicas_Args* args) {
  DR_ENTER(PJRT_Executable_NumReplicas, args, num_replicas);
  args->num_replicas = 1;
  return NULL;
}

PJRT_Error* dr_Executable_NumPartitions(PJRT_Executable_NumPartitions_Args* args) {
  DR_ENTER(PJRT_Executable_NumPartitions, args, num_partitions);
  args->num_partitions = 1;
  return NULL;
}

PJRT_Error* dr_Executable_NumOutputs(PJRT_Executable_NumOutputs_Args* args) {
  DR_ENTER(PJRT_Executable_NumOutputs, args, num_outputs);
  DR_REQUIRE(PJRT_Executable_NumOutputs, args->executable);
  args->num_outputs = args->executable->num_outputs;
  return NULL;
}

PJRT_Error* dr_Executable_SizeOfGeneratedCodeInBytes(
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args* args) {
  DR_ENTER(PJRT_Executable_SizeOfGeneratedCodeInBytes, args, size_in_bytes);
  args->size_in_bytes = 0;  /* an interpreter generates no code */
  return NULL;
}

PJRT_Error* dr_Executable_OutputElementTypes(PJRT_Executable_OutputElementTypes_Args* args) {
  DR_ENTER(PJRT_Executable_OutputElementTypes, args, num_output_types);
  DR_REQUIRE(PJRT_Executable_OutputElementTypes, args->executable);
  args->output_types = args->executable->output_types;
  args->num_output_types = args->executable->num_outputs;
  return NULL;
}

PJRT_Error* dr_Executable_OutputDimensions(PJRT_Executable_OutputDimensions_Args* args) {
  DR_ENTER(PJRT_Executable_OutputDimensions, args, dim_sizes);
  DR_REQUIRE(PJRT_Executable_OutputDimensions, args->executable);
  args->num_outputs = args->executable->num_outputs;
  args->dims = args->executable->output_dims;
  args->dim_sizes = args->executable->output_ranks;
  return NULL;
}

PJRT_Error* dr_Executable_OutputMemoryKinds(PJRT_Executable_OutputMemoryKinds_Args* args) {
  DR_ENTER(PJRT_Executable_OutputMemoryKinds, args, memory_kind_sizes);
  DR_REQUIRE(PJRT_Executable_OutputMemoryKinds, args->executable);
  args->num_outputs = args->executable->num_outputs;
  args->memory_kinds = args->executable->output_memory_kinds;
  args->memory_kind_sizes = args->executable->output_memory_kind_sizes;
  return NULL;
}

PJRT_Error* dr_Executable_Fingerprint(PJRT_Executable_Fingerprint_Args* args) {
  DR_ENTER(PJRT_Executable_Fingerprint, args, executable_fingerprint_size);
  DR_REQUIRE(PJRT_Executable_Fingerprint, args->executable);
  args->executable_fingerprint = args->executable->fingerprint;
  args->executable_fingerprint_size = strlen(args->executable->fingerprint);
  return NULL;
}

/* ---- loaded executables ----------------------------------------------------------------- */

PJRT_Error* dr_LoadedExecutable_Destroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_Destroy, args, executable);
  PJRT_LoadedExecutable* loaded = args->executable;
  if (loaded == NULL) return NULL;
  pthread_mutex_lock(&registry_lock);
  for (PJRT_LoadedExecutable** at = &registry; *at != NULL; at = &(*at)->next)
    if (*at == loaded) {
      *at = loaded->next;
      break;
    }
  pthread_mutex_unlock(&registry_lock);
  executable_release(loaded->executable);
  free(loaded);
  return NULL;
}

PJRT_Error* dr_LoadedExecutable_GetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_GetExecutable, args, executable);
  DR_REQUIRE(PJRT_LoadedExecutable_GetExecutable, args->loaded_executable);
  PJRT_Executable* e = args->loaded_executable->executable;
  atomic_fetch_add(&e->references, 1);
  args->executable = e;
  return NULL;
}

/* The loaded executable's client, or an error when it is gone. */
static PJRT_Error* live_client(const char* fn, PJRT_LoadedExecutable* loaded,
                               PJRT_Client** client) {
  pthread_mutex_lock(&registry_lock);
  *client = loaded->client;
  pthread_mutex_unlock(&registry_lock);
  if (*client == NULL)
    return dr_error(PJRT_Error_Code_FAILED_PRECONDITION,
                    "%s: the client of this executable has been destroyed", fn);
  return NULL;
}

PJRT_Error* dr_LoadedExecutable_AddressableDevices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_AddressableDevices, args, num_addressable_devices);
  DR_REQUIRE(PJRT_LoadedExecutable_AddressableDevices, args->executable);
  PJRT_Client* client;
  PJRT_Error* error = live_client("PJRT_LoadedExecutable_AddressableDevices", args->executable,
                                  &client);
  if (error != NULL) return error;
  args->addressable_devices = client->devices;
  args->num_addressable_devices = 1;
  return NULL;
}

PJRT_Error* dr_LoadedExecutable_Delete(PJRT_LoadedExecutable_Delete_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_Delete, args, executable);
  DR_REQUIRE(PJRT_LoadedExecutable_Delete, args->executable);
  args->executable->deleted = true;
  return NULL;
}

PJRT_Error* dr_LoadedExecutable_IsDeleted(PJRT_LoadedExecutable_IsDeleted_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_IsDeleted, args, is_deleted);
  DR_REQUIRE(PJRT_LoadedExecutable_IsDeleted, args->executable);
  args->is_deleted = args->executable->deleted;
  return NULL;
}

PJRT_Error* dr_LoadedExecutable_Fingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_Fingerprint, args, executable_fingerprint_size);
  DR_REQUIRE(PJRT_LoadedExecutable_Fingerprint, args->executable);
  args->executable_fingerprint = args->executable->executable->fingerprint;
  args->executable_fingerprint_size = strlen(args->executable->executable->fingerprint);
  return NULL;
}

/* The device assignment is a serialized xla.DeviceAssignmentProto: replica_count = 1,
 * computation_count = 1, one computation with device id 0.  Written by hand (three fields). */
static const char device_assignment[] = {
    0x08, 0x01,              /* replica_count: 1 */
    0x10, 0x01,              /* computation_count: 1 */
    0x1a, 0x02, 0x08, 0x00,  /* computation_devices { replica_device_ids: 0 } */
};

static void no_deleter(PJRT_DeviceAssignmentSerialized* da) { (void)da; }

PJRT_Error* dr_LoadedExecutable_GetDeviceAssignment(
    PJRT_LoadedExecutable_GetDeviceAssignment_Args* args) {
  DR_ENTER(PJRT_LoadedExecutable_GetDeviceAssignment, args, serialized_device_assignment_deleter);
  DR_REQUIRE(PJRT_LoadedExecutable_GetDeviceAssignment, args->executable);
  args->serialized_bytes = device_assignment;
  args->serialized_bytes_size = sizeof device_assignment;
  args->serialized_device_assignment = NULL;
  args->serialized_device_assignment_deleter = no_deleter;
  return NULL;
}

/* ---- execute ---------------------------------------------------------------------------- */

static bool same_shape(const PJRT_Buffer* b, const prog_shape* s) {
  /* a token argument: a token buffer, or the pred[0] array jaxlib passes in its place */
  if (s->dtype == PROG_TOKEN)
    return (b->type == PJRT_Buffer_Type_TOKEN && b->num_dims == 0) ||
           (b->type == PJRT_Buffer_Type_PRED && b->num_dims == 1 && b->dims[0] == 0);
  if (b->type != buffer_type(s->dtype) || b->num_dims != (size_t)s->rank) return false;
  for (int d = 0; d < s->rank; d++)
    if (b->dims[d] != s->dims[d]) return false;
  return true;
}

static void shape_text(const prog_shape* s, char* out, size_t size) {
  int n = snprintf(out, size, "%s[", prog_dtype_name(s->dtype));
  for (int d = 0; d < s->rank && n > 0 && (size_t)n < size; d++)
    n += snprintf(out + n, size - (size_t)n, "%s%lld", d ? "," : "", (long long)s->dims[d]);
  if (n > 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, "]");
}

static PJRT_Error* check_inputs(const prog_program* p, PJRT_Buffer* const* inputs, size_t n,
                                const void** data) {
  static const char* fn = "PJRT_LoadedExecutable_Execute";
  if (n != (size_t)prog_num_inputs(p))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: %zu arguments given, %d expected", fn,
                    n, prog_num_inputs(p));
  for (size_t k = 0; k < n; k++) {
    const PJRT_Buffer* b = inputs[k];
    const prog_shape* s = prog_input(p, (int)k);
    if (b == NULL)
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %zu is NULL", fn, k);
    if (atomic_load(&b->deleted) || (b->byte_size > 0 && b->data == NULL))
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %zu has been deleted", fn,
                      k);
    if (!same_shape(b, s)) {
      char want[160];
      shape_text(s, want, sizeof want);
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "%s: argument %zu is %s with %zu dims, the program expects %s", fn, k,
                      dr_type_name(b->type), b->num_dims, want);
    }
    data[k] = b->data;
  }
  return NULL;
}

/* Which inputs this run donates: those the program marks (prog_input_donated) that the
 * options do not exempt (PJRT_ExecuteOptions.non_donatable_input_indices).  A donated buffer
 * may be neither passed twice nor held by an external reference (dlpack and friends): XLA
 * refuses both, and so does this device, before anything runs. */
static PJRT_Error* donated_inputs(const prog_program* p, const PJRT_ExecuteOptions* options,
                                  PJRT_Buffer* const* inputs, size_t n, bool* donated) {
  static const char* fn = "PJRT_LoadedExecutable_Execute";
  const int64_t* exempt = NULL;
  size_t num_exempt = 0;
  if (options != NULL &&
      options->struct_size >= PJRT_STRUCT_SIZE(PJRT_ExecuteOptions, num_non_donatable_input_indices) &&
      options->num_non_donatable_input_indices > 0) {
    if (options->non_donatable_input_indices == NULL)
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "%s: options.non_donatable_input_indices is NULL for %zu indices", fn,
                      options->num_non_donatable_input_indices);
    exempt = options->non_donatable_input_indices;
    num_exempt = options->num_non_donatable_input_indices;
  }
  for (size_t k = 0; k < n; k++) {
    donated[k] = prog_input_donated(p, (int)k) != 0;
    for (size_t q = 0; q < num_exempt && donated[k]; q++)
      if (exempt[q] == (int64_t)k) donated[k] = false;
  }
  for (size_t k = 0; k < n; k++) {
    if (!donated[k]) continue;
    for (size_t q = 0; q < n; q++)
      if (q != k && inputs[q] == inputs[k])
        return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                        "%s: argument %zu is donated and also passed as argument %zu (a "
                        "donated buffer may be passed only once)", fn, k, q);
    if (atomic_load(&inputs[k]->external_references) > 0)
      return dr_error(PJRT_Error_Code_INVALID_ARGUMENT,
                      "%s: argument %zu is donated but an external reference holds its buffer",
                      fn, k);
  }
  return NULL;
}

/* After a successful run: a donated input is gone, as PJRT_Buffer_Delete leaves it (the
 * outputs are fresh buffers, so none aliases it). */
static void invalidate_donated(PJRT_Buffer* const* inputs, const bool* donated, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (!donated[k]) continue;
    PJRT_Buffer_Delete_Args d = {.struct_size = PJRT_Buffer_Delete_Args_STRUCT_SIZE,
                                 .buffer = inputs[k]};
    extern PJRT_Buffer_Delete dr_Buffer_Delete;
    PJRT_Error* e = dr_Buffer_Delete(&d);
    if (e != NULL) free(e);
  }
}

static void destroy_outputs(PJRT_Buffer** outputs, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (outputs[k] != NULL) {
      PJRT_Buffer_Destroy_Args d = {.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE,
                                    .buffer = outputs[k]};
      extern PJRT_Buffer_Destroy dr_Buffer_Destroy;
      PJRT_Error* e = dr_Buffer_Destroy(&d);
      if (e != NULL) free(e);
      outputs[k] = NULL;
    }
}

PJRT_Error* dr_LoadedExecutable_Execute(PJRT_LoadedExecutable_Execute_Args* args) {
  static const char* fn = "PJRT_LoadedExecutable_Execute";
  DR_ENTER(PJRT_LoadedExecutable_Execute, args, execute_device);
  DR_REQUIRE(PJRT_LoadedExecutable_Execute, args->executable);
  PJRT_LoadedExecutable* loaded = args->executable;
  /* a program with no outputs (jax.jit(lambda: ())) gets no output list to fill */
  if (loaded->executable->num_outputs > 0) DR_REQUIRE(PJRT_LoadedExecutable_Execute, args->output_lists);
  if (loaded->deleted)
    return dr_error(PJRT_Error_Code_FAILED_PRECONDITION, "%s: the executable was deleted", fn);
  PJRT_Client* client;
  PJRT_Error* error = live_client(fn, loaded, &client);
  if (error != NULL) return error;
  if (args->num_devices != 1)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: %zu devices given, the dumpref "
                    "device runs on exactly one", fn, args->num_devices);
  if (args->num_args > 0 && (args->argument_lists == NULL || args->argument_lists[0] == NULL))
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument_lists is NULL", fn);
  if (loaded->executable->num_outputs > 0 && args->output_lists[0] == NULL)
    return dr_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: output_lists[0] is NULL", fn);
  const prog_program* p = loaded->executable->program;
  size_t n_in = args->num_args, n_out = loaded->executable->num_outputs;
  const void** in = calloc(n_in + 1, sizeof(void*));
  void** out = calloc(n_out + 1, sizeof(void*));
  PJRT_Buffer** outputs = calloc(n_out + 1, sizeof(PJRT_Buffer*));
  bool* donated = calloc(n_in + 1, sizeof(bool));
  if (in == NULL || out == NULL || outputs == NULL || donated == NULL) {
    error = dr_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "%s: out of memory", fn);
    goto done;
  }
  PJRT_Buffer* const* inputs = n_in ? args->argument_lists[0] : NULL;
  error = check_inputs(p, inputs, n_in, in);
  if (error != NULL) goto done;
  error = donated_inputs(p, args->options, inputs, n_in, donated);
  if (error != NULL) goto done;
  for (size_t k = 0; k < n_out; k++) {
    const prog_shape* s = prog_output(p, (int)k);
    outputs[k] = dr_buffer_new(client, buffer_type(s->dtype), s->dims, (size_t)s->rank, &error);
    if (outputs[k] == NULL) goto done;
    out[k] = outputs[k]->data;
  }
  prog_status status;
  if (prog_run(p, in, out, &status) != PROG_OK) {
    error = dr_error((PJRT_Error_Code)status.code, "%s: %s", fn, status.message);
    goto done;
  }
  invalidate_donated(inputs, donated, n_in);
  for (size_t k = 0; k < n_out; k++) args->output_lists[0][k] = outputs[k];
  if (args->device_complete_events != NULL) args->device_complete_events[0] = dr_event_ready();
  free(outputs);
  outputs = NULL;
done:
  if (outputs != NULL) destroy_outputs(outputs, n_out);
  free(outputs);
  free(donated);
  free(in);
  free(out);
  return error;
}
