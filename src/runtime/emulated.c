/* Packing and unpacking of emulated dtypes at the cluster boundary; see emulated.h. */
#include "runtime/emulated.h"

#include <stdlib.h>
#include <string.h>

static int64_t element_count(const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

mlxb_array *emulated_upload(mlxb_scope *s, int32_t dtype, const void *storage, const int64_t *dims, int rank) {
  int bits = ir_dtype_emulated_bits(dtype);
  if (bits == 8) return mlxb_from_data(s, storage, dims, rank, MLXB_U8);
  int64_t n = element_count(dims, rank);
  uint8_t *codes = malloc((size_t)(n ? n : 1));
  if (!codes) {
    mlxb_set_error(s, "out of memory unpacking a sub-byte tensor");
    return NULL;
  }
  const uint8_t *in = storage;
  int per_byte = 8 / bits;
  uint8_t mask = (uint8_t)((1u << bits) - 1u);
  for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)((in[i / per_byte] >> ((i % per_byte) * bits)) & mask);
  mlxb_array *a = mlxb_from_data(s, codes, dims, rank, MLXB_U8);
  free(codes);
  return a;
}

int emulated_download(mlxb_scope *s, int32_t dtype, const mlxb_array *codes, void *storage, size_t storage_bytes) {
  int bits = ir_dtype_emulated_bits(dtype);
  size_t n = mlxb_size(codes);
  if (mlxb_type(codes) != MLXB_U8) {
    mlxb_set_error(s, "an emulated-dtype value must be a uint8 array of codes");
    return -1;
  }
  if (bits == 8) return mlxb_read(s, codes, storage, n);
  uint8_t *tmp = malloc(n ? n : 1);
  if (!tmp) {
    mlxb_set_error(s, "out of memory packing a sub-byte tensor");
    return -1;
  }
  int rc = mlxb_read(s, codes, tmp, n);
  if (!rc) {
    uint8_t *out = storage;
    int per_byte = 8 / bits;
    uint8_t mask = (uint8_t)((1u << bits) - 1u);
    memset(out, 0, storage_bytes);
    for (size_t i = 0; i < n; i++) out[i / per_byte] |= (uint8_t)((tmp[i] & mask) << ((i % per_byte) * bits));
  }
  free(tmp);
  return rc;
}
