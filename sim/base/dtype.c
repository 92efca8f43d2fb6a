/* dtype.c - element sizes (see dtype.h). */
#include "dtype.h"

static const struct {
  const char *name; /* as vsim prints it */
  uint64_t size;    /* bytes per element */
} dtypes[VS_DTYPE_N] = {
    {"fp32", 4}, {"bf16", 2}, {"fp16", 2}, {"fp8", 1},
    {"int8", 1}, {"bool", 1}, {"int64", 8}, {"nf4", 1}, {"int8_rowwise", 1},
    {"fp8_scaled", 1},
};

/* NF4's blocks (bitsandbytes blocksize 64; double quantization groups 256
 * absmaxes under one fp32 scale). */
#define NF4_BLOCK 64
#define NF4_SCALE_BLOCKS 256

static uint64_t div_ceil(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

uint64_t vs_dtype_tensor_bytes(int dtype, uint64_t rows, uint64_t cols)
{
  uint64_t n = rows * cols;
  if (dtype == VS_DTYPE_NF4) {
    uint64_t blocks = div_ceil(n, NF4_BLOCK);
    return div_ceil(n, 2) + blocks + 4 * div_ceil(blocks, NF4_SCALE_BLOCKS);
  }
  if (dtype == VS_DTYPE_INT8_ROWWISE)
    return n + 4 * cols;
  if (dtype == VS_DTYPE_FP8_SCALED)
    return n + 4;
  return vs_dtype_size(dtype) * n;
}

uint64_t vs_dtype_size(int dtype)
{
  return dtype >= 0 && dtype < VS_DTYPE_N ? dtypes[dtype].size : 0;
}

uint64_t vs_dtype_bytes(int dtype, uint64_t elems)
{
  return vs_dtype_tensor_bytes(dtype, elems, 1);
}

const char *vs_dtype_name(int dtype)
{
  return dtype >= 0 && dtype < VS_DTYPE_N ? dtypes[dtype].name : "?";
}
