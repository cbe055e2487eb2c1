/* Cast, CastLike, QuantizeLinear and DequantizeLinear for the dtypes MLX lacks (float8 variants,
 * float8e8m0, float4e2m1, int4/uint4, int2/uint2), which travel inside MLX as uint8 arrays of raw
 * codes, one per element. Decoding looks the codes up in a table built on the host; encoding works
 * on bit patterns with integer ops, so rounding and saturation are exact. Rows here claim only nodes
 * that involve such a dtype; the plain rows of cast.c and quantize.c handle the rest. */
#include <math.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"

/* Shapes pass through op_util_quant_param, whose buffers hold OP_UTIL_MAX_RANK dims. */

/* ---- formats ------------------------------------------------------------------------------ */

/* A float8 format with sign, exponent and mantissa bits (e8m0 and float4 are handled apart). */
typedef struct f8_format {
  int32_t dtype;
  int mbits;              /* mantissa bits */
  int bias;               /* exponent bias */
  uint32_t max_code;      /* magnitude code of the largest finite value */
  uint32_t nan_code;      /* magnitude code written for NaN (the sign is added, except fnuz) */
  uint32_t overflow_code; /* magnitude code of a non-saturating overflow: inf, else NaN */
  bool fnuz;              /* no negative zero, a single NaN 0x80 */
} f8_format;

static const f8_format f8_formats[] = {
    {ONNX_FLOAT8E4M3FN, 3, 7, 0x7E, 0x7F, 0x7F, false},
    {ONNX_FLOAT8E4M3FNUZ, 3, 8, 0x7F, 0x80, 0x80, true},
    /* NaN written as 0x7F as ORT does (ml_dtypes writes 0x7E; both are NaN). */
    {ONNX_FLOAT8E5M2, 2, 15, 0x7B, 0x7F, 0x7C, false},
    {ONNX_FLOAT8E5M2FNUZ, 2, 16, 0x7F, 0x80, 0x80, true},
};

static const f8_format *f8_find(int32_t dtype) {
  for (size_t i = 0; i < sizeof f8_formats / sizeof f8_formats[0]; i++)
    if (f8_formats[i].dtype == dtype) return &f8_formats[i];
  return NULL;
}

static bool emu_is_int(int32_t t) {
  return t == ONNX_INT4 || t == ONNX_UINT4 || t == ONNX_INT2 || t == ONNX_UINT2;
}

/* Emulated dtypes whose codes stand for floating-point values. */
static bool emu_is_float(int32_t t) { return f8_find(t) || t == ONNX_FLOAT8E8M0 || t == ONNX_FLOAT4E2M1; }

static bool emu_is(int32_t t) { return t > ONNX_UNDEFINED && t < ONNX_DTYPE_MAX && ir_dtype_emulated_bits(t) > 0; }

static bool mlx_is_float(mlxb_dtype t) { return t == MLXB_F16 || t == MLXB_BF16 || t == MLXB_F32 || t == MLXB_F64; }

/* ---- small helpers ------------------------------------------------------------------------ */

static mlxb_array *u32(mlxb_scope *s, uint32_t v) { return mlxb_scalar_i64(s, v, MLXB_U32); }
static mlxb_array *bin(mlxb_scope *s, mlxb_binary_op op, const mlxb_array *a, const mlxb_array *b) {
  return mlxb_binary(s, op, a, b);
}
static mlxb_array *to_type(mlxb_scope *s, mlxb_array *x, mlxb_dtype t) {
  if (!x || mlxb_type(x) == t) return x;
  return mlxb_astype(s, x, t);
}

/* ---- decoding: codes -> values ------------------------------------------------------------- */

static float f32_from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* The float32 value of one code (exact: every value of these formats is a float32). NaN keeps
 * the code's sign, as ORT's decoders do. */
