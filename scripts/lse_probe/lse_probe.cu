// logsumexp probe (benchmarks/NOTES.md, "s32"): long rows read once and reduced to (m, d) partials per chunk,
// then merged by the library's finalize kernel. The library's streaming reduce kernel against variants that
// fold a group of vectors with one max and one rescale (16-bit: FusedExp2, one FFMA and one ex2 per element;
// the library's `fold` pays a compare, a select and an accurate expf per element), with more vectors in
// flight per thread, and on a grid sized to the resident blocks with items of equal size; and a read-only
// kernel of the same shape (no exponentials) as the ceiling. Session 40 ("s40 calls 1-3") added the group fold
// with the next step's loads issued before the current one is folded (lse_prefetch_kernel), the same without
// the exponential (the fold's cost without the exp unit), and with a share of the exponentials on the FMA
// pipe (poly_exp2). Since then lse_reduce_kernel folds through fold_raw as well (the same max and terms; its
// four partial sums are taken per element instead of per vector), so its s32 numbers are of the earlier code.
// Two timings: cold (a 256 MiB read before each call, events around it, median) and stream (30 calls back to
// back over 3 rotating inputs, time per call).
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc -o /tmp/lse_probe scripts/lse_probe/lse_probe.cu && /tmp/lse_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "softmax/softmax_streaming.cuh"
#include "../probe_check.h"
#include "../probe_timing.h"

using namespace flash_attn_ext;
using namespace flash_attn_ext::softmax;

// A step of the probe's reduce kernels: 256 threads x kU 16-byte vectors; kPad: a raw word of -inf pairs.
template <typename T, int kU> struct StepShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static constexpr int kStep = 256 * kU * kVec;
  static constexpr unsigned kPad = sizeof(T) == 4 ? 0xff800000u : 0xff80ff80u;
};

// Max of kU raw bf16 vectors on packed pairs (HMNMX2: one instruction per two elements, no floats live; like
// fmaxf it ignores NaN).
template <int kU> __device__ __forceinline__ float packed_max(const uint4 (&raw)[kU]) {
  __nv_bfloat162 m = bit_cast<__nv_bfloat162>(raw[0].x);
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const unsigned w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) m = __hmax2(m, bit_cast<__nv_bfloat162>(w[i]));
  }
  return fmaxf(__low2float(m), __high2float(m));
}

// 2^t on the FMA and integer pipes instead of the exp unit, for t <= ~0 (FusedExp2's arguments): 2^t =
// 2^j 2^f with j = rint(t) (the 1.5 * 2^23 rounding trick) and f = t - j in [-0.5, 0.5], 2^f by the degree-5
// Taylor polynomial of e^(f ln 2) (3.3e-6 relative error in float arithmetic: far under a bf16 half-ulp, not
// fp32-exact), j added into the exponent field. t < -126 gives 0 (-inf included); NaN stays NaN.
__device__ __forceinline__ float poly_exp2(float t) {
  const float r = t + 12582912.0f;
  const float f = t - (r - 12582912.0f);
  float p = 1.3333558e-3f;
  p = fmaf(p, f, 9.6181291e-3f);
  p = fmaf(p, f, 5.5504109e-2f);
  p = fmaf(p, f, 2.4022651e-1f);
  p = fmaf(p, f, 6.9314718e-1f);
  p = fmaf(p, f, 1.0f);
  const float v = __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
  return t < -126.0f ? 0.0f : v;
}

// The group fold (online_math.cuh's `fold`) on raw vectors, widened one vector at a time, so only the raw
// registers stay live: the max pass and the sum pass each unpack again (a shift for bf16, nothing for fp32).
// kPackedMax (bf16 only): the max on packed pairs (packed_max).
// kNoExp: each term is the exponential's argument (one FFMA, no MUFU): what the fold costs without the exp unit.
// kPolyEvery (16-bit only): every kPolyEvery-th element of a thread's step takes poly_exp2 instead of ex2.
template <typename T, int kU, bool kPackedMax, bool kNoExp = false, int kPolyEvery = 0>
__device__ __forceinline__ void fold_raw(OnlineState<acc_t<T>>& st, const uint4 (&raw)[kU]) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  A m = st.m;
  if constexpr (kPackedMax) {
    m = amax(m, packed_max(raw));
  } else {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      A w[kVec];
      VecIO<T>::unpack(raw[u], w);
#pragma unroll
      for (int i = 0; i < kVec; ++i) m = amax(m, w[i]);
    }
  }
  const A carried = st.d * rescale(st.m, m);
  const auto sum_terms = [&](const auto& e) {
    A d[4] = {A(0), A(0), A(0), A(0)};
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      A w[kVec];
      VecIO<T>::unpack(raw[u], w);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        if constexpr (kPolyEvery > 0 && sizeof(T) == 2 && !kNoExp) {
          if ((u * kVec + i) % kPolyEvery == 0) {
            d[(u * kVec + i) % 4] += poly_exp2(fmaf(w[i], e.c, -e.k));
            continue;
          }
        }
        d[(u * kVec + i) % 4] += e(w[i]);
      }
    }
    return (d[0] + d[1]) + (d[2] + d[3]);
  };
  if constexpr (kNoExp) {
    const A c = A(1.4426950408889634), k = m * c;
    st = {m, carried + sum_terms([&](A x) { return x * c - k; })};
  } else if constexpr (sizeof(T) == 2) {
    const FusedExp2 e = FusedExp2::at<T>(m);
    st = {m, fmaf(sum_terms(e), e.correction, carried)};
  } else {
    st = {m, carried + sum_terms(ShiftedExp<A, false>(m))};
  }
}

