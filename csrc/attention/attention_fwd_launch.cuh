#pragma once
// Launch of the tensor-core forward for one (dtype, head-dim tile); instantiated once per pair in
// csrc/attention/instantiations/ so the pairs compile in parallel.
#include <c10/util/Exception.h>

#include <climits>

#include "attention/attention_fwd_kernel.cuh"
#include "attention/attention_fwd_api.h"
#include "common/cuda_check.h"
#include "common/kernel_launch.h"

namespace flash_attn_ext {

template <typename T, int kHeadDim>
AttentionFwdLaunchInfo attention_fwd_launch_info() {
  using Traits = typename AttentionFwdConfig<T, kHeadDim>::Traits;
  return AttentionFwdLaunchInfo{
      Traits::kBlockM, Traits::kBlockN,
      resident_blocks_per_sm(&attention_fwd::attention_fwd_kernel<Traits>, Traits::kThreads, Traits::kSmemBytes)};
}

template <typename T, int kHeadDim>
void run_attention_fwd(const AttentionParams& p, cudaStream_t stream) {
  using Traits = typename AttentionFwdConfig<T, kHeadDim>::Traits;
  auto kernel = &attention_fwd::attention_fwd_kernel<Traits>;
  constexpr int kSmem = static_cast<int>(Traits::kSmemBytes);
  allow_dynamic_smem(kernel, kSmem);
  const int64_t m_blocks = (p.packed_rows + Traits::kBlockM - 1) / Traits::kBlockM;
  const int64_t blocks = m_blocks * p.num_splits * p.batch * p.heads_kv;
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.attention: problem too large (", blocks, " thread blocks)");
  launch_kernel(kernel, static_cast<unsigned>(blocks), Traits::kThreads, kSmem, stream, LaunchKind::Plain, p);
}

}  // namespace flash_attn_ext

#define FAE_INSTANTIATE_ATTENTION_FWD(T, D)                                                   \
  template void flash_attn_ext::run_attention_fwd<T, D>(const flash_attn_ext::AttentionParams&, \
                                                        cudaStream_t);                         \
  template flash_attn_ext::AttentionFwdLaunchInfo flash_attn_ext::attention_fwd_launch_info<T, D>();
