/* prog_text.c -- StableHLO as MLIR text: what `lowered.as_text()` prints and what PJRT
 * harnesses hand PJRT_Client_Compile under format "mlir" (XLA's own plugins take text or
 * bytecode there).
 *
 * A line reader for the common subset, in both printed forms:
 *   pretty   %0 = stablehlo.add %a, %b : tensor<4xf32>
 *   generic  %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
 * Read: module, func.func (public or private), return / func.return, func.call, the elementwise
 * ops, constant (dense splats, lists, hex blobs), convert, reshape, broadcast_in_dim,
 * transpose, iota, compare, select and dot_general.  Anything else is refused with
 * UNIMPLEMENTED naming the op and its line: programs with regions (reduce, while ...) take
 * the portable-artifact path, the bytecode jax itself sends.  Shapes are checked as strictly
 * as prog_vhlo.c checks them, so the interpreter can trust them.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_vhlo.h"

typedef struct {
  vh v;
  const char* p;
  const char* end;
  int line;
  char opname[96];
  /* the function being read */
  prog_func* f;
  int max_values;
  const char** names;      /* value names, per value id */
  bool* defined;
  bool generic;            /* the function is printed in the generic form */
} tx;

#define TFAIL(T, code, ...) prog_fail((T)->v.ctx, code, __VA_ARGS__)

static void skip_space(tx* t) {
  for (;;) {
    while (t->p < t->end && isspace((unsigned char)*t->p)) {
      if (*t->p == '\n') t->line++;
      t->p++;
    }
    if (t->p + 1 < t->end && t->p[0] == '/' && t->p[1] == '/') {
      while (t->p < t->end && *t->p != '\n') t->p++;
      continue;
    }
    return;
  }
}

/* The cursor t->p never passes t->end: every advance is bounded by it (peek and accept
 * compare `t->end - t->p` unsigned, so a cursor past the end would let them read on).  The
 * text itself is a NUL-terminated copy (prog_text_parse), so strtoll/strtod stop at its end.
 *
 * How many bytes of the text at t->p a message may quote (at most `max`): the text holds no
 * NUL (looks_like_text), so "%.20s" alone would quote past t->end when fewer are left. */
static int quote_len(const tx* t, int max) {
  const char* nul = memchr(t->p, 0, (size_t)(t->end - t->p));
  ptrdiff_t left = (nul != NULL ? nul : t->end) - t->p;
  return left < max ? (int)left : max;
}

static bool peek(tx* t, const char* s) {
  skip_space(t);
  size_t n = strlen(s);
  return t->p <= t->end && (size_t)(t->end - t->p) >= n && memcmp(t->p, s, n) == 0;
}

static bool accept(tx* t, const char* s) {
  if (!peek(t, s)) return false;
  t->p += strlen(s);
  return true;
}

static void expect(tx* t, const char* s) {
  if (!accept(t, s))
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: expected '%s'", t->line, s);
}

/* An identifier: letters, digits, _ . $ - */
static const char* ident(tx* t) {
  skip_space(t);
  const char* s = t->p;
  while (t->p < t->end && (isalnum((unsigned char)*t->p) || strchr("_.$-", *t->p))) t->p++;
  if (t->p == s) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: expected a name", t->line);
  char* out = prog_alloc(t->v.ctx, (size_t)(t->p - s) + 1, 1);
  memcpy(out, s, (size_t)(t->p - s));
  return out;
}

/* A symbol after '@': a name or a quoted string. */
static const char* symbol(tx* t) {
  if (t->p < t->end && *t->p == '"') {
    const char* s = ++t->p;
    while (t->p < t->end && *t->p != '"') t->p++;
    if (t->p >= t->end) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: unterminated symbol");
    char* out = prog_alloc(t->v.ctx, (size_t)(t->p - s) + 1, 1);
    memcpy(out, s, (size_t)(t->p - s));
    t->p++;
    return out;
  }
  return ident(t);
}

/* Skips a quoted string whose opening '"' is just before t->p, up to and past its closing
 * quote; a backslash escapes the next byte.  An unterminated string (or a backslash as the
 * last byte) is malformed text, not a reason to step past the end; `where` names what the
 * string was in, for the message. */
static void skip_string(tx* t, const char* where, const char* name) {
  int line = t->line;
  while (t->p < t->end && *t->p != '"') {
    if (*t->p == '\\' && t->end - t->p < 2) break;
    if (*t->p == '\n') t->line++;
    t->p += *t->p == '\\' ? 2 : 1;
  }
  if (t->p >= t->end || *t->p != '"')
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: unterminated string in %s%s",
          line, where, name);
  t->p++;
}

/* An integer attribute's `: i64` type suffix (generic form), if there. */
static void skip_int_type(tx* t) {
  const char* save = t->p;
  int line = t->line;
  if (accept(t, ":") && peek(t, "i") && t->p + 1 < t->end && isdigit((unsigned char)t->p[1])) {
    ident(t);
    return;
  }
  t->p = save;
  t->line = line;
}

