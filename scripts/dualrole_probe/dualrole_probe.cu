// Dual-role probe (benchmarks/NOTES.md, log rows "probe s16", "s17"): the library's dual-role split-row
// kernel (softmax_dual.cuh: per SM a ring role of 4 warps and a register role of 16 warps on alternate rounds
// of 128 KB items) against the library's pipelined kernel on the same chunking and a copy. Session 16's own
// variants of the two roles (in phase or not, store policies) became the library kernel and are in git
// history (af30ef8).
// Timed like benchmarks/common.py (256 MiB read before each call, events, median), except that the flush is a
// plain read kernel: after it the dual kernel runs 3-8 % faster than after the benchmark's torch reduction,
// whose large body evicts the dual kernel's code from the instruction caches (NOTES, s17, s22), so compare
// kernels here only with each other. PROBE_FLUSH=code runs a ~6000-instruction kernel after the read, which
// reproduces that cold case (s22: bf16 128x262144 50.7 -> 54.2-54.9 us). Every call takes a new exchange tag and
// nothing is filled before it, as in the library (split_exchange.cuh). PROBE_SYNC=0 enqueues all calls back to back (default: each waited for).
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc -o /tmp/dualrole_probe scripts/dualrole_probe/dualrole_probe.cu && /tmp/dualrole_probe
// Phase trace (s18): add -DFAE_SOFTMAX_PHASE_TRACE and run with PROBE_TRACE=<dir>: after its timing each
// library kernel runs once more with its roles' phase stamps on (softmax/phase_trace.cuh); a summary is
// printed and every stamp written to <dir>/trace_<kernel name>_<dtype>_<shape>.csv.
// PROBE_WHOLE_ROWS=1 (s30): instead, bf16 rows of 64 KB held whole by the library's pipelined kernel (no
// exchange), as its launcher runs them (two blocks per SM with 6-piece rings) and with one block per SM and
// a 14-piece ring; with the trace, the phases of each block's items (fold, block reduction, store).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "softmax/softmax_dual.cuh"
#include "softmax/softmax_pipelined.cuh"
#include "../probe_check.h"

using namespace flash_attn_ext;
using namespace flash_attn_ext::softmax;

constexpr int kRing = 14;  // ring pieces of 16 KB, as the library's launcher on the H100
constexpr int kItemVecs = dual::kRegThreads * dual::kRegVecs;  // 16-byte vectors of a 128 KB item

