#pragma once
// The one launcher of the library's kernels: cudaLaunchKernelEx with the attributes a launch needs.
//  - cooperative: for kernels whose blocks wait for each other; the launch fails with an error instead of
//    deadlocking when the grid cannot be fully resident. Cooperative launches can be captured into CUDA graphs
//    (a kernel node with the cooperative attribute); the graph-capture tests on the GPU check this.
//  - early launch (programmatic dependent launch, grid_dependency.cuh) for every launch whose code on this
//    device is sm_90+: the kernel must open with begin_dependent_grid(). Captured into a CUDA graph it becomes
//    a programmatic edge. Cooperative launches take it too (since session 35): their blocks take SM slots as
//    the previous grid's leave, so all of them are resident once it ends, and the grid after them launches
//    only when every one of their blocks has started (griddepcontrol.launch_dependents at the top), so it can
//    never hold slots the cooperative grid still waits for. With the split-row workspace zeroed by an early-
//    launched kernel under capture instead of a memset node (softmax_cuda.cu), the bf16 split rows gained
//    1.1-1.7 us streamed and fp32 8x4194304 0.7-1.2 us (H100, NOTES "s35 call 1"); early launch alone, with
//    the memset node still between the kernels, gained nothing.
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.h"

namespace flash_attn_ext {

enum class LaunchKind { Plain, Cooperative };

// `kernel` must call begin_dependent_grid() before touching global memory (see above), or order itself as
// a head / tail pair does (GridOrder, softmax/softmax_launch.h: a tail waits for its head only at its end).
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   LaunchKind kind, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned n = 0;
  if (kind == LaunchKind::Cooperative) {
    attribute[n].id = cudaLaunchAttributeCooperative;
    attribute[n++].val.cooperative = 1;
  }
  if (kernel_code_version(kernel) >= 90) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attribute;
  config.numAttrs = n;
  FAE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  FAE_LAUNCH_CHECK();
}

}  // namespace flash_attn_ext
