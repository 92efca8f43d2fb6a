// kernels.cu - the spin kernel and the SM copy kernel (see kernels.h). The
// only CUDA C++ in vsim; everything else is C on the runtime API.
#include "kernels.h"

#include <stdint.h>

#define COPY_THREADS 256
#define COPY_UNROLL 4

static __device__ __forceinline__ unsigned long long global_ns(void)
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread polls the flag over PCIe (volatile: every read goes to host
// memory). Two clocks bound the wait: the global timer (nanoseconds,
// independent of the SM clock, which idles near 345 MHz on an H200) and, in
// case that timer does not run, the SM cycle counter.
__global__ void spin(volatile int *flag, unsigned long long timeout_ns,
                     int *timed_out)
{
  unsigned long long t0 = global_ns();
  long long c0 = clock64();
  unsigned long long max_cycles = 20ull * timeout_ns; // 10 x at 2 GHz
  int late = 0;
  while (*flag == 0) {
    if (global_ns() - t0 > timeout_ns ||
        (unsigned long long)(clock64() - c0) > max_cycles) {
      late = 1;
      break;
    }
  }
  *timed_out = late;
}

// Element e of the n16 vectors is copied by thread e % stride, in pass
// e / stride; the unrolled loop takes COPY_UNROLL passes at once so that
// each thread has that many loads in flight, the second loop the rest.
__global__ void copy(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                     size_t n16, unsigned char *__restrict__ dst_tail,
                     const unsigned char *__restrict__ src_tail, size_t tail)
{
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t j = i;
  for (; j + (COPY_UNROLL - 1) * stride < n16; j += COPY_UNROLL * stride) {
    uint4 v[COPY_UNROLL];
#pragma unroll
    for (int u = 0; u < COPY_UNROLL; u++)
      v[u] = src[j + u * stride];
#pragma unroll
    for (int u = 0; u < COPY_UNROLL; u++)
      dst[j + u * stride] = v[u];
  }
  for (; j < n16; j += stride)
    dst[j] = src[j];
  if (i < tail) // tail < 16 <= threads of block 0
    dst_tail[i] = src_tail[i];
}

extern "C" int vs_kernel_preload(int *copy_blocks_per_sm)
{
  cudaFuncAttributes a;
  cudaError_t e;
  (void)cudaGetLastError();
  if ((e = cudaFuncGetAttributes(&a, spin)) != cudaSuccess ||
      (e = cudaFuncGetAttributes(&a, copy)) != cudaSuccess)
    return (int)e;
  return (int)cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      copy_blocks_per_sm, copy, COPY_THREADS, 0);
}

extern "C" int vs_kernel_spin(volatile int *flag, unsigned long long timeout_ns,
                              int *timed_out, cudaStream_t stream)
{
  (void)cudaGetLastError();
  spin<<<1, 1, 0, stream>>>(flag, timeout_ns, timed_out);
  return (int)cudaGetLastError();
}

extern "C" int vs_kernel_copy(void *dst, const void *src, size_t bytes,
                              int blocks, cudaStream_t stream)
{
  size_t n16 = bytes / 16, tail = bytes % 16;
  unsigned char *d = (unsigned char *)dst;
  const unsigned char *s = (const unsigned char *)src;
  size_t need = (n16 + COPY_THREADS - 1) / COPY_THREADS;
  if (need < 1)
    need = 1; // the tail alone still needs one block
  if (blocks < 1)
    blocks = 1;
  if ((size_t)blocks > need)
    blocks = (int)need;
  (void)cudaGetLastError();
  copy<<<blocks, COPY_THREADS, 0, stream>>>((uint4 *)dst, (const uint4 *)src,
                                            n16, d + 16 * n16, s + 16 * n16,
                                            tail);
  return (int)cudaGetLastError();
}
