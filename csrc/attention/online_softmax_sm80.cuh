#pragma once
// The online-softmax step of the mma.sync attention kernels (prefill and decode), on the score tile of one
// m16 row tile as it sits in mma.sync C fragments (mma_sm80.cuh): a thread holds rows g (h = 0, elements
// 0-1 of each n8 tile) and g + 8 (h = 1, elements 2-3), columns 2t and 2t + 1 of each n8 tile.
#include <cmath>

#include "attention/mma_sm80.cuh"

namespace flash_attn_ext {

// Scales the scores to log2 units, masks keys at or past each row's limit (only when need_mask; the key of
// column 2t + e of n8 tile ni is key0 + ni * 8 + e, key0 = the tile's first key + 2t), moves the running max,
// replaces the scores by exp2(score - max), and rescales the running sum (this thread's share) and the O
// accumulators by exp2(old max - new max). Both rows run in one loop, and the max and the sum of each row in
// kChains independent chains (score c = 2 ni + e feeds chain c % kChains), merged at the end. One chain sums
// in column order, as this step always did; more chains change the rounding of the sum, never the max.
template <int kChains, int kNTiles, int kDTiles>
__device__ __forceinline__ void online_softmax_step(float (&s)[kNTiles][4], float (&o)[kDTiles][4], float scale_log2,
                                                    bool need_mask, int key0, const int (&limit)[2],
                                                    float (&row_max)[2], float (&row_sum)[2]) {
  static_assert(kChains >= 1 && (2 * kNTiles) % kChains == 0, "each chain takes the same number of scores");
  float mx[2][kChains];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int c = 0; c < kChains; ++c) mx[h][c] = -INFINITY;
#pragma unroll
  for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float x = s[ni][2 * h + e] * scale_log2;
        if (need_mask && key0 + ni * 8 + e >= limit[h]) x = -INFINITY;
        s[ni][2 * h + e] = x;
        mx[h][(2 * ni + e) % kChains] = fmaxf(mx[h][(2 * ni + e) % kChains], x);
      }
  float m_use[2], alpha[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int c = 1; c < kChains; ++c) mx[h][0] = fmaxf(mx[h][0], mx[h][c]);
    mx[h][0] = fmaxf(mx[h][0], __shfl_xor_sync(0xffffffff, mx[h][0], 1));
    mx[h][0] = fmaxf(mx[h][0], __shfl_xor_sync(0xffffffff, mx[h][0], 2));
    const float m_new = fmaxf(row_max[h], mx[h][0]);
    // A row that has seen only masked keys keeps m = -inf; exponentiate against 0 so that exp2(-inf - m) is
    // 0 rather than NaN.
    m_use[h] = m_new == -INFINITY ? 0.f : m_new;
    alpha[h] = fast_exp2(row_max[h] - m_use[h]);
    row_max[h] = m_new;
  }
  float sum[2][kChains] = {};
#pragma unroll
  for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float pr = fast_exp2(s[ni][2 * h + e] - m_use[h]);
        s[ni][2 * h + e] = pr;
        sum[h][(2 * ni + e) % kChains] += pr;
      }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int c = 1; c < kChains; ++c) sum[h][0] += sum[h][c];
    row_sum[h] = row_sum[h] * alpha[h] + sum[h][0];
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o[dt][2 * h] *= alpha[h];
      o[dt][2 * h + 1] *= alpha[h];
    }
  }
}

}  // namespace flash_attn_ext
