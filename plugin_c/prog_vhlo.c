/* prog_vhlo.c -- what the bytecode means: VHLO types, attributes and ops, lowered to the
 * interpreter's instruction lists.
 *
 * Encodings follow the VHLO dialect's bytecode interface (type and attribute codes are stable
 * by design: StableHLO promises compatibility) and the builtin dialect's (dictionaries and
 * strings of op attributes, locations).  Everything is checked here, up front: an op, type or
 * attribute outside the supported set is refused with UNIMPLEMENTED naming it, and every shape
 * relation the interpreter relies on is verified, so prog_interp.c can index without checks.
 *
 * `sdy` (Shardy) ops and attributes carry sharding for many devices; on one device they mean
 * nothing, so module-level sdy ops (sdy.mesh) and sdy attributes on arguments are skipped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_vhlo.h"

/* ---- entries ---------------------------------------------------------------------------- */

static bc_cursor entry_cursor(vh* v, const bc_entry* e, const char* what) {
  return (bc_cursor){e->data, e->data + e->size, v->ctx, what};
}

static const bc_entry* attr_entry(vh* v, int i) {
  if (i < 0 || i >= v->m->num_attrs) MALFORMED(v, "malformed bytecode: attribute index %d", i);
  return &v->m->attrs[i];
}

/* The dialect code of an attribute (first varint of a custom encoding), and a cursor after it.
 * Textual (non-custom) entries are refused: the reader understands no assembly syntax. */
static uint64_t attr_code(vh* v, int i, int dialect, bc_cursor* c) {
  const bc_entry* e = attr_entry(v, i);
  if (e->dialect != dialect || !e->custom) {
    const char* d = v->m->dialects[e->dialect];
    if (!e->custom)
      UNSUPPORTED(v, "unsupported attribute in %s: %.80s", v->op,
                  memchr(e->data, 0, e->size) ? (const char*)e->data : "(textual)");
    UNSUPPORTED(v, "unsupported attribute of dialect '%s' in %s", d, v->op);
  }
  *c = entry_cursor(v, e, "attribute");
  return bc_varint(c);
}


static const char* string_at(vh* v, bc_cursor* c) {
  uint64_t i = bc_varint(c);
  if (i >= (uint64_t)v->m->num_strings) MALFORMED(v, "malformed bytecode: string index");
  return v->m->strings[i];
}

/* A string-valued attribute: vhlo string, builtin string, or a flat symbol reference. */
const char* attr_string(vh* v, int i) {
  const bc_entry* e = attr_entry(v, i);
  bc_cursor c;
  if (e->dialect == v->builtin) {
    uint64_t code = attr_code(v, i, v->builtin, &c);
    if (code == BUILTIN_STRING) return string_at(v, &c);
    if (code == BUILTIN_FLAT_SYMBOL) return attr_string(v, (int)bc_varint(&c));
    UNSUPPORTED(v, "expected a string attribute in %s (builtin code %llu)", v->op,
                (unsigned long long)code);
  }
  uint64_t code = attr_code(v, i, v->vhlo, &c);
  if (code != VH_STRING) UNSUPPORTED(v, "expected a string attribute in %s", v->op);
  return string_at(v, &c);
}

/* Inherent attributes of the VHLO ops read here (as declared in VhloOps.td).  Registered ops
 * store them as properties: one attribute index each, ordered by attribute NAME (observed on
 * jax's artifacts: func_v1 stores arg_attrs, function_type, res_attrs, sym_name,
 * sym_visibility), so an attribute's slot is the number of names that sort before it. */
#define MAX_ATTRS 20

