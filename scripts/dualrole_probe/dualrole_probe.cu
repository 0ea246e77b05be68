// Dual-role probe (benchmarks/NOTES.md, log row "probe s16"): can a split-row softmax keep DRAM busy through
// the row exchange if every SM runs two independent item chains, one holding its item in shared memory
// (the pipelined kernel's ring of bulk copies) and one holding its item in registers?
// One block per SM of 128 + 512 threads. Items are (row, chunk) pairs of 128 KB; round k holds items
// [k * grid, (k + 1) * grid) (grid a multiple of the chunks per row, so a round holds whole rows). In dual
// mode the first 4 warps (role P) take the even rounds through a shared-memory ring and the other 16 warps
// (role R) the odd rounds, each thread holding 16 vectors of the item in registers; each role exchanges its
// rows' (m, d) on its own counters and synchronizes on its own named barrier, so a role waiting on its row
// exchange never holds the other back. Configurations (DualParams): one role or both, role R started at once
// or once role P has folded or stored its first item (the roles out of phase), and the store policy per role.
// Compared in the same binary with the library's pipelined kernel (softmax_pipelined.cuh) on the same
// chunking, and a copy.
// Timed like benchmarks/common.py (256 MiB read before each call, events, median); the counters' memset is
// inside every timed call, as the library's at::zeros is.
// Build and run from the repository root (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc -o /tmp/dualrole_probe scripts/dualrole_probe/dualrole_probe.cu && /tmp/dualrole_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "softmax/softmax_dual.cuh"
#include "softmax/softmax_pipelined.cuh"
#include "../probe_check.h"

using namespace flash_attn_ext;
using namespace flash_attn_ext::softmax;

constexpr int kP = 128;      // role P threads
constexpr int kR = 512;      // role R threads
constexpr int kRVecs = 16;   // 16-byte vectors per role R thread: 512 x 16 x 16 B = 128 KB
constexpr int kRing = 14;    // role P ring pieces of 16 KB

__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// All-reduce over the threads [first, first + n) (warp-aligned), on named barrier `bar`.
template <typename V, typename Op>
__device__ __forceinline__ V role_allreduce(V v, Op op, V identity, V* scratch, int first, int n, int bar) {
  const int lt = threadIdx.x - first;
  v = warp_allreduce(v, op);
  if ((lt & 31) == 0) scratch[lt >> 5] = v;
  named_sync(bar, n);
  v = (lt & 31) < (n >> 5) ? scratch[lt & 31] : identity;
  v = warp_allreduce(v, op);
  named_sync(bar, n);
  return v;
}

// exchange_row_state of split_exchange.cuh for a role instead of the whole block.
template <typename A>
__device__ __forceinline__ OnlineState<A> role_exchange(A* part_m, A* part_d, int* counters, int chunks, int64_t row,
                                                        int64_t item, OnlineState<A> mine, OnlineState<A>* scratch,
                                                        int first, int n, int bar) {
  const int lt = threadIdx.x - first;
  if (lt == 0) {
    __stcg(part_m + item, mine.m);
    __stcg(part_d + item, mine.d);
    arrive_release(counters + row);
    while (load_acquire(counters + row) < chunks) __nanosleep(32);
  }
  named_sync(bar, n);
  OnlineState<A> acc = empty_state<A>();
  for (int c = lt; c < chunks; c += n)
    acc = merge(acc, OnlineState<A>{__ldcg(part_m + row * chunks + c), __ldcg(part_d + row * chunks + c)});
  return role_allreduce(acc, MergeOp{}, empty_state<A>(), scratch, first, n, bar);
}

// The same 16 bytes, hidden from the optimizer: the sum and the store pass each unpack role R's vectors
// afresh instead of keeping 128 unpacked bf16 values live across the exchange (which spilled).
__device__ __forceinline__ uint4 opaque(uint4 r) {
  asm volatile("" : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w));
  return r;
}

template <typename T> struct DualParams {
  const T* x;
  T* y;
  int64_t rows, len, chunk_elems;
  int chunks, piece_elems;
  int roles;     // 1: role P only, 2: role R only, 3: both (P even rounds, R odd rounds)
  int phase;     // both roles: R starts at once (0), once P has folded (1) or stored (2) its first item
  bool p_cs;     // role P's stores evict-first (st.global.cs) for fp32 too (16-bit types always)
  bool r_cs;     // the same for role R
  acc_t<T>* part_m;
  acc_t<T>* part_d;
  int* counters;
};

