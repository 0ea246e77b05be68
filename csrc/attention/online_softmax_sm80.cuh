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
// accumulators by exp2(old max - new max).
template <int kNTiles, int kDTiles>
__device__ __forceinline__ void online_softmax_step(float (&s)[kNTiles][4], float (&o)[kDTiles][4], float scale_log2,
                                                    bool need_mask, int key0, const int (&limit)[2],
                                                    float (&row_max)[2], float (&row_sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = s[ni][2 * h + e] * scale_log2;
        if (need_mask && key0 + ni * 8 + e >= limit[h]) x = -INFINITY;
        s[ni][2 * h + e] = x;
        mx = fmaxf(mx, x);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    const float m_new = fmaxf(row_max[h], mx);
    // A row that has seen only masked keys keeps m = -inf; exponentiate against 0 so that exp2(-inf - m) is
    // 0 rather than NaN.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = fast_exp2(row_max[h] - m_use);
    row_max[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pr = fast_exp2(s[ni][2 * h + e] - m_use);
        s[ni][2 * h + e] = pr;
        sum += pr;
      }
    row_sum[h] = row_sum[h] * alpha + sum;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o[dt][2 * h] *= alpha;
      o[dt][2 * h + 1] *= alpha;
    }
  }
}

}  // namespace flash_attn_ext
