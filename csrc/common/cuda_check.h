#pragma once
// Launch hygiene for every CUDA launcher: errors surface at the launch that caused them, and the driver
// settings and queries a launch depends on are made once per device and kernel. Only c10's error header and
// the CUDA runtime: this header reaches every kernel file, and ATen's CUDA headers cost each of them ~12 s of
// a 2-core build (three front-end passes: host, sm_80, sm_90a).
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

// A failed call's error is also cleared from the thread's last-error slot (as C10_CUDA_CHECK does): left
// there, the next launch check of any library on this thread would report it as its own.
#define FAE_CUDA_CHECK(expr)                                                                        \
  do {                                                                                              \
    const cudaError_t fae_cuda_error = (expr);                                                      \
    if (fae_cuda_error != cudaSuccess) {                                                            \
      (void)cudaGetLastError();                                                                     \
      TORCH_CHECK(false, "CUDA error: ", cudaGetErrorString(fae_cuda_error), " (", #expr, ")");     \
    }                                                                                               \
  } while (0)
#define FAE_LAUNCH_CHECK() FAE_CUDA_CHECK(cudaGetLastError())

namespace flash_attn_ext {

// The current device and one of its attributes, without ATen's device-properties table.
inline int current_cuda_device() {
  int device = 0;
  FAE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}
inline int current_device_attribute(cudaDeviceAttr attribute) {
  int value = 0;
  FAE_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, current_cuda_device()));
  return value;
}

namespace detail {
// What the driver was already told or asked, per device and kernel: the heuristics ask for the occupancy of up
// to a few dozen configurations per call and every launcher opts into its shared memory, and each driver call
// costs host time on every op call otherwise. Guarded by one mutex (a map lookup, far below a launch).
struct LaunchMemo {
  std::mutex mutex;
  std::map<std::pair<int, const void*>, size_t> smem_allowed;               // (device, kernel) -> bytes
  std::map<std::tuple<int, const void*, int, size_t>, int> blocks_per_sm;  // (device, kernel, threads, bytes)
  std::map<std::pair<int, const void*>, cudaFuncAttributes> attributes;   // (device, kernel)
};
inline LaunchMemo& launch_memo() {
  static LaunchMemo* memo = new LaunchMemo();  // never destroyed: usable from other static destructors
  return *memo;
}

// map[key], computed by ask() on a miss. ask() runs outside the lock (it calls the driver, and may take the
// lock itself); two threads missing at once both ask and store the same answer.
template <typename Map, typename Ask>
inline typename Map::mapped_type memoized(Map& map, const typename Map::key_type& key, Ask ask) {
  auto& memo = launch_memo();
  {
    std::lock_guard<std::mutex> lock(memo.mutex);
    const auto it = map.find(key);
    if (it != map.end()) return it->second;
  }
  const typename Map::mapped_type value = ask();
  std::lock_guard<std::mutex> lock(memo.mutex);
  map[key] = value;
  return value;
}
}  // namespace detail
}  // namespace flash_attn_ext

// Lets `kernel` launch with `bytes` of dynamic shared memory: past the 48 KB default (static and dynamic
// together) a kernel must opt in, before the occupancy query and the launch. Every size is opted into, since
// the kernel's static arrays count too: the pipelined kernel with a 48 KB ring and 584 bytes of barriers
// could not launch while sizes up to 48 KB skipped this (s33). Not a stream operation, so it is legal during
// graph capture. Asks the driver once per device, kernel and larger size.
template <typename Kernel>
inline void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  if (bytes == 0) return;
  auto& memo = flash_attn_ext::detail::launch_memo();
  const auto key = std::make_pair(flash_attn_ext::current_cuda_device(), reinterpret_cast<const void*>(kernel));
  std::lock_guard<std::mutex> lock(memo.mutex);
  size_t& allowed = memo.smem_allowed[key];
  if (bytes <= allowed) return;
  FAE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  allowed = bytes;
}

// Blocks of `kernel` resident per SM at `threads` threads and `smem_bytes` of dynamic shared memory (0 when it
// cannot launch), opting into that shared memory first. Asked once per device and configuration: a memo hit
// implies the opt-in was made, so it costs one device query and one lookup.
template <typename Kernel>
inline int resident_blocks_per_sm(Kernel* kernel, int threads, size_t smem_bytes) {
  auto& memo = flash_attn_ext::detail::launch_memo();
  const auto key = std::make_tuple(flash_attn_ext::current_cuda_device(), reinterpret_cast<const void*>(kernel),
                                   threads, smem_bytes);
  return flash_attn_ext::detail::memoized(memo.blocks_per_sm, key, [&] {
    allow_dynamic_smem(kernel, smem_bytes);
    int blocks = 0;
    FAE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
    return blocks;
  });
}

// `kernel`'s attributes on the current device (its code's versions, its static shared memory), asked once per device.
template <typename Kernel>
inline cudaFuncAttributes kernel_attributes(Kernel* kernel) {
  auto& memo = flash_attn_ext::detail::launch_memo();
  const auto key = std::make_pair(flash_attn_ext::current_cuda_device(), reinterpret_cast<const void*>(kernel));
  return flash_attn_ext::detail::memoized(memo.attributes, key, [&] {
    cudaFuncAttributes attributes{};
    FAE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    return attributes;
  });
}

// The architecture `kernel`'s code on the current device was compiled for (major * 10 + minor: 90 for sm_90a
// code): the lower of the binary's and the PTX's version. A build without code for that architecture may hold an
// empty stub there; and a build whose PTX (e.g. "8.0+PTX") the driver compiles for sm_90 reports binary version 90
// for code whose `__CUDA_ARCH__ >= 900` bodies were compiled out.
template <typename Kernel>
inline int kernel_code_version(Kernel* kernel) {
  const cudaFuncAttributes attributes = kernel_attributes(kernel);
  return attributes.binaryVersion < attributes.ptxVersion ? attributes.binaryVersion : attributes.ptxVersion;
}

// The static shared memory of `kernel`'s code on the current device (its __shared__ arrays): what a launch's dynamic
// shared memory must leave room for under the device's opt-in limit.
template <typename Kernel>
inline size_t kernel_static_smem(Kernel* kernel) {
  return kernel_attributes(kernel).sharedSizeBytes;
}
