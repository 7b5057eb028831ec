/* prog_ops_table.h -- the elementwise ops of the interpreter, in one table (an X-macro list,
 * included several times: no include guard).
 *
 * A NEW ELEMENTWISE OP touches this file only: one EW row, and one kernel row (K..) per class
 * of element types the row allows.  From these rows come
 *   - its opcode OP_<NAME> (the prog_opcode enum, prog_internal.h),
 *   - its arity and dtype classes (prog_ew_arity, prog_ew_allowed, prog_internal.h),
 *   - its VHLO names for the bytecode reader and the text reader (vh_elementwise, prog_vhlo.c;
 *     the text reader looks up "<name>_v1"), and the element type checks of both readers,
 *   - its kernels: the per-op loops of prog_interp.c (floats, integers, pred, 4-bit integers)
 *     and of prog_ops_complex.c (complex), each dispatched once per instruction.
 * A kernel that is more than an expression needs a helper function beside those loops (as
 * ipow_* and int4_pow in prog_interp.c, csign_* in prog_ops_complex.c); that is the only other
 * place.  Nothing relies on the order of the rows (checked by reading: no range test on
 * opcodes remains; readers and interpreter ask prog_ew_arity / prog_ew_allowed).
 *
 * EW(NAME, ARITY, ALLOWED, V1, V2): opcode OP_NAME with ARITY operands (1 or 2) whose element
 *   type is one of the ALLOWED classes (EW_* in prog_internal.h), named V1 in VHLO and also V2
 *   (NULL when the op has no _v2 form; transcendental ops gained result_accuracy in their _v2
 *   form, StableHLO 1.9, which at the default accuracy changes nothing).
 * Kernels: an expression for one element, in x (and y for binary ops), of the element type.
 *   KF1/KF2  f32 and f64 (bf16 and f16 through f32): T the type, MF(fn) the C function fn of
 *            T (expf or exp)
 *   KI1/KI2  every integer width but 4 bits: T the type, W an unsigned type of at least 32
 *            bits for wrapping arithmetic, BITS the width, MASK its low BITS bits, SIGNED,
 *            TMIN (0 for unsigned); binary: s the shift count (y's bits), IPOW(x, y) the power
 *   KP1/KP2  pred: x, y are 0 or 1 (bool); the result is true when nonzero
 *   KN1/KN2  s4 and u4, element by element: x, y widened to int64 (s4 sign-extended), the
 *            result wrapped to 4 bits; bits (x's 4 bits), is_signed, lo (the minimum),
 *            binary: s (y's 4 bits), sx (x's 4 bits sign-extended)
 *   KC1/KC2  complex64 and complex128: T the complex type, R the real one, MC(fn) the C
 *            function fn of T (cexpf or cexp)
 * An op without a kernel for a class it allows copies its operand (unary) or gives 0
 * (binary), as the hand-written switches this table replaced did.
 *
 * (A header, not a .def file: the build's cache key and the package data take plugin_c's *.c
 * and *.h files only.)
 */
#ifndef EW
#define EW(NAME, ARITY, ALLOWED, V1, V2)
#endif
#ifndef KF1
#define KF1(NAME, EXPR)
#endif
#ifndef KF2
#define KF2(NAME, EXPR)
#endif
#ifndef KI1
#define KI1(NAME, EXPR)
#endif
#ifndef KI2
#define KI2(NAME, EXPR)
#endif
#ifndef KP1
#define KP1(NAME, EXPR)
#endif
#ifndef KP2
#define KP2(NAME, EXPR)
#endif
#ifndef KN1
#define KN1(NAME, EXPR)
#endif
#ifndef KN2
#define KN2(NAME, EXPR)
#endif
#ifndef KC1
#define KC1(NAME, EXPR)
#endif
#ifndef KC2
#define KC2(NAME, EXPR)
#endif

/* ---- one operand ------------------------------------------------------------------------ */

EW(NEGATE, 1, EW_NUMERIC, "negate_v1", NULL)
KF1(NEGATE, -x)
KI1(NEGATE, (T)(0 - (W)x))
KP1(NEGATE, x)
KN1(NEGATE, -x)
KC1(NEGATE, -x)

/* |z| of a complex z is real (EW_COMPLEX_ABS): prog_ops_complex.c's part ops compute it */
EW(ABS, 1, EW_NUMERIC | EW_COMPLEX_ABS, "abs_v1", NULL)
KF1(ABS, MF(fabs)(x))
KI1(ABS, SIGNED && neg64((int64_t)x) ? (T)(0 - (W)x) : x)
KP1(ABS, x)
KN1(ABS, is_signed && x < 0 ? -x : x)

EW(EXP, 1, EW_FLOAT_OPS, "exponential_v1", "exponential_v2")
KF1(EXP, MF(exp)(x))
KC1(EXP, MC(cexp)(x))

