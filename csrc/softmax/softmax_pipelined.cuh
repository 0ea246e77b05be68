#pragma once
// Pipelined row kernel (sm_90+). Why: the row-cached kernels load an item, reduce it, wait (split rows:
// for the row's other chunks) and store it, with nothing of the next item in flight meanwhile, so DRAM idles
// for part of every item (long rows measured 46-83 % of copy bandwidth). Here one thread per block feeds a
// ring of shared-memory pieces with bulk (TMA) copies, each piece completing on its own transaction barrier,
// and keeps the ring full: while the block reduces, exchanges and stores item i, the pieces of the next
// items are already streaming in. Each element is still read from DRAM once and written once.
#include "common/grid_dependency.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "softmax/phase_trace.cuh"
#include "softmax/split_exchange.cuh"

namespace flash_attn_ext {
namespace softmax {
namespace pipe {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The single arrival of the barrier's phase, announcing `bytes` of copy transactions, then the copy that
// completes them: the phase flips once all bytes have landed.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  mbarrier_arrive_expect_tx(bar, bytes);
  bulk_copy_to_shared(dst, src, bytes, bar);
}
#endif

// An item's place in the ring: its elements [begin, end) of its row, read from `shift` elements before its
// first one so that every bulk copy starts on the 16-byte grid the copies need. Aligned rows have shift 0;
// an unaligned row (odd length, or a base off the grid; the host takes it here only when the output lies on
// the input's grid, so the same shift aligns the stores) starts up to kVec - 1 elements in. The ring then holds
// vecs 16-byte vectors, of which [lo, hi) lie wholly in the item: the first (when shift > 0) and the last (when
// the item ends off the grid) are edges, read whole (the extra elements lie in the same 16-byte granules as the
// item's own, so the copies stay on its pages), folded with -inf in place of the elements outside the item and
// stored element by element (fold_edges, store_item): nothing outside the item is written.
template <typename T> struct ItemVectors {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  int shift;
  int length;  // elements of the item
  int vecs;    // ring vectors, from the item's first element less shift
  int lo;
  int hi;
  // shifted == false (a compile-time constant at the call): the caller's rows are aligned, and the edge code
  // folds away (the dual kernel's ring role: 2-3 us of its fp32 cold calls on the H200, NOTES "s59 call 5").
  __device__ __forceinline__ ItemVectors(const T* first, int64_t begin, int64_t end, bool shifted) {
    length = static_cast<int>(end - begin);
    if (shifted) {
      shift = misalignment(first);
      vecs = (shift + length + kVec - 1) / kVec;
      lo = shift > 0 ? 1 : 0;
      hi = max(lo, (shift + length) % kVec == 0 ? vecs : vecs - 1);
    } else {
      shift = 0;
      vecs = length / kVec;
      lo = 0;
      hi = vecs;
    }
  }
  __device__ __forceinline__ int elems() const { return vecs * kVec; }
  // The edges of the item: vector 0 when lo == 1, vector vecs - 1 when it is not also vector 0 and hi < vecs.
  __device__ __forceinline__ bool head_edge() const { return lo == 1; }
  __device__ __forceinline__ bool tail_edge() const { return hi < vecs && vecs - 1 >= lo; }
  __device__ __forceinline__ bool inside(int v, int j) const {
    const int e = v * kVec + j;
    return e >= shift && e < shift + length;
  }
};

// The producer: one thread's cursor over its team's items (first, first + step, ...) and their pieces.
template <typename T> struct Producer {
  int64_t item;
  int64_t step;
  int piece;        // next piece of `item`
  int slot;         // ring slot it goes to
  int outstanding;  // pieces issued and not yet released by the consumers
  int in_flight;    // pieces issued and not yet seen landed: counted on every issue, decremented and checked
                    // only with a window (fill ignores it when window == 0)

  // Issues pieces in order until the ring is full, the block's items are exhausted or (window > 0) window
  // pieces are in flight.
  template <bool kShifted = true>
  __device__ __forceinline__ void fill(const PipeParams<T>& p, int64_t items, uint4* ring, uint64_t* bars,
                                       int window = 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    const int piece_vecs = p.piece_elems / kVec;
    while (outstanding < p.ring_pieces && item < items && (window == 0 || in_flight < window)) {
      ++in_flight;
      const RowChunk span(item, p.chunks, p.chunk_elems, p.len);
      const T* src = p.x + span.row * p.len + span.begin;
      const ItemVectors<T> iv(src, span.begin, span.end, kShifted);
      const int length = kShifted ? iv.elems() : static_cast<int>(span.end - span.begin);
      const int first = piece * p.piece_elems;
      const int n = min(p.piece_elems, length - first);
      bulk_load(ring + static_cast<int64_t>(slot) * piece_vecs, (kShifted ? src - iv.shift : src) + first,
                static_cast<unsigned>(n) * sizeof(T), bars + slot);
      if (++slot == p.ring_pieces) slot = 0;
      ++outstanding;
      if (first + n >= length) {
        piece = 0;
        item += step;
      } else {
        ++piece;
      }
    }
#endif
  }
};

// Vectors a thread takes from one piece at a time: independent loads and exponentials in flight (one
// vector at a time left the fold latency-bound: H100, 256-1024 threads, 60-70 % of copy bandwidth).
constexpr int kPipeGroup = 4;

// Folds vectors j, j + nt, ..., j + (kPipeGroup - 1) * nt of `piece` (those below n; the rest read as -inf)
// into the thread's state (m, d) by fold (online_math.cuh): one max and one rescale per group, kPipeGroup
// independent partial sums.
template <typename T>
__device__ __forceinline__ void fold_group(OnlineState<acc_t<T>>& st, const uint4* piece, int j, int nt, int n) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  A w[kPipeGroup][kVec];
#pragma unroll
  for (int g = 0; g < kPipeGroup; ++g) {
    if (j + g * nt < n) {
      VecIO<T>::unpack(piece[j + g * nt], w[g]);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[g][e] = neg_inf<A>();
    }
  }
  fold<T>(st, w);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The ring's barriers (one per slot, one arrival: the producer's expect-tx), initialized by thread 0 and
// visible to the block (and to the bulk copies) once every thread has passed the block barrier.
__device__ __forceinline__ void init_ring_barriers(uint64_t* bars, int ring_pieces) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < ring_pieces; ++i) mbarrier_init(bars + i, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
}

