// Held-row probe (benchmarks/NOTES.md, "s31 runs 3-5"): whole bf16 rows of 64 KB (1024, 2048, 4096 rows) through
// the library's pipelined kernel against a variant that moves each row from the ring into registers as soon
// as it has landed and hands the ring slots back at once, so the next rows' bulk copies stream in while the
// row is reduced and stored. Why: in the library kernel a row holds its slots until its store pass ends, and a
// 6-slot ring of 4-slot rows leaves 2 slots of lookahead (NOTES, "s31 run 2": the next row's last pieces
// were issued only at the release and waited for). Held rows gained 1-2 us streamed at 1024 rows, 5-10 us at
// 2048-4096, nothing cold, against the library kernel launched as here; not against the op, whose graph with
// early launch streams 1024x32768 as fast (NOTES, "s31 run 6"), and they lose on shorter and 128 KB rows.
// Two timings: cold (a 256 MiB read before each call, events around the call, median) and stream (30 calls
// back to back over rotating buffers, 3 x (in + out) >= 4x L2, time per call). The copy is cudaMemcpyAsync.
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc -o /tmp/heldrow_probe scripts/heldrow_probe/heldrow_probe.cu && /tmp/heldrow_probe
// PROBE_LENGTHS=1: instead, rows of 1 to 8 pieces, the library's plan against held rows of 512 threads.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "softmax/softmax_pipelined.cuh"
#include "../probe_check.h"
#include "../probe_timing.h"

using namespace flash_attn_ext;
using namespace flash_attn_ext::softmax;
using T = __nv_bfloat16;

constexpr int kPieceVecs = 1024;  // 16 KB pieces of 16-byte vectors, as the library

// Makes the held vectors opaque to the compiler between passes, so each pass unpacks them again instead of
// keeping all their floats live (with 16 vectors a thread: 128 registers of floats and spills).
template <int kN, int kM> __device__ __forceinline__ void opaque(uint4 (&h)[kN][kM]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kM; ++j) asm volatile("" : "+r"(h[i][j].x), "+r"(h[i][j].y), "+r"(h[i][j].z), "+r"(h[i][j].w));
}

// f(k, j, w) for each held vector h[k][j], unpacked to floats w.
template <int kN, int kM, typename F> __device__ __forceinline__ void for_each_held(const uint4 (&h)[kN][kM], F&& f) {
#pragma unroll
  for (int k = 0; k < kN; ++k)
#pragma unroll
    for (int j = 0; j < kM; ++j) {
      float w[8];
      VecIO<T>::unpack(h[k][j], w);
      f(k, j, w);
    }
}

// Shape: persistent grid, block b takes rows b, b + gridDim.x, ... of kPieces * 8192 bf16 elements each.
// Block: kThreads, kBlocksPerSm of them resident per SM (the register bound). Dynamic shared memory: p.ring_pieces 16 KB slots. Each thread holds kPieces * kPer vectors
// of the current row in registers.
template <int kThreads, int kPieces, int kBlocksPerSm, bool kStreamingStores = true>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) held_rows_kernel(const PipeParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kPer = kPieceVecs / kThreads;  // vectors per thread and piece
  constexpr int kVec = 8;
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ uint64_t bars[kPipeMaxPieces];
  __shared__ OnlineState<float> scratch[kRowScratch];
  pipe::init_ring_barriers(bars, p.ring_pieces);
  const int t = threadIdx.x;
  pipe::Producer<T> producer{blockIdx.x, gridDim.x, 0, 0, 0, 0};
  if (t == 0) producer.fill(p, p.rows, ring, bars);
  int slot = 0;
  unsigned phase = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    uint4 h[kPieces][kPer];
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      mbarrier_wait(bars + slot, phase);
#pragma unroll
      for (int j = 0; j < kPer; ++j) h[k][j] = ring[slot * kPieceVecs + j * kThreads + t];
      if (++slot == p.ring_pieces) {
        slot = 0;
        phase ^= 1;
      }
    }
    __syncthreads();  // every thread has its vectors: the slots go back to the producer
    if (t == 0) {
      producer.outstanding -= kPieces;
      fence_async_proxy();
      producer.fill(p, p.rows, ring, bars);
    }
    float m = -INFINITY;
    for_each_held(h, [&](int, int, float (&w)[kVec]) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) m = fmaxf(m, w[e]);
    });
    opaque(h);
    const FusedExp2 ex = FusedExp2::at<T>(m);
    float d = 0.f;
    for_each_held(h, [&](int, int, float (&w)[kVec]) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) d += ex(w[e]);
    });
    const OnlineState<float> st =
        reduce_row_state(p.exchange, 1, row, row, OnlineState<float>{m, d * ex.correction}, scratch);
    opaque(h);
    const Epilogue<float> epi(SoftmaxOutput::Softmax, st, st.m);
    const auto term = pipe::output_term<T, true>(epi, st.m);
    T* y = p.y + row * p.len;
    for_each_held(h, [&](int k, int j, float (&w)[kVec]) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[e] = term(w[e]);
      T* const at = y + static_cast<int64_t>(k * kPieceVecs + j * kThreads + t) * kVec;
      if constexpr (kStreamingStores) {
        store16_streaming(at, VecIO<T>::pack(w));  // st.global.cs, as the library's 16-bit stores
      } else {
        store16(at, VecIO<T>::pack(w));
      }
    });
  }
