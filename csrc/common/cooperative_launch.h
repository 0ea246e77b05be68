#pragma once
// Cooperative launch for kernels whose blocks wait for each other: it fails with an error instead of
// deadlocking when the grid cannot be fully resident. Cooperative launches can be captured into CUDA graphs
// (a kernel node with the cooperative attribute); the graph-capture tests on the GPU check this.
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.h"

namespace flash_attn_ext {

template <typename... Params, typename... Args>
void launch_cooperative(void (*kernel)(Params...), int grid, int threads, size_t smem, cudaStream_t stream,
                        Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  FAE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  FAE_LAUNCH_CHECK();
}

}  // namespace flash_attn_ext