static const struct {
  const char* op;
  const char* attrs[MAX_ATTRS];
} inherent[] = {
    {"func_v1", {"sym_name", "function_type", "sym_visibility", "arg_attrs", "res_attrs"}},
    {"constant_v1", {"value"}},
    {"iota_v1", {"iota_dimension"}},
    {"broadcast_in_dim_v1", {"broadcast_dimensions"}},
    {"transpose_v1", {"permutation"}},
    {"slice_v1", {"start_indices", "limit_indices", "strides"}},
    {"concatenate_v1", {"dimension"}},
    {"reverse_v1", {"dimensions"}},
    {"reduce_v1", {"dimensions"}},
    {"compare_v1", {"comparison_direction", "compare_type"}},
    {"call_v1", {"callee"}},
    {"dot_general_v1", {"lhs_batching_dimensions", "rhs_batching_dimensions",
                        "lhs_contracting_dimensions", "rhs_contracting_dimensions",
                        "precision_config"}},
    {"dot_general_v2", {"lhs_batching_dimensions", "rhs_batching_dimensions",
                        "lhs_contracting_dimensions", "rhs_contracting_dimensions",
                        "precision_config", "lhs_precision_type", "rhs_precision_type",
                        "accumulation_type", "lhs_component_count", "rhs_component_count",
                        "num_primitive_operations", "allow_imprecise_accumulation"}},
    {"composite_v1", {"name", "composite_attributes", "decomposition", "version"}},
    {"sort_v1", {"dimension", "is_stable"}},
    {"pad_v1", {"edge_padding_low", "edge_padding_high", "interior_padding"}},
    {"dynamic_slice_v1", {"slice_sizes"}},
    {"reduce_precision_v1", {"exponent_bits", "mantissa_bits"}},
    {"reduce_window_v1", {"window_dimensions", "window_strides", "base_dilations",
                          "window_dilations", "padding"}},
    {"gather_v1", {"offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim",
                   "slice_sizes", "indices_are_sorted"}},
    {"gather_v2", {"offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                   "start_indices_batching_dims", "start_index_map", "index_vector_dim",
                   "slice_sizes", "indices_are_sorted"}},
    {"scatter_v1", {"update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                    "index_vector_dim", "indices_are_sorted", "unique_indices"}},
    {"scatter_v2", {"update_window_dims", "inserted_window_dims", "input_batching_dims",
                    "scatter_indices_batching_dims", "scatter_dims_to_operand_dims",
                    "index_vector_dim", "indices_are_sorted", "unique_indices"}},
    {"convolution_v1", {"window_strides", "padding", "lhs_dilation", "rhs_dilation",
                        "window_reversal", "input_batch_dimension", "input_feature_dimension",
                        "input_spatial_dimensions", "kernel_input_feature_dimension",
                        "kernel_output_feature_dimension", "kernel_spatial_dimensions",
                        "output_batch_dimension", "output_feature_dimension",
                        "output_spatial_dimensions", "feature_group_count", "batch_group_count",
                        "precision_config"}},
    {"get_dimension_size_v1", {"dimension"}},
    {"rng_bit_generator_v1", {"rng_algorithm"}},
    {"triangular_solve_v1", {"left_side", "lower", "unit_diagonal", "transpose_a"}},
    {"cholesky_v1", {"lower"}},
    {"fft_v1", {"fft_type", "fft_length"}},
    {"custom_call_v1", {"call_target_name", "has_side_effect", "backend_config", "api_version",
                        "called_computations", "operand_layouts", "result_layouts",
                        "output_operand_aliases"}},
};

/* The attribute `name` of `op`, or -1 when the op has no such attribute.  The properties
 * record must hold exactly one index per declared attribute: a record of another length
 * means the op's attributes are not what this table says (a newer op form), and the op is
 * refused rather than read at the wrong slots. */
int op_attr(vh* v, const bc_op* op, const char* name) {
  const char* opname = v->m->op_names[op->name].name;
  for (size_t r = 0; r < sizeof inherent / sizeof inherent[0]; r++) {
    if (strcmp(inherent[r].op, opname) != 0) continue;
    for (int k = 0; k < MAX_ATTRS && inherent[r].attrs[k] != NULL; k++) {
      if (strcmp(inherent[r].attrs[k], name) != 0) continue;
      if (op->props < 0) return -1;
      int slot = 0, count = 0;
      for (int j = 0; j < MAX_ATTRS && inherent[r].attrs[j] != NULL; j++) {
        slot += strcmp(inherent[r].attrs[j], name) < 0;
        count++;
      }
      bc_cursor c = bc_props(v->m, op->props);
      int a = -1;
      for (int j = 0; j < count; j++) {
        int x = (int)bc_varint(&c);
        if (j == slot) a = x;
      }
      if (c.p != c.end)
        UNSUPPORTED(v, "unsupported form of %s: its attributes are not the %d this reader knows",
                    v->op, count);
      attr_entry(v, a);
      return a;
    }
  }
  return -1;
}

int need(vh* v, const bc_op* op, const char* name) {
  int a = op_attr(v, op, name);
  if (a < 0) MALFORMED(v, "malformed program: %s lacks attribute '%s'", v->op, name);
  return a;
}

/* ---- types ------------------------------------------------------------------------------ */

enum { T_BOOL = 0, T_COMPLEX = 1, T_BF16 = 2, T_F16 = 3, T_F32 = 4, T_F64 = 5, T_F8E4M3FN = 6, T_F8E5M2 = 7,
       T_FUNCTION = 8, T_SI4 = 10, T_SI8 = 11, T_SI16 = 12, T_SI32 = 13, T_SI64 = 14, T_UI4 = 15, T_UI8 = 16,
       T_UI16 = 17, T_UI32 = 18, T_UI64 = 19, T_TENSOR = 20, T_TENSOR_ENCODED = 21, T_TOKEN = 22 };

static const char* type_code_name(uint64_t code) {
  static const char* names[] = {
      "boolean", "complex", "bf16", "f16", "f32", "f64", "f8E4M3FN", "f8E5M2", "function",
      "index", "si4", "si8", "si16", "si32", "si64", "ui4", "ui8", "ui16", "ui32", "ui64",
      "ranked tensor", "ranked tensor with encoding", "token", "tuple", "uniform quantized",
      "unranked tensor", "witness"};
  return code < sizeof names / sizeof names[0] ? names[code] : "unknown";
}

static bc_cursor type_cursor(vh* v, int i, uint64_t* code) {
  if (i < 0 || i >= v->m->num_types) MALFORMED(v, "malformed bytecode: type index %d", i);
  const bc_entry* e = &v->m->types[i];
  if (e->dialect != v->vhlo || !e->custom)
    UNSUPPORTED(v, "unsupported type of dialect '%s' in %s", v->m->dialects[e->dialect], v->op);
  bc_cursor c = entry_cursor(v, e, "type");
  *code = bc_varint(&c);
  return c;
}

prog_dtype element_type(vh* v, int i) {
  uint64_t code;
  bc_cursor c = type_cursor(v, i, &code);
  if (code == T_COMPLEX) {  /* complex<f32> or complex<f64>: the part's type follows */
    /* the part's code is read here, not by recursing: a complex type whose part is itself
     * (a mutated index) recursed until the stack overflowed */
    uint64_t part;
    type_cursor(v, (int)bc_varint(&c), &part);
    if (part == T_F32) return PROG_C64;
    if (part == T_F64) return PROG_C128;
    UNSUPPORTED(v, "unsupported complex element type in %s", v->op);
  }
  switch (code) {
    case T_BOOL: return PROG_PRED;
    case T_BF16: return PROG_BF16;
    case T_F16: return PROG_F16;
    case T_F32: return PROG_F32;
    case T_F64: return PROG_F64;
    case T_SI8: return PROG_S8;
    case T_SI16: return PROG_S16;
    case T_UI16: return PROG_U16;
    case T_F8E4M3FN: return PROG_F8E4M3FN;
    case T_F8E5M2: return PROG_F8E5M2;
    case T_SI32: return PROG_S32;
    case T_SI64: return PROG_S64;
    case T_UI8: return PROG_U8;
    case T_UI32: return PROG_U32;
    case T_UI64: return PROG_U64;
    case T_SI4: return PROG_S4;
    case T_UI4: return PROG_U4;
    default:
      UNSUPPORTED(v, "unsupported element type %s (vhlo type code %llu) in %s",
                  type_code_name(code), (unsigned long long)code, v->op);
  }
}

/* Elements are bounded so that byte sizes never overflow and a hostile shape cannot ask for
 * more than the interpreter could ever allocate. */
#define PROG_MAX_ELEMENTS ((int64_t)1 << 34)

prog_shape tensor_type(vh* v, int i) {
  uint64_t code;
  bc_cursor c = type_cursor(v, i, &code);
  if (code == T_TOKEN) return (prog_shape){.dtype = PROG_TOKEN, .rank = 0};
  if (code == T_TENSOR_ENCODED) bc_varint(&c);  /* the encoding attribute: bounds; ignored */
  else if (code != T_TENSOR)
    UNSUPPORTED(v, "unsupported type %s in %s (only ranked tensors)", type_code_name(code),
                v->op);
  prog_shape s = {0};
  c.what = "tensor shape";
  uint64_t rank = bc_count(&c, 1);
  if (rank > PROG_MAX_RANK) UNSUPPORTED(v, "unsupported rank %llu in %s (at most %d)",
                                        (unsigned long long)rank, v->op, PROG_MAX_RANK);
  s.rank = (int)rank;
  int64_t n = 1;
  for (int d = 0; d < s.rank; d++) {
    s.dims[d] = bc_svarint(&c);
    if (s.dims[d] < 0) UNSUPPORTED(v, "unsupported dynamic dimension in %s", v->op);
    if (s.dims[d] > 0 && n > PROG_MAX_ELEMENTS / s.dims[d])
      UNSUPPORTED(v, "tensor too large in %s", v->op);
    n *= s.dims[d] > 0 ? s.dims[d] : 1;
  }
  s.dtype = element_type(v, (int)bc_varint(&c));
  return s;
}

/* ---- attribute values ------------------------------------------------------------------- */

int64_t attr_int(vh* v, int i) {
  bc_cursor c;
  if (attr_code(v, i, v->vhlo, &c) != VH_INTEGER)
    UNSUPPORTED(v, "expected an integer attribute in %s", v->op);
  bc_varint(&c);  /* the integer type; widths <= 64 are stored as a signed varint */
  return bc_svarint(&c);
}

uint64_t attr_enum(vh* v, int i, uint64_t expected_code, const char* what) {
  bc_cursor c;
  if (attr_code(v, i, v->vhlo, &c) != expected_code)
    UNSUPPORTED(v, "expected a %s attribute in %s", what, v->op);
  return bc_varint(&c);
}

bool attr_bool(vh* v, int i) {
  bc_cursor c;
  if (attr_code(v, i, v->vhlo, &c) != VH_BOOL)
    UNSUPPORTED(v, "expected a boolean attribute in %s", v->op);
  return bc_varint(&c) != 0;
}

/* A dense tensor attribute: shape, and its elements expanded from a splat when stored so.
 * Booleans are stored packed, one bit per element (a splat as a single 0x00/0xFF byte).  A
 * tensor of no elements may still be a splat of one element's bytes (MLIR folds constants into
 * empty shapes so: jnp.spacing on an f16[0,3] compiles to a 2-byte splat). */
const void* attr_tensor(vh* v, int i, prog_shape* shape) {
  bc_cursor c;
  if (attr_code(v, i, v->vhlo, &c) != VH_TENSOR)
    UNSUPPORTED(v, "expected a tensor attribute in %s", v->op);
  *shape = tensor_type(v, (int)bc_varint(&c));
  c.what = "tensor data";
  uint64_t size = bc_varint(&c);
  const uint8_t* blob = bc_bytes(&c, size);
  int64_t n = prog_shape_elements(shape);
  size_t esize = prog_dtype_size(shape->dtype);
  uint8_t* out = prog_alloc(v->ctx, (size_t)n, esize);
  if (n == 0) {
    if (size != 0 && size != esize)
      MALFORMED(v, "malformed program: tensor data of %llu bytes for 0 elements of %s",
                (unsigned long long)size, prog_dtype_name(shape->dtype));
    return out;
  }
  if (shape->dtype == PROG_PRED) {
    if (size == 1 && n > 1) {
      memset(out, blob[0] ? 1 : 0, (size_t)n);
    } else if (size == (uint64_t)((n + 7) / 8) && size != (uint64_t)n) {
      for (int64_t k = 0; k < n; k++) out[k] = (blob[k / 8] >> (k % 8)) & 1;
    } else if (size == (uint64_t)n) {
      for (int64_t k = 0; k < n; k++) out[k] = blob[k] != 0;
    } else {
      MALFORMED(v, "malformed program: boolean tensor data of %llu bytes for %lld elements",
                (unsigned long long)size, (long long)n);
    }
    return out;
  }
  if (size == esize && n > 1) {
    for (int64_t k = 0; k < n; k++) memcpy(out + (size_t)k * esize, blob, esize);
  } else if (size != (uint64_t)n * esize) {
    MALFORMED(v, "malformed program: tensor data of %llu bytes for %lld elements of %s",
              (unsigned long long)size, (long long)n, prog_dtype_name(shape->dtype));
  } else if (n > 0) {
    memcpy(out, blob, size);
  }
  return out;
}

/* A list of dimension numbers: a 1-d i64 tensor (VHLO 1.0's encoding of dense arrays) or an
 * array of integers.  Returns the count. */
int attr_dims(vh* v, int i, int64_t* out, int max) {
  bc_cursor c;
  uint64_t code = attr_code(v, i, v->vhlo, &c);
  if (code == VH_TENSOR) {
    prog_shape s;
    const int64_t* data = attr_tensor(v, i, &s);
    int64_t n = prog_shape_elements(&s);
    if (s.rank != 1 || (s.dtype != PROG_S64 && s.dtype != PROG_S32))
      UNSUPPORTED(v, "unsupported dimension list in %s", v->op);
    if (n > max) MALFORMED(v, "malformed program: too many dimensions in %s", v->op);
    for (int64_t k = 0; k < n; k++)
      out[k] = s.dtype == PROG_S64 ? data[k] : ((const int32_t*)(const void*)data)[k];
    return (int)n;
  }
  if (code == VH_ARRAY) {
    c.what = "array attribute";
    uint64_t n = bc_count(&c, 1);
    if (n > (uint64_t)max) MALFORMED(v, "malformed program: too many dimensions in %s", v->op);
    for (uint64_t k = 0; k < n; k++) out[k] = attr_int(v, (int)bc_varint(&c));
    return (int)n;
  }
  UNSUPPORTED(v, "unsupported dimension list (vhlo attribute code %llu) in %s",
              (unsigned long long)code, v->op);
}

int opt_dims(vh* v, const bc_op* op, const char* name, int64_t* out, int max) {
  int a = op_attr(v, op, name);
  return a < 0 ? 0 : attr_dims(v, a, out, max);
}

/* ---- shape checks ----------------------------------------------------------------------- */

bool same_dims(const prog_shape* a, const prog_shape* b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

void check(vh* v, bool ok, const char* what) {
  if (!ok) MALFORMED(v, "malformed program: %s: %s", v->op, what);
}

bool is_complex(prog_dtype t) { return t == PROG_C64 || t == PROG_C128; }

bool is_float(prog_dtype t) {
  return t == PROG_F32 || t == PROG_F64 || t == PROG_BF16 || t == PROG_F16;
}

/* Arithmetic runs on every integer width, pred, f32 and f64 (bf16 and f16 through f32).  f8
 * types are only moved around (shape ops, select, constants) and converted. */
bool is_arithmetic(prog_dtype t) {
  return t != PROG_F8E4M3FN && t != PROG_F8E5M2 && t != PROG_TOKEN;
}

void check_dims_list(vh* v, const int64_t* d, int n, int rank, bool distinct) {
  for (int k = 0; k < n; k++) {
    check(v, d[k] >= 0 && d[k] < rank, "dimension number out of range");
    if (distinct)
      for (int j = 0; j < k; j++) check(v, d[j] != d[k], "repeated dimension number");
  }
}

/* ---- ops -------------------------------------------------------------------------------- */

/* The elementwise ops of prog_ops_table.h, by VHLO name (both forms where there are two). */
static const struct {
  const char* v1;
  const char* v2;
  prog_opcode op;
  int arity;
} elementwise_ops[] = {
#define EW(NAME, ARITY, ALLOWED, V1, V2) {V1, V2, OP_##NAME, ARITY},
#include "prog_ops_table.h"
};

int vh_elementwise(const char* name, int* arity) {
  for (size_t k = 0; k < sizeof elementwise_ops / sizeof elementwise_ops[0]; k++)
    if (strcmp(elementwise_ops[k].v1, name) == 0 ||
        (elementwise_ops[k].v2 != NULL && strcmp(elementwise_ops[k].v2, name) == 0)) {
      *arity = elementwise_ops[k].arity;
      return (int)elementwise_ops[k].op;
    }
  return -1;
}

/* Whether an elementwise op whose element type classes are `allowed` (EW_*) takes t. */
bool ew_allows(unsigned allowed, prog_dtype t) {
  if (is_complex(t)) return allowed & EW_COMPLEX;
  if (is_float(t)) return allowed & EW_FLOATS;
  if (t == PROG_PRED) return allowed & EW_PRED;
  return allowed & EW_INTS;
}

const prog_shape* operand(lowering* L, int k) {
  if (k < 0 || k >= L->op->num_operands)
    MALFORMED(L->v, "malformed program: %s has %d operands, needs more", L->v->op, L->op->num_operands);
  int id = L->op->operands[k];
  if (id < 0 || id >= L->f->num_values || !L->defined[id])
    MALFORMED(L->v, "malformed program: %s uses a value before it is defined", L->v->op);
  return &L->f->values[id];
}

void expect_operands(lowering* L, int n) {
  if (L->op->num_operands != n)
    MALFORMED(L->v, "malformed program: %s has %d operands, expected %d", L->v->op,
              L->op->num_operands, n);
}

static void elementwise_checks(lowering* L, prog_insn* in, bool arithmetic) {
  for (int k = 0; k < in->num_in; k++) {
    check(L->v, same_dims(operand(L, k), &in->shape), "operand and result shapes differ");
    if (arithmetic && !is_arithmetic(operand(L, k)->dtype))
      UNSUPPORTED(L->v, "unsupported element type %s for %s",
                  prog_dtype_name(operand(L, k)->dtype), L->v->op);
  }
}

int find_func(prog_program* p, const char* name) {
  for (int k = 0; k < p->num_funcs; k++)
    if (strcmp(p->funcs[k].name, name) == 0) return k;
  return -1;
}

/* ---- lowering, by op family ------------------------------------------------------------- */

/* The ops of prog_ops_table.h: checks from the table's arity and element type classes. */
static void lower_elementwise(lowering* L, prog_insn* in, prog_opcode code, int arity) {
  vh* v = L->v;
  in->op = code;
  expect_operands(L, arity);
  elementwise_checks(L, in, true);
  unsigned allowed = prog_ew_allowed(code);
  prog_dtype at = operand(L, 0)->dtype;
  /* |z| of a complex z is real */
  bool complex_abs = arity == 1 && (allowed & EW_COMPLEX_ABS) && is_complex(at) &&
                     in->shape.dtype == (at == PROG_C64 ? PROG_F32 : PROG_F64);
  bool same = true;
  for (int k = 0; k < arity; k++) same &= operand(L, k)->dtype == in->shape.dtype;
  check(v, same || complex_abs, "element types differ");
  if (!ew_allows(allowed, at))
    UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(at), v->op);
  if ((allowed & EW_NO_S4) && at == PROG_S4) UNSUPPORTED(v, S4_POPCNT_REFUSED, v->op);
}

/* compare, convert, select, clamp: elementwise, with their own types and attributes */
static void lower_elementwise_more(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "compare_v1") == 0) {
    in->op = OP_COMPARE;
    expect_operands(L, 2);
    in->iarg = (int)attr_enum(v, need(v, op, "comparison_direction"), VH_CMP_DIR,
                              "comparison direction");
    check(v, in->iarg >= CMP_EQ && in->iarg <= CMP_LT, "unknown comparison direction");
    check(v, in->shape.dtype == PROG_PRED, "compare must give pred");
    prog_shape a = *operand(L, 0);
    check(v, a.dtype == operand(L, 1)->dtype, "element types differ");
    bool f8 = a.dtype == PROG_F8E4M3FN || a.dtype == PROG_F8E5M2;  /* compared as their values */
    if ((!is_arithmetic(a.dtype) && !f8) ||
        (is_complex(a.dtype) && in->iarg != CMP_EQ && in->iarg != CMP_NE))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(a.dtype), v->op);
    /* compare_type (VHLO ComparisonType: NOTYPE, FLOAT, TOTALORDER, SIGNED, UNSIGNED):
     * TOTALORDER orders NaNs too; ignoring it let a sort put a NaN among the numbers */
    int ct = op_attr(v, op, "compare_type");
    if (ct >= 0 && attr_enum(v, ct, VH_CMP_TYPE, "comparison type") == 2 && is_float(a.dtype))
      in->iarg |= CMP_TOTAL;
    a.dtype = PROG_PRED;
    check(v, same_dims(&a, &in->shape) && same_dims(operand(L, 1), &in->shape),
          "operand and result shapes differ");
  } else if (strcmp(name, "convert_v1") == 0) {
    in->op = OP_CONVERT;
    expect_operands(L, 1);
    check(v, same_dims(operand(L, 0), &in->shape), "operand and result shapes differ");
  } else if (strcmp(name, "select_v1") == 0) {
    in->op = OP_SELECT;
    expect_operands(L, 3);
    const prog_shape* p = operand(L, 0);
    check(v, p->dtype == PROG_PRED, "select predicate must be pred");
    check(v, p->rank == 0 || same_dims(p, &in->shape), "select predicate shape");
    check(v, same_dims(operand(L, 1), &in->shape) && same_dims(operand(L, 2), &in->shape),
          "operand and result shapes differ");
    check(v, operand(L, 1)->dtype == in->shape.dtype && operand(L, 2)->dtype == in->shape.dtype,
          "element types differ");
  } else {  /* clamp_v1 */
    in->op = OP_CLAMP;
    expect_operands(L, 3);
    for (int r = 0; r < 3; r++) {
      check(v, operand(L, r)->dtype == in->shape.dtype, "element types differ");
      check(v, r == 1 ? same_dims(operand(L, r), &in->shape)
                      : operand(L, r)->rank == 0 || same_dims(operand(L, r), &in->shape),
            "clamp operand shapes");
    }
    if (!is_arithmetic(in->shape.dtype) || is_complex(in->shape.dtype))
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(in->shape.dtype),
                  v->op);
  }
}

