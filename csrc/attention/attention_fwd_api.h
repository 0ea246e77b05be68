#pragma once
// Declarations of the CUDA attention launchers, so the host dispatch compiles without the kernels.
#include <cuda_runtime.h>

#include "attention/attention_params.h"

namespace flash_attn_ext {

// Tensor-core forward for fp16/bf16 (`T` is __half or __nv_bfloat16); head_dim <= kHeadDim.
template <typename T, int kHeadDim>
void run_attention_fwd(const AttentionParams& p, cudaStream_t stream);

// Hopper forward (wgmma, K/V by bulk tensor copies) for fp16/bf16; only in builds with sm_90a code
// (FLASH_ATTN_EXT_SM90A), only on compute capability 9.0, only without key splits. Returns false, launching
// nothing, when the copy engine cannot describe K or V (strides not multiples of 16 bytes, broadcast heads).
template <typename T, int kHeadDim>
bool run_attention_fwd_sm90(const AttentionParams& p, cudaStream_t stream);

// What the host heuristics need to know of an instantiation's launch shape.
struct AttentionFwdLaunchInfo {
  int block_m;        // packed query rows per block
  int block_n;        // keys per K/V tile
  int blocks_per_sm;  // resident blocks per SM on the current device (occupancy API)
};

template <typename T, int kHeadDim>
AttentionFwdLaunchInfo attention_fwd_launch_info();

// Decode forward for fp16/bf16: all packed query rows (Sq * Hq / Hk) fit one 16-row tile (block_m of its
// launch info); keys split in rounds of block_n (tiles_per_split counts rounds).
template <typename T, int kHeadDim>
void run_attention_decode(const AttentionParams& p, cudaStream_t stream);

template <typename T, int kHeadDim>
AttentionFwdLaunchInfo attention_decode_launch_info();

// SIMT forward for fp32 inputs, fp32 math throughout (no tf32), for accuracy rather than speed.
void run_attention_fwd_fp32(const AttentionParams& p, cudaStream_t stream);

// out[row] = sum_i exp(lse_i[row] - lse[row]) * outs_i[row] with rows = (b, h, s) of a (B, H, S) grid;
// partials are contiguous (splits, B*H*S, D); `out` is addressed through (b, h, s) strides.
struct MergeParams {
  const void* outs;
  const float* lses;
  void* out;
  float* lse;
  int64_t rows;
  int splits, head_dim, heads, seqlen;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
};

// in_dtype/out_dtype: 0 float32, 1 float16, 2 bfloat16.
void run_merge_attention(const MergeParams& p, int in_dtype, int out_dtype, cudaStream_t stream);

}  // namespace flash_attn_ext
