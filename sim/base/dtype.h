/* dtype.h - element types of simulated tensors and their storage size.
 * Every tensor the model declares (parameters, saved activations) names its
 * dtype here; bytes are always derived through vs_dtype_bytes, so a format
 * whose elements are not whole bytes (added later: 4-bit) stays exact. */
#ifndef VS_DTYPE_H
#define VS_DTYPE_H

#include <stdint.h>

typedef enum vs_dtype {
  VS_DTYPE_FP32,         /* IEEE single, 4 bytes */
  VS_DTYPE_BF16,         /* bfloat16, 2 bytes */
  VS_DTYPE_FP16,         /* IEEE half, 2 bytes */
  VS_DTYPE_FP8,          /* E4M3 or E5M2, 1 byte */
  VS_DTYPE_INT8,         /* 1 byte */
  VS_DTYPE_BOOL,         /* torch.bool (dropout masks), 1 byte */
  VS_DTYPE_INT64,        /* token ids and labels, 8 bytes */
  VS_DTYPE_NF4,          /* 4-bit NormalFloat with double quantization (QLoRA):
                            see vs_dtype_tensor_parts */
  VS_DTYPE_INT8_ROWWISE, /* LLM.int8 weights: int8 and an fp32 scale per
                     output feature (bitsandbytes Int8Params CB, SCB) */
  VS_DTYPE_FP8_SCALED,   /* an FP8 weight and its fp32 scale (Transformer
                       Engine's Float8Tensor _scale_inv, torchao's
                       per-tensor Float8 scale) */
  VS_DTYPE_NF4_NODQ,     /* 4-bit NormalFloat with fp32 absmaxes (no double
                            quantization): see vs_dtype_tensor_parts */
  VS_DTYPE_N
} vs_dtype;

/* Bytes of `elems` elements of dtype (0 for an unknown dtype), as one
 * output feature for the formats with per-feature scales. */
uint64_t vs_dtype_bytes(int dtype, uint64_t elems);

/* The most tensors one weight is stored as (vs_dtype_tensor_parts). */
#define VS_DTYPE_PARTS_MAX 6

/* The tensors a rows x cols weight (cols = output features) of dtype is
 * stored as, each an allocation of its own, in out; returns how many:
 *   nf4: as bitsandbytes' quantize_4bit with compress_statistics makes
 *        them (Params4bit keeps the packed weight as its data, the rest
 *        in its QuantState): the packed weight, two weights a byte; the
 *        absmaxes, one a block of 64 over the flattened tensor, 8-bit;
 *        their fp32 scales, one per 256 blocks (QLoRA, Dettmers et al.
 *        2023, Sec. 3: 4 + 8/64 + 32/(64 x 256) = 4.127 bits a weight);
 *        the nested quantization's 256-entry fp32 code and fp32 offset;
 *        the 16-entry fp32 NF4 code;
 *   nf4_nodq: without compress_statistics, the packed weight, one fp32
 *        absmax a block of 64 (4 + 32/64 = 4.5 bits, 0.5625 B a weight)
 *        and the NF4 code;
 *   int8_rowwise: one byte a weight (Int8Params' CB), and apart an fp32
 *        scale per output feature (SCB);
 *   fp8_scaled: one byte a weight and one fp32 scale for the tensor;
 *   the rest: elements x their size. The last two as one tensor. */
unsigned vs_dtype_tensor_parts(int dtype, uint64_t rows, uint64_t cols,
                               uint64_t out[VS_DTYPE_PARTS_MAX]);

/* Bytes of a rows x cols weight of dtype: its parts summed. */
uint64_t vs_dtype_tensor_bytes(int dtype, uint64_t rows, uint64_t cols);

/* Bytes of one element: 4, 2, 1 or 8; 1 for the quantized formats, whose
 * exact size vs_dtype_tensor_bytes gives. */
uint64_t vs_dtype_size(int dtype);

/* "fp32", "bf16", ... ("?" outside the range). */
const char *vs_dtype_name(int dtype);

#endif