/* constant, iota: values from attributes alone */
static void lower_source(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "constant_v1") == 0) {
    in->op = OP_CONSTANT;
    expect_operands(L, 0);
    prog_shape s;
    in->data = attr_tensor(v, need(v, op, "value"), &s);
    check(v, same_dims(&s, &in->shape) && s.dtype == in->shape.dtype,
          "constant value and result types differ");
  } else {  /* iota_v1 */
    in->op = OP_IOTA;
    expect_operands(L, 0);
    int64_t d = attr_int(v, need(v, op, "iota_dimension"));
    check(v, d >= 0 && d < in->shape.rank, "iota dimension out of range");
    in->iarg = (int)d;
    if (in->shape.dtype == PROG_PRED)
      UNSUPPORTED(v, "unsupported element type %s for %s", prog_dtype_name(in->shape.dtype),
                  v->op);
  }
}

/* broadcast_in_dim, reshape, transpose, slice, concatenate, reverse */
static void lower_shape(lowering* L, prog_insn* in, const char* name) {
  vh* v = L->v;
  const bc_op* op = L->op;
  if (strcmp(name, "broadcast_in_dim_v1") == 0) {
    in->op = OP_BROADCAST;
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->np[0] = attr_dims(v, need(v, op, "broadcast_dimensions"), in->p[0], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && a->dtype == in->shape.dtype, "broadcast operand");
    check_dims_list(v, in->p[0], in->np[0], in->shape.rank, true);
    for (int d = 0; d < a->rank; d++)
      check(v, a->dims[d] == 1 || a->dims[d] == in->shape.dims[in->p[0][d]],
            "broadcast dimension sizes");
  } else if (strcmp(name, "reshape_v1") == 0) {
    in->op = OP_RESHAPE;
    expect_operands(L, 1);
    check(v, prog_shape_elements(operand(L, 0)) == prog_shape_elements(&in->shape) &&
                 operand(L, 0)->dtype == in->shape.dtype,
          "reshape changes the element count or type");
  } else if (strcmp(name, "transpose_v1") == 0) {
    in->op = OP_TRANSPOSE;
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->np[0] = attr_dims(v, need(v, op, "permutation"), in->p[0], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && a->rank == in->shape.rank && a->dtype == in->shape.dtype,
          "transpose permutation");
    check_dims_list(v, in->p[0], in->np[0], a->rank, true);
    for (int d = 0; d < a->rank; d++)
      check(v, in->shape.dims[d] == a->dims[in->p[0][d]], "transpose result shape");
  } else if (strcmp(name, "slice_v1") == 0) {
    in->op = OP_SLICE;
    expect_operands(L, 1);
    const prog_shape* a = operand(L, 0);
    in->np[0] = attr_dims(v, need(v, op, "start_indices"), in->p[0], PROG_MAX_RANK);
    in->np[1] = attr_dims(v, need(v, op, "limit_indices"), in->p[1], PROG_MAX_RANK);
    in->np[2] = attr_dims(v, need(v, op, "strides"), in->p[2], PROG_MAX_RANK);
    check(v, in->np[0] == a->rank && in->np[1] == a->rank && in->np[2] == a->rank &&
                 in->shape.rank == a->rank && a->dtype == in->shape.dtype,
          "slice ranks");
    for (int d = 0; d < a->rank; d++) {
      int64_t lo = in->p[0][d], hi = in->p[1][d], st = in->p[2][d];
      check(v, lo >= 0 && lo <= hi && hi <= a->dims[d] && st >= 1, "slice bounds");
      check(v, in->shape.dims[d] == (hi - lo + st - 1) / st, "slice result shape");
    }
  } else if (strcmp(name, "concatenate_v1") == 0) {
    in->op = OP_CONCAT;
    check(v, op->num_operands >= 1, "concatenate needs operands");
    int64_t d = attr_int(v, need(v, op, "dimension"));
    check(v, d >= 0 && d < in->shape.rank, "concatenate dimension");
    in->iarg = (int)d;
    int64_t total = 0;
    for (int r = 0; r < op->num_operands; r++) {
      const prog_shape* a = operand(L, r);
      check(v, a->rank == in->shape.rank && a->dtype == in->shape.dtype, "concatenate operands");
      for (int e = 0; e < a->rank; e++)
        check(v, e == d || a->dims[e] == in->shape.dims[e], "concatenate operand shapes");
      total += a->dims[d];
    }
    check(v, total == in->shape.dims[d], "concatenate result shape");
  } else {  /* reverse_v1 */
    in->op = OP_REVERSE;
    expect_operands(L, 1);
    check(v, same_dims(operand(L, 0), &in->shape) && operand(L, 0)->dtype == in->shape.dtype,
          "reverse shapes");
    in->np[0] = attr_dims(v, need(v, op, "dimensions"), in->p[0], PROG_MAX_RANK);
    check_dims_list(v, in->p[0], in->np[0], in->shape.rank, true);
  }
}

