/* dtype.h - element types of simulated tensors and their storage size.
 * Every tensor the model declares (parameters, saved activations) names its
 * dtype here; bytes are always derived through vs_dtype_bytes, so a format
 * whose elements are not whole bytes (added later: 4-bit) stays exact. */
#ifndef VS_DTYPE_H
#define VS_DTYPE_H

#include <stdint.h>

typedef enum vs_dtype {
  VS_DTYPE_FP32,  /* IEEE single, 4 bytes */
  VS_DTYPE_BF16,  /* bfloat16, 2 bytes */
  VS_DTYPE_FP16,  /* IEEE half, 2 bytes */
  VS_DTYPE_FP8,   /* E4M3 or E5M2, 1 byte */
  VS_DTYPE_INT8,  /* 1 byte */
  VS_DTYPE_BOOL,  /* torch.bool (dropout masks), 1 byte */
  VS_DTYPE_INT64, /* token ids and labels, 8 bytes */
  VS_DTYPE_N
} vs_dtype;

/* Bytes of `elems` elements of dtype (0 for an unknown dtype). */
uint64_t vs_dtype_bytes(int dtype, uint64_t elems);

/* Bytes of one element: 4, 2, 1 or 8. */
uint64_t vs_dtype_size(int dtype);

/* "fp32", "bf16", ... ("?" outside the range). */
const char *vs_dtype_name(int dtype);

#endif
