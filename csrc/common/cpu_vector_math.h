#pragma once
// Float math for the CPU kernels, written so that loops over it vectorize under the default flags (no
// -ffast-math): branch-free, float compares replaced by integer masks (GCC does not if-convert float compares
// under the default -ftrapping-math, which would leave the loop scalar). The kernels compile their loops once
// per instruction set (cpu_isa.h) and these helpers inline into each.
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__GNUC__)
#define FAE_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define FAE_ALWAYS_INLINE inline
#endif

#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define FAE_HAS_BUILTIN_BIT_CAST 1
#endif
#endif

namespace flash_attn_ext {

template <typename To, typename From>
FAE_ALWAYS_INLINE To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
#ifdef FAE_HAS_BUILTIN_BIT_CAST
  return __builtin_bit_cast(To, from);  // no address-taken temporaries: keeps the callers vectorizable
#else
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
#endif
}

// exp(x) for x <= 0 (x = s - max) (Cephes expf: range reduction by ln 2, degree-6 polynomial, exponent by bit
// arithmetic; <= 1.4 ulp). -inf -> 0, NaN -> NaN. Subnormal results as torch's: 2^n is applied as 2^(n + 64)
// (exact, the product stays normal) times 2^-64 (one rounding into the subnormal range), and only x below
// ln(2^-150) = -103.97 gives 0. The clamp and the flush are integer masks, not float selects.
FAE_ALWAYS_INLINE float exp_nonpositive(float x) {
  constexpr int32_t kLoBits = static_cast<int32_t>(0xc2cff1b4u);  // -103.972076f, ~ln(2^-150)
  constexpr int32_t kInfBits = 0x7f800000;
  const int32_t xb = bit_cast<int32_t>(x);
  const int32_t mag = xb & 0x7fffffff;
  // all ones where x < -103.972076 (-inf included, NaN excluded), else 0
  const int32_t below = -static_cast<int32_t>((xb < 0) & (mag > (kLoBits & 0x7fffffff)) & (mag <= kInfBits));
  const float xc = bit_cast<float>((below & kLoBits) | (~below & xb));
  const float fx = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round(xc / ln 2), in [-150, 0]
  const float r = (xc - fx * 0.693359375f) - fx * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.f;
  const float pow2n_64 = bit_cast<float>((static_cast<int32_t>(fx) + 64 + 127) << 23);  // 2^(n + 64)
  return bit_cast<float>(bit_cast<int32_t>((y * pow2n_64) * 0x1p-64f) & ~below);
}

// Max that propagates NaN, for scalar code (a NaN score or lse must not be mistaken for "no key"; a NaN chunk
// max must reach the row's).
inline float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

// Order keys for a NaN-propagating max in integer arithmetic (float compares keep a loop scalar): flipping the
// magnitude bits of negative floats makes their bit patterns order like the values as int32; NaN (of either
// sign) maps above every number, and back to a NaN.
constexpr int32_t kMaxKeyNan = 0x7fffffff;
FAE_ALWAYS_INLINE int32_t max_key(float v) {
  constexpr int32_t kInfBits = 0x7f800000, kMagnitude = 0x7fffffff;
  const int32_t b = bit_cast<int32_t>(v);
  const int32_t nan_mask = -static_cast<int32_t>((b & kMagnitude) > kInfBits);
  return ((b ^ ((b >> 31) & kMagnitude)) & ~nan_mask) | (nan_mask & kMaxKeyNan);
}

FAE_ALWAYS_INLINE float from_max_key(int32_t k) { return bit_cast<float>(k < 0 ? k ^ 0x7fffffff : k); }

// NaN-propagating max of two floats, branch-free.
FAE_ALWAYS_INLINE float nan_max2(float a, float b) {
  const int32_t ka = max_key(a), kb = max_key(b);
  return from_max_key(ka > kb ? ka : kb);
}

// Max of s[0, n) that propagates NaN (-inf for n == 0).
FAE_ALWAYS_INLINE float nan_max_of(const float* s, int64_t n) {
  int32_t best = max_key(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; ++j) {
    const int32_t key = max_key(s[j]);
    best = best > key ? best : key;
  }
  return from_max_key(best);
}

// bfloat16 <-> float in integer arithmetic (the loops vectorize): widening is exact; narrowing rounds to
// nearest even and maps NaN to 0x7fc0, bit for bit as c10::BFloat16's conversions (whose NaN test is a float
// compare, which keeps a loop scalar).
FAE_ALWAYS_INLINE float bf16_bits_to_float(uint16_t b) { return bit_cast<float>(static_cast<uint32_t>(b) << 16); }

FAE_ALWAYS_INLINE uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = bit_cast<uint32_t>(f);
  const uint32_t nan = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((nan & 0x7fc0u) | (~nan & rounded));
}

}  // namespace flash_attn_ext
