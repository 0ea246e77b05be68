#pragma once
// Phase timestamps of the ring-walk and register roles (softmax_pipelined.cuh, softmax_dual.cuh), for the
// dual-role probe only (scripts/dualrole_probe, PROBE_TRACE=<dir>): compiled in with FAE_SOFTMAX_PHASE_TRACE,
// empty in the library's build. Why: to see where a round's time goes (fold, exchange, store) per SM and
// role, and whether both roles of an SM ever wait at once.
#include <cstdint>

#ifdef FAE_SOFTMAX_PHASE_TRACE
namespace flash_attn_ext {
namespace softmax {
constexpr int kTraceItems = 64;  // items per role and block that are stamped
// 0: the ring walk's first piece landed / the register role starts its loads; 1: folded; 2: the row's
// statistics known (after the exchange); 3: stored (the ring walk: its slots released; the register role:
// its stores issued); 4: the SM's id + 1, written with stamp 0 (which blocks share an SM).
constexpr int kTraceStamps = 5;
// [block][role][item ordinal][stamp], %globaltimer in ns; the probe allocates and zeroes it. In constant
// memory: a global load of the pointer waited behind the SM's streaming loads (s18: the traced kernel ran
// 10 % slower).
__constant__ uint64_t* g_phase_trace;
__device__ __forceinline__ void phase_stamp(int role, int64_t ordinal, int stamp) {
  if (g_phase_trace != nullptr && ordinal < kTraceItems) {  // null: not tracing this call
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    uint64_t* item = g_phase_trace + ((int64_t(blockIdx.x) * 2 + role) * kTraceItems + ordinal) * kTraceStamps;
    item[stamp] = t;
    if (stamp == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
      item[4] = sm + 1;
    }
  }
}
}  // namespace softmax
}  // namespace flash_attn_ext
#define FAE_PHASE_STAMP(rank, role, ordinal, stamp)   \
  do {                                                \
    if ((rank) == 0) phase_stamp(role, ordinal, stamp); \
  } while (0)
#else
#define FAE_PHASE_STAMP(rank, role, ordinal, stamp) \
  do {                                              \
  } while (0)
#endif