/* Skips a balanced group starting at the current opening bracket (quotes respected). */
static void skip_group(tx* t) {
  int depth = 0;
  bool quoted = false;
  char prev = 0, c = 0;
  while (t->p < t->end) {
    prev = c;
    c = *t->p++;
    if (c == '\n') t->line++;
    if (quoted) {
      if (c == '\\' && t->p < t->end) t->p++;
      else if (c == '"') quoted = false;
      continue;
    }
    if (c == '"') quoted = true;
    else if (c == '>' && prev == '-') continue;  /* the arrow of a function type */
    else if (strchr("([{<", c)) depth++;
    else if (strchr(")]}>", c) && --depth == 0) return;
  }
  TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: unbalanced brackets");
}

static void skip_loc(tx* t) {
  if (peek(t, "loc(")) {
    t->p += 3;
    skip_group(t);
  }
}

/* ---- types ------------------------------------------------------------------------------ */

static prog_dtype element(tx* t, const char* s) {
  static const struct { const char* name; prog_dtype t; } names[] = {
      {"f32", PROG_F32}, {"f64", PROG_F64}, {"bf16", PROG_BF16}, {"f16", PROG_F16},
      {"i1", PROG_PRED}, {"i8", PROG_S8}, {"i16", PROG_S16}, {"i32", PROG_S32},
      {"i64", PROG_S64}, {"ui8", PROG_U8}, {"ui16", PROG_U16}, {"ui32", PROG_U32},
      {"ui64", PROG_U64}, {"f8E4M3FN", PROG_F8E4M3FN}, {"f8E5M2", PROG_F8E5M2},
      {"i4", PROG_S4}, {"ui4", PROG_U4}};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (strcmp(names[k].name, s) == 0) return names[k].t;
  TFAIL(t, PROG_UNIMPLEMENTED, "unsupported element type %s at line %d", s, t->line);
}

static prog_shape tensor(tx* t) {
  expect(t, "tensor<");
  prog_shape s = {0};
  int64_t n = 1;
  for (;;) {
    skip_space(t);
    if (t->p < t->end && *t->p == '?')
      TFAIL(t, PROG_UNIMPLEMENTED, "unsupported dynamic dimension at line %d", t->line);
    if (t->p < t->end && isdigit((unsigned char)*t->p)) {
      char* e;
      long long d = strtoll(t->p, &e, 10);
      if (e >= t->end || *e != 'x' || s.rank == PROG_MAX_RANK || d < 0 || d > ((int64_t)1 << 34))
        TFAIL(t, PROG_UNIMPLEMENTED, "unsupported tensor shape at line %d", t->line);
      s.dims[s.rank++] = d;
      if (d > 0 && n > (((int64_t)1 << 34) / d)) TFAIL(t, PROG_UNIMPLEMENTED, "tensor too large at line %d", t->line);
      n *= d > 0 ? d : 1;
      t->p = e + 1;
      continue;
    }
    break;
  }
  const char* name = ident(t);
  s.dtype = element(t, name);
  if (accept(t, ",")) {  /* an encoding (bounds): skip it */
    while (t->p < t->end && *t->p != '>') {
      if (strchr("([{<", *t->p)) skip_group(t);
      else t->p++;
    }
  }
  expect(t, ">");
  return s;
}

/* `(T, T) -> T`, `(T) -> (T, T)` or a lone `T`; returns the result count, operand types in
 * ins (count *nin). */
static int func_type(tx* t, prog_shape* ins, int* nin, prog_shape* outs, int max) {
  *nin = 0;
  if (!accept(t, "(")) {  /* pretty: one type, or operand types then the result's (select) */
    outs[0] = tensor(t);
    while (accept(t, ",")) outs[0] = tensor(t);
    return 1;
  }
  if (!accept(t, ")")) {
    do {
      if (*nin == max) TFAIL(t, PROG_UNIMPLEMENTED, "too many operands at line %d", t->line);
      ins[(*nin)++] = tensor(t);
    } while (accept(t, ","));
    expect(t, ")");
  }
  expect(t, "->");
  int n = 0;
  if (accept(t, "(")) {
    if (!accept(t, ")")) {
      do {
        if (n == max) TFAIL(t, PROG_UNIMPLEMENTED, "too many results at line %d", t->line);
        outs[n++] = tensor(t);
      } while (accept(t, ","));
      expect(t, ")");
    }
  } else {
    outs[n++] = tensor(t);
  }
  return n;
}

/* ---- values ----------------------------------------------------------------------------- */

static const char* value_name(tx* t) {
  skip_space(t);
  if (t->p >= t->end || *t->p != '%')
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: expected a %%value", t->line);
  t->p++;
  const char* s = t->p;
  while (t->p < t->end && (isalnum((unsigned char)*t->p) || *t->p == '_' || *t->p == '.' || *t->p == '#')) t->p++;
  char* out = prog_alloc(t->v.ctx, (size_t)(t->p - s) + 1, 1);
  memcpy(out, s, (size_t)(t->p - s));
  return out;
}

static int lookup_value(tx* t, const char* name) {
  for (int k = t->f->num_values - 1; k >= 0; k--)
    if (t->names[k] && strcmp(t->names[k], name) == 0 && t->defined[k]) return k;
  TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: %%%s is not defined", t->line, name);
}

static int new_value(tx* t, const char* name, prog_shape s) {
  if (t->f->num_values >= t->max_values)
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: too many values");
  int id = t->f->num_values++;
  t->names[id] = name;
  t->f->values[id] = s;
  return id;
}

/* ---- attributes ------------------------------------------------------------------------- */

