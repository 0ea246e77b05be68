#pragma once
// Attention forward for few query rows against many keys (decoding: Sq = 1, or a few speculative tokens;
// all packed rows, Sq * Hq / Hk, fit one m16 tile). Memory-bound: the time is the K/V bytes over the
// bandwidth, so the kernel is built to keep many bytes in flight and to meet no block barrier while
// streaming. Each warp runs its own cp.async ring over its own key tiles (warp w of a block takes tiles
// w, w + kWarps, ... of the block's key range, so a block reads one contiguous span per round); the warps'
// partial (max, sum, O) merge through shared memory once at the end. mma.sync, so every sm80+ GPU runs it.
#include <cmath>

#include "attention/attention_params.h"
#include "attention/attention_tile_coords.cuh"
#include "attention/mma_sm80.cuh"
#include "attention/online_softmax_sm80.cuh"
#include "common/grid_dependency.cuh"

namespace flash_attn_ext {

template <typename T_, int kHeadDim_, int kTileN_, int kStages_, int kWarps_>
struct AttentionDecodeTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;  // tile width; the real head dim is <= this, zero-padded
  static constexpr int kTileN = kTileN_;      // keys per warp tile
  static constexpr int kStages = kStages_;    // ring depth per warp
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16;                   // packed query rows: one m16 tile
  static constexpr int kRoundKeys = kWarps * kTileN;   // keys a block reads per round (one tile per warp)
  static constexpr int kNTiles = kTileN / 8;           // n8 tiles of S
  static constexpr int kDTiles = kHeadDim / 8;         // n8 tiles of O
  static constexpr int kKSteps = kHeadDim / 16;        // k16 steps of S = Q K^T
  static constexpr int kPSteps = kTileN / 16;          // k16 steps of O += P V
  static constexpr int kChunksPerRow = kHeadDim / 8;   // 16-byte chunks per row
  static constexpr int kSmemStride = kHeadDim + 8;     // +16 B per row: ldmatrix phases hit distinct banks
  static constexpr bool kQInRegs = kHeadDim <= 128;    // else re-read from smem per tile (registers)
  static constexpr int kStageElems = 2 * kTileN * kSmemStride;  // K tile, then V tile
  static constexpr size_t kQBytes = size_t(kBlockM) * kSmemStride * sizeof(T);
  static constexpr size_t kRingBytes = size_t(kWarps) * kStages * kStageElems * sizeof(T);
  // The end-of-block merge reuses the ring: per warp, O (16 x kHeadDim + 4 floats) then m and l (16 each).
  static constexpr int kMergeStride = kHeadDim + 4;
  static constexpr size_t kMergeBytes = size_t(kWarps) * kBlockM * (kMergeStride + 2) * sizeof(float);
  static constexpr size_t kSmemBytes = kQBytes + (kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes);

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "head-dim tile must be a multiple of 32, at most 256");
  static_assert(kTileN % 16 == 0 && (kTileN * kChunksPerRow) % 32 == 0, "a warp tile is whole k16 steps");
  static_assert(kStages >= 2, "a ring needs two stages");
};

// Tile shape per head-dim tile: 4 warps, each streaming 10-18 KB of K and V per stage through a 2-stage ring
// (82-150 KB of shared memory: one block per SM on sm80/sm90; GPUs with less per block use the prefill
// kernel). Measured on the H100 at head dim
// 128 (B = 8, GQA 32:8, Sk 4k / 32k / 128k): 32-key warp tiles in 2 stages 59 / 388 / 1462 us; 16 keys in
// 3 stages (two blocks per SM) 63 / 395 / 1479; 16 x 4 stages 491 (one split too few) / 415 / 1464;
// 32 x 3 stages 59 / 389 / 1486; 2 warps of 16 x 4 stages 67 / 408 / 1524.
template <typename T, int kHeadDim>
struct AttentionDecodeConfig {
  static constexpr int kTileN = kHeadDim <= 64 ? 64 : kHeadDim <= 128 ? 32 : 16;
  using Traits = AttentionDecodeTraits<T, kHeadDim, kTileN, 2, 4>;
};

namespace attention_decode {

using attention_fwd::BlockCoords;
using attention_fwd::block_coords;
using attention_fwd::key_limit;
using attention_fwd::lse_index;
using attention_fwd::packed_row_offset;

// One warp copies a (kTileN x kHeadDim) tile of K or V into its ring; rows >= `rows_valid` and columns >=
// head_dim are zero-filled (zero keys are masked by the key limits, zero values meet zero probabilities).
// With the L2::128B hint (+1-2 % at Sk = 32k-128k on the H100 against plain cp.async.cg).
template <typename Traits>
__device__ __forceinline__ void load_warp_tile(typename Traits::T* smem, const typename Traits::T* gmem,
                                               int64_t row_stride, int rows_valid, int head_dim, int lane) {
  constexpr int kChunks = Traits::kTileN * Traits::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kChunks / 32; ++i) {
    const int c = lane + 32 * i;
    const int row = c / Traits::kChunksPerRow, col = (c % Traits::kChunksPerRow) * 8;
    const bool valid = row < rows_valid && col < head_dim;
    cp_async_16_l2_prefetch(smem + row * Traits::kSmemStride + col, valid ? gmem + row * row_stride + col : gmem,
                            valid);
  }
}

