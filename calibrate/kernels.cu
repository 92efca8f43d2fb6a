// kernels.cu - the spin kernel and the SM copy kernel (see kernels.h). The
// only CUDA C++ in vsim; everything else is C on the runtime API.
#include "kernels.h"

#include <stdint.h>

__global__ void spin(volatile int *flag, unsigned long long max_cycles)
{
  long long start = clock64();
  while (*flag == 0) {
    if ((unsigned long long)(clock64() - start) > max_cycles)
      break;
  }
}

__global__ void copy(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                     size_t n16, unsigned char *__restrict__ dst_tail,
                     const unsigned char *__restrict__ src_tail, size_t tail)
{
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t j = i; j < n16; j += stride)
    dst[j] = src[j];
  if (i < tail)
    dst_tail[i] = src_tail[i];
}

extern "C" int vs_kernel_spin(volatile int *flag, unsigned long long max_cycles,
                              cudaStream_t stream)
{
  spin<<<1, 1, 0, stream>>>(flag, max_cycles);
  return (int)cudaGetLastError();
}

extern "C" int vs_kernel_copy(void *dst, const void *src, size_t bytes,
                              int blocks, cudaStream_t stream)
{
  size_t n16 = bytes / 16, tail = bytes % 16;
  unsigned char *d = (unsigned char *)dst;
  const unsigned char *s = (const unsigned char *)src;
  int threads = 256;
  size_t need = (n16 + threads - 1) / threads;
  if (need < 1)
    need = 1;
  if ((size_t)blocks > need)
    blocks = (int)need;
  copy<<<blocks, threads, 0, stream>>>((uint4 *)dst, (const uint4 *)src, n16,
                                       d + 16 * n16, s + 16 * n16, tail);
  return (int)cudaGetLastError();
}