/* `[1, 2]` or `array<i64: 1, 2>` or `array<i64>`. */
static int int_list(tx* t, int64_t* out, int max) {
  int n = 0;
  bool array = accept(t, "array<");
  if (array) {
    ident(t);
    if (!accept(t, ":")) { expect(t, ">"); return 0; }
  } else {
    expect(t, "[");
    if (accept(t, "]")) return 0;
  }
  do {
    skip_space(t);
    char* e;
    long long x = strtoll(t->p, &e, 10);
    if (e == t->p || n == max) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: integer list", t->line);
    t->p = e;
    out[n++] = x;
  } while (accept(t, ","));
  expect(t, array ? ">" : "]");
  return n;
}

/* A dense<...> literal of shape s: splat, nested list, or "0x..." hex bytes. */
static const void* dense(tx* t, const prog_shape* s) {
  expect(t, "dense<");
  int64_t n = prog_shape_elements(s);
  size_t es = prog_dtype_size(s->dtype);
  uint8_t* out = prog_alloc(t->v.ctx, (size_t)(n > 0 ? n : 1), es);
  skip_space(t);
  if (accept(t, "\"0x")) {
    size_t want = (size_t)n * es;
    const char* h = t->p;
    while (t->p < t->end && isxdigit((unsigned char)*t->p)) t->p++;
    size_t digits = (size_t)(t->p - h);
    expect(t, "\"");
    expect(t, ">");
    if (digits != 2 * want && !(digits == 2 * es))
      TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: hex constant size", t->line);
    for (size_t k = 0; k < digits / 2; k++) {
      char b[3] = {h[2 * k], h[2 * k + 1], 0};
      out[k] = (uint8_t)strtoul(b, NULL, 16);
    }
    if (digits == 2 * es)
      for (int64_t k = 1; k < n; k++) memcpy(out + (size_t)k * es, out, es);
    return out;
  }
  int64_t count = 0;
  int depth = 0;
  for (;;) {
    skip_space(t);
    if (t->p >= t->end) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: unterminated dense");
    char c = *t->p;
    if (c == '[') { depth++; t->p++; continue; }
    if (c == ']') { depth--; t->p++; continue; }
    if (c == ',') { t->p++; continue; }
    if (c == '>') { t->p++; break; }
    double f = 0;
    int64_t i = 0;
    bool is_float_value = true, bits = false;
    if (accept(t, "true")) { i = 1; f = 1; is_float_value = false; }
    else if (accept(t, "false")) { is_float_value = false; }
    else if (t->p + 1 < t->end && t->p[0] == '0' && (t->p[1] == 'x' || t->p[1] == 'X')) {
      char* e;
      unsigned long long u = strtoull(t->p, &e, 16);
      t->p = e;
      i = (int64_t)u;
      bits = true;
    } else {
      char* e;
      f = strtod(t->p, &e);
      if (e == t->p) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: dense value", t->line);
      bool integral = true;
      for (const char* q = t->p; q < e; q++) integral &= !strchr(".eEni", *q);
      if (integral) { i = strtoll(t->p, NULL, 10); is_float_value = false; }
      t->p = e;
    }
    if (count >= (n > 0 ? n : 1)) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: too many dense values", t->line);
    if (bits) memcpy(out + (size_t)count * es, &i, es);  /* a float's bit pattern (NaN, inf) */
    else if (is_float_value) rt_put(s->dtype, out, count, f, 0, true);
    else rt_put(s->dtype, out, count, 0, i, false);
    count++;
  }
  (void)depth;
  if (count == 1 && n > 1)
    for (int64_t k = 1; k < n; k++) memcpy(out + (size_t)k * es, out, es);
  else if (count != n && !(n == 0 && count == 0))
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: %lld dense values for %lld elements",
          t->line, (long long)count, (long long)n);
  return out;
}

/* ---- ops -------------------------------------------------------------------------------- */

typedef struct {
  int num_in;
  int in[16];
  int64_t lists[4][PROG_MAX_RANK];   /* dims / contracting / batching */
  int nlist[4];
  int cmp;                           /* comparison direction, -1 when none */
  int64_t iota_dim;
  const char* callee;
  bool has_dense;
  prog_shape dense_shape;
  const void* dense;
} op_args;

static int direction(tx* t) {
  static const char* dirs[] = {"EQ", "NE", "GE", "GT", "LE", "LT"};
  const char* d = ident(t);
  for (int k = 0; k < 6; k++)
    if (strcmp(dirs[k], d) == 0) return k;
  TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: comparison %s", t->line, d);
}

