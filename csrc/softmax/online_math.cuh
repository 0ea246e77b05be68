#pragma once
// Device numerics shared by every softmax kernel: the online (max, sum) state and its merge rule, the
// exponential with torch's infinity guard, warp and block reductions, and 16-byte vector access.
//
// State (m, d): m = running max, d = sum of exp(x - m), starting from (-inf, 0).
//   rescale(a, m) = (a == m) ? 1 : exp(a - m)   equal infinities give 1, never exp(NaN)
//   element:  m' = fmax(m, x);  d' = d * rescale(m, m') + rescale(x, m')
//   merge:    m = fmax(ma, mb); d = da * rescale(ma, m) + db * rescale(mb, m)
// fmax ignores NaN, so m is never NaN; a NaN element makes its exp NaN and d NaN, which then poisons the
// whole row as in torch. Elements past the end of a row are read as -inf: they add exp(-inf - m) = 0 when m
// is finite, and when m is +-inf the result does not depend on d (NaN for softmax and log_softmax, m for
// logsumexp; see finalize rules below), so padding never changes a result.
//
// In fp32 exp(t) is expf(t) (about 2 ulp) but in the long-row kernels' folds; t = x - m is formed first so that the
// argument is exact for x close to m (where the large outputs are). Those folds take ex2.approx(t * log2(e))
// (kFastFloatExp, below): the rounding of the product adds a relative error growing with |t| to each term.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/exp_sum.h"
#include "common/fast_math.cuh"
#include "common/log_sum.h"
#include "common/named_barrier.cuh"
#include "softmax/softmax_launch.h"

namespace flash_attn_ext {
namespace softmax {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(t) = exp2(t * kLog2e)

template <typename A> struct OnlineState {
  A m;
  A d;
};

template <typename A> __device__ __forceinline__ A neg_inf() { return -std::numeric_limits<A>::infinity(); }
template <typename A> __device__ __forceinline__ A quiet_nan() { return std::numeric_limits<A>::quiet_NaN(); }
template <typename A> __device__ __forceinline__ OnlineState<A> empty_state() { return {neg_inf<A>(), A(0)}; }

// The larger of a running max a and a value b, b ignored when NaN (as fmax does). Every caller's a is a running max that
// starts at -inf and only ever takes a larger value (or a merge of such maxes), so it is never NaN, and then
// b > a ? b : a is exactly fmax(a, b). fp64 takes that form: sm_90a has no one-instruction fmax for doubles, and fmax's
// NaN cases cost a compare with two predicates, two selects, a LOP3 and register moves each time (ncu source counters,
// H200 s102 call 7: softmax 65536x127 ran 401 warp instructions a row, its warp max ~10 a butterfly step). fp32 keeps
// fmaxf, one FMNMX.
__device__ __forceinline__ float amax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double amax(double a, double b) { return b > a ? b : a; }
__device__ __forceinline__ float exp_of(float t) { return expf(t); }
__device__ __forceinline__ double exp_of(double t) { return exp(t); }
__device__ __forceinline__ float log_of(float v) { return logf(v); }
__device__ __forceinline__ double log_of(double v) { return log(v); }

template <typename A> __device__ __forceinline__ A rescale(A a, A m) { return a == m ? A(1) : exp_of(a - m); }

// One exponential per merge: the side holding the larger max is rescaled by exactly 1. kFastExp2 (float): that
// exponential as one ex2.approx (~2^-22 relative), where the merge lies on a path that waits for it and the result
// is rounded to 16 bits (the resident kernel's reduction, softmax_resident.cuh).
template <typename A, bool kFastExp2 = false>
__device__ __forceinline__ OnlineState<A> merge(OnlineState<A> a, OnlineState<A> b) {
  static_assert(!kFastExp2 || std::is_same_v<A, float>, "ex2.approx is float");
  const bool a_big = a.m >= b.m;
  const A m = a_big ? a.m : b.m;
  const A small_m = a_big ? b.m : a.m;
  const A big_d = a_big ? a.d : b.d;
  const A small_d = a_big ? b.d : a.d;
  if constexpr (kFastExp2) {
    return {m, small_d * (small_m == m ? 1.f : fast_exp2((small_m - m) * kLog2e)) + big_d};
  } else {
    return {m, small_d * rescale(small_m, m) + big_d};
  }
}

// --- finalize rules (torch parity) -----------------------------------------------------------------------
// logsumexp = m + log(d): +inf for a row holding +inf, -inf for a row of -inf, NaN when d is NaN.
template <typename A> __device__ __forceinline__ A row_lse(OnlineState<A> s) { return s.m + log_of(s.d); }
// softmax / log_softmax: a row whose max is +inf is NaN everywhere (inf - inf in torch), and so is a row of
// -inf (-inf - -inf); both come out of d = NaN.
template <typename A> __device__ __forceinline__ OnlineState<A> poison_infinite_max(OnlineState<A> s) {
  if (isinf(s.m)) s.d = quiet_nan<A>();
  return s;
}

// --- thread-local folds over register arrays (compile-time indices only, so nothing goes to local memory) -
template <typename A, int kN, int kM> __device__ __forceinline__ A max_of(const A (&v)[kN][kM]) {
  A mx = neg_inf<A>();
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kM; ++j) mx = amax(mx, v[i][j]);
  return mx;
}

// exp(x - m) against a row (or thread) max m, replaced by 0 when infinite: then exp(x - 0) gives the
// results torch gives (+inf rows: d = inf, lse = +inf; rows of -inf: d = 0, lse = -inf; softmax of both is
// NaN through poison_infinite_max). 16-bit inputs take ex2.approx((x - m) * log2(e)), three instructions
// instead of expf's nine: their outputs keep 8 or 11 bits, far coarser than its 2 ulp, and with two bytes per
// element the arithmetic per byte would otherwise cap the kernel's bandwidth. x - m is formed first, so the
// argument stays exact near the max even for inputs in the tens of thousands. fp32 and fp64 keep exp_of
// (see the top of this file), but in the fp32 folds of the long-row kernels (kFastFloatExp).
template <typename T> constexpr bool kFastExp = sizeof(T) == 2;
// fp32 folds in the long-row kernels (the pipelined, dual and resident kernels and the streaming reduce; not the
// block kernel's split rows; T the input, A the accumulator): ex2.approx.ftz((x - m) log2(e)) as for 16-bit inputs
// (a term below 2^-126 cannot move a sum >= 1), three instructions where expf takes nine, in folds bound by
// instruction issue on the H200. The store passes keep expf: there ex2.approx without .ftz (subnormal outputs kept,
// as torch's expf keeps them) cost the dual kernel's softmax 1-2 us on split rows (NOTES "s99 call 4"). The fold's
// error grows from expf's 2 ulp + |t| 2^-24 (t = x - m) to ~2^-22 + 2 |t| 2^-24 per term; the sum, which the terms
// near the max dominate, and with it every output of the row, moves by about 2^-22 at most. The warp, block and
// column kernels keep expf throughout.
template <typename T, typename A> constexpr bool kFastFloatExp = std::is_same_v<T, float> && std::is_same_v<A, float>;

// kSumExp (fp64): exp_sum_term (common/exp_sum.h), for terms that only enter a sum against the row max (x <= m).
template <typename A, bool kFast, bool kSumExp = false> struct ShiftedExp {
  static_assert(!kSumExp || std::is_same_v<A, double>, "exp_sum_term is fp64");
  A m;
  __device__ __forceinline__ explicit ShiftedExp(A max) : m(isinf(max) ? A(0) : max) {}
  __device__ __forceinline__ A operator()(A x) const {
    if constexpr (kFast) {
      return fast_exp2((x - m) * kLog2e);
    } else if constexpr (kSumExp) {
      return exp_sum_term(x - m);
    } else {
      return exp_of(x - m);
    }
  }
};

// exp(x - m) for 16-bit inputs as ex2(fma(x, c, -k)) * correction, k = m c: one FFMA before the exponential
// where ShiftedExp subtracts and multiplies. Why: the dual kernel's folds and store passes are bound by
// instruction issue, not by memory (ncu, s26: the ring role's warps mostly issuing or waiting on fixed-latency
// results; both roles' last store passes, whose bytes L2 absorbs, end the call); bf16 8x4194304 51.7-52.1 ->
// 50.5-51.1 us, 128x262144 50.7-51.2 -> 49.5-50.4 (H100 probe, NOTES "s26 run 9"). As exact as ShiftedExp,
// and without a branch (a guarded fallback anywhere in the dual kernel, never taken, cost it 6 us: "s26 run 8"):
// - bf16: c = log2(e) to 15 significant bits (1.44268798828125, relative error -4.9e-6), so m c is exact for
//   bf16's 8-bit m, and the result is exp((x - m)(1 - 4.9e-6)): 4.5e-4 relative (a tenth of a bf16 half-ulp)
//   at t = m - x = 92, where bf16 underflows. Beyond |m| = 2^64, c is scaled by 2^-24 (m c stays finite, and
//   every x != m there is at least 2^57 below m, so the result is still exactly 1 for x == m and 0 else).
// - fp16 (11-bit m): c = log2(e) as fp32, k = m c rounded and the exact residual r = m c - k (|r| <= 2^-8
//   for |m| <= 65504) taken back by correction = 2^-r.
// An infinite m is taken as 0, as ShiftedExp does.
struct FusedExp2 {
  float c;
  float k;
  float correction;  // multiplies every term: the caller applies it to the sum, or to the output scale
  template <typename T> static __device__ __forceinline__ FusedExp2 at(float max) {
    static_assert(sizeof(T) == 2, "16-bit inputs only");
    const float m = isinf(max) ? 0.0f : max;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      const float c = fabsf(m) <= 0x1p64f ? 1.44268798828125f : 1.44268798828125f * 0x1p-24f;
      return {c, m * c, 1.0f};
    } else {
      const float c = kLog2e;
      const float k = m * c;
      return {c, k, fast_exp2(-fmaf(m, c, -k))};
    }
  }
  __device__ __forceinline__ float operator()(float x) const { return fast_exp2(fmaf(x, c, -k)); }
};

