/* kernels.h - the two CUDA kernels vsim-calibrate launches (kernels.cu),
 * behind C wrappers that return a cudaError_t as int. Each wrapper clears
 * the runtime's latched error first, so a failure an earlier call already
 * reported (or deliberately ignored) is not blamed on its launch. */
#ifndef VS_KERNELS_H
#define VS_KERNELS_H

#include <cuda_runtime_api.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Loads both kernels on the current device now: with lazy loading (the
 * default since CUDA 12.2) the first launch of a kernel may need a device
 * synchronisation, which would wait for a running spin kernel (nvbandwidth
 * preloads for the same reason). *copy_blocks_per_sm: how many blocks of
 * the copy kernel fit on one multiprocessor at once. */
int vs_kernel_preload(int *copy_blocks_per_sm);

/* Holds stream until *flag (device view of mapped host memory) becomes
 * non-zero, so the copies queued behind it start back to back
 * (nvbandwidth's method). Gives up after timeout_ns of the GPU's global
 * timer, or 10 x timeout_ns worth of 2 GHz SM cycles should that timer not
 * run; *timed_out (device memory) is then 1, else 0. */
int vs_kernel_spin(volatile int *flag, unsigned long long timeout_ns,
                   int *timed_out, cudaStream_t stream);

/* Copies bytes from src to dst with SM loads and stores (16-byte vectors,
 * grid-stride, four loads in flight per thread, then the last bytes % 16
 * one byte a thread; src and dst 16-byte aligned), on at most `blocks`
 * blocks of 256 threads. */
int vs_kernel_copy(void *dst, const void *src, size_t bytes, int blocks,
                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
