#pragma once
// One-instruction (MUFU) approximations where the result is rounded to 16 bits next or is far from the edge of
// fp32's accuracy that matters.

namespace flash_attn_ext {

// 2^x (ex2.approx.ftz), shared by the attention kernels' online softmax and the softmax kernels' 16-bit
// exponentials. Accurate to ~2 ulp; flushes subnormal results to zero, which is harmless for values rounded to
// 16 bits next. exp2f(x) would add three instructions of range fix-up.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) (lg2.approx.ftz): within 2^-22 absolute for x in [0.5, 2], 2 ulp elsewhere (the bounds CUDA gives for
// __log2f). logf(x) is ~25 instructions.
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x (rcp.approx.ftz): within ~1 ulp. 1.f / x is ~10 instructions and a branch to a slow path.
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flash_attn_ext
