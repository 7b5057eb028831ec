/* prog.c -- the programs family's public face (prog.h): parse, signature queries, free.
 * Parsing is bytecode (prog_bytecode.c) then lowering (prog_vhlo.c), or MLIR text
 * (prog_text.c), all throwing into the one setjmp here; running is prog_interp.c.  It stands
 * above the readers and calls into them; nothing below calls it. */
#include <stdlib.h>
#include <string.h>

#include "prog_vhlo.h"

/* FNV-1a: a stable 64-bit identity of the artifact for PJRT_Executable_Fingerprint. */
static uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* MLIR text: printable, and it names a function. */
static bool looks_like_text(const uint8_t* p, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (p[k] == 0 || (p[k] < 32 && p[k] != '\n' && p[k] != '\t' && p[k] != '\r')) return false;
  for (size_t k = 0; k + 9 <= n; k++)
    if (memcmp(p + k, "func.func", 9) == 0) return true;
  return false;
}

prog_program* prog_parse(const void* bytes, size_t size, prog_status* status) {
  prog_status ignored;
  if (status == NULL) status = &ignored;
  status->code = PROG_OK;
  status->message[0] = 0;
  if (bytes == NULL && size > 0) {
    status->code = PROG_INVALID_ARGUMENT;
    strcpy(status->message, "no program bytes");
    return NULL;
  }
  prog_ctx ctx = {.status = status};
  /* volatile: read after longjmp */
  prog_program* volatile program = NULL;
  if (setjmp(ctx.on_error) != 0) {
    prog_arena_free(ctx.chunks);
    return NULL;
  }
  program = prog_alloc(&ctx, 1, sizeof(prog_program));
  if (size >= 4 && memcmp(bytes, "ML\xefR", 4) != 0 && looks_like_text(bytes, size)) {
    prog_text_parse(&ctx, bytes, size, program);
  } else {
    bc_module* m = bc_read(&ctx, bytes, size);
    vh_lower(&ctx, m, program);
  }
  program->fingerprint = fnv1a(bytes, size);
  program->arena = ctx.chunks;
  return program;
}

void prog_free(prog_program* program) {
  if (program != NULL) prog_arena_free(program->arena);
}

static const prog_func* entry(const prog_program* p) { return &p->funcs[p->main]; }

int prog_num_inputs(const prog_program* p) { return entry(p)->num_args; }
int prog_num_outputs(const prog_program* p) { return entry(p)->num_results; }

const prog_shape* prog_input(const prog_program* p, int i) {
  if (i < 0 || i >= entry(p)->num_args) return NULL;
  return &entry(p)->values[i];
}

const prog_shape* prog_output(const prog_program* p, int i) {
  if (i < 0 || i >= entry(p)->num_results) return NULL;
  return &entry(p)->values[entry(p)->results[i]];
}

int prog_input_donated(const prog_program* p, int i) {
  if (i < 0 || i >= entry(p)->num_args || entry(p)->donated == NULL) return 0;
  return entry(p)->donated[i];
}

const char* prog_name(const prog_program* p) { return p->name; }
uint64_t prog_fingerprint(const prog_program* p) { return p->fingerprint; }
