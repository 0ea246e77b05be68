#pragma once
// FlashAttention forward on Hopper tensor cores (wgmma, sm_90a) for fp16 and bf16. Same block grid, GQA
// row packing, causal limits and numerics as the mma.sync kernel (attention_fwd_kernel.cuh); what changes
// is the MMA and the data movement: each consumer warpgroup issues m64 x kBlockN x 16 (S = Q K^T, both
// operands from shared memory) and m64 x kHeadDim x 16 (O += P V, P from registers) instructions, which read
// their operands straight from shared memory instead of through ldmatrix into every warp, and K/V tiles
// arrive by bulk tensor copies (TMA) that a producer warpgroup issues ahead of them.
#include <cuda.h>

#include <cmath>

#include "attention/attention_params.h"
#include "attention/attention_sm90_traits.cuh"
#include "attention/attention_tile_coords.cuh"
#include "attention/mma_sm80.cuh"
#include "attention/wgmma_sm90.cuh"
#include "attention/wgmma_sm90_ops.cuh"
#include "common/fast_math.cuh"
#include "common/grid_dependency.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"

namespace flash_attn_ext {
namespace attention_fwd_sm90 {

using attention_fwd::BlockCoords;
using attention_fwd::block_coords;
using attention_fwd::key_limit;
using attention_fwd::lse_index;
using attention_fwd::packed_position;
using attention_fwd::packed_row_offset;

// The launcher's tensor maps (attention_fwd_sm90_launch.cuh) are (head dim, group, seqlen, kv heads, batch):
// a box of 64 columns x group x rows / group positions, of kv head `head`, is `rows` packed rows of Q or O (row
// r = position r / group of query head head * group + r % group), or of K or V (group 1) `rows` keys.

// One bulk tensor copy (TMA) of a box at column `col`, position `pos`, (head, batch) into one swizzle atom;
// completes on `bar` with the box's bytes (positions past the sequence and columns past the head dim arrive
// as zeros).
__device__ __forceinline__ void tma_load_box(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int col, int pos,
                                             int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, 0, %4, %5, "
      "%6}], [%2];\n" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(col), "r"(pos), "r"(head), "r"(batch)
      : "memory");
}

// One bulk tensor store (TMA) of a box of O at column `col`, position `pos`, (head, batch), from a swizzle
// atom's rows (positions past Sq and columns past the head dim are not written).
__device__ __forceinline__ void tma_store_box(const CUtensorMap* map, const void* smem_src, int col, int pos, int head,
                                              int batch) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, 0, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(smem_src)), "r"(col), "r"(pos), "r"(head), "r"(batch)
               : "memory");
}
// The store's completion group, and the wait until every store of this thread has read its shared memory.
__device__ __forceinline__ void bulk_commit_and_wait_read() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// (Named barriers, common/named_barrier.cuh: consumer warpgroup wg orders its own Q load before its MMAs on barrier
// 1 + wg.)

// Rows [row_begin, row_begin + kRows) of the block's Q tile (packed: row r = query r / group of head
// kv_head * group + r % group, so each chunk has its own address), by cp.async from kThreadsUsed threads
// (`thread` in 0..kThreadsUsed-1), into the 128-byte-swizzled layout of wgmma_sm90.cuh: chunk i goes to
// position i % 8 of row (i / 8) % kRows of atom i / (8 kRows), which holds chunk (i % 8) ^ (row % 8) of that
// atom (a warp writes whole 128-byte row segments). Rows past the end and columns past the head dim are zeros.
template <typename Traits, int kRows, int kThreadsUsed>
__device__ __forceinline__ void load_q_rows(unsigned char* sQ, const AttentionParams& p, const BlockCoords& bc,
                                            int m0, int row_begin, int thread) {
  using T = typename Traits::T;
  const T* gQ = static_cast<const T*>(p.q) + bc.batch * p.q_batch_stride;
  constexpr int kChunks = kRows * Traits::kChunksPerRow;
#pragma unroll
  for (int it = 0; it < (kChunks + kThreadsUsed - 1) / kThreadsUsed; ++it) {
    const int i = thread + it * kThreadsUsed;
    if (kChunks % kThreadsUsed != 0 && i >= kChunks) break;
    const int atom = i / (8 * kRows), row = row_begin + (i / 8) % kRows, pos = i % 8;
    const int col = (atom * 8 + (pos ^ (row % 8))) * 8;
    const int r = m0 + row;
    const bool valid = r < p.packed_rows && col < p.head_dim;
    const T* src = valid ? gQ + packed_row_offset(p, bc.kv_head, r, p.q_head_stride, p.q_row_stride) + col : gQ;
    cp_async_16(sQ + atom * Traits::kBlockM * 128 + row * 128 + pos * 16, src, valid);
  }
}

