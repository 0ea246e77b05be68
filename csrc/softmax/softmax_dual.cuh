#pragma once
// Dual-role row kernel (sm_90+) for rows split over many blocks. Why: the pipelined kernel's block folds,
// waits for its row's exchange and stores in turn, and while every block of a round waits, DRAM idles
// (its split rows ran 70-74 % of copy bandwidth; with the exchange removed 86 %). Here every SM runs two
// independent item chains: the ring role (4 warps) walks the even rounds through the pipelined kernel's ring
// of bulk copies (ring_items), the register role (16 warps) the odd rounds with each thread's 16 vectors of
// the item in registers. Each role reduces, exchanges and waits on its own named barrier, and the register
// role starts once most of the ring role's first item has landed (kStartPiece), so the roles run out of phase:
// while one waits on its row, the other streams (H100 probe, NOTES "probe s16": fp32 8x4194304 105-111 us
// against 126-128, bf16 58-60 against 63). Each element is still read once and written once.
// Unaligned rows (odd lengths, the output on the input's grid; fp32 and 16-bit types) run on instantiations of their
// own (kShifted: pipe::ItemVectors in both roles). Before, the pipelined or split kernels took them; H200, us cold,
// main -> these, two rounds (NOTES "s69 call A"): fp32 8x4194303 117.5-117.8 -> 95.2-95.6, 128x262143 102.2-102.6 ->
// 91.2-91.4, 1024x32767 96.3-96.5 -> 86.0-86.1, 1024x20001 62.5-62.6 -> 56.0-56.1; the aligned kernels' SASS is
// unchanged.
#include "common/named_barrier.cuh"
#include "softmax/softmax_pipelined.cuh"

