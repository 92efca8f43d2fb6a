/* kernels.h - the two CUDA kernels vsim-calibrate launches (kernels.cu),
 * behind C wrappers that return a cudaError_t as int. */
#ifndef VS_KERNELS_H
#define VS_KERNELS_H

#include <cuda_runtime_api.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Holds stream until *flag (device view of mapped host memory) becomes
 * non-zero or max_cycles SM clock cycles pass, so the copies queued behind
 * it start back to back (nvbandwidth's method). */
int vs_kernel_spin(volatile int *flag, unsigned long long max_cycles,
                   cudaStream_t stream);

/* Copies bytes from src to dst with SM loads and stores (16-byte vectors,
 * grid-stride; src and dst 16-byte aligned), on `blocks` blocks. */
int vs_kernel_copy(void *dst, const void *src, size_t bytes, int blocks,
                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
