/* Sequence ops (opset 11+) on sequence values that live inside a cluster: a sequence is a list of
 * MLX arrays in the Run (op_input_seq, op_set_output_seq), so building, indexing and erasing cost
 * nothing in the graph; ConcatFromSequence and SplitToSequence are one concat/stack or a few
 * slices. ORT's plugin-EP interface cannot hand a sequence to or take one from a compiled node,
 * so the partitioner keeps every sequence inside one cluster (src/partition/partition.c).
 *
 * Positions (SequenceAt, SequenceInsert, SequenceErase) and split sizes are read on the host and
 * range-checked like ORT's kernels before any list is indexed: an out-of-range position fails the
 * Run naming the node, the op and the rule, and never reaches memory outside the sequence. A
 * position computed from data inside a compile trace fails the trace: that signature runs eagerly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_util.h"

enum { SEQ_MAX_ITEMS = 1 << 20 }; /* tensors one SplitToSequence makes */

/* The position input i as one integer (ORT: a scalar of int32 or int64). */
static int seq_position(op_ctx *c, int i, int64_t *pos) {
  int64_t v[2] = {0, 0};
  int n = op_input_ints(c, i, v, 2);
  if (n < 0) return -1;
  if (n != 1) return op_fail(c, "the position has %d elements, not 1", n);
  *pos = v[0];
  return 0;
}

/* ORT's rule: a position in [-n, n - 1] (insert: [-n, n]), negative counting from the back. */
static int seq_check_position(op_ctx *c, int64_t pos, int n, bool insert, int64_t *at) {
  int64_t hi = insert ? n : n - 1;
  if (pos < -(int64_t)n || pos > hi)
    return op_fail(c, "invalid sequence index (%lld) specified for sequence of size (%d): positions must lie in "
                      "[%d, %lld]",
                   (long long)pos, n, -n, (long long)hi);
  *at = pos < 0 ? pos + n : pos;
  return 0;
}

static int lower_sequence_empty(op_ctx *c, const op_def *def) { return op_set_output_seq(c, 0, NULL, 0); }

static int lower_sequence_construct(op_ctx *c, const op_def *def) {
  int n = op_num_inputs(c);
  mlxb_array **items = malloc(sizeof *items * (size_t)(n ? n : 1));
  if (!items) return op_fail(c, "out of memory");
  for (int k = 0; k < n; k++) items[k] = op_input(c, k);
  int rc = op_set_output_seq(c, 0, items, n);
  free(items);
  return rc;
}

static int lower_sequence_length(op_ctx *c, const op_def *def) {
  mlxb_array *const *items;
  int n = op_input_seq(c, 0, &items);
  if (n < 0) return -1;
  int64_t len = n;
  return op_set_output_ints(c, 0, &len, 1, NULL, 0, ONNX_INT64);
}

static int lower_sequence_at(op_ctx *c, const op_def *def) {
  mlxb_array *const *items;
  int n = op_input_seq(c, 0, &items);
  int64_t pos = 0, at = 0;
  if (n < 0 || seq_position(c, 1, &pos) || seq_check_position(c, pos, n, false, &at)) return -1;
  return op_set_output(c, 0, items[at]);
}

static int lower_sequence_insert(op_ctx *c, const op_def *def) {
  mlxb_array *const *items;
  int n = op_input_seq(c, 0, &items);
  if (n < 0) return -1;
  int64_t at = n;
  if (op_has_input(c, 2)) {
    int64_t pos = 0;
    if (seq_position(c, 2, &pos) || seq_check_position(c, pos, n, true, &at)) return -1;
  }
  mlxb_array **out = malloc(sizeof *out * (size_t)(n + 1));
  if (!out) return op_fail(c, "out of memory");
  if (at) memcpy(out, items, sizeof *out * (size_t)at);
  out[at] = op_input(c, 1);
  if (n - at) memcpy(out + at + 1, items + at, sizeof *out * (size_t)(n - at));
  int rc = op_set_output_seq(c, 0, out, n + 1);
  free(out);
  return rc;
}

static int lower_sequence_erase(op_ctx *c, const op_def *def) {
  mlxb_array *const *items;
  int n = op_input_seq(c, 0, &items);
  if (n < 0) return -1;
  int64_t pos = -1, at = 0;
  if (op_has_input(c, 1) && seq_position(c, 1, &pos)) return -1;
  if (n == 0) return op_fail(c, "cannot erase from an empty sequence");
  if (seq_check_position(c, pos, n, false, &at)) return -1;
  mlxb_array **out = malloc(sizeof *out * (size_t)n);
  if (!out) return op_fail(c, "out of memory");
  if (at) memcpy(out, items, sizeof *out * (size_t)at);
  if (n - at - 1) memcpy(out + at, items + at + 1, sizeof *out * (size_t)(n - at - 1));
  int rc = op_set_output_seq(c, 0, out, n - 1);
  free(out);
  return rc;
}

