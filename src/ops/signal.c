/* Signal ops: DFT and STFT on MLX's FFTs (complex64, so float32 signals only), and the window
 * and mel filter-bank generators HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix,
 * whose small tables are computed on the host with ORT's formulas (its truncated pi included) from
 * their scalar inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"


/* ---- helpers ------------------------------------------------------------------------------ */

/* The complex64 signal of x [..., 1] (real: returned as float32 [...]) or x [..., 2]. */
static mlxb_array *sig_signal(op_ctx *c, mlxb_array *x, bool *complex_out) {
  mlxb_scope *s = op_scope(c);
  int r = mlxb_ndim(x);
  int64_t last = r > 0 ? mlxb_dim(x, -1) : 0;
  if (r < 2 || r > OP_UTIL_MAX_RANK || (last != 1 && last != 2)) {
    op_fail(c, "signal must have rank >= 2 and a last axis of 1 (real) or 2 (complex)");
    return NULL;
  }
  *complex_out = last == 2;
  if (last == 2) return mlxb_complex_from_pairs(s, x);
  int axis = r - 1;
  return mlxb_astype(s, mlxb_squeeze(s, x, &axis, 1), MLXB_F32);
}

/* min_rank: 3 where ORT reads a rank-2 signal as [batch, length] without the trailing axis. */
static bool claim_float32_signal(claim_ctx *c, int min_rank) {
  int32_t t = claim_input_dtype(c, 0);
  if (t == ONNX_DOUBLE) return claim_decline(c, "float64 signal (MLX's FFT computes in complex64)");
  if (t != ONNX_FLOAT) return claim_decline(c, "%s signal (ORT's kernel takes float/double)", ir_dtype_name(t));
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && (x->rank < min_rank || x->rank > OP_UTIL_MAX_RANK))
    return claim_decline(c, "signal rank %d (a trailing axis of 1 or 2 is required)", x->rank);
  if (x && x->rank > 0 && x->dims[x->rank - 1] > 2) return claim_decline(c, "last axis is not 1 or 2");
  return true;
}

/* ---- DFT ---------------------------------------------------------------------------------- */

static bool claim_dft(claim_ctx *c, const op_def *def) {
  if (!claim_float32_signal(c, c->node->since_version >= 20 ? 2 : 3)) return false;
  const ir_value *x = claim_input(c, 0);
  int64_t last = x && x->rank > 0 ? x->dims[x->rank - 1] : -1;
  bool onesided = ir_attr_int(c->node, "onesided", 0) != 0, inverse = ir_attr_int(c->node, "inverse", 0) != 0;
  if (onesided && !inverse && last == 2) return claim_decline(c, "forward onesided DFT of a complex signal");
  if (onesided && inverse && last == 1) return claim_decline(c, "inverse onesided DFT of a real signal");
  return true;
}

static int lower_dft(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  const ir_node *n = op_node(c);
  mlxb_array *x = op_input(c, 0);
  int r = mlxb_ndim(x);
  if (n->since_version < 20 && r < 3) return op_fail(c, "rank-2 signals are read as [batch, length] by ORT's opset-17 kernel");
  bool cplx;
  mlxb_array *sig = sig_signal(c, x, &cplx);
  if (!sig) return -1;
  int64_t axis = n->since_version >= 20 ? -2 : ir_attr_int(n, "axis", 1);
  if (n->since_version >= 20 && op_has_input(c, 2) && op_util_input_int(c, 2, &axis)) return -1;
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r - 2) return op_fail(c, "axis out of range for rank %d", r);
  bool onesided = ir_attr_int(n, "onesided", 0) != 0, inverse = ir_attr_int(n, "inverse", 0) != 0;
  int64_t len = mlxb_dim(sig, (int)axis);
  int64_t pts = onesided && inverse ? 2 * (len - 1) : len;
  if (op_has_input(c, 1) && op_util_input_int(c, 1, &pts)) return -1;
  if (pts <= 0) return op_fail(c, "dft_length %lld must be positive", (long long)pts);
  int ax = (int)axis;
  if (onesided && inverse) {
    if (!cplx) return op_fail(c, "an inverse onesided DFT needs a complex signal");
    int last = r - 1;
    return op_set_output(c, 0, mlxb_expand_dims(s, mlxb_irfft(s, sig, pts, ax), &last, 1));
  }
  mlxb_array *z;
  if (onesided) {
    if (cplx) return op_fail(c, "a forward onesided DFT needs a real signal");
    z = mlxb_rfft(s, sig, pts, ax);
  } else {
    z = mlxb_fft(s, cplx ? sig : mlxb_astype(s, sig, MLXB_C64), pts, ax, inverse);
  }
  return op_set_output(c, 0, mlxb_complex_to_pairs(s, z));
}

