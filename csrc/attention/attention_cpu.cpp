// CPU attention forward (FlashAttention-style, tiled, no score matrix in memory) and merge_attention.
//
// attention: q (B, Hq, Sq, D), k/v (B, Hk, Sk, D) -> out (B, Hq, Sq, D), lse (B, Hq, Sq) float32.
//   One task per (b, hq, tile of kBlockQ queries), spread with at::parallel_for. A task copies its query
//   tile to float once, then streams key tiles of kBlockK keys (converted to float, K transposed) and keeps
//   per query row a running max m, a running sum l of exp(s - m) and an unnormalized accumulator rO,
//   rescaled by exp(m_old - m_new) whenever m grows. All math is float32 whatever the input dtype.
//   Query head h reads kv head h / (Hq / Hk). causal is bottom-right aligned: query i sees keys
//   j <= i + Sk - Sq. A row that sees no key (Sk == 0, or causal with Sq > Sk) gets out 0 and lse -inf.
// merge_attention: outs (N, rows, D), lses (N, rows) float32 -> out (rows, D), lse (rows); one task per row.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "attention/attention_problem.h"

namespace flash_attn_ext {
namespace {

// Tile sizes of the CPU kernel. Buffers per thread: sQ + rO (kBlockQ x D), sKt + sV (D x kBlockK),
// sS (kBlockQ x kBlockK) floats, ~320 KiB at D = 256: they stay in L2.
struct AttentionCpuTraits {
  static constexpr int64_t kBlockQ = 64;
  static constexpr int64_t kBlockK = 64;  // fixed trip count of the innermost score loop: vectorizes
  static_assert(kBlockK % 16 == 0, "kBlockK must fill whole vector registers");
  static_assert(kBlockQ >= 1, "kBlockQ must be positive");
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// max that propagates NaN (a NaN score or lse must not be mistaken for "no key").
inline float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

// Calls f(scalar_t{}) for the dtypes the attention ops accept; anything else is an error.
template <typename F>
void dispatch_attention_dtype(const char* op, at::ScalarType st, F&& f) {
  switch (st) {
    case at::kFloat: f(float{}); break;
    case at::kHalf: f(c10::Half{}); break;
    case at::kBFloat16: f(c10::BFloat16{}); break;
    default: TORCH_CHECK_TYPE(false, op, ": unsupported dtype ", st);
  }
}

// Raw view of one (B, H, S, D) tensor with unit stride on D.
template <typename scalar_t>
struct BhsdView {
  scalar_t* ptr;
  int64_t sb, sh, ss;
  BhsdView(const at::Tensor& t)
      : ptr(static_cast<scalar_t*>(t.data_ptr())), sb(t.stride(0)), sh(t.stride(1)), ss(t.stride(2)) {}
  scalar_t* row(int64_t b, int64_t h, int64_t s) const { return ptr + b * sb + h * sh + s * ss; }
};

template <typename scalar_t>
void attention_cpu_kernel(const AttentionProblem& p) {
  using Traits = AttentionCpuTraits;
  constexpr int64_t kBQ = Traits::kBlockQ, kBK = Traits::kBlockK;
  const int64_t B = p.batch, Hq = p.heads_q, Sq = p.seqlen_q, Sk = p.seqlen_k, D = p.head_dim;
  const int64_t group = Hq / p.heads_kv;
  const int64_t q_tiles = (Sq + kBQ - 1) / kBQ;
  const int64_t causal_offset = Sk - Sq;  // query i sees keys j <= i + causal_offset
  const float scale = static_cast<float>(p.scale);
  const BhsdView<const scalar_t> gQ(p.q), gK(p.k), gV(p.v);
  const BhsdView<scalar_t> gO(p.out);
  float* gLse = p.lse.mutable_data_ptr<float>();

  at::parallel_for(0, B * Hq * q_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> sQ(kBQ * D), rO(kBQ * D), sKt(D * kBK), sV(kBK * D), sS(kBQ * kBK);
    std::vector<float> rM(kBQ), rL(kBQ);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t qt = task % q_tiles;
      const int64_t bh = task / q_tiles;
      const int64_t b = bh / Hq, h = bh % Hq, hk = h / group;
      const int64_t i0 = qt * kBQ, nq = std::min(kBQ, Sq - i0);

      for (int64_t i = 0; i < nq; ++i) {
        const scalar_t* q = gQ.row(b, h, i0 + i);
        for (int64_t d = 0; d < D; ++d) sQ[i * D + d] = static_cast<float>(q[d]);
      }
      std::fill(rO.begin(), rO.end(), 0.f);
      std::fill(rM.begin(), rM.end(), kNegInf);
      std::fill(rL.begin(), rL.end(), 0.f);

      // Keys past the last one the tile's last query sees are skipped whole.
      const int64_t k_end = p.causal ? std::max<int64_t>(0, std::min(Sk, i0 + nq + causal_offset)) : Sk;
      for (int64_t j0 = 0; j0 < k_end; j0 += kBK) {
        const int64_t nk = std::min(kBK, k_end - j0);
        for (int64_t j = 0; j < nk; ++j) {
          const scalar_t* k = gK.row(b, hk, j0 + j);
          const scalar_t* v = gV.row(b, hk, j0 + j);
          for (int64_t d = 0; d < D; ++d) {
            sKt[d * kBK + j] = static_cast<float>(k[d]);
            sV[j * D + d] = static_cast<float>(v[d]);
          }
        }
        for (int64_t j = nk; j < kBK; ++j) {
          for (int64_t d = 0; d < D; ++d) sKt[d * kBK + j] = 0.f;
        }
        const bool needs_mask = p.causal && j0 + nk - 1 > i0 + causal_offset;

        for (int64_t i = 0; i < nq; ++i) {
          // S = scale * Q @ K^T for this row, over the full (zero-padded) tile width
          float* __restrict__ s = &sS[i * kBK];
          for (int64_t j = 0; j < kBK; ++j) s[j] = 0.f;
          const float* q = &sQ[i * D];
          for (int64_t d = 0; d < D; ++d) {
            const float qd = q[d];
            const float* __restrict__ kt = &sKt[d * kBK];
            for (int64_t j = 0; j < kBK; ++j) s[j] += qd * kt[j];
          }
          // visible keys of this row in the tile: [0, n_vis)
          int64_t n_vis = nk;
          if (needs_mask) n_vis = std::max<int64_t>(0, std::min(nk, i0 + i + causal_offset - j0 + 1));
          float tile_max = kNegInf;
          for (int64_t j = 0; j < n_vis; ++j) {
            s[j] *= scale;
            tile_max = nan_max(tile_max, s[j]);
          }
          const float m_new = nan_max(rM[i], tile_max);
          if (m_new == kNegInf) continue;  // nothing visible yet (or all scores -inf): keep l = 0
          const float alpha = std::exp(rM[i] - m_new);  // 0 on the first visible tile
          float tile_sum = 0.f;
          for (int64_t j = 0; j < n_vis; ++j) {
            s[j] = std::exp(s[j] - m_new);
            tile_sum += s[j];
          }
          rL[i] = rL[i] * alpha + tile_sum;
          rM[i] = m_new;
          // O = alpha * O + P @ V
          float* __restrict__ o = &rO[i * D];
          if (alpha != 1.f) {
            for (int64_t d = 0; d < D; ++d) o[d] *= alpha;
          }
          for (int64_t j = 0; j < n_vis; ++j) {
            const float pj = s[j];
            const float* __restrict__ v = &sV[j * D];
            for (int64_t d = 0; d < D; ++d) o[d] += pj * v[d];
          }
        }
      }

      for (int64_t i = 0; i < nq; ++i) {
        scalar_t* out = gO.row(b, h, i0 + i);
        const float l = rL[i];
        const float inv_l = l > 0.f ? 1.f / l : 0.f;
        for (int64_t d = 0; d < D; ++d) out[d] = static_cast<scalar_t>(rO[i * D + d] * inv_l);
        gLse[(b * Hq + h) * Sq + i0 + i] = l > 0.f ? rM[i] + std::log(l) : kNegInf;
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 bool causal, c10::optional<double> scale) {
  AttentionProblem p = make_attention_problem(q, k, v, causal, scale);
  if (p.out.numel() > 0) {
    dispatch_attention_dtype("flash_attn_ext.attention", q.scalar_type(),
                             [&](auto tag) { attention_cpu_kernel<decltype(tag)>(p); });
  }
  return {p.out, p.lse};
}

// One row: m = max_i lse_i; w_i = exp(lse_i - m), blocks with lse -inf skipped (their out may be garbage);
// out = sum_i w_i out_i / sum_i w_i, lse = m + log(sum_i w_i). No finite lse -> out 0, lse -inf.
template <typename scalar_t>
void merge_attention_cpu_kernel(const MergeProblem& p) {
  const int64_t N = p.splits, rows = p.rows, D = p.head_dim;
  const scalar_t* outs = p.outs.const_data_ptr<scalar_t>();
  const float* lses = p.lses.const_data_ptr<float>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  float* lse = p.lse.mutable_data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, N * D));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(D);
    for (int64_t r = begin; r < end; ++r) {
      float m = kNegInf;
      for (int64_t n = 0; n < N; ++n) m = nan_max(m, lses[n * rows + r]);
      scalar_t* o = out + r * D;
      if (m == kNegInf) {
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<scalar_t>(0.f);
        lse[r] = kNegInf;
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      float wsum = 0.f;
      for (int64_t n = 0; n < N; ++n) {
        const float l = lses[n * rows + r];
        if (l == kNegInf) continue;
        const float w = l == m ? 1.f : std::exp(l - m);
        wsum += w;
        const scalar_t* on = outs + (n * rows + r) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += w * static_cast<float>(on[d]);
      }
      const float inv = 1.f / wsum;
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<scalar_t>(acc[d] * inv);
      lse[r] = m + std::log(wsum);
    }
  });
}

std::tuple<at::Tensor, at::Tensor> merge_attention_cpu(const at::Tensor& outs, const at::Tensor& lses) {
  MergeProblem p = make_merge_problem(outs, lses);
  if (p.rows > 0) {
    dispatch_attention_dtype("flash_attn_ext.merge_attention", outs.scalar_type(),
                             [&](auto tag) { merge_attention_cpu_kernel<decltype(tag)>(p); });
  }
  return {p.out, p.lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(flash_attn_ext, CPU, m) {
  m.impl("attention", &attention_cpu);
  m.impl("merge_attention", &merge_attention_cpu);
}

}  // namespace flash_attn_ext
