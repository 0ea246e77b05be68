// CPU softmax / log_softmax / logsumexp over (outer, len, inner), the layout of SoftmaxProblem.
//
// Numerics, written down once (torch parity, special values included):
//   state (m, d): running max m and d = sum exp(x - m) over the elements seen so far.
//   rescale(a, m) = (a == m) ? 1 : exp(a - m)   -- so -inf == -inf counts as 1, never NaN.
//   push x:        m' = fmax(m, x) (NaN ignored), d' = d * rescale(m, m') + rescale(x, m')   (NaN x -> d NaN)
//   merge (m1, d1), (m2, d2): m = fmax(m1, m2), d = d1 * rescale(m1, m) + d2 * rescale(m2, m)
//   finalize: softmax exp(x - m) / d, log_softmax x - m - log(d), logsumexp m + log(d);
//             for softmax/log_softmax a row with m == +inf has d = NaN (torch gives NaN everywhere).
// "safe" finds m = fmax over the row first, then d = sum rescale(x, m); "online" ("auto") keeps (m, d)
// in one pass. Both then run the same finalize pass.
//
// Accuracy: sums run in acc_t (float; double for double) over short chunks with several independent lanes,
// and the chunk states are merged pairwise, so the error of d grows with log(len), not len: rows of 2^24
// float elements stay at ~1e-7 relative.
//
// Speed: rows of float, half and bfloat16 (float accumulation) run on float chunks of kRowChunk elements
// through RowMath, loops compiled per x86 instruction set (common/cpu_isa.h) with a vectorizable exp
// (common/cpu_vector_math.h, <= 1.4 ulp); a chunk ("safe": the row) whose max is not finite (+-inf, NaN)
// takes the scalar code, which carries the rules above. Double rows and columns are scalar.
//
// Work split: rows (inner == 1) -> one task per row; columns (inner > 1) -> one task per
// (outer, block of kColumnBlock columns), each streaming the len rows of its block once per pass.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "softmax/softmax_cpu_row_math.h"
#include "softmax/softmax_problem.h"

namespace flash_attn_ext {
namespace {

constexpr int64_t kRowChunk = 512;     // elements per chunk of a contiguous row
constexpr int kRowLanes = 8;           // independent (m, d) states inside a row chunk
constexpr int64_t kColumnBlock = 64;   // columns per task when inner > 1
constexpr int64_t kColumnChunk = 128;  // rows of the reduced dim per chunk when inner > 1
static_assert(kRowChunk % kRowLanes == 0, "a row chunk must split evenly into lanes");

template <typename acc_t>
struct RowState {
  acc_t m = -std::numeric_limits<acc_t>::infinity();
  acc_t d = 0;
};

template <typename acc_t>
inline acc_t rescale(acc_t a, acc_t m) {
  return a == m ? acc_t(1) : std::exp(a - m);
}

// Online update with one exp per element; equal to the fmax formula in the header (x > m is false for NaN).
template <typename acc_t>
inline void push(RowState<acc_t>& s, acc_t x) {
  if (x > s.m) {
    s.d = s.d * std::exp(s.m - x) + acc_t(1);
    s.m = x;
  } else {
    s.d += rescale(x, s.m);
  }
}

template <typename acc_t>
inline RowState<acc_t> merge(const RowState<acc_t>& a, const RowState<acc_t>& b) {
  RowState<acc_t> r;
  r.m = std::fmax(a.m, b.m);
  r.d = a.d * rescale(a.m, r.m) + b.d * rescale(b.m, r.m);
  return r;
}

// Pairwise (binary-counter) merge of chunk states: level k holds the merge of 2^k consecutive chunks.
template <typename acc_t>
class PairwiseStates {
 public:
  void add(RowState<acc_t> s) {
    int level = 0;
    for (uint64_t c = count_; c & 1; c >>= 1, ++level) s = merge(RowState<acc_t>{m_[level], d_[level]}, s);
    m_[level] = s.m;
    d_[level] = s.d;
    ++count_;
  }
  RowState<acc_t> total() const {
    RowState<acc_t> r;
    int level = 0;
    for (uint64_t c = count_; c != 0; c >>= 1, ++level) {
      if (c & 1) r = merge(RowState<acc_t>{m_[level], d_[level]}, r);
    }
    return r;
  }