// Returns the sum of the terms ShiftedExp's exp(v - ref) (exp(v) when ref is infinite: the same results
// after the finalize rules as rescale(v, ref)), kFast: by the 16-bit fast exponential; with keep != 0 the
// terms replace v (softmax reuses them in its epilogue, so each element costs one exponential). Why not
// rescale(v, ref): its a == m guard put a branch and a convergence barrier around every fp32 exponential
// (SASS, s61 call 5), and these kernels are bound by instruction issue on short rows. kGuarded keeps
// rescale's form: where the exponentials, no longer behind a branch each, overlap and the registers run out
// (ptxas spilled the 32-value element-wise warp rows and fp64 block rows). `live` (here, in store_group and in
// store_group_shifted): the leading vectors that can hold elements, a count uniform over the block (live_vectors);
// the others are skipped: neither summed (nor kept) nor stored. The default, kN, folds away at compile time.
// kSumExp: the terms by exp_sum_term (ShiftedExp), where keep is false and ref the row max.
template <bool kFast, bool kGuarded = false, bool kSumExp = false, typename A, int kN, int kM>
__device__ __forceinline__ A sum_rescaled(A (&v)[kN][kM], A ref, bool keep, int live = kN) {
  static_assert(!(kFast && kGuarded), "the fast exponential has no guard");
  const ShiftedExp<A, kFast, kSumExp> e(ref);
  A sum = A(0);
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (i >= live) break;
#pragma unroll
    for (int j = 0; j < kM; ++j) {
      const A term = kGuarded ? rescale(v[i][j], ref) : e(v[i][j]);
      sum += term;
      if (keep) v[i][j] = term;
    }
  }
  return sum;
}

