// See tensor_map.h.
#include "common/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

namespace flash_attn_ext {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  // Function-local static: looked up once, thread-safe; null when the driver lacks the entry point.
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // leave no sticky error behind
      return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace

bool make_tensor_map_5d_sw128(CUtensorMap* map, bool bf16, const void* base, const uint64_t (&dims)[5],
                              const uint64_t (&strides)[4], const uint32_t (&box)[5]) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (encode == nullptr) return false;
  for (uint64_t s : strides) {
    if (s == 0 || s % 16 != 0 || s >= (uint64_t{1} << 40)) return false;
  }
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5,
                            const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

}  // namespace flash_attn_ext