namespace flash_attn_ext {
namespace softmax {
namespace dual {

constexpr int kRingThreads = 128;  // the ring role: 4 warps, as the pipelined kernel's fp32 plan
constexpr int kRegThreads = 512;   // the register role: 16 warps
constexpr int kRegVecs = 16;       // 16-byte vectors per register-role thread: items of at most 128 KB
constexpr int kThreads = kRingThreads + kRegThreads;
static_assert(int64_t(kRegThreads) * kRegVecs * 16 == kDualMaxItemBytes, "the host's item bound");
// How many requests each role keeps queued. Why: a row exchange's L2 round trips wait behind the SM's own
// outstanding loads (NOTES, "trace s18": 4-12 us after the row's last fold with every load issued at once,
// against ~2 us on an idle SM), so beyond what keeps DRAM busy, more loads in flight only lengthen the
// exchanges. Register role: loads in flight per thread; ring role: bulk-copy pieces in flight (0: as many as
// the ring has free slots). H100 probe s18 (plain-read flush, us, all in flight -> these): bf16 (8, 0)
// 128x262144 57.4 -> 53.0, 8x4194304 58.3 -> 54.1 (windows of 8-12 pieces: 1-2 % slower); fp32 (14, 5)
// 128x262144 106.0 -> 100.6, 8x4194304 109.1 -> 103.3, 1024x32768 94.9 -> 94.6 ((12, 4) alike on split
// rows, 1.3 % slower on whole ones; a window of 8 pieces 5 % slower than none). With the word exchange
// (s20 probe, us): fp32 (12, 5) 8x4194304 98.7 against (14, 5) 101.7, 128x262144 97.1 against 99.9, whole
// rows 1024x32768 95.1 against 94.7 (10 loads: 2-6 % slower); bf16 (8, 0) stays best (6 loads 1-2 %
// slower, any ring window 2-7 % slower). fp64 not measured.
// On the H200 (1.4x the H100's DRAM bandwidth, so by Little's law more bytes must be in flight for the same
// latency) fp32's ring window of 5 held its ring role back: no window (0) ran 1.5-3.5 us faster streamed on
// every dual shape and 1-2 us cold (NOTES "s58 calls 1-3", window 5 -> 0, us streamed: 1024x32768 77.6 ->
// 75.4-76.2, 128x262144 85.7-86.2 -> 81.3-83.5, 2048x50304 249.8-250.8 -> 236.1-237.8, 512x151936 195.7-196.0
// -> 186.6-189.1); a window of 8 gained half of that. The register role's 12 loads stay: 16 ran 3-4 us
// slower, 14 1-3 us slower, 10 2-6 us faster cold but 2-7 us slower streamed; bf16's 8 stay (12 and 16: 5-20
// us slower on the bf16 dual shapes). The H100 is no longer lent: not re-measured there.
template <typename T> constexpr int kDualLoadsInFlight = sizeof(T) == 2 ? 8 : sizeof(T) == 4 ? 12 : kRegVecs;
template <typename T> constexpr int kDualRingWindow = 0;
constexpr int kRingBarrier = 1;   // named barriers: the ring role's, the register role's, and the start
constexpr int kRegBarrier = 2;
constexpr int kStartBarrier = 3;
// The register role starts when piece kStartPiece of the ring role's first item has landed (of 8 pieces in a
// 128 KB item; items of at most kStartPiece pieces: once folded). H100 probe s21 (us, after the fold -> at
// piece 6): bf16 128x262144 52.3-52.4 -> 50.8-51.5, 8x4194304 52.5-52.8 -> 52.9; fp32 8x4194304 101.1-101.2 ->
// 99.8-100.8, 128x262144 96.6-98.0 -> 96.6-98.1. At once (no start barrier): bf16 128x262144 51.0-51.5, but fp32 split
// rows 10 % slower (both roles fold, and then wait on their rows, in phase); at pieces 0-4: in between.
// fp32 on the H200 with no ring window (s58 calls 2-3, three rounds): after the fold (kPipeMaxPieces: past
// any item's last piece) took fp32 8x4194304 cold from 87.5-87.8 to 82.8-83.0 us (streamed 84.9-85.8 ->
// 85.6-86.6), the other dual shapes level; piece 4 level with 6. 16-bit types keep piece 6 (not re-measured).
template <typename T> constexpr int kStartPiece = sizeof(T) == 4 ? kPipeMaxPieces : 6;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The same 16 bytes, hidden from the optimizer: each pass over the register role's vectors unpacks them
// afresh instead of keeping 128 unpacked 16-bit values live across the exchange (which spilled).
__device__ __forceinline__ uint4 opaque(uint4 r) {
  asm volatile("" : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w));
  return r;
}

// The max of vectors [first, first + count) of a thread's 16-bit vectors, compared as packed pairs (HMNMX2, NaN
// ignored as fmaxf does): unpacking all 128 values here let the compiler keep them for the passes below, and spill.
template <typename T>
__device__ __forceinline__ float packed_max(const uint4 (&raw)[kRegVecs], int first, int count) {
  using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  Pair mx = bit_cast<Pair>(raw[first].x);
#pragma unroll
  for (int s = first; s < first + count; ++s) {
    mx = __hmax2(mx, bit_cast<Pair>(raw[s].x));
    mx = __hmax2(mx, bit_cast<Pair>(raw[s].y));
    mx = __hmax2(mx, bit_cast<Pair>(raw[s].z));
    mx = __hmax2(mx, bit_cast<Pair>(raw[s].w));
  }
  return fmaxf(__low2float(mx), __high2float(mx));
}

// The (max, sum of exp(x - max)) of a thread's 16-bit vectors, folded online kFoldGroup vectors at a time: the
// group's packed max, the carried sum rescaled once, then the group's exponentials (FusedExp2). Why: with groups of
// the 16-bit loads in flight (kDualLoadsInFlight), the first group folds while the second group's loads are still in
// flight, where the max of all 16 vectors and then their sum waited for the last load. H100, bf16, us, stream /
// cold, max-then-sum -> this (three alternating processes, NOTES "s46 call 1"): 128x262144 52.5-53.6 / 50.0-50.1 ->
// 52.5-52.9 / 49.4-49.7, 8x4194304 54.1-54.6 / 51.5-52.5 -> 53.8-54.1 / 51.1-52.7, 256x131072 52.8-53.7 /
// 49.5-50.1 -> 52.5-52.6 / 49.4-49.9. Groups of 4 (4 bytes of spills) ran 1-3 us slower streamed; session 37
// (before the L2 prefetch) had groups of 4 0.5-0.9 us faster streamed and up to 1.1 us slower cold. bfloat16 only:
// float16 ran 0.1-1 us slower with it in three rounds ("s46 call 3": 2048x50304 157.3-158.0 / 155.2-155.4 ->
// 158.5-158.9 / 156.2-156.4, 128x262144 cold 50.0-50.4 -> 50.6-51.0; cause not found), so it keeps max-then-sum.
// Each group's step is online_math.cuh's fold() on packed data: fold() itself wants the group unpacked first, and
// 64 unpacked floats beside the 64 registers of raw vectors spilled 304 bytes at the kernel's 96 registers.
constexpr int kFoldGroup = 8;
static_assert(kRegVecs % kFoldGroup == 0, "whole groups");
template <typename T> __device__ __forceinline__ OnlineState<float> fold_online_16bit(const uint4 (&raw)[kRegVecs]) {
  static_assert(sizeof(T) == 2, "16-bit vectors");
  constexpr int kVec = 8;
  OnlineState<float> st{neg_inf<float>(), 0.0f};
#pragma unroll
  for (int g = 0; g < kRegVecs / kFoldGroup; ++g) {
    const float m = amax(st.m, packed_max<T>(raw, g * kFoldGroup, kFoldGroup));
    const float carried = st.d * rescale(st.m, m);
    const FusedExp2 e = FusedExp2::at<T>(m);
    float sum = 0.0f;
#pragma unroll
    for (int s = g * kFoldGroup; s < (g + 1) * kFoldGroup; ++s) {
      float w[kVec];
      VecIO<T>::unpack(opaque(raw[s]), w);
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += e(w[j]);
    }
    st = {m, fmaf(sum, e.correction, carried)};
  }
  return st;
}

// The max of a thread's fp32 / fp64 vectors.
template <typename T> __device__ __forceinline__ acc_t<T> max_of_vectors(const uint4 (&raw)[kRegVecs]) {
  acc_t<T> mx = neg_inf<acc_t<T>>();
#pragma unroll
  for (int s = 0; s < kRegVecs; ++s) {
    acc_t<T> w[1][16 / sizeof(T)];
    VecIO<T>::unpack(raw[s], w[0]);
    mx = amax(mx, max_of(w));
  }
  return mx;
}

// The sum of e(x) over a thread's vectors.
template <typename T, typename Exp>
__device__ __forceinline__ acc_t<T> sum_of_exps(const uint4 (&raw)[kRegVecs], const Exp& e) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  A d = A(0);
#pragma unroll
  for (int s = 0; s < kRegVecs; ++s) {
    A w[kVec];
    VecIO<T>::unpack(opaque(raw[s]), w);
#pragma unroll
    for (int j = 0; j < kVec; ++j) d += e(w[j]);
  }
  return d;
}

// The first half of item `next` (the register role's next item, if any) prefetched into L2, one 128-byte line per
// thread (thread t: line t; items hold at most 2 * kRegThreads lines). register_items issues it once, after its
// first item's row exchange and before that item's store pass. Why: early in a call every SM folds or stores at the
// same moment and DRAM idled for ~3 us at a time (PM sampling, NOTES "s36 call 5"); these reads run under the store
// pass, and the role's next loads find half their lines in L2. H100, bf16, us, none -> this (NOTES "s41 call 8"):
// streamed 128x262144 56.0-56.1 -> 52.9-53.4, 8x4194304 56.1-57.1 -> 54.8-55.0, 256x131072 56.4 -> 52.8-54.2,
// 512x151936 130.9-131.7 -> 129.2-129.6; cold within noise or faster (512x151936 122.0-122.7 -> 120.9). After every
// item instead (s41 calls 1-7): 2048x50304 (whole rows) 2-6 us faster, but 1024x128256 9 us and 512x151936 4 us
// slower cold, where many rounds run out of phase and the prefetched lines probably wait in L2 long enough to be
// evicted. Measured and not taken: the whole item (128x262144 53.7-54.7 streamed, +1.5 us cold), a quarter
// (54.1-54.3), 3/8 to 3/4 (within noise of half), the second half (58.7: slower than none), the same lines before
// the exchange (57.6-58.0: probably queued ahead of the exchange's polls, as loads are), one bulk prefetch of the
// item from one thread (54.5-54.8), the evict-last priority (as fast, cold 0.5 us better, but it would leave those
// lines last in L2's eviction order for whatever runs next), the ring role's pieces beyond its free slots
// (nothing). fp32 did not gain (128x262144 streamed 99.0-99.6 -> 99.8-101.1, 8x4194304 cold 100.0-100.7 ->
// 102.2-104.4), so only 16-bit types prefetch.
template <typename T> __device__ __forceinline__ void prefetch_half_item(const PipeParams<T>& p, int64_t next, int t) {
  constexpr int kLineElems = 128 / static_cast<int>(sizeof(T));
  if (next >= p.rows * p.chunks) return;
  const RowChunk span(next, p.chunks, p.chunk_elems, p.len);
  if (t < static_cast<int>(span.end - span.begin) / (2 * kLineElems)) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p.x + span.row * p.len + span.begin + t * kLineElems));
  }
}

