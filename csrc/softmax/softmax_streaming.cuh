#pragma once
// Streaming kernels for rows that are not kept on chip: explicit algorithm="safe" / "online" on long rows,
// and logsumexp of long rows. They re-read global memory once per pass, which is what the benchmark shows:
//   safe:      reduce(Max) -> reduce(SumAtMax) -> normalize     3 reads + 1 write
//   online:    reduce(State) -> normalize                       2 reads + 1 write (Milakov & Gimelshein)
//   logsumexp: reduce(State) -> finalize (rows of one chunk: reduce only)  1 read
// Work items are (row, chunk) pairs, item = row * chunks + chunk, so a few long rows still fill the GPU;
// per-item partials live in a workspace (part_m, part_d) between the launches (none for logsumexp of one-chunk rows).
#include "common/grid_dependency.cuh"
#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// Row statistics from the chunk partials of `row`, merged by the whole block (identical in every block).
template <typename T>
__device__ __forceinline__ OnlineState<acc_t<T>> merged_row_partials(const StreamParams<T>& p, int64_t row,
                                                                     bool online, acc_t<T>* s_val,
                                                                     OnlineState<acc_t<T>>* s_state) {
  using A = acc_t<T>;
  const int64_t first_item = row * p.chunks;
  if (online) {
    OnlineState<A> acc = empty_state<A>();
    for (int c = threadIdx.x; c < p.chunks; c += blockDim.x) {
      acc = merge(acc, OnlineState<A>{p.part_m[first_item + c], p.part_d[first_item + c]});
    }
    return block_allreduce(acc, MergeOp{}, empty_state<A>(), s_state);
  }
  // safe: part_m holds chunk maxima and part_d sums taken against the row max M, so d = sum part_d.
  A mx = neg_inf<A>();
  A sum = A(0);
  for (int c = threadIdx.x; c < p.chunks; c += blockDim.x) {
    mx = amax(mx, p.part_m[first_item + c]);
    sum += p.part_d[first_item + c];
  }
  return {block_allreduce(mx, MaxOp{}, neg_inf<A>(), s_val), block_allreduce(sum, SumOp{}, A(0), s_val)};
}

// One reduction pass. Block: 256 threads; per step the block covers 256 * kStreamUnroll * kVec contiguous
// elements of its chunk, each thread kStreamUnroll vectors in flight (load_group mapping) for the next step while it
// folds this one. Writes, for its item, part_m (Max), part_d against the row max of part_m (SumAtMax), or the (m, d)
// state (State).
template <typename T, bool kAligned>
__global__ void __launch_bounds__(kStreamThreads) softmax_stream_reduce_kernel(const StreamParams<T> p) {
  begin_dependent_grid();
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  constexpr int kStep = kStreamThreads * kStreamUnroll * kVec;
  __shared__ A s_val[32];
  __shared__ OnlineState<A> s_state[32];
  const int64_t items = p.rows * p.chunks;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const RowChunk chunk(item, p.chunks, p.chunk_elems, p.len);
    const int64_t row = chunk.row, first = chunk.begin, last = chunk.end;
    const T* x = p.x + row * p.len;
    // One group ahead: the next group's loads are in flight while this one folds (past `last` they load nothing).
    GroupLoads<T, kStreamUnroll, kAligned> loads;
    loads.load(x, last, first, kStreamThreads, threadIdx.x);
    A row_max = neg_inf<A>();
    if (p.pass == StreamPass::SumAtMax) {
      A mx = neg_inf<A>();
      for (int c = threadIdx.x; c < p.chunks; c += blockDim.x) mx = amax(mx, p.part_m[row * p.chunks + c]);
      row_max = block_allreduce(mx, MaxOp{}, neg_inf<A>(), s_val);
    }

    A mx = neg_inf<A>();
    A sum = A(0);
    OnlineState<A> state = empty_state<A>();
    for (int64_t g = first; g < last; g += kStep) {
      A v[kStreamUnroll][kVec];
      loads.unpack(v);
      loads.load(x, last, g + kStep, kStreamThreads, threadIdx.x);
      if (p.pass == StreamPass::Max) {
        mx = amax(mx, max_of(v));
      } else if (p.pass == StreamPass::SumAtMax) {
        sum += sum_rescaled<kFastExp<T>>(v, row_max, false);
      } else {
        fold<T>(state, v);
      }
    }

    if (p.pass == StreamPass::Max) {
      mx = block_allreduce(mx, MaxOp{}, neg_inf<A>(), s_val);
      if (threadIdx.x == 0) p.part_m[item] = mx;
    } else if (p.pass == StreamPass::SumAtMax) {
      // Only part_d is written: other blocks of the row are reading part_m in this same launch.
      sum = block_allreduce(sum, SumOp{}, A(0), s_val);
      if (threadIdx.x == 0) p.part_d[item] = sum;
    } else {
      state = block_allreduce(state, MergeOp{}, empty_state<A>(), s_state);
      if (threadIdx.x == 0) {
        if (p.output == SoftmaxOutput::LogSumExp && p.chunks == 1) {
          p.y[row] = from_acc<T>(row_lse(state));  // the whole row: no finalize launch
        } else {
          p.part_m[item] = state.m;
          p.part_d[item] = state.d;
        }
      }
    }
  }
}

