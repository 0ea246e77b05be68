#pragma once
// FlashAttention forward on Hopper tensor cores (wgmma, sm_90a) for fp16 and bf16. Same block grid, GQA
// row packing, causal limits and numerics as the mma.sync kernel (attention_fwd_kernel.cuh); what changes
// is the MMA: each warpgroup issues m64 x kBlockN x 16 (S = Q K^T, both operands from shared memory) and
// m64 x kHeadDim x 16 (O += P V, P from registers) instructions, which read their operands straight from
// shared memory instead of through ldmatrix into every warp.
#include <cmath>

#include "attention/attention_params.h"
#include "attention/attention_sm90_traits.cuh"
#include "attention/attention_tile_coords.cuh"
#include "attention/mma_sm80.cuh"
#include "attention/wgmma_sm90.cuh"
#include "attention/wgmma_sm90_ops.cuh"

namespace flash_attn_ext {
namespace attention_fwd_sm90 {

using attention_fwd::BlockCoords;
using attention_fwd::block_coords;
using attention_fwd::key_limit;
using attention_fwd::lse_index;
using attention_fwd::packed_row_offset;

// Copies kRows rows of a row-major matrix (unit column stride) into the 128-byte-swizzled layout of
// wgmma_sm90.cuh. Rows >= rows_valid and columns >= head_dim are zero-filled: zero keys add nothing to
// Q K^T (and are masked), zero values multiply zero probabilities. Thread i writes smem bytes 16 i, i.e.
// atom i / (8 kRows), row (i / 8) % kRows, position i % 8, which holds chunk (i % 8) ^ (row % 8) of that
// atom; a warp reads 4 whole 128-byte row segments.
template <typename Traits, int kRows>
__device__ __forceinline__ void load_tile(unsigned char* smem, const typename Traits::T* gmem, int64_t row_stride,
                                          int rows_valid, int head_dim) {
  constexpr int kPerThread = kRows * Traits::kChunksPerRow / Traits::kThreads;
#pragma unroll
  for (int it = 0; it < kPerThread; ++it) {
    const int i = threadIdx.x + it * Traits::kThreads;
    const int row = (i / 8) % kRows;
    const int col = ((i / (8 * kRows)) * 8 + ((i % 8) ^ (row % 8))) * 8;
    const bool valid = row < rows_valid && col < head_dim;
    cp_async_16(smem + i * 16, valid ? gmem + row * row_stride + col : gmem, valid);
  }
}

// Q rows are packed (row r = query r / group of head kv_head * group + r % group), so each chunk has its
// own address; same smem order as load_tile.
template <typename Traits>
__device__ __forceinline__ void load_q(unsigned char* smem, const AttentionParams& p, const BlockCoords& bc, int m0) {
  using T = typename Traits::T;
  constexpr int kRows = Traits::kBlockM;
  const T* gQ = static_cast<const T*>(p.q) + bc.batch * p.q_batch_stride;
#pragma unroll
  for (int it = 0; it < kRows * Traits::kChunksPerRow / Traits::kThreads; ++it) {
    const int i = threadIdx.x + it * Traits::kThreads;
    const int row = (i / 8) % kRows;
    const int col = ((i / (8 * kRows)) * 8 + ((i % 8) ^ (row % 8))) * 8;
    const int r = m0 + row;
    const bool valid = r < p.packed_rows && col < p.head_dim;
    const T* src = valid ? gQ + packed_row_offset(p, bc.kv_head, r, p.q_head_stride, p.q_row_stride) + col : gQ;
    cp_async_16(smem + i * 16, src, valid);
  }
}

// Shape: one block of 2 warpgroups per (m block of kBlockM = 128 packed query rows, batch, kv head); warpgroup
// w owns rows 64w..64w+63 and, inside it, warp v rows 16v..16v+15 (thread: rows 16v + lane/4 and + 8, as in
// the mma.sync C layout). All threads stream K and V tiles through two rings of kStages shared-memory tiles
// with cp.async; each warpgroup computes S = Q K^T for its rows, the online softmax in registers, and
// O += P V, overlapping the softmax of one tile with the P V of the previous one.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) attention_fwd_sm90_kernel(const AttentionParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Traits::T;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // swizzle atoms: 1024-aligned
  unsigned char* sQ = smem;                                   // (kBlockM, kHeadDim)
  unsigned char* sK = sQ + Traits::kQBytes;                   // ring of kStages (kBlockN, kHeadDim) K tiles
  unsigned char* sV = sK + kStages * Traits::kTileBytes;      // ring of kStages (kBlockN, kHeadDim) V tiles

  const int m_blocks = (p.packed_rows + kBlockM - 1) / kBlockM;
  const BlockCoords bc = block_coords(p, m_blocks);
  const int m0 = bc.m_block * kBlockM;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int wg_row0 = m0 + 64 * wg;

