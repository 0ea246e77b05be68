#pragma once
// A value that depends only on the device (say, the architecture of the binary a kernel runs there):
// computed on each device's first call and kept, so launch paths do not ask the driver again on every call.
#include <array>
#include <mutex>

#include "common/cuda_check.h"

namespace flash_attn_ext {

template <typename T>
class PerDeviceMemo {
 public:
  // compute() runs once per device (again if it threw); devices past kMaxDevices compute on every call.
  template <typename Compute>
  T get(const Compute& compute) {
    const int device = current_cuda_device();
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
