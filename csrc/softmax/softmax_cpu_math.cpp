// The float loops of the CPU softmax (softmax_cpu_math.h), compiled per instruction set.
#include "softmax/softmax_cpu_math.h"

#include <c10/util/Half.h>

#include <cmath>

#include "common/cpu_isa.h"
#include "common/cpu_vector_math.h"

#ifdef FAE_X86_VARIANTS
#include <immintrin.h>
#endif

namespace flash_attn_ext {
namespace {

constexpr int kSumLanes = 16;  // independent partial sums of a chunk's exponentials: the loop vectorizes

// Sum of exp(x - m) over x[0, n), m finite and >= every x (no NaN among them); with kStore the terms are
// also written to y.
template <bool kStore>
FAE_ALWAYS_INLINE float exp_sum_body(const float* x, float* y, int64_t n, float m) {
  float lanes[kSumLanes] = {};
  const auto term = [&](int64_t j) {
    const float e = exp_nonpositive(x[j] - m);
    if constexpr (kStore) y[j] = e;
    return e;
  };
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) lanes[l] += term(j + l);
  }
  for (; j < n; ++j) lanes[0] += term(j);
  float sum = 0.f;
  for (int l = 0; l < kSumLanes; ++l) sum += lanes[l];
  return sum;
}

FAE_ALWAYS_INLINE void scale_body(float* y, int64_t n, float scale) {
  for (int64_t j = 0; j < n; ++j) y[j] *= scale;
}

// y = exp(x - m) * scale (softmax: scale = 1 / d), m finite and >= every non-NaN x.
FAE_ALWAYS_INLINE void exp_scale_body(const float* x, float* y, int64_t n, float m, float scale) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_nonpositive(x[j] - m) * scale;
}

// y = (x - m) - log_d (log_softmax, rounded as Finalizer::log_softmax).
FAE_ALWAYS_INLINE void log_shift_body(const float* x, float* y, int64_t n, float m, float log_d) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) - log_d;
}

FAE_ALWAYS_INLINE void widen_bf16_body(const uint16_t* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = bf16_bits_to_float(x[j]);
}

FAE_ALWAYS_INLINE void narrow_bf16_body(const float* x, uint16_t* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = float_to_bf16_bits(x[j]);
}

// The short-row loops (ChunkMath::reduce_rows, scale_rows, log_shift_rows): the chunk loops above, row by row.
FAE_ALWAYS_INLINE void reduce_rows_body(const float* x, float* y, int64_t rows, int64_t len, float* m, float* d) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * len;
    m[i] = nan_max_of(xr, len);
    if (!std::isfinite(m[i])) continue;  // +-inf or NaN: the caller's scalar code
    d[i] = y ? exp_sum_body<true>(xr, y + i * len, len, m[i]) : exp_sum_body<false>(xr, nullptr, len, m[i]);
  }
}

FAE_ALWAYS_INLINE void scale_rows_body(float* y, int64_t rows, int64_t len, const float* scale) {
  for (int64_t i = 0; i < rows; ++i) scale_body(y + i * len, len, scale[i]);
}

FAE_ALWAYS_INLINE void log_shift_rows_body(const float* x, float* y, int64_t rows, int64_t len, const float* m,
                                           const float* log_d) {
  for (int64_t i = 0; i < rows; ++i) log_shift_body(x + i * len, y + i * len, len, m[i], log_d[i]);
}

// The column loops: rows [0, rows) of a block (row j at x + j * ld), one element per column, m / s / scale /
// log_d per column. __restrict__: the per-column arrays never alias the rows, and without it the stores may
// alias every input (no vector loop).
FAE_ALWAYS_INLINE void max_cols_body(const float* __restrict__ x, int64_t ld, int64_t rows, float* __restrict__ m,
                                     int64_t n) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t c = 0; c < n; ++c) m[c] = nan_max2(m[c], x[j * ld + c]);
  }
}

FAE_ALWAYS_INLINE void sum_exp_cols_body(const float* __restrict__ x, int64_t ld, int64_t rows,
                                         const float* __restrict__ m, float* __restrict__ s, int64_t n) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t c = 0; c < n; ++c) s[c] += exp_nonpositive(x[j * ld + c] - m[c]);
  }
}

FAE_ALWAYS_INLINE void exp_scale_cols_body(const float* __restrict__ x, int64_t ldx, float* __restrict__ y,
                                           int64_t ldy, int64_t rows, const float* __restrict__ m,
                                           const float* __restrict__ scale, int64_t n) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t c = 0; c < n; ++c) y[j * ldy + c] = exp_nonpositive(x[j * ldx + c] - m[c]) * scale[c];
  }
}

FAE_ALWAYS_INLINE void log_shift_cols_body(const float* __restrict__ x, int64_t ldx, float* __restrict__ y,
                                           int64_t ldy, int64_t rows, const float* __restrict__ m,
                                           const float* __restrict__ log_d, int64_t n) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t c = 0; c < n; ++c) y[j * ldy + c] = (x[j * ldx + c] - m[c]) - log_d[c];
  }
}

// float16 <-> float: the baseline by c10::Half's bit-by-bit conversions; the AVX2 and AVX-512 variants by
// F16C's, 8 elements an instruction (~20x faster; intrinsics, which must sit in a function whose own target has
// F16C). Both round to nearest even and keep NaN a NaN.
void widen_f16_c10(const uint16_t* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(c10::Half(x[j], c10::Half::from_bits()));
}

