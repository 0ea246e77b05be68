// Row-exchange probe (benchmarks/NOTES.md, log row "probe s14"): how long the split-row exchange of the
// softmax kernels (csrc/softmax/split_exchange.cuh) takes across all SMs on its own, with K bulk copies of
// 16 KiB per SM in flight when it starts, and while half of the SMs only stream. One block per SM
// (cooperative launch), `rounds` exchanges back to back, each on fresh counters / slots. Reported latency: a
// block's done time minus the round's last publish (globaltimer, 0.256 us steps on the H100).
// Variants:
//   0 the library's exchange (split_exchange.cuh; in s14: partials by st.cg, counter red.release,
//     spin ld.acquire with nanosleep, partials by ld.cg; in s20: variant 1's words with a relaxed counter;
//     since s21: tagged 16-byte partials that every thread polls, nothing filled but a zeroing per launch;
//     since s24: reduce_row_state, the block's last warp publishes, polls and merges)
//   1 self-flagged 64-bit partials (m, d packed) in a slot set filled with all-ones; every thread polls its
//     slots with ld.relaxed until written: one round trip after the last publish
//   2 as 1 but warp 0 alone polls (lanes over the slots) and broadcasts through shared memory
//   3 the last arriver (atom.acq_rel returns chunks - 1) merges and writes the row result into a flagged
//     64-bit slot; the other blocks poll that one slot (nanosleep between polls)
//   4 as 3, polling without sleep
// (The s14 runs also had main's protocol without the nanosleep: no different from 0.)
// Split runs: blocks >= grid / 2 stream K pieces at a time (no exchange) until the others finish; the rest
// exchange among themselves with nothing in flight.
// The merge, block reduction, exchange and barrier/bulk-copy helpers are the library's own (csrc/).
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc -o /tmp/exchange_probe scripts/exchange_probe/exchange_probe.cu && /tmp/exchange_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "softmax/softmax_pipelined.cuh"
#include "../probe_check.h"

using namespace flash_attn_ext;
using namespace flash_attn_ext::softmax;
using State = OnlineState<float>;

constexpr int kPiece = 16384;
constexpr unsigned long long kUnset = ~0ull;