static int lower_concat_from_sequence(op_ctx *c, const op_def *def) {
  mlxb_array *const *items;
  int n = op_input_seq(c, 0, &items);
  if (n < 0) return -1;
  if (n == 0) return op_fail(c, "the sequence is empty: there is nothing to concatenate");
  bool new_axis = ir_attr_int(op_node(c), "new_axis", 0) != 0;
  const ir_attr *axis_attr = ir_node_attr(op_node(c), "axis");
  if (!axis_attr) return op_fail(c, "no axis");
  int rank = mlxb_ndim(items[0]);
  int axis = op_util_resolve_axis(c, axis_attr->i, rank + (new_axis ? 1 : 0));
  if (axis < 0) return -1;
  for (int k = 1; k < n; k++)
    if (mlxb_ndim(items[k]) != rank || mlxb_type(items[k]) != mlxb_type(items[0]))
      return op_fail(c, "tensor %d of the sequence differs in rank or dtype from tensor 0", k);
  for (int k = 1; k < n; k++)
    for (int d = 0; d < rank; d++)
      if ((new_axis || d != axis) && mlxb_dim(items[k], d) != mlxb_dim(items[0], d))
        return op_fail(c, "tensor %d of the sequence has dimension %d = %lld, tensor 0 has %lld", k, d,
                       (long long)mlxb_dim(items[k], d), (long long)mlxb_dim(items[0], d));
  mlxb_scope *s = op_scope(c);
  const mlxb_array *const *xs = (const mlxb_array *const *)items;
  return op_set_output(c, 0, new_axis ? mlxb_stack(s, xs, n, axis) : mlxb_concat(s, xs, n, axis));
}

static int lower_split_to_sequence(op_ctx *c, const op_def *def) {
  mlxb_scope *s = op_scope(c);
  mlxb_array *x = op_input(c, 0);
  int rank = mlxb_ndim(x);
  if (rank < 1) return op_fail(c, "the input is a scalar: there is no axis to split");
  int axis = op_util_resolve_axis(c, ir_attr_int(op_node(c), "axis", 0), rank);
  if (axis < 0) return -1;
  int64_t dim = mlxb_dim(x, axis), *sizes = NULL, n = 0;
  bool squeeze = false;
  int rc = -1;
  mlxb_array **items = NULL;
  if (!op_has_input(c, 1)) { /* pieces of 1, squeezed unless keepdims */
    squeeze = ir_attr_int(op_node(c), "keepdims", 1) == 0;
    n = dim;
  } else {
    mlxb_array *split = op_input(c, 1);
    int64_t count = (int64_t)mlxb_size(split);
    if (count > SEQ_MAX_ITEMS) return op_fail(c, "%lld split sizes are more than the EP makes (%d)", (long long)count, SEQ_MAX_ITEMS);
    if (!(sizes = malloc(sizeof *sizes * (size_t)(count ? count : 1)))) return op_fail(c, "out of memory");
    if (op_input_ints(c, 1, sizes, (int)count) != count) goto done;
    if (mlxb_ndim(split) == 0) { /* chunks of one size; the last may be shorter */
      int64_t chunk = sizes[0];
      if (chunk <= 0) {
        op_fail(c, "split %lld is not positive", (long long)chunk);
        goto done;
      }
      n = dim / chunk + (dim % chunk != 0);
      free(sizes);
      if (n > SEQ_MAX_ITEMS || !(sizes = malloc(sizeof *sizes * (size_t)(n ? n : 1)))) {
        sizes = NULL;
        op_fail(c, n > SEQ_MAX_ITEMS ? "more pieces than the EP makes" : "out of memory");
        goto done;
      }
      for (int64_t k = 0; k < n; k++) sizes[k] = k < n - 1 || dim % chunk == 0 ? chunk : dim % chunk;
    } else {
      int64_t total = 0;
      n = count;
      for (int64_t k = 0; k < n; k++) {
        if (sizes[k] < 0) {
          op_fail(c, "split %lld is negative", (long long)sizes[k]);
          goto done;
        }
        if (sizes[k] > dim - total) { /* compared before the sum, which could pass int64 */
          total = dim + 1;
          break;
        }
        total += sizes[k];
      }
      if (total != dim) {
        op_fail(c, "split sizes sum to %s%lld, not the dimension %lld of axis %d", total > dim ? "more than " : "",
                (long long)(total > dim ? dim : total), (long long)dim, axis);
        goto done;
      }
    }
  }
  if (n > SEQ_MAX_ITEMS) {
    op_fail(c, "%lld pieces are more than the EP makes (%d)", (long long)n, SEQ_MAX_ITEMS);
    goto done;
  }
  if (!(items = malloc(sizeof *items * (size_t)(n ? n : 1)))) {
    op_fail(c, "out of memory");
    goto done;
  }
  for (int64_t k = 0, start = 0; k < n; k++) {
    int64_t len = sizes ? sizes[k] : 1;
    items[k] = op_util_slice_axis(s, x, axis, start, start + len, 1);
    if (squeeze) items[k] = mlxb_squeeze(s, items[k], &axis, 1);
    start += len;
  }
  if (op_check(c)) goto done;
  rc = op_set_output_seq(c, 0, items, (int)n);
done:
  free(sizes);
  free(items);
  return rc;
}

