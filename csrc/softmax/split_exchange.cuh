#pragma once
// The reduction of a row's (m, d) over a team and, for a split row, the exchange: every block holding one
// chunk of a row publishes its chunk's (m, d) and merges the partials of all the row's chunks. Used by the
// split-row block kernel (softmax_rows.cuh), the pipelined kernel (softmax_pipelined.cuh), the dual kernel
// (softmax_dual.cuh) and the resident kernel (softmax_resident.cuh). The workspace layout is
// RowExchange's (softmax_launch.h); the host side is SplitWorkspace (softmax_cuda.cu).
#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// Float accumulators: each partial is two 64-bit words, (m | tag << 32) and (d | ~tag << 32), written with
// one relaxed vector store and polled with relaxed loads: no fence, no counter, no fill before the launch.
// A word is single-copy atomic, so a partial is this launch's once both words carry its tag; the tag
// differs from every one of the previous 2^32 launches', and tag / ~tag in the two words means no constant
// fill (zeros included, which is what a graph replay starts from: SplitWorkspace) ever reads as published.
// Why no release / acquire: a gpu-scope release compiles to MEMBAR.ALL.GPU, which waits until the SM's
// outstanding stores are acknowledged, and a busy SM's exchange paid that on every item (s19: the lookahead
// kernel's bf16 16384x1024 152 us with it, 59 us with self-flagged words). Why no fill: the memset before
// every launch cost 1-3 us per call (s21 probe: a second one added 1.1-2.8 us to the dual kernel).
__device__ __forceinline__ void store_relaxed_pair(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};\n" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void load_relaxed_pair(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];\n" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// Publishes item's (m, d) for this launch: the two words tagged as merge_published polls for them.
__device__ __forceinline__ void publish_partial(const RowExchange& ex, int64_t item, OnlineState<float> v) {
  store_relaxed_pair(ex.partials + 2 * item, uint64_t(ex.tag) << 32 | __float_as_uint(v.m),
                     uint64_t(~ex.tag) << 32 | __float_as_uint(v.d));
}

// Double accumulators: a 128-bit partial leaves no room for a tag, so a counter per row orders it: release
// increment and acquire load (gpu scope), which order this thread's partial stores before the increment
// and the team's partial loads after the wait (the team barrier that follows hands the acquire on).
__device__ __forceinline__ void arrive_release(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}
__device__ __forceinline__ int load_acquire(const int* counter) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

// Polls the published partials of one row (row_partials: its first chunk's) one at a time, lane c of a warp
// the chunks g * 32 + c of the groups g = first, first + stride, ..., and merges them in that order (kFastExp2:
// merge's one-ex2.approx rescale, as the resident kernel's reduction).
template <typename A, bool kFastExp2 = false>
__device__ __forceinline__ OnlineState<A> merge_published(const uint64_t* row_partials, int chunks, int first,
                                                          int stride, int lane, uint32_t tag) {
  OnlineState<A> acc = empty_state<A>();
#pragma unroll 1
  for (int c = first * 32 + lane; c < chunks; c += stride * 32) {
    uint64_t m_word, d_word;
    load_relaxed_pair(row_partials + 2 * c, m_word, d_word);
    while (static_cast<uint32_t>(m_word >> 32) != tag || static_cast<uint32_t>(d_word >> 32) != ~tag) {
      __nanosleep(32);
      load_relaxed_pair(row_partials + 2 * c, m_word, d_word);
    }
    acc = merge<A, kFastExp2>(acc, OnlineState<A>{__uint_as_float(static_cast<uint32_t>(m_word)),
                                                  __uint_as_float(static_cast<uint32_t>(d_word))});
  }
  return acc;
}

// Warps that poll a split row's partials (groups of 32 chunks; kRowPollers at most), and the shared-memory
// states reduce_row_state needs: one per warp, the result of a whole row, one per polling warp.
constexpr int kRowPollers = 8;
constexpr int kRowScratch = 33 + kRowPollers;

