// SM-speed probe (benchmarks/NOTES.md, log row "s23 runs 7-8"): is the streaming speed of an SM a fixed
// property of that SM, and does a copy gain when the fast SMs take more of it? Why: the dual-role softmax
// kernel's split rows wait every round for the slowest SM of the row (traces s12 / s18: ~10 % spread), so a
// systematic spread would be a lever (bigger chunks for faster SMs).
// Part 1: one block of 640 threads per SM copies its own region of `kb` KB (streaming loads, evict-first
// stores, 8 vectors in flight per thread), the region rotated over the reps so that the SM and the address
// region are separable; thread 0 stamps %globaltimer and %smid. Printed: per SM and per region the mean end
// time and the split-half correlation of the even and odd reps' means (near 1: a fixed property).
// Part 2: the same copy with each SM's share from a table by %smid, the SMs that part 1 found fast taking w
// times the bytes of the others (w = 1 is the uniform split), timed with events. Both parts assume the
// scheduler puts one block on each SM (it spreads blocks across SMs first); part 1 prints how many SMs it saw.
// H100 s23: 24 of 132 SMs end a uniform copy ~20 % earlier (split-half r 0.998-1.000, regions r ~0), yet
// w = 1.1-1.3 made the copy 4-7 % slower: the aggregate, not the slow SMs, is the limit.
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/sm_speed_probe \
//     scripts/sm_speed_probe/sm_speed_probe.cu && /tmp/sm_speed_probe 40 512   # reps, KB per SM
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../probe_check.h"

constexpr int kThreads = 640;  // the dual kernel's block size
constexpr int kInFlight = 8;   // 16-byte loads in flight per thread
constexpr int kMaxSmid = 1024;

__global__ void flush_kernel(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc ^= buf[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// The block's copy of n vectors from src to dst.
__device__ __forceinline__ void copy_share(const uint4* src, uint4* dst, int64_t n) {
  for (int64_t i = threadIdx.x; i < n; i += kThreads * kInFlight) {
    uint4 v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) v[k] = i + k * kThreads < n ? __ldg(src + i + k * kThreads) : uint4{};
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (i + k * kThreads < n) __stcs(dst + i + k * kThreads, v[k]);
  }
}

// Shape: grid = SMs, one block each (640 threads, __launch_bounds__ min 1). Block b copies region
// (b + shift) % gridDim.x of `per_block` vectors; stamps[b] = {start ns, end ns, smid, region}.
__global__ void __launch_bounds__(kThreads, 1) rotated_copy_kernel(const uint4* x, uint4* y, int64_t per_block,
                                                                   int shift, uint64_t* stamps) {
  const int region = (blockIdx.x + shift) % gridDim.x;
  const uint64_t t0 = global_ns();
  copy_share(x + region * per_block, y + region * per_block, per_block);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t* s = stamps + 4 * blockIdx.x;
    s[0] = t0;
    s[1] = global_ns();
    s[2] = sm_id();
    s[3] = region;
  }
}

// Shape: grid = SMs, one block each. The block on SM s copies share[s] = {first vector, vectors}.
__global__ void __launch_bounds__(kThreads, 1) table_copy_kernel(const uint4* x, uint4* y, const int64_t* share) {
  const unsigned s = sm_id();
  copy_share(x + share[2 * s], y + share[2 * s], share[2 * s + 1]);
}

double mean(const std::vector<double>& v) {
  double m = 0;
  for (double a : v) m += a;
  return m / v.size();
}

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double ma = mean(a), mb = mean(b);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