 private:
  // Level k is written before it is read (bit k of count_ set), so the arrays are left uninitialized: a
  // PairwiseStates per row costs nothing up front (64 initialized levels were most of a 128-element row's time).
  acc_t m_[64];
  acc_t d_[64];
  uint64_t count_ = 0;
};

template <typename acc_t>
inline RowState<acc_t> merge_lanes(const RowState<acc_t>* lanes, int n) {
  RowState<acc_t> r;
  for (int i = 0; i < n; ++i) r = merge(r, lanes[i]);
  return r;
}

template <typename acc_t>
inline acc_t row_max(acc_t a, acc_t x) {
  return std::fmax(a, x);
}

// Final (m, d) -> what the normalize pass needs: log(d), 1/d, with the +inf rule applied.
template <typename acc_t>
struct Finalizer {
  acc_t m, inv_d, log_d;
  Finalizer(RowState<acc_t> s, SoftmaxOutput output) : m(s.m) {
    acc_t d = s.d;
    if (output != SoftmaxOutput::LogSumExp && m == std::numeric_limits<acc_t>::infinity()) {
      d = std::numeric_limits<acc_t>::quiet_NaN();
    }
    // only what the output reads: a log and a division are a visible share of a short row
    inv_d = output == SoftmaxOutput::Softmax ? acc_t(1) / d : acc_t(0);
    log_d = output != SoftmaxOutput::Softmax ? std::log(d) : acc_t(0);
  }
  acc_t lse() const { return m + log_d; }
  acc_t softmax(acc_t x) const { return std::exp(x - m) * inv_d; }
  acc_t log_softmax(acc_t x) const { return (x - m) - log_d; }
};

// ---- rows: inner == 1 -----------------------------------------------------------------------------------

// (m, d) of one chunk of n contiguous elements, pushed online into kRowLanes independent states.
template <typename acc_t, typename scalar_t>
RowState<acc_t> online_chunk_state(const scalar_t* xc, int64_t n) {
  RowState<acc_t> lanes[kRowLanes];
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes) {
    for (int l = 0; l < kRowLanes; ++l) push(lanes[l], static_cast<acc_t>(xc[j + l]));
  }
  for (; j < n; ++j) push(lanes[0], static_cast<acc_t>(xc[j]));
  return merge_lanes(lanes, kRowLanes);
}

// (m, d) of one contiguous row of length len.
template <typename scalar_t, typename acc_t>
RowState<acc_t> reduce_row(const scalar_t* x, int64_t len, SoftmaxAlgorithm algorithm) {
  PairwiseStates<acc_t> chunks;
  acc_t safe_max = -std::numeric_limits<acc_t>::infinity();
  if (algorithm == SoftmaxAlgorithm::Safe) {
    acc_t lanes[kRowLanes];
    std::fill(lanes, lanes + kRowLanes, safe_max);
    int64_t j = 0;
    for (; j + kRowLanes <= len; j += kRowLanes) {
      for (int l = 0; l < kRowLanes; ++l) lanes[l] = row_max(lanes[l], static_cast<acc_t>(x[j + l]));
    }
    for (; j < len; ++j) lanes[0] = row_max(lanes[0], static_cast<acc_t>(x[j]));
    for (int l = 0; l < kRowLanes; ++l) safe_max = row_max(safe_max, lanes[l]);
  }
  for (int64_t start = 0; start < len; start += kRowChunk) {
    const int64_t n = std::min(kRowChunk, len - start);
    const scalar_t* xc = x + start;
    if (algorithm == SoftmaxAlgorithm::Safe) {
      RowState<acc_t> lanes[kRowLanes];
      acc_t sums[kRowLanes] = {};
      int64_t j = 0;
      for (; j + kRowLanes <= n; j += kRowLanes) {
        for (int l = 0; l < kRowLanes; ++l) sums[l] += rescale(static_cast<acc_t>(xc[j + l]), safe_max);
      }
      for (; j < n; ++j) sums[0] += rescale(static_cast<acc_t>(xc[j]), safe_max);
      for (int l = 0; l < kRowLanes; ++l) lanes[l] = RowState<acc_t>{safe_max, sums[l]};
      chunks.add(merge_lanes(lanes, kRowLanes));
    } else {
      chunks.add(online_chunk_state<acc_t>(xc, n));
    }
  }
  return chunks.total();
}

// ---- rows, float accumulation: chunk math by RowMath (softmax_cpu_row_math.h) ---------------------------

inline bool finite(float v) { return std::isfinite(v); }

// Rows of float, half or bfloat16 (16-bit types: their bits through RowMath's conversions): each
// kRowChunk-element chunk converted to float once per pass (float input is used in place), reduced and written by RowMath; special values take the scalar code (see top).
// Softmax rows keep each chunk's exponentials as the reduction computes them, relative to the max they were
// taken at (float rows in their output, 16-bit rows in a float row of scratch), and rescale them at the end:
// one exponential per element.
template <typename scalar_t>
void softmax_rows_float(const SoftmaxProblem& p) {
  constexpr bool kInPlace = std::is_same_v<scalar_t, float>;
  const RowMath math = row_math_for_cpu();
  const scalar_t* x = p.x.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  const int64_t len = p.len;
  const int64_t grain = std::max<int64_t>(1, 32768 / len);
  const bool keep_terms = p.output == SoftmaxOutput::Softmax;
  at::parallel_for(0, p.outer, grain, [&](int64_t begin, int64_t end) {
    float in_buf[kRowChunk], out_buf[kRowChunk];
    std::vector<float> scratch(keep_terms && !kInPlace ? len : 0);
    // keep_terms: per chunk, the max its kept terms are relative to (NaN: none kept, the scalar code reduced
    // that chunk)
    std::vector<float> term_max;
    for (int64_t row = begin; row < end; ++row) {
      const scalar_t* xr = x + row * len;
      scalar_t* outr = out + row * len;
      float* const terms = kInPlace ? reinterpret_cast<float*>(outr) : scratch.data();
      // Chunk [start, start + n) of the row as floats.
      const auto chunk = [&](int64_t start, int64_t n) -> const float* {
        if constexpr (kInPlace) {
          return xr + start;
        } else {
          const auto* bits = reinterpret_cast<const uint16_t*>(xr + start);
          (std::is_same_v<scalar_t, c10::BFloat16> ? math.widen_bf16 : math.widen_f16)(bits, in_buf, n);
          return in_buf;
        }
      };
      // The chunk's (m, d) against max m (finite), its terms kept with keep_terms.
      const auto reduce_chunk = [&](int64_t start, const float* c, int64_t n, float m) {
        if (!keep_terms) return RowState<float>{m, math.sum_exp(c, n, m)};
        term_max[start / kRowChunk] = m;
        return RowState<float>{m, math.exp_store_sum(c, terms + start, n, m)};
      };
      if (keep_terms) term_max.assign((len + kRowChunk - 1) / kRowChunk, std::numeric_limits<float>::quiet_NaN());
      PairwiseStates<float> chunks;
      if (p.algorithm == SoftmaxAlgorithm::Safe) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t start = 0; start < len; start += kRowChunk) {
          const int64_t n = std::min(kRowChunk, len - start);
          const float cm = math.max_of(chunk(start, n), n);
          m = (cm > m || cm != cm) ? cm : m;
        }
        if (!finite(m)) {
          chunks.add(reduce_row<scalar_t, float>(xr, len, p.algorithm));
        } else {
          for (int64_t start = 0; start < len; start += kRowChunk) {
            const int64_t n = std::min(kRowChunk, len - start);
            chunks.add(reduce_chunk(start, chunk(start, n), n, m));
          }
        }
      } else {  // online: one pass, each chunk's (max, sum) merged into the running state
        for (int64_t start = 0; start < len; start += kRowChunk) {
          const int64_t n = std::min(kRowChunk, len - start);
          const float* c = chunk(start, n);
          const float cm = math.max_of(c, n);
          chunks.add(finite(cm) ? reduce_chunk(start, c, n, cm) : online_chunk_state<float>(c, n));
        }
      }
      const Finalizer<float> f(chunks.total(), p.output);
      if (p.output == SoftmaxOutput::LogSumExp) {
        out[row] = static_cast<scalar_t>(f.lse());
        continue;
      }
      for (int64_t start = 0; start < len; start += kRowChunk) {
        const int64_t n = std::min(kRowChunk, len - start);
        float* o = kInPlace ? terms + start : out_buf;  // this chunk's float outputs
        if (!finite(f.m)) {  // +-inf or NaN max: the scalar finalize
          const float* c = chunk(start, n);
          for (int64_t j = 0; j < n; ++j) {
            o[j] = p.output == SoftmaxOutput::Softmax ? f.softmax(c[j]) : f.log_softmax(c[j]);
          }
        } else if (p.output == SoftmaxOutput::LogSoftmax) {
          math.log_shift(chunk(start, n), o, n, f.m, f.log_d);
        } else if (!std::isnan(term_max[start / kRowChunk])) {
          o = terms + start;
          math.scale(o, n, rescale(term_max[start / kRowChunk], f.m) * f.inv_d);
        } else {
          math.exp_scale(chunk(start, n), o, n, f.m, f.inv_d);
        }
        if constexpr (!kInPlace) {
          auto* bits = reinterpret_cast<uint16_t*>(outr + start);
          (std::is_same_v<scalar_t, c10::BFloat16> ? math.narrow_bf16 : math.narrow_f16)(o, bits, n);
        }
      }
    }
  });
}

