#pragma once
// Launch of the wgmma (sm_90a) forward for one (dtype, head-dim tile); instantiated once per pair in
// csrc/attention/instantiations/ next to the mma.sync launchers. The kernel body exists only in the sm_90a
// code of a build whose arch list has 9.0a; the host dispatch calls this only then (attention_cuda.cu).
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <climits>

#include "attention/attention_fwd_api.h"
#include "attention/attention_fwd_sm90.cuh"
#include "common/cuda_check.h"

namespace flash_attn_ext {

template <typename T, int kHeadDim>
void run_attention_fwd_sm90(const AttentionParams& p, cudaStream_t stream) {
  using Traits = typename AttentionFwdSm90Config<T, kHeadDim>::Traits;
  auto kernel = &attention_fwd_sm90::attention_fwd_sm90_kernel<Traits>;
  constexpr int kSmem = static_cast<int>(Traits::kSmemBytes);
  TORCH_CHECK(p.num_splits == 1, "flash_attn_ext.attention: the sm90 kernel does not split keys");
  FAE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int64_t m_blocks = (p.packed_rows + Traits::kBlockM - 1) / Traits::kBlockM;
  const int64_t blocks = m_blocks * p.batch * p.heads_kv;
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.attention: problem too large (", blocks, " thread blocks)");
  kernel<<<static_cast<unsigned>(blocks), Traits::kThreads, kSmem, stream>>>(p);
  FAE_LAUNCH_CHECK();
}

}  // namespace flash_attn_ext

#define FAE_INSTANTIATE_ATTENTION_FWD_SM90(T, D) \
  template void flash_attn_ext::run_attention_fwd_sm90<T, D>(const flash_attn_ext::AttentionParams&, cudaStream_t);
