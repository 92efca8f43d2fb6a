/* dtype.c - element sizes (see dtype.h). */
#include "dtype.h"

static const struct {
  const char *name; /* as vsim prints it */
  uint64_t size;    /* bytes per element */
} dtypes[VS_DTYPE_N] = {
    {"fp32", 4},         {"bf16", 2},       {"fp16", 2},     {"fp8", 1},
    {"int8", 1},         {"bool", 1},       {"int64", 8},    {"nf4", 1},
    {"int8_rowwise", 1}, {"fp8_scaled", 1}, {"nf4_nodq", 1},
};

/* NF4's blocks (bitsandbytes functional.py quantize_4bit: blocksize 64;
 * with compress_statistics quantize_blockwise groups 256 absmaxes under
 * one fp32 scale). */
#define NF4_BLOCK 64
#define NF4_SCALE_BLOCKS 256
/* quantize_4bit's code, get_4bit_type("nf4", device): 16 fp32 values,
 * a new tensor for each weight */
#define NF4_CODE_BYTES (16 * 4)
/* the nested quantization's state: its code, code.to(A.device,
 * copy=True) of create_dynamic_map's 256 fp32 values, and the offset
 * _absmax.mean(), a 0-dim fp32 tensor */
#define NF4_NESTED_CODE_BYTES (256 * 4)
#define NF4_OFFSET_BYTES 4

static uint64_t div_ceil(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

unsigned vs_dtype_tensor_parts(int dtype, uint64_t rows, uint64_t cols,
                               uint64_t out[VS_DTYPE_PARTS_MAX])
{
  uint64_t n = rows * cols, blocks = div_ceil(n, NF4_BLOCK);
  unsigned k = 0;
  if (dtype == VS_DTYPE_NF4_NODQ) { /* quantize_4bit's _absmax as it is */
    out[k++] = (n + 1) / 2;
    out[k++] = 4 * blocks;
    out[k++] = NF4_CODE_BYTES;
    return k;
  }
  if (dtype == VS_DTYPE_INT8_ROWWISE) { /* Int8Params' CB, then its fp32
                                          row scales SCB, apart */
    out[k++] = n;
    out[k++] = 4 * cols;
    return k;
  }
  if (dtype != VS_DTYPE_NF4) {
    out[0] = dtype == VS_DTYPE_FP8_SCALED ? n + 4 : vs_dtype_size(dtype) * n;
    return 1;
  }
  /* the packed weight: torch.empty(((n + 1) // 2, 1), dtype=uint8)
   * (backends/cuda/ops.py quantize_4bit); then the absmaxes, 8-bit
   * (quantize_blockwise's out, empty_like(A, dtype=uint8)) with their
   * fp32 scales, the nested code and the offset; then the code */
  out[k++] = (n + 1) / 2;
  out[k++] = blocks;
  out[k++] = 4 * div_ceil(blocks, NF4_SCALE_BLOCKS);
  out[k++] = NF4_NESTED_CODE_BYTES;
  out[k++] = NF4_OFFSET_BYTES;
  out[k++] = NF4_CODE_BYTES;
  return k;
}

uint64_t vs_dtype_tensor_bytes(int dtype, uint64_t rows, uint64_t cols)
{
  uint64_t parts[VS_DTYPE_PARTS_MAX], bytes = 0;
  unsigned n = vs_dtype_tensor_parts(dtype, rows, cols, parts);
  for (unsigned i = 0; i < n; i++)
    bytes += parts[i];
  return bytes;
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
