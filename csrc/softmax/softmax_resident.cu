// Launcher of the resident row kernel (softmax_resident.cuh), instantiated for the 16-bit types and fp32, softmax
// and log_softmax.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/kernel_launch.h"
#include "softmax/softmax_resident.cuh"

namespace flash_attn_ext {
namespace softmax {

// Whether `holds` is true of every instantiation a team count launches: both outputs of whole items, of items with
// bounds, and of edge items (OnChip for teams, Shifted for single items). Support and fit walk the same set.
template <typename T, int kTeams, typename Holds> bool all_resident_kernels(Holds holds) {
  using resident::ItemFill;
  using resident::library_kernel;
  constexpr ItemFill kEdge = kTeams > 1 ? ItemFill::OnChip : ItemFill::Shifted;
  for (const auto kernel : {library_kernel<T, true, kEdge, kTeams>, library_kernel<T, false, kEdge, kTeams>,
                            library_kernel<T, true, ItemFill::Bounded, kTeams>,
                            library_kernel<T, false, ItemFill::Bounded, kTeams>,
                            library_kernel<T, true, ItemFill::Whole, kTeams>,
                            library_kernel<T, false, ItemFill::Whole, kTeams>}) {
    if (!holds(kernel)) return false;
  }
  return true;
}

// As the dual kernel: the body exists only in sm_90+ code.
template <typename T, int kTeams> bool resident_teams_supported() {
  return all_resident_kernels<T, kTeams>([](auto kernel) { return kernel_code_version(kernel) >= 90; });
}
template <typename T> bool resident_supported() {
  return resident_teams_supported<T, 1>() && resident_teams_supported<T, 2>() && resident_teams_supported<T, 4>() &&
         resident_teams_supported<T, 8>();
}

// The opt-in shared memory holds the longest item next to each kernel's static arrays.
template <typename T, int kTeams> bool resident_teams_fit() {
  const size_t optin = static_cast<size_t>(current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin));
  return all_resident_kernels<T, kTeams>(
      [&](auto kernel) { return kernel_static_smem(kernel) + kResidentMaxSmemBytes <= optin; });
}
// Calls f(std::integral_constant<int, N>{}) for the team count N = teams, one of the instantiated 1, 2, 4 and 8 (any
// other count throws).
template <typename F> auto with_team_count(int teams, F&& f) {
  switch (teams) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: TORCH_CHECK(teams == 1, "resident kernel: teams must be 1, 2, 4 or 8, got ", teams);
  }
  return f(std::integral_constant<int, 1>{});
}
template <typename T> bool resident_fits(int teams) {
  return with_team_count(teams, [](auto n) { return resident_teams_fit<T, decltype(n)::value>(); });
}

// The pieces of the item's shared-memory part (the longest item: chunk_elems, or a team's row): a team's pieces
// are 1 / teams of kPieceBytes, and every team has the longest row's count.
template <typename T> size_t resident_smem_bytes(const PipeParams<T>& p) {
  const int64_t team_threads = resident::kThreads / p.teams, team_piece_vecs = resident::kPieceVecs / p.teams;
  const int64_t item_vecs = p.chunk_elems * int64_t(sizeof(T)) / 16;
  const int64_t smem_vecs =
      std::min<int64_t>(std::max<int64_t>(item_vecs - int64_t(resident::kRegVecs) * team_threads, 0),
                        int64_t(resident::kMaxPieces) * team_piece_vecs);
  const int64_t pieces = (smem_vecs + team_piece_vecs - 1) / team_piece_vecs;
  return static_cast<size_t>(pieces * resident::kPieceBytes);
}

// The instantiation for p's output, teams and items. Unaligned rows take the one with edge vectors (Shifted); items
// of exactly kResidentMaxItemBytes (teams rows of kResidentMaxItemBytes / teams, rows a multiple of teams) the one
// without bounds; teams' rows that fill their registers and shared memory the one with bounds on the L2 part only.
template <typename T, int kTeams> auto resident_team_kernel_for(const PipeParams<T>& p) {
  using resident::ItemFill;
  const auto for_fill = [&](auto fill) {
    return p.output == SoftmaxOutput::Softmax ? resident::library_kernel<T, true, decltype(fill)::value, kTeams>
                                              : resident::library_kernel<T, false, decltype(fill)::value, kTeams>;
  };
  // Unaligned rows (an odd length or a base off the 16-byte grid; the host sends them with the output on the
  // input's grid) take the single-item Shifted instantiation, the one with edge code.
  const bool aligned = rows_aligned16(p.x, p.y, p.len * int64_t(sizeof(T)));
  if constexpr (kTeams == 1) {
    if (!aligned) return for_fill(std::integral_constant<ItemFill, ItemFill::Shifted>{});
  } else {
    TORCH_CHECK(aligned, "resident kernel: teams need 16-byte aligned rows");
  }
  if (p.chunk_elems * int64_t(sizeof(T)) * kTeams == kResidentMaxItemBytes && p.len % p.chunk_elems == 0 &&
      p.rows % kTeams == 0) {
    return for_fill(std::integral_constant<ItemFill, ItemFill::Whole>{});
  }
  if constexpr (kTeams > 1) {
    if (p.chunk_elems * int64_t(sizeof(T)) * kTeams >= kResidentOnChipItemBytes) {
      return for_fill(std::integral_constant<ItemFill, ItemFill::OnChip>{});
    }
  }
  return for_fill(std::integral_constant<ItemFill, ItemFill::Bounded>{});
}
template <typename T> auto resident_kernel_for(const PipeParams<T>& p) {
  return with_team_count(p.teams, [&](auto n) { return resident_team_kernel_for<T, decltype(n)::value>(p); });
}

template <typename T> int resident_rows_blocks_per_sm(const PipeParams<T>& p) {
  return resident_blocks_per_sm(resident_kernel_for(p), resident::kThreads, resident_smem_bytes(p));
}

template <typename T> void launch_resident_rows(const PipeParams<T>& p, cudaStream_t stream) {
  TORCH_CHECK(p.output != SoftmaxOutput::LogSumExp, "the resident kernel stores rows: softmax or log_softmax only");
  const auto kernel = resident_kernel_for(p);
  const size_t smem = resident_smem_bytes(p);
  allow_dynamic_smem(kernel, smem);
  const int64_t items = p.teams > 1 ? (p.rows + p.teams - 1) / p.teams * p.chunks : p.rows * p.chunks;
  // Split rows exchange their (m, d) between co-resident blocks; whole rows need no other block and may take
  // several waves.
  const LaunchKind kind = p.chunks > 1 ? LaunchKind::Cooperative : LaunchKind::Plain;
  launch_kernel(kernel, static_cast<int>(items), resident::kThreads, smem, stream, kind, p);
}

#define FAE_INSTANTIATE_RESIDENT(T)                          \
  template bool resident_supported<T>();                     \
  template bool resident_fits<T>(int);                       \
  template int resident_rows_blocks_per_sm<T>(const PipeParams<T>&); \
  template void launch_resident_rows<T>(const PipeParams<T>&, cudaStream_t);
FAE_INSTANTIATE_RESIDENT(__half)
FAE_INSTANTIATE_RESIDENT(__nv_bfloat16)
FAE_INSTANTIATE_RESIDENT(float)
#undef FAE_INSTANTIATE_RESIDENT

}  // namespace softmax
}  // namespace flash_attn_ext
