#pragma once
// Compile-time tile configuration of the tensor-core attention forward, and the one function that picks
// it per (dtype, head dim).
#include <cstddef>

namespace flash_attn_ext {

template <typename T_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kMinBlocksPerSm_>
struct AttentionFwdTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;  // tile width; the real head dim is <= this, zero-padded
  static constexpr int kBlockM = kBlockM_;    // packed query rows per block
  static constexpr int kBlockN = kBlockN_;    // keys per K/V tile
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kThreads = 32 * kNWarps;
  // Blocks per SM the register budget is sized for (the __launch_bounds__ minimum).
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;

  static constexpr int kWarpRows = kBlockM / kNWarps;  // each warp owns whole query rows
  static constexpr int kMTiles = kWarpRows / 16;       // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;          // n8 tiles of S per m16 tile
  static constexpr int kDTiles = kHeadDim / 8;         // n8 tiles of O per m16 tile
  static constexpr int kKSteps = kHeadDim / 16;        // k16 steps of S = Q K^T
  static constexpr int kPSteps = kBlockN / 16;         // k16 steps of O += P V
  static constexpr int kChunksPerRow = kHeadDim / 8;   // 16-byte chunks per smem row
  // Threads map to power-of-two column slots so each walks rows with one fixed step; slots past
  // kChunksPerRow (head dims 96 and 192) idle during loads.
  static constexpr int kChunkSlotsPerRow = kChunksPerRow <= 4 ? 4 : kChunksPerRow <= 8 ? 8 : kChunksPerRow <= 16 ? 16 : 32;

  // One extra 16-byte chunk per smem row: the 8 rows an ldmatrix phase reads then start 16 bytes apart
  // modulo 128 and hit distinct banks (needs kHeadDim % 16 == 0).
  static constexpr int kSmemStride = kHeadDim + 8;
  // Q fragments stay in registers when they are few; otherwise they are re-read from smem per tile.
  static constexpr bool kQInRegs = kMTiles * kKSteps * 4 <= 16;
  // sQ, then one K tile and one V tile: K(j+1) streams in while P V(j) runs, V(j+1) while Q K(j+1)^T runs.
  static constexpr size_t kSmemBytes = size_t(kBlockM + 2 * kBlockN) * kSmemStride * sizeof(T);

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "head-dim tile must be a multiple of 32, at most 256");
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns a whole number of m16 tiles");
  static_assert(kBlockN % 16 == 0, "K/V tiles are read in k16 steps");
  static_assert(kThreads % kChunkSlotsPerRow == 0 && kBlockN % (kThreads / kChunkSlotsPerRow) == 0 &&
                    kBlockM % (kThreads / kChunkSlotsPerRow) == 0,
                "tile rows split evenly over the threads of one column slot");
  static_assert(kSmemBytes <= 160 * 1024, "must fit the 163 KB of shared memory of sm80");
};

// The tile shape per head-dim tile (shared by fp16 and bf16). 32: 8 warps of 16 rows, two blocks per SM
// within 128 registers. 64-128: 4 warps of 32 rows, so each K/V fragment read from smem feeds two MMAs, two
// blocks per SM at up to 255 registers. 192/256: 4 warps of 16 rows (64-row blocks), two blocks per SM, so
// one block's barriers overlap the other's work (8 warps in one block per SM measured 0.7-0.9x FA2).
template <typename T, int kHeadDim>
struct AttentionFwdConfig {
  static constexpr bool kWideWarps = kHeadDim >= 64 && kHeadDim <= 128;
  static constexpr bool kLargeHead = kHeadDim > 128;
  using Traits = AttentionFwdTraits<T, kHeadDim, kLargeHead ? 64 : 128, 64, kWideWarps || kLargeHead ? 4 : 8, 2>;
};

}  // namespace flash_attn_ext
