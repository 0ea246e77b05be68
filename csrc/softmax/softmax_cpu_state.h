#pragma once
// The CPU softmax kernels' numerics (softmax_cpu.cpp: rows, softmax_cpu_columns.cpp: columns).
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
#include <cmath>
#include <cstdint>
#include <limits>

#include "softmax/softmax_problem.h"

namespace flash_attn_ext {
namespace cpu_softmax {

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
  void reset() { count_ = 0; }
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

inline bool finite(float v) { return std::isfinite(v); }

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

// Reductions over a dim other than the last (inner > 1), every dtype (softmax_cpu_columns.cpp).
void softmax_columns(const SoftmaxProblem& p);

}  // namespace cpu_softmax
}  // namespace flash_attn_ext
