/* dtype_test.c - element types and their storage (dtype.h): whole-byte
 * dtypes, and the quantized formats of frozen base weights against the
 * derivations of shared/reference/frameworks.md 6.1. */
#include "dtype.h"
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static void test_whole_byte_dtypes(void **state)
{
  (void)state;
  assert_int_equal(vs_dtype_bytes(VS_DTYPE_FP32, 10), 40);
  assert_int_equal(vs_dtype_bytes(VS_DTYPE_BF16, 10), 20);
  assert_int_equal(vs_dtype_bytes(VS_DTYPE_INT64, 3), 24);
  assert_int_equal(vs_dtype_tensor_bytes(VS_DTYPE_FP16, 4, 5), 40);
  assert_string_equal(vs_dtype_name(VS_DTYPE_NF4), "nf4");
  assert_string_equal(vs_dtype_name(VS_DTYPE_N), "?");
}

/* NF4 with double quantization (QLoRA Sec. 3; bitsandbytes blocksize 64,
 * compress_statistics): 4 bits a weight, an 8-bit absmax per 64, an fp32
 * scale per 256 absmaxes: 4 + 8/64 + 32/16384 = 4.127 bits, 0.516 B. A
 * 4096 x 4096 weight: 8388608 + 262144 + 4 x 1024 = 8654848 bytes, in
 * separate tensors as quantize_4bit makes them (functional.py): the
 * packed weight, the 8-bit absmaxes, their fp32 scales, then the nested
 * quantization's code (256 fp32) and offset (one fp32) and the NF4 code
 * (16 fp32): 1092 bytes more. */
static void test_nf4_double_quantization(void **state)
{
  uint64_t n = 4096ull * 4096ull, parts[VS_DTYPE_PARTS_MAX];
  uint64_t bytes = vs_dtype_tensor_bytes(VS_DTYPE_NF4, 4096, 4096);
  (void)state;
  assert_int_equal(bytes, 8654848 + 1092);
  tu_assert_close(8.0 * (double)bytes / (double)n, 4.127, 1e-3);
  assert_int_equal(vs_dtype_tensor_parts(VS_DTYPE_NF4, 4096, 4096, parts), 6);
  assert_int_equal(parts[0], 8388608);
  assert_int_equal(parts[1], 262144);
  assert_int_equal(parts[2], 4 * 1024);
  assert_int_equal(parts[3], 1024);
  assert_int_equal(parts[4], 4);
  assert_int_equal(parts[5], 64);
  /* partial blocks round up: 65 weights need 33 bytes, 2 absmaxes and
   * one scale */
  assert_int_equal(vs_dtype_tensor_bytes(VS_DTYPE_NF4, 1, 65),
                   33 + 2 + 4 + 1092);
  /* LLM.int8's CB and SCB are two tensors too (Int8Params); FP8's is one */
  assert_int_equal(
      vs_dtype_tensor_parts(VS_DTYPE_INT8_ROWWISE, 4096, 1024, parts), 2);
  assert_int_equal(parts[0], 4096 * 1024);
  assert_int_equal(parts[1], 4 * 1024);
  assert_int_equal(vs_dtype_tensor_parts(VS_DTYPE_FP8_SCALED, 4, 8, parts), 1);
  assert_int_equal(parts[0], 32 + 4);
}

/* LLM.int8 weights (bitsandbytes Int8Params): a byte a weight and an fp32
 * scale per output feature (cols). */
static void test_int8_rowwise(void **state)
{
  (void)state;
  assert_int_equal(vs_dtype_tensor_bytes(VS_DTYPE_INT8_ROWWISE, 4096, 1024),
                   4096ull * 1024 + 4 * 1024);
}

/* FP8 weights (Transformer Engine's Float8Tensor, torchao's Float8):
 * a byte a weight and one fp32 scale for the whole tensor. */
static void test_fp8_scaled(void **state)
{
  (void)state;
  assert_int_equal(vs_dtype_tensor_bytes(VS_DTYPE_FP8_SCALED, 4096, 1024),
                   4096ull * 1024 + 4);
  assert_string_equal(vs_dtype_name(VS_DTYPE_FP8_SCALED), "fp8_scaled");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_whole_byte_dtypes),
      cmocka_unit_test(test_nf4_double_quantization),
      cmocka_unit_test(test_int8_rowwise),
      cmocka_unit_test(test_fp8_scaled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
