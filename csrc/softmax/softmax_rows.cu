// Launchers of the row-cached kernels: map (vectors per thread, aligned) onto the compiled instantiations. Instantiated
// per dtype: warp kernel for 1, 2, 4 (and 8 where RowsTraits allows, for 16-bit rows of logsumexp and of softmax and
// log_softmax, aligned and on the memory's grid: kLseWarpMaxVpl, and for fp64 rows: kDoubleWarpMaxVpl) vectors per lane
// (logsumexp of unaligned 16-bit and fp32 rows on the memory's grid too: lse_rows_on_grid; 16-bit softmax and
// log_softmax of unaligned rows at 1 vector, fp32 log_softmax at 2 and fp64 softmax and log_softmax at 2 and 4 once
// more for many rows, on a compile-time team of 32 lanes and at 4 of 16 too: many_scalar_rows_compiled,
// many_rows_fixed_lanes), block kernel for RowsTraits' small and large vectors per
// thread, each aligned and scalar (and at the large size the block kernel fixed to logsumexp, kLse).
#include <type_traits>

#include <c10/util/Exception.h>

#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "softmax/softmax_rows.cuh"

namespace flash_attn_ext {
namespace softmax {
namespace {

template <typename T> using RowsKernel = void (*)(RowsParams<T>);

// fp32 scalar rows of 8 vectors per lane (32 values a lane) run the general instantiation only, element-wise and
// in pairs: specialized, it took 80 registers against 64 (3 blocks per SM, not 4) and ran 16384x1023 at 39.6-40.3 us
// cold against 37.8 (H200, s60 call 2).
template <typename T> constexpr bool scalar_rows_general_only(int vpl) { return std::is_same_v<T, float> && vpl == 8; }

// fixed: the instantiation specialized for softmax or log_softmax with the max-then-sum reduction
// (softmax_warp_rows_kernel's kFixed), for aligned and scalar rows, except where scalar_rows_general_only; for
// logsumexp, aligned rows and 16-bit and fp32 rows on the memory's grid (lse_rows_on_grid; launch_warp_rows). Why
// scalar rows too: those kernels issue an instruction nearly every cycle (ncu, fp32 65536x127: 0.87 issued warps per
// scheduler against torch's 0.72), so the run-time output and reduction choices show. H200, s60 call 2, softmax, us
// cold / streamed, general -> specialized: bf16 65536x127 22.1 / 19.2 -> 20.3 / 17.5, 16384x1023 35.7 / 34.3 -> 33.5 /
// 32.0; fp32 65536x127 26.4 / 23.9 -> 24.2 / 22.2, 65536x97 26.8 / 23.2 -> 24.6 / 21.3.
// Logsumexp of unaligned rows on the memory's grid (lse_rows_on_grid), with the granule past the team's slots folded
// in where a row's shift can reach it (GridRows::Folded).
template <typename T, int kVpl> RowsKernel<T> grid_lse_kernel(bool fold) {
  return fold ? softmax_warp_rows_kernel<T, kVpl, false, FixedRows::SafeLogSumExp, false, GridRows::Folded>
              : softmax_warp_rows_kernel<T, kVpl, false, FixedRows::SafeLogSumExp, false, GridRows::Grid>;
}

// Softmax and log_softmax of unaligned rows on the memory's grid (a plan's grid=1: heuristic_plan's grid_softmax_rows,
// or forced): the folded instantiation only, for rows that need the fold and rows that do not (16-bit types:
// grid_softmax_compiled).
template <typename T, int kVpl> RowsKernel<T> grid_softmax_kernel(FixedRows fixed) {
  if constexpr (grid_softmax_compiled<T>) {
    if (fixed == FixedRows::SafeSoftmax) {
      return softmax_warp_rows_kernel<T, kVpl, false, FixedRows::SafeSoftmax, false, GridRows::Folded>;
    }
    if (fixed == FixedRows::SafeLogSoftmax) {
      return softmax_warp_rows_kernel<T, kVpl, false, FixedRows::SafeLogSoftmax, false, GridRows::Folded>;
    }
  }
  return nullptr;
}

template <typename T, int kVpl, bool kAligned> RowsKernel<T> warp_kernel_of(FixedRows fixed, bool fold) {
  switch (fixed) {
    case FixedRows::SafeSoftmax: return softmax_warp_rows_kernel<T, kVpl, kAligned, FixedRows::SafeSoftmax>;
    case FixedRows::SafeLogSoftmax: return softmax_warp_rows_kernel<T, kVpl, kAligned, FixedRows::SafeLogSoftmax>;
    case FixedRows::SafeLogSumExp:  // unaligned: rows on the memory's grid only (launch_warp_rows)
      if constexpr (kAligned) {
        return softmax_warp_rows_kernel<T, kVpl, true, FixedRows::SafeLogSumExp>;
      } else if constexpr (lse_rows_on_grid<T>(SoftmaxOutput::LogSumExp)) {
        return grid_lse_kernel<T, kVpl>(fold);
      } else {
        return nullptr;
      }
    default: return softmax_warp_rows_kernel<T, kVpl, kAligned>;
  }
}

// The element-pair instantiation for the op that `fixed` names, where pairs paid (pair_rows_pay; the launcher
// asks only there), or the general one (scalar_rows_general_only).
template <typename T, int kVpl> RowsKernel<T> pair_kernel(FixedRows fixed) {
  constexpr bool kSoftmax = pair_rows_pay<T>(kVpl, false);
  constexpr bool kLog = pair_rows_pay<T>(kVpl, true);
  if constexpr (scalar_rows_general_only<T>(kVpl)) {
    return softmax_warp_rows_kernel<T, kVpl, false, FixedRows::General, true>;
  } else {
    if constexpr (kSoftmax) {
      if (fixed == FixedRows::SafeSoftmax) {
        return softmax_warp_rows_kernel<T, kVpl, false, FixedRows::SafeSoftmax, true>;
      }
    }
    if constexpr (kLog) {
      if (fixed == FixedRows::SafeLogSoftmax) {
        return softmax_warp_rows_kernel<T, kVpl, false, FixedRows::SafeLogSoftmax, true>;
      }
    }
    return nullptr;
  }
}

// Softmax or log_softmax (kFixed) of many rows (many_scalar_rows_compiled) on teams of `lanes` lanes: unaligned ones
// element-wise or in pairs where pairs paid, the instantiation bound to many_scalar_rows_min_blocks, for fp64 the one
// of that team width (many_rows_fixed_lanes); aligned ones (16-byte vectors) for fp64 only (aligned_many_rows).
// nullptr where none is compiled.
template <typename T, int kVpl, FixedRows kFixed, bool kAligned>
RowsKernel<T> many_rows_kernel_of(bool pairs, int lanes) {
  constexpr bool kLog = kFixed == FixedRows::SafeLogSoftmax;
  if constexpr (kAligned && !aligned_many_rows<T>(kVpl)) {
    return nullptr;
  } else if constexpr (many_scalar_rows_compiled<T>(kVpl, kLog) && many_rows_fixed_lanes<T>()) {
    if (pairs) return nullptr;
    if (lanes == 32) return softmax_warp_rows_kernel<T, kVpl, kAligned, kFixed, false, GridRows::Off, true, 32>;
    if constexpr (kVpl == 4) {
      if (lanes == 16) return softmax_warp_rows_kernel<T, kVpl, kAligned, kFixed, false, GridRows::Off, true, 16>;
    }
  } else if constexpr (many_scalar_rows_compiled<T>(kVpl, kLog)) {
    if constexpr (pair_rows_pay<T>(kVpl, kLog)) {
      if (pairs) return softmax_warp_rows_kernel<T, kVpl, false, kFixed, true, GridRows::Off, true>;
    }
    if (!pairs) return softmax_warp_rows_kernel<T, kVpl, false, kFixed, false, GridRows::Off, true>;
  }
  return nullptr;
}

// many_rows_kernel_of for the op that `fixed` names; nullptr for the other outputs.
template <typename T, int kVpl, bool kAligned> RowsKernel<T> many_rows_kernel(FixedRows fixed, bool pairs, int lanes) {
  if (fixed == FixedRows::SafeSoftmax) {
    return many_rows_kernel_of<T, kVpl, FixedRows::SafeSoftmax, kAligned>(pairs, lanes);
  }
  if (fixed == FixedRows::SafeLogSoftmax) {
    return many_rows_kernel_of<T, kVpl, FixedRows::SafeLogSoftmax, kAligned>(pairs, lanes);
  }
  return nullptr;
}

template <typename T, int kVpl>
RowsKernel<T> warp_kernel(bool aligned, bool pairs, FixedRows fixed, bool on_grid, bool fold, int many_lanes) {
  if constexpr (kVpl <= RowsTraits<T>::kMaxVpt) {
    if constexpr (aligned_many_rows<T>(kVpl)) {
      if (aligned && many_lanes > 0) {
        if (const RowsKernel<T> k = many_rows_kernel<T, kVpl, true>(fixed, false, many_lanes)) return k;
      }
    }
    if (aligned) return warp_kernel_of<T, kVpl, true>(fixed, false);
    if (on_grid && (fixed == FixedRows::SafeSoftmax || fixed == FixedRows::SafeLogSoftmax)) {
      return grid_softmax_kernel<T, kVpl>(fixed);
    }
    if constexpr (many_scalar_rows_compiled<T>(kVpl, false) || many_scalar_rows_compiled<T>(kVpl, true)) {
      if (many_lanes > 0 && !on_grid) {
        if (const RowsKernel<T> k = many_rows_kernel<T, kVpl, false>(fixed, pairs, many_lanes)) return k;
      }
    }
    if (pairs) return pair_kernel<T, kVpl>(fixed);
    if constexpr (scalar_rows_general_only<T>(kVpl)) {
      // logsumexp reaches an unaligned kernel fixed to it only on the memory's grid (launch_warp_rows)
      if (fixed == FixedRows::SafeLogSumExp) return grid_lse_kernel<T, kVpl>(fold);
      return softmax_warp_rows_kernel<T, kVpl, false>;
    } else {
      return warp_kernel_of<T, kVpl, false>(fixed, fold);
    }
  } else if constexpr (std::is_same_v<T, double> && kVpl <= kDoubleWarpMaxVpl) {
    // fp64 rows of 8 vectors a lane (257-512 doubles, every output and algorithm): element by element on the general
    // instantiation, aligned or not. Why: the aligned instantiations (16-byte vectors, fixed outputs) ran the same rows
    // 1.16-1.31x slower than the element-wise one did one element off (H200, s102 call 3, us cold, aligned -> one off;
    // torch): softmax 16384x512 39.6 -> 34.2 (35.0), 32768x400 63.6-64.9 -> 51.6 (53.5-55.1), log_softmax 16384x512
    // 41.8 -> 34.3 (34.3), 32768x400 68.4-68.9 -> 52.5 (52.4-52.8). At 4 vectors a lane the aligned ones were level or
    // faster (65536x256 66.4 against 67.4, 65536x128 34.0 against 38.1).
    return softmax_warp_rows_kernel<T, kVpl, false>;
  } else if constexpr (kVpl <= kLseWarpMaxVpl<T>) {  // 16-bit: logsumexp, and softmax / log_softmax as vectors
    if (!aligned && on_grid && (fixed == FixedRows::SafeSoftmax || fixed == FixedRows::SafeLogSoftmax)) {
      return grid_softmax_kernel<T, kVpl>(fixed);
    }
    if (fixed == FixedRows::SafeLogSumExp) {
      return aligned ? softmax_warp_rows_kernel<T, kVpl, true, FixedRows::SafeLogSumExp>
                     : grid_lse_kernel<T, kVpl>(fold);  // ShiftedRawLoads
    }
    if (aligned && fixed == FixedRows::SafeSoftmax) {
      return softmax_warp_rows_kernel<T, kVpl, true, FixedRows::SafeSoftmax>;
    }
    if (aligned && fixed == FixedRows::SafeLogSoftmax) {
      return softmax_warp_rows_kernel<T, kVpl, true, FixedRows::SafeLogSoftmax>;
    }
    return nullptr;
  } else {
    return nullptr;
  }
}

template <typename T>
RowsKernel<T> select_warp_kernel(int vpl, bool aligned, bool pairs, FixedRows fixed, bool on_grid, bool fold,
                                 int many_lanes) {
  RowsKernel<T> k = nullptr;
  switch (vpl) {
    case 1: k = warp_kernel<T, 1>(aligned, pairs, fixed, on_grid, fold, many_lanes); break;
    case 2: k = warp_kernel<T, 2>(aligned, pairs, fixed, on_grid, fold, many_lanes); break;
    case 4: k = warp_kernel<T, 4>(aligned, pairs, fixed, on_grid, fold, many_lanes); break;
    case 8: k = warp_kernel<T, 8>(aligned, pairs, fixed, on_grid, fold, many_lanes); break;
    default: break;
  }
  TORCH_CHECK(k != nullptr, "flash_attn_ext softmax: no warp-per-row kernel for ", vpl, " vectors per lane");
  return k;
}

// lse: the instantiation fixed to logsumexp of whole rows (kLse), compiled at the large size only (what "auto" takes).
template <typename T> RowsKernel<T> select_block_kernel(int vpt, bool aligned, bool lse = false) {
  constexpr int kSmall = RowsTraits<T>::kSmallVpt;
  constexpr int kLarge = RowsTraits<T>::kMaxVpt;
  if (lse && vpt == kLarge) {
    return aligned ? softmax_block_rows_kernel<T, kLarge, true, true>
                   : softmax_block_rows_kernel<T, kLarge, false, true>;
  }
  if (vpt == kSmall) {
    return aligned ? softmax_block_rows_kernel<T, kSmall, true> : softmax_block_rows_kernel<T, kSmall, false>;
  }
  if (vpt == kLarge) {
    return aligned ? softmax_block_rows_kernel<T, kLarge, true> : softmax_block_rows_kernel<T, kLarge, false>;
  }
  TORCH_CHECK(false, "flash_attn_ext softmax: no block kernel for ", vpt, " vectors per thread");
}

}  // namespace

template <typename T>
void launch_warp_rows(const RowsParams<T>& p, int vpl, bool aligned, bool on_grid, bool fold, bool many_rows, int grid,
                      int threads, cudaStream_t stream) {
  // logsumexp: unaligned rows held element-wise take the general instantiation.
  const bool fixed_lse = aligned || on_grid;
  const FixedRows fixed = p.online                                 ? FixedRows::General
                          : p.output == SoftmaxOutput::Softmax    ? FixedRows::SafeSoftmax
                          : p.output == SoftmaxOutput::LogSoftmax ? FixedRows::SafeLogSoftmax
                          : fixed_lse                             ? FixedRows::SafeLogSumExp
                                                                  : FixedRows::General;
  // Element pairs (pair_group.cuh) for unaligned softmax and log_softmax rows where they paid (pair_rows_pay), when
  // the output's pairs lie on the input's and every row's pairs fit (an odd-length row's shift alternates: count
  // one for it).
  const int64_t held = (int64_t(1) << p.lanes_log2) * vpl * RowsTraits<T>::kVec;
  const bool pairs = !aligned && !on_grid && fixed != FixedRows::General && fixed != FixedRows::SafeLogSumExp &&
                     pair_rows_pay<T>(vpl, fixed == FixedRows::SafeLogSoftmax) &&
                     pair_shift(p.x) == pair_shift(p.y) && held >= p.len + (p.len % 2 == 1 ? 1 : pair_shift(p.x));
  // fp64's unaligned many-rows kernels only for rows that fill the lanes' always-live loads (many_rows_always_live)
  const int lanes = 1 << p.lanes_log2;
  const int many_lanes =
      many_rows && p.len >= int64_t(lanes) * many_rows_always_live<T>(aligned, lanes, vpl) ? lanes : 0;
  launch_kernel(select_warp_kernel<T>(vpl, aligned, pairs, fixed, on_grid, fold, many_lanes), grid, threads, 0, stream,
                LaunchKind::Plain, p);
}

template <typename T> int block_rows_blocks_per_sm(int vpt, bool aligned, int threads, size_t smem_bytes) {
  return resident_blocks_per_sm(select_block_kernel<T>(vpt, aligned), threads, smem_bytes);
}

template <typename T>
void launch_block_rows(const RowsParams<T>& p, int vpt, bool aligned, int threads, int grid, cudaStream_t stream) {
  const size_t smem = aligned ? static_cast<size_t>(threads) * p.smem_vecs * 16 : 0;
  const bool lse = p.output == SoftmaxOutput::LogSumExp && p.chunks == 1 && !p.online && smem == 0;
  const RowsKernel<T> k = select_block_kernel<T>(vpt, aligned, lse);
  allow_dynamic_smem(k, smem);
  // Split-row blocks (chunks > 1) wait for each other: a cooperative launch.
  launch_kernel(k, grid, threads, smem, stream, p.chunks == 1 ? LaunchKind::Plain : LaunchKind::Cooperative, p);
}

#define FAE_INSTANTIATE_ROWS(T)                                                                              \
  template void launch_warp_rows<T>(const RowsParams<T>&, int, bool, bool, bool, bool, int, int, cudaStream_t); \
  template int block_rows_blocks_per_sm<T>(int, bool, int, size_t);                                          \
  template void launch_block_rows<T>(const RowsParams<T>&, int, bool, int, int, cudaStream_t);
FAE_INSTANTIATE_ROWS(float)
FAE_INSTANTIATE_ROWS(double)
FAE_INSTANTIATE_ROWS(__half)
FAE_INSTANTIATE_ROWS(__nv_bfloat16)
#undef FAE_INSTANTIATE_ROWS

}  // namespace softmax
}  // namespace flash_attn_ext
