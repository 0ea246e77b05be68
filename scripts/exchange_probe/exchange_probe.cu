// Row-exchange probe (benchmarks/NOTES.md, log row "probe s14"): how long the split-row exchange of the
// softmax kernels (csrc/softmax/split_exchange.cuh) takes across all SMs on its own, with K bulk copies of
// 16 KiB per SM in flight when it starts, and while half of the SMs only stream. One block per SM
// (cooperative launch), `rounds` exchanges back to back, each on fresh counters / slots. Reported latency: a
// block's done time minus the round's last publish (globaltimer, 0.256 us steps on the H100).
// Variants:
//   0 main: partials by st.cg, counter red.release + spin ld.acquire with nanosleep(32), partials by ld.cg
//   1 as 0 without the nanosleep
//   2 self-flagged 64-bit partials (m, d packed) in a slot set filled with all-ones; every thread polls its
//     slots with ld.relaxed until written: one round trip after the last publish
//   3 the last arriver (atom.acq_rel returns chunks - 1) merges and writes the row result into a flagged
//     64-bit slot; the other blocks' exchange thread polls that one slot
//   4 as 2 but warp 0 alone polls (lanes over the slots) and broadcasts through shared memory
//   5 as 3, polling without sleep
// Split runs: blocks >= grid / 2 stream K pieces at a time (no exchange) until the others finish; the rest
// exchange among themselves with nothing in flight.
// Build and run (sm_90): nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/exchange_probe exchange_probe.cu && /tmp/exchange_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kPiece = 16384;
constexpr unsigned long long kUnset = ~0ull;

struct Args {
  int variant, rounds, K;
  int split;                   // blocks >= grid / 2 only stream K pieces at a time until `stop`; the rest exchange
  int* stop;
  unsigned long long* streamed;  // pieces streamed per block
  float* part_m;
  float* part_d;
  unsigned long long* slots;   // rounds * grid, all-ones
  unsigned long long* result;  // rounds, all-ones
  int* counters;               // rounds, zero
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
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void red_release(int* c) { asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(c) : "memory"); }
__device__ __forceinline__ int ld_acquire(const int* c) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
  return v;
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
// The barrier's one arrival per phase, announcing the bytes its bulk copies will complete.
__device__ __forceinline__ void expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// One 16 KiB piece from global to shared memory by a bulk copy completing on `bar`.
__device__ __forceinline__ void load_piece(void* dst, const void* src, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(kPiece), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void wait_phase(uint64_t* bar, unsigned phase) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(phase)
                 : "memory");
  }
}
__device__ __forceinline__ unsigned long long pack(float m, float d) {
  return (static_cast<unsigned long long>(__float_as_uint(d)) << 32) | __float_as_uint(m);
}
__device__ __forceinline__ void unpack(unsigned long long v, float& m, float& d) {
  m = __uint_as_float(static_cast<unsigned>(v));
  d = __uint_as_float(static_cast<unsigned>(v >> 32));
}
__device__ __forceinline__ void merge(float& m, float& d, float m2, float d2) {
  const float M = fmaxf(m, m2);
  d = (m == -INFINITY ? 0.f : d * __expf(m - M)) + (m2 == -INFINITY ? 0.f : d2 * __expf(m2 - M));
  m = M;
}
__device__ __forceinline__ void warp_merge(float& m, float& d) {
  for (int o = 16; o > 0; o >>= 1) merge(m, d, __shfl_xor_sync(~0u, m, o), __shfl_xor_sync(~0u, d, o));
}
__device__ void block_merge(float& m, float& d, float* sm, float* sd) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_merge(m, d);
  if (lane == 0) sm[warp] = m, sd[warp] = d;
  __syncthreads();
  m = lane < (int)(blockDim.x >> 5) ? sm[lane] : -INFINITY;
  d = lane < (int)(blockDim.x >> 5) ? sd[lane] : 0.f;
  warp_merge(m, d);
  __syncthreads();
}

