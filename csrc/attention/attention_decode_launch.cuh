#pragma once
// Launch of the decode forward (attention_decode_kernel.cuh) for one (dtype, head-dim tile); instantiated
// once per pair in csrc/attention/instantiations/.
#include <c10/util/Exception.h>

#include <climits>

#include "attention/attention_decode_kernel.cuh"
#include "attention/attention_fwd_api.h"
#include "common/cuda_check.h"
#include "common/kernel_launch.h"

namespace flash_attn_ext {

namespace attention_decode {

// blocks_per_sm is 0 where the kernel's shared memory exceeds the device's per-block limit (sm86/sm89 have
// ~100 KB): the caller then takes the prefill kernel.
template <typename Traits>
AttentionFwdLaunchInfo launch_info() {
  if (Traits::kSmemBytes > static_cast<size_t>(current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin))) {
    return AttentionFwdLaunchInfo{Traits::kBlockM, Traits::kRoundKeys, 0};
  }
  return AttentionFwdLaunchInfo{
      Traits::kBlockM, Traits::kRoundKeys,
      resident_blocks_per_sm(&attention_decode_kernel<Traits>, Traits::kThreads, Traits::kSmemBytes)};
}

template <typename Traits>
void launch(const AttentionParams& p, cudaStream_t stream) {
  TORCH_CHECK(p.packed_rows <= Traits::kBlockM, "flash_attn_ext.attention: the decode kernel takes at most ",
              Traits::kBlockM, " packed query rows (got ", p.packed_rows, ")");
  allow_dynamic_smem(&attention_decode_kernel<Traits>, Traits::kSmemBytes);
  const int64_t blocks = static_cast<int64_t>(p.num_splits) * p.batch * p.heads_kv;
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.attention: problem too large (", blocks, " thread blocks)");
  launch_kernel(&attention_decode_kernel<Traits>, static_cast<unsigned>(blocks), Traits::kThreads, Traits::kSmemBytes,
                stream, LaunchKind::Plain, p);
}

}  // namespace attention_decode

template <typename T, int kHeadDim>
AttentionFwdLaunchInfo attention_decode_launch_info() {
  return attention_decode::launch_info<typename AttentionDecodeConfig<T, kHeadDim>::Traits>();
}

template <typename T, int kHeadDim>
void run_attention_decode(const AttentionParams& p, cudaStream_t stream) {
  attention_decode::launch<typename AttentionDecodeConfig<T, kHeadDim>::Traits>(p, stream);
}

}  // namespace flash_attn_ext

#define FAE_INSTANTIATE_ATTENTION_DECODE(T, D)                                                       \
  template void flash_attn_ext::run_attention_decode<T, D>(const flash_attn_ext::AttentionParams&,   \
                                                           cudaStream_t);                           \
  template flash_attn_ext::AttentionFwdLaunchInfo flash_attn_ext::attention_decode_launch_info<T, D>();
