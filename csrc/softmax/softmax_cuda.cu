// CUDA softmax, log_softmax and logsumexp: the kernel-choice heuristic (softmax_cuda_typed, all of it), the
// dtype dispatch and the CUDA registrations. Kernels: softmax_rows.cuh (row-cached, split-row),
// softmax_streaming.cuh (multi-pass), softmax_columns.cuh (dim not last); numerics: online_math.cuh.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "softmax/softmax_launch.h"
#include "softmax/softmax_problem.h"

namespace flash_attn_ext {
namespace softmax {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}
bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
// Grid-stride kernels take any grid; this keeps gridDim.x within its limit.
int grid_for(int64_t blocks) { return static_cast<int>(std::clamp<int64_t>(blocks, 1, int64_t(1) << 30)); }

// Partial (m, d) per work item, in the accumulator type; from the caching allocator, no synchronization.
template <typename T> at::Tensor partials_workspace(const at::Tensor& x, int64_t items) {
  return at::empty({2 * items}, x.options().dtype(std::is_same_v<T, double> ? at::kDouble : at::kFloat));
}

// The whole kernel choice. Rows (inner == 1), with nv = len / kVec 16-byte vectors per row:
//  1. warp-per-row       nv <= 32 * kMaxVpt (1024 fp32 / fp16 / bf16 elements, 512 doubles), any algorithm;
//  2. block-per-row      row in registers of one block of <= 1024 threads (32K fp32 / 16-bit, 16K doubles);
//                        "auto" softmax/log_softmax uses it only up to 512 threads and when rows fill the GPU;
//  3. split-row          "auto" softmax/log_softmax beyond that: 512-thread blocks, chunks of a row on several
//                        blocks (registers + shared memory), one read of DRAM, cooperative persistent grid;
//  4. streaming          everything left: "safe" 3 passes, "online" 2 passes, logsumexp 1 pass + finalize.
// dim not last (inner > 1): the column kernel. Accesses are 16-byte vectors when the row is "aligned".
template <typename T> void softmax_cuda_typed(const SoftmaxProblem& p, cudaStream_t stream) {
  using Traits = RowsTraits<T>;
  constexpr int kVec = Traits::kVec;
  const T* x = static_cast<const T*>(p.x.const_data_ptr());
  T* y = static_cast<T*>(p.out.mutable_data_ptr());
  const bool online = p.algorithm != SoftmaxAlgorithm::Safe;  // "auto" is online
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const int sms = prop->multiProcessorCount;

  if (p.inner > 1) {
    launch_columns<T>(ColumnsParams<T>{x, y, p.outer, p.len, p.inner, online, p.output}, stream);
    return;
  }

  const int64_t rows = p.outer;
  const int64_t len = p.len;
  const bool aligned = aligned16(x) && aligned16(y) && (len * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  const int64_t nv = ceil_div(len, kVec);
  RowsParams<T> rp{x, y, rows, len, online, p.output, 0, 1, 0, nullptr, nullptr, nullptr};

  // 1. Warp-per-row: next_pow2(nv) lanes with one vector each for short rows (several rows per warp), else
  //    32 lanes with next_pow2(nv / 32) vectors each.
  if (nv <= 32 * Traits::kMaxVpt) {
    while ((int64_t(1) << rp.lanes_log2) < std::min<int64_t>(nv, 32)) ++rp.lanes_log2;
    const int vpl = nv <= 32 ? 1 : static_cast<int>(next_pow2(ceil_div(nv, 32)));
    launch_warp_rows<T>(rp, vpl, aligned, grid_for(ceil_div(rows, kWarpRowsThreads >> rp.lanes_log2)), stream);
    return;
  }

  // 2. Block-per-row sizes: the small vectors-per-thread while 256 threads cover the row, else the large one
  //    (more 16-byte loads in flight per thread, fewer threads in the block reduction).
  int vpt = Traits::kSmallVpt;
  int64_t threads = round_up(ceil_div(nv, vpt), 32);
  if (threads > 256) {
    vpt = Traits::kMaxVpt;
    threads = round_up(ceil_div(nv, vpt), 32);
  }
  const bool auto_rows = p.algorithm == SoftmaxAlgorithm::Auto && p.output != SoftmaxOutput::LogSumExp;
  // Split beyond 512 threads (two 512-thread blocks per SM overlap one row's store with the next one's load,
  // a 1024-thread block leaves its SM's memory pipe idle during its reductions) and when the rows alone
  // cannot fill the GPU.
  const bool prefer_split =
      auto_rows && (threads > kSplitThreads || (rows < sms && nv > int64_t(kSplitThreads) * Traits::kSmallVpt));

  // 3. Split-row. Choose (vectors per thread in registers, vectors per thread in shared memory) so that all
  //    chunks of a row are co-resident (chunks <= resident blocks: required for deadlock freedom), preferring
  //    room for two rows at once (the next row loads while one row waits), the fewest shared-memory vectors,
  //    and the small register size when the large one leaves SMs idle. Otherwise fall through.
  if (prefer_split) {
    const int64_t large_chunks = ceil_div(nv, int64_t(kSplitThreads) * Traits::kMaxVpt);
    const int vpt_order[2] = {rows * large_chunks < sms ? Traits::kSmallVpt : Traits::kMaxVpt, Traits::kMaxVpt};
    constexpr int kSmemVecs[] = {0, 2, 4, 8, 12, 16, 24};
    int split_vpt = 0, split_smem = 0;
    int64_t split_chunks = 0, capacity = 0;
    for (int rows_at_once = 2; rows_at_once >= 1 && split_chunks == 0; --rows_at_once) {
      for (int vi = 0; vi < 2 && split_chunks == 0; ++vi) {
        for (int s : kSmemVecs) {
          const size_t smem = size_t(kSplitThreads) * s * 16;
          if ((s > 0 && !aligned) || smem + 1024 > prop->sharedMemPerBlockOptin) break;
          const int per_sm = block_rows_blocks_per_sm<T>(vpt_order[vi], aligned, kSplitThreads, smem);
          const int64_t chunks = ceil_div(nv, int64_t(kSplitThreads) * (vpt_order[vi] + s));
          if (chunks * rows_at_once <= int64_t(per_sm) * sms) {
            split_vpt = vpt_order[vi];
            split_smem = s;
            split_chunks = chunks;
            capacity = int64_t(per_sm) * sms;
            break;
          }
        }
      }
    }
    if (split_chunks > 0) {
      rp.chunks = static_cast<int>(split_chunks);
      rp.smem_vecs = split_smem;
      const int64_t items = rows * split_chunks;
      at::Tensor part, counters;
      if (split_chunks > 1) {
        part = partials_workspace<T>(p.x, items);
        counters = at::zeros({rows}, p.x.options().dtype(at::kInt));
        rp.part_m = static_cast<acc_t<T>*>(part.data_ptr());
        rp.part_d = rp.part_m + items;
        rp.counters = counters.data_ptr<int>();
      }
      // Persistent grid: never more blocks than can be resident (the cooperative launch enforces it).
      launch_block_rows<T>(rp, split_vpt, aligned, kSplitThreads, static_cast<int>(std::min(items, capacity)), stream);
      return;
    }
  }

  // 2. Block-per-row.
  if (threads <= kMaxBlockThreads) {
    launch_block_rows<T>(rp, vpt, aligned, static_cast<int>(threads), grid_for(rows), stream);
    return;
  }

  // 4. Streaming: chunks of 4 block-steps (64 KiB of fp32), more for rows so long that a row would have over
  //    1024 chunks (keeps the partial merges short).
  const int64_t step = int64_t(kStreamThreads) * kStreamUnroll * kVec;
  const int64_t steps = ceil_div(len, step);
  const int64_t steps_per_chunk = std::max<int64_t>(4, ceil_div(steps, 1024));
  StreamParams<T> sp{x, y, rows, len, steps_per_chunk * step, static_cast<int>(ceil_div(steps, steps_per_chunk)),
                     StreamPass::State, online, p.output, nullptr, nullptr};
  const int64_t items = rows * sp.chunks;
  const at::Tensor part = partials_workspace<T>(p.x, items);
  sp.part_m = static_cast<acc_t<T>*>(part.data_ptr());
  sp.part_d = sp.part_m + items;
  const int grid = grid_for(items);
  if (p.output == SoftmaxOutput::LogSumExp) {
    launch_stream_reduce<T>(sp, aligned, grid, stream);
    launch_logsumexp_finalize<T>(sp, stream);
  } else if (online) {
    launch_stream_reduce<T>(sp, aligned, grid, stream);
    launch_stream_normalize<T>(sp, aligned, grid, stream);
  } else {
    sp.pass = StreamPass::Max;
    launch_stream_reduce<T>(sp, aligned, grid, stream);
    sp.pass = StreamPass::SumAtMax;
    launch_stream_reduce<T>(sp, aligned, grid, stream);
    launch_stream_normalize<T>(sp, aligned, grid, stream);
  }
}

}  // namespace
}  // namespace softmax

