#pragma once
// Plain-data parameters of the CUDA softmax kernel families and the launchers that map a runtime
// configuration onto the compiled instantiations. The heuristic that picks a configuration lives in
// softmax_cuda.cu (softmax_cuda_typed); the launchers only translate it, and every switch in them
// rejects a configuration that was not compiled.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "softmax/softmax_kinds.h"

namespace flash_attn_ext {

namespace softmax {

// Rows the kernels may move as 16-byte vectors from their first element: x, y and the row length in bytes on the
// 16-byte grid (RowsShape::aligned; the resident kernel's choice of instantiation).
inline bool rows_aligned16(const void* x, const void* y, int64_t row_bytes) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 && row_bytes % 16 == 0;
}

// Accumulator type: float for the 16- and 32-bit types, double for double.
template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <typename T> using acc_t = typename AccOf<T>::type;

// Compile-time shape of the row-cached kernels for element type T. A thread (or lane) caches at most 32
// floats, so a 1024-thread block still fits in 64 registers per thread without spills: fp32 8 vectors,
// 16-bit 4 vectors; double 4 vectors (8 doubles: 16 doubles spilled at 64 registers).
template <typename T> struct RowsTraits {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte vector
  static constexpr int kMaxVpt = sizeof(acc_t<T>) == 8 ? 4 : 32 / kVec;  // largest vectors per thread
  static constexpr int kSmallVpt = kMaxVpt / 4;                         // the other block-kernel size
  static_assert(kVec * static_cast<int>(sizeof(T)) == 16, "element size must divide 16 bytes");
  static_assert(kMaxVpt == 4 || kMaxVpt == 8, "warp kernels are compiled for 1, 2, 4 (and 8) vectors");
  static_assert(kSmallVpt >= 1, "block kernels need a small size of at least one vector");
};

// The most vectors a lane the warp kernel holds for an output: RowsTraits' kMaxVpt, and 8 for logsumexp of 16-bit rows,
// whose lanes keep them raw (packed_lse.cuh: 8 vectors in 32 registers), and for 16-bit softmax and log_softmax rows
// held as 16-byte vectors (`vectors`: aligned, or unaligned on the memory's grid under a plan's grid=1) under the
// max-then-sum reduction (aligned ones held as floats, 64 a lane; those on the grid raw, packed_store.cuh; 80
// registers, no spills, both), so rows of up to 2048 elements can run on one warp each instead of the block kernel's
// 64-thread blocks (two block reductions a row); heuristic_plan gives them the warp only where there are rows enough
// (kWideWarpMinRowsPerSm). Unaligned logsumexp rows there are held as vectors on the memory's grid (ShiftedRawLoads;
// lse_rows_on_grid).
// fp64 rows take 8 vectors (16 doubles, 32 registers) a lane for every output and algorithm (kDoubleWarpMaxVpl), held
// element by element whatever their alignment (softmax_rows.cu's warp_kernel says why): RowsTraits' 4 bounds the block
// kernel, whose 1024-thread blocks get 64 registers, not the warp kernel's 256-thread ones. Why: rows of 257-512
// doubles took the block kernel's 64-thread blocks (two block reductions a row), and fp64 softmax 16384x501 ran at
// 0.78x torch (H200, s100 call 1: 46.0 / 43.6 us cold / streamed, torch 35.7 / 36.5).
template <typename T> constexpr int kLseWarpMaxVpl = sizeof(T) == 2 ? 8 : RowsTraits<T>::kMaxVpt;
constexpr int kDoubleWarpMaxVpl = 8;
template <typename T> constexpr int warp_max_vpl(SoftmaxOutput output, bool vectors, bool online) {
  if constexpr (std::is_same_v<T, double>) return kDoubleWarpMaxVpl;
  return output == SoftmaxOutput::LogSumExp || (vectors && !online) ? kLseWarpMaxVpl<T> : RowsTraits<T>::kMaxVpt;
}
// Unaligned rows whose warp-kernel lanes hold them as 16-byte vectors on the memory's grid (the edges masked), in the
// slots of the row's own vectors (the granule past them folded in: FoldedGranule), at any width: logsumexp of 16-bit
// rows, which then take the aligned rows' packed reduction (packed_lse.cuh), and of fp32 rows (load_row_folded, then
// the aligned rows' max and sum). Element-wise, the general instantiation's unpacked max and sum ran 16-bit rows at
// under half the aligned rows' speed (H200, s84 call 2, bf16 65536x1023 95.8 us cold against 65536x1104's 46.9), fp32
// ones at 55-80 % (s85 call 1: 65536x127 23.6 against 65536x128's 13.0, 32768x383 25.2 against 32768x384's 20.1). Other
// unaligned warp rows stay element-wise (softmax_rows.cuh says why).
template <typename T> constexpr bool lse_rows_on_grid(SoftmaxOutput output) {
  return (sizeof(T) == 2 || std::is_same_v<T, float>) && output == SoftmaxOutput::LogSumExp;
}
// Softmax and log_softmax (max-then-sum) of unaligned rows are compiled on the memory's grid, folded, for 16-bit types
// only (GridRows::Folded; heuristic_plan's grid_softmax_rows says where "auto" takes them): fp32 rows lost there to
// their element-wise and pair kernels at every width (H200, s87 call 1, softmax us cold, auto -> grid: 65536x127 21.2
// -> 22.4 at 2 vectors, 32768x383 28.1 -> 35.9 at 4, 16384x1023 34.7 -> 36.7 at 8).
template <typename T> constexpr bool grid_softmax_compiled = sizeof(T) == 2;

constexpr int kWarpRowsThreads = 256;    // warp-per-row kernels: their bound, and the block of most plans (below)
// The block of logsumexp's warp-per-row plans and of softmax and log_softmax rows of 8 vectors a lane, aligned or not
// (16-bit rows of 1025-2048 elements, fp32 of 513-1024), unless forced (threads=; the kernels take any multiple of 32
// up to kWarpRowsThreads): warp_rows_threads. Why, H200, us cold / streamed, 256 -> 128 threads, two rounds: s98 call 1
// (unaligned fp32 rows, element-wise or in pairs, 32 lanes x 8 vectors) softmax 65536x641 87.3-87.6 / 87.2-87.3 ->
// 85.4-85.5 / 85.2-85.3, log_softmax 65536x641 86.6-86.9 / 87.3-87.4 -> 84.9-85.5 / 85.4-85.6, 32768x1001 65.9-66.1 /
// 66.5-66.7 -> 65.5 / 66.2-66.3, softmax 32768x1001 level; aligned fp32 rows under "online" (at 128 since s97) against
// 256: 16384x1024 33.5-33.6 against 33.7-34.0 cold, 32768x1000 64.6-64.9 against 65.1-65.2, level streamed; s97 call 4
// (logsumexp) bf16 65536x1023 (32 lanes of 8 vectors, 64 registers) 41.2-41.3 / 39.6-39.7 -> 39.4-39.5 / 37.9-38.1,
// bf16 4097x97 streamed 2.6 -> 2.4, bf16 16384x1024, 65536x128, 65536x61, 32768x2000, fp32 65536x128, 16384x1024,
// 16384x97, 8192x513 level; s97 call 5 (forced 32 lanes x 8 vectors) softmax bf16 65536x1032 75.8-76.3 / 75.3-75.5 ->
// 73.3-73.6 / 72.7-72.9, log_softmax bf16 65536x1536 98.8-99.1 / 98.5-98.6 -> 97.6-97.9 / 98.1-98.4, softmax bf16
// 8192x2048 streamed 19.0 -> 18.7-18.8, bf16 65536x1536 and 32768x2048, fp32 32768x1000, 65536x640 and 16384x1024
// (both ops) level. Softmax and log_softmax of the other plans keep 256: at 128 (s97 call 3) fp32 and bf16
// 65536x128, 16384x1024 (16-bit: 4 vectors a lane), fp32 65536x97, 16384x97 and bf16 131072x61 read level.
constexpr int kWarpRowsSmallThreads = 128;
inline int warp_rows_threads(SoftmaxOutput output, int vpl) {
  return output == SoftmaxOutput::LogSumExp || vpl == 8 ? kWarpRowsSmallThreads : kWarpRowsThreads;
}
// Scalar (unaligned) warp rows of more than 8 values per lane run on whole warps: a compile-time team width
// turns every element offset into an immediate, which keeps those variants out of spills and ran them faster
// (H200, s60 call 3, a run-time width at 16 values a lane, us cold: bf16 65536x127 on 8 lanes 25.1 against
// 20.2 on 16 lanes of 8, 65536x61 23.5 against 13.0, 32768x383 37.1 against 29.8; fp32 32768x383 36.2 against
// 31.6). Up to 8 values a lane take any team width (softmax_cuda.cu's warp rule says where that pays).
template <typename T> constexpr bool scalar_rows_whole_warp(int vpl) { return vpl * RowsTraits<T>::kVec > 8; }
// Whether an unaligned warp-rows kernel's team is a compile-time whole warp (softmax_warp_rows_kernel's kWholeWarp,
// which says why): rows element by element at more than 8 values a lane, and rows on the memory's grid
// (lse_rows_on_grid) beyond kMaxVpt vectors a lane. The host plans and checks lanes by the same rule.
template <typename T> constexpr bool whole_warp_team(bool aligned, bool on_grid, int vpl) {
  return !aligned && scalar_rows_whole_warp<T>(vpl) && (!on_grid || vpl > RowsTraits<T>::kMaxVpt);
}
// Unaligned warp rows that softmax and log_softmax (max-then-sum) move as element pairs (pair_group.cuh) rather
// than element by element. Softmax: 16-bit rows at <= 2 vectors per lane, fp32 at >= 4 (whole warps). H200, s61
// call 3, us cold, element-wise -> pairs (both with the 16-bit fast exponential): paid on bf16 65536x127 18.0 ->
// 16.6, 65536x61 13.6 -> 12.3, 32768x383 24.1 -> 21.8, fp32 32768x383 31.0 -> 27.5, 16384x1023 36.6 -> 35.3; lost
// on bf16 16384x1023 (4 vectors) 27.2 -> 28.2 (streamed 24.8 -> 27.1), fp32 65536x127 (2 vectors on 16 lanes)
// 20.9 -> 21.5, 65536x61 13.0 -> 14.0. Log_softmax: 16-bit at 1 vector, fp32 at 8 (the general instantiation, as
// its element-wise rows). H200, s62 calls 2-3, us cold (streamed): paid on bf16 65536x127 19.4-19.7 -> 18.2-18.4,
// fp32 16384x1023 36.8-37.0 (38.2) -> 35.1-35.4 (35.7), 4096x1023 streamed 11.6 -> 10.7; level on bf16 65536x61;
// lost on bf16 32768x383 (2 vectors) 22.0 -> 23.6-23.9, fp32 32768x383 (4 vectors) 28.7 -> 34.5, 65536x127 (2
// vectors) 20.3 -> 21.7, bf16 16384x1023 (4 vectors) 25.7 -> 32.7. Probably why log_softmax differs: it keeps x
// for the output (x - shift) beside the sum's terms, where softmax keeps the terms alone.
template <typename T> constexpr bool pair_rows_pay(int vpl, bool log_softmax) {
  if (log_softmax) return sizeof(T) == 2 ? vpl == 1 : sizeof(T) == 4 && vpl == 8;
  return sizeof(T) == 2 ? vpl <= 2 : sizeof(T) == 4 && vpl >= 4;
}
// Blocks per SM that the unaligned warp-rows kernels are compiled for (__launch_bounds__' minimum): 4 (<= 64
// registers) at 16 values a lane and for 16-bit rows at 32, 3 (<= 80) otherwise. With 3, ptxas spent up to 80
// registers on the unguarded exponentials of the sum (more of them in flight), and the kernels ran 24 warps per
// SM where 32 ran faster. H200, s62 call 3, us cold (streamed), 3 -> 4: log_softmax fp32 32768x383 30.8-30.9
// (30.2-30.4) -> 28.7 (27.7), bf16 16384x1023 25.2 (25.0) -> 24.8-24.9 (24.5), 4096x1023 10.3-10.4 (8.4-8.5) ->
// 9.6-10.1 (7.7); softmax bf16 16384x1023 26.3-26.5 (24.8) -> 25.4 (24.2-24.3), 4096x1023 streamed 8.8 -> 7.9.
// Spills at 64 registers: 16-bit rows at 32 values 4-16 bytes (sm_90a), 8 on sm_80 (76-84 bytes at 80).
template <typename T> constexpr int scalar_rows_min_blocks(int vpl) {
  const int values = vpl * RowsTraits<T>::kVec;
  return values == 16 || (sizeof(T) == 2 && values == 32) ? 4 : 3;
}
// Unaligned 16-bit softmax and log_softmax rows of one vector a lane, many of them: a second instantiation compiled
// for 8 blocks an SM (<= 32 registers, where scalar_rows_min_blocks' 3 let ptxas take 37-43; local ptxas sm_90a, no
// spills), launched where the rows give every SM at least kManyScalarRowsMinBlocksPerSm blocks. Twice the resident
// warps pay only over several waves: H200, s95 call 2, us cold / streamed, 3 -> 8 blocks an SM for every launch, two
// rounds (torch beside): bf16 log_softmax 65536x61 (8 lanes, 15.5 blocks an SM) 12.8-13.0 / 9.3 -> 12.3 / 8.7 (12.7 /
// 9.9-10.0), 131072x61 18.8-18.9 / 16.2 -> 18.1 / 15.2-15.3, 65536x33 10.5-10.7 / 7.6 -> 10.6 / 7.2, softmax 131072x61
// 18.2-18.3 / 15.5 -> 18.3 / 15.2, fp16 alike; but with fewer blocks a tenth to a fifth slower streamed: log_softmax
// 65536x13 (4 lanes, 7.75 blocks an SM) 4.0 -> 4.2, 16384x61 3.4 -> 3.5, 4097x97 2.8 -> 3.0, 1025x127 2.3 -> 2.8-2.9,
// softmax 4097x97 2.5 -> 3.0, 2049x201 2.6 -> 3.1. In fp32 (below) 65536x61 (8 lanes, 2 vectors, 15.5 blocks an SM)
// lost under the same bound while 65536x97 (31) gained (s94 call 5, branch s94-scalar-occupancy). Gated (s95 call 3,
// one round against main's build, us cold / streamed): log_softmax bf16 65536x61 12.6 / 9.2 -> 12.4 / 8.7, 131072x61
// 18.7 / 16.0 -> 18.2 / 15.1, 65536x33 10.4 / 7.5 -> 10.6 / 7.2, 131072x13 10.1 / 7.0 -> 10.2 / 6.8, fp16 65536x61
// 12.8 / 9.2 -> 12.3 / 8.6; softmax bf16 131072x61 18.1 / 15.5 -> 18.2 / 15.1; 4097x97, 2049x201, 1025x127 level
// streamed (the same kernel as before).
// fp32 log_softmax at 2 vectors a lane takes the bound too (39 -> 32 registers), from kManyFp32ScalarRowsMinBlocksPerSm
// blocks an SM and on teams of >= kManyFp32ScalarRowsMinLanes lanes: s95 call 4, H200, us cold / streamed, main ->
// bound from 24 blocks an SM whatever the team, two rounds (torch): 65536x97 (16 lanes) 19.0-19.1 / 17.1 -> 18.9 /
// 16.5 (17.4-17.6 / 15.4-15.5), 65536x101 19.4-19.6 / 17.3 -> 19.3-19.4 / 16.7, 32768x201 (32 lanes) 19.5-19.7 /
// 17.5-17.6 -> 19.5 / 16.9-17.0, 131072x97 33.7 / 32.1-32.3 -> 33.4 / 30.9; but 131072x61 (8 lanes, 4 rows a warp)
// lost, 20.8-21.0 / 19.0-19.1 -> 21.5 / 19.5 (65536x61 alike in s94 call 5). The same SASS runs on every team width
// (lanes are a run-time value), so the loss is the memory side's: not understood yet. fp32 softmax there has no
// such instantiation (its 16- and 32-lane rows were level under the bound, s94 call 5). Since the scalar groups step
// a held pointer (held_pointer, s96) the general bound's kernel takes 46 registers (5 blocks an SM) where the many-rows
// one keeps 32 (8): from 6 blocks an SM the rows need one wave fewer on it. s96 call 4, us cold / streamed, gate 24 ->
// 6 blocks an SM, two rounds (torch): 16384x97 (7.75 blocks an SM) 8.7-9.0 / 5.4 -> 9.0 / 4.8-4.9 (7.6 / 5.1-5.2),
// 8192x201 8.2 / 5.5-5.6 -> 8.4 / 4.9 (8.3 / 5.2), 32768x97 11.6 / 9.2 -> 11.2 / 8.5, 16384x201 11.5 / 9.5 -> 11.1 /
// 8.7; 12288x97 (5.8) level. Teams of 8 lanes still lose under it: a build without the lanes test read 32768x61
// 5.9-6.0 -> 6.1-6.2 us streamed, 65536x61 10.2 -> 10.8, 131072x61 18.8 -> 19.1.
constexpr int kManyScalarRowsMinBlocks = 8;
constexpr int64_t kManyScalarRowsMinBlocksPerSm = 12;
constexpr int64_t kManyFp32ScalarRowsMinBlocksPerSm = 6;
constexpr int kManyFp32ScalarRowsMinLanes = 16;
// fp64 softmax and log_softmax rows of 16 lanes x 4 vectors (heuristic_plan's: softmax rows of 65-97 elements on a grid
// capped at kDoubleHalfTeamBlocksPerSm, log_softmax rows of 65-101 uncapped) take a kMany instantiation too, bound to 6
// blocks an SM: 40 registers, no spills (local ptxas sm_90a), where the general bound left 54-59 (4 blocks). Whatever
// the rows' count (the plan starts at 32 rows an SM): with fewer rows the bound cost nothing measured (s104 call 1:
// softmax 16384x67 11.3-11.5 -> 10.4-11.1 us cold; call 5: log_softmax 16384x75 level). Numbers: softmax_cuda.cu, at
// kDoubleHalfTeamBlocksPerSm and kDoubleHalfTeamLogMaxLen.
// So do whole-warp fp64 rows of 2 vectors a lane (98-128 elements; 37-38 registers against 42-47) and of 4 (129-161,
// since session 108 to 225 where rows are many, log_softmax's since session 109 to 256: kDoubleFourVectorLongMaxLen;
// launched at 128 threads; 40 against 54-59) from kManyFp64WideScalarRowsMinBlocksPerSm blocks of 256 threads an SM,
// uncapped. H200, s104 call 2, us cold / streamed, two rounds, main -> bound (2 vectors: build 19b5e12, 4: alt; torch):
// softmax 65536x99 35.0-35.3 / 34.0-34.2 -> 33.1-33.8 / 32.0-32.3 (32.2-33.5 / 30.3-30.5), x105 35.1-35.2 / 34.7 ->
// 33.8-33.9 / 32.8 (32.2-33.1 / 31.5), x113 37.0-37.1 / 35.6-35.7 -> 34.1-35.9 / 33.9 (33.2-33.7 / 32.5-32.6), x127
// 38.1-38.2 / 38.1 -> 36.3-36.5 / 36.0-36.2 (35.3-35.8 / 36.1), 32768x127 20.9-21.1 / 20.2 -> 20.0-20.2 / 19.1-19.2
// (20.2-21.2 / 19.8-19.9), 8192x127 (7.75 blocks an SM) 9.0 / 6.5 -> 8.8 / 6.3-6.4 (10.1-10.5 / 7.6), 65536x129
// 46.0-46.1 / 44.0-44.1 -> 44.1-44.3 / 41.6-41.7 (48.8-49.1 / 45.8), x143 50.8-51.0 / 53.0 -> 46.1-46.4 / 47.2-47.3
// (49.0-49.4 / 46.0), x161 53.5-53.6 / 55.2-55.3 -> 48.3-48.6 / 49.8-49.9 (50.6-51.4 / 48.2-48.5); log_softmax 65536x99
// 38.9-39.1 / 36.8-36.9 -> 38.0 / 35.2-35.3 (30.8 / 28.8), x127 40.1-40.5 / 39.3-39.4 -> 38.3-39.0 / 37.7-37.8
// (34.8-35.2 / 35.4), x151 55.7 / 57.7-57.9 -> 51.2-51.3 / 49.6-49.9 (45.6-46.7 / 44.5-44.6). 16-lane rows of 2 vectors
// (33-64 elements) keep the general bound: not timed under this one.
// Whole-warp fp64 rows of 2 vectors a lane are bound to 8 blocks instead (32 registers, no spills, local ptxas sm_90a;
// at 4 vectors 8 spilled 16-48 bytes): 64 warps an SM against 48, for rows whose time is one serial chain each (the
// reductions' shuffles, the row's logarithm).
constexpr int kManyFp64ScalarRowsMinBlocks = 6;
constexpr int kManyFp64TwoVectorRowsMinBlocks = 8;
constexpr int64_t kManyFp64WideScalarRowsMinBlocksPerSm = 6;
template <typename T> constexpr int many_scalar_rows_min_blocks(int vpl) {
  if (sizeof(T) == 8) return vpl == 2 ? kManyFp64TwoVectorRowsMinBlocks : kManyFp64ScalarRowsMinBlocks;
  return kManyScalarRowsMinBlocks;
}
template <typename T> constexpr bool many_scalar_rows_compiled(int vpl, bool log_softmax) {
  if (sizeof(T) == 8) return vpl == 2 || vpl == 4;
  return sizeof(T) == 2 ? vpl == 1 : sizeof(T) == 4 && vpl == 2 && log_softmax;
}
// fp64's kMany instantiations take the team's width at compile time (softmax_warp_rows_kernel's kLanes), one for each
// width many_scalar_rows gives them (2 vectors a lane: 32 lanes; 4: 16 or 32): a run-time width costs every row its
// jump tables and branches over the team width (the shuffles' steps, the lane strides). The 16-bit and fp32 ones read
// it at run time. H200, s106 call 2, 2 vectors a lane, run-time -> compile-time (496 -> 440 SASS instructions, the
// log_softmax kernel), us cold / streamed (torch): log_softmax 65536x105 37.8 / 34.9 -> 34.0-34.6 / 31.8 (31.7 / 29.2),
// x113 37.5 / 35.1 -> 34.1-34.4 / 32.1 (32.0 / 31.8), x127 38.9 / 36.0 -> 34.4-35.6 / 34.5 (34.4 / 35.4); softmax
// 65536x99 33.0 / 30.6 -> 30.0-30.5 / 28.6 (32.6 / 30.7), x113 34.6 / 31.6 -> 32.0 / 30.7 (33.4 / 32.6). These kernels
// issue an instruction nearly every cycle: the time follows the instruction count. s106 call 3, 4 vectors a lane
// (log_softmax 760 -> 664 SASS instructions on 16 lanes, 4 bytes spilled; 672 on 32): softmax 65536x75 27.0 / 26.3 ->
// 24.1-24.5 / 23.0 (30.4-31.3 / 27.7-28.0), x97 32.3 / 31.7-32.1 -> 29.8-30.5 / 29.4 (32.0-32.7 / 30.5), x143 46.2 /
// 47.2 -> 41.0 / 39.8 (47.7-48.0 / 46.0), x161 48.3 / 49.8 -> 43.3-43.5 / 42.9 (49.7-51.0 / 48.1-48.3); log_softmax
// 65536x101 34.4 / 34.5 -> 33.2-34.2 / 33.2 (30.8-31.6 / 28.9), x151 50.8 / 49.4 -> 44.7 / 42.9-43.1 (45.1-45.8 /
// 44.5-44.7); x89 and x113 level.
template <typename T> constexpr bool many_rows_fixed_lanes() { return sizeof(T) == 8; }
// fp64's aligned rows (16-byte vectors) take those instantiations too, log_softmax's with exp_sum_term for the sum (47
// -> 40 registers at 4 vectors a lane, 744 -> 640-648 static SASS instructions; local sm_90a). H200, s109 call 4, us
// cold / streamed, two rounds, general -> many-rows (torch): log_softmax 65536x100 31.1 / 29.7 -> 29.7-30.6 / 28.2
// (30.2-31.9 / 28.3-28.4), x160 50.9-51.6 / 49.6-49.9 -> 48.2-48.3 / 46.3 (45.4-46.2 / 44.7-44.9), x200 57.7-57.8 /
// 56.8-56.9 -> 55.0-55.2 / 53.8-53.9 (52.0-52.2 / 52.6-53.1), x128, x256 and 16384x256 level. Softmax's lost there
// (832-840 instructions against the general kernel's 816: softmax x160 45.4-45.5 / 44.7 -> 46.1-46.6 / 45.2) until
// the 4-vector kernels held their pointer (held_vector_rows: 760); then, s111 call 1, general -> many-rows (torch):
// softmax 65536x160 45.2-45.3 / 44.8-44.9 -> 43.0-43.1 / 43.1-43.2 (47.5-48.8 / 45.8-46.0), x100 (16 x 4) 28.3-28.4 /
// 27.8-27.9 -> 27.7-27.9 / 27.6 (32.5-33.6 / 30.5-30.6), x200 52.3-52.6 / 52.5 -> 51.7-51.9 / 52.3-52.5, 16384x256
// 19.6 / 18.8-18.9 -> 19.2-19.4 / 18.6-18.7, and at 2 vectors (32 x 2, 600 -> 592) 8192x100 10.0-10.1 / 6.3 ->
// 9.4-9.6 / 5.7 (9.6-9.7 / 6.9-7.0), 8192x128 9.2-9.3 / 6.5 -> 8.6-8.7 / 6.0 (10.4-10.7 / 7.5); x128 and x256 level.
template <typename T> constexpr bool aligned_many_rows(int vpl) {
  return many_rows_fixed_lanes<T>() && (vpl == 2 || vpl == 4);
}
// The elements of each lane that fp64's unaligned kMany instantiations load without a predicate (load_group's
// kAlwaysLive; aligned rows: none): as many as the shortest rows the plans give them hold in every lane (16 x 4 from
// 65 elements, 32 x 2 from 98, 32 x 4 from 129). launch_warp_rows takes them only for rows of lanes * that many
// elements or more (a forced plan may give a team shorter rows: the general instantiation runs those). Local SASS (sm_90a): every many-rows kernel then issues
// all its loads ahead of the row max (main had put the last 2-3 behind it in both 4-vector log_softmax kernels), 8-32
// fewer instructions. H200, s109 call 1, us cold / streamed, two rounds, main -> always-live (torch): log_softmax
// 65536x97 30.6-30.7 / 31.3-31.4 -> 27.4-28.2 / 27.4 (29.8-31.6 / 28.3-28.5), x199 54.6-55.0 / 53.8 -> 52.9-53.8 / 53.0
// (52.7-53.2 / 53.2-53.5), x225 61.9-62.2 / 61.3-61.4 -> 59.1-60.2 / 59.7-59.9 (59.5-59.8 / 59.9-60.1), 16384x199
// 17.7-17.9 / 16.2-16.3 -> 16.1-16.9 / 15.1-15.2 (16.2-17.8 / 15.6-15.7); softmax within 1 us either way (x151
// 41.5-41.6 / 41.2-41.3 -> 40.7-40.9 / 40.8-40.9).
template <typename T> constexpr int many_rows_always_live(bool aligned, int lanes, int vpl) {
  if (aligned || !many_rows_fixed_lanes<T>()) return 0;
  return lanes == 32 && vpl == 2 ? 3 : 4;
}
// Whether an aligned kMany instantiation steps one held pointer over its vectors (load_group / store_group's kHeld):
// fp64's of 4 vectors a lane (the aligned_many_rows kernels, 16 and 32 lanes). Local sm_90a SASS, the
// aligned 32 x 4 log_softmax kernel: each vector forming its own 64-bit address (IMAD.WIDE, LEA / LEA.HI.X, IMAD.X) took
// it to 648 static instructions against the unaligned one's 528 (the same math); a held pointer: 552 (16 x 4: 640 ->
// 544), 40 registers, no spills. H200, s110 call 1, us cold / streamed, two rounds, address per vector -> held (torch):
// log_softmax 65536x100 (16 x 4) 30.2-30.3 / 28.1 -> 27.2-27.6 / 27.4-27.5 (30.9-31.7 / 28.3-28.5), x160 47.8-48.2 /
// 46.2-46.3 -> 43.6-43.9 / 43.0 (45.4-46.2 / 44.8-44.9), x200 55.0-55.2 / 53.7-53.8 -> 51.8-52.2 / 52.5-52.9
// (51.9-52.0 / 52.7-53.1), 16384x256 19.2 / 18.8-18.9 -> 18.4-18.9 / 18.7 (18.5-20.0 / 19.1-19.2); x128 and x256
// level. Not at 2 vectors, bound to 8 blocks an SM: the 32 x 2 kernel spilled 12 bytes with it.
template <typename T> constexpr bool held_vector_rows(bool aligned, bool many, int vpl) {
  return aligned && many && many_rows_fixed_lanes<T>() && vpl == 4;
}
// Whether rows filling `blocks` blocks of kWarpRowsThreads threads (whatever the launch's block; warp_rows_threads
// gives these plans 256) in teams of `lanes` lanes of `vpl` vectors count as many rows (the kMany instantiation, where
// many_scalar_rows_compiled has one).
template <typename T> constexpr bool many_scalar_rows(int64_t blocks, int64_t sms, int lanes, int vpl) {
  if (sizeof(T) == 8) {
    return (lanes == 16 && vpl == 4) || (lanes == 32 && blocks >= kManyFp64WideScalarRowsMinBlocksPerSm * sms);
  }
  return sizeof(T) == 2 ? blocks >= kManyScalarRowsMinBlocksPerSm * sms
                        : lanes >= kManyFp32ScalarRowsMinLanes && blocks >= kManyFp32ScalarRowsMinBlocksPerSm * sms;
}
// Blocks per SM that the warp kernels for logsumexp of unaligned rows on the memory's grid are compiled for, set by
// the 16-bit 8-vector one (ShiftedRawLoads): 4 (<= 64 registers, no spills, local ptxas, s83); unbounded it took
// 79-80, and at 5 (<= 48) it spilled 12 bytes. The fp32 ones fit too, and the folded ones of both (at most 64, no
// spills, local ptxas, s86), and so do the 16-bit softmax and log_softmax kernels on the grid, which take the same
// bound (35-64 registers, no spills, local ptxas sm_90a and sm_80, s87) up to kMaxVpt vectors a lane (at 8:
// softmax_rows.cuh's kRawGridRowsMinBlocks). Not timed against the others yet.
constexpr int kShiftedLseMinBlocks = 4;
constexpr int kMaxBlockThreads = 1024;   // block-per-chunk kernel: any multiple of 32 up to this
constexpr int kSplitThreads = 512;       // rows needing more threads than this (at the large vpt) split
constexpr int kSplitBlockThreads = 256;  // block size of the split-row configuration (H100 sweep: beat 512)
constexpr int kStreamThreads = 256;      // streaming kernels
constexpr int kStreamUnroll = 4;         // 16-byte vectors in flight per thread per step
constexpr int kColumnThreads = 256;      // column kernel: blockDim.x * blockDim.y

// Where the chunks of split rows meet (split_exchange.cuh): per item = row * chunks + chunk a 16-byte
// partial, two 64-bit words. Float accumulators: (m bits | tag << 32, d bits | ~tag << 32), so a partial
// is this launch's once both high halves carry its tag; nothing needs filling before the launch (host:
// SplitWorkspace). Double accumulators: (m, d) as doubles, ordered by one counter per row that starts at 0.
struct RowExchange {
  uint64_t* partials;
  int* counters;           // double accumulators only
  uint32_t tag;            // float accumulators only: this launch's, distinct from the previous 2^32 launches'
};

// Rows (inner == 1), row-cached kernels. x: (rows, len) contiguous; y: (rows, len), or (rows) for LSE.
template <typename T> struct RowsParams {
  const T* x;
  T* y;
  int64_t rows;
  int64_t len;
  bool online;             // one fused (m, d) reduction; false: max reduction, then sum reduction
  SoftmaxOutput output;
  int lanes_log2;          // warp kernel: log2 of the lanes per row, in [0, 5]
  int chunks;              // block kernel: blocks per row (1: block-per-row; > 1: split-row)
  int smem_vecs;           // block kernel, aligned rows: 16-byte vectors per thread kept in shared memory
  RowExchange exchange;    // split-row only
};

// Rows (inner == 1), pipelined kernel (sm_90): items are (row, chunk) pairs, whole rows when chunks == 1.
// Each persistent block streams its items through a ring of `ring_pieces` shared-memory pieces of
// `piece_elems` elements, filled by bulk (TMA) copies; an item occupies ceil(chunk length / piece_elems)
// consecutive pieces. x and y 16-byte aligned, len a multiple of the 16-byte vector.
constexpr int kPipeMaxPieces = 32;
// Shared memory the ring sizing (pipe_ring_pieces) sets aside for the kernels' static arrays (barriers, row
// scratch): the pipelined kernel's, at most 912 bytes, rounded up to the ring's 128-byte alignment (asserted
// in the kernel). The dual kernel's (up to 1568 bytes for fp64) fit in the slack its 14-piece ring leaves.
constexpr int kPipeStaticSmemBytes = 1024;
// Block size bound: up to 128 registers per thread, so the groups of fp64 vectors stay out of local memory.
constexpr int kPipeMaxThreads = 512;
// How a pipelined launch orders itself against the grids around it (grid_dependency.cuh). Whole rows whose
// count leaves the persistent grid's last round part-filled run as two launches: a head of whole rounds and a
// tail of one block per remaining row, whose blocks the hardware places in the slots the head's blocks free
// first. Plain: launch the next grid, then wait for the previous one (every other launch). Head: wait, then
// launch the tail, so the tail starts only once everything before the head is complete. Tail: launch the next
// grid and start at once (its input is complete, see Head, and it reads it by bulk copies, through L2; its
// rows are disjoint from the head's), and wait for the head only before exiting, so a grid after the tail
// that waits for it also waits for the head.
enum class GridOrder : int { Plain, Head, Tail };
template <typename T> struct PipeParams {
  const T* x;
  T* y;
  int64_t rows;
  int64_t len;
  int64_t chunk_elems;     // multiple of the vector; (chunks - 1) * chunk_elems < len <= chunks * chunk_elems
  int chunks;              // blocks per row; > 1: the row's (m, d) is exchanged (reduce_row_state)
  int piece_elems;         // multiple of the vector
  int ring_pieces;         // <= kPipeMaxPieces, >= pieces of one item + 1
  SoftmaxOutput output;
  RowExchange exchange;    // chunks > 1 only
  GridOrder order;
  int teams = 1;           // resident kernel: whole rows a block holds, one per team (kResidentTeams); 1: one item
  bool registers_first = false;  // dual kernel, 16-bit types: the register role takes the even rounds in every block
  int64_t last_round = 0;  // dual kernel, fp32 whole rows: > 0, the first row of a last round the register role takes
};

// Rows that do not fit on chip: separate passes over global memory. Items are (row, chunk) pairs.
enum class StreamPass : int { Max, SumAtMax, State };
template <typename T> struct StreamParams {
  const T* x;
  T* y;
  int64_t rows;
  int64_t len;
  int64_t chunk_elems;     // multiple of kStreamThreads * kStreamUnroll * kVec
  int chunks;              // chunks per row
  StreamPass pass;         // reduce kernel only
  bool online;             // normalize kernel: partials are (m, d) states; false: maxima and sums at M
  SoftmaxOutput output;
  acc_t<T>* part_m;        // [rows * chunks]; nullptr for logsumexp of one-chunk rows (the reduce writes y)
  acc_t<T>* part_d;        // [rows * chunks]; likewise
};

// inner > 1: x viewed as (outer, len, inner); y: the same shape, or (outer, inner) for LSE.
template <typename T> struct ColumnsParams {
  const T* x;
  T* y;
  int64_t outer;
  int64_t len;
  int64_t inner;
  bool online;
  SoftmaxOutput output;
};

// on_grid: unaligned rows held on the memory's grid (lse_rows_on_grid, or softmax and log_softmax under a plan's
// grid=1; the team holds the row's own vectors); fold: some row's shift can take it one granule past the team's slots
// (FoldedGranule).
// many_rows: many_scalar_rows holds for the launch (the launcher takes the instantiation of many_scalar_rows_compiled
// there, where it exists). threads: the block, a multiple of 32 up to kWarpRowsThreads (the kernels' bound).
template <typename T> void launch_warp_rows(const RowsParams<T>& p, int vpl, bool aligned, bool on_grid, bool fold,
                                            bool many_rows, int grid, int threads, cudaStream_t stream);
// Cooperative when p.chunks > 1: then every block must be co-resident (grid <= resident capacity).
template <typename T> void launch_block_rows(const RowsParams<T>& p, int vpt, bool aligned, int threads,
                                             int grid, cudaStream_t stream);
// Resident blocks per SM of the block kernel for this configuration (0 when it cannot launch).
template <typename T> int block_rows_blocks_per_sm(int vpt, bool aligned, int threads, size_t smem_bytes);

// Pipelined kernel: usable only where the kernel was compiled for sm_90 or later (bulk copies,
// transaction barriers); pipe_supported says so for the current device. Cooperative when chunks > 1.
template <typename T> bool pipe_supported();
template <typename T> void launch_pipelined_rows(const PipeParams<T>& p, int threads, int grid, cudaStream_t stream);
template <typename T> int pipe_blocks_per_sm(int threads, size_t smem_bytes);
// Dynamic shared memory of the pipelined kernel's ring, in bytes.
template <typename T> size_t pipe_smem_bytes(const PipeParams<T>& p) {
  return static_cast<size_t>(p.ring_pieces) * p.piece_elems * sizeof(T);
}

// Dual-role kernel (softmax_dual.cuh, sm_90+): one block of 640 threads per SM, the pipelined kernel's
// ring for the even rounds of items and registers for the odd ones; items of at most kDualMaxItemBytes and
// of at most ring_pieces pieces; grid a multiple of chunks. Cooperative when chunks > 1. Unaligned rows (off
// rows_aligned16; the output on the input's grid) on their own instantiations, for fp32 and 16-bit types
// (dual_takes_unaligned).
constexpr int64_t kDualMaxItemBytes = 128 * 1024;
template <typename T> bool dual_supported();
template <typename T> bool dual_takes_unaligned();
template <typename T> int dual_blocks_per_sm(size_t smem_bytes);
template <typename T> void launch_dual_rows(const PipeParams<T>& p, int grid, cudaStream_t stream);

// Resident kernel (softmax_resident.cuh, sm_90+, 16-bit types and fp32, softmax and log_softmax): one block of 512
// threads per item (row * chunks + chunk, chunk_elems of at most kResidentMaxItemBytes), one per SM; split rows (chunks
// > 1) all resident at once (grid = rows * chunks <= SMs, a cooperative launch), whole rows wave after wave. With teams
// > 1 (2, 4 or 8; chunks == 1, chunk_elems == len): `teams` whole rows of at most kResidentMaxItemBytes / teams a
// block, grid = ceil(rows / teams); or teams == 8 over split rows (16-bit, chunks > 1, chunk_elems of exactly
// kResidentMaxItemBytes / 8, rows a multiple of 8): a chunk of 8 rows a block, grid = rows / 8 * chunks <= SMs, a
// cooperative launch. piece_elems and ring_pieces unused.
constexpr int64_t kResidentMaxItemBytes = 512 * 1024;
constexpr size_t kResidentMaxSmemBytes = 224 * 1024;  // the longest item's shared-memory part
// An item's register and shared-memory parts (the rest goes through L2); a team's row is 1 / teams of it.
constexpr int64_t kResidentOnChipItemBytes = kResidentMaxItemBytes - 128 * 1024;
template <typename T> bool resident_supported();
// Whether the device's opt-in shared memory holds the longest item's pieces (kResidentMaxSmemBytes) next to the static
// arrays of every resident instantiation with `teams` rows a block (1: one item a block).
template <typename T> bool resident_fits(int teams);
template <typename T> int resident_rows_blocks_per_sm(const PipeParams<T>& p);
template <typename T> void launch_resident_rows(const PipeParams<T>& p, cudaStream_t stream);

template <typename T> void launch_stream_reduce(const StreamParams<T>& p, bool aligned, int grid,
                                                cudaStream_t stream);
template <typename T> void launch_stream_normalize(const StreamParams<T>& p, bool aligned, int grid,
                                                   cudaStream_t stream);
template <typename T> void launch_logsumexp_finalize(const StreamParams<T>& p, cudaStream_t stream);
template <typename T> void launch_columns(const ColumnsParams<T>& p, cudaStream_t stream);

}  // namespace softmax
}  // namespace flash_attn_ext
