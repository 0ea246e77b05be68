#pragma once
// 2^x in one MUFU instruction (ex2.approx.ftz), shared by the attention kernels' online softmax and the
// softmax kernels' 16-bit exponentials. Accurate to ~2 ulp; flushes subnormal results to zero, which is
// harmless for values rounded to 16 bits next. exp2f(x) would add three instructions of range fix-up.

namespace flash_attn_ext {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flash_attn_ext