// The register role's store pass (output known at compile time, as pipe::store_item).
template <typename T, bool kSoftmax>
__device__ __forceinline__ void store_registers(T* y, const uint4 (&raw)[kRegVecs], int nvec, int t,
                                                const Epilogue<T>& epi, acc_t<T> row_max) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const auto term = pipe::output_term<T, kSoftmax>(epi, row_max);
#pragma unroll
  for (int s = 0; s < kRegVecs; ++s) {
    const int v = s * kRegThreads + t;
    A w[kVec];
    VecIO<T>::unpack(opaque(raw[s]), w);
#pragma unroll
    for (int j = 0; j < kVec; ++j) w[j] = term(w[j]);
    if (v < nvec) store16_streaming(y + static_cast<int64_t>(v) * kVec, VecIO<T>::pack(w));
  }
}

// The register role's walk over its items first_item, first_item + step, ... (and, fp32 with p.last_round, the
// block's item of the last round after them: the trace's item numbers then repeat): thread t loads vectors
// t, t + kRegThreads, ... of the item (-inf past its end), folds them (bfloat16: online, fold_online_16bit; the
// others: the max, then the sum against it), merges with the role and exchanges the row, then normalizes and
// stores from registers. Stores are evict-first for every type: with the default policy the fp32 role ran 1.4x
// slower (probe s16).
// kLoadsInFlight < kRegVecs: vector s is loaded only once vector s - kLoadsInFlight has landed (its address
// depends on that vector through a select the compiler cannot fold), so at most kLoadsInFlight vectors per
// thread are in flight (kDualLoadsInFlight). kSoftmaxOnly: as ring_items. kShifted: unaligned rows (the output on
// the input's grid): the item's vectors on the memory's grid (pipe::ItemVectors), [lo, hi) as above from vector lo,
// the edges copied by thread 0 into shared memory (pipe::edge_slots) by cp.async, folded and stored element by
// element there. Why not registers: the 16 vectors a thread already take most of the 96 registers a thread of 640
// has. kShifted == false: the code as it was measured.
template <typename T, int kLoadsInFlight = kRegVecs, bool kSoftmaxOnly = false, bool kShifted = false>
__device__ __forceinline__ void register_items(const PipeParams<T>& p, int64_t first_item, int64_t step,
                                               OnlineState<acc_t<T>>* scratch) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const RoleTeam team{kRingThreads, kRegThreads, kRegBarrier};
  const int t = team.rank();
  const int64_t items = p.rows * p.chunks;

  // (fp32, p.last_round > 0: after its last item below the last round, the role takes the block's item of that round
  // too; compile-time, so that the other types' code stays as measured: 16-bit types spilled 20-50 B more with it)
  const auto next_item = [&](int64_t item) {
    return sizeof(T) == 4 && item + step >= items && item < p.last_round ? item + gridDim.x : item + step;
  };
  for (int64_t item = first_item; item < items; item = next_item(item)) {
    const RowChunk span(item, p.chunks, p.chunk_elems, p.len);
    const T* const x_first = p.x + span.row * p.len + span.begin;
    const pipe::ItemVectors<T> iv(x_first, span.begin, span.end, kShifted);
    const int nvec = kShifted ? iv.hi - iv.lo : static_cast<int>(span.end - span.begin) / kVec;
    const T* const xg = x_first - iv.shift;  // vector 0 of iv
    const T* x = kShifted ? xg + iv.lo * kVec : x_first;
    const bool edges = kShifted && t == 0 && (iv.head_edge() || iv.tail_edge());
    FAE_PHASE_STAMP(t, 1, (item - first_item) / step, 0);
    uint4 raw[kRegVecs];
#pragma unroll
    for (int s = 0; s < kRegVecs; ++s) {
      const int v = s * kRegThreads + t;
      int64_t offset = static_cast<int64_t>(v) * kVec;
      if constexpr (kLoadsInFlight < kRegVecs) {
        if (s >= kLoadsInFlight) offset += p.rows < 0 ? static_cast<int>(raw[s - kLoadsInFlight].x) : 0;
      }
      raw[s] = v < nvec ? load16(x + offset) : neg_inf_vector<T>();
    }
    if (edges) {
      if (iv.head_edge()) cp_async16(pipe::edge_slots(), xg);
      if (iv.tail_edge()) cp_async16(pipe::edge_slots() + 1, xg + (iv.vecs - 1) * kVec);
    }
    OnlineState<A> local;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      local = fold_online_16bit<T>(raw);
    } else if constexpr (sizeof(T) == 2) {
      const A m = packed_max<T>(raw, 0, kRegVecs);
      const FusedExp2 e = FusedExp2::at<T>(m);
      local = {m, sum_of_exps<T>(raw, e) * e.correction};
    } else {
      const A m = max_of_vectors<T>(raw);
      local = {m, sum_of_exps<T>(raw, ShiftedExp<A, kFastFloatExp<T, A>>(m))};
    }
    if (edges) {
      cp_async_wait_all();
      pipe::fold_edge_vectors<T>(local, iv, pipe::EdgeSlotsAt{});
    }
    FAE_PHASE_STAMP(t, 1, (item - first_item) / step, 1);
    const OnlineState<A> row_state = reduce_row_state(p.exchange, p.chunks, span.row, item, local, scratch, team);
    FAE_PHASE_STAMP(t, 1, (item - first_item) / step, 2);
    if constexpr (sizeof(T) == 2) {
      if (item < step) prefetch_half_item(p, item + step, t);  // the first item: first_item < step for either role
    }
    const SoftmaxOutput out = kSoftmaxOnly ? SoftmaxOutput::Softmax : p.output;
    if (out == SoftmaxOutput::LogSumExp) {
      if (t == 0 && span.begin == 0) p.y[span.row] = from_acc<T>(row_lse(row_state));
      continue;
    }
    const Epilogue<T> epi(out, row_state, row_state.m);
    T* const y_first = p.y + span.row * p.len + span.begin;
    T* y = kShifted ? y_first - iv.shift + iv.lo * kVec : y_first;
    if (out == SoftmaxOutput::Softmax) {
      store_registers<T, true>(y, raw, nvec, t, epi, row_state.m);
    } else {
      store_registers<T, false>(y, raw, nvec, t, epi, row_state.m);
    }
    if (edges) {
      // (the slots are read here, before the next item's copies into them are issued)
      T* const y_iv = y_first - iv.shift;
      if (out == SoftmaxOutput::Softmax) {
        pipe::store_edge_vectors<T>(y_iv, iv, pipe::output_term<T, true>(epi, row_state.m), pipe::EdgeSlotsAt{});
      } else {
        pipe::store_edge_vectors<T>(y_iv, iv, pipe::output_term<T, false>(epi, row_state.m), pipe::EdgeSlotsAt{});
      }
    }
    FAE_PHASE_STAMP(t, 1, (item - first_item) / step, 3);
  }
}
#endif