// The (m, d) of a row from each thread's own state: the team's (block's or role's) reduction and, for a split
// row (chunks > 1, item = row * chunks + chunk), the exchange: publish this chunk's state, wait until every
// chunk of the row has published, merge the row's partials. Every block of the row merges the same values in
// the same order, so they all normalize with bitwise-identical statistics. The team's last thread
// publishes: in the ring role thread 0 issues the bulk copies, and a publish from that thread waited behind
// them (probe s14: 7.7 us with 8 pieces in flight against 5.1-5.9 from another warp).
// Float accumulators: the warps reduce their lanes into scratch[0, warps); after one barrier the team's last
// warp merges those (whole rows: into scratch[32]) and publishes; then the last min(groups, warps,
// kRowPollers) warps poll the row's partials (groups of 32 chunks), poller p = warps - 1 - warp the groups
// p, p + pollers, ..., each into scratch[33 + p]; after a second barrier every thread merges the pollers'
// states in order. Why: two barriers and a few warps instead of two all-reduces of the whole team, each with
// its own two barriers (H100 probe s24: bf16 split rows 1.5-2 us faster, 128x262144 52.5 -> 50.5 us after a
// big-code kernel). More than one poller for long rows: the last warp alone polling 4 partials per lane in
// turn cost fp32 8x4194304 (128 chunks) 1-3 us. The loops stay rolled and the publishing warp polls group 0
// itself: with the polls from warp 0 and both loops unrolled (~460 more instructions in the dual kernel),
// bf16 4-chunk rows ran 1.3-1.5 us slower after a big-code kernel; as here, within 0.4 us of one poller.
// Whole rows (chunks == 1) take the same path rather than a block_allreduce beside it: the kernels pick
// chunks at run time, so both would be compiled in, and the dual kernel's code size costs it in the cold case.
// The merge order depends on the chunk count and the team size, and a row's blocks all have the same.
// Double accumulators: the team all-reduces, and the partials are ordered by a release / acquire counter.
// Deadlock freedom (the host guarantees chunks <= gridDim.x and a cooperative launch, so all blocks are
// resident): blocks take items in increasing order (item = blockIdx.x + i * gridDim.x) and publish before
// they wait. By induction over rows: once every item of rows < r is done, each block owning an item of row
// r reaches it (its previous item, at most gridDim.x earlier, lies in an earlier row since chunks <=
// gridDim.x) and publishes, so every partial of row r is written and every waiter of row r proceeds.
// Nothing else a block waits for (its own copies) depends on another block; the publish of the team's last
// warp does not wait for the polling warps.
// `team` is the whole block, or in the dual kernel one role's warps: every thread of the team calls it.
// scratch: kRowScratch states, free again when this returns.
template <typename A, typename Team = BlockTeam>
__device__ __forceinline__ OnlineState<A> reduce_row_state(const RowExchange& ex, int chunks, int64_t row,
                                                           int64_t item, OnlineState<A> v, OnlineState<A>* scratch,
                                                           Team team = {}) {
  if constexpr (sizeof(A) == 4) {
    const int lane = team.rank() & 31;
    const int warp = team.rank() >> 5;
    const int warps = team.size() >> 5;
    const int pollers = chunks > 1 ? min(min((chunks + 31) / 32, warps), kRowPollers) : 0;
    v = warp_allreduce(v, MergeOp{});
    if (lane == 0) scratch[warp] = v;
    team.sync();
    if (warp == warps - 1) {
      v = warp_allreduce(lane < warps ? scratch[lane] : empty_state<A>(), MergeOp{});
      if (chunks == 1 && lane == 0) scratch[32] = v;
      if (chunks > 1 && lane == 31) publish_partial(ex, item, v);
    }
    const int poller = warps - 1 - warp;  // the publishing warp polls too, after its publish
    if (poller < pollers) {
      v = merge_published<A>(ex.partials + 2 * row * chunks, chunks, poller, pollers, lane, ex.tag);
      v = warp_allreduce(v, MergeOp{});
      if (lane == 0) scratch[33 + poller] = v;
    }
    team.sync();
    if (chunks == 1) return scratch[32];
    v = scratch[33];
#pragma unroll 1
    for (int w = 1; w < pollers; ++w) v = merge(v, scratch[33 + w]);
    return v;
  } else {
    v = block_allreduce(v, MergeOp{}, empty_state<A>(), scratch, team);
    if (chunks == 1) return v;
    A* const partials = reinterpret_cast<A*>(ex.partials);
    if (team.rank() == team.size() - 1) {
      __stcg(partials + 2 * item, v.m);
      __stcg(partials + 2 * item + 1, v.d);
      arrive_release(ex.counters + row);
      while (load_acquire(ex.counters + row) < chunks) __nanosleep(32);
    }
    team.sync();
    OnlineState<A> acc = empty_state<A>();
    for (int c = team.rank(); c < chunks; c += team.size()) {
      acc = merge(acc, OnlineState<A>{__ldcg(partials + 2 * (row * chunks + c)),
                                      __ldcg(partials + 2 * (row * chunks + c) + 1)});
    }
    return block_allreduce(acc, MergeOp{}, empty_state<A>(), scratch, team);
  }
}

}  // namespace softmax
}  // namespace flash_attn_ext
