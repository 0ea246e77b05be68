#pragma once
// Launch of the wgmma (sm_90a) forward for one (dtype, head-dim tile); instantiated once per pair in
// csrc/attention/instantiations/ next to the mma.sync launchers. The kernel body exists only in the sm_90a
// code of a build whose arch list has 9.0a; the host dispatch calls this only then (attention_cuda.cu).
#include <c10/util/Exception.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "attention/attention_fwd_api.h"
#include "attention/attention_fwd_sm90.cuh"
#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "common/tensor_map.h"

namespace flash_attn_ext {

// A (head dim, group, seqlen, kv heads, batch) map of Q or O (group = query heads per kv head) or of K or V
// (group 1), element strides of a row, a head, a batch, in boxes of 64 columns x `box_rows` packed rows:
// box_rows / group positions of the whole group, which land in shared memory in packed-row order (position
// r / group of query head kv_head * group + r % group), 128-byte swizzled. False where the driver cannot
// describe it.
inline bool make_packed_rows_map(CUtensorMap* map, bool bf16, const void* base, const AttentionParams& p, int group,
                                 int seqlen, int64_t row_stride, int64_t head_stride, int64_t batch_stride,
                                 int box_rows) {
  const uint64_t dims[5] = {uint64_t(p.head_dim), uint64_t(group), uint64_t(seqlen), uint64_t(p.heads_kv),
                            uint64_t(p.batch)};
  const uint64_t strides[4] = {uint64_t(head_stride) * 2, uint64_t(row_stride) * 2, uint64_t(head_stride) * group * 2,
                               uint64_t(batch_stride) * 2};
  const uint32_t box[5] = {64, uint32_t(group), uint32_t(box_rows / group), 1, 1};
  return make_tensor_map_5d_sw128(map, bf16, base, dims, strides, box);
}

template <typename Traits>
bool launch_attention_fwd_sm90(const AttentionParams& p, cudaStream_t stream) {
  using T = typename Traits::T;
  TORCH_CHECK(p.num_splits == 1, "flash_attn_ext.attention: the sm90 kernel does not split keys");
  // Q by bulk tensor copies needs each tile to be whole positions of the group of query heads. Declined before
  // any map is encoded; the caller takes another form.
  if (Traits::kQByTma && Traits::kBlockM % p.group != 0) return false;
  constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;
  // K and V in boxes of kBlockN keys for the producer's bulk tensor copies.
  CUtensorMap k_map, v_map;
  if (!make_packed_rows_map(&k_map, kBf16, p.k, p, 1, p.seqlen_k, p.k_row_stride, p.k_head_stride, p.k_batch_stride,
                            Traits::kBlockN) ||
      !make_packed_rows_map(&v_map, kBf16, p.v, p, 1, p.seqlen_k, p.v_row_stride, p.v_head_stride, p.v_batch_stride,
                            Traits::kBlockN)) {
    return false;  // strides the copy engine cannot walk (e.g. broadcast heads): the caller falls back
  }
  // O by bulk tensor stores: of the whole tile from the producer thread (Traits::kOByProducer: boxes of kBlockM
  // rows, whole positions of the group as for Q), else of each warp's 16 rows where the group divides 16.
  // Otherwise, or when the driver cannot describe O, the lanes store it.
  using attention_fwd_sm90::OStore;
  CUtensorMap o_map = k_map;  // a placeholder the kernel does not read unless it stores O by bulk copies
  OStore o_store = OStore::kLanes;
  constexpr int kOBoxRows = Traits::kOByProducer ? Traits::kBlockM : 16;
  if (kOBoxRows % p.group == 0 && make_packed_rows_map(&o_map, kBf16, p.out, p, p.group, p.seqlen_q, p.o_row_stride,
                                                       p.o_head_stride, p.o_batch_stride, kOBoxRows)) {
    o_store = Traits::kOByProducer ? OStore::kProducerTma : OStore::kWarpTma;
  }
  CUtensorMap q_map = k_map;  // a placeholder the kernel does not read unless Traits::kQByTma
  if (Traits::kQByTma && !make_packed_rows_map(&q_map, kBf16, p.q, p, p.group, p.seqlen_q, p.q_row_stride,
                                               p.q_head_stride, p.q_batch_stride, Traits::kBlockM)) {
    return false;
  }
  auto kernel = &attention_fwd_sm90::attention_fwd_sm90_kernel<Traits>;
  constexpr int kSmem = static_cast<int>(Traits::kSmemBytes);
  allow_dynamic_smem(kernel, kSmem);
  const int64_t m_blocks = (p.packed_rows + Traits::kBlockM - 1) / Traits::kBlockM;
  int64_t blocks = m_blocks * p.batch * p.heads_kv;  // work items
  if constexpr (Traits::kPersistent) {
    // As many blocks as are resident at once (kMinBlocksPerSm per SM: the launch bounds hold the registers
    // and the traits assert the shared memory), each looping over work units.
    const int64_t resident =
        int64_t(Traits::kMinBlocksPerSm) * current_device_attribute(cudaDevAttrMultiProcessorCount);
    blocks = std::min<int64_t>(attention_fwd_sm90::persistent_units(blocks, static_cast<int>(m_blocks), p.causal),
                               resident);
  }
  TORCH_CHECK(blocks <= INT_MAX, "flash_attn_ext.attention: problem too large (", blocks, " thread blocks)");
  const attention_fwd_sm90::ItemDivisors div{FastDivmod(static_cast<uint32_t>(m_blocks)),
                                             FastDivmod(static_cast<uint32_t>((m_blocks + 1) / 2))};
  launch_kernel(kernel, static_cast<unsigned>(blocks), Traits::kThreads, kSmem, stream, LaunchKind::Plain, p, q_map,
                k_map, v_map, o_map, o_store, div);
  return true;
}

// Whether the wide form (three consumer warpgroups, 192-row items, one block per SM) should beat the narrow
// one (one consumer warpgroup, 64-row items, two blocks per SM), by an estimate of the waves of items over the
// SMs: the wide form runs 192 rows of an SM in `wide_cost` / 100 times a narrow wave, so it wins unless its
// coarser items cost more than that, as with short Sq (rows past the end) or few (batch, head) pairs (a last
// wave that leaves SMs idle). Fitted on the H100 (NOTES "s49 call 2", "s49 call 8"): 136 for one-item blocks
// (490 against 443 TFLOP/s at S = 8k-16k: 1.5 / 1.106), 125 for the persistent wide form against the narrow
// persistent one at S = 512-1k (327 against 300 TFLOP/s at 24 against 32 waves: 1.22, and 1.28 at 1k).
inline bool wide_waves_win(const AttentionParams& p, int wide_cost) {
  const int64_t sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  const int64_t heads = int64_t(p.batch) * p.heads_kv;
  const int64_t narrow_items = (p.packed_rows + 63) / 64 * heads, wide_items = (p.packed_rows + 191) / 192 * heads;
  const int64_t narrow_waves = (narrow_items + 2 * sms - 1) / (2 * sms), wide_waves = (wide_items + sms - 1) / sms;
  return wide_cost * wide_waves < 100 * narrow_waves;
}

template <typename T, int kHeadDim>
bool run_attention_fwd_sm90(const AttentionParams& p, cudaStream_t stream) {
  using Config = AttentionFwdSm90Config<T, kHeadDim>;
  const int64_t key_tiles = (int64_t(p.seqlen_k) + Config::kBlockN - 1) / Config::kBlockN;
  // The forms whose Q arrives by bulk tensor copies decline groups of query heads that do not divide their
  // tile (their launcher returns false before encoding any map), which take the forms after them.
  if constexpr (Config::kHasWide) {
    // Without a causal mask the wide form runs persistent at any key range. Causal calls take it from 4096
    // packed rows (positions times the group) and above 8 key tiles, a rule fitted to measurements: every row of
    // an item computes the key tiles up to the item's last row, and with fewer rows per head, or fewer key tiles
    // per item, the 192-row items' share of such masked work outweighs what the third warpgroup gains. H100, bf16,
    // causal, forms forced and interleaved (NOTES "s53 calls 1-2", "s54 calls 4 and 9"): against the
    // two-warpgroup persistent form +2-2.5 % at 4096 packed rows and 16-32 key tiles, +1.7-6 % at 8192 and 16-64;
    // 3-9 % slower at 4-8 key tiles (groups of 4 and 8 at S = 512-1k), 2.5-30 % below 4096 packed rows. Above 32
    // key tiles the one-item wide form won by 1-3.6 % until the items' divisions became multiply-highs (c9a70ab);
    // since, the persistent form wins there too: +2.8 % at S = 8k, +0.7-2 % at 16k.
    const bool wide_causal = p.causal && p.packed_rows >= 4096 && key_tiles > 8;
    if ((!p.causal || wide_causal) && key_tiles > 0 && wide_waves_win(p, 125) &&
        launch_attention_fwd_sm90<typename Config::WidePersistent>(p, stream)) {
      return true;
    }
  }
  // Head dim 64: causal calls only (without a mask it ran level with the forms here at S <= 1k and 6-11 % slower
  // at 2k-8k; NOTES "s50 calls 2-3").
  if ((kHeadDim != 64 || p.causal) && key_tiles <= Config::kPersistentMaxTiles &&
      launch_attention_fwd_sm90<typename Config::Persistent>(p, stream)) {
    return true;
  }
  if constexpr (Config::kHasNarrowPersistent) {
    if (key_tiles <= Config::kNarrowPersistentMaxTiles) {
      return launch_attention_fwd_sm90<typename Config::NarrowPersistent>(p, stream);
    }
  }
  if constexpr (Config::kHasWide) {
    // Long key ranges only: at most 8 tiles the persistent form wins, and causal items, which average half the
    // tiles, need twice as many (H100, bf16, D = 64: wide +4 % at S = 2k, narrow +1.5 % causal at 2k, even at
    // 4k; NOTES "s49 call 2").
    if (key_tiles > (p.causal ? 16 : 8) && wide_waves_win(p, 136)) {
      return launch_attention_fwd_sm90<typename Config::Wide>(p, stream);
    }
  }
  return launch_attention_fwd_sm90<typename Config::Traits>(p, stream);
}

}  // namespace flash_attn_ext

#define FAE_INSTANTIATE_ATTENTION_FWD_SM90(T, D) \
  template bool flash_attn_ext::run_attention_fwd_sm90<T, D>(const flash_attn_ext::AttentionParams&, cudaStream_t);