/* key = value inside a generic attribute dictionary, or a pretty keyword attribute. */
static void attribute(tx* t, op_args* a, const char* key) {
  if (strcmp(key, "dims") == 0 || strcmp(key, "broadcast_dimensions") == 0 ||
      strcmp(key, "permutation") == 0) {
    a->nlist[0] = int_list(t, a->lists[0], PROG_MAX_RANK);
  } else if (strcmp(key, "contracting_dims") == 0 || strcmp(key, "batching_dims") == 0) {
    int at = key[0] == 'c' ? 2 : 0;
    a->nlist[at] = int_list(t, a->lists[at], PROG_MAX_RANK);
    expect(t, "x");
    a->nlist[at + 1] = int_list(t, a->lists[at + 1], PROG_MAX_RANK);
  } else if (strcmp(key, "dim") == 0 || strcmp(key, "iota_dimension") == 0) {
    skip_space(t);
    char* e;
    a->iota_dim = strtoll(t->p, &e, 10);
    t->p = e;
    skip_int_type(t);
  } else if (strcmp(key, "comparison_direction") == 0) {
    expect(t, "#stablehlo<comparison_direction");
    a->cmp = direction(t);
    expect(t, ">");
  } else if (strcmp(key, "value") == 0) {
    skip_space(t);
    const char* save = t->p;
    int line = t->line;
    /* the type follows the literal: read it first, then come back */
    if (!peek(t, "dense<")) TFAIL(t, PROG_UNIMPLEMENTED, "unsupported constant at line %d", t->line);
    t->p += 5;
    skip_group(t);
    expect(t, ":");
    a->dense_shape = tensor(t);
    const char* after = t->p;
    t->p = save;
    t->line = line;
    a->dense = dense(t, &a->dense_shape);
    a->has_dense = true;
    t->p = after;
  } else if (strcmp(key, "callee") == 0) {
    expect(t, "@");
    a->callee = symbol(t);
  } else if (strcmp(key, "dot_dimension_numbers") == 0) {
    expect(t, "#stablehlo.dot<");
    while (!accept(t, ">")) {
      const char* k = ident(t);
      expect(t, "=");
      int at = strstr(k, "batching") ? 0 : 2;
      at += strncmp(k, "rhs", 3) == 0;
      a->nlist[at] = int_list(t, a->lists[at], PROG_MAX_RANK);
      accept(t, ",");
    }
  } else {
    /* an attribute this reader does not need (precision, compare_type, result_info...) */
    skip_space(t);
    while (t->p < t->end && *t->p != ',' && *t->p != '}' && *t->p != ':' && *t->p != '\n') {
      if (strchr("([{<\"", *t->p)) {
        if (*t->p == '"') {
          char where[128];
          snprintf(where, sizeof where, "%s's attribute ", t->v.op);
          t->p++;
          skip_string(t, where, key);
        }
        else skip_group(t);
      } else {
        t->p++;
      }
    }
  }
}

static void attr_dict(tx* t, op_args* a) {
  if (!accept(t, "{")) return;
  while (!accept(t, "}")) {
    const char* key = ident(t);
    if (accept(t, "=")) attribute(t, a, key);
    accept(t, ",");
  }
}

/* The ops the text reader lowers besides the elementwise ones of prog_ops_table.h, each
 * checking its operands and attributes and filling `in` (whose results are typed). */
typedef void (*text_lower_fn)(tx* t, prog_insn* in, const op_args* a);

static const prog_shape* operand0(tx* t, const op_args* a) {
  return a->num_in > 0 ? &t->f->values[a->in[0]] : NULL;
}

static void text_constant(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  in->op = OP_CONSTANT;
  check(v, a->has_dense && a->num_in == 0 && same_dims(&a->dense_shape, &in->shape) &&
               a->dense_shape.dtype == in->shape.dtype, "constant value and type differ");
  in->data = a->dense;
}

static void text_convert(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  const prog_shape* x = operand0(t, a);
  in->op = OP_CONVERT;
  check(v, a->num_in == 1 && same_dims(x, &in->shape), "convert shapes");
}

static void text_reshape(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  const prog_shape* x = operand0(t, a);
  in->op = OP_RESHAPE;
  check(v, a->num_in == 1 && prog_shape_elements(x) == prog_shape_elements(&in->shape) &&
               x->dtype == in->shape.dtype, "reshape changes the element count or type");
}

static void text_broadcast_in_dim(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  const prog_shape* x = operand0(t, a);
  in->op = OP_BROADCAST;
  check(v, a->num_in == 1 && a->nlist[0] == x->rank && x->dtype == in->shape.dtype, "broadcast operand");
  memcpy(in->p[0], a->lists[0], sizeof a->lists[0]);
  in->np[0] = a->nlist[0];
  check_dims_list(v, in->p[0], in->np[0], in->shape.rank, true);
  for (int d = 0; d < x->rank; d++)
    check(v, x->dims[d] == 1 || x->dims[d] == in->shape.dims[in->p[0][d]], "broadcast sizes");
}

static void text_transpose(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  const prog_shape* x = operand0(t, a);
  in->op = OP_TRANSPOSE;
  check(v, a->num_in == 1 && a->nlist[0] == x->rank && x->rank == in->shape.rank &&
               x->dtype == in->shape.dtype, "transpose permutation");
  memcpy(in->p[0], a->lists[0], sizeof a->lists[0]);
  in->np[0] = a->nlist[0];
  check_dims_list(v, in->p[0], in->np[0], x->rank, true);
  for (int d = 0; d < x->rank; d++) check(v, in->shape.dims[d] == x->dims[in->p[0][d]], "transpose shape");
}

static void text_iota(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  in->op = OP_IOTA;
  check(v, a->num_in == 0 && a->iota_dim >= 0 && a->iota_dim < in->shape.rank, "iota dimension");
  check(v, in->shape.dtype != PROG_PRED && is_arithmetic(in->shape.dtype), "iota type");
  in->iarg = (int)a->iota_dim;
}

static void text_compare(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  prog_func* f = t->f;
  const prog_shape* x = operand0(t, a);
  in->op = OP_COMPARE;
  check(v, a->num_in == 2 && a->cmp >= 0 && in->shape.dtype == PROG_PRED, "compare");
  const prog_shape* y = &f->values[a->in[1]];
  check(v, same_dims(x, &in->shape) && same_dims(y, &in->shape) && x->dtype == y->dtype &&
               is_arithmetic(x->dtype), "compare operands");
  in->iarg = a->cmp;
}