// The map from an input element to its output in a store pass against the row's statistics (epi, row_max),
// output known at compile time: softmax exp(x - M) * (1 / D) (16-bit: by FusedExp2, its correction in the
// scale), log_softmax x - (M + log D) (fp32 / fp64: (x - M) - log D, Epilogue), both NaN for an infinite M.
template <typename T, bool kSoftmax>
__device__ __forceinline__ auto output_term(const Epilogue<T>& epi, acc_t<T> row_max) {
  using A = acc_t<T>;
  if constexpr (kSoftmax && kFastExp<T>) {
    const FusedExp2 e = FusedExp2::at<T>(row_max);
    const float scale = epi.scale * e.correction;  // epi.scale = 1 / D, NaN when poisoned
    return [e, scale](A x) { return e(x) * scale; };
  } else {
    const ShiftedExp<A, kFastExp<T>> e(row_max);
    return [epi, e](A x) { return epi.template apply_term_as<kSoftmax>(kSoftmax ? e(x) : x); };
  }
}

// Vector v of an item held in the ring from slot offset `base` (wrapping at ring_vecs).
__device__ __forceinline__ uint4 ring_vector(const uint4* ring, int base, int ring_vecs, int v) {
  const int i = base + v;
  return ring[i >= ring_vecs ? i - ring_vecs : i];
}

// Two slots in shared memory for an item's edge vectors (ItemVectors), copied there by cp.async where a kernel holds
// the rest of the item in registers (the resident kernel, the dual kernel's register role). Static shared memory only
// in the kernels that call this.
__device__ __forceinline__ uint4* edge_slots() {
  __shared__ uint4 slots[2];
  return slots;
}

