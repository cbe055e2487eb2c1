/* The list of op families and lookups over their rows. Adding a family: one OPS_FAMILY() in its
 * file and one line in FAMILIES below. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops/op.h"

#define FAMILIES(X)                                                                            \
  X(elementwise) X(activation) X(cast) X(emulated) X(matmul) X(normalization) X(reduction)      \
  X(shape) X(indexing) X(host_read) X(linalg) X(loss) X(quantize) X(signal) X(random) X(conv)  \
  X(pool) X(resize) X(vision) X(detection) X(attention) X(rotary) X(paged_attention)            \
  X(linear_attention)                                                                           \
  X(contrib_quant) X(contrib_norm) X(contrib_act) X(moe) X(ml) X(ml_linear) X(ml_svm) X(ml_trees)   \
  X(rnn) X(control) X(sequence)

#define DECLARE_FAMILY(stem) extern const op_family ops_family_##stem;
FAMILIES(DECLARE_FAMILY)
#undef DECLARE_FAMILY

#define FAMILY_ADDRESS(stem) &ops_family_##stem,
static const op_family *const families[] = {FAMILIES(FAMILY_ADDRESS)};
#undef FAMILY_ADDRESS

static const size_t n_families = sizeof families / sizeof families[0];

size_t op_registry_family_count(void) { return n_families; }

const op_family *op_registry_family(size_t i) { return i < n_families ? families[i] : NULL; }

static bool same_domain(const char *a, const char *b) {
  if (!a || !*a || !strcmp(a, "ai.onnx")) a = "";
  if (!b || !*b || !strcmp(b, "ai.onnx")) b = "";
  return strcmp(a, b) == 0;
}

const op_def *op_registry_find(const char *domain, const char *op_type, int since_version) {
  for (size_t f = 0; f < n_families; f++) {
    for (size_t i = 0; i < families[f]->count; i++) {
      const op_def *d = &families[f]->defs[i];
      if (strcmp(d->op_type, op_type) || !same_domain(d->domain, domain)) continue;
      if (since_version >= d->since_min && since_version <= d->since_max) return d;
    }
  }
  return NULL;
}

bool op_registry_knows(const char *domain, const char *op_type) {
  for (size_t f = 0; f < n_families; f++) {
    for (size_t i = 0; i < families[f]->count; i++) {
      const op_def *d = &families[f]->defs[i];
      if (!strcmp(d->op_type, op_type) && same_domain(d->domain, domain)) return true;
    }
  }
  return false;
}

const op_def *op_registry_claim(claim_ctx *c) {
  const ir_node *n = c->node;
  bool covered = false;
  for (size_t f = 0; f < n_families; f++) {
    for (size_t i = 0; i < families[f]->count; i++) {
      const op_def *d = &families[f]->defs[i];
      if (strcmp(d->op_type, n->op_type) || !same_domain(d->domain, n->domain)) continue;
      if (n->since_version < d->since_min || n->since_version > d->since_max) continue;
      covered = true;
      c->reason[0] = '\0';
      if (op_claim_node(c, d)) return d;
    }
  }
  if (!covered) {
    if (op_registry_knows(n->domain, n->op_type))
      snprintf(c->reason, sizeof c->reason, "opset version %d is not covered", n->since_version);
    else
      snprintf(c->reason, sizeof c->reason, "no MLX lowering for %s%s%s", n->domain, *n->domain ? "::" : "",
               n->op_type);
  }
  return NULL;
}