template <typename T>
__device__ __forceinline__ void store_vec(T* p, uint4 v, bool streaming) {
  if (sizeof(T) == 2 || streaming) {
    store16_streaming(p, v);
  } else {
    store16(p, v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kP + kR, 1) dual_kernel(const DualParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ uint64_t bars[kRing];
  __shared__ OnlineState<A> s_p[32], s_r[32];
  const int64_t items = p.rows * p.chunks;
  const int64_t grid = gridDim.x;
  const bool dual = p.roles == 3;
  const int64_t step = dual ? 2 * grid : grid;
  const int piece_vecs = p.piece_elems / kVec;
  const int ring_vecs = kRing * piece_vecs;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kRing; ++i) mbarrier_init(bars + i, 1);
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < kP) {
    if (p.roles == 2) return;
    const int t = threadIdx.x;
    // Producer (thread 0): cursor over role P's items and their pieces.
    int64_t f_item = blockIdx.x;
    int f_piece = 0, f_slot = 0, outstanding = 0;
    auto fill = [&] {
      while (outstanding < kRing && f_item < items) {
        const RowChunk span(f_item, p.chunks, p.chunk_elems, p.len);
        const int length = static_cast<int>(span.end - span.begin);
        const int first = f_piece * p.piece_elems;
        const int n = min(p.piece_elems, length - first);
        pipe::bulk_load(ring + static_cast<int64_t>(f_slot) * piece_vecs, p.x + span.row * p.len + span.begin + first,
                        static_cast<unsigned>(n) * sizeof(T), bars + f_slot);
        if (++f_slot == kRing) f_slot = 0;
        ++outstanding;
        if (first + n >= length) {
          f_piece = 0;
          f_item += step;
        } else {
          ++f_piece;
        }
      }
    };
    if (t == 0) fill();
    int slot = 0;
    unsigned phase = 0;
    for (int64_t item = blockIdx.x; item < items; item += step) {
      const RowChunk span(item, p.chunks, p.chunk_elems, p.len);
      const int length = static_cast<int>(span.end - span.begin);
      const int pieces = (length + p.piece_elems - 1) / p.piece_elems;
      const int nvec = length / kVec;
      const int base = slot * piece_vecs;
      OnlineState<A> state = empty_state<A>();
      for (int k = 0; k < pieces; ++k) {
        mbarrier_wait(bars + slot, phase);
        const uint4* piece = ring + slot * piece_vecs;
        const int n = min(piece_vecs, nvec - k * piece_vecs);
        for (int j = t; j < n; j += pipe::kPipeGroup * kP) pipe::fold_group<T>(state, piece, j, kP, n);
        if (++slot == kRing) {
          slot = 0;
          phase ^= 1;
        }
      }
            if (dual && p.phase == 1 && item == blockIdx.x) named_arrive(3, kP + kR);
      OnlineState<A> row_state = role_allreduce(state, MergeOp{}, empty_state<A>(), s_p, 0, kP, 1);
      if (p.chunks > 1)
        row_state = role_exchange(p.part_m, p.part_d, p.counters, p.chunks, span.row, item, row_state, s_p, 0, kP, 1);
      const Epilogue<A> epi(SoftmaxOutput::Softmax, row_state, row_state.m);
      const ShiftedExp<A, kFastExp<T>> e(row_state.m);
      T* y = p.y + span.row * p.len + span.begin;
#pragma unroll pipe::kPipeGroup
      for (int v = t; v < nvec; v += kP) {
        const int i = base + v;
        A w[kVec];
        VecIO<T>::unpack(ring[i >= ring_vecs ? i - ring_vecs : i], w);
#pragma unroll
        for (int j = 0; j < kVec; ++j) w[j] = epi.apply_term(e(w[j]));
        store_vec(y + static_cast<int64_t>(v) * kVec, VecIO<T>::pack(w), p.p_cs);
      }
      if (dual && p.phase == 2 && item == blockIdx.x) named_arrive(3, kP + kR);
      named_sync(1, kP);
      if (t == 0) {
        outstanding -= pieces;
        fence_async_proxy();
        fill();
      }
    }
  } else {
    if (p.roles == 1) return;
    const int t = threadIdx.x - kP;
    if (dual && p.phase > 0) named_sync(3, kP + kR);
    for (int64_t item = blockIdx.x + (dual ? grid : 0); item < items; item += step) {
      const RowChunk span(item, p.chunks, p.chunk_elems, p.len);
      const T* x = p.x + span.row * p.len + span.begin;
      const int nvec = static_cast<int>(span.end - span.begin) / kVec;
      // Vectors past the chunk read as -inf (all-ones exponent, sign set: 0xff800000 / 0xff80 pairs).
      constexpr unsigned kNegInf = sizeof(T) == 2 ? 0xff80ff80u : 0xff800000u;
      uint4 raw[kRVecs];
#pragma unroll
      for (int s = 0; s < kRVecs; ++s)
        raw[s] = s * kR + t < nvec ? load16(x + static_cast<int64_t>(s * kR + t) * kVec)
                                   : make_uint4(kNegInf, kNegInf, kNegInf, kNegInf);
      // The max on packed pairs for bf16: unpacking all 128 elements here let the compiler keep them for
      // the sum below, and spill.
      A m = neg_inf<A>();
      if constexpr (sizeof(T) == 2) {
        __nv_bfloat162 mm = bit_cast<__nv_bfloat162>(raw[0].x);
#pragma unroll
        for (int s = 0; s < kRVecs; ++s) {
          mm = __hmax2(mm, bit_cast<__nv_bfloat162>(raw[s].x));
          mm = __hmax2(mm, bit_cast<__nv_bfloat162>(raw[s].y));
          mm = __hmax2(mm, bit_cast<__nv_bfloat162>(raw[s].z));
          mm = __hmax2(mm, bit_cast<__nv_bfloat162>(raw[s].w));
        }
        m = fmaxf(__low2float(mm), __high2float(mm));
      } else {
#pragma unroll
        for (int s = 0; s < kRVecs; ++s) {
          A w[1][kVec];
          VecIO<T>::unpack(raw[s], w[0]);
          m = amax(m, max_of(w));
        }
      }
      const ShiftedExp<A, kFastExp<T>> e(m);
      A d = A(0);
#pragma unroll
      for (int s = 0; s < kRVecs; ++s) {
        A w[kVec];
        VecIO<T>::unpack(opaque(raw[s]), w);
#pragma unroll
        for (int j = 0; j < kVec; ++j) d += e(w[j]);
      }
      OnlineState<A> row_state = role_allreduce(OnlineState<A>{m, d}, MergeOp{}, empty_state<A>(), s_r, kP, kR, 2);
      if (p.chunks > 1)
        row_state = role_exchange(p.part_m, p.part_d, p.counters, p.chunks, span.row, item, row_state, s_r, kP, kR, 2);
      const Epilogue<A> epi(SoftmaxOutput::Softmax, row_state, row_state.m);
      const ShiftedExp<A, kFastExp<T>> e2(row_state.m);
      T* y = p.y + span.row * p.len + span.begin;
#pragma unroll
      for (int s = 0; s < kRVecs; ++s) {
        A w[kVec];
        VecIO<T>::unpack(opaque(raw[s]), w);
#pragma unroll
        for (int j = 0; j < kVec; ++j) w[j] = epi.apply_term(e2(w[j]));
        if (s * kR + t < nvec) store_vec(y + static_cast<int64_t>(s * kR + t) * kVec, VecIO<T>::pack(w), p.r_cs);
      }
    }
  }
#endif
}

