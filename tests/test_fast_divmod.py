"""csrc/common/fast_divmod.h on the host: the multiply-high division that the Hopper attention kernel decodes its
work items and packed rows with (a wrong quotient there reads another head's rows). The header is plain C++, so
it compiles alone; the GPU tests cover the device side through the kernel."""
from host_program import run_host_program

# Every n < 2^31 and 1 <= d < 2^31 is in the header's contract; checked here: all n < 20000 for d < 3000, the
# edges (0, d - 1, d, d + 1, 2^30, 2^31 - 1) around every power of two, and 3e6 pseudo-random pairs.
PROGRAM = r"""
#include "common/fast_divmod.h"
#include <cstdio>
using flash_attn_ext::FastDivmod;
static long bad = 0, checks = 0;
static void check(uint32_t d, uint32_t n) {
  const FastDivmod f(d);
  uint32_t r;
  const uint32_t q = f.divmod(n, r);
  ++checks;
  if (q != n / d || r != n % d) {
    if (bad < 5) std::printf("d=%u n=%u: got %u r %u\n", d, n, q, r);
    ++bad;
  }
}
int main() {
  for (uint32_t d = 1; d < 3000; ++d)
    for (uint32_t n = 0; n < 20000; ++n) check(d, n);
  for (int s = 0; s < 31; ++s)
    for (int k = -2; k <= 2; ++k) {
      const long long d = (1LL << s) + k;
      if (d < 1 || d >= 0x80000000LL) continue;
      const uint32_t ns[] = {0u, uint32_t(d - 1), uint32_t(d), uint32_t(d + 1), 0x40000000u, 0x7fffffffu};
      for (uint32_t n : ns)
        if (n < 0x80000000u) check(uint32_t(d), n);
    }
  unsigned long long x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 3000000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t n = uint32_t(x >> 33);                       // < 2^31
    uint32_t d = uint32_t((x >> 2) & 0x7fffffffu);
    if (i % 3 == 0) d = 1 + uint32_t(x >> 40) % 1000;         // small divisors: heads, groups, m blocks
    if (d == 0) d = 1;
    check(d, n);
  }
  std::printf("%ld checks, %ld wrong\n", checks, bad);
  return bad != 0;
}
"""


def test_fast_divmod_matches_division(tmp_path):
    run = run_host_program(tmp_path, "fast_divmod_check", PROGRAM)
    assert run.returncode == 0, run.stdout
    assert " 0 wrong" in run.stdout and not run.stdout.startswith("0 checks"), run.stdout