#endif
}

struct Config {
  std::string name;
  void (*kernel)(const PipeParams<T>);
  int threads, grid, ring;
};

// The copy, then each configuration on rows x len (len a multiple of 8192: whole 16 KB pieces).
void run_shape(Bench& bench, int64_t rows, int64_t len, const std::vector<Config>& configs) {
  constexpr int kPairs = 3;
  const size_t bytes = size_t(rows * len) * sizeof(T);
  T *x[kPairs], *y[kPairs];
  for (int i = 0; i < kPairs; ++i) {
    CK(cudaMalloc(&x[i], bytes));
    CK(cudaMalloc(&y[i], bytes));
  }
  std::vector<T> hx(rows * len);
  srand(7);
  for (auto& v : hx) v = T(float(rand()) / RAND_MAX * 8.f - 4.f);
  for (int i = 0; i < kPairs; ++i) CK(cudaMemcpy(x[i], hx.data(), bytes, cudaMemcpyHostToDevice));
  auto check = [&](const char* name) {
    std::vector<T> hy(rows * len);
    CK(cudaMemcpy(hy.data(), y[0], bytes, cudaMemcpyDeviceToHost));
    const double worst = softmax_rows_max_rel_err(hx, hy, rows, len, [](T v) { return __bfloat162float(v); });
    if (!(worst <= 1e-2)) std::printf("    %s: max rel err %.3g  WRONG\n", name, worst);
  };
  const double floor_us = 2.0 * bytes / 3008e3;
  auto report = [&](const char* name, float cold_us, float stream_us) {
    std::printf("  %-40s cold %7.2f us %5.1f %%   stream %7.2f us %5.1f %%\n", name, cold_us, 100 * floor_us / cold_us,
                stream_us, 100 * floor_us / stream_us);
  };
  std::printf("bf16 %lldx%lld\n", (long long)rows, (long long)len);
  auto copy = [&](int i) { CK(cudaMemcpyAsync(y[i % kPairs], x[i % kPairs], bytes, cudaMemcpyDeviceToDevice)); };
  report("copy", bench.cold(copy, 30), bench.stream(copy, 30, 5));

  auto run_kernel = [&](const char* name, void (*k)(const PipeParams<T>), int threads, int grid, int ring) {
    const size_t smem = size_t(ring) * 16384;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    PipeParams<T> pp{x[0], y[0], rows, len, len, 1, 8192, ring, SoftmaxOutput::Softmax, {}};
    auto call = [&](int i) {
      pp.x = x[i % kPairs];
      pp.y = y[i % kPairs];
      k<<<grid, threads, smem>>>(pp);
      CK(cudaGetLastError());
    };
    CK(cudaMemset(y[0], 0xff, bytes));
    call(0);
    CK(cudaDeviceSynchronize());
    check(name);
    report(name, bench.cold(call, 30), bench.stream(call, 30, 5));
  };
  for (const Config& c : configs) run_kernel(c.name.c_str(), c.kernel, c.threads, c.grid, c.ring);
  for (int i = 0; i < kPairs; ++i) {
    CK(cudaFree(x[i]));
    CK(cudaFree(y[i]));
  }
}


