#pragma once
// Softmax over a dim that is not the last (inner > 1): x viewed as (outer, len, inner), the reduction runs
// over len with stride inner. Passes re-read global memory (safe: 3, online: 2, logsumexp: 1); a column
// block's working set is small and recent, so the re-reads mostly hit L2.
#include "common/grid_dependency.cuh"
#include "softmax/online_math.cuh"

namespace flash_attn_ext {
namespace softmax {

// Combines one value per thread over threadIdx.y (the len split) for each threadIdx.x; every thread gets its
// column's result. Closing barrier: `scratch` may be reused at once.
template <typename V, typename Op>
__device__ __forceinline__ V column_allreduce(V v, Op op, V* scratch) {
  scratch[threadIdx.y * blockDim.x + threadIdx.x] = v;
  __syncthreads();
  V acc = scratch[threadIdx.x];
  for (int y = 1; y < static_cast<int>(blockDim.y); ++y) acc = op(acc, scratch[y * blockDim.x + threadIdx.x]);
  __syncthreads();
  return acc;
}

// Block (tx, ty), tx * ty = 256, tx = min(32, next_pow2(inner)): threadIdx.x walks adjacent columns of the
// inner dim (coalesced), threadIdx.y splits len, each thread taking elements k = threadIdx.y + i * ty of its
// column, 4 loads in flight per step; the ty partial results of a column are combined through shared memory
// (same order in every thread, so all agree). Grid: blocks walk tiles (outer index, group of tx columns).
// float columns accumulate in double: each thread sums len / ty terms one after another, and for columns
// past 2^24 a float running sum of near-equal terms drifts by ~1e-4 (rows avoid this by merging chunk
// partials). The kernel stays memory-bound.
template <typename T> struct ColumnAcc { using type = acc_t<T>; };
template <> struct ColumnAcc<float> { using type = double; };

template <typename T>
__global__ void __launch_bounds__(kColumnThreads) softmax_columns_kernel(const ColumnsParams<T> p) {
  begin_dependent_grid();
  using A = typename ColumnAcc<T>::type;
  constexpr int kUnroll = 4;
  __shared__ A s_val[kColumnThreads];
  __shared__ OnlineState<A> s_state[kColumnThreads];
  const int ty = blockDim.y;
  const int64_t col_tiles = (p.inner + blockDim.x - 1) / blockDim.x;
  const int64_t tiles = p.outer * col_tiles;

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile / col_tiles;
    const int64_t col = (tile - o * col_tiles) * blockDim.x + threadIdx.x;
    const int64_t len = col < p.inner ? p.len : 0;  // columns past the edge read -inf and store nothing
    const int64_t base = col < p.inner ? o * p.len * p.inner + col : 0;
    const T* x = p.x + base;

    // Pass 1: max (safe) or (m, d) state (online, logsumexp).
    A mx = neg_inf<A>();
    OnlineState<A> state = empty_state<A>();
    for (int64_t k0 = threadIdx.y; k0 < len; k0 += kUnroll * ty) {
      A v[1][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + static_cast<int64_t>(u) * ty;
        v[0][u] = k < len ? A(to_acc(__ldg(x + k * p.inner))) : neg_inf<A>();
      }
      if (p.online) fold<T>(state, v);
      else mx = amax(mx, max_of(v));
    }
    OnlineState<A> col_state;
    if (p.online) {
      col_state = column_allreduce(state, MergeOp{}, s_state);
    } else {
      // Pass 2 (safe): sum of rescale(x, M) against the column max M.
      const A col_max = column_allreduce(mx, MaxOp{}, s_val);
      A sum = A(0);
      for (int64_t k = threadIdx.y; k < len; k += ty) sum += rescale(A(to_acc(__ldg(x + k * p.inner))), col_max);
      col_state = {col_max, column_allreduce(sum, SumOp{}, s_val)};
    }

    if (p.output == SoftmaxOutput::LogSumExp) {
      if (threadIdx.y == 0 && col < p.inner) {
        p.y[o * p.inner + col] = from_acc<T>(static_cast<acc_t<T>>(row_lse(col_state)));
      }
      continue;
    }
    // Last pass: normalize.
    const Epilogue<T, false, A> epi(p.output, col_state, col_state.m);
    T* y = p.y + base;
    for (int64_t k = threadIdx.y; k < len; k += ty) {
      y[k * p.inner] = from_acc<T>(static_cast<acc_t<T>>(epi.apply(A(to_acc(__ldg(x + k * p.inner))), col_state.m)));
    }
  }
}

}  // namespace softmax
}  // namespace flash_attn_ext
