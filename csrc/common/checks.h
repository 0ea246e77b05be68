#pragma once
// Argument checks shared by every op. Each message starts with the Python-facing op name and names the
// offending argument, so a user sees what to fix without reading this code.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace flash_attn_ext {

// Wraps a possibly negative `dim` into [0, ndim); a 0-d tensor has one implicit dim (as in torch).
inline int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t rank = ndim == 0 ? 1 : ndim;
  TORCH_CHECK_INDEX(dim >= -rank && dim < rank, op, ": dim=", dim, " is out of range for a tensor of rank ",
                    ndim, " (expected a value in [", -rank, ", ", rank - 1, "])");
  return dim < 0 ? dim + rank : dim;
}

inline void check_floating(const char* op, const char* arg, const at::Tensor& t) {
  const auto st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16, op, ": ",
                   arg, " must be float32, float64, float16 or bfloat16, got ", st);
}

}  // namespace flash_attn_ext
