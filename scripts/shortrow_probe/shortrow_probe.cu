// Short-row probe (benchmarks/NOTES.md, log row "probe s15"): what a small one-wave call (bf16 65536x128,
// 16 MiB in, 16 MiB out) costs with plain 16-byte loads and stores (torch's copy, a minimal warp softmax, the
// library's warp kernel) and when every SM puts its whole share in flight at once with bulk (TMA) copies.
// Timed like benchmarks/common.py: before each call a 256 MiB buffer is read (no input in L2), each call
// alone between two events, median over the reps.
// Kernels (all on the same buffers):
//   copy_ldg      grid-stride 16-byte copy, `per` vectors per thread in flight; and cudaMemcpyAsync
//   soft_ldg      minimal warp softmax: teams of 16 / kV lanes x kV vectors per 128-element row
//   library       softmax_warp_rows_kernel (csrc/softmax/softmax_rows.cuh) at 1, 2, 4 vectors per lane
//   bulk_kernel   one or two blocks per SM, contiguous share, pieces in a ring filled by bulk loads;
//                 mode 0 copy (bulk store from the slot), 1 softmax of the piece's rows from shared memory
//                 (16 lanes x 1 vector per row) stored by 16-byte stores, 2 written back and bulk-stored
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc -o /tmp/shortrow_probe scripts/shortrow_probe/shortrow_probe.cu && /tmp/shortrow_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "softmax/softmax_pipelined.cuh"
#include "softmax/softmax_rows.cuh"
#include "../probe_check.h"

using namespace flash_attn_ext;

constexpr int kRowElems = 128;                 // bf16 row
constexpr int kRowVecs = kRowElems * 2 / 16;   // 16 vectors of 16 bytes