// Element update for a group of values v (kN vectors of kM elements of an input of type T, widened): the
// group's max first, so d is rescaled once per group; the terms exp(x - m) as ShiftedExp / FusedExp2 (16-bit)
// give them, one partial sum per vector (independent adds in flight). An infinite m is taken as 0, so d is
// then not relative to m; the finalize rules look only at m there (+inf: logsumexp +inf, softmax NaN; -inf:
// d = 0). Why not rescale() per element: its compare, select and accurate expf per element left the
// streaming reduce issue-bound on 16-bit rows (H100 probe, NOTES "s32": bf16 8x4194304 logsumexp 42.4 ->
// 31.5 us). The pipelined and dual kernels fold their ring pieces here too.
// A: acc_t<T>, or double for the column kernel's fp32 (exact exponentials there).
template <typename T, typename A, int kN, int kM>
__device__ __forceinline__ void fold(OnlineState<A>& st, const A (&v)[kN][kM]) {
  const A m = amax(st.m, max_of(v));
  const auto sum_of = [&](const auto& e, A first) {  // first: d[0]'s start
    A d[kN];
#pragma unroll
    for (int g = 0; g < kN; ++g) {
      d[g] = g == 0 ? first : A(0);
#pragma unroll
      for (int i = 0; i < kM; ++i) d[g] += e(v[g][i]);
    }
#pragma unroll
    for (int g = 1; g < kN; ++g) d[0] += d[g];
    return d[0];
  };
  const A carried = st.d * rescale(st.m, m);
  if constexpr (kFastExp<T> && std::is_same_v<A, float>) {
    const FusedExp2 e = FusedExp2::at<T>(m);
    st = {m, fmaf(sum_of(e, A(0)), e.correction, carried)};
  } else {
    st = {m, sum_of(ShiftedExp<A, kFastFloatExp<T, A>>(m), carried)};
  }
}

// --- reductions -----------------------------------------------------------------------------------------
struct MaxOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return amax(a, b); }
};
struct SumOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MergeOp {
  template <typename A>
  __device__ __forceinline__ OnlineState<A> operator()(OnlineState<A> a, OnlineState<A> b) const {
    return merge(a, b);
  }
};

