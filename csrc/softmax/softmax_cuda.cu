// CUDA softmax, log_softmax and logsumexp: the kernel-choice heuristic (softmax_cuda_typed, all of it), the
// dtype dispatch and the CUDA registrations. Kernels: softmax_rows.cuh (row-cached, split-row),
// softmax_pipelined.cuh and softmax_dual.cuh (sm_90 rings of bulk copies), softmax_streaming.cuh (multi-pass),
// softmax_columns.cuh (dim not last); numerics: online_math.cuh.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/grid_dependency.cuh"
#include "common/kernel_launch.h"
#include "softmax/softmax_launch.h"
#include "softmax/softmax_plan.h"
#include "softmax/softmax_problem.h"

namespace flash_attn_ext {
namespace softmax {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}
// Grid-stride kernels take any grid; this keeps gridDim.x within its limit.
int grid_for(int64_t blocks) { return static_cast<int>(std::clamp<int64_t>(blocks, 1, int64_t(1) << 30)); }

// Partial (m, d) per work item, in the accumulator type; from the caching allocator, no synchronization.
template <typename T> at::Tensor partials_workspace(const at::Tensor& x, int64_t items) {
  return at::empty({2 * items}, x.options().dtype(std::is_same_v<T, double> ? at::kDouble : at::kFloat));
}

// A tag per launch for the float exchange (split_exchange.cuh): a bijective 32-bit mix of a process-wide
// launch count, so any 2^32 consecutive launches carry distinct tags, and tags are not small integers that
// an earlier tensor on the same memory may well have held.
uint32_t next_exchange_tag() {
  static std::atomic<uint32_t> launches{0};
  uint32_t h = launches.fetch_add(1, std::memory_order_relaxed);
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status;
  FAE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Zeroes n 16-byte words. Shape: any grid of kZeroThreads-thread blocks; thread i of the grid writes words i,
// i + grid threads, ... An early launch (kernel_launch.h): it waits for the kernel before it, and the split
// launch after it starts while it runs.
constexpr int kZeroThreads = 256;
__global__ void zero_words_kernel(uint4* words, int64_t n) {
  begin_dependent_grid();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    words[i] = make_uint4(0, 0, 0, 0);
  }
}

// Workspace of a split-row launch (split, pipelined, dual kernels): 16 bytes of partial per item
// (RowExchange), from the caching allocator. Float accumulators need nothing else: each launch's tag marks
// its own partials, so the eager path enqueues only the kernel. Under graph capture every replay would
// carry the same tag, so there zero_words_kernel zeroes the partials first (zero is never a published word).
// Double accumulators add one counter per row (128-byte aligned), which it zeroes on every launch. Why a
// kernel of our own: early-launched on both sides, it overlaps the kernels around it, where a memset node
// (what this was until session 35) ends one early-launch chain and starts another: bf16 split rows
// 59.2 -> 58.0 us streamed (NOTES "s35 call 1"); at::zeros, a fill kernel launched plainly, had cost ~2 us
// more per call than the memset (s17).
template <typename T> struct SplitWorkspace {
  at::Tensor buffer;
  RowExchange exchange{};
  SplitWorkspace(const at::Tensor& x, int64_t rows, int64_t items, cudaStream_t stream) {
    constexpr bool kCounted = std::is_same_v<acc_t<T>, double>;
    const int64_t part_bytes = round_up(16 * items, 128);
    const int64_t bytes = round_up(part_bytes + (kCounted ? rows * static_cast<int64_t>(sizeof(int)) : 0), 16);
    buffer = at::empty({bytes}, x.options().dtype(at::kByte));
    char* base = static_cast<char*>(buffer.data_ptr());
    exchange.partials = reinterpret_cast<uint64_t*>(base);
    if constexpr (kCounted) {
      exchange.counters = reinterpret_cast<int*>(base + part_bytes);
    } else {
      exchange.tag = next_exchange_tag();
    }
    if (kCounted || stream_capturing(stream)) {
      const int64_t words = bytes / 16;
      launch_kernel(zero_words_kernel, grid_for(std::min<int64_t>(ceil_div(words, kZeroThreads), 1024)),
                    kZeroThreads, 0, stream, LaunchKind::Plain, reinterpret_cast<uint4*>(base), words);
    }
  }
};

// The workspace of a launch whose rows are split into `chunks` (> 1), wired into its params (RowsParams or
// PipeParams); none for whole rows. Keep the result alive until the launch is enqueued.
template <typename T, typename Params>
std::optional<SplitWorkspace<T>> split_workspace(Params& params, const at::Tensor& x, int64_t rows, int chunks,
                                                 cudaStream_t stream) {
  std::optional<SplitWorkspace<T>> work;
  if (chunks > 1) {
    work.emplace(x, rows, rows * chunks, stream);
    params.exchange = work->exchange;
  }
  return work;
}

// Whole rows on the pipelined kernel whose last round would be part-filled run as two launches (GridOrder,
// softmax_launch.h) once each block of the head holds at least this many bytes of rows. Why: a persistent
// grid hands every block its rows up front, and a round's rows end as unevenly as the SMs stream (some SMs
// read ~20 % faster, s23), so the last round's rows went to whichever blocks had them, slow or fast, and the
// call ended on the slowest (PM sampling, s34: ~6-7 us of a bf16 1024x32768 call in a 12 us tail of stores).
// The tail's blocks take the slots the head's blocks free first. A tail row starts with an empty ring (no
// lookahead), which costs more than the balance gains after two rounds of 64 KB rows. H100 sweeps through
// the op, us streamed / cold, without -> with the tail (NOTES "s35 calls 2-3"): bf16 1024x32768 53.8-54.3 /
// 50.4 -> 52.2 / 49.6-49.9, 1000x32768 53.3 / 48.5 -> 51.0 / 49.0, 1300x32768 67.1-67.4 / 62.3-63.0 -> 64.2-64.4
// / 61.6-61.8, 1400x32768 74.2-75.5 / 67.0 -> 69.5-70.1 / 67.0, 1024x40960 68.4-69.0 / 65.6-65.9 -> 65.0 /
// 62.6-63.0, fp16 1024x32768 54.1-54.6 / 50.3 -> 52.3 / 49.5, 400x90112 (one block per SM) 68.5-69.2 / 72.6-73.2
// -> 65.9-66.7 / 67.8-68.5; even: 800x32768 (a tail of 8), fp16 512x90112 (+1 us cold); two rounds of 64 KB,
// 600x32768, lost 1.5 us cold, so below this size the grid stays one launch.
constexpr int64_t kTailMinHeadBlockBytes = 192 * 1024;

// Shape facts the plan depends on.
struct RowsShape {
  int64_t rows;
  int64_t len;
  int64_t row_bytes;  // len * sizeof(T)
  int64_t nv;     // 16-byte vectors per row: ceil(len / kVec), unaligned rows ceil((len + kVec - 1) / kVec)
  bool aligned;   // 16-byte vector access: x, y and the row length in bytes multiples of 16
  bool same_grid;  // the output's 16-byte grid is the input's (both fresh tensors: the allocator aligns them alike)
  int sms;
  size_t smem_optin;     // shared memory one block may opt into
  size_t smem_per_sm;    // shared memory of an SM, all its blocks together
  size_t smem_reserved;  // shared memory the system reserves per resident block
  bool pipe;      // the pipelined kernel can run: sm_90+ code for this device, aligned rows or unaligned ones
                  // whose output lies on the input's 16-byte grid (ItemVectors)
  bool dual;      // the dual-role kernel can run (the same conditions; unaligned rows: fp32 and 16-bit types)
  bool resident;  // the resident kernel can run: the same, for 16-bit types and fp32 (teams: aligned rows only)
  bool resident_fits;        // and the opt-in shared memory holds the longest item next to its static arrays
  bool resident_teams_fit;   // the same for the kernels of 2, 4 and 8 teams
};

// Pipelined kernel (softmax_pipelined.cuh): 16 KiB ring pieces, as many as the opt-in shared memory holds
// next to the kernel's static arrays, one block per SM (the ring takes its shared memory), 32 elements per
// thread per piece (fp32 128 threads, 16-bit 256: the H100 sweep's best; 1024 threads of one vector each
// were 1.5x slower). An item costs a fixed reduction / exchange beside its bytes, counted as
// kPipeItemOverheadBytes when choosing the chunk count.
constexpr int kPipePieceBytes = 16 * 1024;
constexpr int64_t kPipeItemOverheadBytes = 16 * 1024;
template <typename T> constexpr int pipe_threads() { return kPipePieceBytes / static_cast<int>(sizeof(T)) / 32; }

// What the chunk-count searches below minimize for rows cut into chunks of chunk_elems elements: rounds *
// (chunk bytes + kPipeItemOverheadBytes), where a round is as many whole rows as `blocks` hold.
template <typename T> int64_t chunking_cost(int64_t rows, int64_t len, int64_t chunk_elems, int64_t blocks) {
  const int64_t rounds = ceil_div(rows, blocks / ceil_div(len, chunk_elems));  // rounding may leave fewer chunks
  return rounds * (chunk_elems * static_cast<int64_t>(sizeof(T)) + kPipeItemOverheadBytes);
}

// Ring pieces of each of `per_sm` blocks sharing an SM's shared memory: what is left of a block's share (at
// most the opt-in limit) after the system's reservation and kPipeStaticSmemBytes (the kernels' barriers and
// row scratch). Two blocks per SM get 7 pieces of 16 KiB on the H100 (6 until session 33: half the opt-in
// limit less 2 KiB, which missed that the SM's 228 KiB exceed the 227 KiB one block may take).
int pipe_ring_pieces(const RowsShape& s, int per_sm) {
  // Signed: a forced plan (FAE_SOFTMAX_CONFIG) may ask for so many blocks per SM that the share is negative.
  const int64_t share =
      static_cast<int64_t>(s.smem_per_sm / std::max(per_sm, 1)) - static_cast<int64_t>(s.smem_reserved);
  const int64_t ring_bytes = std::min<int64_t>(share, static_cast<int64_t>(s.smem_optin)) - kPipeStaticSmemBytes;
  return static_cast<int>(std::clamp<int64_t>(ring_bytes / kPipePieceBytes, 0, kPipeMaxPieces));
}

// Elements per chunk when a row is cut into at most `chunks` pieces for the pipelined kernel: whole ring
// pieces where that leaves two pieces of the ring free (the chunk count may drop), else a multiple of 128
// bytes. Why: every bulk copy then starts 128-byte aligned within the row. On the H100 a ring of bulk copies
// from 16-byte-aligned addresses read 10 % slower than from aligned ones (read probe, NOTES "s13"), and fp32
// 8x4194304 ran 137 us with 129 or 131 chunks (16-byte-aligned chunks), 133 us with 132 (128-byte) and
// 128 us with 128 chunks of whole pieces.
template <typename T> int64_t pipe_chunk_elems(int64_t len, int chunks, int ring_pieces) {
  constexpr int64_t kPieceElems = kPipePieceBytes / sizeof(T);
  const int64_t even = ceil_div(len, chunks);
  const int64_t whole_pieces = round_up(even, kPieceElems);
  if (whole_pieces <= (ring_pieces - 2) * kPieceElems) return whole_pieces;
  return round_up(even, 128 / static_cast<int64_t>(sizeof(T)));
}

// Chunks per row for the pipelined kernel: 1 when a row and two more pieces fit the ring (the next row
// streams in while one is processed); else the count between the fewest whose chunks fit that way and the
// resident blocks (a row's chunks must be co-resident) minimizing chunking_cost, ties to more chunks (a deeper
// prefetch), with chunks cut as pipe_chunk_elems cuts them. 0 when rows are too long for any count.
template <typename T> int pipe_chunks(const RowsShape& s, int per_sm, int ring_pieces) {
  const int64_t max_chunk = int64_t(ring_pieces - 2) * kPipePieceBytes;
  const int64_t blocks = int64_t(s.sms) * per_sm;
  if (max_chunk <= 0) return 0;
  if (s.row_bytes <= max_chunk) return 1;
  int best = 0;
  int64_t best_cost = 0;
  for (int64_t c = ceil_div(s.row_bytes, max_chunk); c <= blocks; ++c) {
    const int64_t cost =
        chunking_cost<T>(s.rows, s.len, pipe_chunk_elems<T>(s.len, static_cast<int>(c), ring_pieces), blocks);
    if (best == 0 || cost <= best_cost) {
      best = static_cast<int>(c);
      best_cost = cost;
    }
  }
  return best;
}

// Ring pieces an item of chunk_elems takes in the pipelined and dual kernels: an unaligned row's items take up to one
// more vector (ItemVectors, the shift to the 16-byte grid).
template <typename T> int64_t item_ring_pieces(const RowsShape& s, int64_t chunk_elems) {
  return ceil_div((chunk_elems + (s.aligned ? 0 : RowsTraits<T>::kVec)) * int64_t(sizeof(T)), kPipePieceBytes);
}

// Dual-role kernel (softmax_dual.cuh): chunks of at most kDualMaxItemBytes (the register role's capacity),
// cut at multiples of 128 bytes (as pipe_chunk_elems, for the ring role's bulk copies).
template <typename T> int64_t dual_chunk_elems(int64_t len, int64_t chunks) {
  return round_up(ceil_div(len, chunks), 128 / static_cast<int64_t>(sizeof(T)));
}
// The fewest chunks, except for 16-bit rows: there the count from the fewest up to twice as many (and at most
// the SMs) that minimizes chunking_cost over the SMs (the launch's grid is a multiple of the chunk count),
// ties to fewer. Why: the fewest can leave SMs idle, e.g. bf16 32x3000000 in 46 chunks runs on 92 of 132 SMs
// and in 66 on all of them (H100 through the op, s22: 160.4-161.6 us against 195.0-196.3). fp32 keeps the
// fewest: its 8x4194304 in 132 chunks ran 102.6 us against 101.0 (each row's exchange waits on more partials;
// NOTES "s22 run 2").
// 16-bit rows of whole 128 KB items keep them when the count the cost prefers runs as many rows a round and
// whole items leave at most 1/32 of the SMs idle. Why: with the register role's L2 prefetch (b779df4) bf16
// 8x4194304 runs faster in 64 chunks on 128 SMs than in the 66 of 124 KB the cost prefers, and so do its kin
// (H100 through the op, us, streamed / cold, NOTES "s42 calls 1-5"): 8x4194304 54.3-55.4 / 52.1-52.5 ->
// 53.9-54.3 / 51.2-52.0 (fp16 alike), 16x2097152 53.4-54.2 / 50.9-51.1 -> 53.2-53.9 / 50.6-51.0, 4x8388608
// 56.0-56.3 / 53.2-53.4 -> 55.3-55.8 / 52.1-52.4; streamed, 16x4194304 107.0-107.8 -> 105.8-106.5 and
// 64x4194304 (32 rounds) 423.1-427.9 -> 418.6-420.8; through the benchmark, 8x4194304 55.0-55.3 -> 53.9-54.8
// streamed and 51.7-51.9 cold either way ("s42 call 7"). Items that are not whole did not follow: 64x2064448 in 32
// chunks of 126 KB on 128 SMs ran 210.6-212.4 us streamed against 204.6-205.9 in 33; and more idle SMs lost
// too (64x3997760 in 62 chunks on 124 SMs 411.4-416.6 against 404.8-408.3, 12x3899456 in 60 on 120 SMs
// 75.8-76.9 against 74.7-74.8).
template <typename T> int64_t dual_chunks(const RowsShape& s) {
  const int64_t fewest = ceil_div(s.row_bytes, kDualMaxItemBytes);
  if (sizeof(T) != 2 || fewest >= s.sms) return fewest;
  const auto cost = [&s](int64_t c) {
    return chunking_cost<T>(s.rows, s.len, dual_chunk_elems<T>(s.len, c), s.sms);
  };
  int64_t best = fewest;
  int64_t best_cost = cost(fewest);
  for (int64_t c = fewest + 1; c <= std::min<int64_t>(2 * fewest, s.sms); ++c) {
    const int64_t k = cost(c);
    if (k < best_cost) {
      best = c;
      best_cost = k;
    }
  }
  const int64_t best_chunks = ceil_div(s.len, dual_chunk_elems<T>(s.len, best));  // rounding may leave fewer
  const bool whole_items = s.row_bytes % kDualMaxItemBytes == 0;
  const bool same_rounds = s.sms / fewest == s.sms / best_chunks;
  const bool few_idle = 32 * (s.sms / fewest * fewest) >= 31 * int64_t(s.sms);
  return whole_items && same_rounds && few_idle ? fewest : best;
}

// Resident kernel (softmax_resident.cuh): chunks of at most kResidentMaxItemBytes cut at multiples of 128 bytes.
template <typename T> int64_t resident_chunk_elems(int64_t len, int64_t chunks) {
  return round_up(ceil_div(len, chunks), 128 / static_cast<int64_t>(sizeof(T)));
}
// The fewest chunks of a row that the resident kernel can hold (its default chunk count).
int64_t resident_fewest_chunks(int64_t row_bytes) { return ceil_div(row_bytes, kResidentMaxItemBytes); }
// The chunk count "auto" takes the resident kernel with, or 0: 16-bit rows (fp32: below), at most one wave of them, cut
// into sms / rows chunks so that the items (one a block, one block per SM) fill the SMs, where that leaves items of at
// most 512 KB and at least kResidentMinRowBytes (whole rows) or kResidentMinChunkBytes (split rows). Why: the kernel
// keeps each item on chip between its two passes; the pipelined, dual and split kernels read it twice or stage it in
// phases. Measured (H200, bf16, us cold / streamed, auto before -> resident; NOTES "s65 call 5", "s65 call 7", "s66
// calls 1-4"): whole rows 128x151936 35.1 / 32.8 -> 26.5 / 26.3, 128x65536 16.3 / 15.8 -> 15.3 / 13.3, 128x32768 12.5 /
// 10.9 -> 12.1 / 9.0, 66x151936 21.2 / 20.0 -> 20.6 / 15.6; split rows 64x300000 35.5 / 33.0 -> 27.6 / 27.3, 60x151936
// 21.3 / 20.0 -> 17.8 / 15.7 (2 chunks), 40x151936 15.6 / 13.5 -> 15.4 / 12.5 (3), 5x4194304 41.6 / 40.0 -> 30.2 / 30.3
// (26), 4x4194304 26.5 / 25.9 -> 24.8 / 24.2 (32), 1x8388608 19.2 / 17.5 -> 17.6 / 16.0 (128), 7x4194304 54.5 / 55.8 ->
// 39.8 / 40.1 (18; 38.8 / 39.5 at the fewest, 16). Smaller items lost or tied: 64x65536 at 2 chunks (64 KB) 12.1 / 10.1
// -> 13.5 / 10.5, 20x151936 at 6 (50 KB) 12.8 / 9.7 -> 13.1 / 9.4; so did the fewest chunks below the SMs, 4x4194304 at
// 16: 26.3 / 25.8 -> 30.7 / 29.4.
// Rows beyond one wave: whole rows of kResidentMinWavesRowBytes or more, one a block, wave after wave (a plain launch:
// a whole row waits on no other block), unless teams take them (heuristic_plan: teams first where their blocks fit one
// wave, or fill kResidentMinFill of the waves they span and their items are exactly 512 KB). The blocks of successive
// waves drift apart, so one SM's reads overlap another's stores. Bf16, us cold / streamed, auto (pipelined, dual or
// teams) -> resident ("s66 call 6", "s67 calls A-C"): 200x151936 52.1-53.2 / 50.0-50.2 -> 44.9 / 41.0, 264x151936
// 57.7-58.7 / 56.1-56.3 -> 51.1-51.4 / 47.6-47.8, 528x151936 113.0-113.5 / 112.4 -> 96.1-96.2 / 93.1-93.4, 1024x151936
// 213.1-213.5 / 211.8-212.9 -> 169.5-169.6 / 166.7-167.9, 256x200000 75.2-76.9 / 73.1-73.7 -> 61.8-61.9 / 59.6; the
// rows of 120-256 KB (s67: teams or, between the teams' bands, pipelined): 1024x100000 127.5-127.6 / 127.5-127.8 (2 a
// block) -> 116.0 / 115.7-115.8, 512x120000 77.5-78.2 / 78.1 (2) -> 75.6-75.7 / 72.2-72.4, 1024x64000 82.6-82.7 /
// 83.6-83.8 (4) -> 79.5 / 79.1-79.5, 1024x80000 123.4-124.1 / 122.7-123.0 -> 92.6-92.8 / 91.6-92.2, 1024x66000
// 106.4-106.7 / 106.0-106.1 -> 82.1 / 82.5-82.8, 2048x66000 202.4-202.7 / 201.3-201.7 -> 151.7-151.8 / 152.6-153.0,
// 200x80000 34.8 / 32.1-32.3 -> 27.4-27.7 / 23.8-23.9. Shorter rows lost or tied: 1024x58000 (113 KB) 77.6-77.7 /
// 76.5-76.7 (4) -> 77.4 / 75.6-75.8, 1024x50000 68.1-68.2 / 67.9-68.1 -> 73.2-73.3 / 71.3-71.5, 1024x40000 51.6-52.1 /
// 51.4-51.8 -> 66.1-66.7 / 65.1; so did teams' blocks of one wave or exact items: 528x64000 (4 a block) 42.5-42.6 /
// 43.0 -> 45.9-46.0 / 44.3-44.6, 264x128256 (2) 42.0 / 42.6-42.8 -> 44.8-45.2 / 41.9-42.1, 256x128000 (2) 42.4-42.5 /
// 42.1-42.3 -> 43.8-43.9 / 40.7, 512x131072 (2, exact) 78.7 / 79.4-79.8 -> 81.2-81.7 / 78.7-79.4, 1024x65536 (4, exact)
// 80.4-80.5 / 80.0-81.0 -> 81.0-81.1 / 79.0-80.1 (a tie).
// Fp32 (the kernel's accurate merges and store passes; its folds by ex2.approx since s99): whole rows of
// kResidentMinFloatRowBytes or more (one item a row, within one wave or beyond). Us cold / streamed, auto before
// (pipelined or dual) ->
// resident ("s67 calls B, C"): 1024x40000 104.4-104.5 / 106.8-107.0 -> 90.8-90.9 / 90.8-90.9, 1024x50000 126.7-126.9 /
// 125.8-127.4 -> 112.8-113.2 / 113.1-113.3, 1024x60000 148.7-148.9 / 148.0-149.1 -> 134.2-134.3 / 133.1-134.1,
// 1024x66000 165.2-165.7 / 167.8-168.0 -> 149.2-149.3 / 149.4-149.8, 512x100000 125.7-126.1 / 125.8-126.2 ->
// 117.7-118.2 / 117.5-117.6, 128x131072 41.6-41.9 / 43.1-46.0 -> 39.4-39.6 / 40.5; a tie at 128 KB (1024x32768
// 77.2-77.5 / 75.7-76.2 -> 77.4-77.8 / 77.2-77.8), a loss for teams (4096x32000, 4 a block, 284.0-284.7 / 282.5-282.7
// -> 326.3-326.7 / 327.4-327.5). Split fp32 rows as the 16-bit ones, chunks = sms / rows of >= kResidentMinChunkBytes
// ("s67 call E"): 64x131072 (2 chunks) 24.5-24.8 / 24.3-24.5 -> 23.5-23.6 / 22.5-22.7, 32x300000 (4) 31.8-32.1 / 30.9
// -> 27.4 / 27.2-27.3, 16x600000 (8) 31.5-32.2 / 31.6 -> 27.7 / 27.3, 44x200000 (3) 29.5-29.7 / 29.3-29.6 ->
// 24.9-25.1 / 25.1-25.3, 20x151936 (6, 99 KB) 15.1-15.2 / 13.1-13.2 -> 14.4-14.5 / 11.8, 4x4194304 (33) 44.2-44.4 /
// 45.5-45.9 -> 41.8-42.2 / 43.5-43.7, 2x2097152 (66) 18.3 / 16.6-16.7 -> 17.0-17.1 / 15.6-15.7, 1x8388608 (132)
// 34.5-34.6 / 35.0 -> 25.6-25.7 / 25.8.
// Unaligned rows (odd lengths; the single-item kernel with edge vectors) as the aligned ones, except 16-bit whole rows
// beyond one wave from kResidentMinUnalignedWavesRowBytes (no teams; below it the shifted pipelined kernel; up to
// kResidentMinUnalignedDualRowBytes the dual kernel first, see below). Us cold / streamed, auto before -> resident
// ("s68 call 2"): bf16 1024x50257 (98 KB) 89.5-90.0 / 87.8 (0.92x torch's log_softmax) -> 78.8 / 76.9, 2048x50257
// 168.3-168.9 / 166.8-167.3 -> 144.9 / 144.3, 128x262143 58.9-59.2 / 60.2-60.3 -> 43.3-43.5 / 43.9, 8x4194303 63.5 /
// 63.6-63.9 -> 42.3 / 43.6, 300x73727 41.9-42.5 / 40.5-40.7 -> 37.5-37.6 / 35.4-35.8; fp32 1024x50257 143.3-143.8 /
// 143.9-144.3 -> 119.4-119.6 / 117.4-117.7, 128x131071 54.2-54.3 / 54.7-55.1 -> 43.2-43.7 / 44.4-44.7, 64x100003
// 25.7-25.9 / 24.3-24.4 -> 22.2-22.5 / 20.3; bf16 1024x32767 (64 KB) lost: 46.9 / 47.8 -> 67.9 / 65.7; below 96 KB
// ("s68 call 3", forced): 1024x41001 (82 KB) 79.2 / 77.3 -> 73.4 / 71.6, 1024x46001 82.6 / 80.8 -> 77.0 / 74.9, so s69
// took them (80 KB); then the dual kernel took unaligned rows and beat it there ("s69 call A", resident -> forced dual,
// cold / streamed): 1024x41001 72.7-72.8 / 71.9-72.1 -> 68.9-69.0 / 66.3-66.4, 1024x46001 77.5 / 75.3 -> 74.3 / 71.6;
// 1024x50257 tied (79.0-79.5 / 77.5-77.7 -> 79.1-79.4 / 77.1-77.4) and 2048x50257 lost (144.4 / 145.6 -> 152.1 /
// 150.8); but at two waves the dual kernel cuts the rows in two, its 16-bit rule refuses them, and the pipelined kernel
// lost to the resident one ("s69 call C", cold / streamed): 267x41001 auto (pipelined) 32.3-32.5 / 30.3-30.6, forced
// dual in one item 31.1 / 28.1, resident 27.9 / 24.9; 267x46001 33.2-33.3 / 29.4-29.5, 33.3 / 29.2, 29.7 / 25.5. So
// rows of 80-96 KB take the dual kernel where it holds them in one item (kResidentMinUnalignedDualRowBytes;
// heuristic_plan), else the resident one. Where the dual kernel ran an odd number of rounds it lost to the resident
// kernel until 16-bit whole rows in an odd number of rounds gave the last one to the register role (registers_first):
// bf16 x41001, forced resident against dual before it, us cold ("s70 calls 1, 3"): 396 rows 32.6 vs 33.2, 529 42.9 vs
// 45.8, 561 45.8 vs 46.8, 660 49.2 vs 47.9; after it ("s70 call 4") dual 529 39.1-39.3, 660 44.4. Even rounds: 264
// 23.2 vs 23.5, 462 39.5 vs 35.9, 528 40.0 vs 36.6, 792 57.5 vs 52.6, 1056 75.3 vs 70.8.
constexpr int64_t kResidentMinRowBytes = 64 * 1024;
constexpr int64_t kResidentMinChunkBytes = 96 * 1024;
constexpr int64_t kResidentMinWavesRowBytes = 120 * 1024;
constexpr int64_t kResidentMinFloatRowBytes = 144 * 1024;
constexpr int64_t kResidentMinUnalignedWavesRowBytes = 80 * 1024;
constexpr int64_t kResidentMinUnalignedDualRowBytes = 96 * 1024;
// The teams' blocks' least fill: of one wave (resident_teams), of the waves they span (heuristic_plan).
constexpr double kResidentMinFill = 0.9;
template <typename T> int64_t resident_chunks(const RowsShape& s) {
  if (!s.resident || !s.resident_fits) return 0;
  const int64_t min_whole_row_bytes = sizeof(T) == 4  ? kResidentMinFloatRowBytes
                                      : s.rows <= s.sms ? kResidentMinRowBytes
                                      : s.aligned       ? kResidentMinWavesRowBytes
                                                        : kResidentMinUnalignedWavesRowBytes;
  if (s.rows > s.sms) {
    return s.row_bytes >= min_whole_row_bytes && s.row_bytes <= kResidentMaxItemBytes ? 1 : 0;
  }
  const int64_t chunks = s.sms / s.rows;
  if (chunks < resident_fewest_chunks(s.row_bytes)) return 0;
  const int64_t item_bytes = std::min(resident_chunk_elems<T>(s.len, chunks), s.len) * int64_t(sizeof(T));
  return item_bytes >= (chunks == 1 ? min_whole_row_bytes : kResidentMinChunkBytes) ? chunks : 0;
}

// The layout of teams over split rows: a group of block_chunks blocks over 8 rows, each block one chunk of all 8
// (16-bit rows, a multiple of 8 of them, cut into chunks of exactly 512 KB / 8: the kernel's one such instantiation).
template <typename T> bool split_teams_layout(const RowsShape& s, int64_t block_chunks) {
  return sizeof(T) == 2 && s.rows % 8 == 0 && s.len % block_chunks == 0 &&
         s.len / block_chunks * int64_t(sizeof(T)) * 8 == kResidentMaxItemBytes;
}

// Blocks of teams over split rows (split_teams_layout): a group of `chunks` blocks per 8 rows, every block co-resident
// (at most one an SM: the heuristic's rule and the forced plan's check).
int64_t split_teams_blocks(const RowsShape& s, int64_t chunks) { return s.rows / 8 * chunks; }

// Whether split rows of exactly 512 KB items (16-bit, 8 rows at a time) run as teams of 8 over them: each block holds
// a 64 KB chunk of 8 rows, one a team, so that within an SM the first teams store while the last ones still read (as
// whole rows 8 a block do) and a row's exchange waits behind the other teams' reads rather than with the SM idle.
// H200, bf16, us cold / streamed, one item a block -> teams, three rounds alternating (NOTES "s77 call 5"): 8x4194304
// 40.9-41.0 / 42.0-42.3 -> 40.0-40.1 / 42.0-42.2, 64x524288 41.2-41.5 / 41.6-41.8 -> 39.7-39.8 / 40.9-41.1; 16x2097152
// 40.8-41.1 / 42.0-42.1 -> 40.0-40.2 / 40.9-41.1 ("s77 call 4"). Not for whole rows of 512 KB (128x262144 as 8 chunks
// of 64 KB: 38.3-38.7 / 40.9-41.2 against 38.9 / 39.9-40.1), nor with teams of 4 or 2
// (1.3-3 us behind 8, "s77 call 2").
template <typename T> bool resident_split_teams(const RowsShape& s, int64_t chunks) {
  return chunks > 1 && s.aligned && s.resident_teams_fit && split_teams_layout<T>(s, 8 * chunks);
}

// The whole rows per block (teams) "auto" takes the resident kernel with, or 0: 16-bit rows that fill a team's
// registers and shared memory, 384-512 KB / teams (2, 4 or 8 teams: rows of 96-128, 48-64 or 24-32 K elements), whose
// blocks fill at least kResidentMinFill of one wave, or several waves (as resident_chunks' whole rows; beyond one
// wave heuristic_plan takes them only where they fill kResidentMinFill of the waves they span). Why: the
// pipelined and dual kernels those rows took otherwise fold and store in the same phases on every SM (see
// softmax_resident.cuh). H200, bf16, us cold / streamed, pipelined or dual -> teams: rows of exactly 512 KB / teams
// (NOTES "s64 call 6") 1024x32768 43.1-43.5 / 42.7-42.8 -> 40.8 / 41.2-41.3, 1000x32768 42.5 / 42.2-42.3 -> 41.2-41.3 /
// 40.4-40.7, 512x65536 44.1-44.3 / 42.4-42.8 -> 40.6-40.8 / 40.8-40.9, 256x131072 46.4-46.7 / 44.7-45.0 -> 39.9-40.3 /
// 40.2-40.3; shorter rows on the OnChip instantiation ("s65 call 2") 264x128256 46.6-46.9 / 44.4-44.9 -> 42.1-42.3 /
// 42.7-43.1, 256x128000 45.2-45.3 / 44.1 -> 42.1-42.7 / 42.2, 512x50176 36.4 / 35.2 -> 35.3-35.4 / 35.0, 528x64000
// 43.7-43.9 / 42.8-43.0 -> 42.8-42.9 / 43.4-43.6, 1024x32000 42.2 / 42.9-43.0 -> 42.0 / 42.4-42.6, 1056x32000 42.8-43.5
// / 43.4-43.9 -> 43.1-43.4 / 43.2-43.3. Rows below 384 KB / teams would take the instantiation with every part bounded,
// which spills and lost (1056x32000 on it: 44.6-44.9 / 45.2-45.3, "s64 call 6"). Several waves ("s66 call 6"):
// 2112x32768 8 a block 90.2-90.5 / 89.5-89.6 -> 82.9-83.3 / 83.3-83.8, 4096x32768 164.2-164.3 / 163.7-165.6 -> 157.9 /
// 166.7-167.8 (the one loss, streamed), 1024x65536 4 a block 85.9-86.0 / 86.0-87.4 -> 80.1 / 80.3-80.6, 1024x100000 2 a
// block 145.6-145.8 / 143.9-144.7 -> 126.5-127.6 / 127.2-127.7 (since s67 whole rows one a block: rows of 120 KB or
// more take teams only where their blocks fit one wave, or fill kResidentMinFill of their waves and their items are
// exactly 512 KB; see resident_chunks; since s73, on the H200, 8 a block only within one wave: see heuristic_plan).
template <typename T> int64_t resident_teams(const RowsShape& s) {
  if constexpr (sizeof(T) != 2) {
    return 0;  // (fp32 teams lost: see resident_chunks; an else, so that the loop is not compiled unreachable)
  } else {
    if (!s.resident || !s.resident_teams_fit || !s.aligned) return 0;
    for (const int64_t teams : {2, 4, 8}) {
      if (s.row_bytes * teams > kResidentMaxItemBytes || s.row_bytes * teams < kResidentOnChipItemBytes) continue;
      const int64_t items = ceil_div(s.rows, teams);
      return items >= kResidentMinFill * s.sms ? teams : 0;
    }
    return 0;
  }
}

// Streaming chunks: 4 block-steps (64 KiB of any type); for logsumexp the fewest chunks of at most 8 steps (128 KiB),
// the row's steps spread over them (whole steps: a last chunk short by up to a chunk less one step); more for rows so
// long that a row would have over 1024 chunks (keeps the partial merges short). Why 8 for logsumexp: fewer blocks,
// each with a smaller share of exposed first loads and block reductions, and rows of 32768 fp32 elements whole, with
// no finalize launch (H200, NOTES "s80 call 3", us cold / streamed, with the reduce's prefetch: fp32 1024x32768 41.8 /
// 39.0 -> 37.7 / 35.7, 8x4194304 42.1 / 39.3 -> 40.3 / 37.4; bf16 128x262144 25.6 / 22.3 -> 23.7 / 20.4). Why spread:
// fp32 300x70000 in chunks of 8, 8 and 1.1 steps ran 32.0 / 28.5 against main's 29.5 / 26.4 in 4-step chunks, in 3
// chunks of 6 steps 29.8 / 26.7 ("s80 call 4").
template <typename T> int stream_steps_per_chunk(const SoftmaxProblem& p, int64_t len) {
  const int64_t steps = ceil_div(len, int64_t(kStreamThreads) * kStreamUnroll * RowsTraits<T>::kVec);
  const bool lse = p.output == SoftmaxOutput::LogSumExp;
  const int64_t most = lse ? 8 : 4;
  const int64_t spread = lse ? ceil_div(steps, std::max<int64_t>(1, ceil_div(steps, most))) : most;
  return static_cast<int>(std::max<int64_t>({1, spread, ceil_div(steps, 1024)}));
}

// Whether "auto" gives unaligned rows beyond 512 threads (on the output's grid) the pipelined kernel rather than
// the split kernel: softmax and log_softmax (logsumexp keeps its own plans), tensors of >= 16 MiB, rows of
// <= 128 KiB or fewer than one per 8 SMs. H200 sweep through the op, s59 call 4, pipelined vs split (256
// threads, large registers), us, cold / streamed: bf16 1024x32767 48.0 / 47.3 vs 64.2 streamed, 1024x50257
// 90.3 / 88.3 vs 89.9 / 89.8, 8x4194303 63.7 / 64.0 vs 87.2 streamed, fp32 1024x32767 96.8 / 95.4 vs 102.6 /
// 104.6, 8x4194303 118 / 119 vs 151 / 154; split faster: bf16 300x73727 41.9 / 42.0 vs 41.0 / 40.6, 64x100003
// 16.4 / 14.9 vs 15.6 / 14.3, 7x40003 12.9 / 9.4 vs 8.1 / 4.8 (small split), fp32 1024x50257 168 / 168 vs 152 /
// 156, 300x73727 76.4 / 77.7 vs 71.3 / 71.4, 128x262143 113 / 113 vs 109 / 112.5, 64x100003 30.3 / 29.0 vs
// 26.7 / 27.0, 7x40003 9.6 / 7.0 vs 8.9 / 6.0 (small split). The one miss: bf16 128x262143, 54.6 / 54.3
// pipelined vs 60.5 streamed split.
constexpr int64_t kUnalignedPipeMinBytes = int64_t(16) << 20;
constexpr int64_t kUnalignedPipeMaxRowBytes = 128 * 1024;
bool unaligned_pipe_rows(const SoftmaxProblem& p, const RowsShape& s) {
  return p.output != SoftmaxOutput::LogSumExp && s.rows * s.row_bytes >= kUnalignedPipeMinBytes &&
         (s.row_bytes <= kUnalignedPipeMaxRowBytes || s.rows * 8 <= s.sms);
}

// The whole kernel choice. Rows (inner == 1), with nv = len / kVec 16-byte vectors per row (unaligned rows: the most
// vectors a row spans on the memory's grid, ceil((len + kVec - 1) / kVec)):
//  1. warp-per-row       ceil(len / kVec) <= 32 * kMaxVpt (1024 fp32 / fp16 / bf16 elements, 256 doubles; logsumexp
//                        of 16-bit rows and 16-bit softmax / log_softmax rows, aligned or on the memory's grid, but
//                        the online ones 2048, and every fp64 row 512, at >= 32 rows per SM: warp_max_vpl), any
//                        algorithm;
//                        aligned rows get >= 2 vectors per lane where the row has them (teams of < 32 lanes
//                        for short rows; on the H100 sweep 2 beat 4 for 128-element bf16 rows), logsumexp
//                        >= 4, and many aligned 16-bit rows of 17-64 vectors (fp32: 33-56) that leave slots
//                        idle, and fp64 rows of 17-64, 4 (half_team_rows);
//  2. block-per-row      row in registers of one block of <= 1024 threads (32K fp32 / 16-bit, 16K doubles),
//                        the large vectors-per-thread size (fewest threads, most bytes in flight per thread);
//                        "auto" softmax/log_softmax uses it only up to 512 threads and when rows fill the GPU;
//                        many aligned 16-bit rows of 257-320 and 513-640 vectors take one warp fewer and
//                        a vector each in shared memory (fewer_warp_rows), those of 9-15 warps 8 warps
//                        and the rest of the row in shared memory (eight_warp_rows);
//  2b. block-per-row with shared memory: "auto", aligned, rows beyond 512 threads, >= 2 rows per SM: a 256-
//                        or 512-thread block keeps the rest of its row in shared memory (cp.async), >= 2
//                        blocks per SM overlap one row's reduction and store with the next one's loads, and
//                        no block waits on another (the split's exchange);
//  3. split-row          "auto" softmax/log_softmax beyond that: 256-thread blocks, chunks of a row on several
//                        blocks (registers + shared memory), one read of DRAM, cooperative persistent grid;
//  4. streaming          everything left: "safe" 3 passes, "online" 2 passes, logsumexp 1 pass + finalize.
// Before 2b and 3, on sm_90+: "auto", aligned rows beyond 512 threads take the dual-role kernel (0a.) for rows split
// over two or more rounds of items and for whole rows where rows fill the SMs (fp32 up to 192 KB, 16-bit 80-128 KB),
// else the pipelined kernel (0.), whole or split into chunks (pipe_chunks), one or two blocks per SM, except many
// 16-bit whole rows of <= 40 KB (2b.); logsumexp there takes the streaming reduce (4.) instead; 16-bit softmax /
// log_softmax tensors whose items the resident kernel holds take it before both (resident_chunks: up to one wave of
// rows in sms / rows items a row, whole rows of >= 64 KB or chunks of 96-512 KB, and beyond a wave whole rows of
// 120-512 KB, one a block; resident_teams: whole rows of 384-512 KB / teams, 2, 4 or 8 a block, first where their
// blocks fit one wave or (2 or 4) fill the waves they span, rows of 120 KB or more then exact items only), and so do
// fp32 rows as resident_chunks cuts them (whole rows of 144-512 KB, chunks of 96-512 KB); unaligned rows on the
// output's grid take the resident kernel as aligned ones (no teams; 16-bit whole rows beyond one wave from 80 KB), else
// the pipelined kernel where unaligned_pipe_rows says.
// FAE_SOFTMAX_CONFIG (softmax_plan.h) replaces this choice for benchmarks.
// Many 16-bit whole rows (>= 12 per SM) up to this long take the block kernel (many_short_whole_rows).
constexpr int64_t kBlockMaxManyRowBytes = 40 * 1024;
constexpr int64_t kWideWarpMinRowsPerSm = 32;  // step 1's rows beyond kMaxVpt vectors a lane (see there)

// Step 1's softmax and log_softmax rows held on the memory's grid, folded (plan.grid = 1; grid_softmax_compiled):
// 16-bit unaligned rows of more than 8 vectors whose output lies on the input's grid, rows of at most 32 vectors (teams
// of 8 lanes) only where they give every SM kWideWarpMinRowsPerSm rows. Their teams are the fewest lanes, and at least
// 8, that leave each lane <= 4 vectors (rows of up to 128 vectors; longer ones: below). H200, s87 calls 1-2, bf16
// softmax of 16 MB, us cold, auto (element-wise or pairs) -> grid, lanes x vectors: 86480x97 20.4 -> 18.5 (8 x 2),
// 66052x127 17.1 -> 15.5 (8 x 2; 4 x 4: 18.2), 43919x191 20.5 -> 15.3 (8 x 4; 16 x 2: 19.1), 32896x255 17.5 -> 14.0 (8
// x 4), 26296x319 17.6 -> 17.9 (16 x 4), 21902x383 16.1 -> 15.5 (16 x 4; 32 x 2: 19.4), 16416x511 14.8 -> 12.9,
// 10936x767 18.6 -> 15.2 (32 x 4), 8200x1023 15.5 -> 12.5; torch 19.5-22.6 on these. The grid lost on rows of 8 vectors
// (137518x61 18.5 -> 19.7 at 8 x 1, 22.3 at 4 x 2) and on few short rows (4096x127 5.1 / 2.6 streamed -> 5.3 / 3.4);
// log_softmax and fp16 alike (log_softmax 32896x255 17.7 -> 13.3, 8200x1023 15.2 -> 12.7).
// Rows of 129-256 vectors (1025-2048 elements) take whole warps of 8 vectors a lane, held raw (packed_store.cuh), where
// they give every SM kWideWarpMinRowsPerSm rows (warp_max_vpl), and the block kernel's 64-96 threads otherwise. H200,
// s98 call 7, us cold / streamed, block -> warp: bf16 softmax 65536x1031 116.3 / 114.6 -> 82.0 / 83.4, 131072x1025
// 225.1 / 222.7 -> 161.5 / 161.0, 65536x1283 107.3 / 105.8 -> 96.3 / 96.4, 32768x1500 57.2 / 56.7 -> 51.8 / 51.1,
// 16384x2047 42.8 / 42.0 -> 35.6 / 36.4, 8192x1100 19.2 / 16.0 -> 14.1-14.7 / 12.5; log_softmax 65536x1031 117.0 /
// 115.5 -> 84.5-85.2 / 84.5, 16384x2047 42.5 / 42.0 -> 35.3-35.6 / 36.1; fp16 softmax 65536x1031 117.0 / 115.3 ->
// 81.5-82.6 / 82.5, but 32768x1999 level cold and 66.0 -> 67.2 streamed.
constexpr int64_t kGridSoftmaxMinVecs = 9;
constexpr int64_t kWideTeamMinLanes = 8;
template <typename T> bool grid_softmax_rows(const SoftmaxProblem& p, const RowsShape& s, int64_t row_vecs) {
  return grid_softmax_compiled<T> && !s.aligned && s.same_grid && p.output != SoftmaxOutput::LogSumExp &&
         p.algorithm != SoftmaxAlgorithm::Online && row_vecs >= kGridSoftmaxMinVecs &&
         (row_vecs > 4 * kWideTeamMinLanes || s.rows >= kWideWarpMinRowsPerSm * s.sms);
}

// The teams of grid_softmax_rows and half_team_rows: the fewest lanes, at least kWideTeamMinLanes, that leave each lane
// at most kMaxVpt = 4 of a row's row_vecs (<= 128) vectors; 32 beyond.
int wide_team_lanes(int64_t row_vecs) {
  return static_cast<int>(std::clamp<int64_t>(next_pow2(ceil_div(row_vecs, 4)), kWideTeamMinLanes, 32));
}

// Step 1's aligned 16-bit softmax and log_softmax rows of 17-64 vectors (any algorithm) that fill at most 7/8 of the
// slots of their teams of 2 vectors a lane (16 or 32 lanes) run on half the lanes at 4 vectors each (wide_team_lanes'
// team, 8 or 16 lanes, of the next power of two vectors' slots, as the old team): the same slots, twice the rows and
// bytes in flight a warp, one shuffle round fewer a row. Only where the halved teams still give every SM
// kHalfTeamMinWarpsPerSm warps (a full SM's threads); with fewer, the old teams' twice as many warps ran faster. H200,
// s88 calls 1-2, 16 MB tensors, us cold, 16 x 2 -> 8 x 4 or 32 x 2 -> 16 x 4: bf16 softmax 61680x136 15.2 -> 13.2,
// 52428x160 13.8 -> 12.8, 31775x264 16.3 -> 13.5, 29127x288 15.1 -> 13.0, 26214x320 14.5 -> 12.1, 23831x352 13.3 ->
// 12.4, 21845x384 12.6 -> 12.3, 18724x448 12.3 -> 11.8; log_softmax 26214x320 15.1 -> 12.3, 21845x384 13.2 -> 12.0;
// online 26214x320 17.9 -> 14.1; fp16 alike; torch 19.4-21.8. Level at 41943x200 and 37449x224 (12.3 -> 12.5 and 12.4;
// log_softmax 12.8 -> 12.5), and so where the row fills more than 7/8 (33825x248, 16644x504: 12.0-12.4 either way,
// streamed up to 0.3 us slower); slower with fewer warps (16384x200 streamed 4.6 -> 5.2, 4096x384 3.4 -> 4.1, 1056x384
// 2.0 -> 2.1). Fp32 rows of 25 vectors lost (41943x100 12.9 -> 17.4 at 8 x 4) or broke even (16 x 4), and rows of a
// power of two vectors did not gain (32768x256 11.5 -> 11.9 at 8 x 4).
constexpr int64_t kHalfTeamMinWarpsPerSm = 64;
// fp32 rows too since session 92, those of 33-56 vectors (teams of 32 lanes -> 16 lanes x 4; H200, s92 call 5,
// forced, us cold / streamed: 65536x160 27.7 / 26.2 -> 23.3 / 22.5 (torch 25.7 / 24.8), 65536x200 29.5 / 28.1 -> 28.4
// / 27.7; 8 x 8 lost at 200 elements, 44.8).
constexpr int64_t kHalfTeamFp32MinVecs = 33;
// fp64 rows from 17 vectors (34-128 doubles: 16 x 2 -> 8 x 4, 32 x 2 -> 16 x 4) since session 101, full teams too.
// H200, forced, us cold / streamed (torch): s101 call 1, softmax 65536x66 35.2 / 33.1 -> 27.4 / 25.4 (30.2 / 27.6),
// 65536x96 37.5 / 34.7 -> 29.4 / 27.8 (30.4 / 28.9), 65536x112 37.3 / 36.2 -> 31.1 / 30.7 (34.0 / 32.1), 65536x128 37.8
// / 36.8 -> 35.3 / 35.4 (34.5 / 36.1), 32768x128 20.4 / 19.7 -> 19.6 / 18.9 (19.3 / 19.5); log_softmax 65536x128 40.5 /
// 38.8 -> 35.3 (33.7 / 35.8); s101 call 2, softmax 65536x34 20.3 / 17.8 -> 15.0 / 12.7 (20.8 / 17.9), 65536x40 21.0 /
// 18.4 -> 15.5 / 13.6 (21.7 / 18.5), 65536x48 20.8 / 19.0 -> 15.6 / 14.7 (21.2 / 18.8), 65536x64 20.5 / 19.8 -> 19.1 /
// 19.1 (20.9 / 19.8); log_softmax 65536x64 22.3 / 20.7 -> 19.6 / 19.0 (23.6 / 20.5).
constexpr int64_t kHalfTeamFp64MinVecs = 17;
// Unaligned fp64 softmax and log_softmax rows that keep 4 vectors a lane, and that take 16 lanes of 4 (heuristic_plan's
// warp step says why).
constexpr int64_t kDoubleFourVectorMaxLen = 161;
// Since session 108 rows of up to kDoubleFourVectorLongMaxLen do too where each SM has
// kDoubleFourVectorLongMinRowsPerSm rows: the many-rows instantiation with the team's width fixed at compile time
// (softmax_launch.h, f6906b7) made 32 lanes of 4 at 128 threads beat whole warps of 8 there. H200, s108 calls 1-3, us
// cold / streamed, 8 vectors (auto then) -> 32 x 4 at 128 threads (torch): log_softmax 65536x163 54.3-54.4 / 53.1-53.5
// -> 45.0 / 43.8, x171 54.6-54.9 / 53.7-54.1 -> 45.8-46.0 / 45.1 (46.6-48.2 / 46.8-47.1), x199 61.9-62.2 / 60.4-60.5 ->
// 53.8-54.3 / 53.5-53.6 (52.4-53.1 / 53.0-53.3), x211 62.6-62.9 / 61.8-62.0 -> 57.5-57.8 / 57.8-57.9, x241 66.3-66.4 /
// 65.6-65.9 -> 64.2-64.6 / 65.4-65.6 (62.3-62.7 / 63.7-64.1), 16384x199 19.2-19.3 / 17.5 -> 17.7-17.9 / 16.1; softmax
// 65536x171 52.3-52.4 / 51.6-51.9 -> 45.5-45.6 / 45.1-45.3 (50.1-51.1 / 48.2-48.8), x199 58.6-59.0 / 57.6-57.7 ->
// 52.5-52.8 / 52.8-53.1 (53.7-55.3 / 54.1-54.4), 16384x199 18.2-18.3 / 16.5 -> 16.6 / 15.1; s108 call 5, 12672x199
// (96 rows an SM) log_softmax 16.0-16.6 / 14.0 -> 15.0-15.1 / 13.2, softmax 16.1-16.4 / 13.3 -> 14.5-14.7 / 12.1. Not
// at 241 with fewer rows (12672x241 16.4-16.8 / 15.0 -> 16.9-17.0 / 15.8-16.0, 8192x241 13.7-13.9 / 10.6-10.8 ->
// 14.2-14.6 / 11.7-11.9), so the rows stop at 225 (65536x225 64.5 / 63.3-63.4 -> 60.6-60.8 / 60.8-61.0), nor at 255
// (log_softmax 65536x255 68.4 / 68.0 -> 67.7-68.1 / 68.5-68.6), nor at 32 rows an SM, where the general instantiation
// runs them (softmax 4224x199 8.8-9.0 / 5.5 -> 9.3-9.4 / 6.7-6.8, 4224x241 9.1-9.2 / 5.9-6.0 -> 9.8 / 7.9, log_softmax
// 4224x199 9.9-10.1 / 5.9 -> 10.3-10.5 / 6.3). Between (8192x199: log_softmax 13.1-13.4 / 9.9 -> 13.2-13.3 / 9.6,
// softmax 12.6-12.9 / 9.3 -> 11.6-11.7 / 8.5-8.6) the 8-vector plan stays: not timed further.
constexpr int64_t kDoubleFourVectorLongMaxLen = 225;
constexpr int64_t kDoubleFourVectorLongMinRowsPerSm = 96;
// Since session 109 log_softmax's rows take 32 x 4 to the plan's end (256 elements) from the same rows an SM: once
// every many-rows kernel loaded its lanes' first elements unpredicated (many_rows_always_live) and the 32 x 4
// log_softmax kernel summed by exp_sum_term, it beat the 8-vector plan there. H200, s109 call 2, forced, us cold /
// streamed, 8 vectors (auto) -> 32 x 4 at 128 threads (torch): log_softmax 65536x241 66.5-66.6 / 66.0-66.4 -> 62.7 /
// 64.3-64.4 (63.4-63.9 / 63.7-64.0), x255 68.5-68.6 / 68.3-68.4 -> 66.7-66.8 / 67.6 (66.2-66.5 / 67.6-67.7), 16384x241
// 20.0-20.2 / 18.9 -> 18.6-18.7 / 17.8-17.9 (19.6-19.9 / 18.3-18.4), 24576x255 28.8-29.1 / 27.5 -> 27.3-27.4 / 26.8
// (26.6-27.0 / 27.2-27.3). Softmax's stay at 225: cold 1 us faster, streamed 0.5-1 us slower (65536x241 65.2-65.3 /
// 64.2 -> 63.9-64.0 / 64.8, x255 66.8-67.0 / 67.0-67.1 -> 66.4-66.5 / 67.7-68.0).
constexpr int64_t kDoubleFourVectorLongLogMaxLen = 256;
constexpr int64_t double_four_vector_long_max_len(SoftmaxOutput output) {
  return output == SoftmaxOutput::LogSoftmax ? kDoubleFourVectorLongLogMaxLen : kDoubleFourVectorLongMaxLen;
}
constexpr int64_t kDoubleHalfTeamMaxLen = 97;
// Softmax's 16-lane rows run on a grid of at most this many blocks an SM, each block's warps taking row after row: on
// uncapped blocks (16 rows each, 4096 of them at 65536 rows) they trailed torch. Session 103's kernel's 54-59 registers
// let an SM hold 4 of its 256-thread blocks, so 8 was two waves (ncu, s103 call 5). H200, s103 call 1, forced, us cold
// / streamed: softmax 65536x89 34.5 / 34.7 uncapped, 32.5 / 32.0 at 4, 31.2 / 31.4 at 8 (torch ~30.4-31.7). Through
// auto (s103 call 2, uncapped -> 8; torch): softmax 65536x75 31.8 / 32.6 -> 28.7-29.8 / 28.6 (30.4 / 28.1), x83 33.2 /
// 34.2 -> 30.3 / 30.7 (31.5 / 28.6), x89 34.4 / 34.7 -> 31.1 / 31.5 (31.0 / 28.9), log_softmax x89 35.0 / 35.7 -> 33.1
// / 32.8 (31.8 / 28.6); x65 and x67 level. The 32-lane rows beside them lost capped (65536x127, 32 x 2: 37.9 -> 40.2 us
// cold at 8; 65536x199, 32 x 8: 58.6 -> 60.7 at 16), and so did the grid's short rows on auto's plans (s103 call 2,
// cold: fp32 65536x128 19.7 -> 19.8-20.9 at 4-16, bf16 65536x128 11.7 -> 11.6-12.4, bf16 16384x1024 19.0 -> 19.0-20.0).
// Capped, the 16-lane plan also wins at 90-97 elements (kDoubleHalfTeamMaxLen 89 -> 97), not beyond. H200, s103 call 3,
// us cold / streamed, 32 x 2 -> 16 x 4 capped (torch): softmax 65536x91 35.5 / 34.0 -> 31.1-31.6 / 31.8 (28.7
// streamed), x97 34.9 / 34.1 -> 34.1 / 33.6 (30.7 cold), log_softmax x97 38.8 / 36.8 -> 35.3 / 35.6 (28.7 streamed);
// but softmax x105 36.4 -> 38.5-39.9, x113 36.3 -> 40.3, x121 37.3 -> 43.5, x127 38.2 -> 46.4, 32768x127 20.6 ->
// 24.7-25.7, log_softmax 65536x127 39.7 -> 46.2.
// Since session 104 those rows run the kMany instantiation (softmax_launch.h's kManyFp64ScalarRowsMinBlocks: 40
// registers, 6 blocks an SM) on a grid of 12, again two waves; at 8 it was behind session 103's kernel (branch call,
// s103 call 6). H200, s104 call 1, us cold / streamed, two rounds, 8 on the general bound -> 12 on kMany (torch):
// softmax 65536x75 28.8 / 28.8 -> 26.7-27.3 / 26.4-26.5 (30.4-31.3 / 27.8-28.0), x89 32.3 / 31.9 -> 29.6-30.5 /
// 28.8-29.2 (31.1-31.5 / 29.1), x97 34.5 / 33.8-34.0 -> 32.5-33.2 / 31.7-32.0 (32.4-32.5 / 30.7-31.0), 65536x65 26.4
// / 24.3 -> 25.3-26.0 / 22.7-22.8 (30.0-30.2 / 27.9-28.0), 16384x67 11.3-11.5 / 7.7 -> 10.4-11.1 / 7.4-7.5 (12.0-12.7
// / 9.3); log_softmax 65536x89 32.9-33.1 / 33.0-33.1 -> 31.0-31.1 / 30.2-30.5 (31.8-32.2 / 28.7), x97 35.2-35.5 /
// 35.6-35.8 -> 33.5-34.6 / 33.3-33.4 (30.7-30.9 / 28.8).
constexpr int kDoubleHalfTeamBlocksPerSm = 12;
// log_softmax's 16-lane rows run uncapped, and up to kDoubleHalfTeamLogMaxLen: with the many-rows bound, they beat the
// capped grid, and the 32-lane plan (whose log_softmax trails its softmax by 4-5 us at 99-105 elements where the
// 16-lane one shares a row's logarithm between two rows, as it shares its reductions' shuffles). H200, s104 calls 3-4,
// forced, us cold / streamed, two rounds each, auto (12 blocks an SM to 97 elements, 32 x 2 beyond) / capped 16 x 4 /
// uncapped 16 x 4: 65536x75 29.4-29.5 / 27.9, 29.4-29.6 / 27.9-28.0, 28.0-28.2 / 27.6; x89 30.7-31.0 / 30.1,
// 30.8 / 30.1, 29.7-29.8 / 30.1; x97 33.5-33.8 / 33.0, 33.5-33.6 / 33.0-33.1, 32.5 / 31.8; x99 38.4 / 35.0-35.3,
// 34.9-35.2 / 33.6, 33.5-33.6 / 32.3-32.5; x101 37.3 / 35.1-35.2, 34.6 / 33.8-33.9, 33.3-33.5 / 34.5-34.6; but x105
// 38.4-38.5 / 35.3, 37.7-38.0 / 34.8, 36.0 / 37.0, x109 37.5-37.9 / 35.4-35.5, 37.7-37.9 / 36.1-36.2, 36.2-36.3 /
// 38.8-38.9, x113 37.5-38.0 / 35.7, 38.0-38.4 / 38.1-38.5, 37.5-37.6 / 39.9-40.1; and with fewer rows 16384x101
// 13.2-13.4 / 10.3-10.4, 13.1-13.4 / 11.3, 13.1-13.2 / 11.3. Softmax keeps the cap and 97: uncapped 16 x 4 lost 1-2
// us streamed at 75-101 (65536x75 26.3-26.4 -> 27.6-27.8; x101, against 32 x 2, 32.2-32.3 -> 34.6-34.7).
constexpr int64_t kDoubleHalfTeamLogMaxLen = 101;
constexpr int64_t double_half_team_max_len(SoftmaxOutput output) {
  return output == SoftmaxOutput::LogSoftmax ? kDoubleHalfTeamLogMaxLen : kDoubleHalfTeamMaxLen;
}
// fp32 rows of 33-40 vectors (132-160 elements: 16 x 4 fills at most 5/8 of its slots) take half teams from 44 warps
// an SM (11616 rows on 132 SMs); longer ones keep the 64-warp gate. H200, s93 call 4, forced 32 x 2 (auto) -> 16 x 4,
// us cold / streamed (torch): softmax 12288x132 8.6 / 5.9 -> 7.7 / 4.9 (8.4 / 6.3), 12288x160 9.0 / 6.2 -> 8.6 / 5.6
// (8.8 / 6.6), 14336x136 9.3 / 6.6 -> 8.8 / 6.0 (9.0 / 7.0), 16384x136 10.5 / 7.2 -> 9.6 / 6.5 (10.0 / 7.6),
// 16384x160 10.6 / 7.5 -> 10.1 / 7.3 (10.2 / 8.0), level at 14336x160 (9.3 / 6.9 -> 9.4 / 6.7); log_softmax
// 16384x136 10.5 / 7.0 -> 9.1 / 6.1 (9.0 / 6.7), 16384x160 10.3 / 7.5 -> 8.8 / 6.8 (9.3 / 7.3). Not longer rows there
// (16384x180 10.6 / 7.9 -> 11.0 / 8.0, x200 10.4 / 8.3 -> 11.0 / 8.6, x224 11.0 / 9.0 -> 11.3 / 9.3; 14336 rows
// alike), nor 8192 rows (31 warps an SM: x136 6.8 / 4.0 -> 7.0 / 4.3, x160 7.0 / 4.2 -> 7.2 / 4.6). 44 lies between
// the 31 warps that lost and the 46.5 (12288 rows) that won; the online algorithm's rows follow untimed.
// Rows of 41-44 vectors (164-176 elements) too since session 95: s94 call 6, two rounds through the op, auto (32 x 2
// below the 64-warp gate) -> 16 x 4 forced, us cold / streamed (torch): softmax 13312x164 8.8-9.0 / 6.6 -> 8.4-8.5 /
// 6.3 (9.2-9.3 / 6.8-6.9), 14336x164 9.1-9.4 / 6.9-7.0 -> 8.9-9.0 / 6.7, 15360x164 10.0-10.2 / 7.3 -> 9.8-9.9 / 7.0,
// 16384x164 11.2-11.4 / 7.6 -> 10.8 / 7.3 (10.4-10.6 / 8.2-8.3); log_softmax 13312x164 8.7-8.8 / 6.5 -> 8.2 / 6.4-6.5
// (8.7-8.8 / 6.3), 14336x164 9.1-9.2 / 6.8 -> 8.3 / 6.7, 15360x164 10.0-10.1 / 7.2 -> 8.9-9.1 / 6.8-6.9, 16384x164
// 11.1-11.3 / 7.4-7.5 -> 9.8-10.0 / 7.1 (9.6-9.9 / 7.5). Rows of 45 and more stay: 16384x180 lost in s93 call 4 (above)
// and won in s94 call 3 (one round), and 50 vectors ran level or lost softmax (16384x200 10.5-10.8 / 8.3 -> 10.7-10.9 /
// 8.4) while log_softmax gained cold (10.7 -> 9.9-10.1). s95 call 1 (one round, 32 x 2 forced -> auto, us cold /
// streamed): softmax 12288x168 8.9 / 6.3 -> 8.4 / 5.8, 14336x172 9.3 / 7.1 -> 9.3 / 6.9, 16384x176 10.5 / 7.8 -> 10.2 /
// 7.7; log_softmax 12288x168 9.1 / 6.2 -> 8.6 / 6.3, 14336x172 9.4 / 7.0 -> 8.7 / 7.0, 16384x176 10.0 / 7.8 -> 9.5 / 7.4.
constexpr int64_t kHalfTeamFp32ShortMaxVecs = 44;
constexpr int64_t kHalfTeamFp32ShortMinWarpsPerSm = 44;
template <typename T> bool half_team_rows(const SoftmaxProblem& p, const RowsShape& s, int64_t row_vecs) {
  const int64_t min_vecs = sizeof(T) == 2 ? 17 : sizeof(T) == 4 ? kHalfTeamFp32MinVecs : kHalfTeamFp64MinVecs;
  const bool short_fp32 = sizeof(T) == 4 && row_vecs <= kHalfTeamFp32ShortMaxVecs;
  const int64_t min_warps = short_fp32 ? kHalfTeamFp32ShortMinWarpsPerSm : kHalfTeamMinWarpsPerSm;
  return s.aligned && p.output != SoftmaxOutput::LogSumExp && row_vecs >= min_vecs && row_vecs <= 64 &&
         (sizeof(T) == 8 || 8 * row_vecs <= 7 * next_pow2(row_vecs)) &&
         s.rows * wide_team_lanes(row_vecs) >= int64_t(32) * min_warps * s.sms;
}

// Aligned 16-bit softmax and log_softmax rows under the max-then-sum reduction (auto or safe): the rows whose block
// sizes fewer_warp_rows and eight_warp_rows change.
template <typename T> bool max_then_sum_16bit_rows(const SoftmaxProblem& p, const RowsShape& s) {
  return sizeof(T) == 2 && s.aligned && p.output != SoftmaxOutput::LogSumExp &&
         p.algorithm != SoftmaxAlgorithm::Online;
}

// Step 2's aligned 16-bit softmax and log_softmax rows under the max-then-sum reduction whose last warp of kMaxVpt = 4
// vectors a thread would be part-filled run on one warp fewer, with a fifth vector each in shared memory
// (kFewerWarpSmemVecs): rows of 257-320 vectors (2049-2560 elements) on 64 threads instead of 96, rows of 513-640
// (4097-5120) on 128 instead of 160; fewer warps a row to meet, where the rows give every SM enough blocks.
// H200, s89 calls 4-5, us cold / streamed, 96 x 4 -> 64 x (4 + 1): bf16 softmax 65536x2056 162.6 / 164.5 -> 153.3 /
// 152.8, 65536x2304 165.4 / 166.9 -> 154.3 / 154.0, 52428x2560 137.7 / 138.2 -> 132.6 / 131.7, 16384x2056 42.6 / 43.4
// -> 41.9 / 41.3; log_softmax 65536x2056 162.2 -> 142.9, 52428x2560 136.6 -> 128.0, 16384x2056 42.0 -> 39.0; fp16
// alike. With fewer rows softmax lost cold (8448x2056, 64 rows an SM, 24.1 -> 24.6, fp16 23.5 -> 24.7; 4224x2304 14.8
// -> 15.4) where log_softmax still gained (23.9 -> 22.6): the gate lies between 64 and 124 rows an SM for softmax
// (kFewerWarpMinRowsPerSm); log_softmax takes them from 32 (kFewerWarpLogMinRowsPerSm; s90 call 1, through auto, bf16
// cold: 4224x2056 14.2 -> 13.7, 4224x2304 14.8 -> 14.2, 8448x2056 23.6 -> 22.3, 12671x2056 34.0 -> 31.6; fp16 alike).
// s90 call 3, forced, 160 x 4 -> 128 x (4 + 1), bf16 cold: log_softmax 16384x4104 76.0 -> 70.8, 16384x4608 78.5 ->
// 74.5, 16384x5120 83.6 -> 81.9, 32768x4104 148.5 -> 138.0, 4224x4104 22.9 -> 21.6; softmax 16384x4104 77.3 -> 74.3
// (fp16 75.0 -> 73.4), 32768x4104 150.5 -> 144.2, 16384x4608 79.7 -> 78.2 (fp16 78.0 -> 77.9), but 16384x5120 84.3 ->
// 85.1 (fp16 82.9 -> 84.9) and 4224x4104 fp16 22.5 -> 22.8: softmax there only to 576 vectors
// (kFewerWarpSoftmaxMaxVecs160). Rows the 96 threads fill lost (32768x3072 97.3 -> 103.8 on 64 x (4 + 2)), as did
// 128-thread blocks (65536x2056 187.5) and one warp of 4 + 5 (162.5, level); one warp fewer lost on the other sizes
// (s90 call 3: 128 -> 96 x (4 + 1), softmax 16384x3840 62.4 -> 66.2; 192 -> 160 x (4 + 1), 16384x5128 93.4 -> 97.6).
constexpr int kFewerWarpSmemVecs = 1;
constexpr int64_t kFewerWarpMinRowsPerSm = 96;
constexpr int64_t kFewerWarpLogMinRowsPerSm = 32;
constexpr int64_t kFewerWarpSoftmaxMaxVecs160 = 576;
// threads: the block the row would take at kMaxVpt vectors a thread (the fewest whole warps that hold it).
template <typename T>
bool fewer_warp_rows(const SoftmaxProblem& p, const RowsShape& s, int64_t row_vecs, int64_t threads) {
  if (!max_then_sum_16bit_rows<T>(p, s) || (threads != 96 && threads != 160) ||
      row_vecs > (threads - 32) * (RowsTraits<T>::kMaxVpt + kFewerWarpSmemVecs))
    return false;
  if (p.output == SoftmaxOutput::LogSoftmax) return s.rows >= kFewerWarpLogMinRowsPerSm * s.sms;
  return (threads == 96 || row_vecs <= kFewerWarpSoftmaxMaxVecs160) && s.rows >= kFewerWarpMinRowsPerSm * s.sms;
}

// Step 2's aligned 16-bit softmax and log_softmax rows under the max-then-sum reduction that need 9-15 warps at kMaxVpt
// = 4 vectors a thread (8193-15360 elements) run on 8 warps (kEightWarpThreads) with the rest of the row in shared
// memory. Why: that block kernel takes 64 registers (ptxas, sm_90a), so an SM holds 32 of its warps as floor(32 / w)
// blocks of w warps: 27 at w = 9, 30 at 10, 22 at 11, 24 at 12, 26 at 13, 28 at 14, 30 at 15, but 32 at 8
// (fewer_warp_rows' wins were the same step, 30 -> 32). H200, s91 call 1 (forced), us cold, bf16 softmax / log_softmax:
// 16384x8200 (9 warps -> 8 + 1 shared vector) 158.0 / 154.9 -> 151.6 / 141.1, 16384x9224 (10 -> 8 + 1) 168.2 / 165.5 ->
// 161.0 / 151.8, 16384x10248 (11 -> 8 + 2) 232.9 / 228.8 -> 187.1 / 168.2 (10 + 1: 202.8 / 191.8), 16384x12288 (12 -> 8
// + 2) 243.7 / 238.8 -> 208.7 / 196.5, 16384x14336 (14 -> 8 + 3) 272.1 / 267.3 -> 248.9 / 229.1; 4224 rows (32 an SM)
// alike (4224x10248 62.1 -> 52.7). Through auto (call 3), old plan forced -> auto: 16384x13312 (13 -> 8 + 3) 261.9 /
// 256.9 -> 235.0 / 211.3; 16384x15360 (15 -> 8 + 4) 281.8 / 276.0 -> 275.7 / 246.9, 4224x15360 softmax level (77.0 ->
// 76.9, fp16 75.0 -> 75.8); fp16 alike elsewhere. Rows of 7 warps lost on 6 + 1 (16384x6152 softmax 113.9 -> 116.8),
// and rows of 6-7 on 8 warps without shared vectors (call 4: 16384x5128 93.9 -> 112.4, 16384x6152 114.5 -> 116.9). Not
// fp32: its block kernel at 8 vectors a thread gained on 256 threads at some sizes and lost at others (NOTES "s91 call
// 5").
constexpr int kEightWarpThreads = 256;
constexpr int64_t kEightWarpMinRowsPerSm = 32;
// threads: the block the row would take at kMaxVpt vectors a thread.
template <typename T> bool eight_warp_rows(const SoftmaxProblem& p, const RowsShape& s, int64_t threads) {
  return max_then_sum_16bit_rows<T>(p, s) && threads > kEightWarpThreads && threads < kSplitThreads &&
         s.rows >= kEightWarpMinRowsPerSm * s.sms;
}

// Unaligned fp32 softmax and log_softmax rows of <= 2 vectors take two lanes a row: one lane's element-by-element
// loads and stores left it at half of torch's rate. H200, s91 call 1, us cold / streamed, 1 lane (forced) -> 2 lanes
// (auto): 65536x7 5.9 / 5.2 -> 5.5 / 2.3 (torch 5.9 / 2.7), 16384x7 4.9 / 3.8 -> 4.7 / 2.1, 4097x7 5.0 / 1.9 -> 4.9 /
// 1.4, 65536x3 5.6 / 3.1 -> 5.1 / 2.0, 65536x6 5.5 / 3.5 -> 5.5 / 2.2; log_softmax alike. 16-bit rows of one vector
// stayed on one lane (element pairs; but rows of 7 elements since session 92, scalar_rows_min_lanes): two lanes paid
// on bf16 65536x7 (6.0 / 4.2 -> 5.6 / 3.2) but lost on 65536x3 (5.1 / 2.0 -> 5.6 / 2.9) and 65536x6 (4.9 / 2.1 -> 5.6
// / 3.0). s90 call 7: 4 and 8 lanes slower at 65536 rows.
// Their rows of 4 vectors (13-16 elements) take one vector a lane too (kFourLaneMinLen), 4 lanes instead of 2
// lanes of 2. s91 call 7, through auto, us cold / streamed, 2 x 2 (forced) -> 4 x 1: softmax 65536x15 8.0 / 6.9 -> 6.3
// / 3.5 (torch 8.0 / 5.4), 65536x13 7.3 / 4.7 -> 6.2 / 3.3; log_softmax 65536x15 7.8 / 6.8 -> 6.8 / 3.5, 65536x13 6.4
// / 4.6 -> 6.7 / 3.2. Rows of 3 vectors (9-12 elements) stay on 2 x 2: 4 x 1 gained streamed but lost cold, log_softmax
// most (65536x9 5.2 / 3.8 -> 6.7 / 3.2, 65536x11 5.7 / 3.8 -> 6.6 / 3.1; softmax 65536x9 5.8 / 3.3 -> 6.1 / 3.2,
// 65536x11 6.5 / 3.8 -> 6.1 / 3.1). 8 lanes slower (s91 call 6, forced).
constexpr int64_t kScalarRowsMinLanes = 2;
// Unaligned 16-bit softmax and log_softmax rows (element pairs, pair_group.cuh) took one lane a row up to a vector (8
// elements) and two lanes for two. Two lengths paid more lanes, rows of 13-16 elements as fp32's (H200, s92 call 4,
// forced, us cold / streamed, torch in the same run). Rows of 7 elements on two lanes (kPairRowsTwoLaneLen): bf16
// 65536x7 6.5 / 4.1 -> 6.0 / 3.2 (torch 6.2 / 2.9), 16384x7 5.2 / 3.4 -> 5.0 / 2.3 (torch 5.1 / 2.2); four lanes 6.7 /
// 3.7. Not 3-6 elements: two lanes lost at 65536x3 2.0 -> 2.9 streamed, x5 2.7 -> 3.0, x6 2.0 -> 3.0 (why one lane runs
// rows of 7 at half the rate of 6 is not understood: a row of 7 spans 4 pairs at either shift). Rows of 13-16 elements
// on four lanes (kFourLaneMinLen): 65536x13 7.5 / 4.8 -> 7.2 / 4.0 (torch 8.0 / 5.0), 65536x15 7.5 / 5.4 -> 7.1 / 4.1
// (torch 7.6 / 5.0); not 9 (6.2 / 3.7 -> 7.1 / 3.8).
constexpr int64_t kPairRowsTwoLaneLen = 7;
// fp32 and 16-bit rows of 13-16 elements (4 fp32 vectors, 2 16-bit ones) take four lanes.
constexpr int64_t kFourLaneMinLen = 13;
constexpr int64_t kFourLaneMaxLen = 16;
// The fewest lanes an unaligned softmax or log_softmax row of len elements takes on the warp kernel.
template <typename T> int64_t scalar_rows_min_lanes(int64_t len) {
  if (sizeof(T) != 2 && sizeof(T) != 4) return 1;
  if (len >= kFourLaneMinLen && len <= kFourLaneMaxLen) return 4;
  if (sizeof(T) == 4) return kScalarRowsMinLanes;
  return len == kPairRowsTwoLaneLen ? 2 : 1;
}

// Whether step 3 splits rows that step 2's block would hold (threads <= kSplitThreads at kMaxVpt vectors a thread)
// because there are fewer of them than SMs. fp32 only where the block needs all 512 threads, 16-bit never: a block per
// row beat the split's chunks and exchange on fewer rows than SMs (H200, s91 call 1, forced, us cold / streamed, split
// -> block: fp32 97x4097 8.7 / 6.1 -> 7.1 / 4.5 (torch 6.6 / 4.2), 7x4097 7.6 / 4.6 -> 6.6 / 3.2, 33x8192 7.5 / 5.1 ->
// 7.2 / 3.8, 97x12289 10.8 / 9.7 -> 9.6 / 8.1, 127x8192 10.4 / 7.1 -> 8.4 / 6.5; bf16 97x4097 8.3 / 5.2 -> 6.2 / 4.1,
// 97x8192 8.2 / 5.5 -> 6.4 / 4.1 (torch 8.1 / 5.3), 97x16384 8.9 / 7.1 -> 7.9 / 5.4, but 33x16384 7.0 / 5.2 -> 7.5 /
// 3.7) but for fp32 rows of 512 threads (97x16384 11.4 / 9.9 -> 11.7 / 10.3, 33x16384 8.0 / 6.3 -> 9.4 / 6.2). fp64
// (not measured) splits as before: rows of more than kSplitThreads * kSmallVpt vectors.
template <typename T> bool few_rows_split(const RowsShape& s, int64_t threads) {
  if (s.rows >= s.sms) return false;
  if (sizeof(T) == 8) return s.nv > int64_t(kSplitThreads) * RowsTraits<T>::kSmallVpt;
  return sizeof(T) == 4 && threads == kSplitThreads;
}

template <typename T> RowsPlan heuristic_plan(const SoftmaxProblem& p, const RowsShape& s) {
  using Traits = RowsTraits<T>;
  RowsPlan plan;
  plan.smem = 0;
  const int64_t nv = s.nv;

  // 1. Warp-per-row. The fewest lanes (>= 1) that leave each lane >= 2 vectors (logsumexp: 4),
  //    counting the row's own vectors, ceil(len / kVec); scalar rows whose lanes would then hold more than 8
  //    values (scalar_rows_whole_warp) take the fewest lanes that hold the row at one vector each, and whole
  //    warps beyond. Why 4 for logsumexp: with no store pass a lane's loads are all it waits for, and more of
  //    them in flight paid (H100 sweep through the op, 65536x128, NOTES "s32 run 4": fp32 18.3 -> 16.8 us
  //    cold, 14.8 -> 14.4 streamed; bf16 11.7 -> 10.4, 8.5 -> 8.0), where the softmax sweep found 2 faster on
  //    128-element bf16 rows. Why 2 vectors for fp32 scalar rows: the rows' fixed costs (shuffles, offsets)
  //    are then shared by half the lanes, and these kernels issue an instruction nearly every cycle (H200,
  //    s60 call 3, us cold / streamed: fp32 65536x127 on 16 lanes x 8 values 21.1 / 19.6 against 24.1 / 22.5
  //    on 32 x 4, torch 22.0 / 20.0; 65536x97 20.1 / 17.4 against 23.6 / 21.4; 65536x61 13.1 / 11.3 against
  //    13.6 / 11.7).
  //    Rows beyond kMaxVpt vectors a lane (16-bit rows of 1025-2048 elements: logsumexp, and softmax and log_softmax
  //    under the max-then-sum reduction, aligned or on the memory's grid: grid_softmax_rows says why the latter since
  //    s98) take the warp kernel only where they give every SM
  //    kWideWarpMinRowsPerSm warps: fewer, and the 64-thread blocks' two warps a row finish sooner (H200 A/B, s83 call
  //    1, logsumexp, bf16 us cold / streamed, warp vs block: 32768x2000 35.1 / 32.9 vs 43.4 / 40.8, 8192x1032 10.9 /
  //    7.4 vs 13.8 / 10.4, but 4096x2048 9.7 / 6.9 vs 9.2 / 7.0 and 100x2000 5.4 / 2.4 vs 4.9 / 1.9; s89 call 1,
  //    softmax, block -> warp: 65536x1032 94.9 / 94.1 -> 80.1 / 80.5, 65536x1280 99.1 / 100.1 -> 85.8 / 91.0,
  //    65536x1536 105.9 / 111.7 -> 96.0 / 108.7, 16384x1536 29.2 / 29.0 -> 26.8 / 27.1, 8192x1032 16.2 / 14.2 -> 13.9
  //    / 12.4, level at 32768x2000 and 4096x2048, but 1024x1536 streamed 4.2 -> 4.8; log_softmax and fp16 alike).
  //    Unaligned logsumexp rows of 16-bit types and fp32 are held on the memory's grid (lse_rows_on_grid) in the
  //    slots of their own vectors, as aligned rows of that length are: the granule a row's misalignment adds past
  //    them is folded into a slot's places before the row (FoldedGranule). Counted on the grid (s.nv), rows a power of
  //    two vectors long less an element took twice the slots (H200, s86 calls 2-3, us cold / streamed, main -> folded:
  //    fp32 65536x127 22.9 / 19.4 -> 14.3 / 11.4, 65536x255 41.2 / 37.5 -> 23.5 / 20.6, 16384x1023 25.5 / 22.6 -> 21.7
  //    / 18.7; bf16 65536x127 14.0 / 10.9 -> 9.9 / 6.9, 65536x1023 47.4 / 45.1 -> 42.5 / 40.1, 32768x2047 56.6 / 53.7
  //    -> 35.3 / 33.2, 4096x1023 9.7 / 7.2 (block) -> 7.5 / 4.2). Unaligned 16-bit softmax and log_softmax rows are
  //    held so where grid_softmax_rows says, in teams of their own.
  const int64_t row_vecs = ceil_div(s.len, Traits::kVec);
  const bool rows_for_wide_warps = s.rows >= kWideWarpMinRowsPerSm * s.sms;
  const bool grid_rows = !s.aligned && lse_rows_on_grid<T>(p.output);
  // unaligned rows off the grid: 32 * kMaxVpt (warp_max_vpl is kMaxVpt for them but for fp64: kDoubleWarpMaxVpl)
  const bool online_on_chip = p.algorithm == SoftmaxAlgorithm::Online;
  const bool on_grid = grid_softmax_rows<T>(p, s, row_vecs);
  const int64_t warp_vecs =
      rows_for_wide_warps ? 32 * warp_max_vpl<T>(p.output, s.aligned || on_grid, online_on_chip) : 32 * Traits::kMaxVpt;
  if (row_vecs <= warp_vecs) {
    plan.kind = RowsKind::Warp;
    if (on_grid || half_team_rows<T>(p, s, row_vecs)) {  // 8-32 lanes of <= 4 vectors
      plan.grid = on_grid ? 1 : 0;
      plan.lanes = wide_team_lanes(row_vecs);
      plan.vpt = static_cast<int>(next_pow2(ceil_div(row_vecs, plan.lanes)));
      return plan;
    }
    // Unaligned softmax and log_softmax rows, read element by element or as pairs: at least the lanes
    // scalar_rows_min_lanes says.
    const bool scalar_rows = !s.aligned && p.output != SoftmaxOutput::LogSumExp;
    const int64_t per_lane = p.output == SoftmaxOutput::LogSumExp ? 4 : 2;
    const int64_t min_lanes = scalar_rows ? scalar_rows_min_lanes<T>(s.len) : 1;
    plan.lanes = static_cast<int>(std::clamp<int64_t>(next_pow2(ceil_div(row_vecs, per_lane)), min_lanes, 32));
    plan.vpt = static_cast<int>(next_pow2(ceil_div(row_vecs, plan.lanes)));
    if (whole_warp_team<T>(s.aligned, grid_rows, plan.vpt)) {
      plan.lanes = static_cast<int>(next_pow2(std::min<int64_t>(row_vecs, 32)));
      plan.vpt = static_cast<int>(next_pow2(ceil_div(row_vecs, plan.lanes)));
    }
    // Unaligned fp64 softmax and log_softmax rows of 65-128 vectors (129-256 elements), many of them: whole warps of 8
    // vectors a lane (kDoubleWarpMaxVpl; the rows end in a lane's first 5, kHead), not 32 lanes of 4. Why: the kernel
    // of 8 values a lane is bound to 3 blocks of 256 threads an SM (scalar_rows_min_blocks: 74-78 registers then, 56-63
    // since session 101's live_vectors), the one
    // of 16 to 4 (62 registers; launched at 128 threads), twice the bytes in flight a warp and more warps. H200, s100
    // call 3, us cold / streamed, 4 -> 8 vectors: softmax 32768x255 56.4 / 56.7 -> 37.1 / 36.0, 65536x199 89.0 / 89.2
    // -> 65.4 / 62.9, log_softmax 32768x255 56.1 / 57.2 -> 38.4 / 37.6 (torch 35.3, 54.8, 35.1). Aligned rows stay on
    // 4 vectors (32768x256 34.0 against 36.6 at 8; 65536x200 55.1 against 67.1).
    // Since session 101, under the max-then-sum reduction, rows of up to kDoubleFourVectorMaxLen elements keep 4
    // vectors a lane at 128 threads, and rows of 65-kDoubleHalfTeamMaxLen take 16 lanes of 4 vectors (two rows a warp)
    // rather than 32 of 2. H200, s101 call 5, forced, us cold (auto -> forced; torch): 32 x 4 at 128 threads, softmax
    // 65536x129 56.0 -> 48.5 (48.8), x143 56.2 -> 49.2 (49.1), x161 55.7 -> 50.1 (51.0), 8192x151 11.4 -> 11.0 (10.9),
    // log_softmax 65536x151 59.6 -> 55.1 (45.6), but x171 55.9 -> 57.8, x181 56.6 -> 63.1; 16 x 4, softmax 65536x65 36.2
    // -> 27.2 (30.6), x75 37.6 -> 28.9, x83 37.9 -> 29.4, x89 37.7 -> 35.9 (30.7), 16384x67 12.9 -> 10.5 (11.9),
    // log_softmax 65536x67 40.7 -> 29.8 (30.5), x89 41.2 -> 35.6 (31.2), but x93 level cold and 35.5 -> 37.8 streamed;
    // since session 103 on a capped grid (kDoubleHalfTeamBlocksPerSm), which also wins at 90-97 elements; since
    // session 104 log_softmax's run uncapped, to 101 elements (kDoubleHalfTeamLogMaxLen). Since session 108 the
    // 4-vector rows reach 225 elements (log_softmax's since session 109: 256) where rows are many
    // (kDoubleFourVectorLongMaxLen says why): the many-rows kernel turned s101's losses at 171-181 into gains.
    // The online reduction (the general kernels) keeps the old plans: not timed.
    if (std::is_same_v<T, double> && scalar_rows && rows_for_wide_warps && plan.lanes == 32) {
      const bool fixed = p.algorithm != SoftmaxAlgorithm::Online;
      const bool many_long_rows =
          s.len <= double_four_vector_long_max_len(p.output) && s.rows >= kDoubleFourVectorLongMinRowsPerSm * s.sms;
      if (plan.vpt == 4 && fixed && (s.len <= kDoubleFourVectorMaxLen || many_long_rows)) {
        plan.threads = kWarpRowsSmallThreads;
      } else if (plan.vpt == 4) {
        plan.vpt = kDoubleWarpMaxVpl;
      } else if (plan.vpt == 2 && fixed && s.len <= double_half_team_max_len(p.output)) {
        plan.lanes = 16;
        plan.vpt = 4;
        plan.bpsm = p.output == SoftmaxOutput::LogSoftmax ? 0 : kDoubleHalfTeamBlocksPerSm;
      }
    }
    return plan;
  }

  const int vpt = Traits::kMaxVpt;
  const int64_t threads = round_up(ceil_div(nv, vpt), 32);
  const bool auto_alg = p.algorithm == SoftmaxAlgorithm::Auto;
  const bool auto_rows = auto_alg && p.output != SoftmaxOutput::LogSumExp;

  // 0. Pipelined (sm_90+, aligned, "auto", every output) for rows beyond 512 threads of registers, with the
  //    ring layout the H100 sweeps measured fastest: a few very long rows split over many blocks, one block
  //    (a full ring) per SM (bf16 8x4194304: 72 us vs 77-79 with two blocks or the split kernel); rows too
  //    long for half a ring but not for a whole one held whole by one block per SM, so no row waits on an
  //    exchange (fp32 1024x32768: 101 us vs 117 two blocks, 108 block kernel; bf16 2048x65536: 201 vs 226);
  //    everything else two blocks per SM, half the SM's shared memory each, so one block's reduction and
  //    exchange overlap the other's (bf16 1024x32768 49 us vs 60 one block, 128x262144 62 vs 67). Half is 7
  //    pieces since s33 (was 6; sweep through the op, cold / streamed: bf16 1024x32768 49.9-50.4 / 53.8-54.6
  //    us vs 50.9 / 55.1, and rows of 64-80 KB now fit two blocks per SM: bf16 1024x40960 65.5-65.7 / 68.3-69.1
  //    vs 70.5 / 71.9 one block per SM). Whole rows whose last round would be part-filled run as a head and a
  //    tail launch (kTailMinHeadBlockBytes, since s35).
  // 0a. Dual-role (sm_90+, aligned, "auto", every output), chunks of <= 128 KB: rows the pipelined kernel would split
  //     (at most one round per row), and whole rows where rows fill the SMs (fp32 rows of one or two items, 16-bit rows
  //     of one item beyond two pipelined blocks per SM). H100 sweeps through the op, dual vs the pipelined plan (us):
  //     s17 fp32 8x4194304 117 vs 126, 128x262144 113 vs 119, 32x1000000 113 vs 136, 2048x65536 410 vs 421; s18 (2-3
  //     rounds) fp32 1024x32768 98.3-100.3 vs 101.5-102.7, 1024x24576 72.1-72.4 vs 77.0-77.2 (4096x32768 389-390 vs
  //     384.5: the one loss, 1.3 %); 16-bit split rows once the register role kept 8 loads in flight (s18, two rounds):
  //     bf16 128x262144 55.3-56.0 vs 61.0-61.2, 8x4194304 56.0-56.7 vs 64.0, 256x131072 56.0-56.7 vs 60.8-61.9,
  //     512x131072 110 vs 118-120, fp16 alike. 16-bit whole rows of 80-128 KB too since s33 (below; s18 had 2048x65536
  //     at 219 vs 200 with 16 register-role loads in flight), the shorter ones stay pipelined, and fp64 rows (its dual
  //     kernel spills; not timed).
  // Unaligned rows (s.pipe: the output on the input's grid) take the resident kernel as aligned ones would (its edge
  // vectors), whatever their size, then (fp32 and 16-bit types, softmax and log_softmax) the dual kernel as aligned
  // ones would, and otherwise the pipelined kernel only where it beat the split kernel, which also moves them as
  // 16-byte vectors (load_group_shifted): tensors of >= 16 MiB whose rows are <= 128 KiB or few (unaligned_pipe_rows).
  const bool pipe_rows = s.aligned || unaligned_pipe_rows(p, s);
  const int64_t resident_items = auto_rows ? resident_chunks<T>(s) : 0;
  const bool unaligned_dual_rows = auto_rows && !s.aligned && s.dual;
  if (auto_alg && s.pipe && threads > kSplitThreads && (pipe_rows || resident_items > 0 || unaligned_dual_rows)) {
    // logsumexp keeps nothing for a store pass, so nothing need stay on chip: the streaming reduce (many
    // small blocks, all of the SM's warps folding) against the best of the pipelined and dual plans (one
    // block of 4-8 folding warps per ring), H100 sweep through the op, cold (NOTES "22a594a"): bf16
    // 8x4194304 31.9 vs 37.5 us, 128x262144 31.7 vs 36.0, 1024x32768 31.8 vs 34.0; fp32 8x4194304 54.2 vs
    // 61.8, 128x262144 53.8 vs 60.3, 1024x32768 53.9 vs 53.7 (the one tie).
    if (p.output == SoftmaxOutput::LogSumExp) {
      plan.kind = RowsKind::Stream;
      plan.steps = stream_steps_per_chunk<T>(p, s.len);
      return plan;
    }
    // 0. Resident (sm_90+, 16-bit or fp32; unaligned rows with the output on the input's grid, no teams): items a block
    // holds whole (resident_chunks, resident_teams); teams first where their blocks fit one wave, or, 2 or 4 a block,
    // beyond it where they fill kResidentMinFill of the waves they span (an average: 2048x49152's 512 blocks fill 88 %
    // of their last wave) and either their items are exactly 512 KB (the instantiation without bounds) or
    // resident_chunks takes no whole rows (rows of 96-120 KB, which the dual kernel holds whole). A part-filled last
    // wave of teams' blocks costs most of a wave. Bf16, us cold, teams -> dual (NOTES "s71 call 4", "s71 call 5"):
    // 594x49152 52.6 -> 43.0 (1.13 waves), 660x49152 55.0 -> 44.8, 792x49152 59.1 -> 52.5, 594x61000 67.4 -> 50.6,
    // 530x50000 46.5 -> 41.8; teams won in full waves, 1056x49152 65.5 against 67.8, 2048x49152 124.1 against 127.4,
    // 1024x61000 81.3 against 83.2, and at 529x49152 (one row past a wave; 38.8 against 40.8: left to dual). Exact
    // items, 4 or 2 a block -> one row a block ("s72 call 3"): 530x65536 (133 blocks) 57.0 -> 47.2, 594x65536 69.0 ->
    // 52.2, 800x65536 70.7 -> 65.3, 266x131072 61.2 -> 47.0, 300x131072 64.3 -> 54.0, 400x131072 69.2 -> 65.7; in full
    // waves teams, 1056x65536 81.2 against 82.7, 528x131072 80.1 against 83.5. Rows of 48-64 KB, 8 a block, beyond
    // one wave go to the pipelined kernel, two blocks per SM, whatever the fill ("s72 call 2"): 1060x32768 (133 blocks)
    // 56.7 -> 44.0, 1100x32768 68.0 -> 44.8, 1200x32768 68.1 -> 48.8, 1400x32768 71.0 -> 54.3, 1584x32768 73.6 ->
    // 62.0, 1100x30000 65.2 -> 43.9, 1300x30000 67.3 -> 50.6; and in full waves too ("s73 call 1", cold / streamed):
    // 2048x32768 80.8 / 81.0 -> 76.2 / 76.3, 3168x32768 124.1 / 126.2 -> 119.0 / 125.8, 4096x32768 158.8 / 168.5 ->
    // 148.4 / 162.1, 2048x32000 83.1 / 87.5 -> 75.4 / 78.3, 4096x32000 161.7 / 163.3 -> 144.5 / 144.4, level at
    // 2112x32768 (83.0 / 83.4 -> 82.7 / 83.1).
    const int64_t teams = resident_teams<T>(s);
    const int64_t team_blocks = teams > 0 ? ceil_div(s.rows, teams) : 0;
    const bool teams_fill_waves = team_blocks >= kResidentMinFill * ceil_div(team_blocks, s.sms) * s.sms;
    const bool teams_exact = s.row_bytes * teams == kResidentMaxItemBytes;
    const bool teams_beyond_wave = teams < 8 && teams_fill_waves && (teams_exact || resident_items == 0);
    const bool teams_first = teams > 0 && (team_blocks <= s.sms || teams_beyond_wave);
    if (teams_first) {
      plan.kind = RowsKind::Resident;
      plan.chunks = 1;
      plan.rows = static_cast<int>(teams);
      // Whole rows of exactly 256 KB, a multiple of 8 of them, whose groups of 4 blocks fit one wave: teams of 8 over
      // rows cut in 4 chunks of 64 KB (resident_split_teams' layout) rather than 2 whole rows a block. Teams of 2 have
      // no helpers for their stores (the kHelp instantiations are teams of 4 and 8), and 8 teams a block let the first
      // teams store while the last still read. H200, bf16, us cold / streamed, teams of 2 -> teams of 8 over 4 chunks
      // (NOTES "s79 call 1"): 256x131072 39.2-39.5 / 40.7 -> 38.0-38.3 / 40.2-40.3, 264x131072 40.6-41.0 / 41.3 ->
      // 38.5-38.8 / 41.7. Not for 512 KB rows (128x262144 as 8 chunks: -1.1 cold, +1.0 streamed, "s78 call 8"), nor
      // 128 KB rows as 2 chunks (teams of 4 -> 8: 512x65536 37.8-37.9 / 39.6-39.8 -> 37.0-37.1 / 39.8-40.1, 528x65536
      // 38.5-38.6 / 40.0-40.1 -> 38.7-38.8 / 41.5).
      const int64_t row_chunks = s.row_bytes * 8 / kResidentMaxItemBytes;
      if (teams == 2 && teams_exact && split_teams_layout<T>(s, row_chunks) &&
          split_teams_blocks(s, row_chunks) <= s.sms) {
        plan.rows = 8;
        plan.chunks = static_cast<int>(row_chunks);
      }
      return plan;
    }
    const int ring_one = pipe_ring_pieces(s, 1);
    const int ring_two = pipe_ring_pieces(s, 2);
    const int chunks_one = pipe_chunks<T>(s, 1, ring_one);
    const bool few_long_rows = chunks_one > 1 && s.rows * 8 <= s.sms;
    const bool whole_rows_one_per_sm = chunks_one == 1 && s.rows >= s.sms && pipe_chunks<T>(s, 2, ring_two) > 1;
    int64_t dual_items = 0;  // the dual plan's chunks, or 0
    if (s.dual) {
      const int64_t chunks = dual_chunks<T>(s);
      // An item must also fit the ring (it does on sm_90's 227 KB; guards smaller opt-in shared memory).
      const bool fits = chunks <= s.sms && item_ring_pieces<T>(s, dual_chunk_elems<T>(s.len, chunks)) <= ring_one;
      // Both roles get items only from a second round on: a launch of one round is the ring role alone, 4
      // warps where the pipelined kernel has 8 for 16-bit (s18: bf16 2x4194304 25.4 us vs 20.7; fp32
      // 1x4194304 22.4 vs 20.5).
      const bool two_rounds = s.rows > s.sms / chunks;
      const bool split_rows = chunks_one > 1 && chunks > 1 && sizeof(T) <= 4;  // fp64: not measured (spills)
      // Whole rows when rows fill the SMs: every such fp32 row (> 64 KB here) in one item (<= 128 KB) or two (<=
      // 192 KB, since s34), and 16-bit rows of one item too long for two pipelined blocks per SM (80-128 KB).
      // H100 sweeps through the op, dual vs the pipelined plan, us, cold / streamed, s33: fp32 1024x20480
      // 64.0-64.3 vs 70.4 streamed (two blocks per SM, 7 pieces), 2048x16896 107.4-107.7 vs 113.3; bf16
      // 256x65536 27.2 vs 30.4 / 28.2-28.3 vs 29.8-30.0, 512x65536 48.8 vs 57.5 / 53.9-54.0 vs 58.3-58.5,
      // 1024x65536 97.7 vs 105.3 / 100.1-101.0 vs 105.5-105.7, 2048x65536 191.2 vs 200.7 / 196.8-198.3 vs
      // 201.2-202.4, 1024x49152 77.0 vs 85.3 / 78.9-79.4 vs 84.7, 2048x50304 155.6 vs 166.2 / 157.1-168.2 vs
      // 165.9-166.0 (the one loss, 1.3 %); s34, fp32 rows of two items against one pipelined block per SM:
      // 133x49144 28.7 vs 33.7 / 29.1-29.4 vs 32.0-32.2, 264x49152 38.7 vs 43.0 / 44.0-44.1 vs 44.5-44.7,
      // 512x49152 77.4 vs 81.1 / 79.7-80.3 vs 82.5-82.6, 1024x49152 147.7 vs 153.6 / 152.8-153.6 vs
      // 156.3-157.3, 512x45056 70.6 vs 73.0 / 74.3-74.8 vs 74.9-75.8. 16-bit rows of <= 80 KB stay pipelined
      // two per SM (bf16 4096x32000: dual 220-222 us, pipelined 188-199), and 16-bit rows of two items go to
      // the pipelined kernel's crowded rows below (cold / streamed, bf16 512x98304: dual 82.4 / 86.6, two
      // pipelined blocks per SM 81.3 / 85.4; 264x98304 42.5 / 49.4 vs 42.6 / 45.8).
      const bool whole_rows = chunks_one == 1 && s.rows >= s.sms;
      const bool dual_whole_rows = whole_rows && ((sizeof(T) == 4 && chunks <= 2) ||
                                                (sizeof(T) == 2 && chunks == 1 && whole_rows_one_per_sm));
      if (fits && two_rounds && (split_rows || dual_whole_rows)) dual_items = chunks;
    }
    // 16-bit unaligned whole rows of 80-96 KB beyond one wave take the dual kernel where it holds them in one item (it
    // cuts rows that fill a few waves in two, and its 16-bit rule refuses those), else the resident kernel.
    const bool dual_over_resident = !s.aligned && sizeof(T) == 2 && s.rows > s.sms &&
                                    s.row_bytes < kResidentMinUnalignedDualRowBytes;
    if (resident_items > 0 && !(dual_over_resident && dual_items > 0)) {
      plan.kind = RowsKind::Resident;
      plan.chunks = static_cast<int>(resident_items);
      if (resident_split_teams<T>(s, resident_items)) {
        plan.rows = 8;
        plan.chunks = static_cast<int>(8 * resident_items);
      }
      return plan;
    }
    if (dual_items > 0) {
      plan.kind = RowsKind::Dual;
      plan.chunks = static_cast<int>(dual_items);
      return plan;
    }
    // 16-bit whole rows that leave fewer than 3 of the one-block ring's pieces free (> 176 KB of 16 KiB pieces
    // on the H100) stream the next row in too late: they are cut over two blocks per SM instead. H100 sweeps
    // through the op, s34, two blocks per SM vs one, us, cold / streamed: bf16 133x98296 28.2 vs 37.0 /
    // 29.9-30.1 vs 34.8-35.0, 512x98304 81.3-82.5 vs 85.8-86.1 / 84.9-85.4 vs 85.9-86.5, 1024x98304
    // 155.6-156.8 vs 159.8-160.8 / 158.3-159.1 vs 160.5-162.3, 2048x98304 301.3 vs 303.0 / 301.4-304.6 vs
    // 303.5-305.4, fp16 264x98304 42.5 vs 47.6 / 45.8-46.2 vs 47.4; rows of 176 KB stay (bf16 512x90112 76.3
    // vs 77.4 / 80.0-80.1 vs 78.4), as do those of 160 KB (1024x81920 131.8 vs 130.7 / 136.8 vs 134.3) and
    // 144 KB (512x73728 64.0 vs 63.2 / 68.0 vs 64.3).
    const bool crowded_whole_rows = sizeof(T) == 2 && whole_rows_one_per_sm &&
                                    ceil_div(s.row_bytes, int64_t(kPipePieceBytes)) > ring_one - 3;
    // So are 16-bit whole rows of 128-176 KB at 2.25-3.25 rows per SM, whose last round one block per SM
    // leaves part-filled after too few rounds for the tail launch to even it out. H100 sweep through the op,
    // s35 (calls 2, 3, 5), two blocks per SM vs one, us, streamed / cold: bf16 300x73728 43.2-44.8 vs 47.3-47.5
    // / 43.0-44.3 vs 47.9-48.0, 350x73728 47.1-47.6 vs 50.8 / 45.2-45.3 vs 50.7-50.8, 350x81920 51.1-51.6 vs 56.5
    // / 48.9-49.3 vs 56.0-56.1, 300x90112 52.3 vs 56.7 / 49.9-50.0 vs 56.5-56.6, 350x90112 55.6-56.2 vs
    // 61.2-61.3 / 54.2-54.3 vs 60.9-61.1, fp16 400x90112 63.8-65.0 vs 65.9-66.7 / 61.9-63.4 vs 67.8-68.5. Outside
    // it one block per SM stays: at ~1.9-2 rows per SM (bf16 250x73728 33.3-33.5 vs 36.7-36.9 / 33.1-33.4 vs
    // 35.2-35.4, fp16 264x90112 42.1-42.3 vs 43.2-43.9), at 3.4 mixed (bf16 450x73728 61.7-62.1 vs 63.1-63.9
    // streamed, 450x81920 65.8-66.5 vs 67.9-68.0) and at 3.9 (s34: 512x73728 63.2 / 64.3 vs 64.0 / 68.0).
    const bool few_rounds_whole_rows = sizeof(T) == 2 && whole_rows_one_per_sm && 4 * s.rows >= 9 * int64_t(s.sms) &&
                                       4 * s.rows < 13 * int64_t(s.sms);
    const int per_sm =
        few_long_rows || (whole_rows_one_per_sm && !crowded_whole_rows && !few_rounds_whole_rows) ? 1 : 2;
    const int chunks = per_sm == 1 ? chunks_one : pipe_chunks<T>(s, 2, ring_two);
    // Many 16-bit whole rows of up to 40 KB go to the block kernel (2b.) instead: its blocks are not persistent, so the
    // hardware hands rows to SMs as they free up, and at >= ~12 rows per SM that outweighs the ring's prefetch. H100
    // sweep through the op, s33, the block kernel (512 threads) vs the pipelined one, us, cold / streamed: bf16
    // 2048x32768 97.4 / 99.1-99.6 vs 98.7 / 105.1-107.0, 4096x32000 181.5 / 184.2-184.3 vs 189.5 / 196.7-198.9; at ~8
    // rows per SM the pipelined kernel stays (1024x32768 52.4 / 54.2-54.3 vs 50.0 / 54.1-54.2; 1024x24576 38.9 / 39.2
    // vs 37.5 / 41.1-41.3); 12 rows per SM is where the two timings disagreed (s34: 1584x32768 77.3 vs 76.2 / 78.7 vs
    // 80.1). Rows of 48-64 KB stay pipelined since s72: on the H200 the block kernel lost there and still won on
    // shorter rows (NOTES "s72 call 4", us cold / streamed, block vs pipelined, two blocks per SM): bf16 1584x32768
    // 70.5 / 70.0 vs 61.7 / 62.8, 1848x32768 80.9 / 79.7 vs 72.3 / 72.5, 1700x28000 62.6 / 61.6 vs 59.5 / 58.2, fp16
    // 1584x32768 69.3 / 68.9 vs 62.4 / 63.0; 2048x20000 52.2 / 50.8 vs 57.4 / 56.3, 4096x20000 96.2 / 95.5 vs 105.5 /
    // 104.4, 3000x16400 66.5 / 65.4 vs 70.3 / 68.9, fp16 4096x20000 95.3 / 95.1 vs 106.2 / 105.4. Rows of 40-48 KB too
    // since s73 ("s73 call 1", "s73 call 2"): the block kernel's win ends where its 512 threads keep a second vector
    // each in shared memory (2048x20480, 40 KB, 52.1 / 51.8 vs 57.4 / 56.1; 2048x21504, 42 KB, 59.0 / 57.4 vs 58.3 /
    // 57.5; 3000x21504 82.7 / 82.9 vs 80.5 / 79.8, 3000x22016 83.3 / 82.6 vs 81.0 / 80.4, 1700x22528 50.7 / 49.4 vs
    // 48.8 / 48.6, fp16 3000x21504 81.0 / 80.4 vs 81.2 / 80.0).
    // (Unaligned rows stay: the block kernel keeps no part of them in shared memory.)
    const bool many_short_whole_rows = sizeof(T) == 2 && s.aligned && per_sm == 2 && chunks == 1 &&
                                       s.row_bytes <= kBlockMaxManyRowBytes && s.rows >= 12 * int64_t(s.sms);
    // fp64 rows fall through to the block kernel (2b., else 2.) and the streaming one (4.; not split, 3. says why): the
    // pipelined kernel folds a piece of 2048 doubles with 64 threads (pipe_threads), two warps of fp64 exponentials an
    // SM. H200, s100 call 4, us cold / streamed, pipelined (auto) -> the block kernel's 512 threads x 12 shared vectors
    // (2b.) or the streaming kernel: softmax 1024x16384 437.8 / 434.7 -> 108.1 / 109.2 (block), 130.1 / 130.6 (stream),
    // log_softmax 345.1 / 342.6 -> 89.3 / 91.4 (block); 2048x8192 235.1 -> 130.1 (stream; 104.9 on 2b.'s 512 x 4, call
    // 5), 512x32768 260.0 -> 130.3 (stream), 64x262144 259.3 -> 130.1 (stream); torch 144.3, 153.2, 149.9, 261.4;
    // log_softmax 129.8.
    if (chunks > 0 && !many_short_whole_rows && pipe_rows && sizeof(T) <= 4) {
      plan.kind = RowsKind::Pipe;
      plan.threads = pipe_threads<T>();
      plan.chunks = chunks;
      plan.bpsm = per_sm;
      return plan;
    }
  }

  // 2b. Block-per-row with shared memory: the block size with the most resident threads among those with
  //     >= 2 resident blocks per SM, 512 on a tie (H100 sweep through the op, s33, bf16 rows of 64 KB, us,
  //     cold / streamed: 512 threads x 4 shared vectors 52.4 / 54.2 at 1024x32768, 97.4 / 99.1-99.6 at
  //     2048x32768; 256 x 12, resident since the opt-in fix of s33 and tied on resident threads, 60.6 /
  //     62.9-63.0 and 107.5 / 109.1-109.2).
  if (auto_alg && s.aligned && threads > kSplitThreads && s.rows >= 2 * int64_t(s.sms)) {
    int64_t best_resident = 0;
    for (int t : {512, 256}) {
      const int64_t smem_vecs = ceil_div(nv, t) - vpt;
      const size_t bytes = size_t(t) * smem_vecs * 16;
      if (bytes + 1024 > s.smem_optin) continue;
      const int per_sm = block_rows_blocks_per_sm<T>(vpt, true, t, bytes);
      if (per_sm >= 2 && int64_t(per_sm) * t > best_resident) {
        best_resident = int64_t(per_sm) * t;
        plan.kind = RowsKind::Block;
        plan.vpt = vpt;
        plan.threads = t;
        plan.smem = static_cast<int>(smem_vecs);
      }
    }
    if (best_resident > 0) return plan;
  }

  // 3. Split beyond 512 threads (several 256-thread blocks per SM overlap one row's store with the next one's
  //    load, a 1024-thread block leaves its SM's memory pipe idle during its reductions) and when the rows
  //    alone cannot fill the GPU. Choose (vectors per thread in registers, vectors per thread in shared
  //    memory) so that all chunks of a row are co-resident (chunks <= resident blocks: required for deadlock
  //    freedom), preferring room for two rows at once (the next row loads while one row waits), the fewest
  //    shared-memory vectors, and the small register size when the large one leaves SMs idle. Otherwise
  //    fall through.
  //    fp64 rows beyond 512 threads where the pipelined kernel could run (sm_90: step 0 passes them on) and that 2b.
  //    did not take do not split: those of up to 1024 threads (8192 doubles) take a block a row (2.), longer ones
  //    stream. H200, us cold, fp64 softmax 8x4194304 on the split kernel (auto before aefecaf) 320.7, streaming 250.5
  //    (s100 call 4); forced split (vpt=large) against streaming 64x262144 223.7 / 130.6, 512x32768 211.0 / 131.3,
  //    128x131072 220.7 / 130.9 (call 5; torch 152.0-264.9); a block a row against streaming (call 7): 8x8192 10.3 /
  //    18.3, 64x8192 11.7 / 20.3, 528x8191 35.7 / 42.6, 5x8191 10.6 / 18.5, 100x6000 10.9 / 19.1 (torch 11.0-40.6).
  const bool long_fp64_rows = sizeof(T) == 8 && s.pipe && threads > kSplitThreads;
  const bool prefer_split =
      auto_rows && !long_fp64_rows && (threads > kSplitThreads || few_rows_split<T>(s, threads));
  if (prefer_split) {
    const int64_t large_chunks = ceil_div(nv, int64_t(kSplitBlockThreads) * Traits::kMaxVpt);
    const int vpt_order[2] = {s.rows * large_chunks < s.sms ? Traits::kSmallVpt : Traits::kMaxVpt, Traits::kMaxVpt};
    constexpr int kSmemVecs[] = {0, 2, 4, 8, 12, 16, 24};
    for (int rows_at_once = 2; rows_at_once >= 1; --rows_at_once) {
      for (int vi = 0; vi < 2; ++vi) {
        for (int sv : kSmemVecs) {
          const size_t smem = size_t(kSplitBlockThreads) * sv * 16;
          if ((sv > 0 && !s.aligned) || smem + 1024 > s.smem_optin) break;
          const int per_sm = block_rows_blocks_per_sm<T>(vpt_order[vi], s.aligned, kSplitBlockThreads, smem);
          const int64_t chunks = ceil_div(nv, int64_t(kSplitBlockThreads) * (vpt_order[vi] + sv));
          if (chunks * rows_at_once <= int64_t(per_sm) * s.sms) {
            plan.kind = RowsKind::Split;
            plan.vpt = vpt_order[vi];
            plan.threads = kSplitBlockThreads;
            plan.smem = sv;
            plan.chunks = static_cast<int>(chunks);
            return plan;
          }
        }
      }
    }
  }

  // 2. Block-per-row. fp32 rows of 1536-2048 elements too: from s39 to s57 "auto" gave them 128 threads x (2
  //    vectors in registers + the rest in shared memory), 1-3 % faster than this on the H100; on the H200 that
  //    plan ran 32768x2000 at 154 us cold / 150 streamed against 131 / 138 here (sweep through the op, NOTES
  //    "s57 call 2"), slower than torch.softmax (138 / 138).
  if (threads <= kMaxBlockThreads) {
    plan.kind = RowsKind::Block;
    plan.vpt = vpt;
    plan.threads = static_cast<int>(threads);
    if (fewer_warp_rows<T>(p, s, nv, threads)) {
      plan.threads = static_cast<int>(threads) - 32;
      plan.smem = kFewerWarpSmemVecs;
    } else if (eight_warp_rows<T>(p, s, threads)) {
      plan.threads = kEightWarpThreads;
      plan.smem = static_cast<int>(ceil_div(nv, int64_t(kEightWarpThreads)) - vpt);
    }
    return plan;
  }

  // 4. Streaming.
  plan.kind = RowsKind::Stream;
  plan.steps = stream_steps_per_chunk<T>(p, s.len);
  return plan;
}

// Checks a plan against the shape and the compiled instantiations, fills its derived fields (the forced
// plan's zeros) and launches it. Every check holds for the heuristic's plans; a forced plan that fails one
// is an error naming the plan.
template <typename T>
void launch_plan(const SoftmaxProblem& p, const RowsShape& s, RowsPlan plan, cudaStream_t stream) {
  using Traits = RowsTraits<T>;
  constexpr int kVec = Traits::kVec;
  const T* x = static_cast<const T*>(p.x.const_data_ptr());
  T* y = static_cast<T*>(p.out.mutable_data_ptr());
  // Passes over memory: "auto" is online (2 reads instead of 3 where rows stream). Reductions over a row held
  // on chip read memory once either way; there "auto" takes the max-then-sum reduction, which the H100
  // benchmark measured faster than the fused online one (bf16 4096x4096: 84% vs 74% of copy bandwidth).
  const bool online = p.algorithm != SoftmaxAlgorithm::Safe;
  const bool online_on_chip = p.algorithm == SoftmaxAlgorithm::Online;
  const int64_t nv = s.nv;
  const auto fail = [&](const char* why) {
    TORCH_CHECK(false, "flash_attn_ext softmax: configuration ", describe(plan), " for rows of ", s.len,
                " elements (", nv, " vectors, ", s.aligned ? "aligned" : "unaligned", "): ", why);
  };
  const auto capped_grid = [&](int64_t items) {
    return plan.bpsm > 0 ? grid_for(std::min<int64_t>(items, int64_t(plan.bpsm) * s.sms)) : grid_for(items);
  };
  RowsParams<T> rp{x, y, s.rows, s.len, online_on_chip, p.output, 0, 1, 0, {}};
  if (plan.vpt == kVptSmall) plan.vpt = Traits::kSmallVpt;
  if (plan.vpt == kVptLarge) plan.vpt = Traits::kMaxVpt;
  if (plan.kind != RowsKind::Warp && plan.grid != 0) fail("grid is a key of kind=warp only");

  if (plan.kind == RowsKind::Warp) {
    if (plan.vpt != 1 && plan.vpt != 2 && plan.vpt != 4 && plan.vpt != 8) fail("vpt must be 1, 2, 4 or 8");
    // Unaligned rows that lse_rows_on_grid allows, and softmax and log_softmax ones under grid=1, are held on the
    // memory's grid, in the slots of their own vectors (FoldedGranule); other unaligned rows element-wise.
    const int64_t row_vecs = ceil_div(s.len, kVec);
    if (plan.grid != 0 && plan.grid != 1) fail("grid must be 0 or 1");
    const bool grid_softmax = plan.grid == 1 && !s.aligned && p.output != SoftmaxOutput::LogSumExp;
    if (grid_softmax && !grid_softmax_compiled<T>) fail("grid=1 is compiled for float16 and bfloat16 only");
    if (grid_softmax && online_on_chip) fail("grid=1 is compiled for the max-then-sum reduction (safe or auto) only");
    if (plan.vpt > warp_max_vpl<T>(p.output, s.aligned || grid_softmax, online_on_chip)) {
      fail("vpt above the largest compiled warp kernel for this dtype and output");
    }
    const bool on_grid = !s.aligned && (lse_rows_on_grid<T>(p.output) || grid_softmax);
    const bool whole_warp = whole_warp_team<T>(s.aligned, on_grid, plan.vpt);
    if (plan.lanes == 0) {
      plan.lanes =
          whole_warp ? 32 : static_cast<int>(std::min<int64_t>(32, next_pow2(ceil_div(row_vecs, plan.vpt))));
    }
    if (plan.lanes > 32 || (plan.lanes & (plan.lanes - 1)) != 0) fail("lanes must be a power of two <= 32");
    if (int64_t(plan.lanes) * plan.vpt < row_vecs) fail("lanes * vpt vectors do not hold a row");
    if (whole_warp && plan.lanes != 32) {
      fail("unaligned rows of more than 8 values per lane need lanes=32 (on the memory's grid: beyond kMaxVpt)");
    }
    while ((1 << rp.lanes_log2) < plan.lanes) ++rp.lanes_log2;
    const bool fold = on_grid && s.nv > int64_t(plan.lanes) * plan.vpt;  // s.nv: the most granules a row spans
    if (plan.threads == 0) plan.threads = warp_rows_threads(p.output, plan.vpt);
    static_assert(kWarpRowsThreads == 256, "the message below spells out kWarpRowsThreads");
    if (plan.threads % 32 != 0 || plan.threads < 32 || plan.threads > kWarpRowsThreads) {
      fail("threads must be a multiple of 32 in [32, 256] for kind=warp");
    }
    // many_scalar_rows counts blocks of kWarpRowsThreads whatever the launch's block size.
    const bool many_rows = many_scalar_rows<T>(ceil_div(s.rows, kWarpRowsThreads / plan.lanes), s.sms, plan.lanes,
                                                plan.vpt);
    const int64_t blocks = ceil_div(s.rows, plan.threads / plan.lanes);
    launch_warp_rows<T>(rp, plan.vpt, s.aligned, on_grid, fold, many_rows, capped_grid(blocks), plan.threads, stream);
    return;
  }

  if (plan.kind == RowsKind::Block || plan.kind == RowsKind::Split) {
    if (plan.vpt != Traits::kSmallVpt && plan.vpt != Traits::kMaxVpt) fail("vpt must be the small or large size");
    if (plan.smem == kSmemDerived) {
      plan.smem = plan.kind == RowsKind::Block && plan.threads > 0
                      ? static_cast<int>(std::clamp<int64_t>(ceil_div(nv, plan.threads) - plan.vpt, 0, 1 << 20))
                      : 0;
    }
    if (plan.smem < 0) fail("smem must be >= 0");
    if (plan.smem > 0 && !s.aligned) fail("shared-memory vectors need aligned rows");
    if (plan.threads == 0) {
      plan.threads = plan.kind == RowsKind::Split
                         ? kSplitBlockThreads
                         : static_cast<int>(std::min<int64_t>(round_up(ceil_div(nv, plan.vpt + plan.smem), 32),
                                                              kMaxBlockThreads + 32));
    }
    if (plan.threads % 32 != 0 || plan.threads < 32 || plan.threads > kMaxBlockThreads) {
      fail("threads must be a multiple of 32 in [32, 1024]");
    }
    const int64_t chunk_vecs = int64_t(plan.threads) * (plan.vpt + plan.smem);
    if (plan.kind == RowsKind::Block) plan.chunks = 1;
    if (plan.chunks == 0) plan.chunks = static_cast<int>(std::min<int64_t>(ceil_div(nv, chunk_vecs), 1 << 30));
    if (int64_t(plan.chunks) * chunk_vecs < nv) fail("the chunks do not hold a row");
    if (int64_t(plan.chunks - 1) * chunk_vecs >= nv) fail("a chunk would lie past the end of the row");
    const size_t smem = size_t(plan.threads) * plan.smem * 16;
    if (smem + 1024 > s.smem_optin) fail("shared memory over the device limit");
    const int per_sm = block_rows_blocks_per_sm<T>(plan.vpt, s.aligned, plan.threads, smem);
    if (per_sm < 1) fail("the block cannot be resident");
    rp.chunks = plan.chunks;
    rp.smem_vecs = plan.smem;
    if (plan.kind == RowsKind::Block) {
      launch_block_rows<T>(rp, plan.vpt, s.aligned, plan.threads, capped_grid(s.rows), stream);
      return;
    }
    // Split: a persistent grid of resident blocks (the cooperative launch enforces it), every chunk of a row
    // on its own block (chunks <= grid, required for deadlock freedom).
    const int64_t capacity = int64_t(plan.bpsm > 0 ? std::min(plan.bpsm, per_sm) : per_sm) * s.sms;
    if (plan.chunks > capacity) fail("more chunks per row than resident blocks");
    const int64_t items = s.rows * plan.chunks;
    const auto work = split_workspace<T>(rp, p.x, s.rows, plan.chunks, stream);
    launch_block_rows<T>(rp, plan.vpt, s.aligned, plan.threads, static_cast<int>(std::min(items, capacity)), stream);
    return;
  }

  if (plan.kind == RowsKind::Pipe) {
    if (!s.pipe) fail("the pipelined kernel needs sm_90 code for this device and an output on the input's grid");
    if (plan.threads == 0) plan.threads = pipe_threads<T>();
    if (plan.threads % 32 != 0 || plan.threads < 32 || plan.threads > kPipeMaxThreads) {
      fail("threads must be a multiple of 32 in [32, 512]");
    }
    const int blocks_per_sm = plan.bpsm > 0 ? plan.bpsm : 1;  // blocks sharing an SM's shared memory
    if (plan.pieces == 0) plan.pieces = pipe_ring_pieces(s, blocks_per_sm);
    if (plan.pieces < 2) fail("a ring of fewer than 2 pieces (bpsm too large for the shared memory?)");
    if (plan.pieces > kPipeMaxPieces) fail("pieces above kPipeMaxPieces");
    if (plan.chunks == 0) plan.chunks = pipe_chunks<T>(s, blocks_per_sm, plan.pieces);
    if (plan.chunks <= 0) fail("rows too long for the ring at any chunk count");
    PipeParams<T> pp{x, y, s.rows, s.len, 0, 0, kPipePieceBytes / static_cast<int>(sizeof(T)), plan.pieces,
                     p.output, {}};
    pp.chunk_elems = pipe_chunk_elems<T>(s.len, plan.chunks, pp.ring_pieces);
    pp.chunks = static_cast<int>(ceil_div(s.len, pp.chunk_elems));  // rounding may leave fewer chunks
    if (item_ring_pieces<T>(s, pp.chunk_elems) > pp.ring_pieces) {
      fail("a chunk does not fit the ring");
    }
    const int per_sm = pipe_blocks_per_sm<T>(plan.threads, pipe_smem_bytes(pp));
    if (per_sm < 1) fail("the block cannot be resident");
    const int64_t capacity = int64_t(std::min(per_sm, blocks_per_sm)) * s.sms;
    if (pp.chunks > capacity) fail("more chunks per row than resident blocks");
    const auto work = split_workspace<T>(pp, p.x, s.rows, pp.chunks, stream);
    // Whole rounds of rows: a multiple of chunks blocks, so a row's chunks run in the same round.
    const int64_t grid =
        pp.chunks == 1 ? std::min(s.rows, capacity) : std::min(capacity / pp.chunks, s.rows) * pp.chunks;
    // Whole rows whose last round would be part-filled: a head of whole rounds and a tail launch (GridOrder).
    const int64_t tail_rows = pp.chunks == 1 && s.rows > grid ? s.rows % grid : 0;
    const int64_t head_block_bytes = (s.rows / grid) * s.row_bytes;
    if (tail_rows > 0 && head_block_bytes >= kTailMinHeadBlockBytes) {
      const int64_t head_rows = s.rows - tail_rows;
      PipeParams<T> tail = pp;
      pp.rows = head_rows;
      pp.order = GridOrder::Head;
      tail.rows = tail_rows;
      tail.x = x + head_rows * s.len;
      tail.y = y + (p.output == SoftmaxOutput::LogSumExp ? head_rows : head_rows * s.len);
      tail.order = GridOrder::Tail;
      launch_pipelined_rows<T>(pp, plan.threads, static_cast<int>(grid), stream);
      launch_pipelined_rows<T>(tail, plan.threads, static_cast<int>(tail_rows), stream);
      return;
    }
    launch_pipelined_rows<T>(pp, plan.threads, static_cast<int>(grid), stream);
    return;
  }

  if (plan.kind == RowsKind::Dual) {
    if (!s.dual) {
      fail("the dual kernel needs sm_90 code for this device and 16-byte aligned rows or, for fp32 and 16-bit types, "
           "the output on the input's grid");
    }
    if (plan.chunks == 0) {
      plan.chunks = static_cast<int>(std::min<int64_t>(dual_chunks<T>(s), 1 << 30));
    }
    if (plan.chunks < 1) fail("chunks must be >= 1");
    PipeParams<T> pp{x, y, s.rows, s.len, 0, 0, kPipePieceBytes / static_cast<int>(sizeof(T)),
                     pipe_ring_pieces(s, 1), p.output, {}};
    pp.chunk_elems = dual_chunk_elems<T>(s.len, plan.chunks);
    if (pp.chunk_elems * static_cast<int64_t>(sizeof(T)) > kDualMaxItemBytes) fail("chunks of more than 128 KB");
    pp.chunks = static_cast<int>(ceil_div(s.len, pp.chunk_elems));  // rounding may leave fewer chunks
    if (item_ring_pieces<T>(s, pp.chunk_elems) > pp.ring_pieces) {
      fail("a chunk does not fit the ring");
    }
    if (dual_blocks_per_sm<T>(pipe_smem_bytes(pp)) < 1) fail("the block cannot be resident");
    if (pp.chunks > s.sms) fail("more chunks per row than SMs");
    const auto work = split_workspace<T>(pp, p.x, s.rows, pp.chunks, stream);
    // One block per SM, whole rounds of rows (a multiple of chunks blocks).
    const int64_t grid = std::min<int64_t>(s.sms / pp.chunks, s.rows) * pp.chunks;
    // Whole rows in an odd number of rounds: the register role takes the last one (softmax_dual.cuh), 16-bit rows by
    // taking the even rounds, fp32 rows (which lost that way: the roles start at once) by taking the last round after
    // its odd ones, from 5 rounds (at 3 full ones the register role's two rounds lost: 396x32768 30.6 -> 34.0 us).
    const int64_t rounds = ceil_div(s.rows, grid);
    if (pp.chunks == 1 && rounds % 2 == 1) {
      if (sizeof(T) == 2) {
        pp.registers_first = true;
      } else if (sizeof(T) == 4 && rounds >= 5) {
        pp.last_round = (rounds - 1) * grid;
      }
    }
    launch_dual_rows<T>(pp, static_cast<int>(grid), stream);
    return;
  }

  if (plan.kind == RowsKind::Resident) {
    if (!s.resident) {
      fail("the resident kernel needs 16-bit or fp32 rows, 16-byte aligned or with the output on the input's grid, "
           "and sm_90 code");
    }
    if (p.output == SoftmaxOutput::LogSumExp) fail("the resident kernel stores rows: softmax and log_softmax only");
    if constexpr (sizeof(T) == 2 || std::is_same_v<T, float>) {
      if (plan.rows > 1) {
        if (plan.rows != 2 && plan.rows != 4 && plan.rows != 8) fail("rows must be 0, 1, 2, 4 or 8");
        if (!s.aligned) fail("rows > 1 needs 16-byte aligned rows");
        const int chunks = std::max(plan.chunks, 1);
        // Teams over split rows (resident_split_teams): 8 rows a group of `chunks` blocks, one 64 KB chunk of each
        // a block, all blocks co-resident.
        if (chunks > 1) {
          if (plan.rows != 8 || !split_teams_layout<T>(s, chunks)) {
            fail("rows > 1 with chunks > 1 (teams over split rows) needs rows=8, 16-bit rows, a multiple of 8 of "
                 "them, and chunks of exactly 512 KB / 8");
          }
          if (split_teams_blocks(s, chunks) > s.sms) fail("split rows with more blocks than SMs (co-resident)");
        }
        if (plan.rows * (s.row_bytes / chunks) > kResidentMaxItemBytes) fail("rows of more than 512 KB / rows");
        PipeParams<T> pp{x, y, s.rows, s.len, s.len / chunks, chunks, 0, 0, p.output, {}};
        pp.teams = plan.rows;
        if (resident_rows_blocks_per_sm<T>(pp) < 1) fail("the block cannot be resident");
        const auto work = split_workspace<T>(pp, p.x, s.rows, chunks, stream);
        launch_resident_rows<T>(pp, stream);
        return;
      }
      if (plan.rows < 0) fail("rows must be 0, 1, 2, 4 or 8");
      if (plan.chunks == 0) plan.chunks = static_cast<int>(resident_fewest_chunks(s.row_bytes));
      if (plan.chunks < 1) fail("chunks must be >= 1");
      PipeParams<T> pp{x, y, s.rows, s.len, 0, 0, 0, 0, p.output, {}};
      pp.chunk_elems = resident_chunk_elems<T>(s.len, plan.chunks);
      if (pp.chunk_elems * static_cast<int64_t>(sizeof(T)) > kResidentMaxItemBytes) fail("chunks of more than 512 KB");
      pp.chunks = static_cast<int>(ceil_div(s.len, pp.chunk_elems));  // rounding may leave fewer chunks
      if (pp.chunks > 1 && s.rows * pp.chunks > s.sms) fail("split rows with more items than SMs (co-resident)");
      if (resident_rows_blocks_per_sm<T>(pp) < 1) fail("the block cannot be resident");
      const auto work = split_workspace<T>(pp, p.x, s.rows, pp.chunks, stream);
      launch_resident_rows<T>(pp, stream);
    }
    return;
  }

  // Streaming.
  if (plan.steps == 0) plan.steps = stream_steps_per_chunk<T>(p, s.len);
  if (plan.steps < 1) fail("steps must be >= 1");
  const int64_t step = int64_t(kStreamThreads) * kStreamUnroll * kVec;
  const int64_t chunks = ceil_div(ceil_div(s.len, step), plan.steps);
  if (chunks > (int64_t(1) << 30)) fail("too many chunks per row");
  StreamParams<T> sp{x, y, s.rows, s.len, plan.steps * step, static_cast<int>(chunks), StreamPass::State, online,
                     p.output, nullptr, nullptr};
  const int64_t items = s.rows * sp.chunks;
  // logsumexp of rows of one chunk: the reduce writes the result itself, and no partials are kept.
  at::Tensor part;
  if (p.output != SoftmaxOutput::LogSumExp || sp.chunks > 1) {
    part = partials_workspace<T>(p.x, items);
    sp.part_m = static_cast<acc_t<T>*>(part.data_ptr());
    sp.part_d = sp.part_m + items;
  }
  const int grid = grid_for(items);
  if (p.output == SoftmaxOutput::LogSumExp) {
    launch_stream_reduce<T>(sp, s.aligned, grid, stream);
    if (sp.chunks > 1) launch_logsumexp_finalize<T>(sp, stream);
  } else if (online) {
    launch_stream_reduce<T>(sp, s.aligned, grid, stream);
    launch_stream_normalize<T>(sp, s.aligned, grid, stream);
  } else {
    sp.pass = StreamPass::Max;
    launch_stream_reduce<T>(sp, s.aligned, grid, stream);
    sp.pass = StreamPass::SumAtMax;
    launch_stream_reduce<T>(sp, s.aligned, grid, stream);
    launch_stream_normalize<T>(sp, s.aligned, grid, stream);
  }
}

// Which sm_90 kernel families have their bodies on the current device (pipe_supported, dual_supported,
// resident_supported) and whether the resident ones fit its opt-in shared memory (resident_fits: the static arrays
// of 8 teams' kernels are 2432-2560 B in the sm_90a build, and an H100's or H200's opt-in leaves 3072 B beside the
// longest item's 224 KB), asked once per device and dtype. Why: each family's check is one memoized lookup (a lock
// and a map search) per kernel, 25 of them, and every row call needs the answer, short rows included.
constexpr uint8_t kAskedFamilies = 1, kPipeFamily = 2, kDualFamily = 4, kResidentFamily = 8, kResidentFits = 16,
                  kResidentTeamsFit = 32;
template <typename T> uint8_t sm90_families() {
  constexpr int kMaxDevices = 64;
  static std::atomic<uint8_t> known[kMaxDevices];  // 0: not asked yet (static storage starts zeroed)
  const auto ask = [] {
    uint8_t bits = kAskedFamilies;
    if (pipe_supported<T>()) bits |= kPipeFamily;
    if (dual_supported<T>()) bits |= kDualFamily;
    if constexpr (sizeof(T) == 2 || std::is_same_v<T, float>) {
      if (resident_supported<T>()) {
        bits |= kResidentFamily;
        if (resident_fits<T>(1)) bits |= kResidentFits;
        if (resident_fits<T>(2) && resident_fits<T>(4) && resident_fits<T>(8)) bits |= kResidentTeamsFit;
      }
    }
    return bits;
  };
  const int device = current_cuda_device();
  if (device < 0 || device >= kMaxDevices) return ask();
  uint8_t bits = known[device].load(std::memory_order_relaxed);
  if (bits == 0) {  // two threads asking at once both store the same answer
    bits = ask();
    known[device].store(bits, std::memory_order_relaxed);
  }
  return bits;
}

template <typename T> void softmax_cuda_typed(const SoftmaxProblem& p, cudaStream_t stream) {
  const T* x = static_cast<const T*>(p.x.const_data_ptr());
  T* y = static_cast<T*>(p.out.mutable_data_ptr());
  if (p.inner > 1) {
    const bool online = p.algorithm != SoftmaxAlgorithm::Safe;
    launch_columns<T>(ColumnsParams<T>{x, y, p.outer, p.len, p.inner, online, p.output}, stream);
    return;
  }
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const int64_t row_bytes = p.len * static_cast<int64_t>(sizeof(T));
  const bool aligned = rows_aligned16(x, y, row_bytes);
  // An unaligned row's vectors lie on the memory's 16-byte grid, which the row may start up to kVec - 1
  // elements into (load_group_shifted): count the worst case.
  RowsShape s{p.outer,
              p.len,
              row_bytes,
              ceil_div(p.len + (aligned ? 0 : RowsTraits<T>::kVec - 1), RowsTraits<T>::kVec),
              aligned,
              false,
              prop->multiProcessorCount,
              prop->sharedMemPerBlockOptin,
              prop->sharedMemPerMultiprocessor,
              prop->reservedSharedMemPerBlock,
              false,
              false,
              false,
              false,
              false};
  // Unaligned rows go to the pipelined kernel when the output's 16-byte grid is the input's (both fresh
  // tensors: the allocator aligns them alike), so one shift per item aligns both its copies and its stores.
  s.same_grid = (reinterpret_cast<uintptr_t>(x) & 15) == (reinterpret_cast<uintptr_t>(y) & 15);
  const uint8_t families = sm90_families<T>();
  s.pipe = (s.aligned || s.same_grid) && (families & kPipeFamily) != 0;
  s.dual = (s.aligned || (s.same_grid && dual_takes_unaligned<T>())) && (families & kDualFamily) != 0;
  s.resident = (s.aligned || s.same_grid) && (families & kResidentFamily) != 0;
  s.resident_fits = (families & kResidentFits) != 0;
  s.resident_teams_fit = (families & kResidentTeamsFit) != 0;
  const RowsPlan* forced = forced_rows_plan();
  const RowsPlan plan = forced != nullptr ? *forced : heuristic_plan<T>(p, s);
  if (log_rows_plans()) {
    std::fprintf(stderr, "flash_attn_ext softmax plan: %lldx%lld %s\n", static_cast<long long>(s.rows),
                 static_cast<long long>(s.len), describe(plan).c_str());
  }
  launch_plan<T>(p, s, plan, stream);
}

}  // namespace
}  // namespace softmax