struct Args {
  int variant, rounds, K;
  int split;                   // blocks >= grid / 2 only stream K pieces at a time until `stop`; the rest exchange
  int* stop;
  unsigned long long* streamed;  // pieces streamed per block
  unsigned long long* slots;   // rounds * grid, all-ones
  unsigned long long* result;  // rounds, all-ones
  int* counters;               // rounds, zero
  uint64_t* lib_partials;      // variant 0: rounds * grid 16-byte partials (RowExchange), zero
  const char* src;
  size_t src_bytes;
  unsigned long long* t_pub;
  unsigned long long* t_done;
  float* out;
};

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int atom_acq_rel_add(int* c) {
  int v;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(v) : "l"(c) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long pack(State s) {
  return (static_cast<unsigned long long>(__float_as_uint(s.d)) << 32) | __float_as_uint(s.m);
}
__device__ __forceinline__ State unpack(unsigned long long v) {
  return {__uint_as_float(static_cast<unsigned>(v)), __uint_as_float(static_cast<unsigned>(v >> 32))};
}
// Polls a self-flagged slot until its publisher has written it.
__device__ __forceinline__ State wait_slot(const unsigned long long* slot, bool sleep) {
  unsigned long long v;
  while ((v = ld_relaxed64(slot)) == kUnset) {
    if (sleep) __nanosleep(64);
  }
  return unpack(v);
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // the library's barrier and bulk-copy helpers are sm_90+
// K bulk copies of one piece each into the ring, on a barrier expecting K arrivals per phase.
__device__ __forceinline__ void load_pieces(unsigned char* ring, const char* src, size_t first_piece, size_t stride,
                                            const Args& a, int K, uint64_t* bar) {
  for (int k = 0; k < K; ++k) {
    const size_t p = (first_piece + k * stride) % (a.src_bytes / kPiece);
    pipe::bulk_load(ring + k * kPiece, src + p * kPiece, kPiece, bar);
  }
}
#endif

__global__ void __launch_bounds__(128, 1) probe(Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bar;
  __shared__ State scratch[kRowScratch];
  __shared__ int s_old;
  __shared__ unsigned long long s_res;
  const int t = threadIdx.x, nt = blockDim.x, b = blockIdx.x;
  const int G = a.split ? gridDim.x / 2 : gridDim.x;  // the exchanging blocks
  const int K = a.split && b < G ? 0 : a.K;           // pieces this block loads per round
  if (t == 0) {
    mbarrier_init(&bar, K > 0 ? K : 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  unsigned phase = 0;
  if (a.split && b >= G) {  // streamer: thread 0 keeps K pieces in flight, K at a time, until told to stop
    if (t != 0) return;
    unsigned long long n = 0;
    for (; *reinterpret_cast<volatile int*>(a.stop) == 0; n += K, phase ^= 1) {
      load_pieces(ring, a.src, n * gridDim.x + b, gridDim.x, a, K, &bar);
      mbarrier_wait(&bar, phase);
    }
    a.streamed[b] = n;
    return;
  }
  float acc = 0.f;
  for (int r = 0; r < a.rounds; ++r) {
    const State mine{static_cast<float>((b * 7 + r * 13) % 101) * 0.01f, 1.0f + b * 1e-3f};
    if (t == 0 && K > 0) load_pieces(ring, a.src, (static_cast<size_t>(r) * G + b) * K, 1, a, K, &bar);
    const int64_t base = static_cast<int64_t>(r) * G;
    // The publishing thread: the block's last (as the library's exchange since s20 and the s14 runs).
    const int pub = nt - 1;
    if (t == pub) a.t_pub[base + b] = gtime();
    State row = empty_state<float>();
    if (a.variant == 0) {
      // The block's state is thread 0's (the others' empty states merge exactly to it).
      row = reduce_row_state(RowExchange{a.lib_partials, nullptr, 1u}, G, r, base + b,
                             t == 0 ? mine : empty_state<float>(), scratch);
    } else if (a.variant == 1 || a.variant == 2) {
      if (t == pub) st_relaxed64(a.slots + base + b, pack(mine));
      if (a.variant == 1) {
        for (int c = t; c < G; c += nt) row = merge(row, wait_slot(a.slots + base + c, true));
        row = block_allreduce(row, MergeOp{}, empty_state<float>(), scratch);
      } else {
        if (t < 32) {
          for (int c = t; c < G; c += 32) row = merge(row, wait_slot(a.slots + base + c, true));
          row = warp_allreduce(row, MergeOp{});
          if (t == 0) s_res = pack(row);
        }
        __syncthreads();
        row = unpack(s_res);
      }
    } else {  // 3, 4: the last arriver merges
      if (t == pub) {
        st_relaxed64(a.slots + base + b, pack(mine));
        s_old = atom_acq_rel_add(a.counters + r);
      }
      __syncthreads();
      if (s_old == G - 1) {
        for (int c = t; c < G; c += nt) row = merge(row, unpack(ld_relaxed64(a.slots + base + c)));
        row = block_allreduce(row, MergeOp{}, empty_state<float>(), scratch);
        if (t == 0) st_relaxed64(a.result + r, pack(row));
      } else {
        if (t == pub) s_res = pack(wait_slot(a.result + r, a.variant == 3));
        __syncthreads();
        row = unpack(s_res);
      }
    }
    if (t == 0) a.t_done[base + b] = gtime();
    acc += row.m + row.d;
    if (t == 0 && K > 0) mbarrier_wait(&bar, phase);
    if (K > 0) phase ^= 1;
    __syncthreads();  // s_res / s_old / scratch are reused next round
  }
  if (t == 0) a.out[b] = acc;
  if (t == 0 && b == 0 && a.split) *reinterpret_cast<volatile int*>(a.stop) = 1;
#endif
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int G = sms, maxR = 2000;
  const size_t src_bytes = size_t(1) << 30;
  Args a{};
  char* src;
  CK(cudaMalloc(&src, src_bytes));
  CK(cudaMemset(src, 1, src_bytes));
  a.src = src;
  a.src_bytes = src_bytes;
  CK(cudaMalloc(&a.slots, sizeof(unsigned long long) * maxR * G));
  CK(cudaMalloc(&a.result, sizeof(unsigned long long) * maxR));
  CK(cudaMalloc(&a.counters, sizeof(int) * maxR));
  CK(cudaMalloc(&a.lib_partials, 16 * maxR * G));
  CK(cudaMalloc(&a.t_pub, sizeof(unsigned long long) * maxR * G));
  CK(cudaMalloc(&a.t_done, sizeof(unsigned long long) * maxR * G));
  CK(cudaMalloc(&a.out, sizeof(float) * G));
  CK(cudaMalloc(&a.stop, sizeof(int)));
  CK(cudaMalloc(&a.streamed, sizeof(unsigned long long) * G));
  const int smem = 12 * kPiece;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<unsigned long long> tp(maxR * G), td(maxR * G);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("SMs %d\n", G);
  struct Case { int split, K, variant; };
  std::vector<Case> cases;
  for (int K : {0, 2, 4, 8})
    for (int variant : {0, 1, 2, 3, 4}) cases.push_back({0, K, variant});
  for (int K : {2, 4, 8, 12})
    for (int variant : {0, 2}) cases.push_back({1, K, variant});
  for (const Case& cs : cases) {
    const int K = cs.K, variant = cs.variant;
    const int GX = cs.split ? G / 2 : G;
    for (int rep = 0; rep < 2; ++rep) {  // rep 0 warms up; rep 1 is reported
      a.variant = variant;
      a.K = K;
      a.split = cs.split;
      a.rounds = K == 0 || cs.split ? maxR : 400;
      CK(cudaMemset(a.stop, 0, sizeof(int)));
      CK(cudaMemset(a.streamed, 0, sizeof(unsigned long long) * G));
      CK(cudaMemset(a.slots, 0xff, sizeof(unsigned long long) * maxR * G));
      CK(cudaMemset(a.result, 0xff, sizeof(unsigned long long) * maxR));
      CK(cudaMemset(a.counters, 0, sizeof(int) * maxR));
      CK(cudaMemset(a.lib_partials, 0, 16 * maxR * G));
      void* params[] = {&a};
      CK(cudaEventRecord(e0));
      CK(cudaLaunchCooperativeKernel((void*)probe, dim3(G), dim3(128), params, smem, 0));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (rep == 0) continue;
      CK(cudaMemcpy(tp.data(), a.t_pub, sizeof(unsigned long long) * a.rounds * GX, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(td.data(), a.t_done, sizeof(unsigned long long) * a.rounds * GX, cudaMemcpyDeviceToHost));
      std::vector<unsigned long long> streamed(G);
      CK(cudaMemcpy(streamed.data(), a.streamed, sizeof(unsigned long long) * G, cudaMemcpyDeviceToHost));
      double pieces = 0;
      for (auto v : streamed) pieces += double(v);
      std::vector<double> lat, spread;
      for (int r = 10; r < a.rounds; ++r) {
        unsigned long long last = 0, first = ~0ull;
        for (int b = 0; b < GX; ++b) last = std::max(last, tp[r * GX + b]), first = std::min(first, tp[r * GX + b]);
        spread.push_back((last - first) / 1e3);
        for (int b = 0; b < GX; ++b) lat.push_back((double(td[r * GX + b]) - double(last)) / 1e3);
      }
      if (cs.split) std::printf("split (%d exchange, %d stream at %.0f GB/s) ", GX, G - GX, pieces * kPiece / (ms * 1e6));
      std::sort(lat.begin(), lat.end());
      std::sort(spread.begin(), spread.end());
      std::printf("K %d variant %d: %.3f us per round; after the last publish: median %.3f p90 %.3f max %.3f us;"
                  " publish spread median %.3f us\n",
                  K, variant, ms * 1e3 / a.rounds, lat[lat.size() / 2], lat[lat.size() * 9 / 10], lat.back(),
                  spread[spread.size() / 2]);
    }
  }
  return 0;
}
