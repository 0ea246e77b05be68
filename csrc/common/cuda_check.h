#pragma once
// Launch hygiene for every CUDA launcher: errors surface at the launch that caused them.
#include <c10/cuda/CUDAException.h>

#define FAE_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)
#define FAE_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()