static float emu_code_value(int32_t dtype, unsigned code) {
  const f8_format *f = f8_find(dtype);
  if (f) {
    unsigned sign = code >> 7, mag = code & 0x7F;
    unsigned e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
    unsigned emax = (1u << (7 - f->mbits)) - 1;
    if (f->fnuz && code == 0x80) return f32_from_bits(0xFFC00000u);
    if (f->dtype == ONNX_FLOAT8E4M3FN && mag == 0x7F) return f32_from_bits(0x7FC00000u | sign << 31);
    if (f->dtype == ONNX_FLOAT8E5M2 && e == emax)
      return f32_from_bits((m ? 0x7FC00000u : 0x7F800000u) | sign << 31);
    float v = e == 0 ? ldexpf((float)m, 1 - f->bias - f->mbits) : ldexpf((float)((1u << f->mbits) | m), (int)e - f->bias - f->mbits);
    return sign ? -v : v;
  }
  if (dtype == ONNX_FLOAT8E8M0) {
    if (code == 0xFF) return f32_from_bits(0x7FC00000u);
    return code == 0 ? f32_from_bits(0x00400000u) : f32_from_bits((uint32_t)code << 23); /* 2^(code-127) */
  }
  /* float4e2m1: S.EE.M, bias 1, no inf or NaN. */
  unsigned sign = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  float v = e == 0 ? 0.5f * (float)m : ldexpf(1.0f + 0.5f * (float)m, (int)e - 1);
  return sign ? -v : v;
}

/* Codes of an emulated float dtype -> float32 values, through a table of every code. */
static mlxb_array *decode_float(mlxb_scope *s, mlxb_array *codes, int32_t dtype) {
  float table[256];
  int n = 1 << ir_dtype_emulated_bits(dtype);
  for (int i = 0; i < n; i++) table[i] = emu_code_value(dtype, (unsigned)i);
  int64_t dims[1] = {n};
  return mlxb_take(s, mlxb_from_data(s, table, dims, 1, MLXB_F32), codes, 0);
}

/* Codes of an emulated integer dtype -> int8 (signed types, sign-extended) or uint8 values. */
static mlxb_array *decode_int(mlxb_scope *s, mlxb_array *codes, int32_t dtype) {
  if (dtype == ONNX_UINT4 || dtype == ONNX_UINT2) return codes;
  static const int8_t int4[16] = {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1};
  static const int8_t int2[4] = {0, 1, -2, -1};
  int64_t dims[1] = {dtype == ONNX_INT4 ? 16 : 4};
  return mlxb_take(s, mlxb_from_data(s, dtype == ONNX_INT4 ? int4 : int2, dims, 1, MLXB_I8), codes, 0);
}

/* Values of any input: emulated floats as float32, emulated ints as int8/uint8, others as they are. */
static mlxb_array *decode_any(mlxb_scope *s, mlxb_array *x, int32_t dtype) {
  if (emu_is_float(dtype)) return decode_float(s, x, dtype);
  if (emu_is_int(dtype)) return decode_int(s, x, dtype);
  return x;
}

/* ---- encoding: values -> codes ------------------------------------------------------------ */

/* float32 -> float8 codes. Results in the normal range round the float32 mantissa to nearest
 * even on the bit pattern (a carry moves into the exponent), subnormal results shift the full
 * mantissa right by a per-element amount and round to nearest even; then overflow (infinity
 * included) saturates or becomes inf/NaN, as the Cast tables of the ONNX spec say. */