/* OptionalGetElement (opset 18+) of a plain tensor or sequence: the value itself. An optional-typed
 * input (and OptionalGetElement of opset 15, which takes only those) stays on ORT: the EP has no
 * optional values. */
static bool claim_optional_get_element(claim_ctx *c, const op_def *def) {
  const ir_value *v = claim_input(c, 0);
  if (!v || (!v->is_sequence && v->dtype == ONNX_UNDEFINED))
    return claim_decline(c, "the input is an optional value (the EP has tensors and sequences only)");
  return true;
}

static int lower_optional_get_element(op_ctx *c, const op_def *def) {
  const ir_value *v = &op_graph(c)->values[op_node(c)->inputs[0]];
  if (!v->is_sequence) return op_set_output(c, 0, op_input(c, 0));
  mlxb_array *const *items;
  int n = op_input_seq(c, 0, &items);
  return n < 0 ? -1 : op_set_output_seq(c, 0, items, n);
}

#define SEQ_DOC_INSIDE "sequences stay inside one cluster (ORT's plugin-EP interface cannot carry them across)"

static const op_def defs[] = {
    OP_ROW("", "SequenceEmpty", 11, 25, .inputs = {0, 0}, .outputs = {1, 1}, .lower = lower_sequence_empty,
           .flags = OP_FLAG_SEQUENCES, .doc = "An empty sequence; " SEQ_DOC_INSIDE),
    OP_ROW("", "SequenceConstruct", 11, 25, .inputs = {1, OP_VARIADIC}, .outputs = {1, 1},
           .lower = lower_sequence_construct, .flags = OP_FLAG_SEQUENCES,
           .doc = "A sequence of the input tensors (no copy); " SEQ_DOC_INSIDE),
    OP_ROW("", "SequenceLength", 11, 25, .inputs = {1, 1}, .outputs = {1, 1}, .lower = lower_sequence_length,
           .flags = OP_FLAG_SEQUENCES, .doc = "The length, known on the host; " SEQ_DOC_INSIDE),
    OP_ROW("", "SequenceAt", 11, 25, .inputs = {2, 2}, .outputs = {1, 1}, .lower = lower_sequence_at,
           .flags = OP_FLAG_SEQUENCES,
           .doc = "Position read on the host and range-checked as ORT ([-n, n-1]); " SEQ_DOC_INSIDE),
    OP_ROW("", "SequenceInsert", 11, 25, .inputs = {2, 3}, .outputs = {1, 1}, .lower = lower_sequence_insert,
           .flags = OP_FLAG_SEQUENCES,
           .doc = "Position read on the host and range-checked as ORT ([-n, n], default append); " SEQ_DOC_INSIDE),
    OP_ROW("", "SequenceErase", 11, 25, .inputs = {1, 2}, .outputs = {1, 1}, .lower = lower_sequence_erase,
           .flags = OP_FLAG_SEQUENCES,
           .doc = "Position read on the host and range-checked as ORT ([-n, n-1], default last); " SEQ_DOC_INSIDE),
    OP_ROW("", "ConcatFromSequence", 11, 25, .inputs = {1, 1}, .outputs = {1, 1},
           .lower = lower_concat_from_sequence, .flags = OP_FLAG_SEQUENCES,
           .doc = "Concat or stack (new_axis) of a non-empty sequence; " SEQ_DOC_INSIDE),
    OP_ROW("", "SplitToSequence", 11, 25, .inputs = {1, 2}, .outputs = {1, 1}, .lower = lower_split_to_sequence,
           .flags = OP_FLAG_SEQUENCES,
           .doc = "No split (pieces of 1, keepdims), a scalar chunk size or a list of sizes (read on the host, "
                  "checked as ORT); " SEQ_DOC_INSIDE),
    OP_ROW("", "OptionalGetElement", 18, 25, .inputs = {1, 1}, .outputs = {1, 1},
           .claim = claim_optional_get_element, .lower = lower_optional_get_element, .flags = OP_FLAG_SEQUENCES,
           .doc = "A tensor or sequence input is returned as is; optional-typed inputs are declined"),
};

OPS_FAMILY(sequence, defs);