/* dot_general (v1, and v2 with its precision attributes, which change nothing here) */
static void lower_dot(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  in->op = OP_DOT;
  expect_operands(L, 2);
  const prog_shape *a = operand(L, 0), *b = operand(L, 1);
  static const char* names[4] = {"lhs_batching_dimensions", "rhs_batching_dimensions",
                                 "lhs_contracting_dimensions", "rhs_contracting_dimensions"};
  for (int r = 0; r < 4; r++) {
    int at = op_attr(v, op, names[r]);
    in->np[r] = at < 0 ? 0 : attr_dims(v, at, in->p[r], PROG_MAX_RANK);
    check_dims_list(v, in->p[r], in->np[r], (r % 2 == 0 ? a : b)->rank, true);
  }
  /* preferred_element_type: the operands may be narrower than the result (bf16 x bf16 ->
   * f32, s8 x s8 -> s32); the products accumulate in the result's precision or better;
   * pred products are and, their sums or; f8 operands are widened to f32 */
  prog_check_dot_shapes(v, in, a, b);
}

/* reduce: a fast kernel for one input under one binary op, else the body element by element */
static void lower_reduce(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  int n = op->num_operands / 2;
  check(v, n >= 1 && op->num_operands == 2 * n && op->num_results == n,
        "reduce needs as many inputs, init values and results");
  check(v, op->num_regions == 1, "reduce needs one body");
  int64_t dims[PROG_MAX_RANK];
  int nd = attr_dims(v, need(v, op, "dimensions"), dims, PROG_MAX_RANK);
  const prog_shape* a0 = operand(L, 0);
  check_dims_list(v, dims, nd, a0->rank, true);
  for (int r = 0; r < n; r++) {
    const prog_shape *a = operand(L, r), *init = operand(L, n + r);
    check(v, same_dims(a, a0), "reduce inputs differ in shape");
    check(v, init->rank == 0 && init->dtype == L->f->values[op->first_result + r].dtype,
          "reduce init value");
    prog_shape want = {a->dtype, 0, {0}};
    for (int d = 0; d < a->rank; d++) {
      bool reduced = false;
      for (int q = 0; q < nd; q++) reduced |= dims[q] == d;
      if (!reduced) want.dims[want.rank++] = a->dims[d];
    }
    want.dtype = init->dtype;
    check(v, same_dims(&want, &L->f->values[op->first_result + r]), "reduce result shape");
  }
  in->np[0] = nd;
  memcpy(in->p[0], dims, sizeof dims);
  in->num_sub = 1;
  in->sub = prog_alloc(v->ctx, 1, sizeof(prog_func));
  vh_lower_region(L, in, &op->regions[0], in->sub);
  check(v, in->sub->num_args == 2 * n && in->sub->num_results == n, "reduce body signature");
  /* The body runs on one element of each input at a time, passed by address into the
   * input's buffer: its arguments must be scalars of exactly the element types the buffers
   * hold.  Without this a mutated program whose body took s64 over a u8 input read 8 bytes
   * at every byte offset (misaligned, and past the end of the last element). */
  for (int r = 0; r < n; r++) {
    const prog_func* b = in->sub;
    const prog_shape *acc = &b->values[b->first_arg + r], *x = &b->values[b->first_arg + n + r];
    const prog_shape* res = &b->values[b->results[r]];
    prog_dtype rt = L->f->values[op->first_result + r].dtype;
    check(v, acc->rank == 0 && acc->dtype == rt && res->rank == 0 && res->dtype == rt &&
                 x->rank == 0, "reduce body signature");
    if (x->dtype != operand(L, r)->dtype)
      UNSUPPORTED(v, "unsupported reduce whose body takes %s elements of a %s input",
                  prog_dtype_name(x->dtype), prog_dtype_name(operand(L, r)->dtype));
  }
  int kind = vh_region_kind(v, in->sub);
  if (is_complex(a0->dtype) && kind != RED_ADD && kind != RED_MUL) kind = RED_GENERIC;
  if (n == 1 && kind != RED_GENERIC && a0->dtype == in->shape.dtype &&
      !(kind == RED_AND || kind == RED_OR || kind == RED_XOR ? is_float(a0->dtype) : false) &&
      is_arithmetic(a0->dtype)) {
    in->op = OP_REDUCE;
    in->iarg = kind;
  } else {
    in->op = OP_REDUCE_GENERIC;
  }
}