template <typename A> __device__ __forceinline__ A shfl_xor(A v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
template <typename A> __device__ __forceinline__ OnlineState<A> shfl_xor(OnlineState<A> s, int o) {
  return {shfl_xor(s.m, o), shfl_xor(s.d, o)};
}

// All-reduce within aligned groups of `width` lanes (a power of two <= 32). Every lane of the warp must
// call it. The three ops are commutative, so both partners of a butterfly step get the same value and the
// whole group ends bitwise identical. The switch enters the unrolled butterfly at the width's first step, where a
// loop over a run-time width paid 6 instructions a step (sm_90a: shift, compare, branch, moves) in the warp kernels
// of run-time team widths, which are issue-bound. H200, s96 call 5, us cold / streamed, loop -> switch, two rounds:
// fp32 log_softmax 32768x201 (32 lanes) 17.3-17.5 / 15.7 -> 16.6-16.7 / 15.3 (torch 16.6-16.9 / 15.2-15.3), softmax
// 32768x201 17.4-17.6 / 16.2 -> 17.1-17.2 / 15.9, log_softmax 65536x97 (16 lanes) 17.2-17.4 / 15.4 -> 16.6-16.7 /
// 15.1, bf16 softmax 65536x128 10.1 -> 9.9 streamed; 8 lanes level (65536x61), 4 lanes a little slower (65536x29
// 9.1-9.2 / 5.9 -> 9.3-9.4 / 6.0); ptxas took 2-4 registers more in some warp kernels.
template <typename V, typename Op> __device__ __forceinline__ V warp_allreduce(V v, Op op, int width = 32) {
  switch (width) {
    case 32: v = op(v, shfl_xor(v, 16)); [[fallthrough]];
    case 16: v = op(v, shfl_xor(v, 8)); [[fallthrough]];
    case 8: v = op(v, shfl_xor(v, 4)); [[fallthrough]];
    case 4: v = op(v, shfl_xor(v, 2)); [[fallthrough]];
    case 2: v = op(v, shfl_xor(v, 1)); [[fallthrough]];
    default: break;
  }
  return v;
}

// The threads that reduce and wait together. BlockTeam: the whole block (__syncthreads). RoleTeam: the
// warps [first / 32, (first + count) / 32) of a warp-specialized block, on their own named barrier, so that
// one role's waits never hold another role back (the dual kernel, softmax_dual.cuh).
struct BlockTeam {
  __device__ __forceinline__ int rank() const { return threadIdx.x; }
  __device__ __forceinline__ int size() const { return blockDim.x; }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
};
struct RoleTeam {
  int first;    // multiple of 32
  int count;    // multiple of 32
  int barrier;  // named barrier id, 1..15 (0 is __syncthreads')
  __device__ __forceinline__ int rank() const { return threadIdx.x - first; }
  __device__ __forceinline__ int size() const { return count; }
  __device__ __forceinline__ void sync() const {
    named_barrier_sync(barrier, count);
  }
};

// All-reduce over a team (its size a multiple of 32, at most 1024). `scratch` holds 32 values; the closing
// barrier lets the caller reuse it at once.
template <typename V, typename Op, typename Team = BlockTeam>
__device__ __forceinline__ V block_allreduce(V v, Op op, V identity, V* scratch, Team team = {}) {
  const int lane = team.rank() & 31;
  const int warp = team.rank() >> 5;
  v = warp_allreduce(v, op);
  if (lane == 0) scratch[warp] = v;
  team.sync();
  v = lane < (team.size() >> 5) ? scratch[lane] : identity;
  v = warp_allreduce(v, op);
  team.sync();
  return v;
}

// --- element access ---------------------------------------------------------------------------------------
template <typename To, typename From> __device__ __forceinline__ To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast size mismatch");
  To t;
  memcpy(&t, &f, sizeof(To));
  return t;
}

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// 16 raw bytes <-> kVec accumulators, element 0 at the lowest address.
template <typename T> struct VecIO;
template <> struct VecIO<float> {
  static __device__ __forceinline__ void unpack(uint4 r, float (&v)[4]) {
    v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y);
    v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
  }
  static __device__ __forceinline__ uint4 pack(const float (&v)[4]) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  }
};
template <> struct VecIO<double> {
  static __device__ __forceinline__ void unpack(uint4 r, double (&v)[2]) {
    v[0] = __hiloint2double(static_cast<int>(r.y), static_cast<int>(r.x));
    v[1] = __hiloint2double(static_cast<int>(r.w), static_cast<int>(r.z));
  }
  static __device__ __forceinline__ uint4 pack(const double (&v)[2]) {
    return make_uint4(static_cast<unsigned>(__double2loint(v[0])), static_cast<unsigned>(__double2hiint(v[0])),
                      static_cast<unsigned>(__double2loint(v[1])), static_cast<unsigned>(__double2hiint(v[1])));
  }
};
// The 16-bit types: a vector's 8 elements as 4 pairs, each through the type's own pair conversions (Pairs::unpack2 /
// Pairs::pack2 of one 32-bit word).
template <typename Pairs> struct PairVecIO {
  static __device__ __forceinline__ void unpack(uint4 r, float (&v)[8]) {
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = Pairs::unpack2(w[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ uint4 pack(const float (&v)[8]) {
    return make_uint4(Pairs::pack2(v[0], v[1]), Pairs::pack2(v[2], v[3]), Pairs::pack2(v[4], v[5]),
                      Pairs::pack2(v[6], v[7]));
  }
};
template <> struct VecIO<__half> : PairVecIO<VecIO<__half>> {
  static __device__ __forceinline__ float2 unpack2(unsigned w) { return __half22float2(bit_cast<__half2>(w)); }
  static __device__ __forceinline__ unsigned pack2(float a, float b) {
    return bit_cast<unsigned>(__floats2half2_rn(a, b));
  }
};
template <> struct VecIO<__nv_bfloat16> : PairVecIO<VecIO<__nv_bfloat16>> {
  // bf16 -> fp32 is a 16-bit shift; fp32 -> bf16 rounds to nearest even (one F2FP per pair on sm_80+).
  static __device__ __forceinline__ float2 unpack2(unsigned w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  static __device__ __forceinline__ unsigned pack2(float a, float b) {
    return bit_cast<unsigned>(__floats2bfloat162_rn(a, b));
  }
};

// A vector of -inf of T, as immediates (a packed runtime value would hold 4 registers for the whole loop).
template <typename T> __device__ __forceinline__ uint4 neg_inf_vector() {
  if constexpr (std::is_same_v<T, float>) {
    return make_uint4(0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u);
  } else if constexpr (std::is_same_v<T, double>) {
    return make_uint4(0u, 0xfff00000u, 0u, 0xfff00000u);
  } else if constexpr (std::is_same_v<T, __half>) {
    return make_uint4(0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "float, double, half or bfloat16");
    return make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);
  }
}

// -inf of T as an immediate (a 16-bit type's from the low half of the -inf vector).
template <typename T> __device__ __forceinline__ T neg_inf_scalar() {
  if constexpr (sizeof(T) == 2) {
    return bit_cast<T>(static_cast<unsigned short>(neg_inf_vector<T>().x & 0xffffu));
  } else {
    return neg_inf<T>();
  }
}

__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
// One 16-byte store of a packed vector of T, as inline PTX. NVVM splits a plain uint4 assignment into four 32-bit
// stores (st.global.u32 / .f32) in these kernels, why is not known (uint4 is declared 16-byte aligned): every vector
// but the first of the warp kernel's groups and all of the block kernel's. For 16-bit T that cost the warp kernel 2-5 %
// of its time on the H100 (s15); fp32 was thought to compile to one vector store, but nvcc 13.0 splits it alike (s93,
// local SASS of softmax_rows.cu for sm_90a: the aligned fp32 warp kernel at 8 vectors a lane had 1 vector store and 28
// scalar ones, the block kernel at 8 vectors 1 and 41), and ncu read 12.8 of every 32 bytes a sector used a thread on
// its stores at fp32 65536x128. As one vector store, fp32 rows on the warp and block kernels ran 1-2 % faster on the
// H200 (s94 call 1, auto, us cold, two rounds: 4096x4096 34.6 / 34.7 -> 33.9 / 34.1, 32768x2000 127.9 / 128.1 -> 126.6
// / 126.9, forced block kernel 8192x10240 169.6 -> 166.0; 65536x128 level, 19.4 / 19.0 -> 19.0 / 19.1). fp64 (two
// doubles a vector; split into 64- and 32-bit stores before) is not timed.
// The "memory" clobber binds NVVM only: ptxas still issues shared-memory reads ahead of global stores (s94, local sm_90a
// SASS: the dual kernel's ring store pass loads its group's four vectors before its four stores), and the block
// kernel's shared-vector loop (softmax_rows.cuh, s_chunk; fp32 takes it only in forced plans on sm_90) lost nothing
// under it (above: 8192x10240).
template <typename T> __device__ __forceinline__ void store16(T* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
// The plain assignment, which NVVM may split (above): the pipelined kernel's fp32 and fp64 store pass keeps it, since
// the PTX form slowed that pass on the H100 (fp32 1024x32768: 101 -> 115 us, s15) and again on the H200 (s94 call 1,
// forced kind=pipe, us cold: 1024x32768 92.8 -> 106.0, 128x262144 109.2 -> 117.7, 4096x16384 189.9 -> 220.0), though
// nvcc 13.0 gives that pass 8 vector stores with it where it gives 71 scalar ones and no vector store without it (s93,
// local sm_90a SASS; the same with or without the clobber). Why the scalar stores win there is not known.
__device__ __forceinline__ void store16_plain(void* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
// st.global.cs: the line is cached evict-first in L2.
__device__ __forceinline__ void store16_streaming(void* p, uint4 v) { __stcs(reinterpret_cast<uint4*>(p), v); }

// p as a value the compiler cannot see through. The scalar groups below step a held pointer by the team's width from
// element to element (a 64-bit add, 2 instructions): with the pointer visible, ptxas re-derived every element's
// address from the kernel's parameters (the base reloaded from the constant bank, the row offset, the lane and the
// element's offset added in 64 bits, then scaled: 5 instructions) to stay under the warp kernels' register bounds,
// and those kernels are issue-bound (ncu, H200, s96 call 1: fp32 log_softmax 65536x97 issues 0.82 warp instructions
// a cycle per scheduler, as torch's kernel does, but 1.3x as many). sm_90a SASS, fp32 log_softmax at 2 vectors a lane
// 360 -> 304 instructions (its many-rows instantiation 360 -> 312, still 32 registers), bf16 softmax at 1 vector
// 584 -> 288, bf16 online softmax at 4 vectors 2152 -> 1896 and its 16 bytes of spills gone; a few kernels took more
// registers (fp32 softmax at 2 vectors 32 -> 39, log_softmax 39 -> 46) and none lost. H200, s96 call 2, us cold /
// streamed, two rounds (torch): fp32 log_softmax 65536x97 19.0 / 16.5 -> 16.9-17.1 / 15.2 (17.4 / 15.5), 32768x201
// 19.7 / 17.0 -> 17.5-17.8 / 15.6 (16.4 / 15.5), 65536x29 9.9 / 6.8 -> 8.6-8.8 / 5.9, 131072x61 20.6 / 19.0 ->
// 19.8 / 18.6, 32768x383 28.8-29.0 / 27.5 -> 27.5 / 26.3; softmax 65536x97 19.3-19.5 / 16.4 -> 17.5 / 15.7 (18.3 /
// 16.9), 32768x201 19.3-19.5 / 16.7 -> 17.2 / 16.0, 65536x29 10.9 / 8.3 -> 10.5 / 7.1; online fp32 16384x1023
// 38.0 / 39.0 -> 35.4-35.8 / 36.5, bf16 16384x1023 35.1 / 32.0 -> 30.6 / 28.7, bf16 65536x127 24.2 / 20.1 -> 22.0 /
// 18.3. The asm hides the global address space too: stores go through __stwb (st.global).
template <typename P> __device__ __forceinline__ P* held_pointer(P* p) {
  asm("" : "+l"(p));
  return p;
}

// A "group" is what one thread of a team of nt threads holds of a row, starting at element `first`:
//  aligned: vector s of thread t is the 16-byte vector at element first + (s * nt + t) * kVec, so the team
//           reads contiguous 16-byte vectors (requires first and len multiples of kVec, 16-byte aligned row);
//  scalar:  element j of vector s is first + (s * kVec + j) * nt + t, so each scalar access is coalesced.
// The group spans nt * kN * kVec elements (< 2^31). Elements at or past `len` read as -inf and are not
// stored. The bound is clamped once into a 32-bit count of remaining elements, so each access is predicated
// by one 32-bit compare against a compile-time multiple of the stride (no 64-bit division per row).
__device__ __forceinline__ int remaining(int64_t len, int64_t base) {
  const int64_t r = len - base;
  return r <= 0 ? 0 : (r >= 0x7fffffff ? 0x7fffffff : static_cast<int>(r));
}

// Work item `item` of rows cut into `chunks` chunks of chunk_elems elements (item = row * chunks + chunk):
// its row and its elements [begin, end). Shared by the split-row, streaming and pipelined kernels.
struct RowChunk {
  int64_t row;
  int64_t begin;
  int64_t end;
  __device__ __forceinline__ RowChunk(int64_t item, int chunks, int64_t chunk_elems, int64_t len) {
    row = chunks == 1 ? item : item / chunks;  // whole rows skip a 64-bit division
    begin = (item - row * chunks) * chunk_elems;
    end = begin + chunk_elems < len ? begin + chunk_elems : len;
  }
};

// load_group's loads kept raw: the streaming reduce issues the next group's loads before it folds this one and unpacks
// them only as it folds them, since a conversion right behind a load waits for it there; logsumexp's 16-bit row
// kernels reduce them packed (packed_lse.cuh). (load_group below keeps its
// own copy of this mapping and unpacks as it loads: the row kernels' code as measured. Built on this, their registers
// moved by -8 to +6; with only its scalar path on it, the 16-bit scalar warp kernels' by +1 to +3; local ptxas, s80.)
template <typename T, int kN, bool kAligned> struct GroupLoads;
template <typename T, int kN> struct GroupLoads<T, kN, true> {
  static constexpr int kVec = RowsTraits<T>::kVec;
  uint4 raw[kN];
  __device__ __forceinline__ void load(const T* row, int64_t len, int64_t first, int nt, int t) {
    const int64_t base = first + static_cast<int64_t>(t) * kVec;
    const int stride = nt * kVec;
    const int rem = remaining(len, base);
    const T* ptr = row + base;
#pragma unroll
    for (int s = 0; s < kN; ++s) raw[s] = s * stride < rem ? load16(ptr + s * stride) : neg_inf_vector<T>();
  }
  __device__ __forceinline__ void unpack(acc_t<T> (&v)[kN][kVec]) const {
#pragma unroll
    for (int s = 0; s < kN; ++s) VecIO<T>::unpack(raw[s], v[s]);
  }
};
template <typename T, int kN> struct GroupLoads<T, kN, false> {
  static constexpr int kVec = RowsTraits<T>::kVec;
  T raw[kN][kVec];
  __device__ __forceinline__ void load(const T* row, int64_t len, int64_t first, int nt, int t) {
    const int64_t base = first + t;
    const int rem = remaining(len, base);
    const T* ptr = row + base;
#pragma unroll
    for (int s = 0; s < kN; ++s)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const int off = (s * kVec + j) * nt;
        raw[s][j] = off < rem ? __ldg(ptr + off) : neg_inf_scalar<T>();
      }
  }
  __device__ __forceinline__ void unpack(acc_t<T> (&v)[kN][kVec]) const {
#pragma unroll
    for (int s = 0; s < kN; ++s)
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[s][j] = to_acc(raw[s][j]);
  }
};

// kAlwaysLive (element-wise layout only): the thread's first kAlwaysLive elements load without a predicate, so the
// caller guarantees that `row` holds them: a real row of >= nt * kAlwaysLive elements past `first` (a team past the
// last row passes len 0, for its stores, and the tensor's first row, which holds them). Why: the fp64 many-rows kernels' per-load predicates, with the row max's own, outnumbered what ptxas
// keeps live, and it issued the row's last loads only behind the max's first steps (softmax_rows.cuh).
// kHeld (aligned layout only): one held pointer stepped by the team's stride from vector to vector (held_pointer), where
// otherwise each vector forms its own 64-bit address, row + base + s * stride: the fp64 many-rows kernels of 4 vectors
// a lane (held_vector_rows says why).
template <typename T, int kN, bool kAligned, int kAlwaysLive = 0, bool kHeld = false>
__device__ __forceinline__ void load_group(const T* row, int64_t len, int64_t first, int nt, int t,
                                           acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  static_assert(!kAligned || kAlwaysLive == 0, "kAlwaysLive is for the element-wise layout");
  static_assert(kAligned || !kHeld, "kHeld is for the aligned layout (the element-wise one always holds its pointer)");
  if constexpr (kAligned) {
    const int64_t base = first + static_cast<int64_t>(t) * kVec;
    const int stride = nt * kVec;
    const int rem = remaining(len, base);
    const T* ptr = kHeld ? held_pointer(row + base) : row + base;
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s * stride < rem) {
        VecIO<T>::unpack(load16(kHeld ? ptr : ptr + s * stride), v[s]);
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[s][j] = neg_inf<A>();
      }
      if constexpr (kHeld) ptr = held_pointer(ptr + stride);
    }
  } else {
    const int64_t base = first + t;
    const int rem = remaining(len, base);
    const T* ptr = held_pointer(row + base);
#pragma unroll
    for (int s = 0; s < kN; ++s)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const int off = (s * kVec + j) * nt;
        v[s][j] = s * kVec + j < kAlwaysLive || off < rem ? to_acc(__ldg(ptr)) : neg_inf<A>();
        ptr = held_pointer(ptr + nt);
      }
  }
}

template <typename T, int kN, bool kAligned, bool kHeld = false>
__device__ __forceinline__ void store_group(T* row, int64_t len, int64_t first, int nt, int t,
                                            const acc_t<T> (&v)[kN][RowsTraits<T>::kVec], int live = kN) {
  constexpr int kVec = RowsTraits<T>::kVec;
  static_assert(kAligned || !kHeld, "kHeld is for the aligned layout");
  if constexpr (kAligned) {
    const int64_t base = first + static_cast<int64_t>(t) * kVec;
    const int stride = nt * kVec;
    const int rem = remaining(len, base);
    T* ptr = kHeld ? held_pointer(row + base) : row + base;  // store16 is st.global whatever ptxas knows of ptr
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s >= live) break;
      if (s * stride < rem) store16(kHeld ? ptr : ptr + s * stride, VecIO<T>::pack(v[s]));
      if constexpr (kHeld) ptr = held_pointer(ptr + stride);
    }
  } else {
    const int64_t base = first + t;
    const int rem = remaining(len, base);
    T* ptr = held_pointer(row + base);
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s >= live) break;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const int off = (s * kVec + j) * nt;
        if (off < rem) __stwb(ptr, from_acc<T>(v[s][j]));  // st.global (held_pointer)
        ptr = held_pointer(ptr + nt);
      }
    }
  }
}