// An item's edge vectors as fold_edge_vectors and store_edge_vectors read them (edge_at(0): its vector 0,
// edge_at(1): its vector vecs - 1), from edge_slots or from the ring (slot offset base, wrapping at ring_vecs).
struct EdgeSlotsAt {
  __device__ __forceinline__ uint4 operator()(int g) const { return edge_slots()[g]; }
};
struct RingEdgesAt {
  const uint4* ring;
  int base;
  int ring_vecs;
  int last;  // the item's vecs - 1
  __device__ __forceinline__ uint4 operator()(int g) const {
    return ring_vector(ring, base, ring_vecs, g == 0 ? 0 : last);
  }
};

// Folds the item's edge vectors (its vectors 0 and vecs - 1, ItemVectors; edge(0) and edge(1) read them), the
// elements outside it as -inf, into st: thread 0's part of the reduction beside its vectors [lo, hi).
template <typename T, typename EdgeAt>
__device__ __forceinline__ void fold_edge_vectors(OnlineState<acc_t<T>>& st, const ItemVectors<T>& iv,
                                                  const EdgeAt& edge_at) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const int edge[2] = {0, iv.vecs - 1};
  const bool on[2] = {iv.head_edge(), iv.tail_edge()};
  A w[2][kVec];
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    VecIO<T>::unpack(edge_at(g), w[g]);
#pragma unroll
    for (int j = 0; j < kVec; ++j) w[g][j] = on[g] && iv.inside(edge[g], j) ? w[g][j] : neg_inf<A>();
  }
  fold<T>(st, w);
}

// Stores the item's edge vectors (edge_at as above) element by element, each mapped by term, the item's own
// elements only (y: where vector 0 of iv goes): nothing outside the item is written.
template <typename T, typename Term, typename EdgeAt>
__device__ __forceinline__ void store_edge_vectors(T* y, const ItemVectors<T>& iv, const Term& term,
                                                   const EdgeAt& edge_at) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const int edge[2] = {0, iv.vecs - 1};
  const bool on[2] = {iv.head_edge(), iv.tail_edge()};
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    if (!on[g]) continue;
    A w[kVec];
    VecIO<T>::unpack(edge_at(g), w);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (iv.inside(edge[g], j)) y[static_cast<int64_t>(edge[g]) * kVec + j] = from_acc<T>(term(w[j]));
    }
  }
}

// The store pass of an item held in the ring (its vectors from slot offset `base`, wrapping at ring_vecs;
// y: where ring vector 0 goes, shift elements before the item's output), each element mapped by
// output_term: vectors [lo, hi) whole, the edges (ItemVectors) element by element by thread 0. Stores are
// evict-first for 16-bit types always and for every type with kEvictFirst (the dual kernel's ring role).
template <typename T, bool kSoftmax, bool kEvictFirst>
__device__ __forceinline__ void store_item(T* y, const uint4* ring, int base, int ring_vecs, const ItemVectors<T>& iv,
                                           int t, int nt, const Epilogue<T>& epi, acc_t<T> row_max) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const auto term = output_term<T, kSoftmax>(epi, row_max);
#pragma unroll kPipeGroup
  for (int v = iv.lo + t; v < iv.hi; v += nt) {
    A w[kVec];
    VecIO<T>::unpack(ring_vector(ring, base, ring_vecs, v), w);
#pragma unroll
    for (int j = 0; j < kVec; ++j) w[j] = term(w[j]);
    // The pipelined kernel stores 16-bit outputs evict-first: measured side by side on the H100, bf16 split
    // rows ran 2-4.5 % faster (8x4194304 70.7 -> 67.5 us) and fp32 rows 3-12 % slower (s12; s17: fp32
    // 1024x32768 102.5 -> 108.7 us), so there 32/64-bit types keep the default policy. In the dual kernel
    // evict-first fp32 stores gained 2-4 % (s17 sweep: 128x262144 109.4 -> 107.1 us, 256x131072 110.5 ->
    // 106.0). Why it differs per kernel and type is not understood.
    if constexpr (sizeof(T) == 2 || kEvictFirst) {
      store16_streaming(y + static_cast<int64_t>(v) * kVec, VecIO<T>::pack(w));
    } else {
      store16_plain(y + static_cast<int64_t>(v) * kVec, VecIO<T>::pack(w));
    }
  }
  if (t == 0 && (iv.head_edge() || iv.tail_edge())) {
    store_edge_vectors<T>(y, iv, term, RingEdgesAt{ring, base, ring_vecs, iv.vecs - 1});
  }
}