static void lower_call(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  in->op = OP_CALL;
  const char* callee = attr_string(v, need(v, L->op, "callee"));
  int f = find_func(v->program, callee);
  if (f < 0) MALFORMED(v, "malformed program: call of unknown function '%s'", callee);
  in->iarg = f;
  /* argument and result shapes are checked once every function's signature is known */
}

/* Tokens order side effects, which this device has none of: they are made (create_token,
 * after_all), passed through calls and barriers, and returned; any other op on one is refused
 * by name (in lower_op). */
static void lower_token(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  for (int r = 0; r < op->num_operands; r++)
    check(v, operand(L, r)->dtype == PROG_TOKEN, "after_all takes tokens");
  check(v, op->num_results == 1 && in->shape.dtype == PROG_TOKEN, "a token op gives one token");
  static const char no_bytes[1];
  in->op = OP_CONSTANT;  /* a token has no bytes: nothing to compute */
  in->data = no_bytes;
  in->num_in = 0;
}

/* a library call (LAPACK, FFI): the few run here, the rest refused by name */
static void lower_custom_call(lowering* L, prog_insn* in, const char* name) {
  (void)name;
  vh* v = L->v;
  const bc_op* op = L->op;
  int t = op_attr(v, op, "call_target_name");
  const char* target = t >= 0 ? attr_string(v, t) : "?";
  /* the two XLA expands itself, which jax sends a platform without LAPACK for a QR */
  if (strcmp(target, "Qr") == 0 || strcmp(target, "ProductOfElementaryHouseholderReflectors") == 0) {
    vh_lower_householder(L, in, target[0] == 'Q');
    return;
  }
  /* jax's lax.dce_sink (checkify uses it): a value marked used, against XLA's dead-code
   * elimination.  It has no result, and an instruction no one reads is never run. */
  if (strcmp(target, "dce_sink") == 0) {
    check(v, op->num_results == 0, "dce_sink gives no result");
    in->shape = (prog_shape){.dtype = PROG_TOKEN, .rank = 0};
    in->op = OP_IDENTITY;
    return;
  }
  UNSUPPORTED(v, "unsupported custom call '%s' (%s): the dumpref interpreter runs StableHLO "
              "ops only (and the custom calls Qr, ProductOfElementaryHouseholderReflectors, "
              "dce_sink)", target, v->op);
}