// Unaligned rows (a length that is not a multiple of kVec, or a base that is not 16-byte aligned): the row and block
// kernels' groups still move 16-byte vectors, on the memory's 16-byte grid rather than the row's. d is the row's
// misalignment in elements (row - d is 16-byte aligned); vector s of thread t covers elements first - d + (s * nt + t)
// * kVec + [0, kVec), so the group spans [first - d, first - d + nt * kN * kVec). Elements outside [0, len) read as
// -inf and are not stored; a vector not wholly inside [0, len) (a row's first and last) is read whole
// (load_group_shifted says why that is safe) and written element by element: nothing outside the row is written.
// Consecutive groups (first += nt * kN * kVec, first a multiple of kVec) partition the row once they span len + d
// elements; the host counts an unaligned row's vectors as ceil((len + kVec - 1) / kVec) for that. The output row may
// sit on another grid than the input's (a misaligned input, a fresh output): then every store is element-wise. Why: the
// element-wise layout (load_group's scalar mapping) moved 16-bit rows at 35-39 % of copy on the H200 (bf16 2000x10007,
// 8192x4097; fp32 70-78 %), and no kernel configuration did better (NOTES "s58 call 6"). The streaming kernels keep the
// scalar mapping: their chunks are not cut on the vector grid.
template <typename T> __device__ __forceinline__ int misalignment(const T* p) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(p) & 15) / sizeof(T));
}

