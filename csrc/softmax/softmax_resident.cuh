#pragma once
// Resident row kernel (sm_90+, 16-bit types and fp32, unaligned rows too) for tensors that fit on chip and in a slice
// of L2: one block per SM holds one item (row * chunks + chunk, at most kResidentMaxItemBytes) from its first read to
// its store, in registers (kRegVecs vectors a thread), in shared memory (bulk-copied 16 KB pieces) and, for what is
// left, in L2 (read under an evict-last policy, folded, read again for the store). Phase A reads and folds the whole
// item, the row's (m, d) is exchanged once (reduce_item_state), phase B stores it all. Why: the dual kernel
// (softmax_dual.cuh) must hold about half the input on chip and write it late, and streamed its bf16 split rows ran
// 53-54 us against the 85 % line of 52.6; here every SM reads, then writes, and the whole call has one exchange per
// row. H100, bf16, streamed, through the op (sweep_softmax.py), against the dual kernel in the same run (NOTES "s55
// call 9"): 128x262144 (one row per block) 50.0-50.4 us against 53.9, 8x4194304 (16 blocks per row) 52.2-52.4 against
// 53.4, 64x524288 51.6 against 52.9, 4x8388608 52.6 against 55.1, 120x262144 47.9 against 50.6; a copy of the same
// bytes 46.3. A probe of the same design (s55 calls 1-5) ran 49.5 / 51.7 us on the first two shapes; with items of
// exactly 512 KB on their own instantiation (ItemFill::Whole) the kernel reads 49.6 / 52.2 beside it (s56 call 1). Each
// element is read from DRAM once and written once.
#include "common/l2_policy.cuh"
#include "common/named_barrier.cuh"
#include "softmax/softmax_dual.cuh"

