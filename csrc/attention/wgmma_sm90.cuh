#pragma once
// Hopper (sm_90a) building blocks of the wgmma attention kernel: the shared-memory layout and matrix
// descriptors, and the warpgroup MMA ordering instructions. The MMAs themselves are in wgmma_sm90_ops.cuh.
//
// Shared-memory layout of every operand tile (Q, K and V alike): 128-byte swizzle. The tile's columns are
// cut into atoms of 64 elements (128 bytes); atom a holds all `rows` rows of its 64 columns, 128 bytes per
// row, and 16-byte chunk c (0..7) of row r sits at position c ^ (r % 8) within the row:
//   byte(r, chunk 8a + c) = a * rows * 128 + r * 128 + ((c ^ (r % 8)) * 16).
// Atoms start on 1024-byte boundaries (the swizzle XORs address bits 4-6 with bits 7-9). The XOR spreads the
// 8 rows of a core matrix over all 32 banks, where the unswizzled core-matrix layout measured 0.8x of the
// mma.sync kernel. Descriptors measured on an H200 (scripts/wgmma_probe/, error 0 against a CPU reference):
//   K-major operand (Q, K in S = Q K^T): SBO = 1024 (next 8 rows), LBO unused; k16 step j of atom a starts
//     at atom a + 32 * j bytes (j = 0..3).
//   MN-major operand (V in O += P V, transpose-b): LBO = rows * 128 (next atom of 64 columns), SBO = 1024
//     (next 8 keys); a k16 step (16 keys) advances the start by 2048 bytes.
#include <cstdint>

namespace flash_attn_ext {
namespace sm90 {

// Descriptor bits: 0-13 start address, 16-29 LBO, 32-45 SBO, all in 16-byte units; 62-63 swizzle mode
// (1 = 128-byte); base offset (49-51) 0 because atoms are 1024-byte aligned.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

// Byte offset of 16-byte chunk `chunk` of row `r` in a swizzled tile of `rows` rows (layout above).
__device__ __forceinline__ uint32_t sw128_offset(int rows, int r, int chunk) {
  return static_cast<uint32_t>((chunk / 8) * rows * 128 + r * 128 + (((chunk % 8) ^ (r % 8)) * 16));
}

// Advance a descriptor's start address by `bytes` (a multiple of 16 that keeps it within shared memory).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Orders register writes by ordinary instructions before wgmma reads them (accumulators, A registers).
__device__ __forceinline__ void warpgroup_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void warpgroup_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void warpgroup_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace sm90
}  // namespace flash_attn_ext