/* What an op may be given beyond one non-token result each (lower_op checks the rest). */
enum {
  LOWER_RESULTS = 1,  /* any number of results (the lowering checks them) */
  LOWER_TOKENS = 2,   /* token operands and results */
};

/* Every op but the elementwise ones of prog_ops_table.h, by VHLO name. */
static const struct {
  const char* name;
  vh_lower_fn lower;
  unsigned flags;
} lowerings[] = {
    {"compare_v1", lower_elementwise_more, 0},
    {"convert_v1", lower_elementwise_more, 0},
    {"select_v1", lower_elementwise_more, 0},
    {"clamp_v1", lower_elementwise_more, 0},
    {"constant_v1", lower_source, 0},
    {"iota_v1", lower_source, 0},
    {"get_dimension_size_v1", vh_lower_dimension_size, 0},
    {"broadcast_in_dim_v1", lower_shape, 0},
    {"reshape_v1", lower_shape, 0},
    {"transpose_v1", lower_shape, 0},
    {"slice_v1", lower_shape, 0},
    {"concatenate_v1", lower_shape, 0},
    {"reverse_v1", lower_shape, 0},
    {"pad_v1", vh_lower_index, 0},
    {"dynamic_slice_v1", vh_lower_index, 0},
    {"dynamic_update_slice_v1", vh_lower_index, 0},
    {"gather_v1", vh_lower_index, 0},
    {"gather_v2", vh_lower_index, 0},
    {"scatter_v1", vh_lower_index, LOWER_RESULTS},
    {"scatter_v2", vh_lower_index, LOWER_RESULTS},
    {"dot_general_v1", lower_dot, 0},
    {"dot_general_v2", lower_dot, 0},
    {"reduce_v1", lower_reduce, LOWER_RESULTS},
    {"reduce_window_v1", vh_lower_window, LOWER_RESULTS},
    {"convolution_v1", vh_lower_window, 0},
    {"sort_v1", vh_lower_sort, LOWER_RESULTS},
    {"call_v1", lower_call, LOWER_RESULTS | LOWER_TOKENS},
    {"while_v1", vh_lower_control, LOWER_RESULTS},
    {"case_v1", vh_lower_control, LOWER_RESULTS},
    {"if_v1", vh_lower_control, LOWER_RESULTS},
    {"composite_v1", vh_lower_control, LOWER_RESULTS},
    {"optimization_barrier_v1", vh_lower_control, LOWER_RESULTS | LOWER_TOKENS},
    {"create_token_v1", lower_token, LOWER_RESULTS | LOWER_TOKENS},
    {"after_all_v1", lower_token, LOWER_RESULTS | LOWER_TOKENS},
    {"custom_call_v1", lower_custom_call, LOWER_RESULTS},
    {"is_finite_v1", vh_lower_bits, 0},
    {"reduce_precision_v1", vh_lower_bits, 0},
    {"bitcast_convert_v1", vh_lower_bits, 0},
    {"real_v1", vh_lower_parts, 0},
    {"imag_v1", vh_lower_parts, 0},
    {"complex_v1", vh_lower_parts, 0},
    {"triangular_solve_v1", vh_lower_linalg, 0},
    {"cholesky_v1", vh_lower_linalg, 0},
    {"fft_v1", vh_lower_linalg, 0},
    {"rng_bit_generator_v1", vh_lower_rng, LOWER_RESULTS},
};

static void lower_op(lowering* L, prog_insn* in) {
  vh* v = L->v;
  const bc_op* op = L->op;
  const char* name = v->m->op_names[op->name].name;
  in->vhlo_name = v->op;
  in->num_in = op->num_operands;
  in->in = op->operands;
  in->num_out = op->num_results;
  in->out = op->first_result;
  /* Sharding annotations mean nothing on one device.  In a portable artifact an sdy op in a
   * function body sits between two builtin.unrealized_conversion_casts (VHLO types to builtin
   * types and back), its value unchanged: all three run as the identity, shapes carried over
   * from the operand (the builtin types need not be read). */
  const char* dialect = v->m->dialects[v->m->op_names[op->name].dialect];
  bool passthrough = (strcmp(dialect, "builtin") == 0 && strcmp(name, "unrealized_conversion_cast") == 0) ||
                     (strcmp(dialect, "sdy") == 0 && (strcmp(name, "sharding_constraint") == 0 ||
                                                       strcmp(name, "reshard") == 0));
  if (passthrough) {
    check(v, op->num_operands == op->num_results && op->num_results >= 1, "a cast has one result per operand");
    for (int r = 0; r < op->num_operands; r++) L->f->values[op->first_result + r] = *operand(L, r);
    in->shape = L->f->values[op->first_result];
    in->op = OP_IDENTITY;
    return;
  }
  for (int r = 0; r < op->num_results; r++) {
    prog_shape s = tensor_type(v, op->result_types[r]);
    if (r == 0) in->shape = s;
    L->f->values[op->first_result + r] = s;
  }
  for (int r = 0; r < op->num_operands; r++) operand(L, r);
  int arity = 0, code = vh_elementwise(name, &arity);
  int row = -1;
  for (size_t k = 0; code < 0 && row < 0 && k < sizeof lowerings / sizeof lowerings[0]; k++)
    if (strcmp(lowerings[k].name, name) == 0) row = (int)k;
  unsigned flags = row >= 0 ? lowerings[row].flags : 0;
  if (!(flags & LOWER_TOKENS)) {
    for (int r = 0; r < op->num_operands + op->num_results; r++) {
      const prog_shape* s = r < op->num_operands ? operand(L, r)
                                                 : &L->f->values[op->first_result + r - op->num_operands];
      if (s->dtype == PROG_TOKEN)
        UNSUPPORTED(v, "unsupported: a token operand or result of %s (the dumpref device passes "
                       "tokens through calls and returns only)", v->op);
    }
  }
  if (!(flags & LOWER_RESULTS) && op->num_results != 1)
    UNSUPPORTED(v, "unsupported: %s with %d results", v->op, op->num_results);
  if (code >= 0) {
    lower_elementwise(L, in, (prog_opcode)code, arity);
  } else if (row >= 0) {
    lowerings[row].lower(L, in, name);
  } else {
    UNSUPPORTED(v, "unsupported op %s.%s (the dumpref interpreter does not implement it)",
                dialect, name);
  }
}

/* ---- functions and the module ----------------------------------------------------------- */

static const bc_op* func_body_return(vh* v, const bc_block* b) {
  if (b->num_ops == 0) MALFORMED(v, "malformed program: empty function body");
  const bc_op* ret = &b->ops[b->num_ops - 1];
  if (strcmp(v->m->op_names[ret->name].name, "return_v1") != 0 ||
      v->m->op_names[ret->name].dialect != v->vhlo)
    MALFORMED(v, "malformed program: function body does not end in return");
  return ret;
}

/* A vhlo attribute's code and a cursor after it, without throwing: false for entries of other
 * dialects or in textual form (argument attributes may carry anything: sdy shardings...). */
static bool peek_vhlo_attr(vh* v, int i, uint64_t* code, bc_cursor* c) {
  const bc_entry* e = attr_entry(v, i);
  if (e->dialect != v->vhlo || !e->custom) return false;
  *c = entry_cursor(v, e, "attribute");
  *code = bc_varint(c);
  return true;
}

