// Launchers of the streaming (multi-pass) row kernels and of the column kernel. Instantiated per dtype:
// reduce and normalize kernels aligned and scalar, the logsumexp finalize and the column kernel once.
#include <algorithm>

#include "common/kernel_launch.h"
#include "softmax/softmax_columns.cuh"
#include "softmax/softmax_streaming.cuh"

namespace flash_attn_ext {
namespace softmax {

template <typename T> void launch_stream_reduce(const StreamParams<T>& p, bool aligned, int grid, cudaStream_t stream) {
  launch_kernel(aligned ? softmax_stream_reduce_kernel<T, true> : softmax_stream_reduce_kernel<T, false>, grid,
                kStreamThreads, 0, stream, LaunchKind::Plain, p);
}

template <typename T>
void launch_stream_normalize(const StreamParams<T>& p, bool aligned, int grid, cudaStream_t stream) {
  launch_kernel(aligned ? softmax_stream_normalize_kernel<T, true> : softmax_stream_normalize_kernel<T, false>,
                grid, kStreamThreads, 0, stream, LaunchKind::Plain, p);
}

template <typename T> void launch_logsumexp_finalize(const StreamParams<T>& p, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = kStreamThreads / 32;
  const int64_t blocks = (p.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int grid = static_cast<int>(std::min<int64_t>(blocks, 1 << 30));
  launch_kernel(logsumexp_stream_finalize_kernel<T>, grid, kStreamThreads, 0, stream, LaunchKind::Plain, p);
}

template <typename T> void launch_columns(const ColumnsParams<T>& p, cudaStream_t stream) {
  // tx adjacent columns per block (coalesced), the rest of the 256 threads split len.
  int tx = 1;
  while (tx < 32 && tx < p.inner) tx *= 2;
  const dim3 block(tx, kColumnThreads / tx);
  const int64_t tiles = p.outer * ((p.inner + tx - 1) / tx);
  const int grid = static_cast<int>(std::min<int64_t>(tiles, 1 << 30));
  launch_kernel(softmax_columns_kernel<T>, grid, block, 0, stream, LaunchKind::Plain, p);
}

#define FAE_INSTANTIATE_STREAMING(T)                                                                         \
  template void launch_stream_reduce<T>(const StreamParams<T>&, bool, int, cudaStream_t);                    \
  template void launch_stream_normalize<T>(const StreamParams<T>&, bool, int, cudaStream_t);                 \
  template void launch_logsumexp_finalize<T>(const StreamParams<T>&, cudaStream_t);                          \
  template void launch_columns<T>(const ColumnsParams<T>&, cudaStream_t);
FAE_INSTANTIATE_STREAMING(float)
FAE_INSTANTIATE_STREAMING(double)
FAE_INSTANTIATE_STREAMING(__half)
FAE_INSTANTIATE_STREAMING(__nv_bfloat16)
#undef FAE_INSTANTIATE_STREAMING

}  // namespace softmax
}  // namespace flash_attn_ext
