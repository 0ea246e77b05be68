#pragma once
// A value that depends only on the device (a kernel's occupancy, the architecture of the binary it runs):
// computed on each device's first call and kept, so launch paths do not ask the driver again on every call.
#include <c10/cuda/CUDAFunctions.h>

#include <array>
#include <mutex>

namespace flash_attn_ext {

template <typename T>
class PerDeviceMemo {
 public:
  // compute() runs once per device (again if it threw); devices past kMaxDevices compute on every call.
  template <typename Compute>
  T get(const Compute& compute) {
    const int device = c10::cuda::current_device();
    if (device < 0 || device >= kMaxDevices) return compute();
    std::call_once(once_[device], [&] { values_[device] = compute(); });
    return values_[device];
  }

 private:
  static constexpr int kMaxDevices = 64;
  std::array<std::once_flag, kMaxDevices> once_;
  std::array<T, kMaxDevices> values_{};
};

}  // namespace flash_attn_ext
