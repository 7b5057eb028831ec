/* prog.c -- the programs family's public face (prog.h): parse, signature queries, free.
 * Parsing is bytecode (prog_bytecode.c) then lowering (prog_vhlo.c), both throwing into the
 * one setjmp here; running is prog_interp.c.  Also the one check both readers make of a
 * dot_general's shapes (prog_check_dot_shapes). */
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

size_t prog_dtype_size(prog_dtype t) {
  switch (t) {
    case PROG_PRED: case PROG_S8: case PROG_U8: case PROG_F8E4M3FN: case PROG_F8E5M2:
    case PROG_S4: case PROG_U4: return 1;
    case PROG_TOKEN: return 0;
    case PROG_BF16: case PROG_F16: case PROG_S16: case PROG_U16: return 2;
    case PROG_S32: case PROG_U32: case PROG_F32: return 4;
    case PROG_S64: case PROG_U64: case PROG_F64: case PROG_C64: return 8;
    case PROG_C128: return 16;
  }
  return 0;
}

const char* prog_dtype_name(prog_dtype t) {
  switch (t) {
    case PROG_PRED: return "pred";
    case PROG_S8: return "s8";
    case PROG_U8: return "u8";
    case PROG_BF16: return "bf16";
    case PROG_F16: return "f16";
    case PROG_S32: return "s32";
    case PROG_U32: return "u32";
    case PROG_F32: return "f32";
    case PROG_S64: return "s64";
    case PROG_U64: return "u64";
    case PROG_F64: return "f64";
    case PROG_S16: return "s16";
    case PROG_U16: return "u16";
    case PROG_F8E4M3FN: return "f8E4M3FN";
    case PROG_F8E5M2: return "f8E5M2";
    case PROG_C64: return "c64";
    case PROG_C128: return "c128";
    case PROG_S4: return "s4";
    case PROG_U4: return "u4";
    case PROG_TOKEN: return "token";
  }
  return "?";
}

int64_t prog_shape_elements(const prog_shape* s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++) n *= s->dims[d];
  return n;
}

void prog_check_dot_shapes(vh* v, const prog_insn* in, const prog_shape* a, const prog_shape* b) {
  check(v, in->np[0] == in->np[1] && in->np[2] == in->np[3], "dot dimension counts");
  for (int r = 0; r < in->np[0]; r++)
    check(v, a->dims[in->p[0][r]] == b->dims[in->p[1][r]], "dot batch sizes differ");
  for (int r = 0; r < in->np[2]; r++)
    check(v, a->dims[in->p[2][r]] == b->dims[in->p[3][r]], "dot contracting sizes differ");
  prog_shape want = {in->shape.dtype, 0, {0}};
  for (int r = 0; r < in->np[0]; r++) want.dims[want.rank++] = a->dims[in->p[0][r]];
  for (int side = 0; side < 2; side++) {
    const prog_shape* s = side == 0 ? a : b;
    for (int d = 0; d < s->rank; d++) {
      bool used = false;
      for (int r = 0; r < in->np[side]; r++) used |= in->p[side][r] == d;
      for (int r = 0; r < in->np[2 + side]; r++) used |= in->p[2 + side][r] == d;
      if (!used) {
        check(v, want.rank < PROG_MAX_RANK, "dot result rank");
        want.dims[want.rank++] = s->dims[d];
      }
    }
  }
  check(v, same_dims(&want, &in->shape), "dot result shape");
}