/* ---- STFT --------------------------------------------------------------------------------- */

static bool claim_stft(claim_ctx *c, const op_def *def) {
  if (!claim_float32_signal(c, 3)) return false;
  const ir_value *x = claim_input(c, 0);
  if (x && x->rank >= 0 && x->rank != 3) return claim_decline(c, "signal rank %d (expected [batch, length, 1|2])", x->rank);
  if (claim_input(c, 2) && claim_input_dtype(c, 2) != ONNX_FLOAT) return claim_decline(c, "window dtype differs from the signal's");
  if (x && x->rank == 3 && x->dims[2] == 2 && ir_attr_int(c->node, "onesided", 1))
    return claim_decline(c, "onesided STFT of a complex signal");
  return true;
}

static int lower_stft(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0), *window = op_input(c, 2);
  if (mlxb_ndim(x) != 3) return op_fail(c, "signal must be [batch, length, 1|2]");
  bool cplx;
  mlxb_array *sig = sig_signal(c, x, &cplx);
  if (!sig) return -1;
  bool onesided = ir_attr_int(op_node(c), "onesided", 1) != 0;
  if (cplx && onesided) return op_fail(c, "a onesided STFT needs a real signal");
  int64_t step = 0, length = mlxb_dim(x, 1), frame = length;
  if (op_util_input_int(c, 1, &step)) return -1;
  if (window) {
    if (mlxb_ndim(window) != 1) return op_fail(c, "window must be 1-D");
    frame = mlxb_dim(window, 0);
  }
  if (op_has_input(c, 3)) {
    int64_t fl = 0;
    if (op_util_input_int(c, 3, &fl)) return -1;
    if (window && fl != frame) return op_fail(c, "frame_length %lld differs from the window's %lld", (long long)fl, (long long)frame);
    frame = fl;
  }
  if (step <= 0 || frame <= 0 || frame > length)
    return op_fail(c, "frame_step %lld / frame_length %lld do not fit a signal of %lld", (long long)step, (long long)frame,
                   (long long)length);
  int64_t frames = (length - frame) / step + 1;
  /* idx[f, k] = f * step + k picks every frame at once: [batch, frames, frame]. */
  mlxb_array *f = op_util_iota(s, 0, frames, 0, 2, MLXB_I64), *k = op_util_iota(s, 0, frame, 1, 2, MLXB_I64);
  mlxb_array *idx = mlxb_binary(s, MLXB_ADD, mlxb_binary(s, MLXB_MUL, f, mlxb_scalar_i64(s, step, MLXB_I64)), k);
  mlxb_array *framed = mlxb_take(s, sig, idx, 1);
  if (window) framed = mlxb_binary(s, MLXB_MUL, framed, window);
  mlxb_array *z = onesided ? mlxb_rfft(s, framed, frame, 2)
                           : mlxb_fft(s, cplx ? framed : mlxb_astype(s, framed, MLXB_C64), frame, 2, false);
  return op_set_output(c, 0, mlxb_complex_to_pairs(s, z));
}

/* ---- host-built tables -------------------------------------------------------------------- */

/* Output dtypes ORT's window and mel kernels write. */
#define DT_TABLE (DT_F32 | DT_F64 | DT_INT)

static bool claim_table(claim_ctx *c, const op_def *def) {
  int64_t t = ir_attr_int(c->node, "output_datatype", ONNX_FLOAT);
  uint64_t allowed = def->arg == 3 ? (DT_F32 | DT_F64) : DT_TABLE;
  if (t <= 0 || t >= ONNX_DTYPE_MAX || !(allowed & DT(t)))
    return claim_decline(c, "output_datatype %lld is not produced by ORT's kernel here", (long long)t);
  if (def->arg == 3 && (claim_input_dtype(c, 3) != ONNX_FLOAT || claim_input_dtype(c, 4) != ONNX_FLOAT))
    return claim_decline(c, "edge frequencies are not float32 (ORT's kernel reads float)");
  return true;
}