// The group's offsets o (element first - d + o) in [lo, hi) lie in the row, as 32-bit numbers (the group spans
// < 2^31 elements): lo = d for the row's first group, else 0; hi is the rest of the row, clamped.
struct ShiftedBounds {
  int lo;
  int hi;
  __device__ __forceinline__ ShiftedBounds(int64_t len, int64_t first, int d)
      : lo(first == 0 ? d : 0), hi(remaining(len + d, first)) {}
  __device__ __forceinline__ bool inside(int o) const { return o >= lo && o < hi; }
};

// The live count (see sum_rescaled) of a group of kN vectors a thread, vector s of every thread at group offsets
// [s * nt * vec, (s + 1) * nt * vec), whose span from its start holds `rest` elements of the row (remaining()):
// the vectors that start at or past the row's end in every thread are dead. Why: the block row kernel's groups of 8
// fp32 vectors (16-bit: 4) a thread leave up to nearly half of them dead on rows just past a block size (fp32 rows of
// 1025-1028 elements, 257-258 vectors on 64 threads: 5 of 8 live), and that loop is bound by instruction issue (ncu,
// s83 call 7: fp32 65536x1025 and 65536x1028, 84 % and 81 % of issue slots busy), where a dead vector's -inf costs
// what a live vector costs. Compares, not a division: one per vector.
template <int kN> __device__ __forceinline__ int live_vectors(int rest, int nt, int vec) {
  const int per_vector = nt * vec;  // < 2^31: a group spans < 2^31 elements
  int live = 0;
#pragma unroll
  for (int s = 0; s < kN; ++s) live += s * per_vector < rest;
  return live;
}