// Shape: persistent grid of one block per SM, gridDim.x a multiple of p.chunks (round k = items
// [k * gridDim.x, (k + 1) * gridDim.x) holds whole rows); items of at most kDualMaxItemBytes and of at most
// p.ring_pieces pieces. Block: kThreads = the ring role (threads [0, 128), rounds 0, 2, 4, ...) + the
// register role (threads [128, 640), rounds 1, 3, 5, ...), the other way round in the odd row groups of 16-bit
// split rows (blocks [k * chunks, (k + 1) * chunks), k odd) and in every block for 16-bit whole rows in an odd number
// of rounds (p.registers_first); fp32 whole rows in an odd number of rounds R: the ring role rounds 0, 2, ..., R - 3,
// the register role 1, 3, ..., R - 2 and R - 1 (p.last_round). Dynamic shared memory: the ring.
// Deadlock freedom: each role's items ascend and its rows' chunks lie in one of its rounds (a row's chunks
// lie in one row group, so in the swapped groups too they meet in the same role), so the induction of
// reduce_row_state holds per role; the roles wait on nothing of each other's except the start barrier, which
// the ring role passes while folding its first item, before any exchange (every block has one: gridDim.x <=
// items; the swapped groups have no start barrier).
// kSoftmaxOnly: launched for p.output == Softmax only, with the log_softmax and logsumexp epilogues compiled
// out. Why: the kernel is large (bf16: 5560 SASS instructions at bfebd52, 5656 in s22), and after a large
// kernel (a torch reduction, a GEMM) has evicted it from the SMs' instruction caches, a call ran 2-4 us slower;
// 750 fewer instructions took 1.2-1.7 us of that back (H100 probe after a 10k-instruction kernel, bf16 split
// rows, NOTES "s22 run 10"; 0.5-1.3 us slower when the code is still cached).
// kShifted: unaligned rows, the output on the input's grid (pipe::ItemVectors; fp32 and 16-bit types).
template <typename T, int kLoadsInFlight = kRegVecs, int kRingWindow = 0, bool kSoftmaxOnly = false,
          bool kShifted = false>
