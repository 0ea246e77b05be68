#pragma once
// logsumexp's reduction of a 16-bit row group held raw (GroupLoads: 16-byte vectors, -inf where the row has no
// element): the max on packed pairs, then the sum of exp(x - ref) by the fused exponential, each element widened once.
// For the row kernels' logsumexp instantiations (softmax_rows.cuh). Why: they are bound by instruction issue on 16-bit
// rows (ncu, s82 call 1, bf16 32768x2000 on the block kernel: issue slots 71 % busy, DRAM 59 %), and widening a group
// before its max cost per element a -inf default, a conversion, a compare, a subtract and a multiply besides the
// exponential and the add (56 SASS instructions per bf16 vector against 40 here).
#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// The larger of each pair (T's own compare: HMNMX2). A NaN against a number gives the number, as FMNMX does; the sum
// still sees the NaN.
template <typename T> __device__ __forceinline__ unsigned max_pairs(unsigned a, unsigned b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return bit_cast<unsigned>(__hmax2(bit_cast<__nv_bfloat162>(a), bit_cast<__nv_bfloat162>(b)));
  } else {
    static_assert(std::is_same_v<T, __half>, "16-bit types only");
    return bit_cast<unsigned>(__hmax2(bit_cast<__half2>(a), bit_cast<__half2>(b)));
  }
}

// The group's largest element, widened.
template <typename T, int kN> __device__ __forceinline__ float packed_max(const uint4 (&raw)[kN]) {
  unsigned w[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
  for (int s = 1; s < kN; ++s) {
    w[0] = max_pairs<T>(w[0], raw[s].x);
    w[1] = max_pairs<T>(w[1], raw[s].y);
    w[2] = max_pairs<T>(w[2], raw[s].z);
    w[3] = max_pairs<T>(w[3], raw[s].w);
  }
  const float2 f = VecIO<T>::unpack2(max_pairs<T>(max_pairs<T>(w[0], w[1]), max_pairs<T>(w[2], w[3])));
  return fmaxf(f.x, f.y);
}

// Sum of exp(x - ref) over the group's elements (-inf ones add 0); an infinite ref is taken as 0, as ShiftedExp
// does, so the finalize rules see the same (m, d). One partial sum per vector: independent adds in flight.
template <typename T, int kN> __device__ __forceinline__ float packed_sum_exp(const uint4 (&raw)[kN], float ref) {
  const FusedExp2 e = FusedExp2::at<T>(ref);
  float d[kN];
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    const unsigned w[4] = {raw[s].x, raw[s].y, raw[s].z, raw[s].w};
    d[s] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = VecIO<T>::unpack2(w[i]);
      d[s] += e(f.x);
      d[s] += e(f.y);
    }
  }
#pragma unroll
  for (int s = 1; s < kN; ++s) d[0] += d[s];
  return d[0] * e.correction;
}

}  // namespace softmax
}  // namespace flash_attn_ext
