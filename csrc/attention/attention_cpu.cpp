// CPU attention forward (FlashAttention-style, tiled, no score matrix in memory) and merge_attention.
//
// attention: q (B, Hq, Sq, D), k/v (B, Hk, Sk, D) -> out (B, Hq, Sq, D), lse (B, Hq, Sq) float32.
//   1. pack_kv: K and V of every (b, hk) are converted once to float key tiles of kBlockK keys (K transposed),
//      one task per (b, hk, key tile).
//   2. One task per (b, hq, tile of kBlockQ queries): the query tile is copied to float, then each key tile
//      updates, per query row, a running max m, a running sum l of exp(s - m) and an unnormalized
//      accumulator rO, rescaled by exp(m_old - m_new) whenever m grows; out = rO / l, lse = m + log(l).
//   All math is float32 whatever the input dtype; the tile math is compiled per x86 ISA (generic, AVX2,
//   AVX-512) and the widest one the CPU runs is picked at load time.
//   Query head h reads kv head h / (Hq / Hk). causal is bottom-right aligned: query i sees keys
//   j <= i + Sk - Sq. A row that sees no key (Sk == 0, or causal with Sq > Sk) gets out 0 and lse -inf.
// merge_attention: outs (N, rows, D), lses (N, rows) float32 -> out (rows, D), lse (rows); one task per row.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "attention/attention_problem.h"
#include "common/cpu_isa.h"
#include "common/cpu_vector_math.h"