// Online softmax of one S tile in log2 units for this thread's two rows (accumulator layout: s[4j + 2h + e]
// is row h, key col0 + 8j + e): scale, mask keys at or past the row's limit (kMask), update the running max
// and sum, S <- P = exp2(S - max). Returns whether O must be rescaled, by alpha, before this tile's P V: the
// same answer for the whole warp (always true without kLagged).
// kLagged: a row's max moves only when the row has seen a score more than kMaxLag (log2 units) above it;
// otherwise the row keeps its max and alpha is 1. The max a row keeps is a reference, not the true max: O, the
// sum and lse all use the same one, so the result is exact, and P stays below 2^kMaxLag (fp32 sums and 16-bit
// P hold that). After a row's first tiles its max rarely rises that much, so in most tiles no row of a warp
// moves and the warp skips the kHeadDim / 2 multiplies of O (a branch it takes together; FlashAttention 4's
// lagged rescale). Where some row moved, the others multiply by 1: each row's result depends on its own
// scores only. Without kLagged every row takes its true max in every tile.
// kRawMax (unmasked tiles only): the max is taken over the raw scores (their min for a negative scale) and
// scaled once, and each exponent is one FFMA, exp2(s * scale - max), where the scaled form spends an FMUL per
// score before the max and an FADD after it. The running max is the same number either way (rounding is
// monotonic), so tiles of both forms mix. Masked tiles keep the scaled form: a masked -inf times a negative
// or zero scale would not stay -inf. Used at head dim 128 only: H100, bf16, prefill S = 512-16k, D = 128
// +2-7.5 % TFLOP/s, D = 64 1-4 % slower (NOTES "s47 call 4"; registers and spills unchanged at both).
constexpr float kMaxLag = 8.f;
template <int kBlockN, bool kMask, bool kRawMax, bool kLagged>
__device__ __forceinline__ bool online_softmax_tile(float (&s)[kBlockN / 2], float (&row_max)[2], float (&row_sum)[2],
                                                    float (&alpha)[2], float scale_log2, int col0,
                                                    const int (&limit)[2]) {
  static_assert(!(kMask && kRawMax), "masked tiles are scaled first");
  bool moved[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
    if constexpr (kRawMax) {
      if (scale_log2 >= 0.f) {
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) mx = fmaxf(mx, s[4 * j + 2 * h + e]);
      } else {
        mx = INFINITY;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) mx = fminf(mx, s[4 * j + 2 * h + e]);
      }
      mx *= scale_log2;
    } else {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = s[4 * j + 2 * h + e] * scale_log2;
          if (kMask && col0 + 8 * j + e >= limit[h]) x = -INFINITY;
          s[4 * j + 2 * h + e] = x;
          mx = fmaxf(mx, x);
        }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    const float m_new = fmaxf(row_max[h], mx);
    if constexpr (kLagged) {
      // A row that keeps its max gets alpha 1: its O and sum times 1 are unchanged. A moved max is finite, and
      // the first one a row takes (from -inf) gives alpha 0.
      moved[h] = m_new > row_max[h] + kMaxLag;
      alpha[h] = moved[h] ? fast_exp2(row_max[h] - m_new) : 1.f;
      if (moved[h]) row_max[h] = m_new;
    } else {
      alpha[h] = fast_exp2(row_max[h] - (m_new == -INFINITY ? 0.f : m_new));
      row_max[h] = m_new;
    }
    // A row that has seen only masked keys keeps m = -inf; exponentiate against 0 so that exp2(-inf - m) is
    // 0 rather than NaN.
    const float m_use = row_max[h] == -INFINITY ? 0.f : row_max[h];
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pr = kRawMax ? fast_exp2(fmaf(s[4 * j + 2 * h + e], scale_log2, -m_use))
                                 : fast_exp2(s[4 * j + 2 * h + e] - m_use);
        s[4 * j + 2 * h + e] = pr;
        sum += pr;
      }
    row_sum[h] = row_sum[h] * alpha[h] + sum;
  }
  if constexpr (kLagged) return __any_sync(0xffffffff, moved[0] || moved[1]);
  return true;
}