__global__ void flush_kernel(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc ^= buf[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

struct Timer {
  const uint4* flush_buf;
  size_t flush_n;
  unsigned* sink;
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

template <typename T> float to_f(T v);
template <> float to_f<float>(float v) { return v; }
template <> float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
void run_shape(Timer& tm, int64_t rows, int64_t len, int want_chunks, int reps, int sms) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  // Chunks of a multiple of 128 bytes, at most role R's 128 KB.
  const int64_t cap = int64_t(kR) * kRVecs * kVec;
  const int chunks = want_chunks > 0 ? want_chunks : static_cast<int>((len + cap - 1) / cap);
  const int64_t align = 128 / sizeof(T);
  const int64_t chunk_elems = ((len + chunks - 1) / chunks + align - 1) / align * align;
  if (chunk_elems > cap || (chunks - 1) * chunk_elems >= len || len % kVec != 0) {
    std::printf("skip %lldx%lld with %d chunks\n", (long long)rows, (long long)len, chunks);
    return;
  }
  const int grid = (sms / chunks) * chunks;
  const int64_t n = rows * len;
  const size_t bytes = n * sizeof(T);
  T *x, *y;
  A *pm, *pd;
  int* counters;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&pm, rows * chunks * sizeof(A)));
  CK(cudaMalloc(&pd, rows * chunks * sizeof(A)));
  CK(cudaMalloc(&counters, rows * sizeof(int)));
  std::vector<T> hx(n);
  srand(7);
  for (auto& v : hx) v = T(float(rand()) / RAND_MAX * 8.f - 4.f);
  CK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));

  // fp64 reference on a few rows, every element.
  auto check = [&](const char* name) {
    std::vector<T> hy(n);
    CK(cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int64_t r : {int64_t(0), rows / 2 + 1, rows - 1}) {
      double m = -INFINITY, s = 0;
      for (int64_t e = 0; e < len; ++e) m = std::max(m, double(to_f(hx[r * len + e])));
      for (int64_t e = 0; e < len; ++e) s += std::exp(double(to_f(hx[r * len + e])) - m);
      for (int64_t e = 0; e < len; ++e) {
        const double want = std::exp(double(to_f(hx[r * len + e])) - m) / s;
        const double got = to_f(hy[r * len + e]);
        const double err = std::fabs(got - want) / want;
        if (!(err <= worst)) worst = err;  // NaN sticks
      }
    }
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

  // The library's pipelined kernel on the same chunking.
  for (int threads : {128, 256}) {
    PipeParams<T> pp{x, y, rows, len, chunk_elems, chunks, 16 / int(sizeof(T)) * 1024, kRing, SoftmaxOutput::Softmax,
                     pm, pd, counters};
    auto k = pipe::softmax_pipelined_rows_kernel<T>;
    const size_t smem = size_t(kRing) * 16384;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CK(cudaMemset(y, 0xff, bytes));
    char name[64];
    std::snprintf(name, sizeof name, "library pipelined, %d threads", threads);
    report(name, tm.median(
                     [&] {
                       CK(cudaMemsetAsync(counters, 0, rows * sizeof(int)));
                       void* args[] = {&pp};
                       CK(cudaLaunchCooperativeKernel((void*)k, grid, threads, args, smem, 0));
                     },
                     reps));
    check(name);
  }
  struct Config {
    const char* name;
    int roles, phase;
    bool p_cs, r_cs;
  };
  const Config configs[] = {
      {"dual, R after P's fold, R .cs", 3, 1, false, true},
      {"dual, R after P's fold, P + R .cs", 3, 1, true, true},
  };
  // The library's dual kernel (softmax_dual.cuh) on the same chunking; timed again after the variants below,
  // so that an order effect shows.
  PipeParams<T> dual_pp{x, y, rows, len, chunk_elems, chunks, 16 / int(sizeof(T)) * 1024, kRing,
                        SoftmaxOutput::Softmax, pm, pd, counters};
  auto time_library_dual = [&](const char* name) {
    auto k = dual::softmax_dual_rows_kernel<T>;
    const size_t smem = size_t(kRing) * 16384;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CK(cudaMemset(y, 0xff, bytes));
    report(name, tm.median(
                     [&] {
                       CK(cudaMemsetAsync(counters, 0, rows * sizeof(int)));
                       void* args[] = {&dual_pp};
                       CK(cudaLaunchCooperativeKernel((void*)k, grid, dual::kThreads, args, smem, 0));
                     },
                     reps));
    check(name);
  };
  time_library_dual("library dual");
  for (const Config& c : configs) {
    DualParams<T> dp{x, y, rows, len, chunk_elems, chunks, 16 / int(sizeof(T)) * 1024, c.roles, c.phase, c.p_cs,
                     c.r_cs, pm, pd, counters};
    auto k = dual_kernel<T>;
    // R only runs without the ring: its loads then have the whole L1.
    const size_t smem = c.roles == 2 ? 0 : size_t(kRing) * 16384;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(size_t(kRing) * 16384)));
    CK(cudaMemset(y, 0xff, bytes));
    report(c.name, tm.median(
                       [&] {
                         CK(cudaMemsetAsync(counters, 0, rows * sizeof(int)));
                         void* args[] = {&dp};
                         CK(cudaLaunchCooperativeKernel((void*)k, grid, kP + kR, args, smem, 0));
                       },
                       reps));
    check(c.name);
  }
  time_library_dual("library dual, again");
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaFree(pm));
  CK(cudaFree(pd));
  CK(cudaFree(counters));
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
  Timer tm{fl, flush_n, sink, !(sync_env && sync_env[0] == '0'), {}, {}};
  std::printf("timing: %s\n", tm.sync_each ? "each call waited for" : "calls enqueued back to back");
  run_shape<float>(tm, 8, 4194304, 0, reps, sms);
  run_shape<float>(tm, 128, 262144, 0, reps, sms);
  run_shape<float>(tm, 1024, 32768, 0, reps, sms);
  run_shape<__nv_bfloat16>(tm, 8, 4194304, 0, reps, sms);
  run_shape<__nv_bfloat16>(tm, 128, 262144, 0, reps, sms);
  run_shape<__nv_bfloat16>(tm, 1024, 32768, 0, reps, sms);
  CK(cudaDeviceSynchronize());
  return 0;
}
