/* Prints every row of the op registry as tab-separated lines (family, domain, op, since_min,
 * since_max, dtypes, flags, doc) for tools/gen_operators.py. */
#include <stdio.h>

#include "ops/op.h"

static void print_dtypes(uint64_t set) {
  if (!set) {
    fputs("any", stdout);
    return;
  }
  const char *sep = "";
  for (int t = 0; t < ONNX_DTYPE_MAX; t++) {
    if (!(set & DT(t))) continue;
    printf("%s%s", sep, ir_dtype_name(t));
    sep = ",";
  }
}

int main(void) {
  for (size_t f = 0; f < op_registry_family_count(); f++) {
    const op_family *fam = op_registry_family(f);
    if (!fam) continue;
    for (size_t i = 0; i < fam->count; i++) {
      const op_def *d = &fam->defs[i];
      printf("%s\t%s\t%s\t%d\t%d\t", fam->name, *d->domain ? d->domain : "ai.onnx", d->op_type, d->since_min,
             d->since_max);
      print_dtypes(d->dtypes);
      printf("\t%u\t%d\t%s\n", d->flags, d->pad != NULL, d->doc ? d->doc : "");
    }
  }
  return 0;
}
