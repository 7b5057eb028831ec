/* prog_bytecode.c -- the MLIR bytecode container, read from untrusted bytes.
 *
 * Written from the public "MLIR Bytecode Format" document.  The container is dialect-agnostic:
 * it yields strings, dialect and op names, the still-encoded attributes and types, and the IR
 * as a tree of generic operations whose operands are value numbers.  What the ops and
 * attributes mean is prog_vhlo.c's business.
 *
 * Supported: bytecode versions 5 and 6 (what StableHLO 1.x portable artifacts use).  Every read
 * is bounds-checked; every count is checked against the bytes left before anything is
 * allocated; nesting is bounded; failures throw (prog_fail) with INVALID_ARGUMENT.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_internal.h"

/* ---- arena and errors ------------------------------------------------------------------- */

struct prog_chunk {
  prog_chunk* next;
  max_align_t data[];
};

/* A parse never needs more than a small multiple of its input; this bound keeps a hostile
 * artifact from asking for gigabytes through large-but-plausible counts. */
#define PROG_ARENA_LIMIT ((size_t)1 << 30)

void prog_fail(prog_ctx* ctx, int code, const char* fmt, ...) {
  if (ctx->status != NULL) {
    va_list ap;
    va_start(ap, fmt);
    ctx->status->code = code;
    vsnprintf(ctx->status->message, sizeof ctx->status->message, fmt, ap);
    va_end(ap);
    /* names quoted from a damaged artifact may hold any bytes: keep messages printable ASCII,
     * so they survive every consumer (jaxlib turns them into Python strings) */
    for (char* m = ctx->status->message; *m; m++)
      if (*m < 0x20 || *m > 0x7e) *m = '?';
  }
  longjmp(ctx->on_error, 1);
}

void* prog_alloc(prog_ctx* ctx, size_t n, size_t size) {
  if (size != 0 && n > (PROG_ARENA_LIMIT - ctx->allocated) / size)
    prog_fail(ctx, PROG_RESOURCE_EXHAUSTED, "program too large (arena limit %zu bytes)",
              (size_t)PROG_ARENA_LIMIT);
  size_t bytes = n * size;
  prog_chunk* chunk = calloc(1, sizeof(prog_chunk) + bytes + 1);
  if (chunk == NULL) prog_fail(ctx, PROG_RESOURCE_EXHAUSTED, "out of memory reading program");
  chunk->next = ctx->chunks;
  ctx->chunks = chunk;
  ctx->allocated += bytes;
  return chunk->data;
}

void prog_arena_free(prog_chunk* chunks) {
  while (chunks != NULL) {
    prog_chunk* next = chunks->next;
    free(chunks);
    chunks = next;
  }
}

/* ---- primitive reads -------------------------------------------------------------------- */

static _Noreturn void truncated(bc_cursor* c) {
  prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: truncated while reading %s",
            c->what);
}

uint8_t bc_byte(bc_cursor* c) {
  if (c->p >= c->end) truncated(c);
  return *c->p++;
}

const uint8_t* bc_bytes(bc_cursor* c, size_t n) {
  if ((size_t)(c->end - c->p) < n) truncated(c);
  const uint8_t* start = c->p;
  c->p += n;
  return start;
}

/* PrefixVarInt: the number of trailing zero bits of the first byte is the number of extra
 * bytes; a first byte of 0 means eight full bytes follow. */