static void text_select(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  prog_func* f = t->f;
  const prog_shape* x = operand0(t, a);
  in->op = OP_SELECT;
  check(v, a->num_in == 3, "select operands");
  const prog_shape *tr = &f->values[a->in[1]], *fa = &f->values[a->in[2]];
  check(v, x->dtype == PROG_PRED && (x->rank == 0 || same_dims(x, &in->shape)) &&
               same_dims(tr, &in->shape) && same_dims(fa, &in->shape) &&
               tr->dtype == in->shape.dtype && fa->dtype == in->shape.dtype, "select types");
}

static void text_dot_general(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  prog_func* f = t->f;
  const prog_shape* x = operand0(t, a);
  in->op = OP_DOT;
  check(v, a->num_in == 2, "dot_general operands");
  const prog_shape* y = &f->values[a->in[1]];
  for (int r = 0; r < 4; r++) {
    memcpy(in->p[r], a->lists[r], sizeof a->lists[r]);
    in->np[r] = a->nlist[r];
    check_dims_list(v, in->p[r], in->np[r], (r % 2 == 0 ? x : y)->rank, true);
  }
  for (int r = 0; r < 3; r++) {
    prog_dtype dt = r == 0 ? x->dtype : r == 1 ? y->dtype : in->shape.dtype;
    check(v, is_arithmetic(dt) && dt != PROG_PRED, "dot element type");
  }
  prog_check_dot_shapes(v, in, x, y);
}

static void text_call(tx* t, prog_insn* in, const op_args* a) {
  vh* v = &t->v;
  in->op = OP_CALL;
  int callee = a->callee ? find_func(t->v.program, a->callee) : -1;
  if (callee < 0) MALFORMED(v, "malformed MLIR text at line %d: call of unknown function", t->line);
  in->iarg = callee;
}

static const struct {
  const char* name;   /* without "stablehlo." */
  text_lower_fn lower;
} text_ops[] = {
    {"constant", text_constant},   {"convert", text_convert},
    {"reshape", text_reshape},     {"broadcast_in_dim", text_broadcast_in_dim},
    {"transpose", text_transpose}, {"iota", text_iota},
    {"compare", text_compare},     {"select", text_select},
    {"dot_general", text_dot_general},
};

/* The lowering of op `full` (`name`: without "stablehlo."), or NULL when it is not one of
 * text_ops (an elementwise op, or unsupported).  A call is func.call, or call. */
static text_lower_fn text_lowering(const char* full, const char* name) {
  if (!strcmp(full, "func.call") || !strcmp(full, "call")) return text_call;
  for (size_t k = 0; k < sizeof text_ops / sizeof text_ops[0]; k++)
    if (!strcmp(text_ops[k].name, name)) return text_ops[k].lower;
  return NULL;
}

