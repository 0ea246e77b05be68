// L2-staged split-row probe (benchmarks/NOTES.md, log rows "s63 call 1" to "s63 call 16"): softmax of long
// rows with every chunk held in L2, not on chip, between its fold and its store. Persistent blocks (one per SM)
// take chunks round-robin; iteration j folds chunk j (bulk-copied under an evict-last policy, its (m, d) published
// as a tagged partial) and stores chunk j - kDepth (bulk-copied again from L2 evict-first, normalized by its row's
// merged partials), so every SM reads new bytes and writes old ones in the same loop. Warp roles: a producer
// thread copies the pieces of both streams, in the order they are consumed, into one shared-memory ring (full and
// empty mbarriers); 16 compute warps fold and store with no block barrier, each dropping its fold state in a shared
// slot; an exchange warp merges those, publishes, and polls the row statistics kAhead iterations early (up to 8
// partials a lane in flight, reused while a block's chunks stay in one row). A ctypes library (no torch headers):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC -Icsrc \
//     scripts/l2stage_probe/l2stage_probe.cu -o /tmp/l2stage.so
//   PYTHONPATH=$PWD python3 scripts/l2stage_probe/run_l2stage_probe.py /tmp/l2stage.so \
//     fp32:128x262144,bf16:128x262144 32/3,64/3
// Deadlock freedom needs all blocks resident and a row's chunks to span at most kDepth - kAhead + 1 rounds (the
// driver skips other variants). Findings (H200, us cold / streamed; the exponential here is ex2.approx of
// prescaled values): fp32 128x262144 72.3-74.8 / 73.1-75.8 against the dual kernel's 84-85 / 81-83 (copy 63); fp32
// 1024x32768 76.3 against 75.2 (level); bf16 42-47 against 38-40 and fp32 8x4194304 94.5 against 81.4 (slower).
// With the library's fp32 exponential (expf of x - m; the ex2 form is not accurate enough for its tests) the fp32
// shapes take 90-91 us: the win was the cheap exponential, not the schedule (NOTES "s63 call 16"). ncu: at 32 KB
// chunks and depth 3 (16.5 MiB staged) the DRAM reads are the input once (136.3 MB for 134.2), at depth 6 (29 MiB)
// 209 MB: L2 keeps ~16-20 MiB of staged lines, less than a 16 MiB row needs with its slack.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/l2_policy.cuh"
#include "common/mbarrier.cuh"
#include "softmax/split_exchange.cuh"

namespace {
using namespace flash_attn_ext;
using namespace flash_attn_ext::softmax;
__device__ __forceinline__ uint64_t pol_normal() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
struct MD {
  float m, d;
};
__device__ __forceinline__ MD mrg(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.d * fast_exp2(a.m - m) + b.d * fast_exp2(b.m - m)};
}
__device__ __forceinline__ MD warp_mrg(MD v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v = mrg(v, {__shfl_xor_sync(~0u, v.m, o), __shfl_xor_sync(~0u, v.d, o)});
  return v;
}

__device__ __forceinline__ void vst(MD* p, MD v) {
  volatile float* q = reinterpret_cast<volatile float*>(p);
  q[0] = v.m;
  q[1] = v.d;
}
__device__ __forceinline__ MD vld(const MD* p) {
  const volatile float* q = reinterpret_cast<const volatile float*>(p);
  return {q[0], q[1]};
}
constexpr float kL2E = 1.4426950408889634f;

