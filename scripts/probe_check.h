#pragma once
// Error check for the standalone probes under scripts/ (built with nvcc alone, without torch, so the
// library's FAE_CUDA_CHECK, which reports through c10, is not available): print and exit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// Worst relative error of softmax rows 0, rows / 2 + 1 and rows - 1 of y against an fp64 softmax of x, every
// element (host copies; to_f widens an element to float). NaN sticks.
template <typename T, typename ToFloat>
double softmax_rows_max_rel_err(const std::vector<T>& hx, const std::vector<T>& hy, int64_t rows, int64_t len,
                                ToFloat to_f) {
  double worst = 0;
  for (int64_t r : {int64_t(0), rows / 2 + 1, rows - 1}) {
    double m = -INFINITY, s = 0;
    for (int64_t e = 0; e < len; ++e) m = std::max(m, double(to_f(hx[r * len + e])));
    for (int64_t e = 0; e < len; ++e) s += std::exp(double(to_f(hx[r * len + e])) - m);
    for (int64_t e = 0; e < len; ++e) {
      const double want = std::exp(double(to_f(hx[r * len + e])) - m) / s;
      const double err = std::fabs(double(to_f(hy[r * len + e])) - want) / want;
      if (!(err <= worst)) worst = err;
    }
  }
  return worst;
}
