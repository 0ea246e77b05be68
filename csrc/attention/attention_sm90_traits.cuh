#pragma once
// Compile-time tile configuration of the Hopper (wgmma) attention forward, and the one function that picks
// it per (dtype, head-dim tile).
#include <climits>
#include <cstddef>

namespace flash_attn_ext {

constexpr size_t kSm90SmemLimit = 227 * 1024;   // dynamic shared memory one block may have on sm90
constexpr size_t kSm90SmemPerSm = 228 * 1024;   // shared memory of one SM, 1 KB of it reserved per resident block

// Shared memory of one block: Q (q_buffers tiles of block_m rows), the K and V rings (stages tiles of block_n
// rows each), their full and empty mbarriers (and the Q buffers' pair), and 1024 bytes to re-align the start
// to the swizzle atoms' 1024-byte boundary.
constexpr size_t attention_sm90_smem_bytes(int block_m, int block_n, int head_dim, int stages, int q_buffers = 1) {
  return size_t(q_buffers * block_m + 2 * stages * block_n) * head_dim * 2 + (4 * stages + 2 * q_buffers) * 8 + 1024;
}

// Whether `blocks` blocks of `bytes` shared memory each fit one SM.
constexpr bool sm90_blocks_fit(int blocks, size_t bytes) { return blocks * (bytes + 1024) <= kSm90SmemPerSm; }

template <typename T_, int kHeadDim_, int kBlockN_, int kWarpgroups_, int kStages_, bool kPersistent_,
          bool kPvUnderSoftmax_>
struct AttentionFwdSm90Traits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;        // tile width; the real head dim is <= this, zero-padded
  static constexpr int kBlockN = kBlockN_;          // keys per K/V tile
  static constexpr int kWarpgroups = kWarpgroups_;  // consumers, each owning 64 packed query rows
  static constexpr int kStages = kStages_;          // depth of the K ring and of the V ring
  // Blocks stay resident and take items blockIdx.x, + gridDim.x, ...: the next item's first K/V tiles, and
  // its Q where shared memory holds two Q buffers (all but head dim 256), load while the current one finishes.
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kBlockM = 64 * kWarpgroups;
  // One consumer warpgroup: two blocks per SM, so one block's fill and epilogue run under the other's loop.
  static constexpr int kMinBlocksPerSm = kWarpgroups == 1 ? 2 : 1;
  static constexpr int kQBuffers =
      kPersistent && sm90_blocks_fit(kMinBlocksPerSm, attention_sm90_smem_bytes(kBlockM, kBlockN, kHeadDim, kStages, 2))
          ? 2
          : 1;
  // The consumers' schedule of a key tile j. True: S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued
  // together, the warpgroup waits for S_j alone and computes its softmax while P V runs. False: P_{j-1}
  // V_{j-1} is issued as soon as P_{j-1} is packed, S_j right behind it, and the warpgroup waits for both
  // before the softmax of S_j; its tensor-core work runs back to back, and other warpgroups' MMAs fill the
  // softmax. The second holds fewer registers through the softmax (P's are free), which is what lets three
  // consumer warpgroups fit 160 registers a thread without spills.
  static constexpr bool kPvUnderSoftmax = kPvUnderSoftmax_;
  static constexpr int kThreads = 128 * (kWarpgroups + 1);  // + the producer warpgroup (warpgroup 0)
  // setmaxnreg budgets: the producer gives registers back so the consumers can hold S, P and O; the
  // consumers take what a block's share of the register file leaves (multiples of 8, at most 240).
  // How a persistent block's next Q arrives: with several consumer warpgroups, by one bulk tensor copy per
  // swizzle atom from the producer thread (where the group of query heads divides kBlockM, so that a tile is
  // whole positions of the group), so the producer keeps 24 registers and the consumers theirs (160 in the wide
  // form); with one, by cp.async from producer warps 1-3 (any grouping), at 56 registers.
  static constexpr bool kQByTma = kPersistent && kWarpgroups > 1;
  // Where Q arrives so and has two buffers, O leaves the same way: the consumers stage it in the item's Q buffer
  // and the producer thread stores the whole tile right before it refills that buffer (two items later), so no
  // consumer waits for a bulk store to read shared memory. H100, bf16: +2-4 % at D = 64, S = 512-2k, +3-5 % with
  // groups of 4 at S = 512, D = 128 within +-1 %; with one Q buffer (D = 256) the refill waits for the store
  // and it lost 2-3 % (NOTES "s51 call 1").
  static constexpr bool kOByProducer = kQByTma && kQBuffers == 2;
  // Two consumer warpgroups of a persistent block issue their MMAs in turns (FlashAttention 3's ping-pong).
  // H100, bf16, interleaved (NOTES "s51 call 3"): D = 64 causal +7-8 % at S = 512-2k; D = 128 +1.5-5 % at
  // S = 512, +1-2 % at 1k; D = 256 +0.5-2.5 % at S <= 2k; level to +1 % from 4k (an H200 alike, "s51 call 2").
  // One-item blocks measured within +-2 % with it (NOTES "wip run 3"), so they go without.
  static constexpr bool kPingPong = kPersistent && kWarpgroups == 2;
  // The online softmax keeps a row's max until a score passes it by 2^8 and skips the rescale of O in tiles
  // where no row of the warp moved (online_softmax_tile), above head dim 64. H100, bf16, against always
  // rescaling, interleaved (NOTES "s52 call 4"): D = 128 +1-3 %, D = 256 +1.5-3.5 % from S = 1k (to +5 % at
  // 16k), within 1 % at 512. At D = 64, where the multiplies skipped are 32 of a tile's ~450 instructions, the
  // two-warpgroup form ran 0.5-2 % slower causal at S <= 2k, and the one- and three-warpgroup forms 1-4 %
  // slower ("s52 calls 2, 4").
  static constexpr bool kLaggedMax = kHeadDim > 64;
  static constexpr int kProducerRegs = kPersistent && !kQByTma ? 56 : 24;
  static constexpr int kConsumerRegsFit = (65536 / kMinBlocksPerSm - 128 * kProducerRegs) / (128 * kWarpgroups) / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegsFit < 240 ? kConsumerRegsFit : 240;

  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kAtoms = kHeadDim / 64;       // 128-byte swizzle atoms per row (wgmma_sm90.cuh)
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kTileBytes = kBlockN * kRowBytes;  // one K or one V tile
  static constexpr size_t kSmemBytes = attention_sm90_smem_bytes(kBlockM, kBlockN, kHeadDim, kStages, kQBuffers);
  static constexpr int kKSteps = kHeadDim / 16;  // k16 steps of S = Q K^T
  static constexpr int kPSteps = kBlockN / 16;   // k16 steps of O += P V