uint64_t bc_varint(bc_cursor* c) {
  uint8_t first = bc_byte(c);
  if (first & 1) return first >> 1;
  if (first == 0) {
    const uint8_t* b = bc_bytes(c, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
  }
  int extra = __builtin_ctz(first);
  const uint8_t* b = bc_bytes(c, (size_t)extra);
  uint64_t v = first;
  for (int i = 0; i < extra; i++) v |= (uint64_t)b[i] << (8 * (i + 1));
  return v >> (extra + 1);
}

int64_t bc_svarint(bc_cursor* c) {
  uint64_t v = bc_varint(c);
  return (int64_t)((v >> 1) ^ (~(v & 1) + 1));  /* zigzag */
}

uint64_t bc_count(bc_cursor* c, size_t min_item_bytes) {
  uint64_t n = bc_varint(c);
  if (min_item_bytes > 0 && n > (uint64_t)(c->end - c->p) / min_item_bytes)
    prog_fail(c->ctx, PROG_INVALID_ARGUMENT,
              "malformed bytecode: %s count %llu exceeds the bytes left", c->what,
              (unsigned long long)n);
  return n;
}

/* A varint carrying a flag in its low bit. */
static uint64_t varint_flag(bc_cursor* c, bool* flag) {
  uint64_t v = bc_varint(c);
  *flag = v & 1;
  return v >> 1;
}

static int index_below(bc_cursor* c, uint64_t limit, const char* table) {
  uint64_t i = bc_varint(c);
  if (i >= limit)
    prog_fail(c->ctx, PROG_INVALID_ARGUMENT,
              "malformed bytecode: %s index %llu out of range (%llu entries) in %s", table,
              (unsigned long long)i, (unsigned long long)limit, c->what);
  return (int)i;
}

/* ---- sections --------------------------------------------------------------------------- */

enum { SEC_STRING, SEC_DIALECT, SEC_ATTR_TYPE, SEC_ATTR_TYPE_OFFSET, SEC_IR, SEC_RESOURCE,
       SEC_RESOURCE_OFFSET, SEC_DIALECT_VERSIONS, SEC_PROPERTIES, SEC_COUNT };

/* Reads a section header and returns a cursor over its data.  `base` is the start of the
 * artifact: alignment padding (0xCB bytes) is relative to it. */
static bc_cursor section(bc_cursor* c, const uint8_t* base, int* id) {
  uint8_t id_and_align = bc_byte(c);
  uint64_t length = bc_varint(c);
  *id = id_and_align & 0x7f;
  if (id_and_align & 0x80) {
    uint64_t alignment = bc_varint(c);
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096)
      prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: section alignment %llu",
                (unsigned long long)alignment);
    while ((size_t)(c->p - base) % alignment != 0)
      if (bc_byte(c) != 0xCB)
        prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: bad section padding");
  }
  if (length > (uint64_t)(c->end - c->p)) truncated(c);
  bc_cursor s = {c->p, c->p + length, c->ctx, c->what};
  c->p += length;
  return s;
}

/* strings { count; lengths in reverse order (each counts its NUL); the NUL-terminated data } */
static void read_strings(bc_module* m, bc_cursor c) {
  c.what = "string section";
  m->num_strings = (int)bc_count(&c, 2);
  m->strings = prog_alloc(c.ctx, (size_t)m->num_strings, sizeof(char*));
  size_t* lengths = prog_alloc(c.ctx, (size_t)m->num_strings, sizeof(size_t));
  for (int i = m->num_strings - 1; i >= 0; i--) lengths[i] = bc_varint(&c);
  const uint8_t* end = c.end;  /* the data sits at the end of the section */
  for (int i = m->num_strings - 1; i >= 0; i--) {
    if (lengths[i] == 0 || lengths[i] > (size_t)(end - c.p))
      prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: string %d length", i);
    end -= lengths[i];
    if (end[lengths[i] - 1] != 0)
      prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: string %d not terminated", i);
    m->strings[i] = (const char*)end;
  }
}

/* dialect { names (with a version flag); op count; per-dialect groups of op names } */
static void read_dialects(bc_module* m, bc_cursor c, const uint8_t* base) {
  c.what = "dialect section";
  m->num_dialects = (int)bc_count(&c, 1);
  m->dialects = prog_alloc(c.ctx, (size_t)m->num_dialects, sizeof(char*));
  for (int i = 0; i < m->num_dialects; i++) {
    bool versioned;
    uint64_t name = varint_flag(&c, &versioned);
    if (name >= (uint64_t)m->num_strings)
      prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: dialect name index");
    m->dialects[i] = m->strings[name];
    if (versioned) {  /* a nested section holding the dialect's version: not needed here */
      int id;
      section(&c, base, &id);
      if (id != SEC_DIALECT_VERSIONS)
        prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: dialect version section");
    }
  }
  m->num_op_names = (int)bc_count(&c, 1);
  m->op_names = prog_alloc(c.ctx, (size_t)m->num_op_names, sizeof(bc_op_name));
  int filled = 0;
  while (c.p < c.end) {
    int dialect = index_below(&c, (uint64_t)m->num_dialects, "dialect");
    uint64_t n = bc_count(&c, 1);
    for (uint64_t k = 0; k < n; k++) {
      if (filled >= m->num_op_names)
        prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: more op names than declared");
      bool registered;
      uint64_t name = varint_flag(&c, &registered);
      if (name >= (uint64_t)m->num_strings)
        prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: op name index");
      m->op_names[filled].dialect = dialect;
      m->op_names[filled].name = m->strings[name];
      filled++;
    }
  }
  if (filled != m->num_op_names)
    prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: %d op names, %d declared",
              filled, m->num_op_names);
}