template <typename scalar_t, typename acc_t>
void softmax_rows(const SoftmaxProblem& p) {
  const scalar_t* x = p.x.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  const int64_t len = p.len;
  const int64_t grain = std::max<int64_t>(1, 32768 / len);
  at::parallel_for(0, p.outer, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const scalar_t* xr = x + row * len;
      const Finalizer<acc_t> f(reduce_row<scalar_t, acc_t>(xr, len, p.algorithm), p.output);
      if (p.output == SoftmaxOutput::LogSumExp) {
        out[row] = static_cast<scalar_t>(f.lse());
        continue;
      }
      scalar_t* outr = out + row * len;
      if (p.output == SoftmaxOutput::Softmax) {
        for (int64_t j = 0; j < len; ++j) outr[j] = static_cast<scalar_t>(f.softmax(static_cast<acc_t>(xr[j])));
      } else {
        for (int64_t j = 0; j < len; ++j) {
          outr[j] = static_cast<scalar_t>(f.log_softmax(static_cast<acc_t>(xr[j])));
        }
      }
    }
  });
}

// ---- columns: inner > 1, the reduced dim has stride `inner` -----------------------------------------------

template <typename scalar_t, typename acc_t>
void softmax_columns(const SoftmaxProblem& p) {
  const scalar_t* x = p.x.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  const int64_t len = p.len, inner = p.inner;
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, 32768 / (len * kColumnBlock));
  at::parallel_for(0, p.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<PairwiseStates<acc_t>> chunks(kColumnBlock);
    RowState<acc_t> state[kColumnBlock];
    acc_t safe_max[kColumnBlock];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks;
      const int64_t c0 = (task % blocks) * kColumnBlock;
      const int64_t nc = std::min(kColumnBlock, inner - c0);
      const scalar_t* xb = x + o * len * inner + c0;  // xb[j * inner + c]
      std::fill(chunks.begin(), chunks.begin() + nc, PairwiseStates<acc_t>());
      if (p.algorithm == SoftmaxAlgorithm::Safe) {
        std::fill(safe_max, safe_max + nc, -std::numeric_limits<acc_t>::infinity());
        for (int64_t j = 0; j < len; ++j) {
          for (int64_t c = 0; c < nc; ++c) safe_max[c] = row_max(safe_max[c], static_cast<acc_t>(xb[j * inner + c]));
        }
      }
      for (int64_t start = 0; start < len; start += kColumnChunk) {
        const int64_t stop = std::min(len, start + kColumnChunk);
        if (p.algorithm == SoftmaxAlgorithm::Safe) {
          for (int64_t c = 0; c < nc; ++c) state[c] = RowState<acc_t>{safe_max[c], 0};
          for (int64_t j = start; j < stop; ++j) {
            for (int64_t c = 0; c < nc; ++c) state[c].d += rescale(static_cast<acc_t>(xb[j * inner + c]), state[c].m);
          }
        } else {
          std::fill(state, state + nc, RowState<acc_t>());
          for (int64_t j = start; j < stop; ++j) {
            for (int64_t c = 0; c < nc; ++c) push(state[c], static_cast<acc_t>(xb[j * inner + c]));
          }
        }
        for (int64_t c = 0; c < nc; ++c) chunks[c].add(state[c]);
      }
      if (p.output == SoftmaxOutput::LogSumExp) {
        for (int64_t c = 0; c < nc; ++c) {
          out[o * inner + c0 + c] = static_cast<scalar_t>(Finalizer<acc_t>(chunks[c].total(), p.output).lse());
        }
        continue;
      }
      std::vector<Finalizer<acc_t>> f;
      f.reserve(nc);
      for (int64_t c = 0; c < nc; ++c) f.emplace_back(chunks[c].total(), p.output);
      scalar_t* ob = out + o * len * inner + c0;
      for (int64_t j = 0; j < len; ++j) {
        const scalar_t* xj = xb + j * inner;
        scalar_t* oj = ob + j * inner;
        if (p.output == SoftmaxOutput::Softmax) {
          for (int64_t c = 0; c < nc; ++c) oj[c] = static_cast<scalar_t>(f[c].softmax(static_cast<acc_t>(xj[c])));
        } else {
          for (int64_t c = 0; c < nc; ++c) oj[c] = static_cast<scalar_t>(f[c].log_softmax(static_cast<acc_t>(xj[c])));
        }
      }
    }
  });
}

}  // namespace