namespace {

void softmax_cuda(const SoftmaxProblem& p) {
  const c10::cuda::CUDAGuard guard(p.x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  switch (p.x.scalar_type()) {
    case at::kFloat: return softmax::softmax_cuda_typed<float>(p, stream);
    case at::kDouble: return softmax::softmax_cuda_typed<double>(p, stream);
    case at::kHalf: return softmax::softmax_cuda_typed<__half>(p, stream);
    case at::kBFloat16: return softmax::softmax_cuda_typed<__nv_bfloat16>(p, stream);
    default: TORCH_CHECK_TYPE(false, p.op, ": no CUDA kernel for dtype ", p.x.scalar_type());
  }
}

at::Tensor softmax_op(const at::Tensor& x, int64_t dim, c10::string_view algorithm) {
  return run_softmax_op("flash_attn_ext.softmax", x, dim, algorithm, SoftmaxOutput::Softmax, false, softmax_cuda);
}
at::Tensor log_softmax_op(const at::Tensor& x, int64_t dim, c10::string_view algorithm) {
  return run_softmax_op("flash_attn_ext.log_softmax", x, dim, algorithm, SoftmaxOutput::LogSoftmax, false,
                        softmax_cuda);
}
at::Tensor logsumexp_op(const at::Tensor& x, int64_t dim, bool keepdim) {
  return run_softmax_op("flash_attn_ext.logsumexp", x, dim, "auto", SoftmaxOutput::LogSumExp, keepdim, softmax_cuda);
}

}  // namespace
}  // namespace flash_attn_ext

TORCH_LIBRARY_IMPL(flash_attn_ext, CUDA, m) {
  m.impl("softmax", &flash_attn_ext::softmax_op);
  m.impl("log_softmax", &flash_attn_ext::log_softmax_op);
  m.impl("logsumexp", &flash_attn_ext::logsumexp_op);
}
