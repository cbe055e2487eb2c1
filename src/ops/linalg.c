/* Linear algebra: Det, from MLX's partially pivoted LU (the factorization runs on the CPU). */
#include "ops/op_util.h"

static bool claim_input0_rank(claim_ctx *c, const op_def *def) { return op_util_claim_input_rank(c, 0); }

/* ---- Det ---------------------------------------------------------------------------------- */

/* det = prod(diag(U)) * (-1)^(row swaps) from MLX's partially pivoted LU (as Eigen's, which ORT
 * uses); float16 is factored in float32 and rounded once. */
static int lower_det(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x;
  int64_t dims[OP_UTIL_MAX_RANK];
  int r = op_util_input_dims(c, 0, &x, dims);
  if (r < 0) return -1;
  if (r < 2 || dims[r - 1] != dims[r - 2]) return op_fail(c, "input must be [..., M, M]");
  mlxb_dtype out = mlxb_type(x), work = out == MLXB_F64 ? MLXB_F64 : MLXB_F32;
  int64_t n = dims[r - 1];
  if (n == 0) return op_set_output(c, 0, mlxb_full(s, dims, r - 2, mlxb_scalar_f64(s, 1.0, out), out));
  if (op_util_numel(dims, r - 2) == 0) return op_set_output(c, 0, mlxb_zeros(s, dims, r - 2, out));
  mlxb_array *lu, *piv;
  if (mlxb_lu_factor(s, mlxb_astype(s, x, work), &lu, &piv)) return op_check(c);
  int64_t idims[OP_UTIL_MAX_RANK];
  for (int i = 0; i < r; i++) idims[i] = i == r - 1 ? 1 : dims[i];
  int64_t col[2] = {n, 1};
  mlxb_array *iota = mlxb_arange(s, 0, (double)n, 1, MLXB_I32);
  mlxb_array *idx = mlxb_broadcast_to(s, mlxb_reshape(s, iota, col, 2), idims, r);
  mlxb_array *diag = mlxb_take_along_axis(s, lu, idx, r - 1);
  int last = r - 1, rows = r - 2;
  mlxb_array *prod = mlxb_reduce(s, MLXB_RPROD, mlxb_squeeze(s, diag, &last, 1), &rows, 1, false);
  /* Each pivot that is not its own row is one swap. */
  mlxb_array *swaps = mlxb_binary(s, MLXB_NOT_EQUAL, mlxb_astype(s, piv, MLXB_I32), iota);
  int pax = r - 2;
  mlxb_array *odd = mlxb_binary(s, MLXB_REMAINDER, mlxb_reduce(s, MLXB_RSUM, mlxb_astype(s, swaps, MLXB_I32), &pax, 1, false),
                                mlxb_scalar_i64(s, 2, MLXB_I32));
  mlxb_array *det = mlxb_where(s, mlxb_astype(s, odd, MLXB_BOOL), mlxb_unary(s, MLXB_NEG, prod), prod);
  return op_set_output(c, 0, mlxb_astype(s, det, out));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  OP_ROW("", "Det", 11, 22, .inputs = {1, 1}, .outputs = {1, 1}, .dtypes = DT_F32 | DT_F16 | DT_F64,
         .claim = claim_input0_rank, .lower = lower_det,
         .doc = "float32/float16/float64 [..., M, M] via MLX's partially pivoted LU on the CPU (float16 factored in "
                "float32)"),
};

OPS_FAMILY(linalg, defs);
