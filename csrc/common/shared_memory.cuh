#pragma once
// Shared-memory addressing and proxy ordering used by every kernel that talks to shared memory through PTX:
// cp.async / ldmatrix (sm80 attention), mbarriers and bulk copies (softmax pipeline, Hopper attention),
// wgmma descriptors.
#include <cstdint>

namespace flash_attn_ext {

// 32-bit shared-window address of a generic pointer into shared memory, as PTX shared-space operands take it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Orders this thread's generic-proxy shared-memory accesses (st.shared, cp.async) with later async-proxy
// ones (bulk copies writing it, wgmma reading it); a barrier then extends the order to other threads.
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif

}  // namespace flash_attn_ext
