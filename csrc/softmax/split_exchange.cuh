#pragma once
// The exchange of a split row: every block holding one chunk of a row publishes its chunk's (m, d) and
// merges the partials of all the row's chunks. Used by the split-row block kernel (softmax_rows.cuh) and
// the pipelined kernel (softmax_pipelined.cuh).
#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// The counter's release increment and acquire load (gpu scope): they order this thread's partial stores
// before the increment and the block's partial loads after the wait (the __syncthreads that follows hands
// the acquire on), without the two full fences (__threadfence) around a relaxed atomic.
__device__ __forceinline__ void arrive_release(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}
__device__ __forceinline__ int load_acquire(const int* counter) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

// Publishes this block's (m, d) for its chunk (slot `item` = row * chunks + chunk), waits until every chunk
// of the row has published, then merges the row's partials. Every block of the row merges the same values
// in the same order, so they all normalize with bitwise-identical statistics. The publish/wait is a
// release/acquire pair on the row's counter (thread 0: partial stores, red.release; spin on ld.acquire),
// then the team's barrier hands the ordering to the rest of the team; partials are read with ld.cg so a stale
// L1 line (a neighbour row's slots) can never be used.
// Deadlock freedom (the host guarantees chunks <= gridDim.x and a cooperative launch, so all blocks are
// resident): blocks take items in increasing order (item = blockIdx.x + i * gridDim.x) and publish before
// they wait. By induction over rows: once every item of rows < r is done, each block owning an item of row
// r reaches it (its previous item, at most gridDim.x earlier, lies in an earlier row since chunks <=
// gridDim.x) and publishes, so the counter of row r reaches `chunks` and every waiter of row r proceeds.
// Nothing else a block waits for (its own copies) depends on another block.
// `team` is the whole block, or in the dual kernel one role's warps: every thread of the team calls it.
template <typename A, typename Team = BlockTeam>
__device__ __forceinline__ OnlineState<A> exchange_row_state(A* part_m, A* part_d, int* counters, int chunks,
                                                             int64_t row, int64_t item, OnlineState<A> mine,
                                                             OnlineState<A>* scratch, Team team = {}) {
  if (team.rank() == 0) {
    __stcg(part_m + item, mine.m);
    __stcg(part_d + item, mine.d);
    arrive_release(counters + row);
    while (load_acquire(counters + row) < chunks) __nanosleep(32);
  }
  team.sync();
  OnlineState<A> acc = empty_state<A>();
  const int64_t first_item = row * chunks;
  for (int c = team.rank(); c < chunks; c += team.size()) {
    acc = merge(acc, OnlineState<A>{__ldcg(part_m + first_item + c), __ldcg(part_d + first_item + c)});
  }
  return block_allreduce(acc, MergeOp{}, empty_state<A>(), scratch, team);
}

}  // namespace softmax
}  // namespace flash_attn_ext
