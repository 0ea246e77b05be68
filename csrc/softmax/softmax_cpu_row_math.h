#pragma once
// The chunk loops of the CPU softmax's float row path (softmax_cpu.cpp): float chunks in, float chunks out,
// branch-free so that they vectorize, compiled once per x86 instruction set (common/cpu_isa.h).
#include <cstdint>

namespace flash_attn_ext {

// Loops over float chunks x[0, n) (y[0, n) their outputs). m is the chunk's or the row's max: finite and >= every
// x, with no NaN among them (the caller's scalar code takes the rest); exp_scale and log_shift pass a NaN x
// through as NaN.
struct RowMath {
  float (*max_of)(const float* x, int64_t n);                                   // NaN-propagating max
  float (*sum_exp)(const float* x, int64_t n, float m);                         // sum of exp(x - m)
  float (*exp_store_sum)(const float* x, float* y, int64_t n, float m);         // the same, y = exp(x - m)
  void (*scale)(float* y, int64_t n, float scale);                              // y *= scale
  void (*exp_scale)(const float* x, float* y, int64_t n, float m, float scale);  // y = exp(x - m) * scale
  void (*log_shift)(const float* x, float* y, int64_t n, float m, float log_d);  // y = (x - m) - log_d
  void (*widen_bf16)(const uint16_t* x, float* y, int64_t n);                   // bfloat16 bits -> float
  void (*narrow_bf16)(const float* x, uint16_t* y, int64_t n);                  // float -> bfloat16 bits (RNE)
  void (*widen_f16)(const uint16_t* x, float* y, int64_t n);                    // float16 bits -> float
  void (*narrow_f16)(const float* x, uint16_t* y, int64_t n);                   // float -> float16 bits (RNE)
};

// The widest variant this CPU runs (FLASH_ATTN_EXT_CPU_ISA caps it).
RowMath row_math_for_cpu();

}  // namespace flash_attn_ext