namespace flash_attn_ext {
namespace softmax {
namespace resident {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kRegVecs = 20;  // registers: 160 KB a block (24 spilled and ran no faster; 16 ran 2 us slower)
constexpr int kPieceBytes = 16 * 1024;
constexpr int kPieceVecs = kPieceBytes / 16;
constexpr int kMaxPieces = 14;  // shared memory: 224 KB a block
constexpr int kL2Group = 2;     // L2-part vectors a thread folds at once
constexpr int kL2Depth = 2;     // and the groups it keeps in flight (3 or 4 spilled or ran slower)
constexpr int kStoreDepth = 4;  // L2-part vectors in flight in the store pass
// Teams' staggered starts (softmax_resident_rows_kernel): the piece of the team before that a team's loads wait for,
// by team count: with 8 teams its fifth, with 2 or 4 its last (NOTES "s73 call 7", piece 4 -> 13, us cold: bf16
// 512x65536 38.1 -> 37.7, 1056x65536 77.6 -> 76.9; 8 teams, 1024x32768 36.7 -> 37.5). Against piece 4 for every
// count, two rounds ("s74 call 1"): 4 teams, 1024x61000 77.8-78.2 -> 77.2-77.3, 1056x65536 76.9-77.2 -> 76.6-76.7;
// 2 teams level (528x131072 78.9-79.0 -> 78.7).
template <int kTeams> constexpr int kTeamStaggerPiece = kTeams == 8 ? 4 : kMaxPieces - 1;
// (kResidentOnChipItemBytes is kResidentMaxItemBytes less the 128 KB at most that go through L2.)
static_assert(int64_t(kThreads) * kRegVecs * 16 + int64_t(kMaxPieces) * kPieceBytes == kResidentOnChipItemBytes,
              "the host's item bounds: registers + shared memory, and at most 128 KB more through L2");
static_assert(size_t(kMaxPieces) * kPieceBytes == kResidentMaxSmemBytes, "the host's shared-memory bound");

// What the kernel knows of an item's length at compile time. Whole: exactly kResidentMaxItemBytes, every part
// full and no vector needs a bound. OnChip (teams only): at least the register and shared-memory parts, so only the
// L2 part's vectors are bounded. Bounded: any length. Why OnChip: the bounded team kernels spill 68 B, and bf16
// 1024x32000 on 8 teams ran 44.8 us cold against 41.0 for the whole 1024x32768 (NOTES "s65 call 1"). Shifted (one
// item a block): Bounded for unaligned rows, with edge vectors (pipe::ItemVectors). Why its own instantiation: the edge
// code in the Bounded kernel cost aligned items ~1.3 % (fp32 1024x40000, NOTES "s68 call 3").
enum class ItemFill { Bounded, OnChip, Whole, Shifted };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// A 16-byte load under an L2 policy (l2_policy.cuh): the L2 part's first read must survive until phase B reads it
// again, everything else is read once.
__device__ __forceinline__ uint4 load16_policy(const uint4* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// The max of N vectors (NaN ignored, as the sum that follows carries it), as a tree: each vector's four words
// first, so the chain that the sum waits for is N + 2 deep rather than 4 N. 16-bit: packed pairs (HMNMX2).
template <typename T, int N> __device__ __forceinline__ float packed_max_of(const uint4 (&raw)[N]) {
  if constexpr (std::is_same_v<T, float>) {
    const auto vector_max = [](const uint4& r) {
      return fmaxf(fmaxf(__uint_as_float(r.x), __uint_as_float(r.y)),
                   fmaxf(__uint_as_float(r.z), __uint_as_float(r.w)));
    };
    float mx = vector_max(raw[0]);
#pragma unroll
    for (int s = 1; s < N; ++s) mx = fmaxf(mx, vector_max(raw[s]));
    return mx;
  } else {
    using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const auto vector_max = [](const uint4& r) {
      return __hmax2(__hmax2(bit_cast<Pair>(r.x), bit_cast<Pair>(r.y)),
                     __hmax2(bit_cast<Pair>(r.z), bit_cast<Pair>(r.w)));
    };
    Pair mx = vector_max(raw[0]);
#pragma unroll
    for (int s = 1; s < N; ++s) mx = __hmax2(mx, vector_max(raw[s]));
    return fmaxf(__low2float(mx), __high2float(mx));
  }
}

// fp32 terms: exp(x - m) as the long-row kernels' folds take it (online_math.cuh, kFastFloatExp), no correction.
struct FloatTerms {
  ShiftedExp<float, true> e;
  float correction;
  __device__ __forceinline__ float operator()(float x) const { return e(x); }
};
// The terms exp(x - m) of an item's elements against m: FusedExp2 for 16-bit types, FloatTerms for fp32.
template <typename T> __device__ __forceinline__ auto item_terms_at(float m) {
  if constexpr (std::is_same_v<T, float>) {
    return FloatTerms{ShiftedExp<float, true>(m), 1.f};
  } else {
    return FusedExp2::at<T>(m);
  }
}

// The sum of e(x) over N vectors.
template <typename T, int N, typename Exp>
__device__ __forceinline__ float sum_of_terms(const uint4 (&raw)[N], const Exp& e) {
  constexpr int kElems = 16 / sizeof(T);
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int s = 0; s < N; ++s) {
    float w[kElems];
    VecIO<T>::unpack(raw[s], w);
#pragma unroll
    for (int j = 0; j < kElems; ++j) sum[j & 1] += e(w[j]);
  }
  return sum[0] + sum[1];
}

// st folded with N vectors: their packed max, the carried sum rescaled only when the max rises (one exponential, rarely
// taken after a row's first vectors; fp32's accurate), their terms (item_terms_at). An infinite or NaN group max needs
// no case of its own: from -inf the carried sum is 0 either way, a rise to +inf leaves the terms infinite (the
// epilogue's NaN), and a NaN max compares false while its terms carry the NaN. The folds are bound by instruction
// issue, not by the MUFU rate: two of every eight 16-bit terms by a polynomial exp2 on the FMA pipe ran 0.6-1.7 us
// slower on the H200 (NOTES "s76 call 2", as s30 found for the pipelined kernel), and folding the register part in
// groups as its loads land 0.1-0.5 us slower.
template <typename T, int N>
__device__ __forceinline__ void fold_vectors(OnlineState<float>& st, const uint4 (&raw)[N]) {
  const float m = packed_max_of<T>(raw);
  if (m > st.m) {
    st.d *= std::is_same_v<T, float> ? exp_of(st.m - m) : fast_exp2((st.m - m) * kLog2e);
    st.m = m;
  }
  const auto e = item_terms_at<T>(st.m);
  st.d = fmaf(sum_of_terms<T>(raw, e), e.correction, st.d);
}

// online_math.cuh's merge, for 16-bit types with its exponential as one MUFU instruction (kFast). Why: the block's
// reduction and the row's merge sit between the last fold and the first store, with DRAM idle; the accurate expf
// made them several hundred cycles longer (NOTES "s55 call 9"). fp32 keeps the accurate one (the 1e-6 bound).
template <bool kFast> struct ItemMergeOp {
  __device__ __forceinline__ OnlineState<float> operator()(OnlineState<float> a, OnlineState<float> b) const {
    return merge<float, kFast>(a, b);
  }
};

// The (m, d) of the item over the block and, for split rows (chunks > 1), of its row: reduce_row_state's exchange
// (split_exchange.cuh: the tagged partial published, the row's partials polled) with ItemMergeOp and one polling
// warp, lane c merging chunks c, c + 32, ... (chunks <= SMs). Every block of a row merges the same partials in the
// same order, so they all normalize with bitwise-identical statistics. scratch: kRowScratch states.
template <bool kFast>
__device__ __forceinline__ OnlineState<float> reduce_item_state(const RowExchange& ex, int chunks, int64_t row,
                                                                int64_t item, OnlineState<float> v,
                                                                OnlineState<float>* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_allreduce(v, ItemMergeOp<kFast>{});
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == kWarps - 1) {
    v = warp_allreduce(lane < kWarps ? scratch[lane] : empty_state<float>(), ItemMergeOp<kFast>{});
    if (chunks > 1) {
      if (lane == 0) publish_partial(ex, item, v);
      const OnlineState<float> acc =
          merge_published<float, kFast>(ex.partials + 2 * row * chunks, chunks, 0, 1, lane, ex.tag);
      v = warp_allreduce(acc, ItemMergeOp<kFast>{});
    }
    if (lane == 0) scratch[32] = v;
  }
  __syncthreads();
  return scratch[32];
}

// The (m, d) of a team's row (kTeams > 1: whole rows, no exchange): every thread merges its team's warp states in
// the same order, so the team normalizes with bitwise-identical statistics. scratch: kWarps states; the team's
// threads meet at their own named barrier (1 + team), so that a team stores while the others still read.
template <int kTeams, bool kFast>
__device__ __forceinline__ OnlineState<float> reduce_team_state(OnlineState<float> v, OnlineState<float>* scratch) {
  constexpr int kTeamWarps = kWarps / kTeams;
  const int warp = threadIdx.x >> 5;
  v = warp_allreduce(v, ItemMergeOp<kFast>{});
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  named_barrier_sync(1 + warp / kTeamWarps, kThreads / kTeams);
  const int first = warp / kTeamWarps * kTeamWarps;
  OnlineState<float> acc = scratch[first];
#pragma unroll
  for (int w = 1; w < kTeamWarps; ++w) acc = merge<float, kFast>(acc, scratch[first + w]);
  return acc;
}

// A team's split row (chunks > 1, item = row * chunks + chunk): the team's first warp publishes the team's (m, d);
// each of the team's warps merges its share of the row's published partials (warp w of the team: chunks w * 32 +
// lane, stride kTeamWarps * 32, merge_published), and every thread merges the warps' results in warp order, so
// every block of the row normalizes with bitwise-identical statistics. team_partials: kWarps states.
template <int kTeams>
__device__ __forceinline__ OnlineState<float> exchange_team_state(const RowExchange& ex, int chunks, int64_t row,
                                                                  int64_t item, OnlineState<float> v,
                                                                  OnlineState<float>* team_partials) {
  constexpr int kTeamWarps = kWarps / kTeams;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, team = warp / kTeamWarps;
  const int team_warp = warp - team * kTeamWarps;
  if (team_warp == 0 && lane == 0) publish_partial(ex, item, v);
  const OnlineState<float> acc =
      merge_published<float>(ex.partials + 2 * row * chunks, chunks, team_warp, kTeamWarps, lane, ex.tag);
  const OnlineState<float> merged = warp_allreduce(acc, ItemMergeOp<false>{});
  if (lane == 0) team_partials[warp] = merged;
  named_barrier_sync(1 + team, kThreads / kTeams);
  OnlineState<float> row_state = team_partials[team * kTeamWarps];
#pragma unroll
  for (int w = 1; w < kTeamWarps; ++w) row_state = merge<float>(row_state, team_partials[team * kTeamWarps + w]);
  return row_state;
}

#endif

// Shape: grid = rows * p.chunks items, or ceil(rows / kTeams) * p.chunks for kTeams > 1 (one block per SM; split
// rows all resident, a cooperative launch; whole rows wave after wave, a plain launch), block b = item b, kThreads
// threads, dynamic shared memory: the item's pieces (kMaxPieces at most per team).
// Item of nvec vectors: [0, R) registers (thread t: vectors s * kThreads + t), [R, R + S) shared memory (piece k:
// vectors R + k * kPieceVecs, ...), [R + S, nvec) L2 (thread t: vectors R + S + i * kThreads + t). With kTeams > 1
// the same for each team's row, with the team's kTeamThreads and kTeamPieceVecs in place of kThreads and kPieceVecs.
// Phase A order, each part folded as it lands: the register loads are issued first (they arrive first), then the
// bulk copies; the L2 part's loads go out after the register fold, kL2Depth groups ahead, and before each L2 group
// the next shared-memory pieces are folded. Why: folded after the L2 part, the pieces had all landed and their
// exponentials ran with DRAM idle (bf16 128x262144 53.0 -> 50.9 us streamed, NOTES "s55 call 3").
// Phase B order: the L2 part first (before the other stores evict it: 53.2 against 58.0-60.2 us with it second or
// last, "s55 call 1"), its first vectors loaded before the row exchange; then registers, then shared memory (kHelp
// teams: a unit of the L2 part a warp, registers, then claimed units and pieces; see below).
// kFill == Whole: every item is exactly kResidentMaxItemBytes (the host checks), so the parts' sizes are constants and
// no vector needs a bound: bf16 softmax 3392 SASS instructions and 71 branches against 3896 and 100; streamed
// 128x262144 50.1 -> 49.7 us, 64x524288 51.9 -> 51.5, cold 48.2 -> 47.5; 8x4194304 and 4x8388608 level (H100, two
// rounds alternating through the op, NOTES "s56 call 1").
// kTeams > 1: whole rows (p.chunks == 1), kTeams of them a block: team j (threads [j, j + 1) * kThreads / kTeams) holds
// row b * kTeams + j as the block above holds an item, every size divided by kTeams (pieces of kPieceBytes / kTeams, at
// most 512 KB / kTeams a row), with its own barriers, pieces and statistics and no exchange (split rows' teams:
// kSplitTeams). Why: whole rows of 64-256 KB otherwise run on the pipelined kernel, whose SMs fold and store in the
// same phases (bf16 1024x32768 43 us on the H200 against 38.7 for the same bytes as 128 rows of 512 KB here), and
// per-row bookkeeping inside one item's layout cost 1.5x the instructions (NOTES "s64 call 5"); a team runs the
// single-row code. A team past the last row (rows not a multiple of kTeams) returns at once. The teams start one after
// another (team j's loads once team j - 1's piece kTeamStaggerPiece has landed) and meet only at barriers of their own,
// so that within an SM the first teams store while the last ones still read, where teams that read, folded and turned
// to storing together left DRAM idle at the turn. H200, bf16, us cold / streamed, block barrier -> team barriers ->
// piece 4 too (NOTES "s73 call 4"): 1024x32768 40.7 / 40.9 -> 39.8 / 40.4 -> 36.7 / 39.8, 1024x32000 42.1 / 42.6 ->
// 42.5 / 41.7 -> 38.7 / 40.3, 512x65536 40.3 / 41.1 -> 39.7 / 40.6 -> 38.0 / 40.2, 256x131072 40.1 / 40.6 -> 39.7 /
// 40.4 -> 39.4 / 40.9, 1056x65536 81.7 / 82.1 -> 80.2 / 80.2 -> 78.1 / 78.4; waiting for piece 0 or 13 instead ran
// within ~1 us of it, and two chains of kTeams / 2 teams 1.5-2.5 us behind one ("s73 call 6"). In phase B teams of 4
// and 8 (OnChip, Whole) store their L2 and shared-memory parts with the warps of the teams that have finished (kHelp
// below).
template <typename T, bool kSoftmax, ItemFill kFill, int kTeams = 1>
__global__ void __launch_bounds__(kThreads, 1) softmax_resident_rows_kernel(const PipeParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(sizeof(T) == 2 || std::is_same_v<T, float>, "16-bit or fp32 vectors");
  constexpr int kElems = 16 / sizeof(T);  // elements a 16-byte vector
  constexpr bool kFast = sizeof(T) == 2;  // the fast merge (ItemMergeOp)
  static_assert(kTeams >= 1 && kWarps % kTeams == 0, "whole warps a team");
  static_assert(kFill != ItemFill::OnChip || kTeams > 1, "OnChip is a team's row");
  constexpr bool kWhole = kFill == ItemFill::Whole;
  constexpr bool kOnChip = kFill == ItemFill::OnChip || kWhole;  // the register and shared-memory parts full
  constexpr bool kShifted = kFill == ItemFill::Shifted;
  static_assert(!kShifted || kTeams == 1, "Shifted is one item a block");
  constexpr int kTeamThreads = kThreads / kTeams;
  constexpr int kTeamPieceVecs = kPieceVecs / kTeams;  // two vectors a thread, as for one team
  // Teams of 4 or 8 whose rows fill their shared memory store their L2 part and pieces with help: a team's warps that
  // have stored their own row go on to the later teams' rows, claiming whole L2 units and pieces from the owner's
  // counter (see below). Teams of 2 ran 0.9 us slower with the pieces helped (bf16 256x131072 39.3 -> 40.2 us cold,
  // NOTES "s75 call 5").
  constexpr bool kHelp = kTeams >= 4 && kOnChip;
  extern __shared__ __align__(128) uint4 block_held[];
  __shared__ uint64_t block_bars[kMaxPieces * kTeams];
  __shared__ OnlineState<float> scratch[kRowScratch];
  __shared__ OnlineState<float> team_stats[kTeams];  // kHelp: each team's row statistics, published by its thread 0
  __shared__ uint64_t team_stats_bars[kTeams];       // and the barrier their publication completes
  __shared__ int team_claims[kTeams];                // kHelp: the team's L2 units and pieces claimed so far
  __shared__ int64_t team_first[kTeams];             // kHelp: the element offset of each team's row (chunk)
  __shared__ OnlineState<float> team_partials[kWarps];  // split rows: each warp's merge of its row's partials
  const int t = threadIdx.x % kTeamThreads;
  const int team = threadIdx.x / kTeamThreads;
  // Each team's pieces are sized for a whole row (the host's resident_smem_bytes), a team's after the one before.
  const int row_smem_vecs = kTeams == 1 ? 0
                            : kOnChip   ? kMaxPieces * kTeamPieceVecs
                                        : min(max(static_cast<int>(p.chunk_elems / kElems) - kRegVecs * kTeamThreads,
                                                  0),
                                              kMaxPieces * kTeamPieceVecs);
  uint4* const held = block_held + team * ((row_smem_vecs + kTeamPieceVecs - 1) / kTeamPieceVecs * kTeamPieceVecs);
  uint64_t* const bars = block_bars + team * kMaxPieces;
  const int64_t item = blockIdx.x;
  // Teams over split rows (chunks > 1; 16-bit Whole items, 8 teams): the blocks of a group of `chunks` blocks hold
  // chunk (block % chunks) of the group's 8 rows, team j that of row j, so that each row's chunks are read, exchanged
  // and stored at the same stagger position in every block of its group. (Only there: the code made ptxas spill more
  // in every team instantiation, 16 B in this one, whose 1024x32768 did not move; bf16 8 B since the helpers read
  // the teams' offsets from team_first.)
  constexpr bool kSplitTeams = kWhole && kTeams == 8 && sizeof(T) == 2;
  const auto team_item = [&](int j) {
    return !kSplitTeams || p.chunks == 1 ? item * kTeams + j
                                         : (item / p.chunks * kTeams + j) * p.chunks + item % p.chunks;
  };
  const RowChunk span(kTeams > 1 ? team_item(team) : item, p.chunks, p.chunk_elems, p.len);
  // kShifted: the item's 16-byte vectors on the memory's grid (pipe::ItemVectors): [iv.lo, iv.hi) lie wholly in the
  // item and take the parts below; the edges, a vector the item shares with its neighbours (an unaligned row: odd
  // length or base off the grid, the output on the input's grid), are thread 0's, element by element.
  // (x_first is taken again below the barrier as the kernels before Shifted did: the aligned kernels' code stays
  // theirs.)
  const auto item_x = [&] { return p.x + span.row * p.len + span.begin; };
  const pipe::ItemVectors<T> iv(kShifted ? item_x() : nullptr, span.begin, span.end, kShifted);
  const bool edges = kShifted && t == 0 && (iv.head_edge() || iv.tail_edge());
  const int nvec = kWhole      ? int(kResidentMaxItemBytes / 16 / kTeams)
                   : kShifted ? iv.hi - iv.lo
                              : static_cast<int>(span.end - span.begin) / kElems;
  const int reg_vecs = kOnChip ? kRegVecs * kTeamThreads : min(nvec, kRegVecs * kTeamThreads);
  const int smem_vecs = kOnChip ? kMaxPieces * kTeamPieceVecs : min(nvec - reg_vecs, kMaxPieces * kTeamPieceVecs);
  const int pieces = (smem_vecs + kTeamPieceVecs - 1) / kTeamPieceVecs;
  const int l2_vecs = nvec - reg_vecs - smem_vecs;
  const int l2_groups = (l2_vecs + kTeamThreads * kL2Group - 1) / (kTeamThreads * kL2Group);
  if (t == 0) {
    for (int k = 0; k < pieces; ++k) mbarrier_init(bars + k, 1);
    if (kHelp) {
      mbarrier_init(team_stats_bars + team, 1);
      team_claims[team] = 0;
      team_first[team] = span.row * p.len + span.begin;
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  begin_dependent_grid();
  // A team past the last row (none in kWhole: the host checks rows % kTeams == 0) has nothing to do; the teams after
  // it, the only ones that wait for it below, are past the last row too.
  if (!kWhole && kTeams > 1 && span.row >= p.rows) return;
  // Team j's loads go out once team j - 1's piece kTeamStaggerPiece has landed (team 0 at once).
  if (kTeams > 1 && team > 0 && pieces > 0) {
    mbarrier_wait(block_bars + (team - 1) * kMaxPieces + min(kTeamStaggerPiece<kTeams>, pieces - 1), 0);
  }
  const uint64_t evict_first = l2_policy_evict_first(), evict_last = l2_policy_evict_last();
  const T* const x_first = item_x();
  const uint4* const xg = reinterpret_cast<const uint4*>(kShifted ? x_first - iv.shift : x_first);  // iv's vector 0
  const uint4* xr = kShifted ? xg + iv.lo : xg;
  const uint4* xs = xr + reg_vecs;
  const uint4* xl = xs + smem_vecs;

  uint4 raw[kRegVecs];
#pragma unroll
  for (int s = 0; s < kRegVecs; ++s) {
    const int v = s * kTeamThreads + t;
    raw[s] = kOnChip || v < reg_vecs ? load16_policy(xr + v, evict_first) : neg_inf_vector<T>();
  }
  // The edges, read whole (their other elements lie in the same 16-byte granules, on the item's pages) into shared
  // memory, where the store pass finds them too. Why not registers: held beside the register part, 8 more made the
  // Bounded kernel spill 16 B (ptxas; every aligned item takes that kernel too).
  const int tail = iv.vecs - 1;
  if (edges) {
    if (iv.head_edge()) cp_async16(pipe::edge_slots(), xg);
    if (iv.tail_edge()) cp_async16(pipe::edge_slots() + 1, xg + tail);
  }
  if (t == 0) {
    for (int k = 0; k < pieces; ++k) {
      const int bytes = min(kTeamPieceVecs, smem_vecs - k * kTeamPieceVecs) * 16;
      mbarrier_arrive_expect_tx(bars + k, bytes);
      bulk_copy_to_shared(held + k * kTeamPieceVecs, xs + k * kTeamPieceVecs, bytes, bars + k, evict_first);
    }
  }

  // The register part opens the state directly at its own max: fold_vectors from an empty state gives the same
  // statistics but adds a compare and an exponential on the path from the first loads, and ran 0.4-0.6 us slower
  // streamed on every split-row shape (three rounds alternating, NOTES "s56 call 6").
  OnlineState<float> st;
  {
    const float m = packed_max_of<T>(raw);
    const auto e = item_terms_at<T>(m);
    st = {m, sum_of_terms<T>(raw, e) * e.correction};
  }
  if (edges) {
    cp_async_wait_all();
    pipe::fold_edge_vectors<T>(st, iv, pipe::EdgeSlotsAt{});
  }
  uint4 group[kL2Depth][kL2Group];
  const auto load_group = [&](uint4 (&g)[kL2Group], int index) {
#pragma unroll
    for (int i = 0; i < kL2Group; ++i) {
      const int v = (index * kL2Group + i) * kTeamThreads + t;
      g[i] = kWhole || v < l2_vecs ? load16_policy(xl + v, evict_last) : neg_inf_vector<T>();
    }
  };
  // Pieces k, k + 1, ... (kN of them) folded as one group of 2 kN vectors: one max tree, one rescale test and one
  // correction. Two whole pieces at once took 0.3-0.6 us off bf16 64x524288 and 120x262144, level elsewhere (NOTES
  // "s75 call 1"): phase A's folds are instruction- and latency-bound once the register part has landed. Pairs in
  // 16-bit Whole single items only: with them the team kernels spilled 28 B (8 B without) and the fp32 Whole kernel
  // 16 B (none without), ptxas.
  const auto fold_pieces = [&](int k, auto pieces_at_once) {
    constexpr int kN = decltype(pieces_at_once)::value;
#pragma unroll
    for (int i = 0; i < kN; ++i) mbarrier_wait(bars + k + i, 0);
    uint4 v[2 * kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int idx = (k + j) * kTeamPieceVecs + i * kTeamThreads + t;
        v[2 * j + i] = kOnChip || idx < smem_vecs ? held[idx] : neg_inf_vector<T>();
      }
    }
    fold_vectors<T>(st, v);
  };
  using OnePiece = std::integral_constant<int, 1>;
  using TwoPieces = std::integral_constant<int, 2>;
#pragma unroll
  for (int d = 0; d < kL2Depth; ++d) {
    if (d < l2_groups) load_group(group[d], d);
  }
  int piece = 0;
  const int pieces_per_group = l2_groups > 0 ? (pieces + l2_groups - 1) / l2_groups : 0;
#pragma unroll 1
  for (int g = 0; g < l2_groups; g += kL2Depth) {
#pragma unroll
    for (int d = 0; d < kL2Depth; ++d) {
      if (g + d < l2_groups) {
#pragma unroll 1
        for (int k = 0; k < pieces_per_group && piece < pieces;) {
          if (kWhole && kTeams == 1 && sizeof(T) == 2 && k + 1 < pieces_per_group && piece + 1 < pieces) {
            fold_pieces(piece, TwoPieces{});
            piece += 2;
            k += 2;
          } else {
            fold_pieces(piece++, OnePiece{});
            ++k;
          }
        }
        fold_vectors<T>(st, group[d]);
        if (g + d + kL2Depth < l2_groups) load_group(group[d], g + d + kL2Depth);
      }
    }
  }
#pragma unroll 1
  while (piece < pieces) fold_pieces(piece++, OnePiece{});

  // kHelp: a team's L2 part is stored in units of kStoreDepth vectors a lane of one warp (unit k: vectors k * kUnitVecs
  // + i * 32 + lane), claimed from the team's counter before its shared-memory pieces (claims [0, l2_units) are units,
  // [l2_units, l2_units + kMaxPieces) pieces), so that the warps of teams that have finished store a later team's L2
  // part too, not its two warps alone. Each of the team's warps takes its first claim before the exchange and, if a
  // unit (a piece where the L2 part has fewer units than the team has warps), has it in flight through it; then it
  // stores that unit, its registers, and what it claims next. Why: per-team stamps (NOTES "s78
  // call 1") had the last team of bf16 8x4194304 ~3.4 us from its statistics to its L2 and register parts stored, the
  // other 14 warps of the SM done. H200, us cold / streamed, three rounds against pieces-only help ("s78 call 4"):
  // bf16 1024x32000 38.0-38.2 / 40.6-41.0 -> 35.9-36.4 / 38.8-39.2, 8x4194304 39.6-40.0 / 41.2-41.3 -> 38.9-39.2 /
  // 40.6-40.8, 64x524288 39.7-40.0 -> 39.0-39.3, 16x2097152 38.4 -> 37.8-37.9; 1024x32768, 512x65536 level.
  const int lane = threadIdx.x & 31;
  constexpr int kUnitVecs = kStoreDepth * 32;
  const int l2_units = (l2_vecs + kUnitVecs - 1) / kUnitVecs;
  const auto load_unit = [&](uint4 (&u)[kStoreDepth], const uint4* xl_j, int k) {
#pragma unroll
    for (int i = 0; i < kStoreDepth; ++i) {
      const int v = k * kUnitVecs + i * 32 + lane;
      if (kWhole || v < l2_vecs) u[i] = load16_policy(xl_j + v, evict_first);
    }
  };
  uint4 next[kStoreDepth];  // the store pass's first L2 vectors (kHelp: this warp's first unit), through the exchange
  int first_claim = 0;  // kHelp: this warp's first claim, taken before the exchange
  if constexpr (kHelp) {
    if (lane == 0) first_claim = atomicAdd(team_claims + team, 1);
    first_claim = __shfl_sync(0xffffffffu, first_claim, 0);
    if (first_claim < l2_units) load_unit(next, xl, first_claim);
  } else {
#pragma unroll
    for (int i = 0; i < kStoreDepth; ++i) {
      const int v = i * kTeamThreads + t;
      if (kWhole || v < l2_vecs) next[i] = load16_policy(xl + v, evict_first);
    }
  }
  OnlineState<float> row_state;
  if constexpr (kTeams == 1) {
    row_state = reduce_item_state<kFast>(p.exchange, p.chunks, span.row, item, st, scratch);
  } else {
    row_state = reduce_team_state<kTeams, kFast>(st, scratch);
    if (kSplitTeams && p.chunks > 1) {
      row_state = exchange_team_state<kTeams>(p.exchange, p.chunks, span.row, team_item(team), row_state,
                                              team_partials);
    }
    if (kHelp && t == 0) {
      team_stats[team] = row_state;
      mbarrier_arrive(team_stats_bars + team);
    }
  }
  const auto out_by = [](const auto& term, uint4 r) {
    float w[kElems];
    VecIO<T>::unpack(r, w);
#pragma unroll
    for (int j = 0; j < kElems; ++j) w[j] = term(w[j]);
    return VecIO<T>::pack(w);
  };
  const Epilogue<T> epi(p.output, row_state, row_state.m);
  const auto term = pipe::output_term<T, kSoftmax>(epi, row_state.m);
  const auto out = [&](uint4 r) { return out_by(term, r); };
  T* const y_first = p.y + span.row * p.len + span.begin;
  uint4* y = kShifted ? reinterpret_cast<uint4*>(y_first - iv.shift) + iv.lo : reinterpret_cast<uint4*>(y_first);
  uint4* yl = y + reg_vecs + smem_vecs;
  const auto store_unit = [&](uint4* yl_j, const uint4 (&u)[kStoreDepth], int k, const auto& term_j) {
#pragma unroll
    for (int i = 0; i < kStoreDepth; ++i) {
      const int v = k * kUnitVecs + i * 32 + lane;
      if (kWhole || v < l2_vecs) store16_streaming(yl_j + v, out_by(term_j, u[i]));
    }
  };
  if constexpr (kHelp) {
    if (first_claim < l2_units) store_unit(yl, next, first_claim, term);
  } else {
    const int l2_rounds = (l2_vecs + kTeamThreads - 1) / kTeamThreads;
#pragma unroll 1
    for (int r = 0; r < l2_rounds; r += kStoreDepth) {
#pragma unroll
      for (int i = 0; i < kStoreDepth; ++i) {
        const int v = (r + i) * kTeamThreads + t;
        if (kWhole || v < l2_vecs) {
          const uint4 o = out(next[i]);
          const int ahead = v + kStoreDepth * kTeamThreads;
          if (ahead < l2_vecs) next[i] = load16_policy(xl + ahead, evict_first);
          store16_streaming(yl + v, o);
        }
      }
    }
  }
#pragma unroll
  for (int s = 0; s < kRegVecs; ++s) {
    const int v = s * kTeamThreads + t;
    if (kOnChip || v < reg_vecs) store16_streaming(y + v, out(dual::opaque(raw[s])));
  }
  if constexpr (kHelp) {
    // Team j's L2 units and shared-memory pieces, a whole unit or piece a warp, claimed from its counter by its own
    // warps and by the warps of earlier teams that have stored their rows. Why: the teams start one after another, so
    // the last team stored alone, 2 of an SM's 16 warps at 8 teams, and its exponentials held the call's tail
    // (without phase B's math the kernel ran 2 us faster at bf16 1024x32768, NOTES "s75 call 4"). H200, us cold, two
    // rounds against main ("s75 call 5"), the pieces helped (the L2 units since s78, above): bf16 1024x32768 36.7-36.8
    // -> 35.6-35.9, 1024x32000 38.8 -> 37.8-38.0, 512x65536 37.6 -> 36.9-37.6 (streamed 39.9-40.0 -> 39.2-39.3); fp16
    // 1024x32768 36.6-36.7 -> 35.7-35.9.
    const auto store_claims = [&](int j, const auto& term_j, int k) {
      // (Team j's offset is read from shared memory. Computed from the block's item, the bf16 Whole kernel of 8 teams
      // spilled 48 B, against 8 B this way; as offsets from this team's y and held, 24 B more; ptxas, sm_90a.)
      const int64_t first_j = team_first[j];
      uint4* const yj = reinterpret_cast<uint4*>(p.y + first_j) + reg_vecs;
      const uint4* const hj = block_held + j * (kMaxPieces * kTeamPieceVecs);
#pragma unroll 1
      for (;; k = -1) {
        if (k < 0) {
          if (lane == 0) k = atomicAdd(team_claims + j, 1);
          k = __shfl_sync(0xffffffffu, k, 0);
        }
        if (k >= l2_units + kMaxPieces) break;
        if (k < l2_units) {
          uint4 u[kStoreDepth];
          load_unit(u, reinterpret_cast<const uint4*>(p.x + first_j) + reg_vecs + smem_vecs, k);
          store_unit(yj + smem_vecs, u, k, term_j);
          continue;
        }
#pragma unroll
        for (int i = 0; i < kTeamPieceVecs / 32; ++i) {
          const int v = (k - l2_units) * kTeamPieceVecs + i * 32 + lane;
          store16_streaming(yj + v, out_by(term_j, hj[v]));
        }
      }
    };
    // (this warp's first claim, if a piece, is taken up here: a unit was stored above)
    store_claims(team, term, first_claim >= l2_units ? first_claim : -1);
#pragma unroll 1
    for (int j = team + 1; j < kTeams; ++j) {
      if (!kWhole && item * kTeams + j >= p.rows) break;
      mbarrier_wait(team_stats_bars + j, 0);
      const OnlineState<float> sj = team_stats[j];
      const Epilogue<T> epi_j(p.output, sj, sj.m);
      store_claims(j, pipe::output_term<T, kSoftmax>(epi_j, sj.m), -1);
    }
  } else {
#pragma unroll 2
    for (int v = t; v < smem_vecs; v += kTeamThreads) store16_streaming(y + reg_vecs + v, out(held[v]));
  }
  if (edges) {
    // (y: element 0 of vector 0 of iv)
    pipe::store_edge_vectors<T>(y_first - iv.shift, iv, term, pipe::EdgeSlotsAt{});
  }
#endif
}

// The instantiations the library launches for an output (Softmax or LogSoftmax; logsumexp never comes here).
template <typename T, bool kSoftmax, ItemFill kFill, int kTeams = 1>
constexpr auto library_kernel = softmax_resident_rows_kernel<T, kSoftmax, kFill, kTeams>;

}  // namespace resident
}  // namespace softmax
}  // namespace flash_attn_ext