__global__ void __launch_bounds__(kThreads, 1) softmax_dual_rows_kernel(const PipeParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  begin_dependent_grid();
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ uint64_t bars[kPipeMaxPieces];
  __shared__ OnlineState<acc_t<T>> s_ring[kRowScratch], s_reg[kRowScratch];
  pipe::init_ring_barriers(bars, p.ring_pieces);
  const int64_t step = 2 * static_cast<int64_t>(gridDim.x);
  // 16-bit split rows: in the odd row groups the register role takes the even rounds and the ring role the odd
  // ones, and both start at once. Why: with one schedule every block starts the same work at the same moment,
  // so the SMs fold and store into L2 in lockstep while none of them reads, and DRAM idled for ~3 us at a time
  // (PM sampling of bf16 128x262144, NOTES "s36 call 5"). Two schedules de-phase them: bf16 split rows 2-3 us
  // faster streamed, 0.5-1 us cold ("s36 calls 7-8"); a start delay of 2 us for the odd groups instead gained as
  // much streamed but lost 1 us cold ("s36 call 6"), and the ring role waiting for the register role's first
  // loads there lost 3-5 us ("s36 call 7"). fp32 split rows did not move, and fp32 whole rows lost 4 us.
  // 16-bit whole rows in an odd number of rounds (p.registers_first): every block swaps, so that the last round's
  // items go to the register role, not to the ring role's 4 warps alone on the SM: forced dual, us cold / streamed
  // (NOTES "s70 call 4"), bf16 529x41001 45.6-46.0 / 41.1-41.2 -> 39.1-39.3 / 38.6-38.8, 660x41001 48.3-48.6 /
  // 45.5-45.6 -> 44.4 / 43.3-43.4. fp32 lost (529x32768 44.8-45.0 -> 46.4-46.5, 396x32768 31.3 -> 34.2-34.3), as its
  // whole rows did in the split rows' schedule, so it keeps one schedule (and its code: the test is compile-time).
  const bool swapped =
      sizeof(T) == 2 && (p.registers_first || (p.chunks > 1 && (blockIdx.x / p.chunks) % 2 == 1));
  if (threadIdx.x < kRingThreads) {
    // fp32 whole rows in an odd number of rounds (p.last_round > 0): the ring role stops before the last round,
    // which the register role takes (register_items), so that the ring role's 4 warps do not run it alone on the SM.
    PipeParams<T> ring_p = p;
    if (sizeof(T) == 4 && p.last_round > 0) ring_p.rows = p.last_round;
    pipe::ring_items<T, true, kRingWindow, kSoftmaxOnly, kShifted>(
        ring_p, swapped ? blockIdx.x + gridDim.x : blockIdx.x, step, RoleTeam{0, kRingThreads, kRingBarrier}, ring,
        bars, s_ring, pipe::StartSignal{swapped ? 0 : kStartBarrier, kThreads, kStartPiece<T>});
  } else {
    if (!swapped) named_barrier_sync(kStartBarrier, kThreads);
    const int64_t first_item = swapped ? blockIdx.x : blockIdx.x + gridDim.x;
    register_items<T, kLoadsInFlight, kSoftmaxOnly, kShifted>(p, first_item, step, s_reg);
  }
#endif
}

// The instantiations the library launches, softmax and the other outputs (softmax_dual.cu; the probe times
// them too).
template <typename T, bool kSoftmaxOnly, bool kShifted = false>
constexpr auto library_kernel =
    softmax_dual_rows_kernel<T, kDualLoadsInFlight<T>, kDualRingWindow<T>, kSoftmaxOnly, kShifted>;

}  // namespace dual
}  // namespace softmax
}  // namespace flash_attn_ext
