#pragma once
// The exchange of a split row: every block holding one chunk of a row publishes its chunk's (m, d) and
// merges the partials of all the row's chunks. Used by the split-row block kernel (softmax_rows.cuh), the
// pipelined kernel (softmax_pipelined.cuh) and the dual kernel (softmax_dual.cuh).
// Workspace (SplitWorkspace, softmax_cuda.cu): `partials` holds item's (m, d) at [2 item, 2 item + 1] and
// `counters` one int per row; the host fills all of it with 0xff bytes before the launch, so every partial
// starts as all-ones and every counter at -1 (a row is complete when its counter reaches chunks - 1).
#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// Float accumulators: each partial is one 64-bit word (m in the low half, d in the high half), written with
// one relaxed store and polled with relaxed loads, no fence. A word whose low half is not all-ones is
// published: m is never that NaN (pack_state canonicalizes NaN). Why not the release / acquire pair the
// fp64 path keeps: a gpu-scope release compiles to MEMBAR.ALL.GPU, which waits until the SM's outstanding
// stores are acknowledged, and a busy SM's exchange paid that on every item (s19: the lookahead kernel's
// bf16 16384x1024 152 us with it, 59 us with the words). The row's counter is still incremented (relaxed)
// after the word: a hint of when to look, so one thread polls one word instead of every thread polling its
// partials (L2 traffic, s19 run 5); a partial not yet visible when the counter is complete is re-polled.
__device__ __forceinline__ void add_relaxed(int* counter) {
  asm volatile("red.relaxed.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}
__device__ __forceinline__ int load_relaxed(const int* counter) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed_b64(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t load_relaxed_b64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t pack_state(OnlineState<float> s) {
  const uint32_t m = s.m == s.m ? __float_as_uint(s.m) : 0x7fffffffu;  // any NaN m as the canonical one
  return (uint64_t(__float_as_uint(s.d)) << 32) | m;
}
__device__ __forceinline__ OnlineState<float> unpack_state(uint64_t w) {
  return {__uint_as_float(static_cast<uint32_t>(w)), __uint_as_float(static_cast<uint32_t>(w >> 32))};
}
__device__ __forceinline__ bool published(uint64_t w) { return static_cast<uint32_t>(w) != 0xffffffffu; }

// Double accumulators: a 128-bit partial has no single-copy-atomic store to flag it, so the counter orders
// it: release increment and acquire load (gpu scope), which order this thread's partial stores before the
// increment and the team's partial loads after the wait (the team barrier that follows hands the acquire on).
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
// same order, so they all normalize with bitwise-identical statistics. The team's last thread publishes
// and polls the counter: in the ring role thread 0 issues the bulk copies, and a publish from that thread
// waited behind them (probe s14: 7.7 us with 8 pieces in flight against 5.1-5.9 from another warp).
// Deadlock freedom (the host guarantees chunks <= gridDim.x and a cooperative launch, so all blocks are
// resident): blocks take items in increasing order (item = blockIdx.x + i * gridDim.x) and publish before
// they wait. By induction over rows: once every item of rows < r is done, each block owning an item of row
// r reaches it (its previous item, at most gridDim.x earlier, lies in an earlier row since chunks <=
// gridDim.x) and publishes, so every partial of row r is written and every waiter of row r proceeds.
// Nothing else a block waits for (its own copies) depends on another block.
// `team` is the whole block, or in the dual kernel one role's warps: every thread of the team calls it.
template <typename A, typename Team = BlockTeam>
__device__ __forceinline__ OnlineState<A> exchange_row_state(A* partials, int* counters, int chunks, int64_t row,
                                                             int64_t item, OnlineState<A> mine,
                                                             OnlineState<A>* scratch, Team team = {}) {
  const bool publisher = team.rank() == team.size() - 1;
  const int64_t first_item = row * chunks;
  OnlineState<A> acc = empty_state<A>();
  if constexpr (sizeof(A) == 4) {
    uint64_t* words = reinterpret_cast<uint64_t*>(partials);
    if (publisher) {
      store_relaxed_b64(words + item, pack_state(mine));
      add_relaxed(counters + row);
      while (load_relaxed(counters + row) < chunks - 1) __nanosleep(32);
    }
    team.sync();
    for (int c = team.rank(); c < chunks; c += team.size()) {
      uint64_t w = load_relaxed_b64(words + first_item + c);
      while (!published(w)) {
        __nanosleep(32);
        w = load_relaxed_b64(words + first_item + c);
      }
      acc = merge(acc, unpack_state(w));
    }
  } else {
    if (publisher) {
      __stcg(partials + 2 * item, mine.m);
      __stcg(partials + 2 * item + 1, mine.d);
      arrive_release(counters + row);
      while (load_acquire(counters + row) < chunks - 1) __nanosleep(32);
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