static mlxb_array *encode_f8(mlxb_scope *s, mlxb_array *x, const f8_format *f, bool saturate) {
  int shift = 23 - f->mbits, emin = 1 - f->bias;
  mlxb_array *one = u32(s, 1);
  mlxb_array *u = mlxb_view(s, x, MLXB_U32);
  mlxb_array *sign = bin(s, MLXB_RIGHT_SHIFT, u, u32(s, 31));
  mlxb_array *a = bin(s, MLXB_BITWISE_AND, u, u32(s, 0x7FFFFFFFu));

  mlxb_array *lsb = bin(s, MLXB_BITWISE_AND, bin(s, MLXB_RIGHT_SHIFT, a, u32(s, (uint32_t)shift)), one);
  mlxb_array *rn = bin(s, MLXB_ADD, bin(s, MLXB_ADD, a, u32(s, (1u << (shift - 1)) - 1)), lsb);
  rn = bin(s, MLXB_RIGHT_SHIFT, rn, u32(s, (uint32_t)shift));
  mlxb_array *mag_n = bin(s, MLXB_SUB, rn, u32(s, (uint32_t)(127 - f->bias) << f->mbits));

  /* value = mant * 2^(e - 150) and the subnormal step is 2^(emin - mbits): shift by top - e,
   * at least shift + 1 where results are subnormal; past 25 every mantissa rounds to 0. */
  uint32_t top = (uint32_t)(shift + 127 + emin);
  mlxb_array *e = bin(s, MLXB_RIGHT_SHIFT, a, u32(s, 23));
  mlxb_array *mant = bin(s, MLXB_BITWISE_OR, bin(s, MLXB_BITWISE_AND, a, u32(s, 0x7FFFFFu)), u32(s, 0x800000u));
  mlxb_array *sh = bin(s, MLXB_SUB, u32(s, top), bin(s, MLXB_MINIMUM, e, u32(s, top - 1)));
  sh = bin(s, MLXB_MINIMUM, sh, u32(s, 25));
  mlxb_array *q = bin(s, MLXB_RIGHT_SHIFT, mant, sh);
  mlxb_array *rem = bin(s, MLXB_BITWISE_AND, mant, bin(s, MLXB_SUB, bin(s, MLXB_LEFT_SHIFT, one, sh), one));
  mlxb_array *half = bin(s, MLXB_LEFT_SHIFT, one, bin(s, MLXB_SUB, sh, one));
  mlxb_array *odd = bin(s, MLXB_EQUAL, bin(s, MLXB_BITWISE_AND, q, one), one);
  mlxb_array *up = bin(s, MLXB_LOGICAL_OR, bin(s, MLXB_GREATER, rem, half),
                       bin(s, MLXB_LOGICAL_AND, bin(s, MLXB_EQUAL, rem, half), odd));
  mlxb_array *mag_s = bin(s, MLXB_ADD, q, to_type(s, up, MLXB_U32));

  uint32_t normal_min = (uint32_t)(127 + emin) << 23;
  mlxb_array *mag = mlxb_where(s, bin(s, MLXB_GREATER_EQUAL, a, u32(s, normal_min)), mag_n, mag_s);
  /* Infinity's pattern rounds past every finite code, so it lands here too. */
  mlxb_array *over = bin(s, MLXB_GREATER, mag, u32(s, f->max_code));
  mag = mlxb_where(s, over, u32(s, saturate ? f->max_code : f->overflow_code), mag);
  mag = mlxb_where(s, bin(s, MLXB_GREATER, a, u32(s, 0x7F800000u)), u32(s, f->nan_code), mag);
  mlxb_array *code = bin(s, MLXB_BITWISE_OR, bin(s, MLXB_LEFT_SHIFT, sign, u32(s, 7)), mag);
  /* fnuz: NaN and overflow are 0x80 whatever the sign; zero has no negative form. */
  if (f->fnuz) code = mlxb_where(s, bin(s, MLXB_EQUAL, mag, u32(s, 0)), u32(s, 0), code);
  return to_type(s, code, MLXB_U8);
}

typedef enum round_mode { ROUND_UP, ROUND_DOWN, ROUND_NEAREST } round_mode;

/* float32 -> float8e8m0 codes (2^(code-127), 0xFF is NaN) with ORT's rules: `up` rounds any
 * fraction up, `down` drops it, `nearest` rounds ties up. Saturating, values below 2^-127 (zero
 * included), negatives and -inf give 0x00 and overflow or +inf give 0xFE; without saturation all
 * of these, and any value above 2^127, give NaN. */
