#pragma once
// Host side of the bulk tensor copies (TMA, sm_90): describes a strided global tensor and the box one copy
// moves. The encoder comes from the driver at run time (no link-time dependency on libcuda).
#include <cuda.h>

#include <cstdint>

namespace flash_attn_ext {

// A 5-D map of 16-bit elements (`bf16` picks bfloat16, else float16): dims[0] contiguous, strides in bytes
// of dims 1..4, boxes of box[0..4] elements with the 128-byte shared-memory swizzle (a box lands in shared
// memory as rows of box[0] elements, the other dims in order, dims[1] fastest); elements outside the tensor
// read as zero and are not written. Returns false when the driver cannot describe it (strides not multiples of
// 16 bytes, a zero stride, ...): the caller then takes a path without bulk tensor copies.
bool make_tensor_map_5d_sw128(CUtensorMap* map, bool bf16, const void* base, const uint64_t (&dims)[5],
                              const uint64_t (&strides)[4], const uint32_t (&box)[5]);

}  // namespace flash_attn_ext
