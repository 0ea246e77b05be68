// Exact merge of attention partials over disjoint key blocks (the online-softmax block rule). Used by
// merge_attention and to combine split-KV partials of the forward.
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/attention_fwd_api.h"
#include "common/cuda_check.h"

namespace flash_attn_ext {
namespace {

constexpr int kMergeWarps = 8;

// Shape: one warp per output row (b, h, s); lanes stride over D. lse = m + log(sum_i exp(lse_i - m)) with
// m = max_i lse_i; partials whose lse is -inf are skipped (their out may be anything); a row with no
// finite partial gets out 0 and lse -inf.
template <typename TIn, typename TOut>
__global__ void __launch_bounds__(32 * kMergeWarps) merge_attention_kernel(const MergeParams p) {
  const int64_t row = (int64_t)blockIdx.x * kMergeWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.rows) return;
  const TIn* outs = static_cast<const TIn*>(p.outs);

  float m = -INFINITY;
  for (int i = lane; i < p.splits; i += 32) m = fmaxf(m, p.lses[i * p.rows + row]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  float sum = 0.f;
  for (int i = lane; i < p.splits; i += 32) {
    const float l = p.lses[i * p.rows + row];
    sum += l == -INFINITY ? 0.f : expf(l - m);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffff, sum, off);
  const float inv = sum == 0.f ? 0.f : 1.f / sum;

  const int64_t s = row % p.seqlen, bh = row / p.seqlen;
  TOut* dst = static_cast<TOut*>(p.out) + (bh / p.heads) * p.o_batch_stride + (bh % p.heads) * p.o_head_stride +
              s * p.o_row_stride;
  for (int d = lane; d < p.head_dim; d += 32) {
    float acc = 0.f;
    for (int i = 0; i < p.splits; ++i) {
      const float l = p.lses[i * p.rows + row];
      if (l != -INFINITY) acc += expf(l - m) * static_cast<float>(outs[(i * p.rows + row) * p.head_dim + d]);
    }
    dst[d] = static_cast<TOut>(acc * inv);
  }
  if (lane == 0) p.lse[row] = sum == 0.f ? -INFINITY : m + logf(sum);
}

template <typename TIn>
void launch_merge(const MergeParams& p, int out_dtype, cudaStream_t stream) {
  const int64_t blocks = (p.rows + kMergeWarps - 1) / kMergeWarps;
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.merge_attention: too many rows (", p.rows, ")");
  const dim3 grid(static_cast<unsigned>(blocks)), block(32 * kMergeWarps);
  switch (out_dtype) {
    case 0: merge_attention_kernel<TIn, float><<<grid, block, 0, stream>>>(p); break;
    case 1: merge_attention_kernel<TIn, __half><<<grid, block, 0, stream>>>(p); break;
    case 2: merge_attention_kernel<TIn, __nv_bfloat16><<<grid, block, 0, stream>>>(p); break;
    default: TORCH_CHECK(false, "flash_attn_ext: unsupported merge output dtype code ", out_dtype);
  }
  FAE_LAUNCH_CHECK();
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
