#pragma once
// log(d) for a row's sum d of exp(x - max), fp64: d >= 1 (the max's own term is 1) unless the row is poisoned (NaN) or
// infinite. Why not CUDA's log: after the sum's shuffles a row's logarithm is one serial chain per team, and nothing
// else of the row can run beside it; fp64 log_softmax on whole warps ran 3-4 us slower with it than with a float __logf
// in its place (H200, s104 call 7). Here the chain is short: the mantissa's top 7 bits pick c_i near 1 / m
// (log_table.h), r = m * c_i - 1 (one FMA, r in [-2^-53, 2^-7): c_i may round low), log1p(r) by a degree-9 series
// evaluated in Estrin's form (depth 4), and log(d) = e * log(2) - log(c_i) + log1p(r), whose first two terms (from the
// table and the exponent, ready before r) add exactly (two-sum). d outside [1, 2^1024) takes CUDA's (host: std::) log.
// Error: within 1 ulp over the 6 million draws of tests/test_log_sum.py (against long double logl; a two-sum of the
// last addition left it there: r's and log1p(r)'s roundings are the rest), as CUDA documents its log.
// Used where it paid: fp64 log_softmax rows on compile-time whole warps of 2 vectors a lane (softmax_rows.cuh; the
// kernels' Epilogue, online_math.cuh, says by how much).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/host_device.h"
#include "common/log_table.h"

namespace flash_attn_ext {

FAE_HOST_DEVICE_INLINE double log_sum(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  const int biased = static_cast<int>(bits >> 52);  // sign bit included: negative d lands above 0x7ff
  if (biased < 1023 || biased >= 0x7ff) return std::log(d);  // d < 1, inf, NaN, negative
  const int e = biased - 1023;
  const uint64_t fraction = bits & ((uint64_t(1) << 52) - 1);
  const int i = static_cast<int>(fraction >> 45);  // the top 7 bits: kLogTableEntries
  const uint64_t m_bits = fraction | (uint64_t(1023) << 52);
  double m;  // d's mantissa, in [1, 2)
  std::memcpy(&m, &m_bits, sizeof m);
  const double c = kLogTable[i][0];
  const double r = std::fma(m, c, -1.0);  // exact for i = 0 (c = 1); else within one rounding of m * c - 1
  // log1p(r) = r + r^2 * q(r), q(r) = sum over j of (-1)^(j+1) r^j / (j + 2), j = 0..7, by Estrin
  const double r2 = r * r;
  const double r4 = r2 * r2;
  const double q01 = std::fma(r, 1.0 / 3.0, -0.5);
  const double q23 = std::fma(r, 1.0 / 5.0, -0.25);
  const double q45 = std::fma(r, 1.0 / 7.0, -1.0 / 6.0);
  const double q67 = std::fma(r, 1.0 / 9.0, -0.125);
  const double q03 = std::fma(r2, q23, q01);
  const double q47 = std::fma(r2, q67, q45);
  const double q = std::fma(r4, q47, q03);
  const double log1p_r = std::fma(r2, q, r);
  // e * log(2) - log(c): hi + err exactly (two-sum), the small parts beside them
  const double a = e * kLn2Hi;  // exact: kLn2Hi has 40 significant bits, e < 2^10
  const double b = kLogTable[i][1];
  const double hi = a + b;
  const double b_part = hi - a;
  const double err = (a - (hi - b_part)) + (b - b_part);
  const double lo = std::fma(static_cast<double>(e), kLn2Lo, kLogTable[i][2]) + err;
  return hi + (lo + log1p_r);
}

}  // namespace flash_attn_ext