// Folds the edges of an item held in the ring (fold_edge_vectors).
template <typename T>
__device__ __forceinline__ void fold_edges(OnlineState<acc_t<T>>& st, const uint4* ring, int base, int ring_vecs,
                                           const ItemVectors<T>& iv) {
  fold_edge_vectors<T>(st, iv, RingEdgesAt{ring, base, ring_vecs, iv.vecs - 1});
}

// A signal from ring_items to threads waiting on a named barrier: the team arrives once on `barrier`
// (`count` threads in all) when piece `piece` of its first item has landed, or once that item is folded if it
// has no more than `piece` pieces. barrier 0: no signal.
struct StartSignal {
  int barrier = 0;
  int count = 0;
  int piece = 0;
  __device__ __forceinline__ void arrive() const {
    if (barrier > 0) named_barrier_arrive(barrier, count);
  }
};

// A team's walk over its items first_item, first_item + step, ... through the ring (ring_pieces slots of
// piece_elems elements, barriers initialized): its rank-0 thread is the producer; as each piece lands,
// thread t folds its vectors t, t + team size, ... of the piece, kPipeGroup at a time, into its (m, d) state,
// so the reduction runs behind the arrivals; one team merge of the states and, for split rows, the row
// exchange; then a pass over the item's vectors normalizes and stores. An item's pieces are consecutive slots
// modulo the ring. With start.barrier > 0 the team arrives once on that named barrier (StartSignal): the
// dual kernel starts its other role there. kEvictFirst: the store pass of every type is evict-first
// (store_item). kShifted == false: every row is aligned (ItemVectors).
// kWindow > 0: at most kWindow pieces in flight; the producer issues the next ones as pieces land (checked
// at each piece of the walk) instead of filling every free slot at once (the dual kernel's kDualRingWindow: 0
// for every type since s58 on the H200; scripts/dualrole_probe times others). kSoftmaxOnly: p.output is
// Softmax, and the other outputs' epilogues are compiled out (the dual kernel's softmax instantiation,
// softmax_dual.cuh).
template <typename T, bool kEvictFirst = false, int kWindow = 0, bool kSoftmaxOnly = false, bool kShifted = true,
          typename Team>