/* Stores v (computed in double, as ORT does) as element i of a dtype-t buffer, converting like C++'s static_cast. */
static void table_store(void *buf, int32_t t, size_t i, double v) {
  if (t != ONNX_FLOAT && t != ONNX_DOUBLE && isnan(v)) v = 0; /* undefined in C; keep it defined */
  switch (t) {
    case ONNX_FLOAT: ((float *)buf)[i] = (float)v; break;
    case ONNX_DOUBLE: ((double *)buf)[i] = v; break;
    case ONNX_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ONNX_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case ONNX_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ONNX_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ONNX_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ONNX_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case ONNX_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case ONNX_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    default: break;
  }
}

/* Cosine-sum windows w[i] = a0 - a1 cos(2 pi i / N) + a2 cos(4 pi i / N), N = size (periodic) or
 * size - 1, with ORT's float coefficients and its pi = 3.14159265. */
static int lower_window(op_ctx *c, const op_def *def) {
  int64_t size = 0;
  if (op_util_input_int(c, 0, &size)) return -1;
  if (size < 0 || size > (int64_t)1 << 31) return op_fail(c, "window size %lld is out of range", (long long)size);
  float a0, a1, a2;
  switch (def->arg) {
    case 0: a0 = .5f, a1 = a0, a2 = 0; break;                               /* Hann */
    case 1: a0 = 25.f / 46.f, a1 = 1 - a0, a2 = 0; break;                   /* Hamming */
    default: a2 = .16f / 2.f, a0 = .5f - a2, a1 = .5f; break;               /* Blackman */
  }
  const ir_node *n = op_node(c);
  int32_t t = (int32_t)ir_attr_int(n, "output_datatype", ONNX_FLOAT);
  bool periodic = ir_attr_int(n, "periodic", 1) != 0;
  size_t esz = ir_dtype_size(t);
  void *buf = malloc((size_t)(size ? size : 1) * (esz ? esz : 1));
  if (!buf) return op_fail(c, "out of memory");
  const double pi = 3.14159265, tau = 2 * pi;
  size_t denominator = periodic ? (size_t)size : (size_t)size - 1;
  double step = tau / (double)denominator;
  for (size_t i = 0; i < (size_t)size; i++) {
    double a2c = a2 == 0 ? 0 : a2 * cos(2 * step * (double)i);
    table_store(buf, t, i, a0 - a1 * cos(step * (double)i) + a2c);
  }
  int rc = op_util_set_host_data(c, 0, buf, &size, 1, t);
  free(buf);
  return rc;
}

static double mel_from_hz(double hz) { return 2595 * log10(1 + hz / 700); }
static double hz_from_mel(double mel) { return 700 * (pow(10, mel / 2595) - 1); }

