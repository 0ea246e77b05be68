#pragma once
// Host-side validation and output allocation for attention and merge_attention, shared by CPU and CUDA.
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace flash_attn_ext {

constexpr int64_t kMaxHeadDim = 256;

// q (B, Hq, Sq, D), k/v (B, Hk, Sk, D): any strides with unit stride on D.
// out is allocated like q (same strides when q is dense), lse is contiguous (B, Hq, Sq) float32.
struct AttentionProblem {
  at::Tensor q, k, v;
  at::Tensor out, lse;
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  double scale;  // multiplies q @ k^T, natural-log units
  bool causal;   // bottom-right aligned: query i sees keys j <= i + Sk - Sq
};

AttentionProblem make_attention_problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        bool causal, c10::optional<double> scale);

// outs (N, B, H, S, D) any float dtype, lses (N, B, H, S) float32 -> out (B, H, S, D) in outs' dtype and
// lse (B, H, S) float32, both contiguous. `outs` and `lses` are made contiguous here.
struct MergeProblem {
  at::Tensor outs, lses;
  at::Tensor out, lse;
  int64_t splits, rows, head_dim;  // rows = B * H * S
};

MergeProblem make_merge_problem(const at::Tensor& outs, const at::Tensor& lses);

}  // namespace flash_attn_ext