void softmax_cuda(const SoftmaxProblem& p) {
  const c10::cuda::CUDAGuard guard(p.x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  switch (p.x.scalar_type()) {
    case at::kFloat: return softmax::softmax_cuda_typed<float>(p, stream);
    case at::kDouble: return softmax::softmax_cuda_typed<double>(p, stream);
    case at::kHalf: return softmax::softmax_cuda_typed<__half>(p, stream);
    case at::kBFloat16: return softmax::softmax_cuda_typed<__nv_bfloat16>(p, stream);
    default: TORCH_CHECK_TYPE(false, p.op, ": no CUDA kernel for dtype ", p.x.scalar_type());
  }
}

namespace {

at::Tensor softmax_op(const at::Tensor& x, int64_t dim, c10::string_view algorithm) {
  return run_softmax_op("flash_attn_ext.softmax", x, dim, algorithm, SoftmaxOutput::Softmax, false, softmax_cuda);
}
at::Tensor log_softmax_op(const at::Tensor& x, int64_t dim, c10::string_view algorithm) {
  return run_softmax_op("flash_attn_ext.log_softmax", x, dim, algorithm, SoftmaxOutput::LogSoftmax, false, softmax_cuda);
}
at::Tensor logsumexp_op(const at::Tensor& x, int64_t dim, bool keepdim) {
  return run_softmax_op("flash_attn_ext.logsumexp", x, dim, "auto", SoftmaxOutput::LogSumExp, keepdim, softmax_cuda);
}

}  // namespace
}  // namespace flash_attn_ext

TORCH_LIBRARY_IMPL(flash_attn_ext, CUDA, m) {
  m.impl("softmax", &flash_attn_ext::softmax_op);
  m.impl("log_softmax", &flash_attn_ext::log_softmax_op);
  m.impl("logsumexp", &flash_attn_ext::logsumexp_op);
}
