#pragma once
// Where a thread block of a tensor-core attention forward sits in the problem, and which keys a packed
// query row may see. Shared by the sm80 (mma.sync) and sm90 (wgmma) kernels so both walk the grid, pack
// GQA heads and apply the causal limit identically.
#include "attention/attention_params.h"

namespace flash_attn_ext {
namespace attention_fwd {

constexpr float kLn2 = 0.693147180559945309f;

// Shape: one work item per (m block of block_m packed query rows, split, batch, kv head); the item id (the
// block index, or a persistent block's running item) enumerates them with the m block fastest, so items
// that read the same K/V run side by side and share L2.
struct BlockCoords {
  int m_block, split, batch, kv_head;
};

template <typename Id>
__device__ __forceinline__ BlockCoords block_coords_as(const AttentionParams& p, int m_blocks, Id id) {
  BlockCoords c;
  // Heaviest causal tiles (the last query rows see the most keys) start first, so the tail is short.
  c.m_block = m_blocks - 1 - static_cast<int>(id % Id(m_blocks));
  id /= Id(m_blocks);
  c.split = static_cast<int>(id % Id(p.num_splits));
  id /= Id(p.num_splits);
  c.kv_head = static_cast<int>(id % Id(p.heads_kv));
  c.batch = static_cast<int>(id / Id(p.heads_kv));
  return c;
}

// The same by multiply-high divisions (FastDivmod) where the id is below 2^31, with no split (the Hopper kernel
// never splits keys); otherwise 64-bit divisions, a subroutine call of ~100 dependent instructions each. A
// persistent block decodes every item it takes. Per-block traces (H100, head dim 64, S = 512): the changeover
// between two items, epilogue included, took 4617 cycles with 64-bit decoding, 4356 with 32-bit divisions, 3631
// once packed_position below dropped the row divisions too (an item's whole loop: ~10000 cycles).
__device__ __forceinline__ BlockCoords block_coords(const AttentionParams& p, const FastDivmod& m_blocks,
                                                    long long id) {
  if (id >= 0x80000000LL || p.num_splits != 1) {
    return block_coords_as(p, static_cast<int>(m_blocks.divisor), static_cast<unsigned long long>(id));
  }
  uint32_t m_rem, kv_head;
  const uint32_t head = m_blocks.divmod(static_cast<uint32_t>(id), m_rem);
  BlockCoords c;
  c.m_block = static_cast<int>(m_blocks.divisor - 1 - m_rem);
  c.split = 0;
  c.batch = static_cast<int>(p.heads_kv_div.divmod(head, kv_head));
  c.kv_head = static_cast<int>(kv_head);
  return c;
}

// One-item launches (the mma.sync and decode kernels): the block's index, decoded once per block.
__device__ __forceinline__ BlockCoords block_coords(const AttentionParams& p, int m_blocks) {
  return block_coords_as(p, m_blocks, blockIdx.x);
}

// Query position of packed row r (0 <= r < 2^31), r / group, by a multiply-high: every item decodes a few rows
// (causal limits) and its epilogue one row per lse value and 16-byte chunk it writes.
__device__ __forceinline__ int packed_position(const AttentionParams& p, int r) {
  return static_cast<int>(p.group_div.div(static_cast<uint32_t>(r)));
}

// Number of keys packed row `r` may see: Sk, or its bottom-right causal limit (can be <= 0).
__device__ __forceinline__ int key_limit(const AttentionParams& p, int r) {
  const int s = packed_position(p, r);
  return p.causal ? min(p.seqlen_k, s + p.seqlen_k - p.seqlen_q + 1) : p.seqlen_k;
}

// Offset (elements) of packed row r of query/output head group `kv_head`: query position r / group of
// head kv_head * group + r % group, within one batch.
__device__ __forceinline__ int64_t packed_row_offset(const AttentionParams& p, int kv_head, int r,
                                                     int64_t head_stride, int64_t row_stride) {
  const int s = packed_position(p, r);
  return (int64_t)(kv_head * p.group + r - s * p.group) * head_stride + (int64_t)s * row_stride;
}

// Index of packed row r in the contiguous (B, Hq, Sq) lse.
__device__ __forceinline__ int64_t lse_index(const AttentionParams& p, int batch, int kv_head, int r) {
  const int s = packed_position(p, r);
  const int64_t head = (int64_t)batch * p.heads_q + kv_head * p.group + r - s * p.group;
  return head * p.seqlen_q + s;
}

}  // namespace attention_fwd
}  // namespace flash_attn_ext
