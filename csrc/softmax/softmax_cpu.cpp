// CPU softmax / log_softmax / logsumexp over (outer, len, inner), the layout of SoftmaxProblem: the rows
// (inner == 1, one task per row) and the ops' CPU registration; the numerics in softmax_cpu_state.h, the
// columns in softmax_cpu_columns.cpp.
//
// Speed: rows of float, half and bfloat16 (float accumulation) run on float chunks of kRowChunk elements
// through ChunkMath (softmax_cpu_math.h), loops compiled per x86 instruction set (common/cpu_isa.h) with a
// vectorizable exp (common/cpu_vector_math.h, <= 1.4 ulp); a chunk ("safe": the row) whose max is not finite
// (+-inf, NaN) takes the scalar code, which carries the rules of softmax_cpu_state.h. Rows of one chunk go
// through ChunkMath a block of rows per call (short_rows_float). Double rows are scalar.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/cpu_vector_math.h"
#include "softmax/softmax_cpu_math.h"
#include "softmax/softmax_cpu_state.h"
#include "softmax/softmax_problem.h"

namespace flash_attn_ext {
namespace cpu_softmax {
namespace {

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

// ---- rows, float accumulation: chunk math by ChunkMath (softmax_cpu_math.h) ------------------------------

// Rows [begin, end) of one chunk each (len <= kRowChunk), of float, half or bfloat16, in blocks of rows:
// ChunkMath's row loops reduce and write a block in two or three calls, the same arithmetic as the chunk path
// of softmax_rows_float, which gets each row whose max is not finite (any_row(row) rewrites it whole).
template <typename scalar_t, typename AnyRow>
void short_rows_float(const SoftmaxProblem& p, const ChunkMath& math, int64_t begin, int64_t end,
                      const AnyRow& any_row) {
  constexpr bool kInPlace = std::is_same_v<scalar_t, float>;
  constexpr int64_t kBlockElems = 2048;  // in and out floats of a block stay in L1 (16 KB)
  const scalar_t* x = p.x.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  const int64_t len = p.len;
  const int64_t block_rows = std::max<int64_t>(1, kBlockElems / len);
  std::vector<float> in_buf(kInPlace ? 0 : block_rows * len), out_buf(kInPlace ? 0 : block_rows * len);
  std::vector<float> m(block_rows), d(block_rows), param(block_rows);
  for (int64_t first = begin; first < end; first += block_rows) {
    const int64_t rows = std::min(block_rows, end - first);
    const float* xf;
    float* yf = nullptr;  // the block's float outputs (none for logsumexp, whose out holds one per row)
    if constexpr (kInPlace) {
      xf = x + first * len;
      if (p.output != SoftmaxOutput::LogSumExp) yf = out + first * len;
    } else {
      math.widen(x + first * len, in_buf.data(), rows * len);
      xf = in_buf.data();
      yf = out_buf.data();
    }
    math.reduce_rows(xf, p.output == SoftmaxOutput::Softmax ? yf : nullptr, rows, len, m.data(), d.data());
    bool special = false;
    for (int64_t i = 0; i < rows; ++i) {
      if (!finite(m[i])) {
        special = true;
        param[i] = 0.f;
        continue;
      }
      const Finalizer<float> f(RowState<float>{m[i], d[i]}, p.output);
      if (p.output == SoftmaxOutput::LogSumExp) out[first + i] = static_cast<scalar_t>(f.lse());
      param[i] = p.output == SoftmaxOutput::Softmax ? f.inv_d : f.log_d;
    }
    if (p.output == SoftmaxOutput::Softmax) {
      math.scale_rows(yf, rows, len, param.data());
    } else if (p.output == SoftmaxOutput::LogSoftmax) {
      math.log_shift_rows(xf, yf, rows, len, m.data(), param.data());
    }
    if constexpr (!kInPlace) {
      if (p.output != SoftmaxOutput::LogSumExp) math.narrow(yf, out + first * len, rows * len);
    }
    if (special) {
      for (int64_t i = 0; i < rows; ++i) {
        if (!finite(m[i])) any_row(first + i);
      }
    }
  }
}

// Rows of float, half or bfloat16: each kRowChunk-element chunk converted to float once per pass (16-bit
// types by ChunkMath's conversions; float input is used in place), reduced and written by ChunkMath;
// special values take the scalar code (see top).
// Softmax rows keep each chunk's exponentials as the reduction computes them, relative to the max they were
// taken at (float rows in their output, 16-bit rows in a float row of scratch), and rescale them at the end:
// one exponential per element.
template <typename scalar_t>
void softmax_rows_float(const SoftmaxProblem& p) {
  constexpr bool kInPlace = std::is_same_v<scalar_t, float>;
  const ChunkMath math = chunk_math_for_cpu();
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
    // One row, any length.
    const auto any_row = [&](int64_t row) {
      const scalar_t* xr = x + row * len;
      scalar_t* outr = out + row * len;
      float* const terms = kInPlace ? reinterpret_cast<float*>(outr) : scratch.data();
      // Chunk [start, start + n) of the row as floats.
      const auto chunk = [&](int64_t start, int64_t n) -> const float* {
        if constexpr (kInPlace) {
          return xr + start;
        } else {
          math.widen(xr + start, in_buf, n);
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
          m = nan_max(m, cm);
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
        return;
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
        if constexpr (!kInPlace) math.narrow(o, outr + start, n);
      }
    };
    if (len > kRowChunk) {
      for (int64_t row = begin; row < end; ++row) any_row(row);
    } else {
      short_rows_float<scalar_t>(p, math, begin, end, any_row);
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

}  // namespace
}  // namespace cpu_softmax

// Called by run_softmax_op with x contiguous and out allocated; p.len >= 1 and p.outer * p.inner >= 1.
void softmax_cpu(const SoftmaxProblem& p) {
  if (p.inner != 1) return cpu_softmax::softmax_columns(p);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), "flash_attn_ext.softmax_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if constexpr (std::is_same_v<acc_t, float>) {
      cpu_softmax::softmax_rows_float<scalar_t>(p);
    } else {
      cpu_softmax::softmax_rows<scalar_t, acc_t>(p);
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