  // Key tiles: up to the largest causal limit of the block's rows. Both warpgroups run every tile: a wgmma
  // under a branch the compiler cannot prove warpgroup-uniform gets serialized (ptxas C7520), which costs
  // far more than the at most one fully masked tile the first warpgroup computes. Each warpgroup masks
  // only tiles that cross the limit of its first row.
  const int n_end = key_limit(p, min(m0 + kBlockM, p.packed_rows) - 1);
  const int n_tiles = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;
  const int wg_unmasked_end = max(key_limit(p, wg_row0), 0);
  const int row0 = wg_row0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8
  const int limit[2] = {key_limit(p, row0), key_limit(p, row0 + 8)};

  float o[kHeadDim / 2];  // O accumulator (wgmma accumulator layout)
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of scaled scores, log2 units
  float row_sum[2] = {0.f, 0.f};              // this thread's share of the running sum; quad-reduced at the end
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;

  const T* gK = static_cast<const T*>(p.k) + bc.batch * p.k_batch_stride + bc.kv_head * p.k_head_stride;
  const T* gV = static_cast<const T*>(p.v) + bc.batch * p.v_batch_stride + bc.kv_head * p.v_head_stride;
  auto load_k = [&](int tile) {
    if (tile >= n_tiles) return;
    const int n0 = tile * kBlockN;
    load_tile<Traits, kBlockN>(sK + (tile % kStages) * Traits::kTileBytes, gK + n0 * p.k_row_stride,
                               p.k_row_stride, p.seqlen_k - n0, p.head_dim);
  };
  auto load_v = [&](int tile) {
    if (tile < 0 || tile >= n_tiles) return;
    const int n0 = tile * kBlockN;
    load_tile<Traits, kBlockN>(sV + (tile % kStages) * Traits::kTileBytes, gV + n0 * p.v_row_stride,
                               p.v_row_stride, p.seqlen_k - n0, p.head_dim);
  };

  // Software pipeline: iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} together, then computes the
  // softmax of S_j while the tensor cores run P_{j-1} V_{j-1}; O is rescaled once that MMA is done. So
  // iteration j reads K_j and V_{j-1}, and its one cp.async group brings K_{j+kStages-1} and V_{j+kStages-2}
  // into the stages of K_{j-1} and V_{j-2}, which every warpgroup finished in iteration j - 1.
  if (n_tiles > 0) {
    load_q<Traits>(sQ, p, bc, m0);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {  // the groups of iterations i - (kStages - 1)
      load_k(i);
      load_v(i - 1);
      cp_async_commit();
    }
    // This warpgroup's 64 rows of Q start 64 * 128 bytes into each atom.
    const uint64_t q_desc = sm90::smem_desc_sw128(smem_addr(sQ) + wg * 64 * 128, 16, 1024);
    uint32_t a[Traits::kPSteps][4];  // P_{j-1}: A operand of O += P V, in the mma.sync A layout

    // Each step begins the same way: this thread's copies of K_tile and V_{tile-1} landed, made visible to
    // wgmma, and (barrier) everyone's landed and everyone is done with the previous step; then the copies
    // for later tiles go out.
    auto begin_step = [&](int tile) {
      cp_async_wait<kStages - 2>();
      sm90::fence_async_proxy();
      __syncthreads();
      load_k(tile + kStages - 1);
      load_v(tile + kStages - 2);
      cp_async_commit();
    };
    auto issue_s = [&](float (&s)[kBlockN / 2], int tile) {  // S = Q K^T
      const uint64_t k_desc = sm90::smem_desc_sw128(smem_addr(sK + (tile % kStages) * Traits::kTileBytes), 16, 1024);
#pragma unroll
      for (int ks = 0; ks < Traits::kKSteps; ++ks) {  // k16 step ks: atom ks / 4, 32 bytes per step inside it
        sm90::Wgmma<T, kBlockN>::ss(s, sm90::desc_advance(q_desc, (ks / 4) * kBlockM * 128 + (ks % 4) * 32),
                                    sm90::desc_advance(k_desc, (ks / 4) * kBlockN * 128 + (ks % 4) * 32), ks > 0);
      }
      sm90::warpgroup_commit();
    };
    auto issue_pv = [&](int tile) {  // O += P V
      const uint64_t v_desc =
          sm90::smem_desc_sw128(smem_addr(sV + (tile % kStages) * Traits::kTileBytes), kBlockN * 128, 1024);
#pragma unroll
      for (int kk = 0; kk < Traits::kPSteps; ++kk) {
        sm90::Wgmma<T, kHeadDim>::rs(o, a[kk], sm90::desc_advance(v_desc, kk * 2048), true);  // 16 keys per step
      }
      sm90::warpgroup_commit();
    };
    // Online softmax of S_tile in log2 units: scale, mask, update the running max and sum, S <- P = exp2;
    // alpha: the factor O must be rescaled by, once no P V is in flight.
    auto softmax = [&](float (&s)[kBlockN / 2], int tile, float (&alpha)[2]) {
      const int n0 = tile * kBlockN;
      const bool need_mask = n0 + kBlockN > wg_unmasked_end;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float x = s[4 * j + 2 * h + e] * p.scale_log2;
            if (need_mask && n0 + 8 * j + 2 * t + e >= limit[h]) x = -INFINITY;
            s[4 * j + 2 * h + e] = x;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float m_new = fmaxf(row_max[h], mx);
        // A row that has seen only masked keys keeps m = -inf; exponentiate against 0 so that
        // exp2(-inf - m) is 0 rather than NaN.
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        alpha[h] = fast_exp2(row_max[h] - m_use);
        row_max[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pr = fast_exp2(s[4 * j + 2 * h + e] - m_use);
            s[4 * j + 2 * h + e] = pr;
            sum += pr;
          }
        row_sum[h] = row_sum[h] * alpha[h] + sum;
      }
    };
    // After the step's MMAs: O *= alpha, and P (fp32 in s) packed into the A operand of the next P V.
    auto rescale_and_pack = [&](const float (&s)[kBlockN / 2], const float (&alpha)[2]) {
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        o[4 * j] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
      }
#pragma unroll
      for (int kk = 0; kk < Traits::kPSteps; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) a[kk][e] = pack2<T>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
    };

