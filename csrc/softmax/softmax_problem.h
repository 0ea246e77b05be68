#pragma once
// Host-side description of one softmax-family call, shared by the CPU and CUDA kernels.
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include "softmax/softmax_kinds.h"

namespace flash_attn_ext {

// The contiguous input viewed as (outer, len, inner); the reduction runs over len. Rows are contiguous
// when inner == 1. `out` is contiguous: x's shape, or (outer, inner) with `dim` dropped for LogSumExp.
struct SoftmaxProblem {
  const char* op;
  at::Tensor x;
  at::Tensor out;
  int64_t outer;
  int64_t len;
  int64_t inner;
  SoftmaxAlgorithm algorithm;
  SoftmaxOutput output;
};

using SoftmaxRunner = void (*)(const SoftmaxProblem&);

// Validates the arguments, allocates the output and calls `run` unless the result is already known
// (empty tensors, LogSumExp over an empty dim).
at::Tensor run_softmax_op(const char* op, const at::Tensor& x, int64_t dim, c10::string_view algorithm,
                          SoftmaxOutput output, bool keepdim, SoftmaxRunner run);

}  // namespace flash_attn_ext
