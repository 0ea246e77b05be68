// Launcher of the pipelined row kernel (softmax_pipelined.cuh), instantiated per dtype.
#include <c10/util/Exception.h>

#include <utility>

#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "softmax/softmax_pipelined.cuh"

namespace flash_attn_ext {
namespace softmax {

// The kernel body exists only in sm_90+ code; a build without it (say TORCH_CUDA_ARCH_LIST=8.0 running on
// an H100) has an empty kernel, which must never be chosen.
template <typename T> bool pipe_supported() {
  return kernel_code_version(&pipe::softmax_pipelined_rows_kernel<T>) >= 90;
}

template <typename T> int pipe_blocks_per_sm(int threads, size_t smem_bytes) {
  return resident_blocks_per_sm(&pipe::softmax_pipelined_rows_kernel<T>, threads, smem_bytes);
}

template <typename T>
void launch_pipelined_rows(const PipeParams<T>& p, int threads, int grid, cudaStream_t stream) {
  auto kernel = pipe::softmax_pipelined_rows_kernel<T>;
  const size_t smem = pipe_smem_bytes(p);
  allow_dynamic_smem(kernel, smem);
  // Blocks of a split row (chunks > 1) wait for each other: a cooperative launch.
  launch_kernel(kernel, grid, threads, smem, stream, p.chunks == 1 ? LaunchKind::Plain : LaunchKind::Cooperative, p);
}

#define FAE_INSTANTIATE_PIPE(T)              \
  template bool pipe_supported<T>();        \
  template int pipe_blocks_per_sm<T>(int, size_t); \
  template void launch_pipelined_rows<T>(const PipeParams<T>&, int, int, cudaStream_t);
FAE_INSTANTIATE_PIPE(float)
FAE_INSTANTIATE_PIPE(double)
FAE_INSTANTIATE_PIPE(__half)
FAE_INSTANTIATE_PIPE(__nv_bfloat16)
#undef FAE_INSTANTIATE_PIPE

}  // namespace softmax
}  // namespace flash_attn_ext