/* ORT's triangular filters over floor(dft_length / 2) + 1 bins, with frequency bins rounded down. */
static int lower_mel(op_ctx *c, const op_def *def) {
  int64_t bins = 0, dft = 0, rate = 0;
  double lo_hz = 0, hi_hz = 0;
  if (op_util_input_int(c, 0, &bins) || op_util_input_int(c, 1, &dft) || op_util_input_int(c, 2, &rate) ||
      op_util_input_double(c, 3, &lo_hz) || op_util_input_double(c, 4, &hi_hz))
    return -1;
  if (bins < 0 || bins > 1 << 20 || dft <= 0 || dft > (int64_t)1 << 30 || rate <= 0)
    return op_fail(c, "num_mel_bins %lld, dft_length %lld or sample_rate %lld out of range", (long long)bins, (long long)dft,
                   (long long)rate);
  int64_t spec = dft / 2 + 1;
  float lo = (float)lo_hz, hi = (float)hi_hz;
  float lowest = floorf(((float)(dft + 1) * lo) / (float)rate), highest = floorf(((float)(dft + 1) * hi) / (float)rate);
  if (!(lowest >= 0 && lowest < spec && highest >= 0 && highest < spec))
    return op_fail(c, "the mel edges fall outside the %lld spectrogram bins", (long long)spec);
  int32_t t = (int32_t)ir_attr_int(op_node(c), "output_datatype", ONNX_FLOAT);
  size_t esz = ir_dtype_size(t), total = (size_t)spec * (size_t)bins;
  size_t npts = (size_t)bins + 2;
  void *buf = calloc(total ? total : 1, esz ? esz : 1);
  int64_t *fbin = malloc(npts * sizeof *fbin);
  if (!buf || !fbin) {
    free(buf), free(fbin);
    return op_fail(c, "out of memory");
  }
  double lo_mel = mel_from_hz(lo), hi_mel = mel_from_hz(hi);
  double mel_step = (hi_mel - lo_mel) / (float)npts;
  for (size_t i = 0; i < npts; i++) {
    double hz = hz_from_mel(lo_mel + mel_step * (double)i);
    fbin[i] = (int64_t)floor(((double)(dft + 1) * hz) / (double)rate);
  }
  bool single = t == ONNX_FLOAT;
  for (int64_t i = 0; i < bins; i++) {
    int64_t left = fbin[i], center = fbin[i + 1], right = fbin[i + 2];
    int64_t up = center - left, down = right - center;
    /* The quotients are formed in the output type, as ORT's T-typed division does. */
    for (int64_t j = up == 0 ? center : left; j <= center; j++) {
      if (j < 0 || j >= spec) continue;
      double v = up == 0 ? 1.0 : single ? (double)((float)(j - left) / (float)up) : (double)(j - left) / (double)up;
      table_store(buf, t, (size_t)(j * bins + i), v);
    }
    for (int64_t j = center; down > 0 && j < right; j++) {
      if (j < 0 || j >= spec) continue;
      double v = single ? (double)((float)(right - j) / (float)down) : (double)(right - j) / (double)down;
      table_store(buf, t, (size_t)(j * bins + i), v);
    }
  }
  int64_t dims[2] = {spec, bins};
  int rc = op_util_set_host_data(c, 0, buf, dims, 2, t);
  free(buf);
  free(fbin);
  return rc;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const op_def defs[] = {
  OP_ROW("", "DFT", 17, 20, .inputs = {1, 3}, .outputs = {1, 1}, .claim = claim_dft, .lower = lower_dft,
         .doc = "float32 real ([..., 1]) or complex ([..., 2]) signals on any axis (rank >= 3 for opset 17, whose "
                "rank-2 form ORT reads as [batch, length]); forward, inverse, onesided (RFFT) and inverse onesided "
                "(IRFFT); dft_length pads or truncates; dft_length/axis inputs read on the host. Computed with MLX's "
                "FFT in complex64 (ORT's naive DFT for non-power-of-2 lengths is less accurate). Declined: float64 "
                "(MLX's FFT is complex64 only), float16/bfloat16 (no ORT kernel)"),
  OP_ROW("", "STFT", 17, 17, .inputs = {2, 4}, .outputs = {1, 1}, .claim = claim_stft, .lower = lower_stft,
         .doc = "float32 [batch, length, 1|2] signals, optional window and frame_length, onesided for real signals; "
                "frame_step/frame_length read on the host. Declined: float64, onesided complex signals"),
  OP_ROW("", "HannWindow", 17, 17, .inputs = {1, 1}, .outputs = {1, 1}, .claim = claim_table, .lower = lower_window,
         .doc = "periodic/symmetric; float, double and integer output_datatype; computed on the host with ORT's "
                "formula"),
  OP_ROW("", "HammingWindow", 17, 17, .inputs = {1, 1}, .outputs = {1, 1}, .claim = claim_table, .lower = lower_window,
         .arg = 1,
         .doc = "periodic/symmetric; float, double and integer output_datatype; computed on the host with ORT's "
                "formula"),
  OP_ROW("", "BlackmanWindow", 17, 17, .inputs = {1, 1}, .outputs = {1, 1}, .claim = claim_table, .lower = lower_window,
         .arg = 2,
         .doc = "periodic/symmetric; float, double and integer output_datatype; computed on the host with ORT's "
                "formula"),
  OP_ROW("", "MelWeightMatrix", 17, 17, .inputs = {5, 5}, .outputs = {1, 1}, .claim = claim_table, .lower = lower_mel,
         .arg = 3,
         .doc = "float/double output_datatype, computed on the host with ORT's formula. Declined: integer outputs"),
};

OPS_FAMILY(signal, defs);
