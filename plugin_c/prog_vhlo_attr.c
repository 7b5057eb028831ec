/* prog_vhlo_attr.c -- what every lowering reads and checks: the module's attribute and type
 * entries (strings, integers, enums, tensors, dimension lists), an op's named attributes and
 * operands, and the shape relations the interpreter relies on (dot_general's among them, one
 * check for the bytecode and the text readers).  It stands below the lowerings (prog_vhlo.c,
 * prog_vhlo_ops.c) and the text reader (prog_text.c), and calls none of them. */
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


const char* string_at(vh* v, bc_cursor* c) {
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
    /* A flat symbol reference names a string attribute; read it here rather than recursing,
     * since a reference to itself (or a chain of them) would recurse until the stack ran out
     * (libFuzzer: tests/pjrt_exec/corpus/flat-symbol-refers-to-itself.bin). */
    if (code == BUILTIN_FLAT_SYMBOL) {
      uint64_t j = bc_varint(&c);
      if (j >= (uint64_t)v->m->num_attrs)
        MALFORMED(v, "malformed bytecode: attribute index %llu", (unsigned long long)j);
      if (attr_code(v, (int)j, v->builtin, &c) != BUILTIN_STRING)
        UNSUPPORTED(v, "expected a flat symbol reference to a string attribute in %s", v->op);
      return string_at(v, &c);
    }
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
 * Booleans are stored packed, one bit per element (a splat as a single 0x00/0xFF byte), so a
 * tensor of 2 to 8 booleans is one byte either way: as in MLIR (DenseElementsAttr::
 * isValidRawBuffer), only 0x00 and 0xFF are splats there, and any other byte holds the bits of
 * the elements (once read as a splat of true: jnp.sum(x, where=mask) with a 4-element mask
 * closed over summed everything; issue 20).  A tensor of no elements may still be a splat of one element's bytes (MLIR folds constants into
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
    if (size == 1 && n > 1 && (blob[0] == 0x00 || blob[0] == 0xFF)) {
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

int find_func(prog_program* p, const char* name) {
  for (int k = 0; k < p->num_funcs; k++)
    if (strcmp(p->funcs[k].name, name) == 0) return k;
  return -1;
}

/* ---- lowering, by op family ------------------------------------------------------------- */


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

/* A vhlo attribute's code and a cursor after it, without throwing: false for entries of other
 * dialects or in textual form (argument attributes may carry anything: sdy shardings...). */
bool peek_vhlo_attr(vh* v, int i, uint64_t* code, bc_cursor* c) {
  const bc_entry* e = attr_entry(v, i);
  if (e->dialect != v->vhlo || !e->custom) return false;
  *c = entry_cursor(v, e, "attribute");
  *code = bc_varint(c);
  return true;
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