namespace flash_attn_ext {
namespace {

// Tile sizes of the CPU kernel. Per thread: sQ + rO (kBlockQ x D) and sS (kBlockQ x kBlockK) floats, plus
// one packed key tile sKt + sV (2 x D x kBlockK floats) read from the shared packed copy: ~270 KiB at D = 256.
struct AttentionCpuTraits {
  static constexpr int64_t kBlockQ = 64;
  static constexpr int64_t kBlockK = 64;  // fixed trip count of the score and exp loops: they vectorize
  static constexpr int64_t kSumLanes = 16;
  static_assert(kBlockK % kSumLanes == 0, "the tile sum runs in kSumLanes independent lanes");
  static_assert(kBlockQ >= 1, "kBlockQ must be positive");
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// O[0, W) = alpha * O[0, W) + sum_j p[j] * V[j, 0, W) for one row of O; the W accumulators live in registers
// across all n keys (V rows are ldv floats apart).
constexpr int64_t kWideChunk = 64, kNarrowChunk = 8;  // D is a multiple of 8
template <int64_t W>
FAE_ALWAYS_INLINE void rescale_add_pv(float* __restrict__ o, float alpha, const float* __restrict__ p,
                                      const float* __restrict__ v, int64_t n, int64_t ldv) {
  float acc[W];
  for (int64_t w = 0; w < W; ++w) acc[w] = o[w] * alpha;
  for (int64_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vj = v + j * ldv;
    for (int64_t w = 0; w < W; ++w) acc[w] += pj * vj[w];
  }
  for (int64_t w = 0; w < W; ++w) o[w] = acc[w];
}

// One step of the online softmax for a query tile against one key tile, all float32:
//   sQ (nq, D) queries; sKt (D, kBlockK) keys transposed; sV (kBlockK, D) values;
//   rO (nq, D), rM, rL (nq): running unnormalized output, max and sum of each query row; sS scratch.
//   Row i sees keys [0, min(nk, i + diag)) of the tile (diag >= nk when nothing is masked).
// The body is compiled once per instruction set below and picked at run time (see tile_step_for_cpu).
FAE_ALWAYS_INLINE void attention_tile_step_body(const float* __restrict__ sQ, const float* __restrict__ sKt,
                                                const float* __restrict__ sV, float* __restrict__ sS,
                                                float* __restrict__ rO, float* __restrict__ rM,
                                                float* __restrict__ rL, int64_t nq, int64_t nk, int64_t D,
                                                int64_t diag, float scale) {
  constexpr int64_t kBK = AttentionCpuTraits::kBlockK, kLanes = AttentionCpuTraits::kSumLanes;
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t n_vis = std::max<int64_t>(0, std::min(nk, i + diag));
    if (n_vis == 0) continue;
    // S = scale * Q @ K^T for this row, over the full (zero-padded) tile width
    float acc[kBK] = {};
    const float* q = sQ + i * D;
    for (int64_t d = 0; d < D; ++d) {
      const float qd = q[d];
      const float* kt = sKt + d * kBK;
      for (int64_t j = 0; j < kBK; ++j) acc[j] += qd * kt[j];
    }
    float* s = sS + i * kBK;
    for (int64_t j = 0; j < kBK; ++j) s[j] = acc[j] * scale;
    for (int64_t j = n_vis; j < kBK; ++j) s[j] = kNegInf;  // masked and padding keys: P = 0 below
    const float m_new = nan_max(rM[i], nan_max_of(s, kBK));
    if (m_new == kNegInf) continue;  // every visible score is -inf so far: keep l = 0
    const float alpha = std::exp(rM[i] - m_new);  // 0 on the first visible tile
    // P = exp(S - m_new); a branch-free loop over the whole tile, so it vectorizes
    for (int64_t j = 0; j < kBK; ++j) s[j] = exp_nonpositive(s[j] - m_new);
    float lanes[kLanes] = {};
    for (int64_t j = 0; j < kBK; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += s[j + l];
    }
    float tile_sum = 0.f;
    for (int64_t l = 0; l < kLanes; ++l) tile_sum += lanes[l];
    rL[i] = rL[i] * alpha + tile_sum;
    rM[i] = m_new;
    // O = alpha * O + P @ V, in column chunks that stay in registers across the keys
    float* o = rO + i * D;
    int64_t d0 = 0;
    for (; d0 + kWideChunk <= D; d0 += kWideChunk) {
      rescale_add_pv<kWideChunk>(o + d0, alpha, s, sV + d0, n_vis, D);
    }
    for (; d0 < D; d0 += kNarrowChunk) rescale_add_pv<kNarrowChunk>(o + d0, alpha, s, sV + d0, n_vis, D);
  }
}

using AttentionTileStep = void (*)(const float*, const float*, const float*, float*, float*, float*, float*,
                                   int64_t, int64_t, int64_t, int64_t, float);

void attention_tile_step_generic(const float* sQ, const float* sKt, const float* sV, float* sS, float* rO,
                                 float* rM, float* rL, int64_t nq, int64_t nk, int64_t D, int64_t diag,
                                 float scale) {
  attention_tile_step_body(sQ, sKt, sV, sS, rO, rM, rL, nq, nk, D, diag, scale);
}

#ifdef FAE_X86_VARIANTS
FAE_TARGET_AVX512
void attention_tile_step_avx512(const float* sQ, const float* sKt, const float* sV, float* sS, float* rO,
                                float* rM, float* rL, int64_t nq, int64_t nk, int64_t D, int64_t diag,
                                float scale) {
  attention_tile_step_body(sQ, sKt, sV, sS, rO, rM, rL, nq, nk, D, diag, scale);
}

FAE_TARGET_AVX2
void attention_tile_step_avx2(const float* sQ, const float* sKt, const float* sV, float* sS, float* rO,
                              float* rM, float* rL, int64_t nq, int64_t nk, int64_t D, int64_t diag,
                              float scale) {
  attention_tile_step_body(sQ, sKt, sV, sS, rO, rM, rL, nq, nk, D, diag, scale);
}
#endif

// The widest variant this CPU runs (cpu_isa.h).
AttentionTileStep tile_step_for_cpu() {
  switch (cpu_isa()) {
#ifdef FAE_X86_VARIANTS
    case CpuIsa::Avx512: return attention_tile_step_avx512;
    case CpuIsa::Avx2: return attention_tile_step_avx2;
#endif
    default: return attention_tile_step_generic;
  }
}

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
  explicit BhsdView(const at::Tensor& t)
      : ptr(static_cast<scalar_t*>(t.data_ptr())), sb(t.stride(0)), sh(t.stride(1)), ss(t.stride(2)) {}
  scalar_t* row(int64_t b, int64_t h, int64_t s) const { return ptr + b * sb + h * sh + s * ss; }
};

// K and V of every (b, hk) converted once to float key tiles, shared by all query heads and tiles that read
// them: pKt (B * Hk, k_tiles, D, kBlockK) zero-padded past Sk, pV (B * Hk, k_tiles, kBlockK, D). This float
// copy costs 8 bytes per (key, dim) pair, twice the size of 16-bit K and V.
template <typename scalar_t>
void pack_kv(const AttentionProblem& p, int64_t k_tiles, float* pKt, float* pV) {
  constexpr int64_t kBK = AttentionCpuTraits::kBlockK;
  const int64_t Hk = p.heads_kv, Sk = p.seqlen_k, D = p.head_dim;
  const BhsdView<const scalar_t> gK(p.k), gV(p.v);
  at::parallel_for(0, p.batch * Hk * k_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bhk = t / k_tiles, j0 = (t % k_tiles) * kBK, nk = std::min(kBK, Sk - j0);
      float* kt = pKt + t * D * kBK;
      float* vt = pV + t * kBK * D;
      std::fill(kt, kt + D * kBK, 0.f);
      for (int64_t j = 0; j < nk; ++j) {
        const scalar_t* k = gK.row(bhk / Hk, bhk % Hk, j0 + j);
        const scalar_t* v = gV.row(bhk / Hk, bhk % Hk, j0 + j);
        for (int64_t d = 0; d < D; ++d) {
          kt[d * kBK + j] = static_cast<float>(k[d]);
          vt[j * D + d] = static_cast<float>(v[d]);
        }
      }
    }
  });
}