EW(LOG, 1, EW_FLOAT_OPS, "log_v1", "log_v2")
KF1(LOG, MF(log)(x))
KC1(LOG, MC(clog)(x))

EW(TANH, 1, EW_FLOAT_OPS, "tanh_v1", "tanh_v2")
KF1(TANH, MF(tanh)(x))  /* f64; f32 runs rt_tanh_f32 (prog_ops_vec.c), see unary_float */
KC1(TANH, MC(ctanh)(x))

EW(LOGISTIC, 1, EW_FLOAT_OPS, "logistic_v1", "logistic_v2")
KF1(LOGISTIC, (T)1 / ((T)1 + MF(exp)(-x)))
KC1(LOGISTIC, (R)1 / ((R)1 + MC(cexp)(-x)))

EW(SQRT, 1, EW_FLOAT_OPS, "sqrt_v1", "sqrt_v2")
KF1(SQRT, MF(sqrt)(x))
KC1(SQRT, MC(csqrt)(x))

EW(RSQRT, 1, EW_FLOAT_OPS, "rsqrt_v1", "rsqrt_v2")
KF1(RSQRT, (T)1 / MF(sqrt)(x))
KC1(RSQRT, (R)1 / MC(csqrt)(x))

EW(NOT, 1, EW_BIT_OPS, "not_v1", NULL)
KI1(NOT, (T)~x)
KP1(NOT, !x)
KN1(NOT, ~x)

EW(SIGN, 1, EW_NUMERIC, "sign_v1", NULL)
KF1(SIGN, isnan(x) ? x : x > 0 ? (T)1 : x < 0 ? (T)-1 : x)
KI1(SIGN, (T)(SIGNED && neg64((int64_t)x) ? (T)-1 : x != 0))
KP1(SIGN, x)
KN1(SIGN, is_signed && x < 0 ? -1 : x != 0)
KC1(SIGN, MC(csign_)(x))

EW(FLOOR, 1, EW_REAL_OPS, "floor_v1", NULL)
KF1(FLOOR, MF(floor)(x))

EW(CEIL, 1, EW_REAL_OPS, "ceil_v1", NULL)
KF1(CEIL, MF(ceil)(x))

EW(LOG1P, 1, EW_FLOAT_OPS, "log_plus_one_v1", "log_plus_one_v2")
KF1(LOG1P, MF(log1p)(x))
KC1(LOG1P, MC(clog)((R)1 + x))

EW(EXPM1, 1, EW_FLOAT_OPS, "exponential_minus_one_v1", "exponential_minus_one_v2")
KF1(EXPM1, MF(expm1)(x))
KC1(EXPM1, MC(cexp)(x) - (R)1)

EW(SIN, 1, EW_FLOAT_OPS, "sine_v1", "sine_v2")
KF1(SIN, MF(sin)(x))
KC1(SIN, MC(csin)(x))

EW(COS, 1, EW_FLOAT_OPS, "cosine_v1", "cosine_v2")
KF1(COS, MF(cos)(x))
KC1(COS, MC(ccos)(x))

EW(CBRT, 1, EW_REAL_OPS, "cbrt_v1", "cbrt_v2")
KF1(CBRT, MF(cbrt)(x))

EW(ROUND_AFZ, 1, EW_REAL_OPS, "round_nearest_afz_v1", NULL)
KF1(ROUND_AFZ, MF(round)(x))

EW(ROUND_EVEN, 1, EW_REAL_OPS, "round_nearest_even_v1", NULL)
KF1(ROUND_EVEN, MF(nearbyint)(x))

EW(TAN, 1, EW_FLOAT_OPS, "tan_v1", "tan_v2")
KF1(TAN, MF(tan)(x))
KC1(TAN, MC(ctan)(x))

/* popcnt on s4 is refused (EW_NO_S4): see S4_POPCNT_REFUSED in prog_vhlo.h */
EW(POPCNT, 1, EW_BIT_OPS | EW_NO_S4, "popcnt_v1", NULL)
KI1(POPCNT, (T)__builtin_popcountll((unsigned long long)(W)x & MASK))
KP1(POPCNT, x)
KN1(POPCNT, __builtin_popcount(bits))

EW(CLZ, 1, EW_BIT_OPS, "count_leading_zeros_v1", NULL)
KI1(CLZ, (T)(((unsigned long long)(W)x & MASK) == 0
                 ? BITS : __builtin_clzll((unsigned long long)(W)x & MASK) - (64 - BITS)))
KP1(CLZ, !x)
KN1(CLZ, bits == 0 ? 4 : __builtin_clz(bits) - (int)(8 * sizeof(unsigned) - 4))

/* ---- two operands ----------------------------------------------------------------------- */

