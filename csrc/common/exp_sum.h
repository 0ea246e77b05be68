#pragma once
// exp(t) for a term of a row's sum, fp64, t = x - max <= 0 (or NaN): terms under exp(-708) come back as 0, where exp
// gives values below 2^-1021 (subnormal from -708.4), which cannot move a sum that holds the max's own term 1 (so not
// for terms that are outputs themselves, as softmax's are). Why not CUDA's exp: it guards overflow and subnormal results
// with a branch per call, and the fp64 warp kernels are bound by instruction issue (softmax_rows.cuh says where this
// paid): k = rint(t log2(e)) by the 1.5 * 2^52 shift, r = t - k log(2) in two steps (Cody and Waite: the first exact),
// exp(r) = 1 + r + r^2 q(r) with q of degree 9 (exp_poly.h; 11 fp64 FMAs by Horner), 2^k added to the exponent, and one
// select for the cut at -708 (t = -inf lands there too; NaN passes through). t > 0 is out of its domain (+inf gives
// NaN). The fp64 log_softmax kernels of 2 vectors a lane took 481 -> 415 static SASS instructions with it (sm_90a).
// Error: within 1 ulp over the draws of tests/test_exp_sum.py (against long double expl).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/exp_poly.h"
#include "common/host_device.h"

namespace flash_attn_ext {

// Below this t every term is 0 here; above it 2^k stays normal (k >= -1022).
constexpr double kExpSumCut = -708.0;

FAE_HOST_DEVICE_INLINE double exp_sum_term(double t) {
  constexpr double kShift = 0x1.8p52;  // k lands in the low bits of t log2(e) + kShift
  const double shifted = std::fma(t, kExpConstants[0], kShift);
  uint64_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
  const double k = shifted - kShift;
  const double r = std::fma(k, -kExpConstants[1], std::fma(k, -kExpLn2Hi, t));
  double q = kExpConstants[2];
#pragma unroll
  for (int i = 3; i < kExpPolyDegree + 3; ++i) q = std::fma(q, r, kExpConstants[i]);
  const double p = std::fma(std::fma(q, r, 1.0), r, 1.0);  // in [0.7, 1.42]: adding k to its exponent stays normal
  const int k_bits = static_cast<int>(static_cast<uint32_t>(shifted_bits)) * (1 << 20);  // k in the exponent field
#if defined(__CUDA_ARCH__)
  const double result = __hiloint2double(__double2hiint(p) + k_bits, __double2loint(p));  // the upper word only
#else
  uint64_t p_bits;
  std::memcpy(&p_bits, &p, sizeof p_bits);
  p_bits += static_cast<uint64_t>(static_cast<uint32_t>(k_bits)) << 32;
  double result;
  std::memcpy(&result, &p_bits, sizeof result);
#endif
  return t < kExpSumCut ? 0.0 : result;
}

}  // namespace flash_attn_ext
