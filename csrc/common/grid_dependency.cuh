#pragma once
// Programmatic dependent launch (sm_90+): a kernel launched with launch_kernel's early-launch attribute may
// start while the kernel before it in the stream is still finishing, so its launch latency and block start
// overlap that kernel's tail instead of following it. Every kernel so launched opens with
// begin_dependent_grid(), before any global-memory access.
//
// Why both steps at the top:
//   griddepcontrol.launch_dependents  lets the *next* early-launched grid start once every block of this grid
//                                     has issued it (or exited), i.e. once this grid's last blocks are
//                                     resident; that grid's blocks then take SM slots only as this grid's
//                                     blocks leave them, never ahead of blocks of this grid.
//   griddepcontrol.wait               blocks until every grid this one depends on has completed and its memory
//                                     operations are visible: from here on reads see the previous kernel's
//                                     output and writes cannot race its reads (the caching allocator may have
//                                     handed this kernel a block the previous kernel still read).
// Without the attribute (older devices, sm_80 code) both are no-ops; code compiled for sm_80 contains neither,
// which is why launch_kernel asks for early launch only for sm_90+ code.
namespace flash_attn_ext {

__device__ __forceinline__ void launch_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void begin_dependent_grid() {
  launch_dependent_grids();
  wait_for_prerequisite_grids();
}

}  // namespace flash_attn_ext
