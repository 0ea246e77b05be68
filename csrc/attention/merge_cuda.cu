// Exact merge of attention partials over disjoint key blocks (the online-softmax block rule). Used by
// merge_attention and to combine split-KV partials of the forward.
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/attention_fwd_api.h"
#include "common/cuda_check.h"
#include "common/grid_dependency.cuh"
#include "common/kernel_launch.h"

namespace flash_attn_ext {
namespace {

constexpr int kMergeWarps = 8;

// Shape: one warp per output row (b, h, s); lanes stride over D. lse = m + log(sum_i exp(lse_i - m)) with
// m = max_i lse_i; partials whose lse is -inf are skipped (their out may be anything); a row with no
// finite partial gets out 0 and lse -inf.
template <typename TIn, typename TOut>
__global__ void __launch_bounds__(32 * kMergeWarps) merge_attention_kernel(const MergeParams p) {
  begin_dependent_grid();
  const int64_t row = (int64_t)blockIdx.x * kMergeWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.rows) return;
  const int splits = p.splits;
  const TIn* outs = static_cast<const TIn*>(p.outs);

  float m = -INFINITY;
  for (int i = lane; i < splits; i += 32) m = fmaxf(m, p.lses[i * p.rows + row]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  float sum = 0.f;
  for (int i = lane; i < splits; i += 32) {
    const float l = p.lses[i * p.rows + row];
    sum += l == -INFINITY ? 0.f : expf(l - m);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffff, sum, off);
  const float inv = sum == 0.f ? 0.f : 1.f / sum;

  const int64_t s = row % p.seqlen, bh = row / p.seqlen;
  TOut* dst = static_cast<TOut*>(p.out) + (bh / p.heads) * p.o_batch_stride + (bh % p.heads) * p.o_head_stride +
              s * p.o_row_stride;
  // Weight of partial `base + lane` held by that lane (0 for skipped partials, whose out is not read), so the
  // column loop below takes each weight by a shuffle instead of an exp per column.
  auto lane_weight = [&](int base) {
    const int i = base + lane;
    const float l = i < splits ? p.lses[i * p.rows + row] : -INFINITY;
    return l == -INFINITY ? 0.f : expf(l - m) * inv;
  };
  // Columns in runs of kVec per lane (16-byte loads of fp32 partials), so a warp reads whole 512-byte rows
  // of each partial; partials in batches of kBatch whose loads are all issued before the first is used (a
  // loop that uses each load before issuing the next waits out one L2 round trip per partial).
  constexpr int kVec = sizeof(TIn) == 4 ? 4 : 1;
  constexpr int kBatch = 8;
  const bool vector = kVec > 1 && p.head_dim % kVec == 0 && reinterpret_cast<uintptr_t>(outs) % 16 == 0;
  const int step = vector ? kVec : 1;
  for (int d0 = 0; d0 < p.head_dim; d0 += 32 * step) {  // a uniform trip count: the loop shuffles
    const int d = d0 + lane * step;
    const bool active = d < p.head_dim;
    float acc[kVec] = {};
    for (int base = 0; base < splits; base += 32) {
      const float w_lane = lane_weight(base);
      for (int j0 = 0; j0 < 32 && base + j0 < splits; j0 += kBatch) {
        float w[kBatch];
        float x[kBatch][kVec] = {};  // the scalar path fills column 0 only
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int j = j0 + u;
          w[u] = __shfl_sync(0xffffffff, w_lane, j);  // 0 past the last partial (lane_weight)
          const TIn* src = outs + ((base + j) * p.rows + row) * p.head_dim + d;
          const bool load = active && w[u] != 0.f;
          if (vector) {
            const float4 v = load ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
            x[u][0] = v.x;
            if constexpr (kVec == 4) x[u][1] = v.y, x[u][2] = v.z, x[u][3] = v.w;
          } else {
            x[u][0] = load ? static_cast<float>(*src) : 0.f;
          }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[e] += w[u] * x[u][e];
      }
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      if (active && e < step) dst[d + e] = static_cast<TOut>(acc[e]);
  }
  if (lane == 0) p.lse[row] = sum == 0.f ? -INFINITY : m + logf(sum);
}

template <typename TIn>
void launch_merge(const MergeParams& p, int out_dtype, cudaStream_t stream) {
  const int64_t blocks = (p.rows + kMergeWarps - 1) / kMergeWarps;
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.merge_attention: too many rows (", p.rows, ")");
  const dim3 grid(static_cast<unsigned>(blocks)), block(32 * kMergeWarps);
  void (*kernel)(MergeParams) = nullptr;
  switch (out_dtype) {
    case 0: kernel = merge_attention_kernel<TIn, float>; break;
    case 1: kernel = merge_attention_kernel<TIn, __half>; break;
    case 2: kernel = merge_attention_kernel<TIn, __nv_bfloat16>; break;
    default: TORCH_CHECK(false, "flash_attn_ext: unsupported merge output dtype code ", out_dtype);
  }
  launch_kernel(kernel, grid, block, 0, stream, LaunchKind::Plain, p);
}

}  // namespace

void run_merge_attention(const MergeParams& p, int in_dtype, int out_dtype, cudaStream_t stream) {
  if (p.rows == 0) return;
  switch (in_dtype) {
    case 0: launch_merge<float>(p, out_dtype, stream); break;
    case 1: launch_merge<__half>(p, out_dtype, stream); break;
    case 2: launch_merge<__nv_bfloat16>(p, out_dtype, stream); break;
    default: TORCH_CHECK(false, "flash_attn_ext: unsupported merge input dtype code ", in_dtype);
  }
}

}  // namespace flash_attn_ext
