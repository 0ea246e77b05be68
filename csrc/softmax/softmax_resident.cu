// Launcher of the resident row kernel (softmax_resident.cuh), instantiated for the 16-bit types, softmax and
// log_softmax.
#include <c10/util/Exception.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "softmax/softmax_resident.cuh"

namespace flash_attn_ext {
namespace softmax {

// As the dual kernel: the body exists only in sm_90+ code.
template <typename T> bool resident_supported() {
  return kernel_code_version(resident::library_kernel<T, true, false>) >= 90 &&
         kernel_code_version(resident::library_kernel<T, false, false>) >= 90 &&
         kernel_code_version(resident::library_kernel<T, true, true>) >= 90 &&
         kernel_code_version(resident::library_kernel<T, false, true>) >= 90;
}

// The pieces of the item's shared-memory part (the longest item: chunk_elems).
template <typename T> size_t resident_smem_bytes(const PipeParams<T>& p) {
  const int64_t smem_vecs = std::min<int64_t>(
      std::max<int64_t>(p.chunk_elems / 8 - int64_t(resident::kRegVecs) * resident::kThreads, 0),
      int64_t(resident::kMaxPieces) * resident::kPieceVecs);
  const int64_t pieces = (smem_vecs + resident::kPieceVecs - 1) / resident::kPieceVecs;
  return static_cast<size_t>(pieces * resident::kPieceBytes);
}

// The instantiation for p's output and items. Items of exactly kResidentMaxItemBytes take the one without bounds.
template <typename T> auto resident_kernel_for(const PipeParams<T>& p) {
  const bool whole = p.chunk_elems * int64_t(sizeof(T)) == kResidentMaxItemBytes && p.len % p.chunk_elems == 0;
  const bool softmax = p.output == SoftmaxOutput::Softmax;
  return whole ? (softmax ? resident::library_kernel<T, true, true> : resident::library_kernel<T, false, true>)
               : (softmax ? resident::library_kernel<T, true, false> : resident::library_kernel<T, false, false>);
}

template <typename T> int resident_rows_blocks_per_sm(const PipeParams<T>& p) {
  return resident_blocks_per_sm(resident_kernel_for(p), resident::kThreads, resident_smem_bytes(p));
}

template <typename T> void launch_resident_rows(const PipeParams<T>& p, cudaStream_t stream) {
  TORCH_CHECK(p.output != SoftmaxOutput::LogSumExp, "the resident kernel stores rows: softmax or log_softmax only");
  const auto kernel = resident_kernel_for(p);
  const size_t smem = resident_smem_bytes(p);
  allow_dynamic_smem(kernel, smem);
  launch_kernel(kernel, static_cast<int>(p.rows * p.chunks), resident::kThreads, smem, stream,
                LaunchKind::Cooperative, p);
}

#define FAE_INSTANTIATE_RESIDENT(T)                          \
  template bool resident_supported<T>();                     \
  template int resident_rows_blocks_per_sm<T>(const PipeParams<T>&); \
  template void launch_resident_rows<T>(const PipeParams<T>&, cudaStream_t);
FAE_INSTANTIATE_RESIDENT(__half)
FAE_INSTANTIATE_RESIDENT(__nv_bfloat16)
#undef FAE_INSTANTIATE_RESIDENT

}  // namespace softmax
}  // namespace flash_attn_ext