// Called by run_softmax_op with x contiguous and out allocated; p.len >= 1 and p.outer * p.inner >= 1.
void softmax_cpu(const SoftmaxProblem& p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), "flash_attn_ext.softmax_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (p.inner == 1) {
      if constexpr (std::is_same_v<acc_t, float>) {
        softmax_rows_float<scalar_t>(p);
      } else {
        softmax_rows<scalar_t, acc_t>(p);
      }
    } else {
      softmax_columns<scalar_t, acc_t>(p);
    }
  });
}

namespace {

at::Tensor softmax_op(const at::Tensor& x, int64_t dim, c10::string_view algorithm) {
  return run_softmax_op("flash_attn_ext.softmax", x, dim, algorithm, SoftmaxOutput::Softmax, false, softmax_cpu);
}

at::Tensor log_softmax_op(const at::Tensor& x, int64_t dim, c10::string_view algorithm) {
  return run_softmax_op("flash_attn_ext.log_softmax", x, dim, algorithm, SoftmaxOutput::LogSoftmax, false,
                        softmax_cpu);
}

at::Tensor logsumexp_op(const at::Tensor& x, int64_t dim, bool keepdim) {
  return run_softmax_op("flash_attn_ext.logsumexp", x, dim, "online", SoftmaxOutput::LogSumExp, keepdim,
                        softmax_cpu);
}

}  // namespace

TORCH_LIBRARY_IMPL(flash_attn_ext, CPU, m) {
  m.impl("softmax", &softmax_op);
  m.impl("log_softmax", &log_softmax_op);
  m.impl("logsumexp", &logsumexp_op);
}

}  // namespace flash_attn_ext
