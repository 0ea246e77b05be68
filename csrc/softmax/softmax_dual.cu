// Launcher of the dual-role row kernel (softmax_dual.cuh), instantiated per dtype, for softmax and for the
// other outputs.
#include <c10/util/Exception.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "softmax/softmax_dual.cuh"

namespace flash_attn_ext {
namespace softmax {

// As the pipelined kernel: the body exists only in sm_90+ code.
template <typename T> bool dual_supported() {
  return kernel_code_version(dual::library_kernel<T, true>) >= 90 &&
         kernel_code_version(dual::library_kernel<T, false>) >= 90;
}

// Of the two instantiations, the fewer.
template <typename T> int dual_blocks_per_sm(size_t smem_bytes) {
  return std::min(resident_blocks_per_sm(dual::library_kernel<T, true>, dual::kThreads, smem_bytes),
                  resident_blocks_per_sm(dual::library_kernel<T, false>, dual::kThreads, smem_bytes));
}

template <typename T> void launch_dual_rows(const PipeParams<T>& p, int grid, cudaStream_t stream) {
  auto kernel = p.output == SoftmaxOutput::Softmax ? dual::library_kernel<T, true> : dual::library_kernel<T, false>;
  const size_t smem = pipe_smem_bytes(p);
  allow_dynamic_smem(kernel, smem);
  launch_kernel(kernel, grid, dual::kThreads, smem, stream,
                p.chunks == 1 ? LaunchKind::Plain : LaunchKind::Cooperative, p);
}

#define FAE_INSTANTIATE_DUAL(T)                  \
  template bool dual_supported<T>();             \
  template int dual_blocks_per_sm<T>(size_t);    \
  template void launch_dual_rows<T>(const PipeParams<T>&, int, cudaStream_t);
FAE_INSTANTIATE_DUAL(float)
FAE_INSTANTIATE_DUAL(double)
FAE_INSTANTIATE_DUAL(__half)
FAE_INSTANTIATE_DUAL(__nv_bfloat16)
#undef FAE_INSTANTIATE_DUAL

}  // namespace softmax
}  // namespace flash_attn_ext