/* Which arguments are donated: arg_attrs is an array of one dictionary per argument (name,
 * value pairs); jax marks a donated argument with `tf.aliasing_output = N` (an output may take
 * its buffer) or `jax.buffer_donor = true`.  Anything else in the dictionaries is skipped. */
static void read_donors(vh* v, int arg_attrs, prog_func* f) {
  uint64_t code;
  bc_cursor c;
  if (!peek_vhlo_attr(v, arg_attrs, &code, &c) || code != VH_ARRAY) return;
  c.what = "argument attributes";
  uint64_t n = bc_count(&c, 1);
  for (uint64_t k = 0; k < n && k < (uint64_t)f->num_args; k++) {
    bc_cursor d;
    if (!peek_vhlo_attr(v, (int)bc_varint(&c), &code, &d) || code != VH_DICT) continue;
    d.what = "argument attribute dictionary";
    uint64_t pairs = bc_count(&d, 2);
    for (uint64_t q = 0; q < pairs; q++) {
      int name = (int)bc_varint(&d), value = (int)bc_varint(&d);
      bc_cursor s;
      if (!peek_vhlo_attr(v, name, &code, &s) || code != VH_STRING) continue;
      const char* key = string_at(v, &s);
      bool donor = strcmp(key, "tf.aliasing_output") == 0;
      if (strcmp(key, "jax.buffer_donor") == 0) {
        bc_cursor b;
        donor = peek_vhlo_attr(v, value, &code, &b) && code == VH_BOOL && bc_varint(&b) != 0;
      }
      if (!donor) continue;
      if (f->donated == NULL)
        f->donated = prog_alloc(v->ctx, (size_t)f->num_args, sizeof(unsigned char));
      f->donated[k] = 1;
    }
  }
}

/* Reads a function's signature (before any body is lowered, so calls can be checked). */
static void declare_func(vh* v, const bc_op* op, prog_func* f) {
  v->op = "vhlo.func_v1";
  f->name = attr_string(v, need(v, op, "sym_name"));
  check(v, op->num_regions == 1 && op->regions[0].num_blocks == 1,
        "function needs one body block (control flow is not supported)");
  const bc_region* r = &op->regions[0];
  const bc_block* b = &r->blocks[0];
  f->num_args = b->num_args;
  f->num_values = r->num_values;
  f->values = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(prog_shape));
  for (int k = 0; k < b->num_args; k++) {
    check(v, b->arg_values[k] == k, "argument numbering");
    f->values[k] = tensor_type(v, b->arg_types[k]);
  }
  int arg_attrs = op_attr(v, op, "arg_attrs");
  if (arg_attrs >= 0) read_donors(v, arg_attrs, f);
  const bc_op* ret = func_body_return(v, b);
  f->num_results = ret->num_operands;
  f->results = ret->operands;
}

static bool is_binary_elementwise(prog_opcode op) {
  return prog_ew_arity(op) == 2 || op == OP_COMPARE;
}

/* jax writes `x + 1` as a broadcast of a scalar constant, then the add.  A binary elementwise
 * op reads such a scalar in place (flag in scalar_in) instead of a materialized copy; the
 * broadcast, left without readers, is then skipped by the interpreter. */
static void fold_scalar_broadcasts(vh* v, prog_func* f) {
  int* producer = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(int));
  for (int k = 0; k < f->num_values; k++) producer[k] = -1;
  for (int k = 0; k < f->num_insns; k++)
    for (int r = 0; r < f->insns[k].num_out; r++) producer[f->insns[k].out + r] = k;
  for (int k = 0; k < f->num_insns; k++) {
    prog_insn* in = &f->insns[k];
    if (!is_binary_elementwise(in->op)) continue;
    for (int r = 0; r < 2; r++) {
      int p = producer[in->in[r]];
      if (p < 0 || f->insns[p].op != OP_BROADCAST) continue;
      const prog_shape* src = &f->values[f->insns[p].in[0]];
      if (prog_shape_elements(src) != 1 || prog_shape_elements(&in->shape) <= 1) continue;
      in->in[r] = f->insns[p].in[0];
      in->scalar_in |= 1u << r;
    }
  }
}

/* Lowers the ops of block `b` (all but its return) into `f`, whose values up to the block's
 * arguments are set up and marked in `defined`. */
static void lower_body(vh* v, const bc_block* b, prog_func* f, bool* defined) {
  f->num_insns = b->num_ops - 1;
  f->insns = prog_alloc(v->ctx, (size_t)f->num_insns, sizeof(prog_insn));
  lowering L = {v, f, NULL, defined};
  for (int k = 0; k < f->num_insns; k++) {
    const bc_op* o = &b->ops[k];
    char name[96];
    snprintf(name, sizeof name, "%s.%s", v->m->dialects[v->m->op_names[o->name].dialect],
             v->m->op_names[o->name].name);
    v->op = name;
    if (o->num_results > 0 &&
        (o->first_result < f->base || o->first_result + o->num_results > f->num_values))
      MALFORMED(v, "malformed program: %s results outside the function's values", name);
    L.op = o;
    lower_op(&L, &f->insns[k]);
    f->insns[k].vhlo_name = prog_alloc(v->ctx, strlen(name) + 1, 1);
    strcpy((char*)f->insns[k].vhlo_name, name);
    for (int r = 0; r < o->num_results; r++) defined[o->first_result + r] = true;
  }
  v->op = "vhlo.return_v1";
  for (int k = 0; k < f->num_results; k++) {
    int id = f->results[k];
    check(v, id >= 0 && id < f->num_values && defined[id], "returns an undefined value");
  }
  vh_finish_func(v, f);
}

void vh_finish_func(vh* v, prog_func* f) {
  fold_scalar_broadcasts(v, f);
  /* last use of each value, so the interpreter can free intermediates early; what a region
   * reads counts as read by the op that owns the region */
  f->last_use = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(int));
  for (int k = 0; k < f->num_values; k++) f->last_use[k] = -1;
  for (int k = 0; k < f->num_insns; k++) {
    for (int r = 0; r < f->insns[k].num_in; r++) f->last_use[f->insns[k].in[r]] = k;
    for (int r = 0; r < f->insns[k].num_cap; r++) f->last_use[f->insns[k].cap[r]] = k;
  }
  for (int k = 0; k < f->num_results; k++) f->last_use[f->results[k]] = f->num_insns;
}

static void lower_func(vh* v, const bc_op* op, prog_func* f) {
  bool* defined = prog_alloc(v->ctx, (size_t)f->num_values, sizeof(bool));
  for (int k = 0; k < f->num_args; k++) defined[k] = true;
  lower_body(v, &op->regions[0].blocks[0], f, defined);
}

