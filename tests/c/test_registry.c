/* Checks facts of the op registry that no ORT session can reach: every row declares a sane arity
 * (a row that forgets it gets {0, 0} and would decline its op), and the generic claim enforces it
 * on hand-built nodes (ORT rejects such nodes itself before an EP sees them, so the Python tests
 * cannot build them); and how the op interface classifies a failed trace (op_trace_refuse: by
 * design, versus any other failure: unexpected, fatal in a debug build), which a release build's
 * Python tests see only through the run report. Prints one line per failed check, exits 1 on
 * failure. */
#include <stdio.h>
#include <string.h>

#include "ops/op.h"
#include "runtime/run_internal.h"

#include "check.h"

static bool arity_sane(op_arity a) { return a.min >= 0 && a.max >= a.min; }

static void test_rows_declare_arity(void) {
  for (size_t f = 0; f < op_registry_family_count(); f++) {
    const op_family *fam = op_registry_family(f);
    for (size_t i = 0; fam && i < fam->count; i++) {
      const op_def *d = &fam->defs[i];
      CHECK(arity_sane(d->inputs), "%s/%s: inputs {%d, %d}", fam->name, d->op_type, d->inputs.min, d->inputs.max);
      /* every ONNX op has an output, so {0, 0} here means the row left its arity out */
      CHECK(arity_sane(d->outputs) && d->outputs.max >= 1, "%s/%s: outputs {%d, %d}", fam->name, d->op_type,
            d->outputs.min, d->outputs.max);
    }
  }
}

/* A graph of float32 [2] values a, b, c, y and one Add node over `inputs` (-1: an empty name). */
enum { V_A, V_B, V_C, V_Y, N_VALUES };

static const op_def *claim_add(const int *inputs, int n_inputs, int n_outputs, char *reason, size_t len) {
  int64_t dims[1] = {2};
  ir_value values[N_VALUES];
  memset(values, 0, sizeof values);
  const char *names[N_VALUES] = {"a", "b", "c", "y"};
  for (int v = 0; v < N_VALUES; v++) {
    values[v] = (ir_value){.name = names[v], .dtype = ONNX_FLOAT, .rank = 1, .dims = dims, .producer = -1};
  }
  values[V_Y].producer = 0;
  int outputs[2] = {V_Y, -1};
  ir_node node = {.name = "n", .op_type = "Add", .domain = "", .since_version = 14, .n_inputs = n_inputs,
                  .inputs = (int *)inputs, .n_outputs = n_outputs, .outputs = outputs};
  ir_graph g = {.n_values = N_VALUES, .values = values, .n_nodes = 1, .nodes = &node, .opset_onnx = 14};
  claim_ctx c = {.graph = &g, .node = &node, .device = MLXB_DEVICE_CPU};
  const op_def *d = op_registry_claim(&c);
  snprintf(reason, len, "%s", c.reason);
  return d;
}

static void test_claim_checks_arity(void) {
  char why[256];
  CHECK(claim_add((int[]){V_A, V_B}, 2, 1, why, sizeof why) != NULL, "a plain Add is claimed: %s", why);
  CHECK(!claim_add((int[]){V_A, -1}, 2, 1, why, sizeof why), "Add without input 1 is declined");
  CHECK(strstr(why, "input 1 is required and missing") != NULL, "reason: %s", why);
  CHECK(!claim_add((int[]){V_A}, 1, 1, why, sizeof why), "Add with one input is declined");
  CHECK(strstr(why, "input 1 is required and missing") != NULL, "reason: %s", why);
  CHECK(!claim_add((int[]){V_A, V_B, V_C}, 3, 1, why, sizeof why), "Add with three inputs is declined");
  CHECK(strstr(why, "3 inputs listed, the op takes at most 2") != NULL, "reason: %s", why);
  CHECK(!claim_add((int[]){V_A, V_B}, 2, 2, why, sizeof why), "Add with two outputs is declined");
  CHECK(strstr(why, "2 outputs listed, the op takes at most 1") != NULL, "reason: %s", why);
}

/* A trace failure counts as by design only when a refusal (op_trace_refuse, or the host reads that
 * refuse inside a trace) is the failure recorded: not after another failure, nor over a bridge error. */
static void test_trace_refusal_classification(void) {
  mlxb_scope *s = mlxb_scope_new(MLXB_DEVICE_CPU);
  CHECK(s != NULL, "a scope");
  if (!s) return;
  diag d;
  op_ctx c = {.s = s, .run_s = s, .tracing = true, .d = &d};

  diag_init(&d);
  CHECK(op_trace_refuse(&c, "refused %d", 7) == -1 && d.failed && d.trace_refusal, "a refusal is by design");
  CHECK(strcmp(d.msg, "refused 7") == 0, "message: %s", d.msg);

  diag_init(&d);
  CHECK(op_eval(&c, NULL, 0) == -1 && d.trace_refusal, "evaluation inside a trace is refused by design: %s", d.msg);
  diag_init(&d);
  CHECK(op_read_ints(&c, NULL, NULL, 0) == -1 && d.trace_refusal, "a host read inside a trace is refused: %s", d.msg);

  diag_init(&d);
  CHECK(op_fail(&c, "a lowering bug") == -1 && !d.trace_refusal, "op_fail is unexpected");
  CHECK(op_trace_refuse(&c, "refused") == -1 && !d.trace_refusal, "a refusal after another failure is not the cause");
  CHECK(strcmp(d.msg, "a lowering bug") == 0, "the first failure stays: %s", d.msg);

  diag_init(&d);
  mlxb_set_error(s, "bridge failure");
  CHECK(op_trace_refuse(&c, "refused") == -1 && !d.trace_refusal, "a bridge error first is unexpected");
  CHECK(strstr(d.msg, "bridge failure") != NULL, "the bridge's message is the cause: %s", d.msg);
  mlxb_clear_error(s);

  c.tracing = false; /* outside a trace nothing is refused: an empty eval succeeds */
  diag_init(&d);
  CHECK(op_eval(&c, NULL, 0) == 0 && !d.failed, "op_eval outside a trace: %s", d.msg);
  mlxb_scope_free(s);
}

int main(void) {
  test_rows_declare_arity();
  test_claim_checks_arity();
  test_trace_refusal_classification();
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
