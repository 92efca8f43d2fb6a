/* dtype.c - element sizes (see dtype.h). */
#include "dtype.h"

static const struct {
  const char *name; /* as vsim prints it */
  uint64_t size;    /* bytes per element */
} dtypes[VS_DTYPE_N] = {
    {"fp32", 4}, {"bf16", 2}, {"fp16", 2}, {"fp8", 1},
    {"int8", 1}, {"bool", 1}, {"int64", 8},
};

uint64_t vs_dtype_size(int dtype)
{
  return dtype >= 0 && dtype < VS_DTYPE_N ? dtypes[dtype].size : 0;
}

uint64_t vs_dtype_bytes(int dtype, uint64_t elems)
{
  return vs_dtype_size(dtype) * elems;
}

const char *vs_dtype_name(int dtype)
{
  return dtype >= 0 && dtype < VS_DTYPE_N ? dtypes[dtype].name : "?";
}