__global__ void flush_kernel(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc ^= buf[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

template <int kPer>
__global__ void copy_ldg(const uint4* __restrict__ x, uint4* __restrict__ y, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kPer;
  for (size_t base = blockIdx.x * size_t(blockDim.x) * kPer + threadIdx.x; base < n; base += stride) {
    uint4 v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (base + k * blockDim.x < n) v[k] = x[base + k * blockDim.x];
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (base + k * blockDim.x < n) y[base + k * blockDim.x] = v[k];
  }
}

// 16-byte vector <-> 8 floats and the team reductions are the library's own (online_math.cuh).
using BF16IO = softmax::VecIO<__nv_bfloat16>;

// Softmax of a team's row held as kV vectors per lane over `lanes` lanes: in place.
template <int kV>
__device__ __forceinline__ void team_softmax(float (&f)[kV][8], int lanes) {
  float m = -INFINITY;
#pragma unroll
  for (int v = 0; v < kV; ++v)
#pragma unroll
    for (int e = 0; e < 8; ++e) m = fmaxf(m, f[v][e]);
  m = softmax::warp_allreduce(m, softmax::MaxOp{}, lanes);
  const float ml = m * 1.4426950408889634f;
  float s = 0.f;
#pragma unroll
  for (int v = 0; v < kV; ++v)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      f[v][e] = exp2f(fmaf(f[v][e], 1.4426950408889634f, -ml));
      s += f[v][e];
    }
  s = softmax::warp_allreduce(s, softmax::SumOp{}, lanes);
  const float r = 1.f / s;
#pragma unroll
  for (int v = 0; v < kV; ++v)
#pragma unroll
    for (int e = 0; e < 8; ++e) f[v][e] *= r;
}

// Minimal warp softmax: team of 16 / kV lanes x kV vectors per 128-element row, 256 threads.
template <int kV>
__global__ void __launch_bounds__(256) soft_ldg(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t rows) {
  constexpr int kLanes = kRowVecs / kV, kRowsPerBlock = 256 / kLanes;
  const int li = threadIdx.x % kLanes, team = threadIdx.x / kLanes;
  for (int64_t r0 = blockIdx.x * int64_t(kRowsPerBlock); r0 < rows; r0 += int64_t(gridDim.x) * kRowsPerBlock) {
    const int64_t row = r0 + team;
    float f[kV][8];
    uint4 u[kV];
#pragma unroll
    for (int v = 0; v < kV; ++v) u[v] = row < rows ? x[row * kRowVecs + v * kLanes + li] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int v = 0; v < kV; ++v) BF16IO::unpack(u[v], f[v]);
    team_softmax<kV>(f, kLanes);
    if (row < rows)
#pragma unroll
      for (int v = 0; v < kV; ++v) y[row * kRowVecs + v * kLanes + li] = BF16IO::pack(f[v]);
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void bulk_store(void* gdst, const void* ssrc, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gdst), "r"(smem_addr(ssrc)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif

// mode 0: copy (bulk store from the slot); mode 1: softmax, 16-byte global stores; mode 2: softmax written
// back to the slot, bulk store. Block b owns pieces [b * n / grid, (b + 1) * n / grid) of `piece` bytes.
__global__ void __launch_bounds__(512) bulk_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t pieces,
                                                   int piece_bytes, int ring, int mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) uint4 smem[];
  __shared__ uint64_t bars[32];
  const int t = threadIdx.x, nt = blockDim.x;
  const int64_t first = blockIdx.x * pieces / gridDim.x, last = (blockIdx.x + 1) * pieces / gridDim.x;
  const int piece_vecs = piece_bytes / 16;
  if (t == 0) {
    for (int s = 0; s < ring; ++s) mbarrier_init(&bars[s], 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (t == 0)
    for (int64_t i = first; i < last && i < first + ring; ++i)
      softmax::pipe::bulk_load(smem + (i - first) * piece_vecs, x + i * piece_vecs, piece_bytes, &bars[i - first]);
  for (int64_t i = first; i < last; ++i) {
    const int k = static_cast<int>(i - first);
    const int slot = k % ring;
    uint4* s = smem + int64_t(slot) * piece_vecs;
    mbarrier_wait(&bars[slot], (k / ring) & 1);
    if (mode != 0) {
      // 16 lanes x 1 vector per row; piece_vecs / 16 rows.
      const int rows = piece_vecs / kRowVecs;
      for (int base = t; base < rows * kRowVecs; base += nt) {
        float f[1][8];
        BF16IO::unpack(s[base], f[0]);
        team_softmax<1>(f, 16);
        if (mode == 1) {
          y[i * piece_vecs + base] = BF16IO::pack(f[0]);
        } else {
          s[base] = BF16IO::pack(f[0]);
        }
      }
    }
    if (mode != 1) fence_async_smem();
    __syncthreads();
    if (t == 0) {
      if (mode != 1) bulk_store(y + i * piece_vecs, s, piece_bytes);
      if (i + ring < last) {
        if (mode != 1) bulk_wait_read_all();
        softmax::pipe::bulk_load(s, x + (i + ring) * piece_vecs, piece_bytes, &bars[slot]);
      }
    }
  }
  if (t == 0 && mode != 1) bulk_wait_all();
#endif
}

struct Timer {
  const uint4* flush_buf;
  size_t flush_n;
  unsigned* sink;
  cudaEvent_t a, b;
  template <class F> float median(F&& f, int reps) {
    std::vector<float> ts;
    for (int r = 0; r < reps + 3; ++r) {
      flush_kernel<<<132 * 4, 512>>>(flush_buf, flush_n, sink);
      CK(cudaEventRecord(a));
      f();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 3) ts.push_back(ms * 1000.f);
    }
    CK(cudaGetLastError());
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }
};

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 65536;
  const int reps = argc > 2 ? atoi(argv[2]) : 40;
  const size_t n = size_t(rows) * kRowVecs;  // vectors
  const size_t bytes = n * 16;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint4 *x, *y, *fl;
  unsigned* sink;
  const size_t flush_n = (256ull << 20) / 16;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&fl, flush_n * 16));
  CK(cudaMalloc(&sink, 4));
  {
    std::vector<__nv_bfloat16> h(n * 8);
    srand(1);
    for (auto& v : h) v = __float2bfloat16((rand() / float(RAND_MAX)) * 8.f - 4.f);
    CK(cudaMemcpy(x, h.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(fl, 1, flush_n * 16));
  }
  CK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  Timer tm{fl, flush_n, sink};
  CK(cudaEventCreate(&tm.a));
  CK(cudaEventCreate(&tm.b));
  const double floor_us = 2.0 * bytes / 3008e3;  // at the project's measured 3008 GB/s
  auto report = [&](const char* name, float us) {
    std::printf("%-40s %7.2f us  %5.1f %% of 3008 GB/s\n", name, us, 100.0 * floor_us / us);
  };

  // Reference softmax on the host for one check per softmax kernel.
  auto check = [&](const char* name) {
    std::vector<__nv_bfloat16> hx(n * 8), hy(n * 8);
    CK(cudaMemcpy(hx.data(), x, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int64_t r = 0; r < rows; r += 97) {
      double m = -1e30, s = 0;
      for (int e = 0; e < kRowElems; ++e) m = std::max(m, double(__bfloat162float(hx[r * kRowElems + e])));
      for (int e = 0; e < kRowElems; ++e) s += std::exp(double(__bfloat162float(hx[r * kRowElems + e])) - m);
      for (int e = 0; e < kRowElems; ++e) {
        const double want = std::exp(double(__bfloat162float(hx[r * kRowElems + e])) - m) / s;
        worst = std::max(worst, std::fabs(double(__bfloat162float(hy[r * kRowElems + e])) - want) / want);
      }
    }
    std::printf("  check %s: max rel err %.3g%s\n", name, worst, worst > 1e-2 ? "  WRONG" : "");
  };
  auto poison = [&] { CK(cudaMemset(y, 0xff, bytes)); };

  for (int g : {1, 2, 4}) {
    char name[64];
    std::snprintf(name, sizeof name, "copy_ldg per=4 grid=%d*sms", g * 8);
    report(name, tm.median([&] { copy_ldg<4><<<sms * 8 * g, 256>>>(x, y, n); }, reps));
  }
  report("copy_ldg per=1 full grid", tm.median([&] { copy_ldg<1><<<(n + 255) / 256, 256>>>(x, y, n); }, reps));
  report("copy cudaMemcpyAsync", tm.median([&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); }, reps));

  auto soft = [&](const char* name, auto launch) {
    poison();
    report(name, tm.median(launch, reps));
    check(name);
  };
  soft("soft_ldg kV=1", [&] { soft_ldg<1><<<(rows + 15) / 16, 256>>>(x, y, rows); });
  soft("soft_ldg kV=2", [&] { soft_ldg<2><<<(rows + 31) / 32, 256>>>(x, y, rows); });
  soft("soft_ldg kV=4", [&] { soft_ldg<4><<<(rows + 63) / 64, 256>>>(x, y, rows); });
  using B = __nv_bfloat16;
  for (int vpl : {1, 2, 4}) {
    softmax::RowsParams<B> rp{reinterpret_cast<const B*>(x), reinterpret_cast<B*>(y), rows, kRowElems, false,
                              SoftmaxOutput::Softmax, 0, 1, 0, {}};
    const int lanes = kRowVecs / vpl;
    rp.lanes_log2 = __builtin_ctz(lanes);
    const int grid = static_cast<int>((rows * lanes + 255) / 256);
    char name[64];
    std::snprintf(name, sizeof name, "library warp kernel vpl=%d", vpl);
    soft(name, [&] {
      if (vpl == 1) softmax::softmax_warp_rows_kernel<B, 1, true><<<grid, 256>>>(rp);
      if (vpl == 2) softmax::softmax_warp_rows_kernel<B, 2, true><<<grid, 256>>>(rp);
      if (vpl == 4) softmax::softmax_warp_rows_kernel<B, 4, true><<<grid, 256>>>(rp);
    });
  }

  for (int mode : {0, 1, 2})
    for (int piece : {8192, 16384})
      for (int bpsm : {1, 2}) {
        const int nt = mode == 0 ? 256 : 512;
        const int ring = std::min<int>(32, (bpsm == 1 ? 196 : 98) * 1024 / piece);
        const int64_t pieces = int64_t(bytes / piece);
        char name[96];
        std::snprintf(name, sizeof name, "bulk mode=%d piece=%d ring=%d bpsm=%d nt=%d", mode, piece, ring, bpsm, nt);
        const auto launch = [&] { bulk_kernel<<<sms * bpsm, nt, size_t(ring) * piece>>>(x, y, pieces, piece, ring, mode); };
        if (mode == 0) {
          report(name, tm.median(launch, reps));
        } else {
          soft(name, launch);
        }
      }
  CK(cudaDeviceSynchronize());
  return 0;
}