// One item = (row, chunk) of chunk_elems elements; blocks walk items grid-stride. Each step a thread loads
// kU 16-byte vectors (j, j + 256, ...) of the step, then folds them with one max and one rescale.
template <typename T, int kU, bool kReadOnly, bool kPackedMax = false>
__global__ void __launch_bounds__(256) lse_reduce_kernel(const StreamParams<T> p) {
  using A = acc_t<T>;
  using S = StepShape<T, kU>;
  constexpr int kVec = S::kVec, kStep = S::kStep;
  constexpr unsigned kPad = S::kPad;
  __shared__ OnlineState<A> s_state[32];
  const int64_t items = p.rows * p.chunks;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const RowChunk chunk(item, p.chunks, p.chunk_elems, p.len);
    const T* x = p.x + chunk.row * p.len;
    OnlineState<A> st = empty_state<A>();
    unsigned bits = 0;
    for (int64_t g = chunk.begin; g < chunk.end; g += kStep) {
      uint4 raw[kU];
      const int64_t base = g + int64_t(threadIdx.x) * kVec;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t at = base + int64_t(u) * 256 * kVec;
        raw[u] = at < chunk.end ? load16(x + at) : make_uint4(kPad, kPad, kPad, kPad);
      }
      if constexpr (kReadOnly) {
#pragma unroll
        for (int u = 0; u < kU; ++u) bits ^= raw[u].x ^ raw[u].y ^ raw[u].z ^ raw[u].w;
      } else {
        fold_raw<T, kU, kPackedMax>(st, raw);
      }
    }
    if constexpr (kReadOnly) {
      if (bits == 0x9e3779b9u) p.part_m[item] = 1.f;  // keeps the loads
    } else {
      st = block_allreduce(st, MergeOp{}, empty_state<A>(), s_state);
      if (threadIdx.x == 0) {
        p.part_m[item] = st.m;
        p.part_d[item] = st.d;
      }
    }
    __syncthreads();
  }
}

// The group fold with the next step's loads issued before the current step is folded (two register stages
// of kU raw vectors): each block keeps a step in flight while its exponentials run, where the kernels above
// issue a step's loads only after folding the previous one. kMinBlocks: __launch_bounds__'s blocks per SM.
template <typename T, int kU, int kMinBlocks, bool kNoExp = false, int kPolyEvery = 0>
__global__ void __launch_bounds__(256, kMinBlocks) lse_prefetch_kernel(const StreamParams<T> p) {
  using A = acc_t<T>;
  using S = StepShape<T, kU>;
  constexpr int kVec = S::kVec, kStep = S::kStep;
  constexpr unsigned kPad = S::kPad;
  __shared__ OnlineState<A> s_state[32];
  const int64_t items = p.rows * p.chunks;
  // Step loads from px, rem elements left from px on (<= 0: none): vector u at px + u * 256 * kVec.
  const auto load_step = [&](const T* px, int rem, uint4 (&raw)[kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) raw[u] = u * 256 * kVec < rem ? load16(px + u * 256 * kVec) : make_uint4(kPad, kPad, kPad, kPad);
  };
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const RowChunk chunk(item, p.chunks, p.chunk_elems, p.len);
    const int64_t base = chunk.begin + int64_t(threadIdx.x) * kVec;
    const T* px = p.x + chunk.row * p.len + base;
    int rem = remaining(chunk.end, base);
    const int steps = static_cast<int>((chunk.end - chunk.begin + kStep - 1) / kStep);
    OnlineState<A> st = empty_state<A>();
    uint4 cur[kU];
    load_step(px, rem, cur);
    for (int k = 0; k < steps; ++k) {
      px += kStep;
      rem -= kStep;
      uint4 nxt[kU];
      if (k + 1 < steps) load_step(px, rem, nxt);
      fold_raw<T, kU, std::is_same_v<T, __nv_bfloat16>, kNoExp, kPolyEvery>(st, cur);
#pragma unroll
      for (int u = 0; u < kU; ++u) cur[u] = nxt[u];
    }
    st = block_allreduce(st, MergeOp{}, empty_state<A>(), s_state);
    if (threadIdx.x == 0) {
      p.part_m[item] = st.m;
      p.part_d[item] = st.d;
    }
    __syncthreads();
  }
}

