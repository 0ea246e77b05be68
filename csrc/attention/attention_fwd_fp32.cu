// Attention forward for float32 inputs with float32 arithmetic throughout (FMA on the CUDA cores, no
// tf32), so results stay within ~1e-6 of an fp64 reference. Same online-softmax algorithm, row packing and
// causal convention as the tensor-core kernel; speed is secondary.
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <climits>

#include "attention/attention_fwd_api.h"
#include "common/cuda_check.h"
#include "common/grid_dependency.cuh"
#include "common/kernel_launch.h"

namespace flash_attn_ext {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // packed query rows per block
constexpr int kBlockKeys = 32;                     // one key per lane
constexpr int kMaxDChunks = 8;                     // head dim <= 8 * 32

// Shape: one block per (32 packed query rows, batch, kv head); warp w owns rows 4w..4w+3. For each tile of
// 32 keys, lane j computes the 4 scores of key j against its warp's rows, the warp reduces the running max,
// and lane l then accumulates O[row][l + 32c] from V in smem with p_j broadcast by shuffle.
__global__ void __launch_bounds__(32 * kWarps) attention_fwd_fp32_kernel(const AttentionParams p) {
  begin_dependent_grid();
  extern __shared__ float smem[];
  const int d_pad = (p.head_dim + 31) / 32 * 32;
  float* sQ = smem;                         // (kBlockRows, d_pad)
  float* sK = sQ + kBlockRows * d_pad;      // (kBlockKeys, d_pad + 1): odd stride, lane-per-row reads
  float* sV = sK + kBlockKeys * (d_pad + 1);  // (kBlockKeys, d_pad)

  const int m_blocks = (p.packed_rows + kBlockRows - 1) / kBlockRows;
  const int m_block = m_blocks - 1 - static_cast<int>(blockIdx.x % m_blocks);
  const int64_t bh = blockIdx.x / m_blocks;
  const int kv_head = static_cast<int>(bh % p.heads_kv), batch = static_cast<int>(bh / p.heads_kv);
  const int m0 = m_block * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* gK = static_cast<const float*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const float* gV = static_cast<const float*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;

  for (int i = threadIdx.x; i < kBlockRows * d_pad; i += blockDim.x) {
    const int row = i / d_pad, col = i % d_pad, r = m0 + row;
    float x = 0.f;
    if (r < p.packed_rows && col < p.head_dim) {
      x = static_cast<const float*>(p.q)[batch * p.q_batch_stride +
                                         (int64_t)(kv_head * p.group + r % p.group) * p.q_head_stride +
                                         (int64_t)(r / p.group) * p.q_row_stride + col];
    }
    sQ[i] = x;
  }

  int limit[kRowsPerWarp];
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp], o[kRowsPerWarp][kMaxDChunks];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int s = (m0 + warp * kRowsPerWarp + i) / p.group;
    limit[i] = p.causal ? min(p.seqlen_k, s + p.seqlen_k - p.seqlen_q + 1) : p.seqlen_k;
    row_max[i] = -INFINITY;
    row_sum[i] = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxDChunks; ++c) o[i][c] = 0.f;
  }
  const int last_row = min(m0 + kBlockRows, p.packed_rows) - 1;
  const int n_end = p.causal ? min(p.seqlen_k, last_row / p.group + p.seqlen_k - p.seqlen_q + 1) : p.seqlen_k;

  for (int n0 = 0; n0 < n_end; n0 += kBlockKeys) {
    __syncthreads();  // previous tile fully consumed (and sQ written, on the first pass)
    for (int i = threadIdx.x; i < kBlockKeys * d_pad; i += blockDim.x) {
      const int row = i / d_pad, col = i % d_pad, n = n0 + row;
      const bool valid = n < p.seqlen_k && col < p.head_dim;
      sK[row * (d_pad + 1) + col] = valid ? gK[n * p.k_row_stride + col] : 0.f;
      sV[row * d_pad + col] = valid ? gV[n * p.v_row_stride + col] : 0.f;
    }
    __syncthreads();

    float s[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) s[i] = 0.f;
    for (int d = 0; d < d_pad; ++d) {
      const float kd = sK[lane * (d_pad + 1) + d];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) s[i] = fmaf(sQ[(warp * kRowsPerWarp + i) * d_pad + d], kd, s[i]);
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      float x = n0 + lane < limit[i] ? s[i] * p.scale_log2 : -INFINITY;
      float mx = x;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, off));
      const float m_new = fmaxf(row_max[i], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // all masked so far: exp2(-inf) = 0, not NaN
      const float alpha = exp2f(row_max[i] - m_use);
      row_max[i] = m_new;
      const float pr = exp2f(x - m_use);
      row_sum[i] = row_sum[i] * alpha + pr;  // per-lane share; reduced once at the end
#pragma unroll
      for (int c = 0; c < kMaxDChunks; ++c) o[i][c] *= alpha;
      s[i] = pr;
    }
    for (int j = 0; j < kBlockKeys; ++j) {
      float pj[kRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) pj[i] = __shfl_sync(0xffffffff, s[i], j);
#pragma unroll
      for (int c = 0; c < kMaxDChunks; ++c) {
        if (c * 32 < d_pad) {
          const float vd = sV[j * d_pad + c * 32 + lane];
#pragma unroll
          for (int i = 0; i < kRowsPerWarp; ++i) o[i][c] = fmaf(pj[i], vd, o[i][c]);
        }
      }
    }
  }

  float* gO = static_cast<float*>(p.out) + batch * p.o_batch_stride;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    float l = row_sum[i];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffff, l, off);
    const int r = m0 + warp * kRowsPerWarp + i;
    if (r >= p.packed_rows) continue;
    const int head = kv_head * p.group + r % p.group, s = r / p.group;
    const float inv = l == 0.f ? 0.f : 1.f / l;  // NaN inputs stay NaN
    float* dst = gO + head * p.o_head_stride + (int64_t)s * p.o_row_stride;
#pragma unroll
    for (int c = 0; c < kMaxDChunks; ++c) {
      const int d = c * 32 + lane;
      if (d < p.head_dim) dst[d] = o[i][c] * inv;
    }
    if (lane == 0) {
      p.lse[((int64_t)batch * p.heads_q + head) * p.seqlen_q + s] =
          l == 0.f ? -INFINITY : row_max[i] * 0.693147180559945309f + logf(l);
    }
  }
}

}  // namespace

void run_attention_fwd_fp32(const AttentionParams& p, cudaStream_t stream) {
  const int d_pad = (p.head_dim + 31) / 32 * 32;
  const int smem = static_cast<int>(sizeof(float) * (kBlockRows * d_pad + kBlockKeys * (d_pad + 1) + kBlockKeys * d_pad));
  allow_dynamic_smem(&attention_fwd_fp32_kernel, smem);
  const int64_t m_blocks = (p.packed_rows + kBlockRows - 1) / kBlockRows;
  const int64_t blocks = m_blocks * p.batch * p.heads_kv;
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.attention: problem too large (", blocks, " thread blocks)");
  launch_kernel(&attention_fwd_fp32_kernel, static_cast<unsigned>(blocks), 32 * kWarps, smem, stream,
                LaunchKind::Plain, p);
}

}  // namespace flash_attn_ext