static mlxb_array *encode_e8m0(mlxb_scope *s, mlxb_array *x, bool saturate, round_mode mode) {
  mlxb_array *zero = u32(s, 0), *nan = u32(s, 0xFF);
  mlxb_array *u = mlxb_view(s, x, MLXB_U32);
  mlxb_array *a = bin(s, MLXB_BITWISE_AND, u, u32(s, 0x7FFFFFFFu));
  mlxb_array *e = bin(s, MLXB_RIGHT_SHIFT, a, u32(s, 23));
  mlxb_array *m = bin(s, MLXB_BITWISE_AND, a, u32(s, 0x7FFFFFu));
  /* Normal inputs: the exponent field, plus one when the mantissa rounds up. Subnormal inputs at
   * or above 2^-127 (m >= 2^22) round between codes 0 and 1. */
  mlxb_array *inc = zero, *inc_sub = zero;
  if (mode == ROUND_UP) {
    inc = to_type(s, bin(s, MLXB_NOT_EQUAL, m, zero), MLXB_U32);
    inc_sub = to_type(s, bin(s, MLXB_GREATER, m, u32(s, 0x400000u)), MLXB_U32);
  } else if (mode == ROUND_NEAREST) {
    inc = to_type(s, bin(s, MLXB_GREATER_EQUAL, m, u32(s, 0x400000u)), MLXB_U32);
    inc_sub = to_type(s, bin(s, MLXB_GREATER_EQUAL, m, u32(s, 0x600000u)), MLXB_U32);
  }
  mlxb_array *code = mlxb_where(s, bin(s, MLXB_EQUAL, e, zero), inc_sub, bin(s, MLXB_ADD, e, inc));
  mlxb_array *low = saturate ? zero : nan, *high = saturate ? u32(s, 0xFE) : nan;
  code = mlxb_where(s, bin(s, MLXB_GREATER, code, u32(s, 0xFE)), high, code);
  if (!saturate)
    code = mlxb_where(s, bin(s, MLXB_GREATER, a, u32(s, 0x7F000000u)), nan, code); /* above 2^127 */
  code = mlxb_where(s, bin(s, MLXB_LESS, a, u32(s, 0x00400000u)), low, code);       /* below 2^-127 */
  code = mlxb_where(s, bin(s, MLXB_GREATER_EQUAL, u, u32(s, 0x80000000u)), low, code); /* negative */
  code = mlxb_where(s, bin(s, MLXB_EQUAL, u, u32(s, 0x7F800000u)), high, code);        /* +inf */
  code = mlxb_where(s, bin(s, MLXB_GREATER, a, u32(s, 0x7F800000u)), nan, code);
  return to_type(s, code, MLXB_U8);
}

/* The sign bit of a float array of any width, as uint8 0/1. */
static mlxb_array *sign_bit(mlxb_scope *s, mlxb_array *x) {
  mlxb_dtype t = mlxb_type(x);
  mlxb_dtype ut = t == MLXB_F64 ? MLXB_U64 : t == MLXB_F32 ? MLXB_U32 : MLXB_U16;
  int bits = (int)mlxb_dtype_size(t) * 8 - 1;
  mlxb_array *u = mlxb_view(s, x, ut);
  return to_type(s, bin(s, MLXB_RIGHT_SHIFT, u, mlxb_scalar_i64(s, bits, ut)), MLXB_U8);
}

/* float (any width) -> float4e2m1 codes by counting the rounding thresholds below |x| in the
 * input's own precision (every threshold is exact there): a tie goes to the even code, overflow
 * and infinity saturate to ±6. NaN becomes the code ml_dtypes (the ONNX reference) gives: 0x8 for
 * a positive NaN, 0x0 for a negative one. */
static mlxb_array *encode_f4(mlxb_scope *s, mlxb_array *x) {
  static const double thresholds[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  mlxb_dtype t = mlxb_type(x);
  mlxb_array *ax = mlxb_unary(s, MLXB_ABS, x);
  mlxb_array *mag = NULL;
  for (int k = 0; k < 7; k++) {
    /* Threshold k lies below code k + 1: ties go up only when k + 1 is even. */
    mlxb_binary_op cmp = (k + 1) % 2 == 0 ? MLXB_GREATER_EQUAL : MLXB_GREATER;
    mlxb_array *step = to_type(s, bin(s, cmp, ax, mlxb_scalar_f64(s, thresholds[k], t)), MLXB_U8);
    mag = mag ? bin(s, MLXB_ADD, mag, step) : step;
  }
  mlxb_array *sign = sign_bit(s, x);
  mlxb_array *code = bin(s, MLXB_BITWISE_OR, bin(s, MLXB_LEFT_SHIFT, sign, mlxb_scalar_i64(s, 3, MLXB_U8)), mag);
  mlxb_array *nan_code = bin(s, MLXB_LEFT_SHIFT, bin(s, MLXB_BITWISE_XOR, sign, mlxb_scalar_i64(s, 1, MLXB_U8)),
                             mlxb_scalar_i64(s, 3, MLXB_U8));
  return mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, x), nan_code, code);
}

/* Values -> codes of int4/uint4/int2/uint2: integers keep their low bits (two's complement), as
 * ONNX's fixed-point casts do; floats round half away from zero to an int32 first (ORT's
 * static_cast<int>(std::round(x))), where NaN and values outside int32 give 0 (x86's INT_MIN,
 * whose low bits are 0). */
