/* prog_dtype.c -- element types and shapes: an element's size and name, a shape's element
 * count.  The bottom of the programs family: every reader and kernel uses it, and it uses
 * nothing of theirs. */
#include "prog_internal.h"

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