/* offsets { numAttrs; numTypes; groups (dialect, count, (size << 1 | custom)...) } over the
 * attribute/type data section: entries are consecutive slices of it. */
static void read_attr_types(bc_module* m, bc_cursor data, bc_cursor c) {
  c.what = "attribute/type offset section";
  m->num_attrs = (int)bc_count(&c, 0);
  m->num_types = (int)bc_count(&c, 0);
  if ((uint64_t)m->num_attrs + (uint64_t)m->num_types > (uint64_t)(c.end - c.p))
    prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: attribute/type counts");
  m->attrs = prog_alloc(c.ctx, (size_t)m->num_attrs, sizeof(bc_entry));
  m->types = prog_alloc(c.ctx, (size_t)m->num_types, sizeof(bc_entry));
  const uint8_t* at = data.p;
  for (int pass = 0; pass < 2; pass++) {
    bc_entry* table = pass == 0 ? m->attrs : m->types;
    int n = pass == 0 ? m->num_attrs : m->num_types;
    int filled = 0;
    while (filled < n) {
      int dialect = index_below(&c, (uint64_t)m->num_dialects, "dialect");
      uint64_t count = bc_count(&c, 1);
      if (count > (uint64_t)(n - filled))
        prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: attribute/type group size");
      for (uint64_t k = 0; k < count; k++) {
        bool custom;
        uint64_t size = varint_flag(&c, &custom);
        if (size > (uint64_t)(data.end - at))
          prog_fail(c.ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: attribute/type size");
        table[filled++] = (bc_entry){at, (size_t)size, dialect, custom};
        at += size;
      }
    }
  }
}

/* properties { count; records (size, data)... } */
static void read_properties(bc_module* m, bc_cursor c) {
  c.what = "properties section";
  m->num_props = (int)bc_count(&c, 1);
  m->props = prog_alloc(c.ctx, (size_t)m->num_props, sizeof(uint8_t*));
  for (int i = 0; i < m->num_props; i++) {
    m->props[i] = c.p;
    bc_bytes(&c, bc_varint(&c));
  }
  m->props_end = c.end;
}

bc_cursor bc_props(const bc_module* m, int i) {
  bc_cursor c = {m->props[i], m->props_end, m->ctx, "op properties"};
  uint64_t size = bc_varint(&c);
  c.end = c.p + size;  /* checked when the section was read */
  return c;
}

/* ---- the IR ----------------------------------------------------------------------------- */

/* Values are numbered per isolated-from-above scope: a region reserves `num_values` slots
 * after everything its enclosing regions reserved, and its block arguments and op results
 * take them in order. */
typedef struct {
  bc_module* m;
  const uint8_t* base;
  int scope_size;   /* slots reserved in the current scope */
  int next_value;   /* next slot to define in the current region */
  int region_end;   /* one past the current region's slots */
  int region_values;/* slots the current region declared (0: results are not numbered) */
  int depth;
} ir_state;

#define BC_MAX_DEPTH 32

static void read_region(ir_state* s, bc_cursor* c, bc_region* r);

static int define_values(ir_state* s, bc_cursor* c, int n) {
  if (n > s->region_end - s->next_value)
    prog_fail(c->ctx, PROG_INVALID_ARGUMENT,
              "malformed bytecode: region defines more values than it declared");
  int first = s->next_value;
  s->next_value += n;
  return first;
}

static void skip_use_list_orders(bc_cursor* c, uint64_t range) {
  uint64_t n = range > 1 ? bc_count(c, 1) : 1;
  for (uint64_t i = 0; i < n; i++) {
    if (range > 1) bc_varint(c);
    bool pairs;  /* index pairs or a full permutation: either way a list of varints */
    uint64_t k = varint_flag(c, &pairs);
    if (k > (uint64_t)(c->end - c->p))
      prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: use-list order count");
    for (uint64_t j = 0; j < k; j++) bc_varint(c);
  }
}

enum { HAS_ATTRS = 1, HAS_RESULTS = 2, HAS_OPERANDS = 4, HAS_SUCCESSORS = 8,
       HAS_REGIONS = 16, HAS_USE_LISTS = 32, HAS_PROPERTIES = 64 };

static void read_op(ir_state* s, bc_cursor* c, bc_op* op) {
  bc_module* m = s->m;
  op->name = index_below(c, (uint64_t)m->num_op_names, "op name");
  uint8_t mask = bc_byte(c);
  index_below(c, (uint64_t)m->num_attrs, "location");
  op->attrs = -1;
  if (mask & HAS_ATTRS) op->attrs = index_below(c, (uint64_t)m->num_attrs, "attribute");
  op->props = -1;
  if (mask & HAS_PROPERTIES) op->props = index_below(c, (uint64_t)m->num_props, "properties");
  if (mask & HAS_RESULTS) {
    op->num_results = (int)bc_count(c, 1);
    op->result_types = prog_alloc(c->ctx, (size_t)op->num_results, sizeof(int));
    for (int i = 0; i < op->num_results; i++)
      op->result_types[i] = index_below(c, (uint64_t)m->num_types, "type");
  }
  if (mask & HAS_OPERANDS) {
    op->num_operands = (int)bc_count(c, 1);
    op->operands = prog_alloc(c->ctx, (size_t)op->num_operands, sizeof(int));
    for (int i = 0; i < op->num_operands; i++)
      op->operands[i] = index_below(c, (uint64_t)s->scope_size, "value");
  }
  if (mask & HAS_SUCCESSORS) {
    uint64_t n = bc_count(c, 1);
    for (uint64_t i = 0; i < n; i++) bc_varint(c);
    if (n > 0)
      prog_fail(c->ctx, PROG_UNIMPLEMENTED,
                "unsupported: branches (op %s.%s has successors)",
                m->dialects[m->op_names[op->name].dialect], m->op_names[op->name].name);
  }
  if (mask & HAS_USE_LISTS) skip_use_list_orders(c, (uint64_t)op->num_results);
  /* results are defined before the op's regions are read (the writer numbers them so) */
  op->first_result = s->region_values > 0 ? define_values(s, c, op->num_results) : -1;
  if (!(mask & HAS_REGIONS)) return;

  bool isolated;
  uint64_t n = varint_flag(c, &isolated);
  if (n > (uint64_t)(c->end - c->p))
    prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: region count");
  op->isolated = isolated;
  op->num_regions = (int)n;
  op->regions = prog_alloc(c->ctx, n, sizeof(bc_region));
  if (++s->depth > BC_MAX_DEPTH)
    prog_fail(c->ctx, PROG_UNIMPLEMENTED, "unsupported: regions nested deeper than %d",
              BC_MAX_DEPTH);
  if (isolated) {
    /* The regions of an op isolated from above are written together, in one nested IR
     * section, and share a fresh value scope (each region's values start where the scope
     * does, as siblings do).  Reading one section per region misread every such op with two
     * regions or more (select_and_scatter's select and scatter): the first region's section
     * ended with the second region's bytes, "trailing region bytes". */
    int id;
    bc_cursor inner = section(c, s->base, &id);
    inner.what = "region section";
    if (id != SEC_IR)
      prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: expected an IR section");
    ir_state saved = *s;
    s->scope_size = s->next_value = s->region_end = s->region_values = 0;
    for (uint64_t i = 0; i < n; i++) read_region(s, &inner, &op->regions[i]);
    if (inner.p != inner.end)
      prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: trailing region bytes");
    saved.depth = s->depth;
    *s = saved;
  } else {
    for (uint64_t i = 0; i < n; i++) read_region(s, c, &op->regions[i]);
  }
  s->depth--;
}

static void read_block(ir_state* s, bc_cursor* c, bc_block* b) {
  bc_module* m = s->m;
  bool has_args;
  uint64_t n_ops = varint_flag(c, &has_args);
  if (n_ops > (uint64_t)(c->end - c->p))
    prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: op count");
  if (has_args) {
    b->num_args = (int)bc_count(c, 1);
    b->arg_types = prog_alloc(c->ctx, (size_t)b->num_args, sizeof(int));
    for (int i = 0; i < b->num_args; i++) {
      bool has_loc;
      uint64_t t = varint_flag(c, &has_loc);
      if (t >= (uint64_t)m->num_types)
        prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: argument type index");
      b->arg_types[i] = (int)t;
      if (has_loc) index_below(c, (uint64_t)m->num_attrs, "location");
    }
    int first = define_values(s, c, b->num_args);
    b->arg_values = prog_alloc(c->ctx, (size_t)b->num_args, sizeof(int));
    for (int i = 0; i < b->num_args; i++) b->arg_values[i] = first + i;
    if (bc_byte(c)) skip_use_list_orders(c, (uint64_t)b->num_args);
  }
  b->num_ops = (int)n_ops;
  b->ops = prog_alloc(c->ctx, n_ops, sizeof(bc_op));
  for (uint64_t i = 0; i < n_ops; i++) read_op(s, c, &b->ops[i]);
}

/* region { numBlocks; numValues (if any block); blocks } */
static void read_region(ir_state* s, bc_cursor* c, bc_region* r) {
  uint64_t n_blocks = bc_count(c, 1);
  r->num_blocks = (int)n_blocks;
  if (n_blocks == 0) return;
  uint64_t n_values = bc_varint(c);
  if (n_values > (uint64_t)(c->end - c->p) + 64 || n_values > (1u << 24))
    prog_fail(c->ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: value count");
  r->num_values = (int)n_values;
  int saved_next = s->next_value, saved_end = s->region_end, saved_size = s->scope_size;
  int saved_values = s->region_values;
  s->region_values = (int)n_values;
  s->next_value = s->scope_size;
  s->scope_size += (int)n_values;
  s->region_end = s->scope_size;
  r->blocks = prog_alloc(c->ctx, n_blocks, sizeof(bc_block));
  for (uint64_t i = 0; i < n_blocks; i++) read_block(s, c, &r->blocks[i]);
  s->next_value = saved_next;
  s->region_end = saved_end;
  s->scope_size = saved_size;
  s->region_values = saved_values;
}

/* ---- the whole artifact ----------------------------------------------------------------- */

int bc_dialect(const bc_module* m, const char* name) {
  for (int i = 0; i < m->num_dialects; i++)
    if (strcmp(m->dialects[i], name) == 0) return i;
  return -1;
}

bc_module* bc_read(prog_ctx* ctx, const uint8_t* bytes, size_t size) {
  bc_cursor c = {bytes, bytes + size, ctx, "header"};
  if (size < 4 || memcmp(bytes, "ML\xefR", 4) != 0)
    prog_fail(ctx, PROG_INVALID_ARGUMENT,
              "not MLIR bytecode: the program does not start with the magic 'ML\\xefR'");
  c.p += 4;
  bc_module* m = prog_alloc(ctx, 1, sizeof(bc_module));
  m->ctx = ctx;
  uint64_t version = bc_varint(&c);
  if (version < 5 || version > 6)
    prog_fail(ctx, PROG_UNIMPLEMENTED,
              "unsupported MLIR bytecode version %llu (this reader knows versions 5 and 6)",
              (unsigned long long)version);
  m->version = (int)version;
  const uint8_t* nul = memchr(c.p, 0, (size_t)(c.end - c.p));
  if (nul == NULL) truncated(&c);
  m->producer = (const char*)c.p;
  c.p = nul + 1;

  bc_cursor sections[SEC_COUNT];
  bool present[SEC_COUNT] = {false};
  c.what = "section header";
  while (c.p < c.end) {
    int id;
    bc_cursor s = section(&c, bytes, &id);
    if (id >= SEC_COUNT || present[id])
      prog_fail(ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: unknown or repeated section %d",
                id);
    present[id] = true;
    sections[id] = s;
  }
  const int required[] = {SEC_STRING, SEC_DIALECT, SEC_ATTR_TYPE, SEC_ATTR_TYPE_OFFSET, SEC_IR};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
    if (!present[required[i]])
      prog_fail(ctx, PROG_INVALID_ARGUMENT, "malformed bytecode: section %d missing",
                required[i]);

  read_strings(m, sections[SEC_STRING]);
  read_dialects(m, sections[SEC_DIALECT], bytes);
  read_attr_types(m, sections[SEC_ATTR_TYPE], sections[SEC_ATTR_TYPE_OFFSET]);
  if (present[SEC_PROPERTIES]) read_properties(m, sections[SEC_PROPERTIES]);

  /* The IR section is one block without a value scope of its own. */
  ir_state s = {m, bytes, 0, 0, 0, 0, 0};
  bc_cursor ir = sections[SEC_IR];
  ir.what = "IR section";
  m->top.num_regions = 1;
  m->top.regions = prog_alloc(ctx, 1, sizeof(bc_region));
  m->top.regions[0].num_blocks = 1;
  m->top.regions[0].blocks = prog_alloc(ctx, 1, sizeof(bc_block));
  read_block(&s, &ir, &m->top.regions[0].blocks[0]);
  return m;
}
