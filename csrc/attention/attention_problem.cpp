#include "attention/attention_problem.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <cmath>

namespace flash_attn_ext {
namespace {

void check_attention_dtype(const char* op, const char* arg, const at::Tensor& t) {
  const auto st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kHalf || st == at::kBFloat16 || st == at::kFloat, op, ": ", arg,
                   " must be float16, bfloat16 or float32, got ", st);
}

}  // namespace

AttentionProblem make_attention_problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        bool causal, c10::optional<double> scale) {
  constexpr const char* op = "flash_attn_ext.attention";
  TORCH_CHECK(q.dim() == 4, op, ": q must have rank 4 (B, Hq, Sq, D), got rank ", q.dim());
  TORCH_CHECK(k.dim() == 4, op, ": k must have rank 4 (B, Hk, Sk, D), got rank ", k.dim());
  TORCH_CHECK(v.dim() == 4, op, ": v must have rank 4 (B, Hk, Sk, D), got rank ", v.dim());
  check_attention_dtype(op, "q", q);
  TORCH_CHECK_TYPE(k.scalar_type() == q.scalar_type(), op, ": k must have q's dtype ", q.scalar_type(),
                   ", got ", k.scalar_type());
  TORCH_CHECK_TYPE(v.scalar_type() == q.scalar_type(), op, ": v must have q's dtype ", q.scalar_type(),
                   ", got ", v.scalar_type());
  TORCH_CHECK(k.device() == q.device(), op, ": k is on ", k.device(), " but q is on ", q.device());
  TORCH_CHECK(v.device() == q.device(), op, ": v is on ", v.device(), " but q is on ", q.device());

  const int64_t B = q.size(0), Hq = q.size(1), Sq = q.size(2), D = q.size(3);
  const int64_t Hk = k.size(1), Sk = k.size(2);
  TORCH_CHECK(k.size(0) == B, op, ": k has batch ", k.size(0), " but q has batch ", B);
  TORCH_CHECK(v.size(0) == B, op, ": v has batch ", v.size(0), " but q has batch ", B);
  TORCH_CHECK(k.size(3) == D, op, ": k has head dim ", k.size(3), " but q has head dim ", D);
  TORCH_CHECK(v.size(3) == D, op, ": v has head dim ", v.size(3), " but q has head dim ", D,
              " (a different value head dim is not supported)");
  TORCH_CHECK(v.size(1) == Hk, op, ": v has ", v.size(1), " heads but k has ", Hk);
  TORCH_CHECK(v.size(2) == Sk, op, ": v has ", v.size(2), " keys but k has ", Sk);
  TORCH_CHECK(Hk > 0 && Hq % Hk == 0, op, ": q's head count (", Hq, ") must be a multiple of k's (", Hk, ")");
  TORCH_CHECK(D > 0 && D <= kMaxHeadDim && D % 8 == 0, op, ": head dim D must be a multiple of 8 in [8, ",
              kMaxHeadDim, "], got ", D);
  TORCH_CHECK(q.stride(3) == 1, op, ": q must have unit stride on its last dim, got stride ", q.stride(3));
  TORCH_CHECK(k.stride(3) == 1, op, ": k must have unit stride on its last dim, got stride ", k.stride(3));
  TORCH_CHECK(v.stride(3) == 1, op, ": v must have unit stride on its last dim, got stride ", v.stride(3));

  AttentionProblem p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = at::empty_like(q);
  p.lse = at::empty({B, Hq, Sq}, q.options().dtype(at::kFloat));
  p.batch = B;
  p.heads_q = Hq;
  p.heads_kv = Hk;
  p.seqlen_q = Sq;
  p.seqlen_k = Sk;
  p.head_dim = D;
  p.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
  // The kernels scale in float32: a scale that is not finite there would turn every score NaN or +-inf.
  TORCH_CHECK(std::isfinite(static_cast<float>(p.scale)), op, ": scale must be finite as a float32, got ", p.scale);
  p.causal = causal;
  return p;
}

MergeProblem make_merge_problem(const at::Tensor& outs, const at::Tensor& lses) {
  constexpr const char* op = "flash_attn_ext.merge_attention";
  TORCH_CHECK(outs.dim() == 5, op, ": outs must have rank 5 (N, B, H, S, D), got rank ", outs.dim());
  TORCH_CHECK(lses.dim() == 4, op, ": lses must have rank 4 (N, B, H, S), got rank ", lses.dim());
  check_attention_dtype(op, "outs", outs);
  TORCH_CHECK_TYPE(lses.scalar_type() == at::kFloat, op, ": lses must be float32, got ", lses.scalar_type());
  TORCH_CHECK(lses.device() == outs.device(), op, ": lses is on ", lses.device(), " but outs is on ",
              outs.device());
  for (int64_t i = 0; i < 4; ++i) {
    TORCH_CHECK(lses.size(i) == outs.size(i), op, ": lses must have shape outs.shape[:4] = ",
                outs.sizes().slice(0, 4), ", got ", lses.sizes());
  }
  TORCH_CHECK(outs.size(0) >= 1, op, ": outs must hold at least one partial result (N >= 1)");
  MergeProblem p;
  p.outs = outs.contiguous();
  p.lses = lses.contiguous();
  p.splits = outs.size(0);
  p.rows = outs.size(1) * outs.size(2) * outs.size(3);
  p.head_dim = outs.size(4);
  p.out = at::empty(outs.sizes().slice(1), outs.options());
  p.lse = at::empty(lses.sizes().slice(1), lses.options());
  return p;
}

}  // namespace flash_attn_ext