/* pred is a one-bit integer: + is or, * is and, max is or, min is and */
EW(ADD, 2, EW_NUMERIC, "add_v1", NULL)
KF2(ADD, x + y)
KI2(ADD, (T)((W)x + (W)y))
KP2(ADD, x | y)
KN2(ADD, x + y)
KC2(ADD, x + y)

EW(SUB, 2, EW_NUMERIC, "subtract_v1", NULL)
KF2(SUB, x - y)
KI2(SUB, (T)((W)x - (W)y))
KP2(SUB, x ^ y)
KN2(SUB, x - y)
KC2(SUB, x - y)

EW(MUL, 2, EW_NUMERIC, "multiply_v1", NULL)
KF2(MUL, x * y)
KI2(MUL, (T)((W)x * (W)y))
KP2(MUL, x & y)
KN2(MUL, x * y)
KC2(MUL, x * y)

/* integer division by zero gives -1, the remainder the dividend; MIN / -1 wraps */
EW(DIV, 2, EW_NUMERIC, "divide_v1", NULL)
KF2(DIV, x / y)
KI2(DIV, y == 0 ? (T)-1 : (x == TMIN && y == (T)-1) ? TMIN : (T)(x / y))
KP2(DIV, y ? x : 1)  /* x/0 = -1, i.e. true */
KN2(DIV, y == 0 ? -1 : (x == lo && y == -1) ? lo : x / y)
KC2(DIV, x / y)

EW(REM, 2, EW_ORDERED, "remainder_v1", NULL)
KF2(REM, MF(fmod)(x, y))
KI2(REM, y == 0 ? x : (x == TMIN && y == (T)-1) ? 0 : (T)(x % y))
KP2(REM, y ? 0 : x)
KN2(REM, y == 0 ? x : (x == lo && y == -1) ? 0 : x % y)

EW(POW, 2, EW_NUMERIC, "power_v1", NULL)
KF2(POW, MF(pow)(x, y))
KI2(POW, IPOW(x, y))
KP2(POW, x | !y)
KN2(POW, int4_pow(x, y, is_signed))
KC2(POW, (y == 0) ? (T)1 : MC(cpow)(x, y))

/* max and min propagate NaN */
EW(MAX, 2, EW_ORDERED, "maximum_v1", NULL)
KF2(MAX, FMAXN(x, y))
KI2(MAX, x > y ? x : y)
KP2(MAX, x | y)
KN2(MAX, x > y ? x : y)

EW(MIN, 2, EW_ORDERED, "minimum_v1", NULL)
KF2(MIN, FMINN(x, y))
KI2(MIN, x < y ? x : y)
KP2(MIN, x & y)
KN2(MIN, x < y ? x : y)

EW(AND, 2, EW_BIT_OPS, "and_v1", NULL)
KI2(AND, x & y)
KP2(AND, x & y)
KN2(AND, x & y)

EW(OR, 2, EW_BIT_OPS, "or_v1", NULL)
KI2(OR, x | y)
KP2(OR, x | y)
KN2(OR, x | y)

EW(XOR, 2, EW_BIT_OPS, "xor_v1", NULL)
KI2(XOR, x ^ y)
KP2(XOR, x ^ y)
KN2(XOR, x ^ y)

EW(ATAN2, 2, EW_REAL_OPS, "atan2_v1", NULL)
KF2(ATAN2, MF(atan2)(x, y))

/* shifts by the bit width or more: 0, or the sign for arithmetic right shifts */
EW(SHL, 2, EW_SHIFT_OPS, "shift_left_v1", NULL)
KI2(SHL, s >= BITS ? 0 : (T)((uint64_t)(W)x << s))
KP2(SHL, y ? 0 : x)
KN2(SHL, s >= 4 ? 0 : (int64_t)(((unsigned)x & 0xfu) << s))

EW(SHRA, 2, EW_SHIFT_OPS, "shift_right_arithmetic_v1", NULL)
/* the bits as a signed value of the same width, shifted */
KI2(SHRA, (T)(s >= BITS ? (((int64_t)((uint64_t)(W)x << (64 - BITS)) >> (64 - BITS)) < 0 ? -1 : 0)
                        : ((int64_t)((uint64_t)(W)x << (64 - BITS)) >> (64 - BITS)) >> s))
KP2(SHRA, x)
KN2(SHRA, s >= 4 ? (sx < 0 ? -1 : 0) : sx >> s)

EW(SHRL, 2, EW_SHIFT_OPS, "shift_right_logical_v1", NULL)
KI2(SHRL, s >= BITS ? 0 : (T)(((uint64_t)(W)x & MASK) >> s))
KP2(SHRL, y ? 0 : x)
KN2(SHRL, s >= 4 ? 0 : (int64_t)(((unsigned)x & 0xfu) >> s))

#undef EW
#undef KF1
#undef KF2
#undef KI1
#undef KI2
#undef KP1
#undef KP2
#undef KN1
#undef KN2
#undef KC1
#undef KC2