/* Lowers one op into the next instruction.  `res` are the result names. */
static void text_op(tx* t, const char** res, int nres) {
  prog_func* f = t->f;
  op_args a = {.cmp = -1};
  bool generic = peek(t, "\"");
  if (generic) t->p++;
  const char* full = ident(t);
  if (generic) expect(t, "\"");
  snprintf(t->opname, sizeof t->opname, "%s", full);
  t->v.op = t->opname;
  const char* name = strncmp(full, "stablehlo.", 10) == 0 ? full + 10 : full;
  char vname[80];
  snprintf(vname, sizeof vname, "%s_v1", name);
  int ar = 0, code = vh_elementwise(vname, &ar);
  text_lower_fn lower = code >= 0 ? NULL : text_lowering(full, name);
  if (code < 0 && lower == NULL)
    TFAIL(t, PROG_UNIMPLEMENTED, "unsupported op %s at line %d of the MLIR text (the text reader "
          "runs elementwise and shape ops; send the portable artifact for the rest)", full, t->line);
  /* operands and attributes, up to the ':' of the type */
  if (generic) {
    expect(t, "(");
    if (!accept(t, ")")) {
      do {
        if (a.num_in == 16) TFAIL(t, PROG_UNIMPLEMENTED, "too many operands at line %d", t->line);
        a.in[a.num_in++] = lookup_value(t, value_name(t));
      } while (accept(t, ","));
      expect(t, ")");
    }
  } else {
    if (lower == text_call) {
      expect(t, "@");
      a.callee = symbol(t);
      expect(t, "(");
      if (!accept(t, ")")) {
        do a.in[a.num_in++] = lookup_value(t, value_name(t));
        while (a.num_in < 16 && accept(t, ","));
        expect(t, ")");
      }
    } else {
      for (;;) {
        skip_space(t);
        if (t->p >= t->end || *t->p == ':' || *t->p == '{' || *t->p == '\n') break;
        if (*t->p == '%') {
          if (a.num_in == 16) TFAIL(t, PROG_UNIMPLEMENTED, "too many operands at line %d", t->line);
          a.in[a.num_in++] = lookup_value(t, value_name(t));
        } else if (peek(t, "dense<")) {
          attribute(t, &a, "value");
          break;
        } else if (!strcmp(name, "compare") && isupper((unsigned char)*t->p) && a.cmp < 0) {
          a.cmp = direction(t);
        } else if (isalpha((unsigned char)*t->p)) {
          const char* key = ident(t);
          if (accept(t, "=")) attribute(t, &a, key);
        } else {
          TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d near '%.*s'", t->line,
                quote_len(t, 20), t->p);
        }
        accept(t, ",");
      }
    }
  }
  /* generic attribute dictionaries: <{...}> (properties) or {...} */
  if (peek(t, "<{")) { t->p++; attr_dict(t, &a); expect(t, ">"); }
  attr_dict(t, &a);
  prog_shape ins[16], outs[16];
  int nin = 0, nout;
  if (a.has_dense && !generic) {
    nout = 1;
    outs[0] = a.dense_shape;
  } else {
    expect(t, ":");
    nout = func_type(t, ins, &nin, outs, 16);
  }
  skip_loc(t);
  if (nout != nres)
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: %d results named, %d typed", t->line, nres, nout);
  if (nin > 0 && nin != a.num_in)
    TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: operand types", t->line);
  for (int k = 0; k < nin; k++)
    check(&t->v, same_dims(&ins[k], &f->values[a.in[k]]) && ins[k].dtype == f->values[a.in[k]].dtype,
          "operand type differs from the value's");
  /* build the instruction with its results as new values */
  prog_insn* in = &f->insns[f->num_insns++];
  in->vhlo_name = prog_alloc(t->v.ctx, strlen(full) + 1, 1);
  strcpy((char*)in->vhlo_name, full);
  in->num_in = a.num_in;
  in->in = prog_alloc(t->v.ctx, (size_t)a.num_in + 1, sizeof(int));
  memcpy(in->in, a.in, (size_t)a.num_in * sizeof(int));
  in->num_out = nout;
  in->out = f->num_values;
  for (int k = 0; k < nout; k++) new_value(t, res[k], outs[k]);
  in->shape = outs[0];
  vh* v = &t->v;
  if (lower != text_call && nout != 1)
    TFAIL(t, PROG_UNIMPLEMENTED, "unsupported: %s with %d results", full, nout);
  if (code >= 0) {
    in->op = (prog_opcode)code;
    check(v, a.num_in == ar, "wrong operand count");
    for (int k = 0; k < ar; k++)
      check(v, same_dims(&f->values[a.in[k]], &in->shape) && f->values[a.in[k]].dtype == in->shape.dtype,
            "operand and result types differ");
    /* from the op's classes in prog_ops_table.h, coarser than the bytecode reader's check:
     * bit ops refuse floats, ops on floats and integers take any number, the rest floats */
    unsigned allowed = prog_ew_allowed(in->op);
    bool bits = !(allowed & EW_FLOATS);
    bool any = (allowed & EW_FLOATS) && (allowed & EW_INTS);
    if (!is_arithmetic(in->shape.dtype) || (bits && is_float(in->shape.dtype)) ||
        (!bits && !any && !is_float(in->shape.dtype)))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(in->shape.dtype), full);
    if ((allowed & EW_NO_S4) && in->shape.dtype == PROG_S4) UNSUPPORTED(v, S4_POPCNT_REFUSED, full);
  } else {
    lower(t, in, &a);
  }
  for (int k = 0; k < nout; k++) t->defined[in->out + k] = true;
}

/* ---- functions -------------------------------------------------------------------------- */

/* Skips a function (used on the first pass, which only counts and names functions). */
static void skip_braced(tx* t) {
  skip_space(t);
  if (t->p >= t->end || *t->p != '{') TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text at line %d: expected '{'", t->line);
  skip_group(t);
}

/* The generic form: "func.func"() <{... sym_name = "main" ...}> ({ ^bb0(%a: T, ...): */
static void skip_braced(tx* t);

/* Skips a function body (pass 1): braces in the pretty form; up to the block's closing "})"
 * and the op's type in the generic form. */
static void skip_body(tx* t) {
  if (!t->generic) {
    skip_braced(t);
    return;
  }
  int depth = 2;  /* inside the "({" */
  while (t->p < t->end && depth > 0) {
    char c = *t->p++;
    if (c == '\n') t->line++;
    if (c == '"') skip_string(t, "the body of a generic func.func", "");
    else if (c == '{' || c == '(' || c == '[') depth++;
    else if (c == '}' || c == ')' || c == ']') depth--;
  }
  expect(t, ":");
  expect(t, "()");
  expect(t, "->");
  expect(t, "()");
  skip_loc(t);
}

/* Whether an argument's attribute dictionary (the text from `a` to `b`) donates its buffer:
 * `tf.aliasing_output = N` or `jax.buffer_donor = true`, as jax writes them. */
static bool span_has(const char* a, const char* b, const char* word) {
  size_t n = strlen(word);
  for (const char* q = a; q + n <= b; q++)
    if (memcmp(q, word, n) == 0) return true;
  return false;
}

static bool span_donates(const char* a, const char* b) {
  return span_has(a, b, "tf.aliasing_output") || span_has(a, b, "jax.buffer_donor = true");
}

static void mark_donated(tx* t, prog_func* f, int arg) {
  if (f->donated == NULL) f->donated = prog_alloc(t->v.ctx, (size_t)t->max_values, 1);
  if (arg >= 0 && arg < t->max_values) f->donated[arg] = 1;
}

