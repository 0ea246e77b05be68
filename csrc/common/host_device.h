#pragma once
// Markers for the plain-C++ helpers that both the kernels and the host tests compile (fast_divmod.h, log_sum.h,
// exp_sum.h and their tables): in CUDA translation units host and device functions, and tables in constant memory
// (one copy per translation unit: const gives internal linkage); in host ones (tests/host_program.py) plain inline
// functions and const tables.
#if defined(__CUDACC__)
#define FAE_HOST_DEVICE __host__ __device__
#define FAE_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#define FAE_CONSTANT_TABLE __constant__
#else
#define FAE_HOST_DEVICE
#define FAE_HOST_DEVICE_INLINE inline
#define FAE_CONSTANT_TABLE
#endif