// The library's pipelined plan for whole 16-bit rows (two blocks per SM with 6-piece rings up to 4 pieces a
// row, else one per SM with 13), then held rows of kPieces pieces: 512 threads (1024 for 8 pieces), one block
// per SM, 13 pieces.
template <int kPieces> std::vector<Config> plans(int sms) {
  std::vector<Config> c;
  if (kPieces <= 4) {
    c.push_back({"library pipelined 256 thr, 2/SM, ring 6", pipe::softmax_pipelined_rows_kernel<T>, 256, 2 * sms, 6});
  } else {
    c.push_back({"library pipelined 256 thr, 1/SM, ring 13", pipe::softmax_pipelined_rows_kernel<T>, 256, sms, 13});
  }
  if constexpr (kPieces <= 4) {
    c.push_back({"held 512 thr, 1/SM, ring 13", held_rows_kernel<512, kPieces, 1>, 512, sms, 13});
  } else {  // 512 threads spill 548 B here under the 128-register bound
    c.push_back({"held 1024 thr, 1/SM, ring 13", held_rows_kernel<1024, kPieces, 1>, 1024, sms, 13});
  }
  return c;
}

// s31 runs 3-5: 64 KB rows, held at 256 / 512 / 1024 threads, plain stores, an even grid.
std::vector<Config> variants_64k(int64_t rows, int sms) {
  const int rounds = static_cast<int>((rows + sms - 1) / sms);
  const int even = static_cast<int>((rows + rounds - 1) / rounds);  // 1024 rows: 128 blocks of 8
  return {
      {"library pipelined 256 thr, 2/SM, ring 6", pipe::softmax_pipelined_rows_kernel<T>, 256, 2 * sms, 6},
      // 256 threads at two blocks per SM spill (548 B) under the 128-register bound: 40 % of copy
      {"held 256 thr, 1/SM, ring 13", held_rows_kernel<256, 4, 1>, 256, sms, 13},
      {"held 512 thr, 1/SM, ring 13", held_rows_kernel<512, 4, 1>, 512, sms, 13},
      {"held 1024 thr, 1/SM, ring 13", held_rows_kernel<1024, 4, 1>, 1024, sms, 13},
      {"held 512 thr, 1/SM, ring 13, plain st", held_rows_kernel<512, 4, 1, false>, 512, sms, 13},
      {"held 512 thr, grid " + std::to_string(even) + ", ring 13", held_rows_kernel<512, 4, 1>, 512, even, 13},
      {"library pipelined 256 thr, grid " + std::to_string(2 * even) + ", ring 6",
       pipe::softmax_pipelined_rows_kernel<T>, 256, 2 * even, 6},
  };
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Bench bench;
  if (const char* sweep = std::getenv("PROBE_LENGTHS"); sweep && sweep[0] == '1') {
    // row lengths of 1, 2, 3, 4 and 8 pieces (16 to 128 KB), 32-256 MiB of input
    run_shape(bench, 8192, 8192, plans<1>(sms));
    run_shape(bench, 4096, 16384, plans<2>(sms));
    run_shape(bench, 2048, 24576, plans<3>(sms));
    run_shape(bench, 1024, 32768, plans<4>(sms));
    run_shape(bench, 4096, 32768, plans<4>(sms));
    run_shape(bench, 512, 65536, plans<8>(sms));
    run_shape(bench, 2048, 65536, plans<8>(sms));
    CK(cudaDeviceSynchronize());
    return 0;
  }
  for (int64_t rows : {1024, 2048, 1024, 4096}) run_shape(bench, rows, 32768, variants_64k(rows, sms));
  CK(cudaDeviceSynchronize());
  return 0;
}