// The raw 16-byte vectors of a group on the memory's grid (group: 16-byte aligned; vector s of thread t at group
// offset o = (s * nt + t) * kVec): those that hold an element of the row ([b.lo, b.hi)) read whole, the others -inf
// vectors, never read. For load_group_shifted, load_row_folded and ShiftedRawLoads (packed_lse.cuh), which mask the
// edges after it.
template <typename T, int kN>
__device__ __forceinline__ void load_raw_shifted(const T* group, const ShiftedBounds& b, int nt, int t,
                                                 uint4 (&raw)[kN]) {
  constexpr int kVec = RowsTraits<T>::kVec;
  const int stride = nt * kVec;
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    const int o = t * kVec + s * stride;
    raw[s] = o + kVec > b.lo && o < b.hi ? load16(group + o) : neg_inf_vector<T>();
  }
}

// Unpacks the raw vectors of load_raw_shifted, the elements outside the row ([b.lo, b.hi)) -inf.
template <typename T, int kN>
__device__ __forceinline__ void unpack_shifted(const uint4 (&raw)[kN], const ShiftedBounds& b, int nt, int t,
                                               acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  using A = acc_t<T>;
  constexpr int kVec = RowsTraits<T>::kVec;
  const int stride = nt * kVec;
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    const int o = t * kVec + s * stride;
    VecIO<T>::unpack(raw[s], v[s]);
    if (o < b.lo || o + kVec > b.hi) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[s][j] = b.inside(o + j) ? v[s][j] : neg_inf<A>();
    }
  }
}

// A whole row (first = 0) on the memory's grid spans ceil((d + len) / kVec) granules, one more than its own vectors
// (ceil(len / kVec)) where d + len passes their end. A team that holds only the row's own vectors leaves that last
// granule (group offset `past`, the team's slots end there) out: lane 0 reads it whole (its 16 bytes lie in a granule
// that holds an element of the row, as load_group_shifted's edges do) and `count` of its first elements lie in the row,
// at most d: they fit the places of lane 0's first vector that lie before the row (-inf there). Every other lane reads
// nothing (count <= 0, the raw vector -inf). Why: the extra granule doubled the team's slots on rows of a power of two
// vectors less one element (fp32 65536x127: 33 of 64, 23.2 us cold against 65536x128's 12.8, H200 s86 call 1).
template <typename T> struct FoldedGranule {
  uint4 raw;
  int count;
  FoldedGranule() = default;
  __device__ __forceinline__ FoldedGranule(const T* group, const ShiftedBounds& b, int past, int t)
      : count(count_of(b, past, t)) {
    raw = count > 0 ? load16(group + past) : neg_inf_vector<T>();
  }
  // The row elements at the granule's head that lane t folds in (lane 0 only; <= d): also where store_row_folded and
  // store_raw_shifted (packed_store.cuh) put them back.
  static __device__ __forceinline__ int count_of(const ShiftedBounds& b, int past, int t) {
    return t == 0 ? b.hi - past : 0;
  }
};

template <typename T, int kN>
__device__ __forceinline__ void load_group_shifted(const T* row, int64_t len, int64_t first, int d, int nt, int t,
                                                   acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  const ShiftedBounds b(len, first, d);
  const T* group = row + (first - d);  // 16-byte aligned
  // Every load is issued before any is used: with the unpack inside a per-vector branch (element-wise loads
  // for the edge vectors) each vector's load waited before the next one issued (s59: bf16 2000x10007 36 us
  // where the aligned 2000x10000 takes 24). An edge vector is read whole: its 16 bytes lie in one aligned
  // 16-byte granule that holds an element of the row, so the read stays on the row's pages; the elements
  // outside the row are replaced by -inf below and never stored.
  uint4 raw[kN];
  load_raw_shifted<T>(group, b, nt, t, raw);
  unpack_shifted<T>(raw, b, nt, t, v);
}

// A row held whole by a team of nt lanes, kN vectors a lane, on the memory's grid: load_group_shifted's layout
// (first = 0), and the granule past the team's slots, where the row spans one granule more than its own vectors
// (FoldedGranule), folded into the first lane's first vector. Logsumexp needs no order among a row's elements; softmax
// and log_softmax put the folded ones back in their places (store_row_folded).
template <typename T, int kN>
__device__ __forceinline__ void load_row_folded(const T* row, int64_t len, int d, int nt, int t,
                                                acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  constexpr int kVec = RowsTraits<T>::kVec;
  const ShiftedBounds b(len, 0, d);
  const T* group = row - d;  // 16-byte aligned
  uint4 raw[kN];
  load_raw_shifted<T>(group, b, nt, t, raw);  // every load before any is used (load_group_shifted says why)
  const FoldedGranule<T> past(group, b, nt * kN * kVec, t);
  unpack_shifted<T>(raw, b, nt, t, v);
  acc_t<T> e[kVec];
  VecIO<T>::unpack(past.raw, e);
#pragma unroll
  for (int j = 0; j < kVec; ++j) v[0][j] = j < past.count ? e[j] : v[0][j];
}

template <typename T, int kN>
__device__ __forceinline__ void store_group_shifted(T* row, int64_t len, int64_t first, int d, int nt, int t,
                                                    const acc_t<T> (&v)[kN][RowsTraits<T>::kVec], int live = kN) {
  constexpr int kVec = RowsTraits<T>::kVec;
  const ShiftedBounds b(len, first, d);
  const bool same_grid = misalignment(row) == d;
  T* group = row + (first - d);
  const int stride = nt * kVec;
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    if (s >= live) break;
    const int o = t * kVec + s * stride;
    if (same_grid && o >= b.lo && o + kVec <= b.hi) {
      store16(group + o, VecIO<T>::pack(v[s]));
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if (b.inside(o + j)) group[o + j] = from_acc<T>(v[s][j]);
      }
    }
  }
}

