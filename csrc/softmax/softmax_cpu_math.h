#pragma once
// The loops of the CPU softmax's float paths (softmax_cpu.cpp: rows, softmax_cpu_columns.cpp: columns): float
// chunks in, float chunks out, branch-free so that they vectorize, compiled once per x86 instruction set
// (common/cpu_isa.h).
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <type_traits>

namespace flash_attn_ext {

// Loops over float chunks x[0, n) (y[0, n) their outputs). m is the chunk's or the row's max: finite and >= every
// x, with no NaN among them (the caller's scalar code takes the rest); exp_scale and log_shift pass a NaN x
// through as NaN.
struct ChunkMath {
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
  // Rows [0, rows) of len elements each, row i at x + i * len (y + i * len), for rows of one chunk: a call per
  // block of rows instead of three per row (per-row calls were most of a 64-128-element row's time).
  // reduce_rows: m[i] = the row's NaN-propagating max; where it is finite, d[i] = sum exp(x - m[i]) (with y:
  // the terms written there, as exp_store_sum); rows whose max is not finite are the caller's (d[i] unset).
  void (*reduce_rows)(const float* x, float* y, int64_t rows, int64_t len, float* m, float* d);
  void (*scale_rows)(float* y, int64_t rows, int64_t len, const float* scale);  // row i *= scale[i]
  void (*log_shift_rows)(const float* x, float* y, int64_t rows, int64_t len, const float* m,
                         const float* log_d);  // row i: y = (x - m[i]) - log_d[i]
  // Across a block's columns, one element each: rows [0, rows) of the block, row j at x + j * ld (y + j *
  // ldy); m / s / scale / log_d hold one value per column.
  void (*max_cols)(const float* x, int64_t ld, int64_t rows, float* m, int64_t n);  // m = max(m, x), NaN kept
  void (*sum_exp_cols)(const float* x, int64_t ld, int64_t rows, const float* m, float* s,
                       int64_t n);  // s += exp(x - m)
  void (*exp_scale_cols)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const float* m,
                         const float* scale, int64_t n);  // y = exp(x - m) * scale
  void (*log_shift_cols)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const float* m,
                         const float* log_d, int64_t n);  // y = (x - m) - log_d

  // x[0, n) of a 16-bit type (c10::BFloat16 or c10::Half) to floats and back, by the type's conversions.
  template <typename T> void widen(const T* x, float* y, int64_t n) const {
    (std::is_same_v<T, c10::BFloat16> ? widen_bf16 : widen_f16)(reinterpret_cast<const uint16_t*>(x), y, n);
  }
  template <typename T> void narrow(const float* x, T* y, int64_t n) const {
    (std::is_same_v<T, c10::BFloat16> ? narrow_bf16 : narrow_f16)(x, reinterpret_cast<uint16_t*>(y), n);
  }
};

// The widest variant this CPU runs (FLASH_ATTN_EXT_CPU_ISA caps it).
ChunkMath chunk_math_for_cpu();

}  // namespace flash_attn_ext