static mlxb_array *encode_int(mlxb_scope *s, mlxb_array *x, int32_t dtype) {
  uint32_t mask = (1u << ir_dtype_emulated_bits(dtype)) - 1;
  mlxb_dtype t = mlxb_type(x);
  if (t == MLXB_BOOL) return to_type(s, x, MLXB_U8);
  if (!mlx_is_float(t)) return to_type(s, bin(s, MLXB_BITWISE_AND, x, mlxb_scalar_i64(s, mask, t)), MLXB_U8);
  mlxb_dtype ft = t == MLXB_F64 ? MLXB_F64 : MLXB_F32, it = t == MLXB_F64 ? MLXB_I64 : MLXB_I32;
  x = to_type(s, x, ft);
  mlxb_array *fzero = mlxb_scalar_f64(s, 0.0, ft), *izero = mlxb_scalar_i64(s, 0, it);
  mlxb_array *valid = bin(s, MLXB_LESS, mlxb_unary(s, MLXB_ABS, x), mlxb_scalar_f64(s, 2147483648.0, ft));
  mlxb_array *xs = mlxb_where(s, valid, x, fzero);
  mlxb_array *tr = mlxb_astype(s, xs, it); /* truncation; exact below 2^31 */
  mlxb_array *frac = bin(s, MLXB_SUB, xs, mlxb_astype(s, tr, ft));
  mlxb_array *adj = mlxb_where(s, bin(s, MLXB_GREATER_EQUAL, frac, mlxb_scalar_f64(s, 0.5, ft)), mlxb_scalar_i64(s, 1, it),
                               mlxb_where(s, bin(s, MLXB_LESS_EQUAL, frac, mlxb_scalar_f64(s, -0.5, ft)),
                                          mlxb_scalar_i64(s, -1, it), izero));
  mlxb_array *r = mlxb_where(s, valid, bin(s, MLXB_ADD, tr, adj), izero);
  return to_type(s, bin(s, MLXB_BITWISE_AND, r, mlxb_scalar_i64(s, mask, it)), MLXB_U8);
}

typedef struct cast_opts {
  bool saturate;   /* float8 targets */
  round_mode mode; /* float8e8m0 targets */
} cast_opts;

/* Values (any MLX dtype, as decode_any gives them) -> the ONNX dtype `to`: codes for emulated
 * dtypes, an MLX array otherwise. float8 and e8m0 targets go through float32 as ORT does
 * (float64 is rounded to float32 first). */
static mlxb_array *encode_any(mlxb_scope *s, mlxb_array *v, int32_t to, const cast_opts *o) {
  const f8_format *f = f8_find(to);
  if (f) return encode_f8(s, to_type(s, v, MLXB_F32), f, o->saturate);
  if (to == ONNX_FLOAT8E8M0) return encode_e8m0(s, to_type(s, v, MLXB_F32), o->saturate, o->mode);
  if (to == ONNX_FLOAT4E2M1) return encode_f4(s, mlx_is_float(mlxb_type(v)) ? v : to_type(s, v, MLXB_F32));
  if (emu_is_int(to)) return encode_int(s, v, to);
  int t = op_mlx_dtype(to);
  if (t < 0) {
    mlxb_set_error(s, "unsupported target dtype");
    return NULL;
  }
  return to_type(s, v, (mlxb_dtype)t);
}

/* ---- Cast / CastLike ---------------------------------------------------------------------- */

static bool dtype_known(int32_t t) { return emu_is(t) || (t > ONNX_UNDEFINED && op_mlx_dtype(t) >= 0); }

static bool parse_round_mode(const char *s, round_mode *out) {
  if (!strcmp(s, "up")) *out = ROUND_UP;
  else if (!strcmp(s, "down")) *out = ROUND_DOWN;
  else if (!strcmp(s, "nearest")) *out = ROUND_NEAREST;
  else return false;
  return true;
}

static bool claim_cast_pair(claim_ctx *c, int32_t from, int32_t to) {
  if (!emu_is(from) && !emu_is(to))
    return claim_decline(c, "no emulated dtype (%s to %s): the plain Cast row handles it", ir_dtype_name(from),
                         ir_dtype_name(to));
  if (!dtype_known(from) || !dtype_known(to))
    return claim_decline(c, "cast %s to %s: dtype neither MLX nor emulated", ir_dtype_name(from), ir_dtype_name(to));
  round_mode mode;
  if (!parse_round_mode(ir_attr_string(c->node, "round_mode", "up"), &mode))
    return claim_decline(c, "round_mode '%s' is not up, down or nearest", ir_attr_string(c->node, "round_mode", ""));
  return true;
}

