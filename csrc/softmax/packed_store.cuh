#pragma once
// Softmax and log_softmax of a 16-bit row held raw on the memory's grid (ShiftedRawLoads, packed_lse.cuh), reduced by
// packed_max and packed_sum_exp as logsumexp's rows are: the outputs a vector at a time, each vector widened once more
// here, so a lane keeps its raw vectors (8 in 32 registers) instead of their floats (64). For the warp kernel's 16-bit
// rows on the memory's grid beyond kMaxVpt vectors a lane (rows of 1025-2048 elements). Softmax pays a second
// exponential an element for it (the sum's FusedExp2 again). Why: held as floats, the kernel took 109-180 registers and
// 1384 SASS instructions (the aligned rows' 80 and 872) and lost to the block kernel on bf16 (H200, s98 call 2, us
// cold: 32768x1500 57.7 -> 70.6, 65536x1283 107.0 -> 131.0).
#include "softmax/packed_lse.cuh"

namespace flash_attn_ext {
namespace softmax {

// Writes the outputs of the first `live` raw vectors of a lane (load_raw_shifted's layout: vector s of thread t of nt
// at group offset o = (s * nt + t) * kVec, the group 16-byte aligned, d elements before the row): softmax
// exp(x - m) / sum as e(x) * e.correction * epi.scale (e: the sum's FusedExp2, whose correction the row's scale takes),
// log_softmax as epi maps it (Epilogue::log_out).
// Elements inside the row only: a whole vector as one 16-byte store where the output row lies on the input's grid,
// edge vectors element by element; kFold: the first `count` places of lane 0's first vector hold the row's elements of
// the granule past the team's slots (FoldedGranule), and go back there.
template <typename T, int kN, bool kFold>
__device__ __forceinline__ void store_raw_shifted(T* row, int64_t len, int d, int nt, int t, const uint4 (&raw)[kN],
                                                  const Epilogue<T, true>& epi, const FusedExp2& e, int live) {
  constexpr int kVec = RowsTraits<T>::kVec;
  const float scale = e.correction * epi.scale;
  const ShiftedBounds b(len, 0, d);
  const bool same_grid = misalignment(row) == d;
  T* group = row - d;
  const int stride = nt * kVec;
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    if (s >= live) break;
    const int o = t * kVec + s * stride;
    if (o + kVec <= b.lo || o >= b.hi) continue;  // no element of the row (lane 0's first has one where len > 0)
    float y[kVec];
    VecIO<T>::unpack(raw[s], y);
#pragma unroll
    for (int j = 0; j < kVec; ++j) y[j] = epi.softmax ? e(y[j]) * scale : epi.log_out(y[j]);
    if (same_grid && o >= b.lo && o + kVec <= b.hi) {
      store16(group + o, VecIO<T>::pack(y));
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if (b.inside(o + j)) group[o + j] = from_acc<T>(y[j]);
      }
    }
    if constexpr (kFold) {
      if (s == 0) {
        const int past = nt * kN * kVec;
        const int count = FoldedGranule<T>::count_of(b, past, t);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          if (j < count) group[past + j] = from_acc<T>(y[j]);
        }
      }
    }
  }
}

}  // namespace softmax
}  // namespace flash_attn_ext