float to_float(float v) { return v; }
float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> void run_shape(Bench& bench, int sms, int64_t rows, int64_t len) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kInputs = 3;
  const size_t bytes = size_t(rows * len) * sizeof(T);
  T* x[kInputs];
  for (int i = 0; i < kInputs; ++i) CK(cudaMalloc(&x[i], bytes));
  T* y;
  CK(cudaMalloc(&y, rows * sizeof(T)));
  const int64_t max_items = int64_t(sms) * 64 + rows * 4096;
  A* part;
  CK(cudaMalloc(&part, 2 * max_items * sizeof(A)));
  std::vector<T> hx(rows * len);
  srand(7);
  for (auto& v : hx) v = T(float(rand()) / RAND_MAX * 8.f - 4.f);
  for (int i = 0; i < kInputs; ++i) CK(cudaMemcpy(x[i], hx.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<double> ref(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t e = 0; e < len; ++e) m = std::max(m, double(to_float(hx[r * len + e])));
    for (int64_t e = 0; e < len; ++e) s += std::exp(double(to_float(hx[r * len + e])) - m);
    ref[r] = m + std::log(s);
  }
  const double floor_us = double(bytes) / 3008e3;  // read only, at the copy's rate
  std::printf("%s %lldx%lld  (read %.1f MB; at 3008 GB/s %.1f us)\n", sizeof(T) == 4 ? "fp32" : "bf16",
              (long long)rows, (long long)len, bytes / 1e6, floor_us);

  // kernel: the reduce kernel; chunk_elems; grid (0: one block per item); finalize
  auto run = [&](const std::string& name, void (*kernel)(const StreamParams<T>), int64_t chunk_elems, int grid,
                 bool finalize) {
    const int chunks = static_cast<int>((len + chunk_elems - 1) / chunk_elems);
    StreamParams<T> sp{x[0], y, rows, len, chunk_elems, chunks, StreamPass::State, true, SoftmaxOutput::LogSumExp,
                       part, part + rows * chunks};
    if (rows * chunks > max_items) {
      std::printf("  %-44s skipped (%lld items)\n", name.c_str(), (long long)(rows * chunks));
      return;
    }
    const int g = grid > 0 ? grid : static_cast<int>(rows * chunks);
    auto call = [&](int i) {
      sp.x = x[i % kInputs];
      kernel<<<g, 256>>>(sp);
      CK(cudaGetLastError());
      if (finalize) {
        logsumexp_stream_finalize_kernel<T><<<static_cast<int>((rows + 7) / 8), 256>>>(sp);
        CK(cudaGetLastError());
      }
    };
    if (finalize) {
      CK(cudaMemset(y, 0xff, rows * sizeof(T)));
      call(0);
      CK(cudaDeviceSynchronize());
      std::vector<T> hy(rows);
      CK(cudaMemcpy(hy.data(), y, rows * sizeof(T), cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) worst = std::max(worst, std::fabs(double(to_float(hy[r])) - ref[r]) / std::fabs(ref[r]));
      if (!(worst <= (sizeof(T) == 4 ? 1e-6 : 8e-3))) std::printf("    %s: max rel err %.3g  WRONG\n", name.c_str(), worst);
    }
    const float c = bench.cold(call, 30), s = bench.stream(call, 30, 5);
    std::printf("  %-44s %5d items grid %5d  cold %7.2f us %5.1f %%   stream %7.2f us %5.1f %%\n", name.c_str(),
                int(rows * chunks), g, c, 100 * floor_us / c, s, 100 * floor_us / s);
  };
  const int64_t step4 = 256 * 4 * kVec;  // the library's step (kStreamUnroll = 4)
  const int lib_steps = std::max<int64_t>(4, ((len + step4 - 1) / step4 + 1023) / 1024);
  run("library stream reduce, steps " + std::to_string(lib_steps), softmax_stream_reduce_kernel<T, true>,
      lib_steps * step4, 0, true);
  run("library stream reduce, steps 16", softmax_stream_reduce_kernel<T, true>, 16 * step4, 0, true);
  run("group fold U4, steps 4", lse_reduce_kernel<T, 4, false>, 4 * step4, 0, true);
  run("prefetch U4, steps 4", lse_prefetch_kernel<T, 4, 1>, 4 * step4, 0, true);
  run("prefetch U4, steps 8", lse_prefetch_kernel<T, 4, 1>, 8 * step4, 0, true);
  run("prefetch U4, steps 16", lse_prefetch_kernel<T, 4, 1>, 16 * step4, 0, true);
  run("prefetch U2, steps 8", lse_prefetch_kernel<T, 2, 1>, 4 * step4, 0, true);
  run("prefetch U2, steps 16", lse_prefetch_kernel<T, 2, 1>, 8 * step4, 0, true);
  run("prefetch U2 6 blocks/SM, steps 8", lse_prefetch_kernel<T, 2, 6>, 4 * step4, 0, true);
  run("prefetch U2 6 blocks/SM, steps 16", lse_prefetch_kernel<T, 2, 6>, 8 * step4, 0, true);
  run("prefetch U2 8 blocks/SM, steps 8", lse_prefetch_kernel<T, 2, 8>, 4 * step4, 0, true);
  run("prefetch U8, steps 4", lse_prefetch_kernel<T, 8, 1>, 8 * step4, 0, true);
  run("prefetch U4, steps 16, no exp (wrong result)", lse_prefetch_kernel<T, 4, 1, true>, 16 * step4, 0, false);
  run("prefetch U4, steps 4, no exp (wrong result)", lse_prefetch_kernel<T, 4, 1, true>, 4 * step4, 0, false);
  if constexpr (sizeof(T) == 2) {
    run("prefetch U4, steps 16, poly 1/8", lse_prefetch_kernel<T, 4, 4, false, 8>, 16 * step4, 0, true);
    run("prefetch U4, steps 16, poly 1/4", lse_prefetch_kernel<T, 4, 4, false, 4>, 16 * step4, 0, true);
    run("prefetch U4, steps 16, poly 1/2", lse_prefetch_kernel<T, 4, 4, false, 2>, 16 * step4, 0, true);
    run("prefetch U4, steps 4, poly 1/4", lse_prefetch_kernel<T, 4, 4, false, 4>, 4 * step4, 0, true);
  }
  run("read only U4, steps 4 (no finalize)", lse_reduce_kernel<T, 4, true>, 4 * step4, 0, false);
  run("group fold U8, steps 2", lse_reduce_kernel<T, 8, false>, 4 * step4, 0, true);
  run("group fold U8, steps 4", lse_reduce_kernel<T, 8, false>, 8 * step4, 0, true);
  run("group fold U8, steps 8", lse_reduce_kernel<T, 8, false>, 16 * step4, 0, true);
  run("group fold U16, steps 2", lse_reduce_kernel<T, 16, false>, 8 * step4, 0, true);
  if constexpr (sizeof(T) == 2) {
    run("packed max U8, steps 2", lse_reduce_kernel<T, 8, false, true>, 4 * step4, 0, true);
    run("packed max U8, steps 4", lse_reduce_kernel<T, 8, false, true>, 8 * step4, 0, true);
    run("packed max U16, steps 2", lse_reduce_kernel<T, 16, false, true>, 8 * step4, 0, true);
  }
  // Resident grid, items of equal size: about 4 items per block.
  struct Resident {
    void (*kernel)(const StreamParams<T>);
    const char* label;
  };
  for (const Resident& v : {Resident{lse_reduce_kernel<T, 4, false>, "U4"}, Resident{lse_reduce_kernel<T, 8, false>, "U8"},
                            Resident{lse_reduce_kernel<T, 8, false, sizeof(T) == 2>, "U8 packed max"}}) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.kernel, 256, 0));
    const int grid = per_sm * sms;
    for (int per_block : {2, 4, 8}) {
      const int64_t chunks = std::max<int64_t>(1, (int64_t(per_block) * grid + rows - 1) / rows);
      int64_t ce = (len + chunks - 1) / chunks;
      ce = (ce + 128 / sizeof(T) - 1) / (128 / sizeof(T)) * (128 / sizeof(T));
      run(std::string("group fold ") + v.label + ", resident " + std::to_string(per_sm) + "/SM, ~" +
              std::to_string(per_block) + " items/block",
          v.kernel, ce, grid, true);
    }
  }
  run("read only U8, steps 4 (no finalize)", lse_reduce_kernel<T, 8, true>, 8 * step4, 0, false);
  for (int i = 0; i < kInputs; ++i) CK(cudaFree(x[i]));
  CK(cudaFree(y));
  CK(cudaFree(part));
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Bench bench;
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{8, 4194304}, {128, 262144}, {1024, 32768}, {4096, 4096}}) {
    run_shape<float>(bench, sms, rows, len);
    run_shape<__nv_bfloat16>(bench, sms, rows, len);
  }
  return 0;
}
