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
