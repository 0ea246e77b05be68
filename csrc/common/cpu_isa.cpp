#include "common/cpu_isa.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

namespace flash_attn_ext {

CpuIsa cpu_isa() {
  const char* env = std::getenv("FLASH_ATTN_EXT_CPU_ISA");
  const std::string cap = env != nullptr ? env : "";
  TORCH_CHECK(cap.empty() || cap == "generic" || cap == "avx2" || cap == "avx512",
              "FLASH_ATTN_EXT_CPU_ISA must be generic, avx2 or avx512, got '", cap, "'");
#ifdef FAE_X86_VARIANTS
  __builtin_cpu_init();
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                        __builtin_cpu_supports("f16c");
  const bool has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  TORCH_CHECK(cap != "avx512" || has_avx512, "FLASH_ATTN_EXT_CPU_ISA=avx512: this CPU (or build) lacks AVX-512");
  TORCH_CHECK(cap != "avx2" || has_avx2, "FLASH_ATTN_EXT_CPU_ISA=avx2: this CPU (or build) lacks AVX2 + FMA + F16C");
  if (has_avx512 && (cap.empty() || cap == "avx512")) return CpuIsa::Avx512;
  if (has_avx2 && cap != "generic") return CpuIsa::Avx2;
#else
  TORCH_CHECK(cap.empty() || cap == "generic", "FLASH_ATTN_EXT_CPU_ISA=", cap, ": this build has no x86 variants");
#endif
  return CpuIsa::Generic;
}

}  // namespace flash_attn_ext