// The store of load_row_folded's row: store_group_shifted's, then lane 0 writes the folded elements (its first
// vector's places before the row) back to the granule past the team's slots, element by element.
template <typename T, int kN>
__device__ __forceinline__ void store_row_folded(T* row, int64_t len, int d, int nt, int t,
                                                 const acc_t<T> (&v)[kN][RowsTraits<T>::kVec]) {
  constexpr int kVec = RowsTraits<T>::kVec;
  store_group_shifted<T, kN>(row, len, 0, d, nt, t, v);
  const int past = nt * kN * kVec;
  const int count = FoldedGranule<T>::count_of(ShiftedBounds(len, 0, d), past, t);
  T* group = row - d;  // element o of the group is the row's o - d, whatever grid the output row lies on
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if (j < count) group[past + j] = from_acc<T>(v[0][j]);
  }
}

// The per-element epilogue of softmax / log_softmax once the row's (m, d) is known, for elements of type T. `ref` is
// the max the thread's cached terms were taken against: softmax y = rescale(x, ref) * scale, log_softmax
// y = x - (m + log d) (kSplitShift: (x - m) - log d). kFastRecip (float only) takes 1 / d as __fdividef(1, d): within
// 2 ulp, since d >= 1 whenever it is finite (the max element contributes exp(0) = 1) and NaN when poisoned. The warp
// kernel uses it for 16-bit outputs, whose 8-11 bits cannot see it, because the IEEE division's range checks sit on
// the critical path of one-wave calls (bf16 65536x128: ~0.15 us of a 10.3 us kernel, s15). The other kernels divide
// once per item, and the same change there moved the fp32 pipelined kernel both ways (1024x32768 8 % slower,
// 8x4194304 3 % faster: NOTES, "s15 ab").
// kSplitShift: where the output keeps the accumulator's precision (fp32, fp64), log_softmax is (x - m) - log d, two
// subtractions, as torch computes it. m + log d rounded to one value is off by up to half an ulp of m, which for
// |m| in the thousands is ~1e-4 absolute, ~1e-5 relative to outputs of magnitude ~10 (H200, NOTES "s99 calls 1, 3":
// fp32 rows offset by 300 read 5-9e-7 against torch's 2.6e-8, by 3000 over the tests' 1e-6); x - m is exact for x
// within a factor of 2 of m. 16-bit outputs keep 8 or 11 bits, far coarser than that rounding: one subtraction.
// Acc: the accumulator, acc_t<T> but in the column kernel (fp32 columns accumulate in fp64).
// kSumLog (fp64): log d by log_sum (common/log_sum.h), a shorter serial chain than CUDA's log, within 1 ulp as it is;
// the warp kernels take it for log_softmax rows on compile-time whole warps of 2 vectors a lane (softmax_rows.cuh),
// where the row's logarithm waits on the sum's shuffles with nothing beside it. H200, s107 call 1, us cold / streamed,
// CUDA's log -> log_sum (torch): 65536x105 34.5-34.7 / 31.8 -> 32.5-33.0 / 30.7-30.8 (30.9-31.9 / 29.1-29.3), x113
// 34.2-34.4 / 32.0-32.2 -> 32.8-33.0 / 31.2-31.4 (31.5-32.0 / 31.8-31.9), x127 35.6-36.2 / 34.4 -> 34.3-35.6 /
// 34.9-35.0 (34.3-34.6 / 35.4-35.6), 32768x127 20.5-20.8 / 18.2-18.3 -> 19.2-20.4 / 18.6-18.7. At 4 vectors a lane
// ptxas spilled 12 bytes with it and it lost (65536x151 45.4-45.9 / 42.8-42.9 -> 46.5-46.8 / 44.5-44.6); on 16 lanes
// (two rows a warp share the chain) 65536x97 lost 0.6 us streamed (s104 call 8, s106 call 2).
template <typename T, bool kFastRecip = false, typename Acc = acc_t<T>, bool kSumLog = false> struct Epilogue {
  using A = Acc;
  static constexpr bool kSplitShift = sizeof(T) == sizeof(A);
  bool softmax;
  A scale;
  A shift;     // log_softmax: m + log d (kSplitShift: m)
  A shift_lo;  // log_softmax with kSplitShift: log d; else 0
  __device__ __forceinline__ Epilogue(SoftmaxOutput out, OnlineState<A> row, A ref) {
    static_assert(!kFastRecip || std::is_same_v<A, float>, "the fast reciprocal is float-only");
    const OnlineState<A> s = poison_infinite_max(row);
    softmax = out == SoftmaxOutput::Softmax;
    if constexpr (kFastRecip) {
      scale = softmax ? rescale(ref, s.m) * __fdividef(A(1), s.d) : A(0);
    } else {
      scale = softmax ? rescale(ref, s.m) / s.d : A(0);
    }
    static_assert(!kSumLog || std::is_same_v<A, double>, "log_sum is fp64");
    const auto log_d = [](A d) {
      if constexpr (kSumLog) {
        return log_sum(d);
      } else {
        return log_of(d);
      }
    };
    shift = softmax ? A(0) : kSplitShift ? s.m : s.m + log_d(s.d);
    shift_lo = softmax || !kSplitShift ? A(0) : log_d(s.d);
  }
  __device__ __forceinline__ A log_out(A x) const { return kSplitShift ? (x - shift) - shift_lo : x - shift; }
  // x is the input element; for softmax the caller may pass the cached term via apply_term instead.
  __device__ __forceinline__ A apply(A x, A ref) const { return softmax ? rescale(x, ref) * scale : log_out(x); }
  __device__ __forceinline__ A apply_term(A term_or_x) const {
    return softmax ? term_or_x * scale : log_out(term_or_x);
  }
  // The same with the output known at compile time: loops that branch on the output once per item instead
  // of selecting per element (the pipelined kernel's 4-warp role ran bf16 rows 1.2x slower with the select).
  template <bool kSoftmax> __device__ __forceinline__ A apply_term_as(A term_or_x) const {
    return kSoftmax ? term_or_x * scale : log_out(term_or_x);
  }
};

// cp.async (sm_80+): a 16-byte global -> shared copy that bypasses registers and L1, so a thread can have
// many in flight while it works on its register-cached vectors.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = load16(gmem);
#endif
}
// Waits for this thread's copies; they are then visible to this thread (each thread reads only its own).
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace softmax
}  // namespace flash_attn_ext