// Who writes O out of the Q buffer it is staged in (the launcher's choice).
enum class OStore : int {
  kLanes,        // every lane of a warp stores 16-byte chunks of the warp's 16 rows
  kWarpTma,      // each warp issues bulk tensor stores of its 16 rows (O map boxes of 16 rows)
  kProducerTma,  // Traits::kOByProducer: the producer thread stores the whole tile (boxes of kBlockM rows)
};

// Work units of a persistent launch (for_each_item): items, or pairs of m blocks per (batch, kv head). The
// launcher sizes the grid from it too.
__host__ __device__ inline long long persistent_units(long long items, int m_blocks, bool paired) {
  return paired ? items / m_blocks * ((m_blocks + 1) / 2) : items;
}

// Divisors of the launch's item decoding, made on the host (FastDivmod): m blocks per (batch, kv head), and the
// pairs of them (for_each_item).
struct ItemDivisors {
  FastDivmod m_blocks, pairs_per_head;
};

// Runs body(item, local) for the block's work items, `local` counting them: item blockIdx.x alone, or
// (persistent) work units blockIdx.x, + gridDim.x, ... A unit is one item, or for causal attention the pair
// of m blocks (i, m_blocks - 1 - i) of one (batch, kv head): one long and one short item, so every pair is
// about the same work and blocks striding over pairs stay balanced. Item ids enumerate (m position, batch,
// kv head) with the m position fastest (block_coords). Kept apart so the one-item kernel compiles as a
// straight line.
template <bool kPersistent, typename Body>
__device__ __forceinline__ void for_each_item(long long items, const ItemDivisors& div, bool paired, Body&& body) {
  if constexpr (kPersistent) {
    const int m_blocks = static_cast<int>(div.m_blocks.divisor);
    const int pairs_per_head = static_cast<int>(div.pairs_per_head.divisor);
    const long long units = persistent_units(items, m_blocks, paired);
    int local = 0;
    for (long long unit = blockIdx.x; unit < units; unit += gridDim.x) {
      long long first = unit, second = -1;
      if (paired) {
        // A multiply-high where the unit fits (see block_coords).
        const long long head = unit < 0x80000000LL ? div.pairs_per_head.div(static_cast<uint32_t>(unit))
                                                   : unit / pairs_per_head;
        const long long head_first = head * m_blocks;
        const int i = static_cast<int>(unit - head * pairs_per_head);
        first = head_first + i;
        if (i != m_blocks - 1 - i) second = head_first + m_blocks - 1 - i;  // odd m_blocks: the middle is alone
      }
#pragma unroll 1
      for (int k = 0; k < 2; ++k) {
        if (k == 1 && second < 0) break;
        body(k == 0 ? first : second, local++);
      }
    }
  } else {
    body(static_cast<long long>(blockIdx.x), 0);
  }
}