/* The generic form's `arg_attrs = [{...}, {...}]`: one dictionary per argument, in order. */
static void generic_donors(tx* t, prog_func* f, const char* a, const char* b) {
  int depth = 0, arg = -1;
  const char* start = NULL;
  bool quoted = false;
  for (const char* q = a; q < b; q++) {
    if (quoted) {
      if (*q == '\\' && q + 1 < b) q++;
      else if (*q == '"') quoted = false;
      continue;
    }
    if (*q == '"') quoted = true;
    else if (*q == '{' && depth++ == 1) { arg++; start = q; }
    else if (*q == '[' || *q == '(' || *q == '<') depth++;
    else if ((*q == '}' || *q == ']' || *q == ')' || *q == '>') && --depth == 1 && *q == '}' &&
             start != NULL && span_donates(start, q))
      mark_donated(t, f, arg);
  }
}

static void read_generic_signature(tx* t, prog_func* f, bool define) {
  t->v.op = "func.func";  /* its attributes' messages name it, not the last op read */
  expect(t, "()");
  expect(t, "<{");
  const char *arg_attrs = NULL, *arg_attrs_end = NULL;
  while (!accept(t, "}")) {
    const char* key = ident(t);
    expect(t, "=");
    if (strcmp(key, "sym_name") == 0) {
      skip_space(t);
      f->name = symbol(t);
    } else if (strcmp(key, "arg_attrs") == 0) {
      skip_space(t);
      arg_attrs = t->p;
      skip_group(t);
      arg_attrs_end = t->p;
    } else {
      op_args ignored;
      attribute(t, &ignored, key);
    }
    accept(t, ",");
  }
  expect(t, ">");
  expect(t, "({");
  expect(t, "^bb0(");
  if (!accept(t, ")")) {
    do {
      const char* n = value_name(t);
      expect(t, ":");
      prog_shape s = tensor(t);
      skip_loc(t);
      if (define) {
        int id = new_value(t, n, s);
        t->defined[id] = true;
        f->num_args++;
      }
    } while (accept(t, ","));
    expect(t, ")");
  }
  if (define && arg_attrs != NULL) generic_donors(t, f, arg_attrs, arg_attrs_end);
  expect(t, ":");
  if (!f->name) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: func.func without sym_name");
}

static void read_signature(tx* t, prog_func* f, bool define) {
  if (t->generic) {
    read_generic_signature(t, f, define);
    return;
  }
  accept(t, "public");
  accept(t, "private");
  expect(t, "@");
  f->name = symbol(t);
  expect(t, "(");
  if (!accept(t, ")")) {
    do {
      const char* n = value_name(t);
      expect(t, ":");
      prog_shape s = tensor(t);
      if (peek(t, "{")) {
        const char* attrs = t->p;
        skip_group(t);
        if (define && span_donates(attrs, t->p)) mark_donated(t, f, f->num_args);
      }
      skip_loc(t);
      if (define) {
        int id = new_value(t, n, s);
        t->defined[id] = true;
        f->num_args++;
      }
    } while (accept(t, ","));
    expect(t, ")");
  }
  if (accept(t, "->")) {
    if (accept(t, "(")) {
      if (!accept(t, ")")) {
        do {
          tensor(t);
          if (peek(t, "{")) skip_group(t);
        } while (accept(t, ","));
        expect(t, ")");
      }
    } else {
      tensor(t);
    }
  }
  if (accept(t, "attributes")) skip_group(t);
}

static void read_body(tx* t, prog_func* f) {
  if (!t->generic) expect(t, "{");
  for (;;) {
    skip_space(t);
    if (accept(t, "}")) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: function %s has no return", f->name);
    if (accept(t, "return") || accept(t, "func.return") || accept(t, "stablehlo.return") ||
        accept(t, "\"func.return\"")) {
      int ids[64], n = 0;
      bool paren = accept(t, "(");
      while (peek(t, "%")) {
        if (n == 64) TFAIL(t, PROG_UNIMPLEMENTED, "more than 64 results");
        ids[n++] = lookup_value(t, value_name(t));
        if (!accept(t, ",")) break;
      }
      if (paren) expect(t, ")");
      if (accept(t, ":")) {
        prog_shape ins[64], outs[64];
        int nin;
        if (paren || peek(t, "(")) func_type(t, ins, &nin, outs, 64);
        else for (int k = 0; k < n; k++) { tensor(t); accept(t, ","); }
      }
      skip_loc(t);
      if (t->generic) {
        expect(t, "})");
        expect(t, ":");
        expect(t, "()");
        expect(t, "->");
        expect(t, "()");
        skip_loc(t);
      } else {
        expect(t, "}");
      }
      f->num_results = n;
      f->results = prog_alloc(t->v.ctx, (size_t)n + 1, sizeof(int));
      memcpy(f->results, ids, (size_t)n * sizeof(int));
      return;
    }
    const char* res[16];
    int nres = 0;
    while (peek(t, "%")) {
      const char* n = value_name(t);
      if (accept(t, ":")) {  /* %0:2 = ... */
        TFAIL(t, PROG_UNIMPLEMENTED, "unsupported: ops with several results in MLIR text (line %d)", t->line);
      }
      if (nres == 16) TFAIL(t, PROG_UNIMPLEMENTED, "too many results at line %d", t->line);
      res[nres++] = n;
      if (!accept(t, ",")) break;
    }
    if (nres > 0) expect(t, "=");
    if (f->num_insns >= t->max_values) TFAIL(t, PROG_INVALID_ARGUMENT, "malformed MLIR text: too many ops");
    text_op(t, res, nres);
  }
}

