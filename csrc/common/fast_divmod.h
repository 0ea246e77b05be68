#pragma once
// Division by a divisor fixed for a whole launch, as a multiply-high, an add and a shift. A 32-bit division by a
// runtime divisor is ~20 dependent instructions on the GPU; persistent attention blocks decode several of them
// for every work item they take (which m block, batch and kv head; which query position a packed row is).
#include <cstdint>

#include "common/host_device.h"

namespace flash_attn_ext {

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 (round-up method, Granlund and Montgomery 1994): with
// shift = ceil(log2 d) and multiplier = floor(2^32 (2^shift - d) / d) + 1 < 2^32,
// n / d = (mulhi(n, multiplier) + n) >> shift, and the sum stays below 2^32 because mulhi(n, m) < n < 2^31.
struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;  // d = 1: mulhi(n, 1) = 0, so the quotient is n
  uint32_t shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t(1) << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }

  FAE_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t(n) * multiplier) >> 32);
#endif
    return (hi + n) >> shift;
  }
  // n / d and n % d
  FAE_HOST_DEVICE uint32_t divmod(uint32_t n, uint32_t& rem) const {
    const uint32_t q = div(n);
    rem = n - q * divisor;
    return q;
  }
};

}  // namespace flash_attn_ext

