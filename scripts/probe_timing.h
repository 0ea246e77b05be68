#pragma once
// The two timings of the standalone probes under scripts/ (heldrow_probe, lse_probe), as the benchmark's:
// cold (a read of 256 MiB before each call, so no call finds its input in L2; CUDA events
// around the call; median) and stream (calls back to back, time per call; median over rounds). f(i) makes
// call i, so a probe can rotate its buffers over i.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "probe_check.h"

__global__ void flush_kernel(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc ^= buf[i].x;
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

struct Bench {
  size_t flush_n = (256ull << 20) / 16;  // 256 MiB, over 5x the H100's L2
  uint4* flush_buf = nullptr;
  unsigned* sink = nullptr;
  cudaEvent_t a, b;
  Bench() {
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaMalloc(&flush_buf, flush_n * 16));
    CK(cudaMemset(flush_buf, 1, flush_n * 16));
    CK(cudaMalloc(&sink, 4));
  }
  template <class F> float cold(F&& f, int reps) {
    std::vector<float> ts;
    for (int r = 0; r < reps + 3; ++r) {
      flush_kernel<<<132 * 4, 512>>>(flush_buf, flush_n, sink);
      CK(cudaEventRecord(a));
      f(0);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 3) ts.push_back(ms * 1000.f);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }
  template <class F> float stream(F&& f, int calls, int rounds) {
    std::vector<float> ts;
    for (int r = 0; r < rounds + 1; ++r) {
      CK(cudaEventRecord(a));
      for (int i = 0; i < calls; ++i) f(i);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 1) ts.push_back(ms * 1000.f / calls);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }
};