__global__ void __launch_bounds__(128, 1) probe(Args a) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bar;
  __shared__ float sm[32], sd[32];
  __shared__ int s_old;
  __shared__ unsigned long long s_res;
  const int t = threadIdx.x, nt = blockDim.x, b = blockIdx.x, e = nt - 1;
  const int G = a.split ? gridDim.x / 2 : gridDim.x;  // the exchanging blocks
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  unsigned phase = 0;
  if (a.split && b >= G) {  // streamer: thread 0 keeps K pieces in flight, K at a time, until told to stop
    if (t != 0) return;
    unsigned long long n = 0;
    while (*reinterpret_cast<volatile int*>(a.stop) == 0) {
      expect_bytes(&bar, a.K * kPiece);
      for (int k = 0; k < a.K; ++k, ++n) {
        const size_t p = (n * gridDim.x + b) % (a.src_bytes / kPiece);
        load_piece(ring + k * kPiece, a.src + p * kPiece, &bar);
      }
      wait_phase(&bar, phase);
      phase ^= 1;
    }
    a.streamed[b] = n;
    return;
  }
  const int K = a.split ? 0 : a.K;
  float acc = 0.f;
  for (int r = 0; r < a.rounds; ++r) {
    const float m = static_cast<float>((b * 7 + r * 13) % 101) * 0.01f, d = 1.0f + b * 1e-3f;
    if (t == 0 && K > 0) {
      expect_bytes(&bar, K * kPiece);
      for (int k = 0; k < K; ++k) {
        const size_t p = (static_cast<size_t>(r) * G + b) * K + k;
        const char* src = a.src + (p * kPiece) % a.src_bytes;
        load_piece(ring + k * kPiece, src, &bar);
      }
    }
    float M = -INFINITY, D = 0.f;
    const int64_t base = static_cast<int64_t>(r) * G;
    if (a.variant <= 1) {
      if (t == e) {
        a.t_pub[base + b] = gtime();
        __stcg(a.part_m + base + b, m);
        __stcg(a.part_d + base + b, d);
        red_release(a.counters + r);
        while (ld_acquire(a.counters + r) < G) {
          if (a.variant == 0) __nanosleep(32);
        }
      }
      __syncthreads();
      for (int c = t; c < G; c += nt) merge(M, D, __ldcg(a.part_m + base + c), __ldcg(a.part_d + base + c));
      block_merge(M, D, sm, sd);
    } else if (a.variant == 2 || a.variant == 4) {
      if (t == e) {
        a.t_pub[base + b] = gtime();
        st_relaxed64(a.slots + base + b, pack(m, d));
      }
      if (a.variant == 2) {
        for (int c = t; c < G; c += nt) {
          unsigned long long v;
          while ((v = ld_relaxed64(a.slots + base + c)) == kUnset) __nanosleep(64);
          float m2, d2;
          unpack(v, m2, d2);
          merge(M, D, m2, d2);
        }
        block_merge(M, D, sm, sd);
      } else {
        if (t < 32) {
          for (int c = t; c < G; c += 32) {
            unsigned long long v;
            while ((v = ld_relaxed64(a.slots + base + c)) == kUnset) __nanosleep(64);
            float m2, d2;
            unpack(v, m2, d2);
            merge(M, D, m2, d2);
          }
          warp_merge(M, D);
          if (t == 0) s_res = pack(M, D);
        }
        __syncthreads();
        unpack(s_res, M, D);
        __syncthreads();
      }
    } else {  // 3, 5: the last arriver merges
      if (t == e) {
        a.t_pub[base + b] = gtime();
        st_relaxed64(a.slots + base + b, pack(m, d));
        s_old = atom_acq_rel_add(a.counters + r);
      }
      __syncthreads();
      if (s_old == G - 1) {
        for (int c = t; c < G; c += nt) {
          float m2, d2;
          unpack(ld_relaxed64(a.slots + base + c), m2, d2);
          merge(M, D, m2, d2);
        }
        block_merge(M, D, sm, sd);
        if (t == 0) st_relaxed64(a.result + r, pack(M, D));
      } else {
        if (t == e) {
          unsigned long long v;
          while ((v = ld_relaxed64(a.result + r)) == kUnset) {
            if (a.variant == 3) __nanosleep(32);
          }
          s_res = v;
        }
        __syncthreads();
        unpack(s_res, M, D);
      }
    }
    if (t == 0) a.t_done[base + b] = gtime();
    acc += M + D;
    if (t == 0 && K > 0) {
      wait_phase(&bar, phase);
    }
    if (K > 0) phase ^= 1;
    __syncthreads();
  }
  if (t == 0) a.out[b] = acc;
  if (t == 0 && b == 0 && a.split) *reinterpret_cast<volatile int*>(a.stop) = 1;
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
  CK(cudaMalloc(&a.part_m, sizeof(float) * maxR * G));
  CK(cudaMalloc(&a.part_d, sizeof(float) * maxR * G));
  CK(cudaMalloc(&a.slots, sizeof(unsigned long long) * maxR * G));
  CK(cudaMalloc(&a.result, sizeof(unsigned long long) * maxR));
  CK(cudaMalloc(&a.counters, sizeof(int) * maxR));
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
    for (int variant : {0, 1, 2, 3, 4, 5}) cases.push_back({0, K, variant});
  for (int K : {2, 4, 8, 12})
    for (int variant : {0, 4}) cases.push_back({1, K, variant});
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
