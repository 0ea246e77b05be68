#pragma once
// The kernel configuration chosen for one row softmax call (inner == 1), and the tuning hook that replaces
// the heuristic's choice. Host-only, no CUDA types: softmax_cuda.cu fills a RowsPlan (heuristic or forced),
// validates it against the shape and the compiled instantiations, and launches it.
//
// Tuning / benchmark hook (not an API): FAE_SOFTMAX_CONFIG, read once per process, forces every row call
// (softmax, log_softmax, logsumexp; inner == 1; any algorithm) onto one configuration, e.g.
//   FAE_SOFTMAX_CONFIG="kind=warp,lanes=8,vpt=4"
//   FAE_SOFTMAX_CONFIG="kind=block,vpt=8,threads=256,smem=24"
//   FAE_SOFTMAX_CONFIG="kind=split,vpt=8,threads=512,smem=8,bpsm=2"
//   FAE_SOFTMAX_CONFIG="kind=stream,steps=8"
//   FAE_SOFTMAX_CONFIG="kind=pipe,threads=512,chunks=6"
//   FAE_SOFTMAX_CONFIG="kind=dual,chunks=16"
//   FAE_SOFTMAX_CONFIG="kind=resident,chunks=16"
//   FAE_SOFTMAX_CONFIG="kind=resident,rows=8"
// Keys (0 or absent = derived from the shape where a derivation is given):
//   kind     warp | block | split | stream | pipe | dual | resident (pipe, dual, resident: sm_90+; all three also
//            unaligned rows whose output lies on the input's 16-byte grid, dual of fp32 and 16-bit types only;
//            resident: 16-bit or fp32 softmax and log_softmax, rows * chunks <= SMs where chunks > 1, teams aligned
//            only)
//   lanes    warp: lanes per row, power of two <= 32 (0: fewest that hold the row; 32 on unaligned kernels whose
//            team is a whole warp at compile time)
//   vpt      warp: 16-byte vectors per lane (1, 2, 4, 8 where compiled); block/split: vectors per thread in
//            registers (RowsTraits' small or large size); "small" / "large" name RowsTraits' sizes of the
//            call's dtype (fp32 2 / 8, 16-bit 1 / 4, double 1 / 4)
//   threads  warp/block/split/pipe: block size, multiple of 32 (warp 0: warp_rows_threads, at most 256; block 0:
//            fewest that hold the row; split 0: 256; pipe 0: 32 elements per thread per 16 KiB piece, fp32 128, 16-bit
//            256; pipe at most 512)
//   smem     block/split: vectors per thread in shared memory (aligned rows only). Absent: block the fewest
//            that hold the row with the given threads (0 when threads is absent), split 0
//   chunks   split: blocks per row (0: fewest that hold the row); pipe: blocks per row at most (0: the
//            heuristic's; chunks are cut to whole ring pieces or 128 bytes, which may leave fewer); dual:
//            blocks per row at most (0: fewest with chunks of <= 128 KB; cut to 128 bytes); resident: blocks
//            per row (0: the heuristic's; chunks of <= 512 KB cut to 128 bytes, which may leave fewer)
//   bpsm     warp/block/split: persistent grid of at most bpsm blocks per SM (0: one item per block; split:
//            as many as are resident); pipe: blocks sharing an SM, each with 1 / bpsm of its ring (0: 1)
//   steps    stream: 256-thread block-steps per chunk (0: the heuristic's)
//   pieces   pipe: 16 KiB ring pieces per block (0: as many as bpsm blocks per SM leave room for)
//   rows     resident: whole rows per block, one per team of threads (0 or 1: one item, a row or a chunk of one,
//            per chunks; 2, 4 or 8: rows of at most 512 KB / rows, chunks 0 or 1)
//   grid     warp: 1 holds unaligned softmax and log_softmax rows (16-bit, max-then-sum) as 16-byte vectors on the
//            memory's grid, the granule past the team's slots folded in (FoldedGranule), as logsumexp's always are;
//            0 element by element or in pairs (aligned rows and logsumexp: ignored; other kinds: an error)
// A forced configuration that is not compiled or does not fit the shape is an error, never a fallback.
//
// Test hook (not an API): FAE_SOFTMAX_LOG_PLAN=1, read once per process, prints every CUDA row call's plan to
// stderr, "flash_attn_ext softmax plan: <rows>x<len> kind=...", so tests can check which kernel "auto" took.
#include <string>

namespace flash_attn_ext {
namespace softmax {

enum class RowsKind { Warp, Block, Split, Stream, Pipe, Dual, Resident };

constexpr int kVptSmall = -1;  // RowsPlan::vpt placeholders for RowsTraits' sizes of the call's dtype
constexpr int kVptLarge = -2;
constexpr int kSmemDerived = -1;  // RowsPlan::smem placeholder (see "smem" above)

struct RowsPlan {
  RowsKind kind = RowsKind::Block;
  int lanes = 0;
  int vpt = 0;
  int threads = 0;
  int smem = kSmemDerived;
  int chunks = 0;
  int bpsm = 0;
  int steps = 0;
  int pieces = 0;
  int rows = 0;
  int grid = 0;
};

// Parses "key=value,key=value"; throws (TORCH_CHECK) on an unknown key, kind or a malformed value.
RowsPlan parse_rows_plan(const std::string& text);
// The plan of FAE_SOFTMAX_CONFIG, or nullptr when it is unset or empty. Parsed on the first call only.
const RowsPlan* forced_rows_plan();
// "kind=block,lanes=0,vpt=8,..." (for error messages).
std::string describe(const RowsPlan& plan);
// Whether FAE_SOFTMAX_LOG_PLAN is set to 1. Read on the first call only.
bool log_rows_plans();

}  // namespace softmax
}  // namespace flash_attn_ext
