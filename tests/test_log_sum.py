"""csrc/common/log_sum.h on the host: the fp64 logarithm that fp64 log_softmax rows on whole warps of 2 vectors a
lane take for their row's sum (Epilogue's kSumLog, csrc/softmax/online_math.cuh). The header is plain C++ (fma, a
table of 128 entries), so it compiles alone; its error in units in the last place against long double logl (x86: a
64-bit significand) over sums in [1, 2^31) drawn several ways, the table's cell edges, and its special values. The
device runs the same code (hardware fma, the same results); the GPU tests cover it there through log_softmax against
fp64."""
import platform

import pytest
from host_program import run_host_program

# -ffp-contract=off: the host compiles the expressions as written. nvcc contracts products into fmas on the device,
# which changes nothing here: the one product outside the explicit fmas, e * kLn2Hi, is exact.
PROGRAM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/log_sum.h"
#include "host_ulp.h"

namespace {

double ulp_error(double d) { return ulp_distance(flash_attn_ext::log_sum(d), logl(static_cast<long double>(d))); }

}  // namespace

int main() {
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Worst<ulp_error> near_one, mantissas, wide, edges;
  for (int k = 0; k < 2000000; ++k) {
    near_one.take(1.0 + std::ldexp(unit(rng), -static_cast<int>(rng() % 52)));  // d - 1 from 2^-52 to 1
    mantissas.take(1.0 + unit(rng));                                            // [1, 2)
    wide.take(std::ldexp(1.0 + unit(rng), static_cast<int>(rng() % 31)));        // [1, 2^31)
  }
  for (int i = 0; i <= 128; ++i) {  // the table's cell edges and their neighbours, at several exponents
    for (int e = 0; e < 31; e += 5) {
      const double edge = std::ldexp(1.0 + i / 128.0, e);
      edges.take(edge);
      edges.take(std::nextafter(edge, 0.0) >= 1.0 ? std::nextafter(edge, 0.0) : edge);
      edges.take(std::nextafter(edge, INFINITY));
    }
  }
  std::printf("max ulp error: near 1 %.3f (at %.17g), [1, 2) %.3f (at %.17g), [1, 2^31) %.3f (at %.17g), "
              "cell edges %.3f (at %.17g)\n",
              near_one.err, near_one.at, mantissas.err, mantissas.at, wide.err, wide.at, edges.err, edges.at);
  const double log1 = flash_attn_ext::log_sum(1.0);
  const bool specials = log1 == 0.0 && !std::signbit(log1) && std::isnan(flash_attn_ext::log_sum(NAN)) &&
                        flash_attn_ext::log_sum(INFINITY) == INFINITY &&
                        flash_attn_ext::log_sum(0.5) == std::log(0.5);
  std::printf("special values %s\n", specials ? "ok" : "WRONG");
  const double worst = std::fmax(std::fmax(near_one.err, mantissas.err), std::fmax(wide.err, edges.err));
  return specials && worst <= 1.0 ? 0 : 1;
}
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the reference is long double logl, 64-bit significand on x86 only")
def test_log_sum_within_one_ulp(tmp_path):
    run = run_host_program(tmp_path, "log_sum_check", PROGRAM, flags=("-ffp-contract=off",))
    assert run.returncode == 0, run.stdout
    assert "special values ok" in run.stdout, run.stdout
