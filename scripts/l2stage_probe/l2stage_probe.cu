// L2-staged split-row probe (benchmarks/NOTES.md, log rows "s63 call 1" to "s63 calls 11-12"): softmax of long
// rows with every chunk held in L2, not on chip, between its fold and its store. Persistent blocks (one per SM)
// take chunks round-robin; iteration j folds chunk j (read under an evict-last policy, its (m, d) published as a
// tagged partial) and stores chunk j - kDepth (read again from L2 evict-first, normalized by its row's merged
// partials), so every SM reads new bytes and writes old ones in the same loop. No block barrier in the loop: a
// separate exchange warp merges the compute warps' states, publishes, and polls the row statistics kAhead
// iterations early. A ctypes library (no torch headers: builds in seconds):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC \
//     scripts/l2stage_probe/l2stage_probe.cu -o /tmp/l2stage.so
//   PYTHONPATH=$PWD python3 scripts/l2stage_probe/run_l2stage_probe.py /tmp/l2stage.so \
//     fp32:128x262144,bf16:128x262144 32/3,64/3
// Findings (H200): with the evict-last policy the DRAM reads equal the input (ncu: 135.6 MB for 134.2 MB at 32 KB
// chunks, depth 3); without it 1.8x (240 MB at 64 KB, depth 2). fp32 128x262144 runs 78-79 us cold against the
// dual kernel's 83-84 (copy 63), but fp32 1024x32768 and every bf16 shape run slower than the library (bf16 50-51
// us against 38-43): a load-wait-compute loop per warp at 4 warps a scheduler cannot keep the H200 fed; without
// the re-read (wrong results, same build) it still took 76 / 53 us against 84 / 58. A block barrier per chunk
// (the first version) made 32 KB chunks at depth 3 take 121 us.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {
__device__ __forceinline__ uint64_t pol_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t pol_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t pol_normal() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ void stwb(uint4* a, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint4 ldp(const uint4* a, uint64_t pol) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(a), "l"(pol));
  return v;
}
__device__ __forceinline__ void stcs(uint4* a, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ void st_pair(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};\n" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ld_pair(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];\n" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

template <typename T>
struct V;
template <>
struct V<float> {
  static constexpr int N = 4;
  __device__ static void un(uint4 r, float (&f)[4]) {
    f[0] = __uint_as_float(r.x);
    f[1] = __uint_as_float(r.y);
    f[2] = __uint_as_float(r.z);
    f[3] = __uint_as_float(r.w);
  }
  __device__ static uint4 pk(const float (&f)[4]) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};
template <>
struct V<__nv_bfloat16> {
  static constexpr int N = 8;
  __device__ static void un(uint4 r, float (&f)[8]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ static uint4 pk(const float (&f)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

struct MD {
  float m, d;
};
__device__ __forceinline__ MD mrg(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.d * ex2(a.m - m) + b.d * ex2(b.m - m)};
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

// Shape: grid = resident blocks (G), kThreads compute threads + one exchange warp. Chunk i = vectors
// [i * cv, (i + 1) * cv), cv = steps * kThreads * kVecs, row = i / cpr; block b takes chunks b + j * G.
// Iteration j: the compute warps fold chunk j and store chunk j - kDepth, with no block barrier: each warp drops its
// fold state into a shared slot and counts itself in; the exchange warp merges the slots, publishes the chunk's
// partial, then polls the row statistics that iteration j + kAhead will store with and raises a shared flag.
template <typename T, int kThreads, int kVecs, int kDepth, int kAhead>
__global__ void __launch_bounds__(kThreads + 32, 1)
    staged(const T* __restrict__ x, T* __restrict__ y, int64_t items, int cpr, int steps, uint64_t* partials,
           uint32_t tag, int pmode) {
  static_assert(kAhead <= kDepth - 1, "deadlock freedom");
  constexpr int N = V<T>::N, kWarps = kThreads / 32, kRing = 8;
  __shared__ MD red[kRing][kWarps];
  __shared__ int cnt[kRing];
  __shared__ MD stats[kRing];
  __shared__ long long flag[kRing];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t n = b < items ? (items - b + G - 1) / G : 0;
  const int64_t cv = int64_t(steps) * kThreads * kVecs;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* yv = reinterpret_cast<uint4*>(y);
  if (t < kRing) {
    cnt[t] = 0;
    flag[t] = -1;
  }
  __syncthreads();
  if (warp == kWarps) {  // the exchange warp
    for (int64_t j = 0; j < n + kDepth; ++j) {
      volatile int* c = cnt + (j % kRing);
      while (*c != kWarps) __nanosleep(20);
      __threadfence_block();
      if (j < n) {
        MD v = lane < kWarps ? vld(&red[j % kRing][lane]) : MD{-INFINITY, 0.f};
        v = warp_mrg(v);
        if (lane == 0)
          st_pair(partials + 2 * (b + j * G), uint64_t(tag) << 32 | __float_as_uint(v.m),
                  uint64_t(~tag) << 32 | __float_as_uint(v.d));
      }
      __syncwarp();
      if (lane == 0) *c = 0;
      const int64_t i = j + kAhead;
      if (i >= kDepth && i < n + kDepth) {
        const int64_t si = b + (i - kDepth) * G;
        const uint64_t* rp = partials + 2 * (si / cpr) * cpr;
        MD acc{-INFINITY, 0.f};
        for (int q = lane; q < cpr; q += 32) {
          uint64_t mw, dw;
          ld_pair(rp + 2 * q, mw, dw);
          while (uint32_t(mw >> 32) != tag || uint32_t(dw >> 32) != ~tag) {
            __nanosleep(32);
            ld_pair(rp + 2 * q, mw, dw);
          }
          acc = mrg(acc, {__uint_as_float(uint32_t(mw)), __uint_as_float(uint32_t(dw))});
        }
        acc = warp_mrg(acc);
        if (lane == 0) {
          vst(&stats[i % kRing], MD{acc.m, 1.f / acc.d});
          __threadfence_block();
          *(volatile long long*)&flag[i % kRing] = i;
        }
      }
    }
    return;
  }
  // Stats for the first kAhead iterations that store (none: kAhead <= kDepth - 1, and iteration i stores from kDepth).
  const uint64_t pl = (pmode & 1) ? pol_normal() : pol_last(), pf = (pmode & 2) ? pol_normal() : pol_first();
  for (int64_t j = 0; j < n + kDepth; ++j) {
    const bool fold = j < n, store = j >= kDepth;
    const int64_t fi = b + j * G, si = b + (j - kDepth) * G;
    const uint4* fx = xv + fi * cv + t;
    const uint4* sx = xv + si * cv + t;
    uint4* sy = yv + si * cv + t;
    uint4 a[kVecs];
    if (fold) {
#pragma unroll
      for (int k = 0; k < kVecs; ++k) a[k] = ldp(fx + k * kThreads, pl);
    }
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
    for (int s = 0; s < steps; ++s) {
      uint4 c[kVecs], an[kVecs];
      if (store) {
#pragma unroll
        for (int k = 0; k < kVecs; ++k) c[k] = ldp(sx + (int64_t(s) * kVecs + k) * kThreads, pf);
      }
      if (fold && s + 1 < steps) {
#pragma unroll
        for (int k = 0; k < kVecs; ++k) an[k] = ldp(fx + (int64_t(s + 1) * kVecs + k) * kThreads, pl);
      }
      if (fold) {
        float f[kVecs][N];
        float lm = -INFINITY;
#pragma unroll
        for (int k = 0; k < kVecs; ++k) {
          V<T>::un(a[k], f[k]);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            f[k][e] *= kL2E;
            lm = fmaxf(lm, f[k][e]);
          }
        }
        const float mn = fmaxf(st.m, lm);
        float sum = st.m == -INFINITY ? 0.f : st.d * ex2(st.m - mn);
#pragma unroll
        for (int k = 0; k < kVecs; ++k)
#pragma unroll
          for (int e = 0; e < N; ++e) sum += ex2(f[k][e] - mn);
        st = {mn, sum};
      }
      if (store) {
#pragma unroll
        for (int k = 0; k < kVecs; ++k) {
          float f[N];
          V<T>::un(c[k], f);
#pragma unroll
          for (int e = 0; e < N; ++e) f[e] = ex2(fmaf(f[e], kL2E, -M)) * inv;
          if (pmode & 4)
            stwb(sy + (int64_t(s) * kVecs + k) * kThreads, V<T>::pk(f));
          else
            stcs(sy + (int64_t(s) * kVecs + k) * kThreads, V<T>::pk(f));
        }
      }
      if (fold) {
#pragma unroll
        for (int k = 0; k < kVecs; ++k) a[k] = an[k];
      }
    }
    st = warp_mrg(st);
    if (lane == 0) {
      vst(&red[j % kRing][warp], st);
      __threadfence_block();
      atomicAdd(cnt + (j % kRing), 1);
    }
  }
}

template <typename T, int kDepth, int kAhead>
int launch(const void* x, void* y, int64_t numel, int64_t len, int64_t chunk_elems, void* partials, int64_t tag,
           int grid, cudaStream_t stream, int pmode) {
  constexpr int kThreads = 512, kVecs = 4;
  if (chunk_elems % (kThreads * kVecs * V<T>::N) != 0 || len % chunk_elems != 0) return -1;
  const int64_t cv = chunk_elems / V<T>::N;
  const int steps = int(cv / (kThreads * kVecs));
  const int cpr = int(len / chunk_elems);
  const int64_t items = numel / chunk_elems;
  staged<T, kThreads, kVecs, kDepth, kAhead>
      <<<grid, kThreads + 32, 0, stream>>>(reinterpret_cast<const T*>(x), reinterpret_cast<T*>(y), items, cpr, steps,
                                           reinterpret_cast<uint64_t*>(partials), uint32_t(tag), pmode);
  return int(cudaGetLastError());
}
}  // namespace

extern "C" int l2staged_softmax(const void* x, void* y, int64_t numel, int64_t len, int bf16, int64_t chunk_elems,
                                int depth, void* partials, int64_t tag, int grid, void* stream, int pmode) {
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
#define L(D, A)                                                                                           \
  return bf16 ? launch<__nv_bfloat16, D, A>(x, y, numel, len, chunk_elems, partials, tag, grid, s, pmode) \
              : launch<float, D, A>(x, y, numel, len, chunk_elems, partials, tag, grid, s, pmode)
  if (depth == 2) L(2, 1);
  if (depth == 3) {
    if (pmode & 8) L(3, 1);
    L(3, 2);
  }
  L(4, 3);
#undef L
}
