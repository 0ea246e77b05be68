#pragma once
// Unaligned short rows moved as element pairs: the warp kernel's layout for 16-bit and fp32 rows whose length
// is not a multiple of the 16-byte vector, or whose base is off the 16-byte grid.
//
// A pair is two consecutive elements on the memory's pair grid (one 4-byte word of 16-bit elements, one 8-byte
// word of fp32). A row whose first element is the second of a pair (shift d = 1, else 0) is read from the pairs
// that start at row - d, as offsets [d, len + d). Pair q = (s * kVec / 2 + i) * nt + t of thread t in a team of
// nt holds offsets 2q and 2q + 1 in v[s][2i] and v[s][2i + 1], so the team's accesses are consecutive words.
// Why pairs rather than 16-byte vectors on the memory's grid: an odd-length row spans (len + 1) / 2 pairs
// whatever its shift, so it needs no more slots than its length fills (127 fp32 elements on 16-byte vectors can
// need 33, two per lane: 1.5x slower, NOTES "s59 call 1"), and a pair costs about the element-wise layout's
// instructions for one element: these kernels issue an instruction nearly every cycle (NOTES "s60 call 2").
// Where that paid and where not: pair_rows_pay (softmax_launch.h).
// A row's first and last pair may hold an element of the neighbouring row: it is read (the same aligned word,
// so on a page the row is on) as -inf, and never written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// Word: the pair as loaded and stored; neg_inf_pair: a pair of -inf (what a pair outside the row reads as).
// 16-bit: one 4-byte word, by VecIO's pair conversions.
template <typename T> struct PairIO {
  using Word = unsigned;
  static __device__ __forceinline__ Word neg_inf_pair() { return neg_inf_vector<T>().x; }
  static __device__ __forceinline__ void unpack(Word w, float& a, float& b) {
    const float2 f = VecIO<T>::unpack2(w);
    a = f.x;
    b = f.y;
  }
  static __device__ __forceinline__ Word pack(float a, float b) { return VecIO<T>::pack2(a, b); }
};
template <> struct PairIO<float> {
  using Word = float2;
  static __device__ __forceinline__ Word neg_inf_pair() { return make_float2(-INFINITY, -INFINITY); }
  static __device__ __forceinline__ void unpack(Word w, float& a, float& b) {
    a = w.x;
    b = w.y;
  }
  static __device__ __forceinline__ Word pack(float a, float b) { return make_float2(a, b); }
};

// 1 when the element at p is the second of its pair.
template <typename T> __host__ __device__ __forceinline__ int pair_shift(const T* p) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(p) / sizeof(T)) & 1);
}

// The team's row (shift d) into v; offsets outside [d, len + d) read as -inf. nt * kN * kVec >= len + d. Every
// load is issued before any is unpacked: unpacking inside each load's branch made each load wait for the one
// before (the block kernel's shifted loads ran at half speed that way, NOTES "s59 call 1").
// kHeld: a held pointer stepped from pair to pair (held_pointer), for the many-rows instantiations only (kMany):
// H200, s96 call 3, bf16 us cold / streamed, held everywhere against indexed: softmax 65536x61 12.4 / 8.6 -> 11.9 /
// 8.3, log_softmax 131072x13 10.8 / 6.8 -> 10.6 / 6.5, but few rows lost streamed (the general bound's kernels went
// from 40-43 registers to 27-30): softmax 4097x97 2.5 -> 2.7, 2049x201 2.6 -> 2.7-2.8. Held in kMany alone (312 ->
// 272 SASS instructions, 32 -> 30 registers), s96 call 4: softmax 65536x61 8.6 -> 8.4 us streamed, log_softmax
// 65536x61 8.7 -> 8.3, 131072x13 6.8 -> 6.4, fp16 softmax 65536x61 8.5 -> 8.4; 4097x97 2.5 as before.
template <typename T, int kN, bool kHeld = false>
__device__ __forceinline__ void load_pairs(const T* row, int64_t len, int d, int nt, int t,
                                           acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  using A = acc_t<T>;
  using Word = typename PairIO<T>::Word;
  constexpr int kPairs = RowsTraits<T>::kVec / 2;
  const int rem = remaining(len + d, 2 * static_cast<int64_t>(t));  // offsets left from this thread's first pair
  const Word* base = reinterpret_cast<const Word*>(row - d) + t;
  const Word* ptr = kHeld ? held_pointer(base) : base;
  Word w[kN][kPairs];
#pragma unroll
  for (int s = 0; s < kN; ++s)
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int q = (s * kPairs + i) * nt;  // pairs past this thread's first
      w[s][i] = PairIO<T>::neg_inf_pair();
      if (2 * q < rem) w[s][i] = __ldg(kHeld ? ptr : base + q);
      if constexpr (kHeld) ptr = held_pointer(ptr + nt);
    }
#pragma unroll
  for (int s = 0; s < kN; ++s)
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int q = (s * kPairs + i) * nt;
      A b;
      PairIO<T>::unpack(w[s][i], v[s][2 * i], b);
      v[s][2 * i + 1] = 2 * q + 1 < rem ? b : neg_inf<A>();
    }
  if (t == 0 && d != 0) v[0][0] = neg_inf<A>();
}

// v's elements at offsets [d, len + d) into the row (shift d): whole pairs as one store, a row's edge element
// alone. kHeld: as load_pairs'.
template <typename T, int kN, bool kHeld = false>
__device__ __forceinline__ void store_pairs(T* row, int64_t len, int d, int nt, int t,
                                            const acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  using Word = typename PairIO<T>::Word;
  constexpr int kPairs = RowsTraits<T>::kVec / 2;
  const int rem = remaining(len + d, 2 * static_cast<int64_t>(t));
  Word* base = reinterpret_cast<Word*>(row - d) + t;
  Word* ptr = kHeld ? held_pointer(base) : base;  // st.global by __stwb: held, it lost its address space
  T* elems = row - d + 2 * static_cast<int64_t>(t);
  const bool lead_outside = t == 0 && d != 0;  // this thread's first offset (0) is the previous row's
  // st.global by __stwb where the pointer is held (it lost its address space), a plain store otherwise
  const auto put = [](auto* at, auto value) {
    if constexpr (kHeld) {
      __stwb(at, value);
    } else {
      *at = value;
    }
  };
#pragma unroll
  for (int s = 0; s < kN; ++s)
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int q = (s * kPairs + i) * nt;
      // held: the stepped pointer; otherwise indexed from the row's base, as before kHeld
      Word* pair_at = kHeld ? ptr : base + q;
      T* elem_at = kHeld ? reinterpret_cast<T*>(ptr) : elems + 2 * q;
      if constexpr (kHeld) ptr = held_pointer(ptr + nt);
      if (2 * q >= rem) continue;
      const bool first = s != 0 || i != 0 || !lead_outside;
      const bool second = 2 * q + 1 < rem;
      if (first && second) {
        put(pair_at, PairIO<T>::pack(v[s][2 * i], v[s][2 * i + 1]));
      } else if (first) {
        put(elem_at, from_acc<T>(v[s][2 * i]));
      } else if (second) {
        put(elem_at + 1, from_acc<T>(v[s][2 * i + 1]));
      }
    }
}

}  // namespace softmax
}  // namespace flash_attn_ext