// Shape: grid = num_splits * B * Hk blocks (block_coords with one m block); block = kWarps warps. A block
// owns the packed rows (all Sq * group of them, <= 16) of one (batch, kv head) and the keys of its split
// [split * tiles_per_split * kRoundKeys, ...). Writes O and lse, or with num_splits > 1 fp32 partials to
// out_accum / lse_accum for merge_attention_kernel.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads) attention_decode_kernel(const AttentionParams p) {
  begin_dependent_grid();
  using T = typename Traits::T;
  constexpr int kStride = Traits::kSmemStride, kTileN = Traits::kTileN, kStages = Traits::kStages;
  constexpr int kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles, kWarps = Traits::kWarps;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (16, kStride)
  T* ring = sQ + Traits::kBlockM * kStride;

  const BlockCoords bc = block_coords(p, 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  T* my_ring = ring + warp * kStages * Traits::kStageElems;

  // This block's keys: its split's rounds, cut at the largest causal limit among its rows.
  const int n_end = key_limit(p, p.packed_rows - 1);
  const int key_begin = bc.split * p.tiles_per_split * Traits::kRoundKeys;
  const int key_end = min(n_end, key_begin + p.tiles_per_split * Traits::kRoundKeys);
  const int unmasked_end = max(key_limit(p, 0), 0);  // keys below it are visible to every row
  // This warp's tiles: n0(i) = key_begin + (i * kWarps + warp) * kTileN for n0(i) < key_end.
  const int first_n0 = key_begin + warp * kTileN;
  const int n_tiles = first_n0 < key_end ? (key_end - first_n0 + Traits::kRoundKeys - 1) / Traits::kRoundKeys : 0;

  const T* gK = static_cast<const T*>(p.k) + bc.batch * p.k_batch_stride + bc.kv_head * p.k_head_stride;
  const T* gV = static_cast<const T*>(p.v) + bc.batch * p.v_batch_stride + bc.kv_head * p.v_head_stride;

  // Q (packed rows, zero-filled past the last) is the first cp.async group of every thread.
  {
    const T* gQ = static_cast<const T*>(p.q) + bc.batch * p.q_batch_stride;
    for (int c = threadIdx.x; c < Traits::kBlockM * Traits::kChunksPerRow; c += Traits::kThreads) {
      const int row = c / Traits::kChunksPerRow, col = (c % Traits::kChunksPerRow) * 8;
      const bool valid = row < p.packed_rows && col < p.head_dim;
      const T* src = gQ + packed_row_offset(p, bc.kv_head, row, p.q_head_stride, p.q_row_stride) + col;
      cp_async_16(sQ + row * kStride + col, valid ? src : gQ, valid);
    }
    cp_async_commit();
  }
  auto load_tile = [&](int i) {
    const int n0 = first_n0 + i * Traits::kRoundKeys;
    T* stage = my_ring + (i % kStages) * Traits::kStageElems;
    load_warp_tile<Traits>(stage, gK + n0 * p.k_row_stride, p.k_row_stride, p.seqlen_k - n0, p.head_dim, lane);
    load_warp_tile<Traits>(stage + kTileN * kStride, gV + n0 * p.v_row_stride, p.v_row_stride, p.seqlen_k - n0,
                           p.head_dim, lane);
  };
  // Every thread commits one group per ring slot, empty or not, so wait_group counts stay uniform.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) load_tile(i);
    cp_async_commit();
  }
  cp_async_wait<kStages - 1>();  // this thread's Q chunks landed
  __syncthreads();               // everyone's did

  // Rows of this thread: g (h = 0) and g + 8 (h = 1).
  int limit[2];
  limit[0] = key_limit(p, g);
  limit[1] = key_limit(p, g + 8);
  uint32_t q_frag[Traits::kQInRegs ? Traits::kKSteps : 1][4];
  if constexpr (Traits::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < Traits::kKSteps; ++ks)
      ldmatrix_x4(q_frag[ks], sQ + (lane % 16) * kStride + ks * 16 + (lane / 16) * 8);
  }

  float o[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of scaled scores, log2 units
  float row_sum[2] = {0.f, 0.f};              // this thread's share; quad-reduced at the end

  for (int i = 0; i < n_tiles; ++i) {
    // The slot tile i + kStages - 1 fills was read in iteration i - 1: all lanes must be past it.
    __syncwarp();
    if (i + kStages - 1 < n_tiles) load_tile(i + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // tile i landed (this lane's chunks)
    __syncwarp();                  // and every lane's
    const T* sK = my_ring + (i % kStages) * Traits::kStageElems;
    const T* sV = sK + kTileN * kStride;
    const int n0 = first_n0 + i * Traits::kRoundKeys;

    float s[kNTiles][4];
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[ni][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Traits::kKSteps; ++ks) {
      uint32_t a[4];
      if constexpr (Traits::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = q_frag[ks][e];
      } else {
        ldmatrix_x4(a, sQ + (lane % 16) * kStride + ks * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t b[4];  // b0/b1 of n tile 2np, then of n tile 2np + 1
        ldmatrix_x4(b, sK + (np * 16 + (lane / 16) * 8 + lane % 8) * kStride + ks * 16 + ((lane / 8) % 2) * 8);
        Mma16816<T>::run(s[2 * np], a, b[0], b[1]);
        Mma16816<T>::run(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    online_softmax_step<1>(s, o, p.scale_log2, /*need_mask=*/n0 + kTileN > unmasked_end, n0 + 2 * t, limit, row_max,
                           row_sum);

    // O += P V
#pragma unroll
    for (int kk = 0; kk < Traits::kPSteps; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t b[4];  // b0/b1 of d tile 2dp, then of d tile 2dp + 1
        ldmatrix_x4_trans(b, sV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kStride + dp * 16 + (lane / 16) * 8);
        Mma16816<T>::run(o[2 * dp], a, b[0], b[1]);
        Mma16816<T>::run(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups remain; the ring becomes the merge buffer
  __syncthreads();

  // Each warp's partial: unnormalized O, its row max (log2 units) and its row sum.
  float* mO = reinterpret_cast<float*>(ring);  // (kWarps, 16, kMergeStride)
  float* mM = mO + kWarps * Traits::kBlockM * Traits::kMergeStride;  // (kWarps, 16)
  float* mL = mM + kWarps * Traits::kBlockM;                         // (kWarps, 16)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum[h];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const int row = g + 8 * h;
    float* dst = mO + (warp * Traits::kBlockM + row) * Traits::kMergeStride;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
      *reinterpret_cast<float2*>(dst + dt * 8 + 2 * t) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
    if (t == 0) {
      mM[warp * Traits::kBlockM + row] = row_max[h];
      mL[warp * Traits::kBlockM + row] = l;
    }
  }
  __syncthreads();

  // Merge the warps and write: each thread takes 8 consecutive columns of one row per step.
  const bool partial = p.num_splits > 1;
  const int64_t split_offset = (int64_t)bc.split * p.batch * p.heads_q * p.seqlen_q;
  T* gO = static_cast<T*>(p.out) + bc.batch * p.o_batch_stride;
  constexpr int kOutChunks = Traits::kBlockM * Traits::kChunksPerRow;
  for (int c = threadIdx.x; c < kOutChunks; c += Traits::kThreads) {
    const int row = c / Traits::kChunksPerRow, col = (c % Traits::kChunksPerRow) * 8;
    if (row >= p.packed_rows || col >= p.head_dim) continue;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, mM[w * Traits::kBlockM + row]);
    const float m_use = m == -INFINITY ? 0.f : m;
    float l = 0.f, acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = fast_exp2(mM[w * Traits::kBlockM + row] - m_use);
      l += f * mL[w * Traits::kBlockM + row];
      const float* src = mO + (w * Traits::kBlockM + row) * Traits::kMergeStride + col;
      const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
      acc[0] += f * lo.x, acc[1] += f * lo.y, acc[2] += f * lo.z, acc[3] += f * lo.w;
      acc[4] += f * hi.x, acc[5] += f * hi.y, acc[6] += f * hi.z, acc[7] += f * hi.w;
    }
    const float inv = l == 0.f ? 0.f : 1.f / l;  // a row that saw no key: 0 and lse -inf
    const int64_t lse_idx = lse_index(p, bc.batch, bc.kv_head, row);
    if (col == 0) {
      const float lse = l == 0.f ? -INFINITY : m * attention_fwd::kLn2 + logf(l);
      (partial ? p.lse_accum + split_offset : p.lse)[lse_idx] = lse;
    }
    if (partial) {
      float* dst = p.out_accum + (split_offset + lse_idx) * p.head_dim + col;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
    } else {
      uint4 packed;
      packed.x = pack2<T>(acc[0] * inv, acc[1] * inv);
      packed.y = pack2<T>(acc[2] * inv, acc[3] * inv);
      packed.z = pack2<T>(acc[4] * inv, acc[5] * inv);
      packed.w = pack2<T>(acc[6] * inv, acc[7] * inv);
      T* dst = gO + packed_row_offset(p, bc.kv_head, row, p.o_head_stride, p.o_row_stride) + col;
      *reinterpret_cast<uint4*>(dst) = packed;
    }
  }
}

}  // namespace attention_decode
}  // namespace flash_attn_ext
