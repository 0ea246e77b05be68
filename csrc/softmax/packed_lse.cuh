#pragma once
// logsumexp's reduction of a 16-bit row group held raw (GroupLoads: 16-byte vectors, -inf where the row has no
// element): the max on packed pairs, then the sum of exp(x - ref) by the fused exponential, each element widened once.
// For the row kernels' logsumexp instantiations (softmax_rows.cuh), and their softmax and log_softmax rows held raw on
// the memory's grid beyond kMaxVpt vectors a lane (packed_store.cuh writes those rows' outputs). Why: they are bound
// by instruction issue on 16-bit rows (ncu, s82 call 1, bf16 32768x2000 on the block kernel: issue slots 71 % busy,
// DRAM 59 %), and widening a group before its max cost per element a -inf default, a conversion, a compare, a subtract
// and a multiply besides the exponential and the add (56 SASS instructions per bf16 vector against 40 here).
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
// does, so the finalize rules see the same (m, d). One partial sum per vector: independent adds in flight. The vectors
// from kHead on are summed only where `tail`: the caller's word that some lane may hold elements there (else they are
// -inf vectors); one branch, uniform over a team. A test per vector instead cost rows it skipped little or nothing of
// (H200, s85 calls 1-2, bf16 32768x1537, one dead vector a lane: 28.1 -> 29.4 us streamed), even where such rows ran a
// second copy of the loop without the tests.
template <typename T, int kN, int kHead = kN>
__device__ __forceinline__ float packed_sum_exp(const uint4 (&raw)[kN], float ref, bool tail = true) {
  const FusedExp2 e = FusedExp2::at<T>(ref);
  float d[kN];
  const auto sum_vector = [&](int s) {
    const unsigned w[4] = {raw[s].x, raw[s].y, raw[s].z, raw[s].w};
    d[s] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = VecIO<T>::unpack2(w[i]);
      d[s] += e(f.x);
      d[s] += e(f.y);
    }
  };
#pragma unroll
  for (int s = 0; s < kHead; ++s) sum_vector(s);
#pragma unroll
  for (int s = kHead; s < kN; ++s) d[s] = 0.0f;
  if (tail) {
#pragma unroll
    for (int s = kHead; s < kN; ++s) sum_vector(s);
  }
#pragma unroll
  for (int s = 1; s < kN; ++s) d[0] += d[s];
  return d[0] * e.correction;
}

// A 16-bit row group held raw on the memory's 16-byte grid (load_group_shifted's layout, raw): vector s of thread t
// (of nt) covers elements o - d + [0, kVec) of the row, o = (s * nt + t) * kVec, d = the row's misalignment; vectors
// wholly outside the row are -inf vectors and never read, and an edge vector (the row's first and last) is read whole
// (its 16 bytes lie in one 16-byte granule that holds an element of the row: load_group_shifted says why that is safe)
// with the elements outside the row set to -inf; kFold: a last granule past the team's slots is folded into lane 0's
// first vector (FoldedGranule). For logsumexp of unaligned 16-bit rows on the warp kernel, at any team width and
// vectors a lane that hold the row's own vectors (lse_rows_on_grid), and for softmax and log_softmax ones at 8 vectors
// a lane (packed_store.cuh): the row then takes the aligned rows' packed reduction (packed_max, packed_sum_exp) at the
// aligned rows' vectors.
template <typename T, int kN, bool kFold> struct ShiftedRawLoads {
  static constexpr int kVec = RowsTraits<T>::kVec;
  uint4 raw[kN];
  __device__ __forceinline__ void load(const T* row, int64_t len, int d, int nt, int t) {
    const ShiftedBounds b(len, 0, d);
    const T* group = row - d;  // 16-byte aligned
    const int stride = nt * kVec;
    // Every load is issued before any edge is masked (load_group_shifted: a branch between them serialized them).
    load_raw_shifted<T>(group, b, nt, t, raw);
    [[maybe_unused]] FoldedGranule<T> past;
    if constexpr (kFold) past = FoldedGranule<T>(group, b, nt * kN * kVec, t);
    const unsigned ninf = neg_inf_vector<T>().x & 0xffffu;
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      const int o = t * kVec + s * stride;
      // an edge vector: in the row in part (those wholly outside it are -inf vectors already)
      if (o + kVec > b.lo && o < b.hi && (o < b.lo || o + kVec > b.hi)) {
        unsigned w[4] = {raw[s].x, raw[s].y, raw[s].z, raw[s].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (!b.inside(o + 2 * i)) w[i] = (w[i] & 0xffff0000u) | ninf;
          if (!b.inside(o + 2 * i + 1)) w[i] = (w[i] & 0x0000ffffu) | (ninf << 16);
        }
        raw[s] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    if constexpr (kFold) {  // the granule past the team's slots: its row elements take lane 0's first places
      const unsigned e[4] = {past.raw.x, past.raw.y, past.raw.z, past.raw.w};
      unsigned w[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const unsigned folded = (2 * i < past.count ? 0x0000ffffu : 0u) | (2 * i + 1 < past.count ? 0xffff0000u : 0u);
        w[i] = (e[i] & folded) | (w[i] & ~folded);
      }
      raw[0] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
};

}  // namespace softmax
}  // namespace flash_attn_ext