// Shape: one work item per (m block of kBlockM = 64 * kWarpgroups packed query rows, batch, kv head); a block of
// kWarpgroups + 1 warpgroups takes one item, or (kPersistent) the items of work units blockIdx.x, + gridDim.x, ...
// (for_each_item). Warpgroup 0 is the producer: one thread streams K and V tiles into two rings of kStages
// shared-memory tiles by bulk tensor copies (TMA), each stage with a "full" barrier (copies landed) and an "empty"
// barrier (all consumers done with it); the rings and their phases run on across items (`slot` counts the tiles
// streamed so far), so the next item's first tiles arrive while the consumers finish the current one. A persistent
// block also double-buffers Q where shared memory allows (Traits::kQBuffers): the next item's Q loads while the
// consumers work on the current one, by cp.async from warps 1-3 of the producer, or (Traits::kQByTma, two or three
// consumer warpgroups) by bulk tensor copies from the producer thread ahead of the item's K/V tiles (with one Q
// buffer, behind its first K/V tiles); with two such buffers (Traits::kOByProducer) that thread also stores each
// item's O, which the consumers leave in the item's Q buffer, before it refills the buffer. The other warpgroups are
// consumers: warpgroup 1 + w owns rows 64w..64w+63 and, inside it, warp v rows 16v..16v+15 (thread: rows 16v + lane/4
// and + 8, as in the mma.sync C layout); each computes S = Q K^T for its rows, the online softmax in registers, and
// O += P V (with Traits::kPvUnderSoftmax, the P V of one tile under the softmax of the next). Consumers never meet at
// a block barrier, so one's softmax can run under another's MMAs.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    attention_fwd_sm90_kernel(const AttentionParams p, const __grid_constant__ CUtensorMap q_map,
                              const __grid_constant__ CUtensorMap k_map,
                              const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap o_map,
                              const OStore o_store, const ItemDivisors div) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  begin_dependent_grid();
  using T = typename Traits::T;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  constexpr bool kPersistent = Traits::kPersistent;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // swizzle atoms: 1024-aligned
  unsigned char* sQ = smem;                                   // kQBuffers x (kBlockM, kHeadDim)
  unsigned char* sK = sQ + Traits::kQBuffers * Traits::kQBytes;  // ring of kStages (kBlockN, kHeadDim) K tiles
  unsigned char* sV = sK + kStages * Traits::kTileBytes;      // ring of kStages (kBlockN, kHeadDim) V tiles
  uint64_t* full_k = reinterpret_cast<uint64_t*>(sV + kStages * Traits::kTileBytes);
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty_k = full_v + kStages;
  uint64_t* empty_v = empty_k + kStages;
  uint64_t* q_full = empty_v + kStages;  // persistent only: Q buffer landed / free again
  uint64_t* q_empty = q_full + Traits::kQBuffers;
  constexpr int kQLoaders = 96;  // persistent: producer warps 1-3 load Q

  const int m_blocks = static_cast<int>(div.m_blocks.divisor);  // (p.packed_rows + kBlockM - 1) / kBlockM
  const long long items = static_cast<long long>(m_blocks) * p.batch * p.heads_kv;
  const int positions_per_block = packed_position(p, kBlockM);  // whole ones where Q goes by TMA
  // Key tiles of the item starting at packed row m0: up to the largest causal limit of its rows. All
  // consumers run every tile: a wgmma under a branch the compiler cannot prove warpgroup-uniform gets
  // serialized (ptxas C7520), which costs far more than the at most one fully masked tile the first computes.
  auto key_tiles = [&](int m0) {
    const int n_end = key_limit(p, min(m0 + kBlockM, p.packed_rows) - 1);
    return n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;
  };

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbarrier_init(full_k + i, 1);  // the producer's arrival (with the bytes to expect)
      mbarrier_init(full_v + i, 1);
      mbarrier_init(empty_k + i, 4 * Traits::kWarpgroups);  // one arrival per consumer warp
      mbarrier_init(empty_v + i, 4 * Traits::kWarpgroups);
    }
    if constexpr (kPersistent) {
      for (int i = 0; i < Traits::kQBuffers; ++i) {
        // each loader's cp.async arrival, or the producer thread's (with the bytes to expect)
        mbarrier_init(q_full + i, Traits::kQByTma ? 1 : kQLoaders);
        mbarrier_init(q_empty + i, 4 * Traits::kWarpgroups);
      }
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < 128) {  // producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Traits::kProducerRegs));
    if (threadIdx.x == 0) {
      int slot = 0;  // ring slot of the next tile: stage slot % kStages, use slot / kStages
      // `rows` packed rows from position `pos` of (bc.kv_head, bc.batch), every swizzle atom of them, into `dst`;
      // completes on `bar` with their bytes.
      auto load_tile = [&](unsigned char* dst, int rows, const CUtensorMap* map, uint64_t* bar, int pos,
                           const BlockCoords& bc) {
        mbarrier_arrive_expect_tx(bar, rows * Traits::kRowBytes);
#pragma unroll
        for (int a = 0; a < Traits::kAtoms; ++a) {
          tma_load_box(dst + a * rows * 128, map, bar, a * 64, pos, bc.kv_head, bc.batch);
        }
      };
      // Tile `tile` of K or V into its ring stage, once the consumers have released the stage's previous use.
      auto fill = [&](unsigned char* ring, const CUtensorMap* map, uint64_t* full, uint64_t* empty,
                      const BlockCoords& bc, int tile) {
        const int stage = slot % kStages, use = slot / kStages;
        if (use > 0) mbarrier_wait(empty + stage, (use - 1) & 1);
        load_tile(ring + stage * Traits::kTileBytes, kBlockN, map, full + stage, tile * kBlockN, bc);
      };
      // OStore::kProducerTma: the items whose O the consumers have staged, or will stage, in the two Q buffers
      // (the newer in `staged_new`); each leaves by bulk stores when its buffer is next refilled, the last two at
      // the end.
      long long staged_old = -1, staged_new = -1;
      int items_done = 0;
      auto store_o = [&](long long item, int buf) {
        const BlockCoords sb = block_coords(p, div.m_blocks, item);
        const int pos = sb.m_block * positions_per_block;
#pragma unroll
        for (int a = 0; a < Traits::kAtoms; ++a) {
          tma_store_box(&o_map, sQ + buf * Traits::kQBytes + a * kBlockM * 128, a * 64, pos, sb.kv_head, sb.batch);
        }
        bulk_commit_and_wait_read();  // the buffer may be refilled once this returns
      };
      for_each_item<kPersistent>(items, div, p.causal, [&](long long item, int local) {
        const BlockCoords bc = block_coords(p, div.m_blocks, item);
        const int n_tiles = key_tiles(bc.m_block * kBlockM);
        int tile = 0;
        items_done = local + 1;
        if (kPersistent && Traits::kQBuffers == 1 && n_tiles > 0) {
          // One Q buffer: it frees only when the current item's epilogue is done, so the item's first K and V
          // tiles go out before the producer waits for it, to land under that epilogue.
          fill(sK, &k_map, full_k, empty_k, bc, 0);
          fill(sV, &v_map, full_v, empty_v, bc, 0);
          ++tile, ++slot;
        }
        if constexpr (Traits::kQByTma) {
          const int buf = local % Traits::kQBuffers, use = local / Traits::kQBuffers;
          if (use > 0) {
            mbarrier_wait(q_empty + buf, (use - 1) & 1);
            if (Traits::kOByProducer && o_store == OStore::kProducerTma) store_o(staged_old, buf);
          }
          staged_old = staged_new;
          staged_new = item;
          load_tile(sQ + buf * Traits::kQBytes, kBlockM, &q_map, q_full + buf, bc.m_block * positions_per_block, bc);
        }
        // K_j, then V_j: V_j is used one step after K_j, and its stage frees one step later too.
        for (; tile < n_tiles; ++tile, ++slot) {
          fill(sK, &k_map, full_k, empty_k, bc, tile);
          fill(sV, &v_map, full_v, empty_v, bc, tile);
        }
      });
      if (Traits::kOByProducer && o_store == OStore::kProducerTma) {
        for (int l = max(items_done - 2, 0); l < items_done; ++l) {
          mbarrier_wait(q_empty + l % 2, (l / 2) & 1);
          store_o(l == items_done - 1 ? staged_new : staged_old, l % 2);
        }
      }
    } else if (kPersistent && !Traits::kQByTma && threadIdx.x >= 32) {
      for_each_item<kPersistent>(items, div, p.causal, [&](long long item, int local) {
        const BlockCoords bc = block_coords(p, div.m_blocks, item);
        const int buf = local % Traits::kQBuffers, use = local / Traits::kQBuffers;
        if (use > 0) mbarrier_wait(q_empty + buf, (use - 1) & 1);
        load_q_rows<Traits, kBlockM, kQLoaders>(sQ + buf * Traits::kQBytes, p, bc, bc.m_block * kBlockM, 0,
                                                threadIdx.x - 32);
        cp_async_mbarrier_arrive_noinc(q_full + buf);
      });
    }
  } else {  // consumer warpgroups
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Traits::kConsumerRegs));
    const int wg = threadIdx.x / 128 - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    int slot0 = 0;  // ring slot of the current item's first tile
    // Traits::kPingPong: the two consumer warpgroups issue their groups of MMAs in turns, each group between
    // my_turn (named barrier 3 + wg: the other has issued its group) and other_turn (its barrier). The tensor
    // cores then run one warpgroup's group before the other's instead of interleaving them, so each gets its S
    // back sooner and its softmax runs under the other's MMAs. The last other_turn of a block is never waited
    // for, which a barrier allows.
    auto my_turn = [&] {
      if constexpr (Traits::kPingPong) named_barrier_sync(3 + wg, 256);
    };
    auto other_turn = [&] {
      if constexpr (Traits::kPingPong) named_barrier_arrive(3 + (wg ^ 1), 256);
    };
    if (Traits::kPingPong && wg == 1) named_barrier_arrive(3, 256);  // warpgroup 0 goes first

    auto wait_full = [&](uint64_t* ring, int slot) { mbarrier_wait(ring + slot % kStages, (slot / kStages) & 1); };
    auto release = [&](uint64_t* ring, int slot) {  // this warp is done with the slot's stage
      if (lane == 0) mbarrier_arrive(ring + slot % kStages);
    };

    for_each_item<kPersistent>(items, div, p.causal, [&](long long item, int local) {
      const BlockCoords bc = block_coords(p, div.m_blocks, item);
      const int m0 = bc.m_block * kBlockM;
      const int n_tiles = key_tiles(m0);
      const int wg_row0 = m0 + 64 * wg;
      const int wg_unmasked_end = max(key_limit(p, wg_row0), 0);  // tiles below it need no mask
      const int row0 = wg_row0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8
      const int limit[2] = {key_limit(p, row0), key_limit(p, row0 + 8)};
      const int qbuf = local % Traits::kQBuffers;
      unsigned char* sQb = sQ + qbuf * Traits::kQBytes;

      float o[kHeadDim / 2];  // O accumulator (wgmma accumulator layout)
      float row_max[2] = {-INFINITY, -INFINITY};  // running max of scaled scores, log2 units
      float row_sum[2] = {0.f, 0.f};              // this thread's share of the running sum; quad-reduced at the end
#pragma unroll
      for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;

      if constexpr (kPersistent) {
        mbarrier_wait(q_full + qbuf, (local / Traits::kQBuffers) & 1);
        // Q, written by the loaders' cp.async, visible to this warpgroup's wgmma (a bulk copy's needs no fence)
        fence_async_proxy();
      }
      // Software pipeline (Traits::kPvUnderSoftmax): step j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}
      // together, then computes the softmax of S_j while the tensor cores run P_{j-1} V_{j-1}; O is rescaled
      // once that MMA is done. Otherwise P_{j-1} V_{j-1} is issued as soon as P_{j-1} is packed, S_j behind it,
      // and the softmax of S_j starts when both are done.
      if (n_tiles > 0) {
        if constexpr (!kPersistent) {
          load_q_rows<Traits, 64, 128>(sQb, p, bc, m0, 64 * wg, threadIdx.x % 128);
          cp_async_commit();
          cp_async_wait<0>();
          fence_async_proxy();  // this warpgroup's Q, written by cp.async, visible to its wgmma
          named_barrier_sync(1 + wg, 128);
        }
        // This warpgroup's 64 rows of Q start 64 * 128 bytes into each atom.
        const uint64_t q_desc = sm90::smem_desc_sw128(smem_addr(sQb) + wg * 64 * 128, 16, 1024);
        uint32_t a[Traits::kPSteps][4];  // P_{j-1}: A operand of O += P V, in the mma.sync A layout

        auto issue_s = [&](float (&s)[kBlockN / 2], int slot) {  // S = Q K^T, K in ring slot `slot`
          const uint64_t k_desc =
              sm90::smem_desc_sw128(smem_addr(sK + (slot % kStages) * Traits::kTileBytes), 16, 1024);
#pragma unroll
          for (int ks = 0; ks < Traits::kKSteps; ++ks) {  // k16 step ks: atom ks / 4, 32 bytes per step inside it
            sm90::Wgmma<T, kBlockN>::ss(s, sm90::desc_advance(q_desc, (ks / 4) * kBlockM * 128 + (ks % 4) * 32),
                                        sm90::desc_advance(k_desc, (ks / 4) * kBlockN * 128 + (ks % 4) * 32),
                                        ks > 0);
          }
          sm90::warpgroup_commit();
        };
        auto issue_pv = [&](int slot) {  // O += P V, V in ring slot `slot`
          const uint64_t v_desc =
              sm90::smem_desc_sw128(smem_addr(sV + (slot % kStages) * Traits::kTileBytes), kBlockN * 128, 1024);
#pragma unroll
          for (int kk = 0; kk < Traits::kPSteps; ++kk) {
            sm90::Wgmma<T, kHeadDim>::rs(o, a[kk], sm90::desc_advance(v_desc, kk * 2048), true);  // 16 keys per step
          }
          sm90::warpgroup_commit();
        };
        // Online softmax of S_tile. 128-key tiles apply the key mask only where the tile reaches a row's limit
        // (a branch the warpgroup takes together, around no wgmma): the masked form costs a compare and a
        // select per score, which ncu showed as the busiest pipe (ALU 47 %, above the exponentials' 43 %) at
        // head dim 64. Shorter tiles (head dims above 128) are always masked: 64-key ones measured 4 % slower
        // with the branch.
        auto softmax = [&](float (&s)[kBlockN / 2], int tile, float (&alpha)[2]) {
          const int n0 = tile * kBlockN;
          if (kBlockN < 128 || n0 + kBlockN > wg_unmasked_end) {
            return online_softmax_tile<kBlockN, true, false, Traits::kLaggedMax>(s, row_max, row_sum, alpha,
                                                                                   p.scale_log2, n0 + 2 * t, limit);
          }
          return online_softmax_tile<kBlockN, false, kHeadDim == 128, Traits::kLaggedMax>(
              s, row_max, row_sum, alpha, p.scale_log2, n0 + 2 * t, limit);
        };
        // After the step's MMAs: O *= alpha where the softmax asked for it, and P (fp32 in s) packed into the A
        // operand of the next P V.
        auto rescale_and_pack = [&](const float (&s)[kBlockN / 2], const float (&alpha)[2], bool rescale) {
          if (rescale) {
#pragma unroll
            for (int j = 0; j < kHeadDim / 8; ++j) {
              o[4 * j] *= alpha[0];
              o[4 * j + 1] *= alpha[0];
              o[4 * j + 2] *= alpha[1];
              o[4 * j + 3] *= alpha[1];
            }
          }
#pragma unroll
          for (int kk = 0; kk < Traits::kPSteps; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) a[kk][e] = pack2<T>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
        };

        if constexpr (Traits::kPvUnderSoftmax) {
          {  // step 0: S_0 alone
            float s[kBlockN / 2], alpha[2];
            wait_full(full_k, slot0);
            my_turn();
            sm90::warpgroup_fence();
            issue_s(s, slot0);
            other_turn();
            sm90::warpgroup_wait<0>();
            release(empty_k, slot0);
            softmax(s, 0, alpha);
            rescale_and_pack(s, alpha, false);  // O is still zero
          }
          for (int tile = 1; tile < n_tiles; ++tile) {  // S_tile, and P V of tile - 1 under its softmax
            float s[kBlockN / 2], alpha[2];
            wait_full(full_k, slot0 + tile);
            wait_full(full_v, slot0 + tile - 1);
            my_turn();
            sm90::warpgroup_fence();
            issue_s(s, slot0 + tile);
            issue_pv(slot0 + tile - 1);
            other_turn();
            sm90::warpgroup_wait<1>();  // S done; P V may still run
            release(empty_k, slot0 + tile);
            const bool rescale = softmax(s, tile, alpha);
            sm90::warpgroup_wait<0>();  // P V done: O and the registers of P are free
            release(empty_v, slot0 + tile - 1);
            rescale_and_pack(s, alpha, rescale);
          }
          {  // last step: P V of the last tile
            wait_full(full_v, slot0 + n_tiles - 1);
            my_turn();
            sm90::warpgroup_fence();
            issue_pv(slot0 + n_tiles - 1);
            other_turn();
            sm90::warpgroup_wait<0>();
            release(empty_v, slot0 + n_tiles - 1);
          }
        } else {  // P V of tile - 1 leaves right before S_tile, and the warpgroup waits for both
          for (int tile = 0; tile < n_tiles; ++tile) {
            float s[kBlockN / 2], alpha[2];
            wait_full(full_k, slot0 + tile);
            if (tile == 0) my_turn();
            sm90::warpgroup_fence();
            issue_s(s, slot0 + tile);
            other_turn();
            sm90::warpgroup_wait<0>();  // S done, and P V of tile - 1: O and the registers of P are free
            release(empty_k, slot0 + tile);
            if (tile > 0) release(empty_v, slot0 + tile - 1);
            const bool rescale = softmax(s, tile, alpha);
            // Before the first tile O is still zero, so persistent forms skip that multiply (the one-item forms, whose
            // items are long, ran 1.5-3 % slower causal at S = 8k-16k with the branch; NOTES "s53 calls 7-8").
            rescale_and_pack(s, alpha, rescale && (!kPersistent || tile > 0));
            wait_full(full_v, slot0 + tile);
            my_turn();
            sm90::warpgroup_fence();
            issue_pv(slot0 + tile);
            if (tile + 1 == n_tiles) other_turn();
          }
          sm90::warpgroup_wait<0>();
          release(empty_v, slot0 + n_tiles - 1);
        }
      }
      slot0 += n_tiles;

      // Epilogue: O / l and lse = (m + log2 l) ln 2; a row that saw no key gets 0 and -inf. The reciprocal and the
      // log are one MUFU instruction each: 1.f / l and logf were ~120 of a consumer warp's ~540 instructions per
      // item at D = 64, causal, S = 512, where an item is 2.5 key tiles (ncu, NOTES "s53 call 6"); their error (an
      // ulp or two of fp32) is far under a 16-bit O's rounding. H100, bf16, interleaved against the kernel before
      // (with the first tile's skipped multiply, "s53 calls 7-8"): D = 64 +2.5-5.5 % at S <= 2k, D = 128 +1-3 %
      // at S <= 1k but 1 % slower causal at 512.
      float inv_sum[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = row_sum[h];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        inv_sum[h] = l == 0.f ? 0.f : fast_rcp(l);  // NaN inputs stay NaN
        const int r = row0 + 8 * h;
        if (t == 0 && r < p.packed_rows) {
          p.lse[lse_index(p, bc.batch, bc.kv_head, r)] =
              l == 0.f ? -INFINITY : (row_max[h] + fast_log2(l)) * attention_fwd::kLn2;
        }
      }

      // Stage this warp's 16 rows of O through its own rows of the Q buffer (swizzled: no bank conflicts
      // either way; no other warp reads them, and every wgmma reading them has completed), then write them
      // out (o_store): the producer thread's bulk stores of the whole tile once every warp has staged its rows
      // (the q_empty arrival), one bulk tensor store per 64 columns of the warp's rows (a group of query heads
      // that divides 16, so they are whole positions of the group), or 16-byte chunks from every lane.
      // Why the store: the lanes' chunk loop (64-bit address math per chunk) was a third of an epilogue of
      // ~480 instructions per warp, as long as a steady key tile (ncu, head dim 64, S = 512).
      const int warp_row = 64 * wg + 16 * warp;  // first row of this warp within the block
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
          *reinterpret_cast<uint32_t*>(sQb + sm90::sw128_offset(kBlockM, warp_row + g + 8 * h, j) + t * 4) =
              pack2<T>(o[4 * j + 2 * h] * inv_sum[h], o[4 * j + 2 * h + 1] * inv_sum[h]);
        }
      if (Traits::kOByProducer && o_store == OStore::kProducerTma) {
        fence_async_proxy();  // this lane's staged O before the producer's bulk stores read it
      } else if (o_store == OStore::kWarpTma) {
        fence_async_proxy();  // this lane's staged O before the bulk store reads it
        __syncwarp();
        if (lane == 0) {
#pragma unroll
          for (int a = 0; a < Traits::kAtoms; ++a) {
            tma_store_box(&o_map, sQb + a * kBlockM * 128 + warp_row * 128, a * 64, packed_position(p, m0 + warp_row),
                          bc.kv_head, bc.batch);
          }
          bulk_commit_and_wait_read();  // the Q buffer may be refilled (or the block exit) once this returns
        }
      } else {
        __syncwarp();
        T* gO = static_cast<T*>(p.out) + bc.batch * p.o_batch_stride;
#pragma unroll
        for (int it = 0; it < Traits::kAtoms * 4; ++it) {
          const int i = lane + 32 * it;  // atom i / 128, row (i / 8) % 16 of the warp, position i % 8
          const int row = warp_row + (i / 8) % 16;
          const int col = ((i / 128) * 8 + ((i % 8) ^ (row % 8))) * 8;
          const int r = m0 + row;
          if (r < p.packed_rows && col < p.head_dim) {
            T* dst = gO + packed_row_offset(p, bc.kv_head, r, p.o_head_stride, p.o_row_stride) + col;
            *reinterpret_cast<uint4*>(dst) =
                *reinterpret_cast<const uint4*>(sQb + (i / 128) * kBlockM * 128 + row * 128 + (i % 8) * 16);
          }
        }
      }
      if constexpr (kPersistent) {  // this warp's rows of the Q buffer are free for a later item's Q
        __syncwarp();
        if (lane == 0) mbarrier_arrive(q_empty + qbuf);
      }
    });
  }
#endif
}

}  // namespace attention_fwd_sm90
}  // namespace flash_attn_ext
