#pragma once
// Launch hygiene for every CUDA launcher: errors surface at the launch that caused them.
#include <c10/cuda/CUDAException.h>

#define FAE_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)
#define FAE_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()

// Lets `kernel` launch with `bytes` of dynamic shared memory: above the 48 KB default a kernel must opt in,
// before the occupancy query and the launch. Not a stream operation, so it is legal during graph capture.
template <typename Kernel>
inline void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    FAE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

// Blocks of `kernel` resident per SM at `threads` threads and `smem_bytes` of dynamic shared memory (0 when it
// cannot launch), opting into that shared memory first.
template <typename Kernel>
inline int resident_blocks_per_sm(Kernel* kernel, int threads, size_t smem_bytes) {
  allow_dynamic_smem(kernel, smem_bytes);
  int blocks = 0;
  FAE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
  return blocks;
}
