// CPU softmax / log_softmax / logsumexp reduced over a dim other than the last (inner > 1: element j of column
// c at x[(o * len + j) * inner + c]). One task per (outer index, block of kColumnBlock columns), each streaming
// the len rows of its block once per pass, so every access runs along contiguous columns.
//
// Speed: blocks of float, half and bfloat16 run their loops across the block's columns through ChunkMath
// (softmax_cpu_math.h: one element per column, compiled per x86 instruction set); a block with a non-finite
// column max (+-inf, NaN; "online": any chunk's) is redone by the scalar code, which carries the rules of
// softmax_cpu_state.h, before anything of it is written. Double blocks are scalar.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <type_traits>
#include <vector>

#include "softmax/softmax_cpu_math.h"
#include "softmax/softmax_cpu_state.h"

namespace flash_attn_ext {
namespace cpu_softmax {
namespace {

// Blocks narrower than one AVX-512 vector of floats stay scalar: 7 columns ran 2-4x slower through the
// column loops than the scalar code (2-core CPU machine, session 31).
constexpr int64_t kColumnVectorMin = 16;

// One block: columns [c0, c0 + nc) of outer index o.
struct ColumnBlock {
  int64_t o, c0, nc;
};

// Per task: the chunk states of a block's columns, reused from block to block.
template <typename acc_t>
struct ColumnScratch {
  PairwiseStates<acc_t> chunks[kColumnBlock];
  RowState<acc_t> state[kColumnBlock];
  acc_t m[kColumnBlock], s[kColumnBlock], scale[kColumnBlock];
  float tile[kColumnChunk * kColumnBlock];      // the float path: 16-bit input rows widened
  float out_tile[kColumnChunk * kColumnBlock];  // and their outputs before narrowing
};

template <typename scalar_t, typename acc_t>
void column_block_scalar(const SoftmaxProblem& p, ColumnBlock b, ColumnScratch<acc_t>& w) {
  const int64_t len = p.len, inner = p.inner, nc = b.nc;
  const scalar_t* xb = p.x.const_data_ptr<scalar_t>() + b.o * len * inner + b.c0;  // xb[j * inner + c]
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  for (int64_t c = 0; c < nc; ++c) w.chunks[c].reset();
  if (p.algorithm == SoftmaxAlgorithm::Safe) {
    std::fill(w.m, w.m + nc, -std::numeric_limits<acc_t>::infinity());
    for (int64_t j = 0; j < len; ++j) {
      for (int64_t c = 0; c < nc; ++c) w.m[c] = row_max(w.m[c], static_cast<acc_t>(xb[j * inner + c]));
    }
  }
  for (int64_t start = 0; start < len; start += kColumnChunk) {
    const int64_t stop = std::min(len, start + kColumnChunk);
    if (p.algorithm == SoftmaxAlgorithm::Safe) {
      for (int64_t c = 0; c < nc; ++c) w.state[c] = RowState<acc_t>{w.m[c], 0};
      for (int64_t j = start; j < stop; ++j) {
        for (int64_t c = 0; c < nc; ++c) w.state[c].d += rescale(static_cast<acc_t>(xb[j * inner + c]), w.state[c].m);
      }
    } else {
      std::fill(w.state, w.state + nc, RowState<acc_t>());
      for (int64_t j = start; j < stop; ++j) {
        for (int64_t c = 0; c < nc; ++c) push(w.state[c], static_cast<acc_t>(xb[j * inner + c]));
      }
    }
    for (int64_t c = 0; c < nc; ++c) w.chunks[c].add(w.state[c]);
  }
  if (p.output == SoftmaxOutput::LogSumExp) {
    for (int64_t c = 0; c < nc; ++c) {
      out[b.o * inner + b.c0 + c] = static_cast<scalar_t>(Finalizer<acc_t>(w.chunks[c].total(), p.output).lse());
    }
    return;
  }
  std::vector<Finalizer<acc_t>> f;
  f.reserve(nc);
  for (int64_t c = 0; c < nc; ++c) f.emplace_back(w.chunks[c].total(), p.output);
  scalar_t* ob = out + b.o * len * inner + b.c0;
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

// The block through ChunkMath, kColumnChunk rows at a time (16-bit rows widened into a float tile first);
// false, with nothing written, when a column max is not finite.
template <typename scalar_t>
bool column_block_float(const SoftmaxProblem& p, const ChunkMath& math, ColumnBlock b, ColumnScratch<float>& w) {
  constexpr bool kInPlace = std::is_same_v<scalar_t, float>;
  const int64_t len = p.len, inner = p.inner, nc = b.nc;
  const scalar_t* xb = p.x.const_data_ptr<scalar_t>() + b.o * len * inner + b.c0;
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  // Rows [start, stop) of the block as floats: the tile and its row stride.
  const auto rows = [&](int64_t start, int64_t stop) -> std::pair<const float*, int64_t> {
    if constexpr (kInPlace) {
      return {xb + start * inner, inner};
    } else {
      for (int64_t j = start; j < stop; ++j) math.widen(xb + j * inner, w.tile + (j - start) * kColumnBlock, nc);
      return {w.tile, kColumnBlock};
    }
  };
  // The chunk's sums of exp(x - w.m) per column, added to the columns' states.
  const auto add_chunk = [&](const float* t, int64_t ld, int64_t count) {
    std::fill(w.s, w.s + nc, 0.f);
    math.sum_exp_cols(t, ld, count, w.m, w.s, nc);
    for (int64_t c = 0; c < nc; ++c) w.chunks[c].add(RowState<float>{w.m[c], w.s[c]});
  };
  for (int64_t c = 0; c < nc; ++c) w.chunks[c].reset();
  const bool online = p.algorithm != SoftmaxAlgorithm::Safe;
  std::fill(w.m, w.m + nc, -std::numeric_limits<float>::infinity());
  for (int64_t start = 0; start < len; start += kColumnChunk) {  // online: max and sum of each chunk in turn
    const int64_t stop = std::min(len, start + kColumnChunk);
    const auto [t, ld] = rows(start, stop);
    if (online) std::fill(w.m, w.m + nc, -std::numeric_limits<float>::infinity());
    math.max_cols(t, ld, stop - start, w.m, nc);
    if (online) {
      if (!std::all_of(w.m, w.m + nc, finite)) return false;
      add_chunk(t, ld, stop - start);
    }
  }
  if (!online) {  // safe: the sums against the max over all rows
    if (!std::all_of(w.m, w.m + nc, finite)) return false;
    for (int64_t start = 0; start < len; start += kColumnChunk) {
      const int64_t stop = std::min(len, start + kColumnChunk);
      const auto [t, ld] = rows(start, stop);
      add_chunk(t, ld, stop - start);
    }
  }
  for (int64_t c = 0; c < nc; ++c) {
    const Finalizer<float> f(w.chunks[c].total(), p.output);
    if (p.output == SoftmaxOutput::LogSumExp) out[b.o * inner + b.c0 + c] = static_cast<scalar_t>(f.lse());
    w.m[c] = f.m;
    w.scale[c] = p.output == SoftmaxOutput::Softmax ? f.inv_d : f.log_d;
  }
  if (p.output == SoftmaxOutput::LogSumExp) return true;
  scalar_t* ob = out + b.o * len * inner + b.c0;
  const auto cols = p.output == SoftmaxOutput::Softmax ? math.exp_scale_cols : math.log_shift_cols;
  for (int64_t start = 0; start < len; start += kColumnChunk) {
    const int64_t stop = std::min(len, start + kColumnChunk);
    const auto [t, ld] = rows(start, stop);
    if constexpr (kInPlace) {
      cols(t, ld, ob + start * inner, inner, stop - start, w.m, w.scale, nc);
    } else {  // into the output tile, then narrowed row by row
      cols(t, ld, w.out_tile, kColumnBlock, stop - start, w.m, w.scale, nc);
      for (int64_t j = start; j < stop; ++j) math.narrow(w.out_tile + (j - start) * kColumnBlock, ob + j * inner, nc);
    }
  }
  return true;
}

template <typename scalar_t>
void softmax_columns_typed(const SoftmaxProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const ChunkMath math = chunk_math_for_cpu();
  const int64_t blocks = (p.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, 32768 / (p.len * kColumnBlock));
  at::parallel_for(0, p.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    auto w = std::make_unique<ColumnScratch<acc_t>>();
    for (int64_t task = begin; task < end; ++task) {
      const int64_t c0 = (task % blocks) * kColumnBlock;
      const ColumnBlock b{task / blocks, c0, std::min(kColumnBlock, p.inner - c0)};
      if constexpr (std::is_same_v<acc_t, float>) {
        if (b.nc >= kColumnVectorMin && column_block_float<scalar_t>(p, math, b, *w)) continue;
      }
      column_block_scalar<scalar_t, acc_t>(p, b, *w);
    }
  });
}

}  // namespace

void softmax_columns(const SoftmaxProblem& p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), "flash_attn_ext.softmax_cpu", [&] {
    softmax_columns_typed<scalar_t>(p);
  });
}

}  // namespace cpu_softmax
}  // namespace flash_attn_ext