static bool claim_cast(claim_ctx *c, const op_def *def) {
  int64_t to = ir_attr_int(c->node, "to", ONNX_UNDEFINED);
  if (to <= ONNX_UNDEFINED || to >= ONNX_DTYPE_MAX) return claim_decline(c, "target dtype %lld is unknown", (long long)to);
  /* The codes written must be those of the dtype the graph declares (ORT allocates by it). */
  const ir_value *y = claim_output(c, 0);
  if (y && y->dtype != ONNX_UNDEFINED && y->dtype != to)
    return claim_decline(c, "output declared %s but 'to' is %s", ir_dtype_name(y->dtype), ir_dtype_name((int32_t)to));
  return claim_cast_pair(c, claim_input_dtype(c, 0), (int32_t)to);
}

static bool claim_cast_like(claim_ctx *c, const op_def *def) {
  return claim_cast_pair(c, claim_input_dtype(c, 0), claim_input_dtype(c, 1));
}

static int cast_input(op_ctx *c, int32_t to) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int32_t from = op_input_dtype(c, 0);
  if (from == to) return op_set_output(c, 0, mlxb_ref(s, x));
  cast_opts o = {ir_attr_int(op_node(c), "saturate", 1) != 0, ROUND_UP};
  if (!parse_round_mode(ir_attr_string(op_node(c), "round_mode", "up"), &o.mode)) return op_fail(c, "bad round_mode");
  /* Nodes touching float64 already run on a CPU stream (the runtime sees to it on a GPU). */
  return op_set_output(c, 0, encode_any(s, decode_any(s, x, from), to, &o));
}

static int lower_cast(op_ctx *c, const op_def *def) {
  return cast_input(c, (int32_t)ir_attr_int(op_node(c), "to", ONNX_UNDEFINED));
}

static int lower_cast_like(op_ctx *c, const op_def *def) { return cast_input(c, op_input_dtype(c, 1)); }

/* ---- QuantizeLinear / DequantizeLinear ----------------------------------------------------- */

/* Shapes (and decodes) the scale and zero point of a Q/DQ node for x; the zero point stays NULL
 * when absent. 0, or -1 with the failure recorded. */
static int q_params(op_ctx *c, mlxb_array *x, mlxb_array **scale, mlxb_array **zp) {
  mlxb_scope *s = op_scope(c);
  int rank = mlxb_ndim(x);
  if (rank > OP_UTIL_MAX_RANK) return op_fail(c, "input rank %d is too large", rank);
  int64_t dims[OP_UTIL_MAX_RANK];
  mlxb_shape(x, dims);
  const ir_node *n = op_node(c);
  int axis = op_util_axis(ir_attr_int(n, "axis", 1), rank);
  int64_t block = ir_attr_int(n, "block_size", 0);
  if (block < 0) return op_fail(c, "block_size must be non-negative");
  mlxb_array *sv = op_input(c, 1), *zv = op_input(c, 2);
  *scale = op_util_quant_param(c, to_type(s, decode_any(s, sv, op_input_dtype(c, 1)), MLXB_F32), dims, rank, axis, block);
  *zp = zv ? op_util_quant_param(c, decode_any(s, zv, op_input_dtype(c, 2)), dims, rank, axis, block) : NULL;
  if (!*scale || (zv && !*zp)) return op_fail(c, "bad scale or zero point");
  return 0;
}

static bool q_scale_ok(int32_t t) { return t == ONNX_FLOAT || t == ONNX_FLOAT16; }

static bool q_rank_ok(claim_ctx *c) {
  const ir_value *x = claim_input(c, 0);
  return !x || x->rank <= OP_UTIL_MAX_RANK;
}

