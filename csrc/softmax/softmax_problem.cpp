#include "softmax/softmax_problem.h"

#include <ATen/ops/empty.h>

#include <limits>

#include "common/checks.h"

namespace flash_attn_ext {
namespace {

SoftmaxAlgorithm parse_algorithm(const char* op, c10::string_view algorithm) {
  if (algorithm == "auto") return SoftmaxAlgorithm::Auto;
  if (algorithm == "safe") return SoftmaxAlgorithm::Safe;
  if (algorithm == "online") return SoftmaxAlgorithm::Online;
  TORCH_CHECK_VALUE(false, op, ": algorithm must be 'auto', 'safe' or 'online', got '", algorithm, "'");
}

}  // namespace

at::Tensor run_softmax_op(const char* op, const at::Tensor& x, int64_t dim, c10::string_view algorithm,
                          SoftmaxOutput output, bool keepdim, SoftmaxRunner run) {
  check_floating(op, "x", x);
  const int64_t d = wrap_dim(op, dim, x.dim());
  SoftmaxProblem p{op, x.contiguous(), at::Tensor(), 1, 1, 1, parse_algorithm(op, algorithm), output};
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d) p.outer *= x.size(i);
    if (i == d) p.len = x.size(i);
    if (i > d) p.inner *= x.size(i);
  }
  if (output == SoftmaxOutput::LogSumExp) {
    std::vector<int64_t> shape = x.sizes().vec();
    if (x.dim() > 0) {
      if (keepdim) shape[d] = 1;
      else shape.erase(shape.begin() + d);
    }
    p.out = at::empty(shape, x.options());
    if (p.len == 0) {
      p.out.fill_(-std::numeric_limits<double>::infinity());
      return p.out;
    }
  } else {
    p.out = at::empty(x.sizes(), x.options());
  }
  if (p.out.numel() == 0 || p.x.numel() == 0) return p.out;
  run(p);
  return p.out;
}

}  // namespace flash_attn_ext