void vh_lower_region(lowering* L, prog_insn* in, const bc_region* r, prog_func* sub) {
  vh* v = L->v;
  const char* owner = v->op;
  const prog_func* parent = L->f;
  check(v, r->num_blocks == 1, "a region needs exactly one block");
  const bc_block* b = &r->blocks[0];
  int base = L->op->isolated ? 0 : parent->num_values;
  sub->name = owner;
  sub->base = base;
  sub->first_arg = base;
  sub->num_args = b->num_args;
  sub->num_values = base + r->num_values;
  sub->values = prog_alloc(v->ctx, (size_t)(sub->num_values > 0 ? sub->num_values : 1),
                           sizeof(prog_shape));
  bool* defined = prog_alloc(v->ctx, (size_t)(sub->num_values > 0 ? sub->num_values : 1),
                             sizeof(bool));
  if (base > 0) {
    memcpy(sub->values, parent->values, (size_t)base * sizeof(prog_shape));
    memcpy(defined, L->defined, (size_t)base * sizeof(bool));
  }
  for (int k = 0; k < b->num_args; k++) {
    check(v, b->arg_values[k] == base + k && base + k < sub->num_values, "region argument numbering");
    sub->values[base + k] = tensor_type(v, b->arg_types[k]);
    defined[base + k] = true;
  }
  const bc_op* ret = func_body_return(v, b);
  sub->num_results = ret->num_operands;
  sub->results = ret->operands;
  lower_body(v, b, sub, defined);
  v->op = owner;
  /* what the region reads of the enclosing function: operands, nested captures, results */
  int extra = 0;
  for (int k = 0; k < sub->num_insns; k++) extra += sub->insns[k].num_in + sub->insns[k].num_cap;
  extra += sub->num_results;
  int* cap = prog_alloc(v->ctx, (size_t)(in->num_cap + extra + 1), sizeof(int));
  if (in->num_cap > 0) memcpy(cap, in->cap, (size_t)in->num_cap * sizeof(int));
  int n = in->num_cap;
  for (int k = 0; k <= sub->num_insns; k++) {
    const prog_insn* x = k < sub->num_insns ? &sub->insns[k] : NULL;
    int count = x ? x->num_in + x->num_cap : sub->num_results;
    for (int q = 0; q < count; q++) {
      int id = !x ? sub->results[q] : q < x->num_in ? x->in[q] : x->cap[q - x->num_in];
      if (id >= base) continue;
      bool seen = false;
      for (int j = 0; j < n && !seen; j++) seen = cap[j] == id;
      if (!seen) cap[n++] = id;
    }
  }
  in->cap = cap;
  in->num_cap = n;
}

int vh_region_kind(vh* v, const prog_func* sub) {
  (void)v;
  if (sub->num_args != 2 || sub->num_insns != 1 || sub->num_results != 1) return RED_GENERIC;
  const prog_insn* x = &sub->insns[0];
  if (x->num_in != 2 || x->num_cap != 0 || x->scalar_in || sub->results[0] != x->out)
    return RED_GENERIC;
  int a0 = sub->first_arg, a1 = sub->first_arg + 1;
  if (!((x->in[0] == a0 && x->in[1] == a1) || (x->in[0] == a1 && x->in[1] == a0)))
    return RED_GENERIC;
  if (sub->values[a0].rank != 0 || sub->values[a1].rank != 0) return RED_GENERIC;
  /* 4-bit integers have no fast kernels: their regions run op by op */
  if (sub->values[a0].dtype == PROG_S4 || sub->values[a0].dtype == PROG_U4) return RED_GENERIC;
  switch (x->op) {
    case OP_ADD: return RED_ADD;
    case OP_MUL: return RED_MUL;
    case OP_MAX: return RED_MAX;
    case OP_MIN: return RED_MIN;
    case OP_AND: return RED_AND;
    case OP_OR: return RED_OR;
    case OP_XOR: return RED_XOR;
    default: return RED_GENERIC;
  }
}

static void check_call_tree(vh* v, prog_program* p, const prog_func* fn, int depth, int* state);

/* Calls must match the callee's signature, and no function may reach itself (the interpreter
 * recurses on calls). */
static void check_calls(vh* v, prog_program* p, int f, int depth, int* state) {
  if (state[f] == 2) return;
  if (state[f] == 1 || depth > 64) UNSUPPORTED(v, "unsupported: recursive function calls");
  state[f] = 1;
  check_call_tree(v, p, &p->funcs[f], depth, state);
  state[f] = 2;
}

static void check_call_tree(vh* v, prog_program* p, const prog_func* fn, int depth, int* state) {
  if (depth > 64) UNSUPPORTED(v, "unsupported: regions or calls nested too deeply");
  for (int k = 0; k < fn->num_insns; k++) {
    prog_insn* in = &fn->insns[k];
    for (int s = 0; s < in->num_sub; s++) check_call_tree(v, p, &in->sub[s], depth + 1, state);
    if (in->op != OP_CALL) continue;
    prog_func* callee = &p->funcs[in->iarg];
    v->op = in->vhlo_name;
    check(v, in->num_in == callee->num_args && in->num_out == callee->num_results,
          "call arity differs from the callee's");
    for (int r = 0; r < in->num_in; r++) {
      const prog_shape *a = &fn->values[in->in[r]], *b = &callee->values[r];
      check(v, same_dims(a, b) && a->dtype == b->dtype, "call argument types");
    }
    for (int r = 0; r < in->num_out; r++) {
      const prog_shape *a = &fn->values[in->out + r], *b = &callee->values[callee->results[r]];
      check(v, same_dims(a, b) && a->dtype == b->dtype, "call result types");
    }
    check_calls(v, p, in->iarg, depth + 1, state);
  }
}

void vh_lower(prog_ctx* ctx, const bc_module* m, prog_program* p) {
  vh v = {ctx, m, bc_dialect(m, "builtin"), bc_dialect(m, "vhlo"), p, "module"};
  if (v.vhlo < 0) {
    if (bc_dialect(m, "stablehlo") >= 0)
      UNSUPPORTED(&v, "unsupported: native stablehlo bytecode (producer %s); the dumpref "
                      "reader reads StableHLO portable artifacts (vhlo)", m->producer);
    UNSUPPORTED(&v, "unsupported: no vhlo dialect in the program (producer %s)", m->producer);
  }
  const bc_block* top = &m->top.regions[0].blocks[0];
  if (top->num_ops != 1 || strcmp(m->op_names[top->ops[0].name].name, "module") != 0 ||
      top->ops[0].num_regions != 1 || top->ops[0].regions[0].num_blocks != 1)
    MALFORMED(&v, "malformed program: expected a single builtin.module");
  const bc_op* module = &top->ops[0];
  p->name = "module";
  if (module->props >= 0) {  /* builtin.module: optional sym_name, stored as (index << 1 | set) */
    bc_cursor c = bc_props(m, module->props);
    uint64_t name = bc_varint(&c);
    if ((name & 1) && (name >> 1) < (uint64_t)m->num_attrs) p->name = attr_string(&v, (int)(name >> 1));
  }
  const bc_block* body = &module->regions[0].blocks[0];

  int num_funcs = 0;
  for (int k = 0; k < body->num_ops; k++) {
    const bc_op_name* n = &m->op_names[body->ops[k].name];
    if (n->dialect == v.vhlo && strcmp(n->name, "func_v1") == 0) num_funcs++;
    else if (strcmp(m->dialects[n->dialect], "sdy") != 0)
      UNSUPPORTED(&v, "unsupported module-level op %s.%s", m->dialects[n->dialect], n->name);
  }
  p->num_funcs = num_funcs;
  p->funcs = prog_alloc(ctx, (size_t)num_funcs, sizeof(prog_func));
  const bc_op** ops = prog_alloc(ctx, (size_t)num_funcs, sizeof(bc_op*));
  int f = 0;
  for (int k = 0; k < body->num_ops; k++)
    if (m->op_names[body->ops[k].name].dialect == v.vhlo) {
      ops[f] = &body->ops[k];
      declare_func(&v, ops[f], &p->funcs[f]);
      f++;
    }
  p->main = find_func(p, "main");
  if (p->main < 0) MALFORMED(&v, "malformed program: no function named main");
  for (f = 0; f < num_funcs; f++) lower_func(&v, ops[f], &p->funcs[f]);
  int* state = prog_alloc(ctx, (size_t)num_funcs, sizeof(int));
  check_calls(&v, p, p->main, 0, state);
}