  static_assert(sizeof(T) == 2, "wgmma path is for fp16/bf16");
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "head-dim tile: whole swizzle atoms, at most 256");
  static_assert(kBlockN == 64 || kBlockN == 80 || kBlockN == 128,
                "S = Q K^T is generated for N = 64, 80 and 128 (generate_wgmma.py)");
  static_assert(kStages >= 2, "K_{j+1} loads while K_j is used");
  static_assert(kSmemBytes <= kSm90SmemLimit, "must fit the 227 KB of shared memory of sm90");
  static_assert(sm90_blocks_fit(kMinBlocksPerSm, kSmemBytes), "kMinBlocksPerSm blocks fit one SM");
};

// Head dim 64: one consumer warpgroup (64 query rows) per block and two blocks per SM, so one block's fill and
// epilogue run under the other's main loop (+2-8 % over two warpgroups sharing each K/V tile in one block). Short
// key ranges (at most kNarrowPersistentMaxTiles tiles) take that form persistent (NarrowPersistent): the next
// item's Q and first K/V tiles load under the current item (+4-8 % at S = 512); its double Q buffer leaves room
// for two stages only, which costs 1-3 % on long items. The wide form, where the host's estimate favours it
// (attention_fwd_sm90_launch.cuh): three consumer warpgroups (192 query rows) share every K/V tile, so each SM
// scheduler has three consumer warps instead of two and each K/V tile read from L2 serves three times the rows
// (H100, bf16: +9-17 % at S = 2k-16k, NOTES "s49 call 2"), at the cost of 192-row items (more padding and coarser
// waves). Without a causal mask it runs persistent (its Q by bulk tensor copies), also at short key ranges
// (+1-9 % over the other forms, S = 512-8k; causal short items lost up to 22 %, "s49 call 8"), and causal from
// 4096 packed rows above 8 key tiles (the launcher says why). Larger head dims:
// two consumer warpgroups (128 query rows) share every K/V tile (one block per SM). 128-key tiles up to head dim
// 128 (S and O take 64 + kHeadDim / 2 accumulator registers), 64-key tiles above it. Three stages where shared
// memory allows. P V under the softmax (kPvUnderSoftmax) above head dim 128 only: without it head dim 256 ran
// 10-15 % slower, head dims 64 and 128 1-5 % faster (s49 calls 2-3; 192 was not measured and keeps it).
// Persistent: two consumer warpgroups in persistent blocks, their next Q by bulk tensor copies (where the group
// of query heads divides 128), at head dims 64 (causal, at most kPersistentMaxTiles key tiles), 128, 192 and 256.
// H100, bf16, against the one-item forms with heads not grouped: D = 128 +20-25 % at S = 512, +7-13 % at 2k,
// +2-7 % at 8k, level at 16k; D = 192 +7-13 % at S <= 2k, +1-9 % at 4k-8k; D = 256 +1-10 % from 1k to 8k, 2 %
// slower causal at 512 and 16k; D = 64 causal +7 % at 512-1k, +5 % at 2k, +3 % at 4k, 5 % slower at 8k (NOTES
// "s50 calls 1-4, 8"). With groups of 4 and 8 (where the one-item forms loaded Q by cp.async and stored O from
// the lanes): D = 128 +39-46 % at 512, +7 % at 4k; D = 256 +17-27 % at 512, +4-5 % at 4k; D = 64 causal +20 % at
// 512, +10 % at 2k, 3-7 % slower at 4k, hence at most 16 key tiles (NOTES "s50 call 7"). Two Q buffers and two
// stages at head dims 128 and 192 (one buffer and three stages gained only 0-4 % at 128), one Q buffer at 256,
// where two do not fit. At head dim 192 that form takes 80-key tiles (FlashAttention 3 takes 112-128 there), the
// most two Q buffers and two stages of K and V leave room for (216 KB): H100, bf16, against 64-key tiles,
// interleaved: +6-10 % at S = 1k-16k without a mask, +4-9 % causal from 2k, level at 1k and without a mask at 512,
// 2.4 % slower causal at 512 (NOTES "s52 calls 6-7"). At head dim 256 (one Q buffer, 20 bytes of spills) the same
// tiles ran -4.5 % at 512 to +2 % at 8k, and 160-key tiles at 128 lost 5-14 % at S <= 1k and gained 1-2 % from 2k:
// neither is used.
template <typename T, int kHeadDim>
struct AttentionFwdSm90Config {
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;
  static constexpr int kWarpgroups = kHeadDim == 64 ? 1 : 2;
  static constexpr int kBlocksPerSm = kWarpgroups == 1 ? 2 : 1;
  static constexpr int kStages =
      sm90_blocks_fit(kBlocksPerSm, attention_sm90_smem_bytes(64 * kWarpgroups, kBlockN, kHeadDim, 3)) ? 3 : 2;
  static constexpr bool kPvUnderSoftmax = kHeadDim > 128;
  using Traits = AttentionFwdSm90Traits<T, kHeadDim, kBlockN, kWarpgroups, kStages, false, kPvUnderSoftmax>;
  static constexpr bool kHasNarrowPersistent = kWarpgroups == 1;
  static constexpr int kNarrowPersistentMaxTiles = 8;
  using NarrowPersistent = AttentionFwdSm90Traits<T, kHeadDim, kBlockN, 1, 2, /*kPersistent=*/true, kPvUnderSoftmax>;
  static constexpr int kPersistentMaxTiles = kHeadDim == 64 ? 16 : INT_MAX;
  static constexpr int kPersistentBlockN = kHeadDim == 192 ? 80 : kBlockN;
  static constexpr int kPersistentStages =
      attention_sm90_smem_bytes(128, kPersistentBlockN, kHeadDim, 3, 2) <= kSm90SmemLimit ? 3 : 2;
  using Persistent = AttentionFwdSm90Traits<T, kHeadDim, kPersistentBlockN, 2, kPersistentStages,
                                            /*kPersistent=*/true, kPvUnderSoftmax>;
  static constexpr bool kHasWide = kHeadDim == 64;
  using Wide = AttentionFwdSm90Traits<T, kHeadDim, kBlockN, 3, 3, false, kPvUnderSoftmax>;
  using WidePersistent = AttentionFwdSm90Traits<T, kHeadDim, kBlockN, 3, 3, /*kPersistent=*/true, kPvUnderSoftmax>;
};

}  // namespace flash_attn_ext