// Per key (SM or region) the mean of its end times; prints their spread and the split-half correlation.
std::vector<double> summarize(const std::vector<std::vector<double>>& ends, const char* what) {
  std::vector<double> even, odd, all(ends.size(), -1);
  for (size_t k = 0; k < ends.size(); ++k) {
    const auto& e = ends[k];
    if (e.size() < 2) continue;
    std::vector<double> ev, od;
    for (size_t i = 0; i < e.size(); ++i) (i % 2 ? od : ev).push_back(e[i]);
    even.push_back(mean(ev));
    odd.push_back(mean(od));
    all[k] = mean(e);
  }
  std::vector<double> sorted;
  for (double a : all) if (a >= 0) sorted.push_back(a);
  std::sort(sorted.begin(), sorted.end());
  std::printf("  by %s (%zu): mean end %.2f us, min %.2f, p10 %.2f, p90 %.2f, max %.2f; split-half r %.3f\n", what,
              sorted.size(), mean(sorted), sorted.front(), sorted[sorted.size() / 10],
              sorted[sorted.size() * 9 / 10], sorted.back(), correlation(even, odd));
  return all;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 40;
  const int64_t kb = argc > 2 ? std::atoi(argv[2]) : 512;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t per_block = kb * 1024 / 16, total = per_block * sms;
  const size_t flush_n = (256ull << 20) / 16;
  uint4 *x, *y, *flush;
  unsigned* sink;
  uint64_t* stamps;
  int64_t* share;
  CK(cudaMalloc(&x, total * 16));
  CK(cudaMalloc(&y, total * 16));
  CK(cudaMalloc(&flush, flush_n * 16));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&stamps, sms * 4 * sizeof(uint64_t)));
  CK(cudaMalloc(&share, kMaxSmid * 2 * sizeof(int64_t)));
  CK(cudaMemset(x, 1, total * 16));
  CK(cudaMemset(flush, 1, flush_n * 16));

  // Part 1: end times (us after the first block's start) per SM and per region.
  std::vector<uint64_t> h(sms * 4);
  std::vector<std::vector<double>> by_sm(kMaxSmid), by_region(sms);
  for (int r = -2; r < reps; ++r) {  // two warm-up calls
    flush_kernel<<<sms * 4, 512>>>(flush, flush_n, sink);
    rotated_copy_kernel<<<sms, kThreads>>>(x, y, per_block, ((r + 2) * 37) % sms, stamps);
    CK(cudaGetLastError());
    CK(cudaMemcpy(h.data(), stamps, h.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    if (r < 0) continue;
    uint64_t t0 = UINT64_MAX;
    for (int b = 0; b < sms; ++b) t0 = std::min(t0, h[4 * b]);
    for (int b = 0; b < sms; ++b) {
      const double end = (h[4 * b + 1] - t0) * 1e-3;
      by_sm[h[4 * b + 2]].push_back(end);
      by_region[h[4 * b + 3]].push_back(end);
    }
  }
  std::printf("%lld KB per SM, %d reps\n", (long long)kb, reps);
  const std::vector<double> sm_end = summarize(by_sm, "smid");
  summarize(by_region, "region");

  // Part 2: the fast SMs (ending before the midpoint of the fastest and slowest) take w times the bytes.
  double lo = 1e30, hi = 0;
  for (double e : sm_end) if (e >= 0) lo = std::min(lo, e), hi = std::max(hi, e);
  int n_fast = 0, n_all = 0;
  for (double e : sm_end) if (e >= 0) n_fast += e < 0.5 * (lo + hi), ++n_all;
  std::printf("  fast SMs: %d of %d (mean end %.1f against %.1f us)\n", n_fast, n_all, lo, hi);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (double w : {1.0, 1.1, 1.2, 1.3}) {
    const double unit = double(total) / (n_all - n_fast + w * n_fast);
    std::vector<int64_t> table(2 * kMaxSmid, 0);
    int64_t first = 0;
    int seen = 0;
    for (int s = 0; s < kMaxSmid; ++s) {
      if (sm_end[s] < 0) continue;
      const int64_t n = ++seen == n_all ? total - first : int64_t(unit * (sm_end[s] < 0.5 * (lo + hi) ? w : 1.0));
      table[2 * s] = first;
      table[2 * s + 1] = n;
      first += n;
    }
    CK(cudaMemcpy(share, table.data(), table.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    std::vector<double> us;
    for (int r = -2; r < reps; ++r) {
      flush_kernel<<<sms * 4, 512>>>(flush, flush_n, sink);
      CK(cudaEventRecord(a));
      table_copy_kernel<<<sms, kThreads>>>(x, y, share);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 0) us.push_back(ms * 1e3);
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    std::printf("  fast SMs x %.1f the bytes: %.2f us (%.0f GB/s read + written)\n", w, med,
                2.0 * total * 16 / (med * 1e3));
  }
  return 0;
}
