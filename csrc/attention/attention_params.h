#pragma once
// Plain-data description of one attention forward launch: raw pointers, 64-bit element strides and
// constants precomputed on the host. No ATen types, so device code and host code share it.
#include <cstdint>

#include "common/fast_divmod.h"

namespace flash_attn_ext {

struct AttentionParams {
  const void* q;  // (B, Hq, Sq, D), unit stride on D
  const void* k;  // (B, Hk, Sk, D)
  const void* v;  // (B, Hk, Sk, D)
  void* out;      // (B, Hq, Sq, D), q's dtype
  float* lse;     // (B, Hq, Sq) contiguous, natural log

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;

  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  // Query heads that share one key/value head are packed into the rows of one tile: packed row
  // r = s * group + g is query position s of query head (kv_head * group + g). A tile therefore reads each
  // K/V tile once for all heads of its group, and causal limits stay monotone in r.
  int group;        // heads_q / heads_kv
  int packed_rows;  // seqlen_q * group
  FastDivmod group_div, heads_kv_div;  // division by group and heads_kv (item and row decoding)

  float scale;       // multiplies q @ k^T
  float scale_log2;  // scale * log2(e): scores go straight into exp2
  bool causal;       // bottom-right aligned: query s sees keys j <= s + seqlen_k - seqlen_q

  // Split-KV: when num_splits > 1, split i covers key tiles [i * tiles_per_split, (i + 1) * tiles_per_split)
  // and writes unnormalized-free partial results (already divided by their own sum) to
  // out_accum (num_splits, B, Hq, Sq, D) and lse_accum (num_splits, B, Hq, Sq), merged afterwards.
  int num_splits;
  int tiles_per_split;
  float* out_accum;
  float* lse_accum;
};

}  // namespace flash_attn_ext