template <typename scalar_t>
void attention_cpu_kernel(const AttentionProblem& p) {
  constexpr int64_t kBQ = AttentionCpuTraits::kBlockQ, kBK = AttentionCpuTraits::kBlockK;
  const int64_t B = p.batch, Hq = p.heads_q, Sq = p.seqlen_q, Sk = p.seqlen_k, D = p.head_dim;
  const int64_t group = Hq / p.heads_kv;
  const int64_t q_tiles = (Sq + kBQ - 1) / kBQ;
  const int64_t k_tiles = (Sk + kBK - 1) / kBK;
  const int64_t causal_offset = Sk - Sq;  // query i sees keys j <= i + causal_offset
  const float scale = static_cast<float>(p.scale);
  const BhsdView<const scalar_t> gQ(p.q);
  const BhsdView<scalar_t> gO(p.out);
  float* gLse = p.lse.mutable_data_ptr<float>();
  static const AttentionTileStep tile_step = tile_step_for_cpu();

  const at::Tensor packed = at::empty({2, B * p.heads_kv * k_tiles * kBK * D}, p.q.options().dtype(at::kFloat));
  float* pKt = packed[0].data_ptr<float>();
  float* pV = packed[1].data_ptr<float>();
  if (k_tiles > 0) pack_kv<scalar_t>(p, k_tiles, pKt, pV);

  at::parallel_for(0, B * Hq * q_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> sQ(kBQ * D), rO(kBQ * D), sS(kBQ * kBK), rM(kBQ), rL(kBQ);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t qt = task % q_tiles, bh = task / q_tiles;
      const int64_t b = bh / Hq, h = bh % Hq, hk = h / group;
      const int64_t i0 = qt * kBQ, nq = std::min(kBQ, Sq - i0);
      for (int64_t i = 0; i < nq; ++i) {
        const scalar_t* q = gQ.row(b, h, i0 + i);
        for (int64_t d = 0; d < D; ++d) sQ[i * D + d] = static_cast<float>(q[d]);
      }
      std::fill(rO.begin(), rO.end(), 0.f);
      std::fill(rM.begin(), rM.end(), kNegInf);
      std::fill(rL.begin(), rL.end(), 0.f);

      // Causal: key tiles past the last key the tile's last query sees are skipped whole.
      const int64_t k_end = p.causal ? std::max<int64_t>(0, std::min(Sk, i0 + nq + causal_offset)) : Sk;
      for (int64_t j0 = 0; j0 < k_end; j0 += kBK) {
        const int64_t t = (b * p.heads_kv + hk) * k_tiles + j0 / kBK;
        // row i of the query tile sees tile keys j < i + diag
        const int64_t diag = p.causal ? i0 + causal_offset - j0 + 1 : kBK;
        tile_step(sQ.data(), pKt + t * D * kBK, pV + t * kBK * D, sS.data(), rO.data(), rM.data(),
                            rL.data(), nq, std::min(kBK, k_end - j0), D, diag, scale);
      }

      for (int64_t i = 0; i < nq; ++i) {
        scalar_t* out = gO.row(b, h, i0 + i);
        const float l = rL[i];  // 0: the row saw no key; NaN: NaN inputs, which propagate to out and lse
        const float inv_l = l == 0.f ? 0.f : 1.f / l;
        for (int64_t d = 0; d < D; ++d) out[d] = static_cast<scalar_t>(rO[i * D + d] * inv_l);
        gLse[(b * Hq + h) * Sq + i0 + i] = l == 0.f ? kNegInf : rM[i] + std::log(l);
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
