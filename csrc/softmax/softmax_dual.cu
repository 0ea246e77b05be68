// Launcher of the dual-role row kernel (softmax_dual.cuh), instantiated per dtype, for softmax and for the
// other outputs, for aligned rows and (fp32 and 16-bit types) unaligned ones.
#include <c10/util/Exception.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "softmax/softmax_dual.cuh"

namespace flash_attn_ext {
namespace softmax {

// The instantiations for unaligned rows (kShifted): fp32 and 16-bit types (fp64 rows take the dual kernel aligned
// only).
template <typename T> constexpr bool kDualShifted = sizeof(T) <= 4;

// As the pipelined kernel: the body exists only in sm_90+ code.
template <typename T> bool dual_supported() {
  bool supported = kernel_code_version(dual::library_kernel<T, true>) >= 90 &&
                   kernel_code_version(dual::library_kernel<T, false>) >= 90;
  if constexpr (kDualShifted<T>) {
    supported = supported && kernel_code_version(dual::library_kernel<T, true, true>) >= 90 &&
                kernel_code_version(dual::library_kernel<T, false, true>) >= 90;
  }
  return supported;
}

template <typename T> bool dual_takes_unaligned() { return kDualShifted<T>; }

// Of the instantiations, the fewest.
template <typename T> int dual_blocks_per_sm(size_t smem_bytes) {
  const auto per_sm = [smem_bytes](auto kernel) { return resident_blocks_per_sm(kernel, dual::kThreads, smem_bytes); };
  int fewest = std::min(per_sm(dual::library_kernel<T, true>), per_sm(dual::library_kernel<T, false>));
  if constexpr (kDualShifted<T>) {
    fewest = std::min(
        {fewest, per_sm(dual::library_kernel<T, true, true>), per_sm(dual::library_kernel<T, false, true>)});
  }
  return fewest;
}

template <typename T> void launch_dual_rows(const PipeParams<T>& p, int grid, cudaStream_t stream) {
  // Unaligned rows (the host sends them with the output on the input's grid) take the kShifted instantiation.
  const bool aligned = rows_aligned16(p.x, p.y, p.len * int64_t(sizeof(T)));
  const bool softmax = p.output == SoftmaxOutput::Softmax;
  auto kernel = softmax ? dual::library_kernel<T, true> : dual::library_kernel<T, false>;
  if constexpr (kDualShifted<T>) {
    if (!aligned) kernel = softmax ? dual::library_kernel<T, true, true> : dual::library_kernel<T, false, true>;
  } else {
    TORCH_CHECK(aligned, "flash_attn_ext softmax: the dual kernel takes unaligned rows of fp32 and 16-bit types only");
  }
  const size_t smem = pipe_smem_bytes(p);
  allow_dynamic_smem(kernel, smem);
  launch_kernel(kernel, grid, dual::kThreads, smem, stream,
                p.chunks == 1 ? LaunchKind::Plain : LaunchKind::Cooperative, p);
}

#define FAE_INSTANTIATE_DUAL(T)                  \
  template bool dual_supported<T>();             \
  template bool dual_takes_unaligned<T>();       \
  template int dual_blocks_per_sm<T>(size_t);    \
  template void launch_dual_rows<T>(const PipeParams<T>&, int, cudaStream_t);
FAE_INSTANTIATE_DUAL(float)
FAE_INSTANTIATE_DUAL(double)
FAE_INSTANTIATE_DUAL(__half)
FAE_INSTANTIATE_DUAL(__nv_bfloat16)
#undef FAE_INSTANTIATE_DUAL

}  // namespace softmax
}  // namespace flash_attn_ext
