#pragma once
// The one launcher of the library's kernels: cudaLaunchKernelEx with the attributes a launch needs.
//  - cooperative: for kernels whose blocks wait for each other; the launch fails with an error instead of
//    deadlocking when the grid cannot be fully resident. Cooperative launches can be captured into CUDA graphs
//    (a kernel node with the cooperative attribute); the graph-capture tests on the GPU check this.
//  - early launch (programmatic dependent launch, grid_dependency.cuh) for every other launch whose code on this
//    device is sm_90+: the kernel must open with begin_dependent_grid(). Captured into a CUDA graph it becomes
//    a programmatic edge. Not combined with cooperative launches (whose grids are few and long).
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.h"

namespace flash_attn_ext {

enum class LaunchKind { Plain, Cooperative };

// `kernel` must call begin_dependent_grid() before touching global memory (see above).
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   LaunchKind kind, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (kind == LaunchKind::Cooperative) {
    attribute[0].id = cudaLaunchAttributeCooperative;
    attribute[0].val.cooperative = 1;
    config.numAttrs = 1;
  } else if (kernel_code_version(kernel) >= 90) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.numAttrs = 1;
  }
  config.attrs = attribute;
  FAE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  FAE_LAUNCH_CHECK();
}

}  // namespace flash_attn_ext
