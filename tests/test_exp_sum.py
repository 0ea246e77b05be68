"""csrc/common/exp_sum.h on the host: the fp64 exponential that fp64 log_softmax rows on the warp kernels take for
their sum's terms (sum_rescaled's kSumExp, csrc/softmax/online_math.cuh). The header is plain C++ (fma, 12 constants),
so it compiles alone; its error in units in the last place against long double expl (x86: a 64-bit significand) over
t in [-708, 0] drawn several ways, the reduction's cell edges (t near k log(2) / 2), and its special values: 0 below
the cut and at -inf, 1 at 0, NaN through. The device runs the same code (hardware fma, the same results); the GPU tests
cover it there through log_softmax against fp64."""
import platform

import pytest
from host_program import run_host_program

PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <random>

#include "common/exp_sum.h"
#include "host_ulp.h"

namespace {

double ulp_error(double t) { return ulp_distance(flash_attn_ext::exp_sum_term(t), expl(static_cast<long double>(t))); }

}  // namespace

int main() {
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Worst<ulp_error> small, medium, wide, edges;
  for (int k = 0; k < 2000000; ++k) {
    small.take(-std::ldexp(unit(rng), -static_cast<int>(rng() % 60)));  // -t from 2^-60 to 1
    medium.take(-40.0 * unit(rng));
    wide.take(flash_attn_ext::kExpSumCut * unit(rng));  // [-708, 0]
  }
  const double ln2 = std::log(2.0);
  for (int k = 0; k <= 2042; ++k) {  // t = -k log(2) / 2 and its neighbours: where the rounding of k flips
    const double t = -k * ln2 / 2;
    if (t < flash_attn_ext::kExpSumCut) break;
    edges.take(t);
    edges.take(std::nextafter(t, 0.0));
    if (std::nextafter(t, -INFINITY) >= flash_attn_ext::kExpSumCut) edges.take(std::nextafter(t, -INFINITY));
  }
  std::printf("max ulp error: -t in [2^-60, 1] %.3f (at %.17g), [-40, 0] %.3f (at %.17g), [-708, 0] %.3f (at %.17g), "
              "cell edges %.3f (at %.17g)\n",
              small.err, small.at, medium.err, medium.at, wide.err, wide.at, edges.err, edges.at);
  using flash_attn_ext::exp_sum_term;
  const bool specials = exp_sum_term(0.0) == 1.0 && exp_sum_term(-0.0) == 1.0 && exp_sum_term(-INFINITY) == 0.0 &&
                        std::isnan(exp_sum_term(NAN)) && exp_sum_term(-708.5) == 0.0 && exp_sum_term(-1e300) == 0.0 &&
                        exp_sum_term(-708.0) > 0.0 && std::isnormal(exp_sum_term(-708.0));
  std::printf("special values %s\n", specials ? "ok" : "WRONG");
  const double worst = std::fmax(std::fmax(small.err, medium.err), std::fmax(wide.err, edges.err));
  return specials && worst <= 1.0 ? 0 : 1;
}
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the reference is long double expl, 64-bit significand on x86 only")
def test_exp_sum_term_within_one_ulp(tmp_path):
    run = run_host_program(tmp_path, "exp_sum_check", PROGRAM, flags=("-ffp-contract=off",))
    assert run.returncode == 0, run.stdout
    assert "special values ok" in run.stdout, run.stdout
