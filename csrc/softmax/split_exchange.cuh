#pragma once
// The exchange of a split row: every block holding one chunk of a row publishes its chunk's (m, d) and
// merges the partials of all the row's chunks. Used by the split-row block kernel (softmax_rows.cuh), the
// pipelined kernel (softmax_pipelined.cuh) and the dual kernel (softmax_dual.cuh). The workspace layout is
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

// Publishes this block's (m, d) for its chunk (item = row * chunks + chunk), waits until every chunk of the
// row has published, then merges the row's partials. Every block of the row merges the same values in the
// same order, so they all normalize with bitwise-identical statistics. The team's last thread publishes:
// in the ring role thread 0 issues the bulk copies, and a publish from that thread waited behind them
// (probe s14: 7.7 us with 8 pieces in flight against 5.1-5.9 from another warp).
// Deadlock freedom (the host guarantees chunks <= gridDim.x and a cooperative launch, so all blocks are
// resident): blocks take items in increasing order (item = blockIdx.x + i * gridDim.x) and publish before
// they wait. By induction over rows: once every item of rows < r is done, each block owning an item of row
// r reaches it (its previous item, at most gridDim.x earlier, lies in an earlier row since chunks <=
// gridDim.x) and publishes, so every partial of row r is written and every waiter of row r proceeds.
// Nothing else a block waits for (its own copies) depends on another block.
// `team` is the whole block, or in the dual kernel one role's warps: every thread of the team calls it.
template <typename A, typename Team = BlockTeam>
__device__ __forceinline__ OnlineState<A> exchange_row_state(const RowExchange& ex, int chunks, int64_t row,
                                                             int64_t item, OnlineState<A> mine,
                                                             OnlineState<A>* scratch, Team team = {}) {
  const bool publisher = team.rank() == team.size() - 1;
  const int64_t first_item = row * chunks;
  OnlineState<A> acc = empty_state<A>();
  if constexpr (sizeof(A) == 4) {
    const uint32_t m_tag = ex.tag, d_tag = ~ex.tag;
    if (publisher) {
      store_relaxed_pair(ex.partials + 2 * item, uint64_t(m_tag) << 32 | __float_as_uint(mine.m),
                         uint64_t(d_tag) << 32 | __float_as_uint(mine.d));
    }
    // Each thread polls its own partials; block_allreduce's barriers separate the scratch uses around it.
    for (int c = team.rank(); c < chunks; c += team.size()) {
      const uint64_t* const partial = ex.partials + 2 * (first_item + c);
      uint64_t m_word, d_word;
      load_relaxed_pair(partial, m_word, d_word);
      while (static_cast<uint32_t>(m_word >> 32) != m_tag || static_cast<uint32_t>(d_word >> 32) != d_tag) {
        __nanosleep(32);
        load_relaxed_pair(partial, m_word, d_word);
      }
      acc = merge(acc, OnlineState<A>{__uint_as_float(static_cast<uint32_t>(m_word)),
                                      __uint_as_float(static_cast<uint32_t>(d_word))});
    }
  } else {
    A* const partials = reinterpret_cast<A*>(ex.partials);
    if (publisher) {
      __stcg(partials + 2 * item, mine.m);
      __stcg(partials + 2 * item + 1, mine.d);
      arrive_release(ex.counters + row);
      while (load_acquire(ex.counters + row) < chunks) __nanosleep(32);
    }
    team.sync();
    for (int c = team.rank(); c < chunks; c += team.size()) {
      acc = merge(acc, OnlineState<A>{__ldcg(partials + 2 * (first_item + c)),
                                      __ldcg(partials + 2 * (first_item + c) + 1)});
    }
  }
  return block_allreduce(acc, MergeOp{}, empty_state<A>(), scratch, team);
}

}  // namespace softmax
}  // namespace flash_attn_ext
