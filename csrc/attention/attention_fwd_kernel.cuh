#pragma once
// FlashAttention-2 style forward on tensor cores (mma.sync m16n8k16), for fp16 and bf16 inputs on sm80+.
#include <cmath>

#include "attention/attention_params.h"
#include "attention/attention_tile_coords.cuh"
#include "attention/attention_traits.cuh"
#include "attention/mma_sm80.cuh"
#include "attention/online_softmax_sm80.cuh"
#include "common/grid_dependency.cuh"

namespace flash_attn_ext {
namespace attention_fwd {

// Copies a (kBlockN x kHeadDim) tile of one K or V head into smem; rows >= `rows_valid` and columns
// >= head_dim are zero-filled, so they add nothing to Q K^T and multiply zero probabilities in P V.
// Each thread owns one 16-byte column slot and walks rows with a fixed step, so its addresses are one
// running pointer rather than a set of precomputed offsets the compiler would keep live across tiles.
template <typename Traits>
__device__ __forceinline__ void load_kv_tile(typename Traits::T* smem, const typename Traits::T* gmem,
                                             int64_t row_stride, int rows_valid, int head_dim) {
  constexpr int kSlots = Traits::kChunkSlotsPerRow;
  constexpr int kRowStep = Traits::kThreads / kSlots;
  const int row0 = threadIdx.x / kSlots;
  const int col = (threadIdx.x % kSlots) * 8;
  if (col >= Traits::kHeadDim) return;
  const bool col_valid = col < head_dim;
  const typename Traits::T* src = gmem + row0 * row_stride + col;
  const int64_t step = kRowStep * row_stride;
#pragma unroll
  for (int i = 0; i < Traits::kBlockN / kRowStep; ++i) {
    const int row = row0 + i * kRowStep;
    const bool valid = col_valid && row < rows_valid;
    cp_async_16(smem + row * Traits::kSmemStride + col, valid ? src : gmem, valid);
    src += step;
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm) attention_fwd_kernel(const AttentionParams p) {
  begin_dependent_grid();
  using T = typename Traits::T;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kStride = Traits::kSmemStride;
  constexpr int kMTiles = Traits::kMTiles, kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (kBlockM, kStride)
  T* sK = sQ + kBlockM * kStride;          // (kBlockN, kStride)
  T* sV = sK + kBlockN * kStride;          // (kBlockN, kStride)

  const int m_blocks = (p.packed_rows + kBlockM - 1) / kBlockM;
  const BlockCoords bc = block_coords(p, m_blocks);
  const int m0 = bc.m_block * kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * Traits::kWarpRows;
  // Warps whose rows all lie past the last query row (decoding: a few packed rows in a 128-row tile)
  // still load tiles and meet every barrier, but skip the math.
  const bool warp_active = m0 + warp_row0 < p.packed_rows;

  // Key tiles this block visits: up to the largest causal limit among its rows, within its split.
  const int last_row = min(m0 + kBlockM, p.packed_rows) - 1;
  const int n_end = key_limit(p, last_row);
  const int n_tiles = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;
  const int tile_begin = bc.split * p.tiles_per_split;
  const int tile_end = min(n_tiles, tile_begin + p.tiles_per_split);
  // Tiles entirely below every row's limit need no mask.
  const int unmasked_end = max(key_limit(p, m0), 0);

  const T* gK = static_cast<const T*>(p.k) + bc.batch * p.k_batch_stride + bc.kv_head * p.k_head_stride;
  const T* gV = static_cast<const T*>(p.v) + bc.batch * p.v_batch_stride + bc.kv_head * p.v_head_stride;

  // Per-thread rows: m tile mi, half h (0: row g, 1: row g + 8) of packed row m0 + warp_row0 + mi*16 + h*8 + g.
  int limit[kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) limit[mi][h] = key_limit(p, m0 + warp_row0 + mi * 16 + h * 8 + g);

  float o[kMTiles][kDTiles][4];  // O accumulator, C-fragment layout
  float row_max[kMTiles][2];     // running max of scaled scores, log2 units
  float row_sum[kMTiles][2];     // this thread's share of the running sum; quad-reduced at the end
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mi][dt][e] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }

  if (tile_begin < tile_end) {
    // Q tile (packed rows, zero-filled past the end) and the first K tile form one cp.async group.
    {
      constexpr int kSlots = Traits::kChunkSlotsPerRow;
      const T* gQ = static_cast<const T*>(p.q) + bc.batch * p.q_batch_stride;
      const int col = (threadIdx.x % kSlots) * 8;
      if (col < Traits::kHeadDim) {
#pragma unroll
        for (int i = 0; i < kBlockM * kSlots / Traits::kThreads; ++i) {
          const int row = threadIdx.x / kSlots + i * (Traits::kThreads / kSlots);
          const int r = m0 + row;
          const bool valid = r < p.packed_rows && col < p.head_dim;
          const T* src = gQ + packed_row_offset(p, bc.kv_head, r, p.q_head_stride, p.q_row_stride) + col;
          cp_async_16(sQ + row * kStride + col, valid ? src : gQ, valid);
        }
      }
    }
    {
      const int n0 = tile_begin * kBlockN;
      load_kv_tile<Traits>(sK, gK + n0 * p.k_row_stride, p.k_row_stride, p.seqlen_k - n0, p.head_dim);
      cp_async_commit();
      load_kv_tile<Traits>(sV, gV + n0 * p.v_row_stride, p.v_row_stride, p.seqlen_k - n0, p.head_dim);
      cp_async_commit();
    }

    uint32_t q_frag[Traits::kQInRegs ? kMTiles : 1][Traits::kQInRegs ? Traits::kKSteps : 1][4];

    for (int tile = tile_begin; tile < tile_end; ++tile) {
      const int n0 = tile * kBlockN;
      cp_async_wait<1>();  // K(tile) (and Q) landed; V(tile) may be in flight
      __syncthreads();

      if constexpr (Traits::kQInRegs) {
        if (tile == tile_begin) {
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
            for (int ks = 0; ks < Traits::kKSteps; ++ks)
              ldmatrix_x4(q_frag[mi][ks],
                          sQ + (warp_row0 + mi * 16 + lane % 16) * kStride + ks * 16 + (lane / 16) * 8);
        }
      }

      // S = Q K^T
      float s[kMTiles][kNTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][ni][e] = 0.f;
      if (warp_active) {
#pragma unroll
        for (int ks = 0; ks < Traits::kKSteps; ++ks) {
          uint32_t a[kMTiles][4];
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi) {
            if constexpr (Traits::kQInRegs) {
#pragma unroll
              for (int e = 0; e < 4; ++e) a[mi][e] = q_frag[mi][ks][e];
            } else {
              ldmatrix_x4(a[mi], sQ + (warp_row0 + mi * 16 + lane % 16) * kStride + ks * 16 + (lane / 16) * 8);
            }
          }
#pragma unroll
          for (int np = 0; np < kNTiles / 2; ++np) {
            uint32_t b[4];  // b0/b1 of n tile 2np, then of n tile 2np + 1
            ldmatrix_x4(b, sK + (np * 16 + (lane / 16) * 8 + lane % 8) * kStride + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
            for (int mi = 0; mi < kMTiles; ++mi) {
              Mma16816<T>::run(s[mi][2 * np], a[mi], b[0], b[1]);
              Mma16816<T>::run(s[mi][2 * np + 1], a[mi], b[2], b[3]);
            }
          }
        }
      }
      __syncthreads();  // every warp is done with sK
      if (tile + 1 < tile_end) {
        const int n1 = n0 + kBlockN;
        load_kv_tile<Traits>(sK, gK + n1 * p.k_row_stride, p.k_row_stride, p.seqlen_k - n1, p.head_dim);
      }
      cp_async_commit();

      // Online softmax in log2 units: scale, mask, update the running max, rescale O and the sum, P = exp2.
      // Head dims above 128 (64-row blocks, one m16 tile a warp) split each row's max and sum into 4 chains:
      // H100, bf16, prefill S = 512-16k, D = 256 +2-12 % TFLOP/s; at D = 32 (also one m16 tile a warp) 4-5 %
      // slower, at D = 64 and 128 no better (NOTES "s48 calls 2-3").
      constexpr int kChains = Traits::kHeadDim > 128 ? 4 : 1;
      if (warp_active) {
        const bool need_mask = n0 + kBlockN > unmasked_end;
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          online_softmax_step<kChains>(s[mi], o[mi], p.scale_log2, need_mask, n0 + 2 * t, limit[mi], row_max[mi],
                                       row_sum[mi]);
        }
      }

      cp_async_wait<1>();  // V(tile) landed; K(tile + 1) may be in flight
      __syncthreads();

      // O += P V, with P re-packed from the S accumulators straight into A fragments.
      if (warp_active) {
#pragma unroll
        for (int kk = 0; kk < Traits::kPSteps; ++kk) {
          uint32_t a[kMTiles][4];
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi) {
            a[mi][0] = pack2<T>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
            a[mi][1] = pack2<T>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
            a[mi][2] = pack2<T>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
            a[mi][3] = pack2<T>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
          }
#pragma unroll
          for (int dp = 0; dp < kDTiles / 2; ++dp) {
            uint32_t b[4];  // b0/b1 of d tile 2dp, then of d tile 2dp + 1
            ldmatrix_x4_trans(b, sV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kStride + dp * 16 + (lane / 16) * 8);
#pragma unroll
            for (int mi = 0; mi < kMTiles; ++mi) {
              Mma16816<T>::run(o[mi][2 * dp], a[mi], b[0], b[1]);
              Mma16816<T>::run(o[mi][2 * dp + 1], a[mi], b[2], b[3]);
            }
          }
        }
      }
      __syncthreads();  // every warp is done with sV
      if (tile + 1 < tile_end) {
        const int n1 = n0 + kBlockN;
        load_kv_tile<Traits>(sV, gV + n1 * p.v_row_stride, p.v_row_stride, p.seqlen_k - n1, p.head_dim);
      }
      cp_async_commit();
    }
  }

  // Epilogue: O / l and lse = m ln2 + ln l; a row that saw no key gets 0 and -inf.
  float inv_sum[kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mi][h];
      l += __shfl_xor_sync(0xffffffff, l, 1);
      l += __shfl_xor_sync(0xffffffff, l, 2);
      inv_sum[mi][h] = l == 0.f ? 0.f : 1.f / l;  // NaN inputs stay NaN
      const float lse = l == 0.f ? -INFINITY : row_max[mi][h] * kLn2 + logf(l);
      const int r = m0 + warp_row0 + mi * 16 + h * 8 + g;
      if (t == 0 && r < p.packed_rows) {
        const int64_t idx = lse_index(p, bc.batch, bc.kv_head, r);
        if (p.num_splits > 1) {
          p.lse_accum[(int64_t)bc.split * p.batch * p.heads_q * p.seqlen_q + idx] = lse;
        } else {
          p.lse[idx] = lse;
        }
      }
    }

  if (p.num_splits > 1) {
    // Partial results in fp32, contiguous (split, B, Hq, Sq, D); merged by merge_attention_kernel.
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + warp_row0 + mi * 16 + h * 8 + g;
        if (r >= p.packed_rows) continue;
        float* dst = p.out_accum +
                     ((int64_t)bc.split * p.batch * p.heads_q * p.seqlen_q + lse_index(p, bc.batch, bc.kv_head, r)) *
                         p.head_dim;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          const int col = dt * 8 + 2 * t;
          if (col < p.head_dim) {
            *reinterpret_cast<float2*>(dst + col) =
                make_float2(o[mi][dt][2 * h] * inv_sum[mi][h], o[mi][dt][2 * h + 1] * inv_sum[mi][h]);
          }
        }
      }
    return;
  }

  // Stage this warp's rows of O through its own rows of sQ (no other warp reads them), then write
  // 16-byte chunks per row.
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int row = warp_row0 + mi * 16 + h * 8 + g;
        *reinterpret_cast<uint32_t*>(sQ + row * kStride + dt * 8 + 2 * t) =
            pack2<T>(o[mi][dt][2 * h] * inv_sum[mi][h], o[mi][dt][2 * h + 1] * inv_sum[mi][h]);
      }
  __syncwarp();
  T* gO = static_cast<T*>(p.out) + bc.batch * p.o_batch_stride;
  constexpr int kWarpChunks = Traits::kWarpRows * Traits::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kWarpChunks / 32; ++i) {
    const int c = lane + i * 32;
    const int row = warp_row0 + c / Traits::kChunksPerRow;
    const int col = (c % Traits::kChunksPerRow) * 8;
    const int r = m0 + row;
    if (r < p.packed_rows && col < p.head_dim) {
      T* dst = gO + packed_row_offset(p, bc.kv_head, r, p.o_head_stride, p.o_row_stride) + col;
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(sQ + row * kStride + col);
    }
  }
}

}  // namespace attention_fwd
}  // namespace flash_attn_ext