__global__ void flush_kernel(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc ^= buf[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

// kN dependent FMAs as straight-line code (asm volatile: none merged or rolled into a loop).
template <int kN> __device__ __forceinline__ void straight_fmas(float& x) {
  if constexpr (kN == 1) {
    asm volatile("fma.rn.f32 %0, %0, 0f3F800001, 0f3E800000;" : "+f"(x));
  } else {
    straight_fmas<kN / 2>(x);
    straight_fmas<kN - kN / 2>(x);
  }
}

// A kernel of ~6000 instructions (~96 KB of code): run after the flush, it evicts the next kernel's code from
// the SMs' instruction caches, as a torch reduction or a GEMM does (NOTES, "s22 runs 5-8").
__global__ void big_code_kernel(float* out) {
  float x = threadIdx.x;
  straight_fmas<6000>(x);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

struct Timer {
  const uint4* flush_buf;
  size_t flush_n;
  unsigned* sink;
  float* code_out;  // non-null: big_code_kernel runs after each flush (PROBE_FLUSH=code)
  bool sync_each;  // wait for every call before enqueuing the next (else enqueue all, as common.Timer does)
  std::vector<cudaEvent_t> a, b;
  template <class F> float median(F&& f, int reps) {
    const int n = reps + 3;
    while (static_cast<int>(a.size()) < n) {
      a.emplace_back();
      b.emplace_back();
      CK(cudaEventCreate(&a.back()));
      CK(cudaEventCreate(&b.back()));
    }
    for (int r = 0; r < n; ++r) {
      flush_kernel<<<132 * 4, 512>>>(flush_buf, flush_n, sink);
      if (code_out) big_code_kernel<<<132, 32>>>(code_out);
      CK(cudaEventRecord(a[r]));
      f();
      CK(cudaEventRecord(b[r]));
      if (sync_each) CK(cudaEventSynchronize(b[r]));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<float> ts;
    for (int r = 3; r < n; ++r) {
      float ms;
      CK(cudaEventElapsedTime(&ms, a[r], b[r]));
      ts.push_back(ms * 1000.f);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }
};

#ifdef FAE_SOFTMAX_PHASE_TRACE
// One traced call after a flush; prints per role the mean phase lengths (us) and the share of the kernel's
// span in which both roles of an SM wait on a row exchange at once, and writes every stamp to a CSV.
template <class Launch>
void trace_kernel(const char* dir, const char* name, Launch&& launch, Timer& tm, int grid, const char* dt,
                  int64_t rows, int64_t len) {
  const size_t n = size_t(grid) * 2 * kTraceItems * kTraceStamps;
  uint64_t* buf;
  CK(cudaMalloc(&buf, n * sizeof(uint64_t)));
  CK(cudaMemcpyToSymbol(g_phase_trace, &buf, sizeof(buf)));
  std::vector<uint64_t> h(n);
  for (int rep = 0; rep < 3; ++rep) {  // the last of three calls
    CK(cudaMemset(buf, 0, n * sizeof(uint64_t)));
    tm.median(launch, 1);
  }
  CK(cudaMemcpy(h.data(), buf, n * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  uint64_t* none = nullptr;  // the timed calls stamp nothing
  CK(cudaMemcpyToSymbol(g_phase_trace, &none, sizeof(none)));
  CK(cudaFree(buf));
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (size_t i = 0; i < n; ++i)  // time stamps only (stamp 4 is the SM id)
    if (const uint64_t v = h[i]; v && i % kTraceStamps < 4) { t0 = std::min(t0, v); t1 = std::max(t1, v); }
  std::string tag(name);
  for (char& c : tag) if (c == ' ' || c == ',') c = '_';
  char path[512];
  std::snprintf(path, sizeof path, "%s/trace_%s_%s_%lldx%lld.csv", dir, tag.c_str(), dt, (long long)rows,
                (long long)len);
  FILE* f = std::fopen(path, "w");
  if (f) std::fprintf(f, "block,role,item,first_data,folded,exchanged,stored,sm\n");
  double sum[2][4] = {}, cnt[2] = {}, both_wait = 0;
  auto at = [&](int b, int r, int k, int s) { return h[((size_t(b) * 2 + r) * kTraceItems + k) * kTraceStamps + s]; };
  auto us = [&](uint64_t v) { return v ? (v - t0) * 1e-3 : -1.0; };
  for (int b = 0; b < grid; ++b) {
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < kTraceItems && at(b, r, k, 3); ++k) {
        if (f) std::fprintf(f, "%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%d\n", b, r, k, us(at(b, r, k, 0)), us(at(b, r, k, 1)),
                            us(at(b, r, k, 2)), us(at(b, r, k, 3)), int(at(b, r, k, 4)) - 1);
        sum[r][0] += (at(b, r, k, 1) - at(b, r, k, 0)) * 1e-3;
        sum[r][1] += (at(b, r, k, 2) - at(b, r, k, 1)) * 1e-3;
        sum[r][2] += (at(b, r, k, 3) - at(b, r, k, 2)) * 1e-3;
        if (k + 1 < kTraceItems && at(b, r, k + 1, 0)) sum[r][3] += (at(b, r, k + 1, 0) - at(b, r, k, 3)) * 1e-3;
        cnt[r] += 1;
      }
    // both roles between "folded" and "exchanged" at the same time
    for (int i = 0; i < kTraceItems && at(b, 0, i, 3); ++i)
      for (int j = 0; j < kTraceItems && at(b, 1, j, 3); ++j) {
        const uint64_t lo = std::max(at(b, 0, i, 1), at(b, 1, j, 1)), hi = std::min(at(b, 0, i, 2), at(b, 1, j, 2));
        if (hi > lo) both_wait += (hi - lo) * 1e-3;
      }
  }
  if (f) std::fclose(f);
  const double span = (t1 - t0) * 1e-3;
  std::printf("    trace %s: span %.1f us (first stamp to last)", name, span);
  for (int r = 0; r < 2; ++r)
    if (cnt[r] > 0)
      std::printf("; role %d: %.0f items, fold %.2f, exchange %.2f, store %.2f, to next %.2f us", r, cnt[r],
                  sum[r][0] / cnt[r], sum[r][1] / cnt[r], sum[r][2] / cnt[r], sum[r][3] / cnt[r]);
  std::printf("; both roles waiting %.1f %% of SM time\n", 100.0 * both_wait / (span * grid));
}
#endif

template <typename T> float to_f(T v);
template <> float to_f<float>(float v) { return v; }
template <> float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// ring: pieces per block; want_grid: blocks (0: whole rounds of rows on one block per SM); pipelined_only:
// time only the library's pipelined kernel (256 threads), named with its grid and ring.
template <typename T>
void run_shape(Timer& tm, int64_t rows, int64_t len, int want_chunks, int reps, int sms, int ring = kRing,
               int want_grid = 0, bool pipelined_only = false) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  // Chunks of a multiple of 128 bytes, at most role R's 128 KB.
  const int64_t cap = int64_t(kItemVecs) * kVec;
  const int chunks = want_chunks > 0 ? want_chunks : static_cast<int>((len + cap - 1) / cap);
  const int64_t align = 128 / sizeof(T);
  const int64_t chunk_elems = ((len + chunks - 1) / chunks + align - 1) / align * align;
  if (chunk_elems > cap || (chunks - 1) * chunk_elems >= len || len % kVec != 0 || chunks > sms) {
    std::printf("skip %lldx%lld with %d chunks\n", (long long)rows, (long long)len, chunks);
    return;
  }
  const int grid = want_grid > 0 ? want_grid : (sms / chunks) * chunks;
  const int64_t n = rows * len;
  const size_t bytes = n * sizeof(T);
  T *x, *y;
  char* work;  // the library's split workspace: a 16-byte partial per item (RowExchange), zeroed once
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  const size_t work_bytes = 16 * rows * chunks;
  CK(cudaMalloc(&work, work_bytes));
  CK(cudaMemset(work, 0, work_bytes));
  std::vector<T> hx(n);
  srand(7);
  for (auto& v : hx) v = T(float(rand()) / RAND_MAX * 8.f - 4.f);
  CK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));

  // fp64 reference on a few rows, every element.
  auto check = [&](const char* name) {
    std::vector<T> hy(n);
    CK(cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost));
    const double worst = softmax_rows_max_rel_err(hx, hy, rows, len, to_f<T>);
    const double tol = sizeof(T) == 2 ? 1e-2 : 1e-5;
    std::printf("    check %s: max rel err %.3g%s\n", name, worst, worst <= tol ? "" : "  WRONG");
  };
  const double floor_us = 2.0 * bytes / 3008e3;
  auto report = [&](const char* name, float us) {
    std::printf("  %-44s %8.2f us  %5.1f %% of 3008 GB/s\n", name, us, 100.0 * floor_us / us);
  };
  std::printf("%s %lldx%lld: chunks %d of %lld elements, grid %d, items %lld\n", sizeof(T) == 2 ? "bf16" : "fp32",
              (long long)rows, (long long)len, chunks, (long long)chunk_elems, grid, (long long)(rows * chunks));
  report("copy cudaMemcpyAsync", tm.median([&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); }, reps));

  // A library kernel on this chunking: output poisoned, a new exchange tag for every call, checked.
  PipeParams<T> pp{x, y, rows, len, chunk_elems, chunks, 16 / int(sizeof(T)) * 1024, ring, SoftmaxOutput::Softmax,
                   {reinterpret_cast<uint64_t*>(work), nullptr, 0}};
  const size_t smem = size_t(ring) * 16384;
  auto time_kernel = [&](const char* name, void (*k)(const PipeParams<T>), int threads) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CK(cudaMemset(y, 0xff, bytes));
    auto launch = [&] {
      ++pp.exchange.tag;
      void* args[] = {&pp};
      CK(cudaLaunchCooperativeKernel((void*)k, grid, threads, args, smem, 0));
    };
    report(name, tm.median(launch, reps));
    check(name);
#ifdef FAE_SOFTMAX_PHASE_TRACE
    if (const char* dir = std::getenv("PROBE_TRACE"))
      trace_kernel(dir, name, launch, tm, grid, sizeof(T) == 2 ? "bf16" : "fp32", rows, len);
#endif
  };
  if (pipelined_only) {
    const std::string name = "library pipelined, grid " + std::to_string(grid) + ", ring " + std::to_string(ring);
    time_kernel(name.c_str(), pipe::softmax_pipelined_rows_kernel<T>, 256);
  } else {
    time_kernel("library pipelined, 128 threads", pipe::softmax_pipelined_rows_kernel<T>, 128);
    time_kernel("library pipelined, 256 threads", pipe::softmax_pipelined_rows_kernel<T>, 256);
    time_kernel("library dual", dual::library_kernel<T, true>, dual::kThreads);
    // the register role's loads in flight per thread and the ring's window of pieces in flight
    if constexpr (sizeof(T) == 4) {
      time_kernel("dual 16 loads, window 5", dual::softmax_dual_rows_kernel<T, 16, 5>, dual::kThreads);
      time_kernel("dual 8 loads, window 5", dual::softmax_dual_rows_kernel<T, 8, 5>, dual::kThreads);
    } else {
      time_kernel("dual 16 loads, window 0", dual::softmax_dual_rows_kernel<T, 16, 0>, dual::kThreads);
      time_kernel("dual 6 loads, window 0", dual::softmax_dual_rows_kernel<T, 6, 0>, dual::kThreads);
      time_kernel("dual 4 loads, window 0", dual::softmax_dual_rows_kernel<T, 4, 0>, dual::kThreads);
    }
  }
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaFree(work));
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 30;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint4* fl;
  unsigned* sink;
  const size_t flush_n = (256ull << 20) / 16;
  CK(cudaMalloc(&fl, flush_n * 16));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(fl, 1, flush_n * 16));
  // PROBE_SYNC=0: calls enqueued back to back, as benchmarks/common.Timer does (default: one at a time).
  const char* sync_env = std::getenv("PROBE_SYNC");
  const char* flush_env = std::getenv("PROBE_FLUSH");
  float* code_out = nullptr;
  if (flush_env && std::string(flush_env) == "code") CK(cudaMalloc(&code_out, 132 * 32 * sizeof(float)));
  Timer tm{fl, flush_n, sink, code_out, !(sync_env && sync_env[0] == '0'), {}, {}};
  std::printf("timing: %s; flush: plain read%s\n",
              tm.sync_each ? "each call waited for" : "calls enqueued back to back",
              code_out ? " + a ~6000-instruction kernel" : "");
  if (const char* whole = std::getenv("PROBE_WHOLE_ROWS"); whole && whole[0] == '1') {
    run_shape<__nv_bfloat16>(tm, 1024, 32768, 1, reps, sms, 6, 2 * sms, true);
    run_shape<__nv_bfloat16>(tm, 1024, 32768, 1, reps, sms, 14, sms, true);
    run_shape<__nv_bfloat16>(tm, 2048, 32768, 1, reps, sms, 6, 2 * sms, true);
    CK(cudaDeviceSynchronize());
    return 0;
  }
  run_shape<float>(tm, 8, 4194304, 0, reps, sms);
  run_shape<float>(tm, 128, 262144, 0, reps, sms);
  run_shape<float>(tm, 1024, 32768, 0, reps, sms);
  run_shape<__nv_bfloat16>(tm, 8, 4194304, 0, reps, sms);
  run_shape<__nv_bfloat16>(tm, 128, 262144, 0, reps, sms);
  run_shape<__nv_bfloat16>(tm, 1024, 32768, 0, reps, sms);
  CK(cudaDeviceSynchronize());
  return 0;
}