// Shape: grid = resident blocks (G), kWarps compute warps + an exchange warp + a producer warp, dynamic shared
// memory kSlots pieces of kPieceBytes. Chunk i = bytes [i * C, (i + 1) * C) of the flat tensor, row = i / cpr;
// block b takes chunks b + j * G. Iteration j's pieces, in the order the producer copies them into the ring and the
// compute warps consume them: for each piece s of a chunk, s of chunk j (fold, evict-last) then s of chunk
// j - kDepth (store, re-read evict-first). The exchange warp is l2stage3's.
template <typename T, int kWarps, int kPieceBytes, int kSlots, int kDepth, int kAhead>
__global__ void __launch_bounds__((kWarps + 2) * 32, 1)
    staged(const T* __restrict__ x, T* __restrict__ y, int64_t items, int cpr, int steps, uint64_t* partials,
           uint32_t tag, int pmode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(kAhead <= kDepth - 1, "deadlock freedom");
  constexpr int N = RowsTraits<T>::kVec, kRing = 8, kThreads = kWarps * 32;
  constexpr int kPieceVecs = kPieceBytes / 16, kVecs = kPieceVecs / kThreads;
  static_assert(kVecs * kThreads == kPieceVecs, "a piece is whole vectors of every compute thread");
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ uint64_t full[kSlots], empty[kSlots];
  __shared__ MD red[kRing][kWarps];
  __shared__ int cnt[kRing];
  __shared__ MD stats[kRing];
  __shared__ long long flag[kRing];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t n = b < items ? (items - b + G - 1) / G : 0;
  const int64_t cv = int64_t(steps) * kPieceVecs;  // vectors a chunk
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* yv = reinterpret_cast<uint4*>(y);
  if (t < kRing) {
    cnt[t] = 0;
    flag[t] = -1;
  }
  if (t == 0) {
    for (int i = 0; i < kSlots; ++i) {
      mbarrier_init(full + i, 1);
      mbarrier_init(empty + i, kWarps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  if (warp == kWarps + 1) {  // the producer
    if (lane == 0) {
      const uint64_t pl = (pmode & 1) ? pol_normal() : l2_policy_evict_last(),
                     pf = (pmode & 2) ? pol_normal() : l2_policy_evict_first();
      uint32_t q = 0;
      for (int64_t j = 0; j < n + kDepth; ++j) {
        const bool fold = j < n, store = j >= kDepth;
        for (int s = 0; s < steps; ++s) {
          for (int kind = 0; kind < 2; ++kind) {
            if (kind == 0 ? !fold : !store) continue;
            const int slot = q % kSlots;
            const uint32_t round = q / kSlots;
            if (round > 0) mbarrier_wait(empty + slot, (round - 1) & 1);
            mbarrier_arrive_expect_tx(full + slot, kPieceBytes);
            const int64_t chunk = kind == 0 ? b + j * G : b + (j - kDepth) * G;
            bulk_copy_to_shared(ring + slot * kPieceVecs, xv + chunk * cv + int64_t(s) * kPieceVecs, kPieceBytes,
                                full + slot, kind == 0 ? pl : pf);
            ++q;
          }
        }
      }
    }
    return;
  }
  if (warp == kWarps) {       // the exchange warp
    int64_t cached_row = -1;  // a block's consecutive chunks of one row share its statistics
    MD cached{-INFINITY, 0.f};
    for (int64_t j = 0; j < n + kDepth; ++j) {
      volatile int* c = cnt + (j % kRing);
      while (*c != kWarps) __nanosleep(20);
      __threadfence_block();
      if (j < n) {
        MD v = lane < kWarps ? vld(&red[j % kRing][lane]) : MD{-INFINITY, 0.f};
        v = warp_mrg(v);
        if (lane == 0)
          store_relaxed_pair(partials + 2 * (b + j * G), uint64_t(tag) << 32 | __float_as_uint(v.m),
                             uint64_t(~tag) << 32 | __float_as_uint(v.d));
      }
      __syncwarp();
      if (lane == 0) *c = 0;
      const int64_t i = j + kAhead;
      if (i >= kDepth && i < n + kDepth) {
        const int64_t si = b + (i - kDepth) * G;
        const int64_t row = si / cpr;
        const uint64_t* rp = partials + 2 * row * cpr;
        MD acc{-INFINITY, 0.f};
        if (row == cached_row) {
          acc = cached;
        } else {
          // Up to 8 partials a lane in flight at once: a row of 512 chunks polled one load at a time cost
          // 16 L2 round trips an iteration.
          for (int base = 0; base < cpr; base += 256) {
            uint64_t mw[8], dw[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
              const int q = base + u * 32 + lane;
              if (q < cpr) load_relaxed_pair(rp + 2 * q, mw[u], dw[u]);
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
              const int q = base + u * 32 + lane;
              if (q < cpr) {
                while (uint32_t(mw[u] >> 32) != tag || uint32_t(dw[u] >> 32) != ~tag) {
                  __nanosleep(32);
                  load_relaxed_pair(rp + 2 * q, mw[u], dw[u]);
                }
                acc = mrg(acc, {__uint_as_float(uint32_t(mw[u])), __uint_as_float(uint32_t(dw[u]))});
              }
            }
          }
          acc = warp_mrg(acc);
          cached_row = row;
          cached = acc;
        }
        if (lane == 0) {
          vst(&stats[i % kRing], MD{acc.m, 1.f / acc.d});
          __threadfence_block();
          *(volatile long long*)&flag[i % kRing] = i;
        }
      }
    }
    return;
  }
  uint32_t q = 0;
  for (int64_t j = 0; j < n + kDepth; ++j) {
    const bool fold = j < n, store = j >= kDepth;
    float M = 0.f, inv = 0.f;
    if (store) {
      volatile long long* f = flag + (j % kRing);
      while (*f != j) __nanosleep(20);
      __threadfence_block();
      const MD sv = vld(&stats[j % kRing]);
      M = sv.m;
      inv = sv.d;
    }
    MD st{-INFINITY, 0.f};
    uint4* sy = yv + (b + (j - kDepth) * G) * cv + t;
    for (int s = 0; s < steps; ++s) {
      if (fold) {
        const int slot = q % kSlots;
        mbarrier_wait(full + slot, (q / kSlots) & 1);
        float f[kVecs][N];
        float lm = -INFINITY;
#pragma unroll
        for (int k = 0; k < kVecs; ++k) {
          VecIO<T>::unpack(ring[slot * kPieceVecs + k * kThreads + t], f[k]);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            f[k][e] *= kL2E;
            lm = fmaxf(lm, f[k][e]);
          }
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty + slot);
        const float mn = fmaxf(st.m, lm);
        float sum = st.m == -INFINITY ? 0.f : st.d * fast_exp2(st.m - mn);
#pragma unroll
        for (int k = 0; k < kVecs; ++k)
#pragma unroll
          for (int e = 0; e < N; ++e) sum += fast_exp2(f[k][e] - mn);
        st = {mn, sum};
        ++q;
      }
      if (store) {
        const int slot = q % kSlots;
        mbarrier_wait(full + slot, (q / kSlots) & 1);
        uint4 c[kVecs];
#pragma unroll
        for (int k = 0; k < kVecs; ++k) c[k] = ring[slot * kPieceVecs + k * kThreads + t];
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty + slot);
#pragma unroll
        for (int k = 0; k < kVecs; ++k) {
          float f[N];
          VecIO<T>::unpack(c[k], f);
#pragma unroll
          for (int e = 0; e < N; ++e) f[e] = fast_exp2(fmaf(f[e], kL2E, -M)) * inv;
          if (pmode & 4)
            store16(reinterpret_cast<T*>(sy + int64_t(s) * kPieceVecs + k * kThreads), VecIO<T>::pack(f));
          else
            store16_streaming(sy + int64_t(s) * kPieceVecs + k * kThreads, VecIO<T>::pack(f));
        }
        ++q;
      }
    }
    st = warp_mrg(st);
    if (lane == 0) {
      vst(&red[j % kRing][warp], st);
      __threadfence_block();
      atomicAdd(cnt + (j % kRing), 1);
    }
  }
#endif
}

template <typename T, int kDepth, int kAhead, int kPieceBytes, int kSlots>
int launch1(const void* x, void* y, int64_t numel, int64_t len, int64_t chunk_elems, void* partials, int64_t tag,
            int grid, cudaStream_t stream, int pmode) {
  constexpr int kWarps = 16;
  const int64_t chunk_bytes = chunk_elems * int64_t(sizeof(T));
  if (chunk_bytes % kPieceBytes != 0 || len % chunk_elems != 0) return -1;
  const int steps = int(chunk_bytes / kPieceBytes);
  const int cpr = int(len / chunk_elems);
  const int64_t items = numel / chunk_elems;
  const int smem = kSlots * kPieceBytes;
  auto k = staged<T, kWarps, kPieceBytes, kSlots, kDepth, kAhead>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  k<<<grid, (kWarps + 2) * 32, smem, stream>>>(reinterpret_cast<const T*>(x), reinterpret_cast<T*>(y), items, cpr,
                                               steps, reinterpret_cast<uint64_t*>(partials), uint32_t(tag), pmode);
  return int(cudaGetLastError());
}
template <typename T, int kDepth, int kAhead>
int launch(const void* x, void* y, int64_t numel, int64_t len, int64_t chunk_elems, void* partials, int64_t tag,
           int grid, cudaStream_t stream, int pmode) {
  switch (pmode >> 4) {
    case 0:
      return launch1<T, kDepth, kAhead, 16384, 12>(x, y, numel, len, chunk_elems, partials, tag, grid, stream, pmode);
    case 1:
      return launch1<T, kDepth, kAhead, 32768, 6>(x, y, numel, len, chunk_elems, partials, tag, grid, stream, pmode);
    default:
      return launch1<T, kDepth, kAhead, 8192, 24>(x, y, numel, len, chunk_elems, partials, tag, grid, stream, pmode);
  }
}
}  // namespace

extern "C" int l2staged_softmax(const void* x, void* y, int64_t numel, int64_t len, int bf16, int64_t chunk_elems,
                                int depth, void* partials, int64_t tag, int grid, void* stream, int pmode) {
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
#define L(D, A)                                                                                           \
  return bf16 ? launch<__nv_bfloat16, D, A>(x, y, numel, len, chunk_elems, partials, tag, grid, s, pmode) \
              : launch<float, D, A>(x, y, numel, len, chunk_elems, partials, tag, grid, s, pmode)
  if (depth == 2) L(2, 1);
  if (depth == 3) L(3, 2);
  if (depth == 6) L(6, 2);
  L(4, 3);
#undef L
}
