/* prog_capture_shim.c -- a test tool: a PJRT plugin that forwards everything to XLA's own CPU
 * plugin (the `xla-cpu-pjrt` wheel) but writes every program PJRT_Client_Compile receives to
 * $PROG_CAPTURE_DIR, and reports the dumpref reader's stablehlo_current_version.  So tests get
 * exactly the bytes jax sends a plugin like ours, without depending on our plugin working. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"
#include "prog.h"

static PJRT_Api api;
static PJRT_Error* (*real_compile)(PJRT_Client_Compile_Args*);
static PJRT_Error* (*real_attributes)(PJRT_Plugin_Attributes_Args*);
static int count;

static PJRT_Error* capture_compile(PJRT_Client_Compile_Args* args) {
  const char* dir = getenv("PROG_CAPTURE_DIR");
  if (dir != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s/program%03d.%.*s", dir, count++,
             (int)args->program->format_size, args->program->format);
    FILE* f = fopen(path, "wb");
    if (f != NULL) {
      fwrite(args->program->code, 1, args->program->code_size, f);
      fclose(f);
    }
  }
  return real_compile(args);
}

static PJRT_NamedValue attributes[64];
static const int64_t version[3] = {PROG_STABLEHLO_MAJOR, PROG_STABLEHLO_MINOR,
                                   PROG_STABLEHLO_PATCH};

static PJRT_Error* capture_attributes(PJRT_Plugin_Attributes_Args* args) {
  PJRT_Error* error = real_attributes(args);
  if (error != NULL) return error;
  size_t n = 0;
  for (size_t k = 0; k < args->num_attributes && n < 63; k++)
    if (strncmp(args->attributes[k].name, "stablehlo_current_version",
                args->attributes[k].name_size) != 0)
      attributes[n++] = args->attributes[k];
  PJRT_NamedValue* v = &attributes[n++];
  memset(v, 0, sizeof *v);
  v->struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v->name = "stablehlo_current_version";
  v->name_size = strlen(v->name);
  v->type = PJRT_NamedValue_kInt64List;
  v->int64_array_value = version;
  v->value_size = 3;
  args->attributes = attributes;
  args->num_attributes = n;
  return NULL;
}

const PJRT_Api* GetPjrtApi(void) {
  void* real = dlopen(getenv("PROG_CAPTURE_REAL_PLUGIN"), RTLD_NOW | RTLD_LOCAL);
  if (real == NULL) return NULL;
  const PJRT_Api* (*get)(void) = (const PJRT_Api* (*)(void))dlsym(real, "GetPjrtApi");
  if (get == NULL) return NULL;
  api = *get();
  real_compile = api.PJRT_Client_Compile;
  real_attributes = api.PJRT_Plugin_Attributes;
  api.PJRT_Client_Compile = capture_compile;
  api.PJRT_Plugin_Attributes = capture_attributes;
  return &api;
}