static bool next_func(tx* t) {
  for (;;) {
    skip_space(t);
    if (t->p >= t->end) return false;
    if (!peek(t, "})") && accept(t, "}")) continue;  /* the module's end */
    if (peek(t, "loc(")) { skip_loc(t); continue; }
    if (accept(t, "func.func")) { t->generic = false; return true; }
    if (accept(t, "\"func.func\"")) { t->generic = true; return true; }
    if (accept(t, "\"builtin.module\"")) {
      expect(t, "()");
      if (peek(t, "<{")) { t->p++; skip_group(t); expect(t, ">"); }
      expect(t, "({");
      continue;
    }
    if (accept(t, "})")) {  /* the end of a generic module: attributes, then its type */
      if (peek(t, "{")) skip_group(t);
      expect(t, ":");
      expect(t, "()");
      expect(t, "->");
      expect(t, "()");
      continue;
    }
    if (accept(t, "module")) {
      if (peek(t, "@")) { t->p++; t->v.program->name = ident(t); }
      if (accept(t, "attributes")) skip_group(t);
      expect(t, "{");
      continue;
    }
    if (accept(t, "sdy.mesh")) {  /* sharding meshes mean nothing on one device */
      while (t->p < t->end && *t->p != '\n') t->p++;
      continue;
    }
    if (peek(t, "#")) {  /* attribute aliases */
      while (t->p < t->end && *t->p != '\n') t->p++;
      continue;
    }
    TFAIL(t, PROG_UNIMPLEMENTED, "unsupported top-level text at line %d: '%.*s'", t->line,
          quote_len(t, 30), t->p);
  }
}

void prog_text_parse(prog_ctx* ctx, const char* bytes, size_t size, prog_program* p) {
  /* a NUL-terminated copy: strtoll and strtod read digits until a non-digit, which the
   * caller's bytes need not have after their last digit (`tensor<12` as the whole text) */
  char* text = prog_alloc(ctx, size + 1, 1);
  memcpy(text, bytes, size);
  text[size] = 0;
  tx t = {.v = {ctx, NULL, -1, -1, p, "MLIR text"}, .p = text, .end = text + size, .line = 1};
  p->name = "module";
  /* bounds: values and ops per function are at most the '%' count plus one */
  int64_t percents = 1;
  for (size_t k = 0; k < size; k++) percents += text[k] == '%';
  if (percents > (1 << 22)) TFAIL(&t, PROG_RESOURCE_EXHAUSTED, "MLIR text too large");
  t.max_values = (int)percents;
  /* pass 1: the functions' names, so calls can refer to functions defined later */
  int nf = 0;
  while (next_func(&t)) {
    prog_func scratch = {0};
    read_signature(&t, &scratch, false);
    skip_body(&t);
    nf++;
  }
  if (nf == 0) TFAIL(&t, PROG_INVALID_ARGUMENT, "malformed MLIR text: no func.func");
  p->num_funcs = nf;
  p->funcs = prog_alloc(ctx, (size_t)nf, sizeof(prog_func));
  t.p = text;
  t.line = 1;
  for (int k = 0; k < nf; k++) {
    next_func(&t);
    read_signature(&t, &p->funcs[k], false);
    skip_body(&t);
  }
  /* pass 2: bodies */
  t.p = text;
  t.line = 1;
  for (int k = 0; k < nf; k++) {
    next_func(&t);
    prog_func* f = &p->funcs[k];
    t.f = f;
    f->values = prog_alloc(ctx, (size_t)t.max_values, sizeof(prog_shape));
    f->insns = prog_alloc(ctx, (size_t)t.max_values, sizeof(prog_insn));
    t.names = prog_alloc(ctx, (size_t)t.max_values, sizeof(char*));
    t.defined = prog_alloc(ctx, (size_t)t.max_values, sizeof(bool));
    f->num_values = f->num_args = f->num_insns = 0;
    read_signature(&t, f, true);
    read_body(&t, f);
    vh_finish_func(&t.v, f);
  }
  p->main = find_func(p, "main");
  if (p->main < 0) TFAIL(&t, PROG_INVALID_ARGUMENT, "malformed MLIR text: no function named main");
  /* calls: arity and types, and no recursion (checked as for bytecode) */
  for (int k = 0; k < nf; k++) {
    prog_func* f = &p->funcs[k];
    for (int i = 0; i < f->num_insns; i++) {
      prog_insn* in = &f->insns[i];
      if (in->op != OP_CALL) continue;
      prog_func* c = &p->funcs[in->iarg];
      t.v.op = in->vhlo_name;
      check(&t.v, in->iarg != k && in->num_in == c->num_args && in->num_out == c->num_results,
            "call arity differs from the callee's");
      for (int r = 0; r < in->num_in; r++)
        check(&t.v, same_dims(&f->values[in->in[r]], &c->values[r]) &&
                        f->values[in->in[r]].dtype == c->values[r].dtype, "call argument types");
      for (int r = 0; r < in->num_out; r++)
        check(&t.v, same_dims(&f->values[in->out + r], &c->values[c->results[r]]) &&
                        f->values[in->out + r].dtype == c->values[c->results[r]].dtype, "call result types");
    }
  }
}
