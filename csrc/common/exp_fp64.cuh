#pragma once
// exp(t) in fp64 without a branch, for the softmax kernels' fp64 exponentials.
//
// Why: CUDA's exp(double) takes a branch to a slow path for |t| >= ~708 (overflow, subnormal results, infinities,
// NaN). In a kernel that holds 8-16 values a lane, ptxas wraps each exponential in its own convergence region
// (BSSY / BSYNC, sm_90a SASS of the fp64 warp kernels), so their ~15 dependent DFMAs run one exponential after
// another, not interleaved. Here the whole range takes one path: the argument is clamped once (one compare and two
// selects), and the scaling by 2^k is split into two exact powers of two, which covers subnormal results and
// overflow alike.
//
// Method: k = rint(t log2(e)) by the 1.5 * 2^52 shifter (k lands in the low word), r = t - k ln2 in two FMAs
// (ln2 as a head and a tail), e^r = 1 + r (1 + r q(r)) with q of degree 9 on |r| <= ln2 / 2 (a Remez fit of
// (e^r - 1 - r) / r^2, levelled error 1.03e-16), then e^r 2^k1 2^k2 with k1 = floor(k / 2), k2 = k - k1.
// Accuracy (host emulation of the same operations against long double expl, 5-20 M random arguments a range over
// [-746, 746], subnormal results included): at most 0.96 ulp; CUDA documents 1 ulp for exp (its own sequence,
// emulated the same way, reads 0.89). Special values as exp: exp(-inf) = 0, exp(+inf) = +inf, NaN stays NaN,
// results under 2^-1075 round to 0 and over DBL_MAX to +inf.
#include <cstdint>

namespace flash_attn_ext {

__device__ __forceinline__ double pow2_of(int k) {  // 2^k for -1022 <= k <= 1023
  return __hiloint2double((k + 1023) << 20, 0);
}

__device__ __forceinline__ double exp_branchless(double t) {
  // |t| > 746 gives 0 or +inf whatever the excess; NaN fails the compare and stays NaN through every step.
  const double tc = fabs(t) > 746.0 ? copysign(746.0, t) : t;
  constexpr double kShifter = 0x1.8p52;
  const double shifted = fma(tc, 0x1.71547652b82fep0, kShifter);  // log2(e)
  const double kd = shifted - kShifter;
  const int k = __double2loint(shifted);
  double r = fma(kd, -0x1.62e42fefa39efp-1, tc);  // ln2, head
  r = fma(kd, -0x1.abc9e3b39803fp-56, r);         // ln2, tail
  double q = 0x1.af636016ad090p-26;
  q = fma(q, r, 0x1.2891a967c5643p-22);
  q = fma(q, r, 0x1.71ddf6979e248p-19);
  q = fma(q, r, 0x1.a019b8eec7db9p-16);
  q = fma(q, r, 0x1.a01a01b016384p-13);
  q = fma(q, r, 0x1.6c16c17893b37p-10);
  q = fma(q, r, 0x1.111111110f7eep-7);
  q = fma(q, r, 0x1.5555555553d4fp-5);
  q = fma(q, r, 0x1.5555555555558p-3);
  q = fma(q, r, 0x1.0000000000001p-1);
  const double er = fma(fma(q, r, 1.0), r, 1.0);
  // |k| <= 1077, so both halves are normal powers of two; the first product is exact, the second rounds once.
  const int k1 = k >> 1;
  return er * pow2_of(k1) * pow2_of(k - k1);
}

}  // namespace flash_attn_ext