static bool claim_quantize(claim_ctx *c, const op_def *def) {
  const ir_value *y = claim_output(c, 0);
  int32_t yt = y ? y->dtype : ONNX_UNDEFINED;
  if (!emu_is(yt)) return claim_decline(c, "output dtype %s is not emulated: the plain row handles it", ir_dtype_name(yt));
  if (yt == ONNX_FLOAT8E8M0) return claim_decline(c, "float8e8m0 is not a quantized type");
  if (!q_rank_ok(c)) return claim_decline(c, "input rank above %d", OP_UTIL_MAX_RANK);
  int32_t xt = claim_input_dtype(c, 0), st = claim_input_dtype(c, 1), zt = claim_input_dtype(c, 2);
  if (!q_scale_ok(xt)) return claim_decline(c, "input dtype %s (float/float16 only)", ir_dtype_name(xt));
  if (st != xt) return claim_decline(c, "scale dtype %s differs from the input's", ir_dtype_name(st));
  int64_t precision = ir_attr_int(c->node, "precision", 0);
  if (precision != 0 && precision != st) return claim_decline(c, "precision %lld differs from the scale's dtype", (long long)precision);
  if (zt != ONNX_UNDEFINED && zt != yt) return claim_decline(c, "zero point dtype differs from the output's");
  return true;
}

/* Integer targets: saturate(round_half_even(x / scale) + zp) in float32, NaN giving the type's
 * minimum as ORT's kernels do. float8 targets: x / scale encoded with `saturate`; the zero point
 * is ignored, as ORT and the ONNX reference do. float4e2m1: x / scale + zp encoded (the ONNX
 * reference; ORT has no kernel). */
static int lower_quantize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = NULL, *zp = NULL;
  if (q_params(c, x, &scale, &zp)) return -1;
  int32_t yt = op_output_dtype(c, 0);
  mlxb_array *v = bin(s, MLXB_DIV, to_type(s, x, MLXB_F32), scale);
  const f8_format *f = f8_find(yt);
  if (f) return op_set_output(c, 0, encode_f8(s, v, f, ir_attr_int(op_node(c), "saturate", 1) != 0));
  if (yt == ONNX_FLOAT4E2M1) {
    if (zp) v = bin(s, MLXB_ADD, v, zp);
    return op_set_output(c, 0, encode_f4(s, v));
  }
  if (!emu_is_int(yt)) return op_fail(c, "output dtype %s", ir_dtype_name(yt));
  int bits = ir_dtype_emulated_bits(yt);
  bool is_signed = yt == ONNX_INT4 || yt == ONNX_INT2;
  double lo = is_signed ? -(double)(1 << (bits - 1)) : 0.0, hi = is_signed ? (double)((1 << (bits - 1)) - 1) : (double)((1 << bits) - 1);
  mlxb_array *q = mlxb_unary(s, MLXB_ROUND, v);
  if (zp) q = bin(s, MLXB_ADD, q, to_type(s, zp, MLXB_F32));
  mlxb_array *flo = mlxb_scalar_f64(s, lo, MLXB_F32);
  q = mlxb_clip(s, q, flo, mlxb_scalar_f64(s, hi, MLXB_F32));
  q = mlxb_where(s, mlxb_unary(s, MLXB_ISNAN, q), flo, q);
  return op_set_output(c, 0, encode_int(s, q, yt));
}

static bool claim_dequantize(claim_ctx *c, const op_def *def) {
  int32_t xt = claim_input_dtype(c, 0), st = claim_input_dtype(c, 1), zt = claim_input_dtype(c, 2);
  if (!emu_is(xt)) return claim_decline(c, "input dtype %s is not emulated: the plain row handles it", ir_dtype_name(xt));
  if (xt == ONNX_FLOAT8E8M0) return claim_decline(c, "float8e8m0 is not a quantized type");
  if (!q_rank_ok(c)) return claim_decline(c, "input rank above %d", OP_UTIL_MAX_RANK);
  if (!q_scale_ok(st) && st != ONNX_BFLOAT16 && st != ONNX_FLOAT8E8M0)
    return claim_decline(c, "scale dtype %s (float/float16/bfloat16/float8e8m0 only)", ir_dtype_name(st));
  if (zt != ONNX_UNDEFINED && zt != xt) return claim_decline(c, "zero point dtype differs from the input's");
  const ir_value *y = claim_output(c, 0);
  int32_t yt = y ? y->dtype : ONNX_UNDEFINED;
  if (yt != ONNX_FLOAT && yt != ONNX_FLOAT16 && yt != ONNX_BFLOAT16)
    return claim_decline(c, "output dtype %s (float/float16/bfloat16 only)", ir_dtype_name(yt));
  return true;
}

/* (x - zp) * scale in float32, rounded once to the output dtype. Every emulated value and
 * difference has at most 5 significant bits, so the float32 product of a float16/bfloat16/e8m0
 * scale is exact and the one rounding equals a product in the output's precision. The zero point
 * is subtracted for float8 too (ORT requires it to be 0 there). */
