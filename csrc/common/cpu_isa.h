#pragma once
// The x86 instruction set a CPU kernel's hot loops run with. The extension is built for the baseline ISA; the
// loops are compiled again with FAE_TARGET_AVX2 / FAE_TARGET_AVX512 (function target attributes) and the
// widest variant the CPU runs is picked at run time. FLASH_ATTN_EXT_CPU_ISA=generic|avx2|avx512 caps the
// choice, as ATEN_CPU_CAPABILITY does for torch; the tests use it to run every variant. A cap above what the
// CPU supports is an error, never a silent downgrade.

#if defined(__GNUC__) && defined(__x86_64__)
#define FAE_X86_VARIANTS 1
#define FAE_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")))
#define FAE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace flash_attn_ext {

enum class CpuIsa { Generic, Avx2, Avx512 };

// Reads FLASH_ATTN_EXT_CPU_ISA on every call (cheap next to a kernel; the tests set it per process).
CpuIsa cpu_isa();

}  // namespace flash_attn_ext