void narrow_f16_c10(const float* x, uint16_t* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = c10::Half(x[j]).x;
}

#ifdef FAE_X86_VARIANTS
FAE_TARGET_AVX2 void widen_f16_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(y + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + j))));
  }
  for (; j < n; ++j) y[j] = _cvtsh_ss(x[j]);
}

FAE_TARGET_AVX2 void narrow_f16_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + j), h);
  }
  for (; j < n; ++j) y[j] = _cvtss_sh(x[j], _MM_FROUND_TO_NEAREST_INT);
}
#endif

// Thin wrappers that give each instruction set its own copy of the inlined loops (a target attribute applies
// to a function, not to a template instantiation); f16: the float16 conversions it uses.
#define FAE_CHUNK_MATH_VARIANT(isa, target, f16)                                                             \
  target float max_of_##isa(const float* x, int64_t n) { return nan_max_of(x, n); }                          \
  target float sum_exp_##isa(const float* x, int64_t n, float m) {                                          \
    return exp_sum_body<false>(x, nullptr, n, m);                                                            \
  }                                                                                                          \
  target float exp_store_sum_##isa(const float* x, float* y, int64_t n, float m) {                          \
    return exp_sum_body<true>(x, y, n, m);                                                                   \
  }                                                                                                          \
  target void scale_##isa(float* y, int64_t n, float scale) { scale_body(y, n, scale); }                     \
  target void exp_scale_##isa(const float* x, float* y, int64_t n, float m, float scale) {                  \
    exp_scale_body(x, y, n, m, scale);                                                                       \
  }                                                                                                          \
  target void log_shift_##isa(const float* x, float* y, int64_t n, float m, float log_d) {                  \
    log_shift_body(x, y, n, m, log_d);                                                                       \
  }                                                                                                          \
  target void widen_bf16_##isa(const uint16_t* x, float* y, int64_t n) { widen_bf16_body(x, y, n); }          \
  target void narrow_bf16_##isa(const float* x, uint16_t* y, int64_t n) { narrow_bf16_body(x, y, n); }        \
  target void reduce_rows_##isa(const float* x, float* y, int64_t rows, int64_t len, float* m, float* d) {   \
    reduce_rows_body(x, y, rows, len, m, d);                                                                 \
  }                                                                                                          \
  target void scale_rows_##isa(float* y, int64_t rows, int64_t len, const float* scale) {                   \
    scale_rows_body(y, rows, len, scale);                                                                    \
  }                                                                                                          \
  target void log_shift_rows_##isa(const float* x, float* y, int64_t rows, int64_t len, const float* m,     \
                                   const float* log_d) {                                                     \
    log_shift_rows_body(x, y, rows, len, m, log_d);                                                          \
  }                                                                                                          \
  target void max_cols_##isa(const float* x, int64_t ld, int64_t rows, float* m, int64_t n) {                \
    max_cols_body(x, ld, rows, m, n);                                                                        \
  }                                                                                                          \
  target void sum_exp_cols_##isa(const float* x, int64_t ld, int64_t rows, const float* m, float* s,        \
                                 int64_t n) {                                                                \
    sum_exp_cols_body(x, ld, rows, m, s, n);                                                                 \
  }                                                                                                          \
  target void exp_scale_cols_##isa(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows,        \
                                   const float* m, const float* scale, int64_t n) {                         \
    exp_scale_cols_body(x, ldx, y, ldy, rows, m, scale, n);                                                  \
  }                                                                                                          \
  target void log_shift_cols_##isa(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows,        \
                                   const float* m, const float* log_d, int64_t n) {                         \
    log_shift_cols_body(x, ldx, y, ldy, rows, m, log_d, n);                                                  \
  }                                                                                                          \
  constexpr ChunkMath kChunkMath_##isa{max_of_##isa,      sum_exp_##isa,       exp_store_sum_##isa,          \
                                       scale_##isa,       exp_scale_##isa,     log_shift_##isa,              \
                                       widen_bf16_##isa,  narrow_bf16_##isa,   widen_f16_##f16,              \
                                       narrow_f16_##f16,  reduce_rows_##isa,   scale_rows_##isa,             \
                                       log_shift_rows_##isa, max_cols_##isa,   sum_exp_cols_##isa,           \
                                       exp_scale_cols_##isa, log_shift_cols_##isa};

FAE_CHUNK_MATH_VARIANT(generic, , c10)
#ifdef FAE_X86_VARIANTS
FAE_CHUNK_MATH_VARIANT(avx2, FAE_TARGET_AVX2, f16c)
FAE_CHUNK_MATH_VARIANT(avx512, FAE_TARGET_AVX512, f16c)
#endif
#undef FAE_CHUNK_MATH_VARIANT

}  // namespace

ChunkMath chunk_math_for_cpu() {
  switch (cpu_isa()) {
#ifdef FAE_X86_VARIANTS
    case CpuIsa::Avx512: return kChunkMath_avx512;
    case CpuIsa::Avx2: return kChunkMath_avx2;
#endif
    default: return kChunkMath_generic;
  }
}

}  // namespace flash_attn_ext