    {  // step 0: S_0 alone
      float s[kBlockN / 2], alpha[2];
      begin_step(0);
      sm90::warpgroup_fence();
      issue_s(s, 0);
      sm90::warpgroup_wait<0>();
      softmax(s, 0, alpha);
      rescale_and_pack(s, alpha);
    }
    for (int tile = 1; tile < n_tiles; ++tile) {  // S_tile, and P V of tile - 1 under its softmax
      float s[kBlockN / 2], alpha[2];
      begin_step(tile);
      sm90::warpgroup_fence();
      issue_s(s, tile);
      issue_pv(tile - 1);
      sm90::warpgroup_wait<1>();  // S done; P V may still run
      softmax(s, tile, alpha);
      sm90::warpgroup_wait<0>();  // P V done: O and the registers of P are free
      rescale_and_pack(s, alpha);
    }
    {  // last step: P V of the last tile
      begin_step(n_tiles);
      sm90::warpgroup_fence();
      issue_pv(n_tiles - 1);
      sm90::warpgroup_wait<0>();
    }
  }

  // Epilogue: O / l and lse = m ln2 + ln l; a row that saw no key gets 0 and -inf.
  float inv_sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum[h];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    inv_sum[h] = l == 0.f ? 0.f : 1.f / l;  // NaN inputs stay NaN
    const int r = row0 + 8 * h;
    if (t == 0 && r < p.packed_rows) {
      p.lse[lse_index(p, bc.batch, bc.kv_head, r)] = l == 0.f ? -INFINITY : row_max[h] * attention_fwd::kLn2 + logf(l);
    }
  }

  // Stage this warp's 16 rows of O through its own rows of sQ (swizzled: no bank conflicts either way; no
  // other warp reads them, and every wgmma reading them has completed), then write 16-byte chunks.
  const int warp_row = 64 * wg + 16 * warp;  // first row of this warp within the block
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      *reinterpret_cast<uint32_t*>(sQ + sm90::sw128_offset(kBlockM, warp_row + g + 8 * h, j) + t * 4) =
          pack2<T>(o[4 * j + 2 * h] * inv_sum[h], o[4 * j + 2 * h + 1] * inv_sum[h]);
    }
  __syncwarp();
  T* gO = static_cast<T*>(p.out) + bc.batch * p.o_batch_stride;
#pragma unroll
  for (int it = 0; it < Traits::kAtoms * 4; ++it) {
    const int i = lane + 32 * it;              // atom i / 128, row (i / 8) % 16 of the warp, position i % 8
    const int row = warp_row + (i / 8) % 16;
    const int col = ((i / 128) * 8 + ((i % 8) ^ (row % 8))) * 8;
    const int r = m0 + row;
    if (r < p.packed_rows && col < p.head_dim) {
      T* dst = gO + packed_row_offset(p, bc.kv_head, r, p.o_head_stride, p.o_row_stride) + col;
      *reinterpret_cast<uint4*>(dst) =
          *reinterpret_cast<const uint4*>(sQ + (i / 128) * kBlockM * 128 + row * 128 + (i % 8) * 16);
    }
  }
#endif
}

}  // namespace attention_fwd_sm90
}  // namespace flash_attn_ext