// Last pass of softmax / log_softmax: the block merges its row's partials, then rewrites its chunk with the
// same mapping as the reduce kernel: softmax y = rescale(x, M) / D, log_softmax as Epilogue::log_out (fp32 / fp64:
// (x - M) - log D; 16-bit: x - (M + log D)).
template <typename T, bool kAligned>
__global__ void __launch_bounds__(kStreamThreads) softmax_stream_normalize_kernel(const StreamParams<T> p) {
  begin_dependent_grid();
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  constexpr int kStep = kStreamThreads * kStreamUnroll * kVec;
  __shared__ A s_val[32];
  __shared__ OnlineState<A> s_state[32];
  const int64_t items = p.rows * p.chunks;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const RowChunk chunk(item, p.chunks, p.chunk_elems, p.len);
    const int64_t row = chunk.row, first = chunk.begin, last = chunk.end;
    const OnlineState<A> row_state = merged_row_partials(p, row, p.online, s_val, s_state);
    const Epilogue<T> epi(p.output, row_state, row_state.m);
    const T* x = p.x + row * p.len;
    T* y = p.y + row * p.len;
    for (int64_t g = first; g < last; g += kStep) {
      A v[kStreamUnroll][kVec];
      load_group<T, kStreamUnroll, kAligned>(x, last, g, kStreamThreads, threadIdx.x, v);
#pragma unroll
      for (int s = 0; s < kStreamUnroll; ++s)
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[s][j] = epi.apply(v[s][j], row_state.m);
      store_group<T, kStreamUnroll, kAligned>(y, last, g, kStreamThreads, threadIdx.x, v);
    }
  }
}

// logsumexp of long rows: one warp per row merges the row's (m, d) partials and writes m + log(d).
// Block: 256 threads = 8 rows; blocks walk row groups grid-stride.
template <typename T>
__global__ void __launch_bounds__(kStreamThreads) logsumexp_stream_finalize_kernel(const StreamParams<T> p) {
  begin_dependent_grid();
  using A = acc_t<T>;
  constexpr int kRowsPerBlock = kStreamThreads / 32;
  const int lane = threadIdx.x & 31;
  for (int64_t first_row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; first_row < p.rows;
       first_row += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t row = first_row + (threadIdx.x >> 5);
    if (row >= p.rows) break;  // warp-uniform: the shuffles below involve this warp only
    OnlineState<A> acc = empty_state<A>();
    for (int c = lane; c < p.chunks; c += 32) {
      acc = merge(acc, OnlineState<A>{p.part_m[row * p.chunks + c], p.part_d[row * p.chunks + c]});
    }
    acc = warp_allreduce(acc, MergeOp{});
    if (lane == 0) p.y[row] = from_acc<T>(row_lse(acc));
  }
}

}  // namespace softmax
}  // namespace flash_attn_ext