__device__ __forceinline__ void ring_items(const PipeParams<T>& p, int64_t first_item, int64_t step, Team team,
                                           uint4* ring, uint64_t* bars, OnlineState<acc_t<T>>* scratch,
                                           StartSignal start = {}) {
  using A = acc_t<T>;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const int t = team.rank();
  const int nt = team.size();
  const int piece_vecs = p.piece_elems / kVec;
  const int ring_vecs = p.ring_pieces * piece_vecs;
  const int64_t items = p.rows * p.chunks;

  Producer<T> producer{first_item, step, 0, 0, 0, 0};
  if (t == 0) producer.template fill<kShifted>(p, items, ring, bars, kWindow);

  // Consumer cursor (every thread): ring slot of the current item's first piece and that slot's phase.
  int slot = 0;
  unsigned phase = 0;
  for (int64_t item = first_item; item < items; item += step) {
    const RowChunk span(item, p.chunks, p.chunk_elems, p.len);
    const ItemVectors<T> iv(p.x + span.row * p.len + span.begin, span.begin, span.end, kShifted);
    // (kShifted == false: the expressions of the aligned-only kernel before ItemVectors, so that the dual
    // kernel's code stays as it was measured)
    const int length = static_cast<int>(span.end - span.begin);
    const int pieces = ((kShifted ? iv.elems() : length) + p.piece_elems - 1) / p.piece_elems;
    const int nvec = length / kVec;
    const int base = slot * piece_vecs;

    OnlineState<A> state = empty_state<A>();
    for (int k = 0; k < pieces; ++k) {
      mbarrier_wait(bars + slot, phase);
      if (k == 0) FAE_PHASE_STAMP(t, 0, (item - first_item) / step, 0);
      if (item == first_item && k == start.piece) start.arrive();
      if constexpr (kWindow > 0) {
        if (t == 0) {
          --producer.in_flight;
          producer.template fill<kShifted>(p, items, ring, bars, kWindow);
        }
      }
      const uint4* piece = ring + slot * piece_vecs;
      if constexpr (kShifted) {
        // The piece's vectors that lie wholly in the item: all of them but an edge (ItemVectors).
        const int lo = max(iv.lo - k * piece_vecs, 0);
        const int hi = min(iv.hi - k * piece_vecs, piece_vecs);
        for (int j = lo + t; j < hi; j += kPipeGroup * nt) fold_group<T>(state, piece, j, nt, hi);
      } else {
        const int n = min(piece_vecs, nvec - k * piece_vecs);
        for (int j = t; j < n; j += kPipeGroup * nt) fold_group<T>(state, piece, j, nt, n);
      }
      if (++slot == p.ring_pieces) {
        slot = 0;
        phase ^= 1;
      }
    }
    if (t == 0 && (iv.head_edge() || iv.tail_edge())) fold_edges<T>(state, ring, base, ring_vecs, iv);
    if (item == first_item && pieces <= start.piece) start.arrive();
    FAE_PHASE_STAMP(t, 0, (item - first_item) / step, 1);
    const OnlineState<A> row_state = reduce_row_state(p.exchange, p.chunks, span.row, item, state, scratch, team);
    FAE_PHASE_STAMP(t, 0, (item - first_item) / step, 2);

    const SoftmaxOutput out = kSoftmaxOnly ? SoftmaxOutput::Softmax : p.output;
    if (out == SoftmaxOutput::LogSumExp) {
      if (t == 0 && span.begin == 0) p.y[span.row] = from_acc<T>(row_lse(row_state));
    } else {
      const Epilogue<T> epi(out, row_state, row_state.m);
      T* y = p.y + span.row * p.len + span.begin - iv.shift;
      if (out == SoftmaxOutput::Softmax) {
        store_item<T, true, kEvictFirst>(y, ring, base, ring_vecs, iv, t, nt, epi, row_state.m);
      } else {
        store_item<T, false, kEvictFirst>(y, ring, base, ring_vecs, iv, t, nt, epi, row_state.m);
      }
    }

    // Every thread is done reading this item's slots; hand them back to the producer.
    team.sync();
    FAE_PHASE_STAMP(t, 0, (item - first_item) / step, 3);
    if (t == 0) {
      producer.outstanding -= pieces;
      fence_async_proxy();  // this team's reads of the slots before the bulk copies refill them
      producer.template fill<kShifted>(p, items, ring, bars, kWindow);
    }
  }
}
#endif

// Shape: persistent grid, block b takes items b, b + gridDim.x, ... (the host makes gridDim.x a multiple of
// chunks, so each round of items holds whole rows and a row's chunks run side by side), as ring_items walks
// them with the whole block. Block: a multiple of 32 threads, at most kPipeMaxThreads. Dynamic shared
// memory: the ring, ring_pieces * piece_elems elements. p.order: how the launch orders itself against the
// grids before and after it (GridOrder: a head and a tail of whole rows, or neither).
template <typename T>
__global__ void __launch_bounds__(kPipeMaxThreads, 1) softmax_pipelined_rows_kernel(const PipeParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.order == GridOrder::Head) {
    wait_for_prerequisite_grids();
    launch_dependent_grids();
  } else if (p.order == GridOrder::Tail) {
    launch_dependent_grids();
  } else {
    begin_dependent_grid();
  }
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ uint64_t bars[kPipeMaxPieces];
  __shared__ OnlineState<acc_t<T>> s_state[kRowScratch];
  static_assert((sizeof(bars) + sizeof(s_state) + 127) / 128 * 128 <= kPipeStaticSmemBytes,
                "pipe_ring_pieces sets aside kPipeStaticSmemBytes for these");
  init_ring_barriers(bars, p.ring_pieces);
  ring_items<T>(p, blockIdx.x, gridDim.x, BlockTeam{}, ring, bars, s_state);
  if (p.order == GridOrder::Tail) wait_for_prerequisite_grids();
#endif
}

}  // namespace pipe
}  // namespace softmax
}  // namespace flash_attn_ext
