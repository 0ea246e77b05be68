#pragma once
// L2 cache policies (createpolicy) for loads and bulk copies that carry an `.L2::cache_hint` operand: evict-last for
// lines that are read again soon (the resident kernel's L2 part, read in phase A and again in phase B), evict-first
// for lines read once.
#include <cstdint>

namespace flash_attn_ext {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
#endif

}  // namespace flash_attn_ext
