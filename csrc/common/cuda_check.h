#pragma once
// Launch hygiene for every CUDA launcher: errors surface at the launch that caused them, and the driver
// settings and queries a launch depends on are made once per device and kernel.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#define FAE_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)
#define FAE_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()

namespace flash_attn_ext {
namespace detail {
// What the driver was already told or asked, per device and kernel: the heuristics ask for the occupancy of up
// to a few dozen configurations per call and every launcher opts into its shared memory, and each driver call
// costs host time on every op call otherwise. Guarded by one mutex (a map lookup, far below a launch).
struct LaunchMemo {
  std::mutex mutex;
  std::map<std::pair<int, const void*>, size_t> smem_allowed;               // (device, kernel) -> bytes
  std::map<std::tuple<int, const void*, int, size_t>, int> blocks_per_sm;  // (device, kernel, threads, bytes)
};
inline LaunchMemo& launch_memo() {
  static LaunchMemo* memo = new LaunchMemo();  // never destroyed: usable from other static destructors
  return *memo;
}
}  // namespace detail
}  // namespace flash_attn_ext

// Lets `kernel` launch with `bytes` of dynamic shared memory: above the 48 KB default a kernel must opt in,
// before the occupancy query and the launch. Not a stream operation, so it is legal during graph capture.
// Asks the driver once per device, kernel and larger size.
template <typename Kernel>
inline void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  auto& memo = flash_attn_ext::detail::launch_memo();
  const auto key = std::make_pair(static_cast<int>(c10::cuda::current_device()), reinterpret_cast<const void*>(kernel));
  std::lock_guard<std::mutex> lock(memo.mutex);
  size_t& allowed = memo.smem_allowed[key];
  if (bytes <= allowed) return;
  FAE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  allowed = bytes;
}

// Blocks of `kernel` resident per SM at `threads` threads and `smem_bytes` of dynamic shared memory (0 when it
// cannot launch), opting into that shared memory first. Asked once per device and configuration.
template <typename Kernel>
inline int resident_blocks_per_sm(Kernel* kernel, int threads, size_t smem_bytes) {
  allow_dynamic_smem(kernel, smem_bytes);
  auto& memo = flash_attn_ext::detail::launch_memo();
  const auto key = std::make_tuple(static_cast<int>(c10::cuda::current_device()), reinterpret_cast<const void*>(kernel),
                                   threads, smem_bytes);
  {
    std::lock_guard<std::mutex> lock(memo.mutex);
    const auto it = memo.blocks_per_sm.find(key);
    if (it != memo.blocks_per_sm.end()) return it->second;
  }
  int blocks = 0;
  FAE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
  std::lock_guard<std::mutex> lock(memo.mutex);
  memo.blocks_per_sm[key] = blocks;
  return blocks;
}