static int lower_dequantize(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *scale = NULL, *zp = NULL;
  if (q_params(c, x, &scale, &zp)) return -1;
  int32_t yt = op_output_dtype(c, 0);
  int mt = op_mlx_dtype(yt);
  if (mt < 0) return op_fail(c, "output dtype %s", ir_dtype_name(yt));
  mlxb_array *dx = to_type(s, decode_any(s, x, op_input_dtype(c, 0)), MLXB_F32);
  if (zp) dx = bin(s, MLXB_SUB, dx, to_type(s, zp, MLXB_F32));
  return op_set_output(c, 0, to_type(s, bin(s, MLXB_MUL, dx, scale), (mlxb_dtype)mt));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define EMU_TYPES "float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float8e8m0, float4e2m1, int4/uint4, int2/uint2"

static const op_def defs[] = {
    OP_ROW("", "Cast", 19, 28, .inputs = {1, 1}, .outputs = {1, 1}, .claim = claim_cast, .lower = lower_cast,
           .flags = OP_FLAG_ANY_DTYPE,
           .doc = "casts from or to " EMU_TYPES " (codes in uint8), from/to every MLX dtype and between emulated "
                  "dtypes. float8: round to nearest even, saturate as the ONNX tables say (e4m3fn/fnuz overflow "
                  "gives NaN, e5m2 inf when saturate=0; ORT's CPU kernel differs on e4m3fn 480 <= |x| < 496 and e5m2 "
                  "61440 <= |x| < 65536, where it gives 448 and NaN), float64 rounded to float32 first as ORT does; "
                  "e8m0: round_mode up/down/nearest and saturate with ORT's rules (negative, zero and tiny inputs "
                  "give 0x00, or NaN without saturation); float4e2m1: round to nearest even in the input's "
                  "precision, saturating at ±6, NaN as the ONNX reference (ml_dtypes) gives; int4/uint4/int2/uint2: "
                  "integers keep their low bits, floats round half away from zero to int32 (ORT), NaN and |x| >= "
                  "2^31 give 0. Emulated floats to integers truncate through float32; NaN, inf and out-of-range "
                  "values are undefined in the spec (ORT's results there vary by code path); to bool ±0 is false "
                  "(ORT tests the code's bits: float8 -0 and e8m0 0x00 differ). Declined: string, unknown round_mode"),
    OP_ROW("", "CastLike", 19, 25, .inputs = {2, 2}, .outputs = {1, 1}, .claim = claim_cast_like,
           .lower = lower_cast_like, .flags = OP_FLAG_ANY_DTYPE,
           .doc = "as Cast, with the target dtype of input 1 (saturate and round_mode honoured)"),
    OP_ROW("", "QuantizeLinear", 19, 28, .inputs = {2, 3}, .outputs = {1, 1}, .claim = claim_quantize,
           .lower = lower_quantize, .flags = OP_FLAG_ANY_DTYPE,
           .doc = "float/float16 input with a scale of the same dtype to int4/uint4/int2/uint2 (float32 division, "
                  "round half to even, add the zero point, saturate, NaN gives the minimum, as ORT; ORT's int2/uint2 "
                  "and float16 int4 kernels overflow an int32 for inf and |x / scale| >= 2^31, this row saturates as "
                  "the spec says), float8 (x / scale encoded with saturate; the zero point ignored, as ORT and the "
                  "ONNX reference do) or float4e2m1 (x / scale + zero point, ONNX reference); per-tensor, per-axis "
                  "and blocked. Declined: bfloat16/int32 input, a scale dtype or precision other than the input's, "
                  "float8e8m0 scales"),
    OP_ROW("", "DequantizeLinear", 19, 28, .inputs = {2, 3}, .outputs = {1, 1}, .claim = claim_dequantize,
           .lower = lower_dequantize, .flags = OP_FLAG_ANY_DTYPE,
           .doc = "int4/uint4/int2/uint2, float8 and float4e2m1 inputs with float/float16/bfloat16/float8e8m0 scales "
                  "and a float/float16/bfloat16 output (output_dtype): (x - zero point) * scale in float32, exact, "
                  "rounded once; per-tensor, per-axis and blocked (blocked int4 is how exporters store LLM weights). "
                  "A nonzero float8 zero point is subtracted (ORT rejects it at run time)"),
};

OPS_FAMILY(emulated, defs);
