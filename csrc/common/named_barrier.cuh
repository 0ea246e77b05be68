#pragma once
// Named barriers (bar.sync / bar.arrive with an id of 1..15; 0 is __syncthreads'): a group of warps meets without
// the rest of the block. `threads` is the group's size, a multiple of 32, counting the arriving threads too. Used by
// the Hopper attention kernel's warpgroups and the softmax kernels' roles and teams.

namespace flash_attn_ext {

// Waits until `threads` threads have arrived at barrier `id` (this one included).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting (a producer's signal to the threads that sync on it).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flash_attn_ext
