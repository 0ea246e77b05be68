#pragma once
// Row kernels that keep the row on chip (inner == 1), so each element is read from DRAM once and written
// once:
//   softmax_warp_rows_kernel   short rows, one team of lanes per row, row in registers;
//   softmax_block_rows_kernel  one block per chunk of a row, chunk in registers (+ shared memory); with one
//                              chunk per row it is block-per-row, with several it is the split-row kernel.
// Both compute every thread's local max first and keep exp(x - local max) in registers, so softmax costs
// one exponential per element whichever reduction runs:
//   safe   (online == false): max reduction, then sum reduction of the terms against the row max;
//   online (online == true):  one reduction of (local max, local sum) states with the merge rule.
#include "common/grid_dependency.cuh"
#include "softmax/online_math.cuh"
#include "softmax/packed_lse.cuh"
#include "softmax/packed_store.cuh"
#include "softmax/pair_group.cuh"
#include "softmax/split_exchange.cuh"

namespace flash_attn_ext {
namespace softmax {

// A team's row held in v (kVpl vectors of kVec values per lane, -inf where the row has no element): the row's reduction
// across the team's `lanes` lanes (xor-shuffles) and, unless the output is logsumexp, the epilogue, which leaves the
// outputs in v. kFast: the sum's terms by the 16-bit fast exponential (ShiftedExp). Every thread's local max comes
// first and exp(x - local max) stays in v, so softmax costs one exponential per element whichever reduction runs.
// live: a lane's leading vectors that can hold elements (sum_rescaled); the others are neither summed nor normalized.
// kSumLog: the epilogue's log d by log_sum (fp64; Epilogue says where it pays). kSumExp: the sum's terms by
// exp_sum_term (fp64 log_softmax under the max-then-sum reduction: the terms only enter the sum, against the row max).
template <typename T, int kVpl, bool kFast, bool kGuarded = false, bool kSumLog = false, bool kSumExp = false>
__device__ __forceinline__ OnlineState<acc_t<T>> team_row(acc_t<T> (&v)[kVpl][RowsTraits<T>::kVec], int lanes,
                                                          SoftmaxOutput output, bool online, int live = kVpl) {
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  const A local_max = max_of(v);
  // The terms are taken against the lane's own max (online) or the row max (safe).
  const A ref = online ? local_max : warp_allreduce(local_max, MaxOp{}, lanes);
  static_assert(!kSumExp || !kGuarded, "exp_sum_term has no guard");
  const A local_sum = sum_rescaled<kFast, kGuarded, kSumExp>(v, ref, output == SoftmaxOutput::Softmax, live);
  OnlineState<A> row_state;
  if (online) {
    row_state = warp_allreduce(OnlineState<A>{ref, local_sum}, MergeOp{}, lanes);
  } else {
    row_state = {ref, warp_allreduce(local_sum, SumOp{}, lanes)};
  }
  if (output != SoftmaxOutput::LogSumExp) {
    const Epilogue<T, kFastExp<T>, acc_t<T>, kSumLog> epi(output, row_state, ref);
#pragma unroll
    for (int s = 0; s < kVpl; ++s) {
      if (s >= live) break;
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[s][j] = epi.apply_term(v[s][j]);
    }
  }
  return row_state;
}

// Warp-per-row. Block: a multiple of 32 threads up to kWarpRowsThreads (the launch's: warp_rows_threads, 128 or 256);
// a team of 2^p.lanes_log2 lanes (a power of two, aligned within the warp) owns one row, so a block owns
// blockDim.x / lanes consecutive rows and walks row groups grid-stride. Each lane holds kVpl vectors of kVec elements:
// len <= lanes * kVpl * kVec (rows on the memory's grid too: the granule past the slots is folded into them,
// FoldedGranule). Reductions are xor-shuffles inside the team. Teams past the last row run the shuffles (the warp must)
// but store nothing and read at most from the tensor's first row (rows on the memory's grid: the granule that holds
// its first element, all of it masked; fp64 many-rows kernels: their always-live loads, many_rows_always_live).
// Unaligned rows (a length that is not a multiple of kVec, or a base off the 16-byte grid) take load_group's
// element-wise layout, or where it paid (pair_rows_pay) element pairs (kPairs, pair_group.cuh); logsumexp of 16-bit
// and fp32 rows excepted, held on the memory's grid (16-bit: ShiftedRawLoads, fp32: load_row_folded; lse_rows_on_grid
// says why), and so are 16-bit softmax and log_softmax rows where heuristic_plan's grid_softmax_rows says (kGrid
// below). Such a row may span one more vector than its length fills; before the fold (FoldedGranule, s86-s87) that
// doubled the vectors per lane of 127-element fp32 rows (65536x127: 35.7 us against 23.9 element-wise on the H200),
// and staging a block's rows through shared memory as one span ran slower still (fp32 32.0 us, 65536x129 46.7,
// 16384x1023 57.2; NOTES "s59 call 3"); fp32 softmax rows lost on the grid even folded. Register bound: ptxas left
// alone keeps the vector variants spill-free (at most 63 registers), but spilled the 32-scalar variants; the unaligned
// ones take scalar_rows_min_blocks (softmax_launch.h) for that.
// kFixed (not General): launched only for softmax, log_softmax or logsumexp (aligned rows, unaligned 16-bit and fp32
// logsumexp rows and 16-bit softmax and log_softmax ones on the memory's grid, and the element-wise and pair rows'
// specialized kernels) with the max-then-sum reduction (what "auto" runs on these rows), so
// neither the output nor the reduction is a run-time choice. Why: in
// a one-wave call every instruction between the loads and the stores shows, and the run-time choices (the online
// branch, the output's selects and paths) nearly double the body: bf16, 2 vectors per lane, 488 SASS instructions
// against 280 (sm_90a). H100 probe s25, bf16 65536x128: 12.6-12.8 us against 12.8-13.2 (a same-size copy 12.2-12.4).
// Scalar rows take it too, but for fp32 softmax and log_softmax at 8 vectors per lane (softmax_rows.cu says why).
// The output and reduction a warp-rows instantiation fixes at compile time (General: both read from p).
enum class FixedRows { General, SafeSoftmax, SafeLogSoftmax, SafeLogSumExp };
// How an unaligned warp row is held: element by element (Off: load_group's scalar layout, or pairs), or as 16-byte
// vectors on the memory's grid in the slots of its own vectors (Grid), with the granule its shift adds past them folded
// in (Folded, FoldedGranule) where some row's shift can reach it. The host asks for Folded only there, as its compares
// and selects cost rows that never need it (H200, s86 call 2, logsumexp, us streamed: fp32 16384x1021 18.3 -> 18.9,
// bf16 16384x1017 11.8 -> 12.1). Logsumexp takes Grid or Folded on every unaligned 16-bit and fp32 row
// (lse_rows_on_grid); softmax and log_softmax of 16-bit rows take Folded under a plan's grid=1, whether the fold is
// needed or not (softmax_launch.h's grid_softmax_compiled; heuristic_plan's grid_softmax_rows says where).
enum class GridRows { Off, Grid, Folded };
// Unaligned 16-bit softmax and log_softmax rows on the memory's grid beyond kMaxVpt vectors a lane (rows of 1025-2048
// elements), held raw (packed_store.cuh), and their bound: 3 blocks of kWarpRowsThreads (80 registers, no spills, local
// ptxas sm_90a; at kShiftedLseMinBlocks' 4 they spilled 64-112 bytes, unbounded they took 128-225 registers).
template <typename T> constexpr bool raw_grid_rows(int vpl, GridRows grid, FixedRows fixed) {
  return grid == GridRows::Folded && vpl > RowsTraits<T>::kMaxVpt && fixed != FixedRows::SafeLogSumExp;
}
constexpr int kRawGridRowsMinBlocks = 3;
// kMany: the same code under many_scalar_rows_min_blocks' bound (many_scalar_rows_compiled; launched for many rows).
// kLanes: the team's width fixed at compile time (16 or 32; many_rows_fixed_lanes), 0 where it is read from p.
template <typename T, int kVpl, bool kAligned, FixedRows kFixed = FixedRows::General, bool kPairs = false,
          GridRows kGrid = GridRows::Off, bool kMany = false, int kLanes = 0>
__global__ void __launch_bounds__(kWarpRowsThreads, kAligned ? (kMany ? many_scalar_rows_min_blocks<T>(kVpl) : 0)
                                                   : raw_grid_rows<T>(kVpl, kGrid, kFixed) ? kRawGridRowsMinBlocks
                                                   : kGrid != GridRows::Off ? kShiftedLseMinBlocks
                                                   : kMany                  ? many_scalar_rows_min_blocks<T>(kVpl)
                                                                             : scalar_rows_min_blocks<T>(kVpl))
    softmax_warp_rows_kernel(const RowsParams<T> p) {
  begin_dependent_grid();
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  // Unaligned rows of more than 8 values per lane use whole warps (scalar_rows_whole_warp; the host guarantees it), but
  // for those on the memory's grid (16-bit: ShiftedRawLoads, fp32: load_row_folded) up to kMaxVpt vectors a lane,
  // which take any team width as aligned rows do (short rows: several rows per warp, several vectors per lane). Beyond
  // kMaxVpt the width stays a compile-time 32: a run-time one took that kernel from 808 to 936 SASS instructions
  // (sm_90a) and bf16 logsumexp 65536x1100 from 51.1 to 58.1 us cold, 32768x1537 from 30.9 to 33.8 (H200, s84 calls 2
  // and 4).
  constexpr bool kOnGrid = !kAligned && kGrid != GridRows::Off;
  constexpr bool kFold = kOnGrid && kGrid == GridRows::Folded;
  constexpr bool kWholeWarp = whole_warp_team<T>(kAligned, kOnGrid, kVpl);
  static_assert(kLanes == 0 || kLanes == 16 || kLanes == 32, "a compile-time team is 16 or 32 lanes");
  const int lanes_log2 = kWholeWarp || kLanes == 32 ? 5 : kLanes == 16 ? 4 : p.lanes_log2;
  const int lanes = 1 << lanes_log2;
  const int li = threadIdx.x & (lanes - 1);
  const int team = threadIdx.x >> lanes_log2;
  const int rows_per_block = static_cast<int>(blockDim.x) >> lanes_log2;  // the launch's block: <= kWarpRowsThreads
  const SoftmaxOutput output = kFixed == FixedRows::SafeSoftmax      ? SoftmaxOutput::Softmax
                               : kFixed == FixedRows::SafeLogSoftmax ? SoftmaxOutput::LogSoftmax
                               : kFixed == FixedRows::SafeLogSumExp  ? SoftmaxOutput::LogSumExp
                                                                     : p.output;
  const bool online = kFixed == FixedRows::General ? p.online : false;
  // The 16-bit fast exponential (ShiftedExp) on every row but the general instantiation's element-wise ones, where
  // it took the 32-value variants to 80 registers and 76 bytes of spills. H200, s61 calls 2-3, element-wise bf16
  // rows, us cold, expf -> fast: 65536x127 20.4 -> 18.0, 16384x1023 34.5 -> 27.1, 32768x383 29.8 -> 24.0 (torch
  // 18.9, 32.2, 26.8).
  constexpr bool kFast = kFastExp<T> && (kAligned || kPairs || kFixed != FixedRows::General);
  // The sum's guarded exponentials (sum_rescaled) for the general instantiation's element-wise rows of 32 values
  // a lane: unguarded, ptxas spilled them (16-bit 76 bytes, fp32 12: log_softmax 16384x1023 37.3 -> 40.4 us, s61
  // call 6).
  constexpr bool kGuarded = !kFast && !kAligned && !kPairs && kFixed == FixedRows::General && kVpl * kVec >= 32;
  // The wide warp (beyond kMaxVpt vectors a lane: 16-bit rows of 129-256 vectors in 256 slots; fp64 rows of 65-256
  // vectors count their live vectors instead, kSkipDead below) splits a lane's vectors into a head of 5 and a tail of
  // 3: rows that end in the head's 160 slots (16-bit: len + d <= 1280 elements) leave the tail -inf in every lane, and
  // skip its exponentials (logsumexp since s85: H200 s85 call 3, bf16 us cold, 65536x1023 52.0 -> 47.3, 65536x1104 46.7
  // -> 41.0, 65536x1280 47.5 -> 43.0; longer rows within 0.3 either way, 65536x1281 53.5 -> 53.7) and, for softmax and
  // log_softmax, its normalization and stores too (s90 call 1, bf16 us cold: softmax 65536x1032 80.4 -> 74.7,
  // 65536x1104 81.9 -> 76.9, 65536x1280 85.9 -> 82.7, 8192x1032 14.5 -> 13.6; log_softmax 65536x1032 79.2 -> 75.4; 1288
  // and longer level).
  constexpr int kHead = kVpl > RowsTraits<T>::kMaxVpt ? kVpl - 3 : kVpl;
  // held raw: packed_store.cuh says why (the grid's softmax kernels are folded ones only: grid_softmax_kernel)
  constexpr bool kRawRows = !kAligned && raw_grid_rows<T>(kVpl, kGrid, kFixed);
  // Whether a row whose team holds it up to `end` element slots (its length, plus its misalignment on the memory's
  // grid) reaches past the head in some lane. Rows here are at most 32 * kVpl * kVec (2048) elements: an int holds it.
  const auto reaches_tail = [](int end, int team_lanes) { return kHead == kVpl || end > kHead * team_lanes * kVec; };
  constexpr bool kHeldVectors = held_vector_rows<T>(kAligned, kMany, kVpl);

  for (int64_t first_row = static_cast<int64_t>(blockIdx.x) * rows_per_block; first_row < p.rows;
       first_row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t row = first_row + team;
    const bool valid = row < p.rows;
    const int64_t len = valid ? p.len : 0;  // an empty row reads as -inf and stores nothing
    const int64_t offset = valid ? row * p.len : 0;

    // 16-bit logsumexp rows, and kRawRows: held raw, reduced on packed pairs (packed_lse.cuh)
    if constexpr ((kFixed == FixedRows::SafeLogSumExp && kFastExp<T>) || kRawRows) {
      // Aligned rows as 16-byte vectors of the row; unaligned ones (kOnGrid) as vectors on the memory's grid, the
      // row's edges masked to -inf.
      uint4 raw[kVpl];
      int d = 0;  // the row's misalignment: its group starts d elements before it
      if constexpr (kAligned) {
        GroupLoads<T, kVpl, true> g;
        g.load(p.x + offset, len, 0, lanes, li);
#pragma unroll
        for (int s = 0; s < kVpl; ++s) raw[s] = g.raw[s];
      } else {
        d = misalignment(p.x + offset);
        ShiftedRawLoads<T, kVpl, kFold> g;
        g.load(p.x + offset, len, d, lanes, li);
#pragma unroll
        for (int s = 0; s < kVpl; ++s) raw[s] = g.raw[s];
      }
      const bool tail = reaches_tail(static_cast<int>(len) + d, lanes);
      const A ref = warp_allreduce(packed_max<T>(raw), MaxOp{}, lanes);
      const A sum = warp_allreduce(packed_sum_exp<T, kVpl, kHead>(raw, ref, tail), SumOp{}, lanes);
      if constexpr (kRawRows) {  // softmax / log_softmax on the grid beyond kMaxVpt: packed_store.cuh
        const FusedExp2 e = FusedExp2::at<T>(ref);
        const Epilogue<T, true> epi(output, OnlineState<A>{ref, sum}, ref);
        store_raw_shifted<T, kVpl, kFold>(p.y + offset, len, d, lanes, li, raw, epi, e, tail ? kVpl : kHead);
      } else if (valid && li == 0) {
        p.y[row] = from_acc<T>(row_lse(OnlineState<A>{ref, sum}));
      }
      continue;
    }
    A v[kVpl][kVec];
    // pairs: the row's shift on the pair grid, the output row's as well (the host checks); on the memory's grid: the
    // input row's misalignment
    int d = 0;
    if constexpr (kPairs) {
      d = valid ? pair_shift(p.x + offset) : 0;
      load_pairs<T, kVpl, kMany>(p.x + offset, len, d, lanes, li, v);
    } else if constexpr (kFold) {  // fp32 lse, 16-bit softmax / log_softmax on the grid up to kMaxVpt (the rest: above)
      d = misalignment(p.x + offset);
      load_row_folded<T, kVpl>(p.x + offset, len, d, lanes, li, v);
    } else if constexpr (kOnGrid) {
      d = misalignment(p.x + offset);
      load_group_shifted<T, kVpl>(p.x + offset, len, 0, d, lanes, li, v);
    } else {
      // fp64 many-rows kernels: each lane's first elements without a predicate (many_rows_always_live). A team past
      // the last row reads them from the tensor's first row (offset 0), which holds them, and stores nothing.
      constexpr int kAlwaysLive = kMany && kLanes != 0 ? many_rows_always_live<T>(kAligned, kLanes, kVpl) : 0;
      load_group<T, kVpl, kAligned, kAlwaysLive, kHeldVectors>(p.x + offset, len, 0, lanes, li, v);
    }
    // Aligned rows and fp64 rows only: the other wide-warp rows (kVpl > kMaxVpt), logsumexp's and kRawRows, are above.
    // fp64 rows held as vectors or element by element skip every vector past the row's end in all lanes (live_vectors,
    // from the row length, so uniform over the block): fp64 exponentials, dozens of instructions each, and not the
    // loads set these kernels' pace (H200, s101 call 1: forced 8 vectors a lane, unaligned softmax 65536x67, x131 and
    // x199, 5 of them live, all ran 64.5-65.5 us cold, where 2 vectors a lane took 38.7 at x67). Not rows of one
    // vector, always live (fp64 rows of 8 vectors a lane are held element by element since session 102, aligned or not:
    // softmax_rows.cu's warp_kernel says why). Not value by value (a break before each of a vector's values, rows held
    // element by element): every exponential then sat behind its own branch, and the unaligned rows lost (H200, s101
    // call 3, us cold, vectors -> values: softmax 65536x131 55.7 -> 65.3, x199 62.0 -> 75.0, x255 67.6 -> 78.4, x67
    // 36.5 -> 39.0; log_softmax 32768x255 36.8 -> 43.6).
    constexpr bool kSkipDead = std::is_same_v<T, double> && !kPairs && !kOnGrid && kVpl > 1;
    const int live = kSkipDead                                 ? live_vectors<kVpl>(static_cast<int>(p.len), lanes, kVec)
                     : reaches_tail(static_cast<int>(len), lanes) ? kVpl
                                                                  : kHead;
    constexpr bool kSumLog =  // Epilogue says where log_sum paid
        std::is_same_v<T, double> && kLanes == 32 && kVpl == 2 && kFixed == FixedRows::SafeLogSoftmax;
    // exp_sum_term for fp64 log_softmax on the many-rows kernels (compile-time teams: 16 lanes of 4 vectors, 32 of 2
    // and of 4). H200, s108 call 3, us cold / streamed, CUDA's exp -> exp_sum_term (torch): 65536x97 (16 lanes)
    // 31.7-31.9 / 31.4-31.5 -> 29.9-30.4 / 31.1 (30.5-31.9 / 28.2-28.5), x105 32.5-32.8 / 30.7-30.8 -> 31.1 / 29.6
    // (30.4-31.3 / 29.6-29.7), x113 34.0-34.5 / 31.3-31.4 -> 31.4-32.8 / 30.8-31.0 (32.0-32.3 / 31.8), x127 level. On
    // 32 x 4 it lost then (65536x171 46.0 / 45.1 -> 47.2-47.5 / 47.9-48.0, x241 64.4-64.6 / 65.4-65.6 -> 73.6-73.9 /
    // 75.8-75.9): ptxas put the max's first steps between the row's loads, so the loads past them (elements 161 and on)
    // waited a memory round trip (SASS; ncu, s108 call 4, x241: L1TEX scoreboard 7.8 of 16.3 cycles between issues,
    // DRAM 63 % against 70 %). Since session 109 the many-rows kernels load their lanes' first elements without a
    // predicate (many_rows_always_live), every load goes ahead of the max, and 32 x 4 takes it too (its SASS 640 -> 528
    // instructions, local sm_90a). H200, s109 call 1, us cold / streamed, two rounds: log_softmax 65536x151 43.6-45.4 /
    // 42.5-42.7 -> 43.0-43.2 / 41.2 (torch 45.5-46.4 / 44.8-44.9), 171-225 level (x199 52.9-53.8 / 53.0 -> 53.5-53.6 /
    // 52.9-53.1).
    constexpr bool kSumExp = std::is_same_v<T, double> && kFixed == FixedRows::SafeLogSoftmax && kLanes != 0;
    const OnlineState<A> row_state =
        team_row<T, kVpl, kFast, kGuarded, kSumLog, kSumExp>(v, lanes, output, online, live);
    if (output == SoftmaxOutput::LogSumExp) {
      if (valid && li == 0) p.y[row] = from_acc<T>(row_lse(row_state));
      continue;
    }
    if constexpr (kPairs) {
      store_pairs<T, kVpl, kMany>(p.y + offset, len, d, lanes, li, v);
    } else if constexpr (kFold) {
      store_row_folded<T, kVpl>(p.y + offset, len, d, lanes, li, v);
    } else if constexpr (kOnGrid) {
      store_group_shifted<T, kVpl>(p.y + offset, len, 0, d, lanes, li, v);
    } else {
      store_group<T, kVpl, kAligned, kHeldVectors>(p.y + offset, len, 0, lanes, li, v, live);
    }
  }
}

// Block-per-chunk. Grid: persistent-style loop over items = (row, chunk), item = blockIdx.x + i * gridDim.x.
// Block: blockDim.x = nt threads (multiple of 32, <= 1024). Chunk c of a row covers
//   aligned: nt * (kVpt + smem_vecs) 16-byte vectors; thread t holds slot s at vector s * nt + t, slots
//            [0, kVpt) in registers and [kVpt, kVpt + smem_vecs) raw in dynamic shared memory (cp.async),
//   unaligned: nt * kVpt 16-byte vectors in registers on the memory's grid, shifted back by the row's
//            misalignment (load_group_shifted; smem_vecs is ignored).
// chunks == 1: block-per-row, no workspace. chunks > 1: split-row, always online; each block publishes its
// chunk's (m, d) and merges the row's partials (reduce_row_state) before normalizing from on-chip data.
// Bounds (1024, 1): at most 64 registers, so two 512-thread split blocks share an SM; without the explicit 1,
// ptxas for sm_80 traded small spills for more occupancy. kLse on aligned 16-bit rows takes (1024, 2), below.
// kLse: launched only for logsumexp of whole rows (chunks == 1) with the max-then-sum reduction and no shared-memory
// vectors (what "auto" runs), so none of those is a run-time choice (the warp kernel's kFixed, for the block kernel).
// As a first step (7eb13b2) that took the bf16 registers 64 -> 52 and, with the warp kernel's SafeLogSumExp (bf16
// 57 -> 48, fp32 63 -> 48), H200 s82 call 1, us cold: bf16 8192x8192 45.4 -> 40.3, 4096x4096 15.1 -> 14.0, 32768x2000
// 45.3 -> 44.0, 16384x1024 14.5 -> 13.8; fp32 4096x4096 20.6 -> 19.9 (the one loss: 4096x1000 streamed 4.1 -> 4.5
// bf16, 6.2 -> 6.6 fp32). On aligned 16-bit rows kLse then reduces raw vectors (packed_lse.cuh; 53 registers), and
// fits 32 without spills, so it is bounded there (2 blocks of 1024): 53 registers (allocated as 56) held an SM to 36
// warps, 32 with 256-thread blocks; at 32 its blocks are limited by the SM's 64 warps (or 32 blocks) instead.
template <typename T, int kVpt, bool kAligned, bool kLse = false>
__global__ void __launch_bounds__(kMaxBlockThreads, kLse && kAligned && kFastExp<T> ? 2 : 1)
    softmax_block_rows_kernel(const RowsParams<T> p) {
  begin_dependent_grid();
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  extern __shared__ uint4 s_chunk[];  // slot kVpt + k of thread t at s_chunk[k * nt + t]; own slots only
  __shared__ A s_val[32];
  __shared__ OnlineState<A> s_state[kRowScratch];
  const int t = threadIdx.x;
  const int nt = blockDim.x;
  const int smem_vecs = kAligned && !kLse ? p.smem_vecs : 0;
  const int chunks = kLse ? 1 : p.chunks;
  const bool online = !kLse && (p.online || chunks > 1);
  const SoftmaxOutput output = kLse ? SoftmaxOutput::LogSumExp : p.output;
  const bool keep_terms = output == SoftmaxOutput::Softmax;
  const int64_t chunk_elems = static_cast<int64_t>(nt) * (kVpt + smem_vecs) * kVec;
  const int64_t items = p.rows * chunks;
  // Element index of shared-memory slot k of this thread, relative to the chunk start.
  const int64_t smem_base = (static_cast<int64_t>(kVpt) * nt + t) * kVec;
  const int64_t smem_stride = static_cast<int64_t>(nt) * kVec;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const RowChunk chunk(item, chunks, chunk_elems, p.len);
    const int64_t row = chunk.row, first = chunk.begin;
    const T* x = p.x + row * p.len;
    if constexpr (kLse && kAligned && kFastExp<T>) {  // whole aligned 16-bit rows: packed_lse.cuh
      GroupLoads<T, kVpt, true> g;
      g.load(x, p.len, 0, nt, t);
      const A ref = block_allreduce(packed_max<T>(g.raw), MaxOp{}, neg_inf<A>(), s_val);
      const A sum = block_allreduce(packed_sum_exp<T>(g.raw, ref), SumOp{}, A(0), s_val);
      if (t == 0) p.y[row] = from_acc<T>(row_lse(OnlineState<A>{ref, sum}));
    } else {
      // Shared-memory slots first: the async copies stream in while the register slots load.
      for (int k = 0; k < smem_vecs; ++k) {
        const int64_t e = first + smem_base + k * smem_stride;
        if (e < p.len) cp_async16(&s_chunk[k * nt + t], x + e);
      }
      A v[kVpt][kVec];
      const int shift = kAligned ? 0 : misalignment(x);
      // Vectors past the row's end in every thread (live_vectors) skip the sum, the epilogue and the stores; they are
      // still loaded (predicated off: -inf) and in the max, since skipping those too made ptxas spill the fp32
      // 8-vector unaligned rows (80-244 bytes, local ptxas, s83). The shared-memory slots come after all kVpt register
      // vectors, so they exist only where every register vector is live. Aligned 16-bit rows skip nothing: at most
      // one of their 4 vectors is dead on rows the heuristic gives this kernel, and the tests cost them more than
      // that saved (H200, s84 call 1, bf16 softmax us cold: 65536x1104 95.9 -> 97.4, 32768x2000 64.0 -> 65.0).
      constexpr bool kSkipDead = !(kAligned && sizeof(T) == 2);
      const int live = kSkipDead ? live_vectors<kVpt>(remaining(p.len + shift, first), nt, kVec) : kVpt;
      if constexpr (kAligned) {
        load_group<T, kVpt, true>(x, p.len, first, nt, t, v);
      } else {
        load_group_shifted<T, kVpt>(x, p.len, first, shift, nt, t, v);
      }
      A local_max = max_of(v);
      if (smem_vecs > 0) {
        cp_async_wait_all();
        for (int k = 0; k < smem_vecs; ++k) {
          if (first + smem_base + k * smem_stride >= p.len) break;
          A w[1][kVec];
          VecIO<T>::unpack(s_chunk[k * nt + t], w[0]);
          local_max = amax(local_max, max_of(w));
        }
      }

      const A ref = online ? local_max : block_allreduce(local_max, MaxOp{}, neg_inf<A>(), s_val);
      A local_sum = sum_rescaled<kFastExp<T>, std::is_same_v<A, double>>(v, ref, keep_terms, live);
      for (int k = 0; k < smem_vecs; ++k) {
        if (first + smem_base + k * smem_stride >= p.len) break;
        A w[1][kVec];
        VecIO<T>::unpack(s_chunk[k * nt + t], w[0]);
        local_sum += sum_rescaled<kFastExp<T>, std::is_same_v<A, double>>(w, ref, false);
      }
      OnlineState<A> row_state;
      if (online) {
        row_state = reduce_row_state(p.exchange, chunks, row, item, OnlineState<A>{ref, local_sum}, s_state);
      } else {
        row_state = {ref, block_allreduce(local_sum, SumOp{}, A(0), s_val)};
      }

      if (output == SoftmaxOutput::LogSumExp) {
        if (t == 0 && first == 0) p.y[row] = from_acc<T>(row_lse(row_state));
        continue;
      }
      const Epilogue<T> epi(output, row_state, ref);
#pragma unroll
      for (int s = 0; s < kVpt; ++s) {
        if (s >= live) break;
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[s][j] = epi.apply_term(v[s][j]);
      }
      T* y = p.y + row * p.len;
      if constexpr (kAligned) {
        store_group<T, kVpt, true>(y, p.len, first, nt, t, v, live);
      } else {
        store_group_shifted<T, kVpt>(y, p.len, first, shift, nt, t, v, live);
      }
      for (int k = 0; k < smem_vecs; ++k) {
        const int64_t e = first + smem_base + k * smem_stride;
        if (e >= p.len) break;
        A w[kVec];
        VecIO<T>::unpack(s_chunk[k * nt + t], w);
#pragma unroll
        for (int j = 0; j < kVec; ++j) w[j] = epi.apply(w[j], ref);
        store16(y + e, VecIO<T>::pack(w));
      }
    }
  }
}

}  // namespace softmax
}  // namespace flash_attn_ext
