// kernels/cpu/loops.h: the CPU elementwise engine: out[i] = f(in0[i], in1[i], ...) over any
// strides and NumPy broadcasting, with dims coalesced, a tight loop for the dense case (which
// the compiler vectorizes), a tiled walk when an operand runs across memory (a transposed
// input, Note [Tiled elementwise walk]) and OpenMP over chunks of the output when the work is
// large. 16-bit floats are read as float, computed in float, rounded once on store.
// Not here: reductions (kernels/cpu/reduce.cpp) and GEMM (kernels/cpu/gemm.cpp).
#pragma once

#include <omp.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/tensor.h"

namespace brisk::kernels::cpu {

// Elements per thread below which one thread runs: a memory-bound op on 64K floats took as long on
// two threads as on one here (fork and join cost ~10 us; examples/bench/bench_strided.cpp).
inline constexpr int64_t kParallelGrain = 65536;

// Threads to use for `n` units of work of `grain` each.
inline int threads_for(int64_t n, int64_t grain = kParallelGrain) {
  if (n < 2 * grain) return 1;
  int max = omp_get_max_threads();
  return int(std::min<int64_t>(max, n / grain));
}

// The tiled walk can be switched off to measure it against the output-order walk
// (examples/bench/bench_strided.cpp); results are the same either way.
inline std::atomic<bool>& elementwise_tiling() {
  static std::atomic<bool> on{true};
  return on;
}

// Shape and strides (in elements) of N operands walking one output index space.
template <int N>
struct StridedIter {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  // operands[0] is the output; the others broadcast to its sizes.
  StridedIter(const Tensor* const* operands) {
    const Shape& out = operands[0]->sizes();
    ndim = out.size();
    for (int d = 0; d < ndim; ++d) sizes[d] = out[d];
    for (int k = 0; k < N; ++k) {
      const Tensor& t = *operands[k];
      int shift = ndim - t.dim();
      for (int d = 0; d < ndim; ++d) {
        int td = d - shift;
        strides[k][d] = (td < 0 || t.sizes()[td] == 1) ? 0 : t.strides()[td];
      }
    }
    coalesce();
  }

  // Drops size-1 dims and merges neighbours that are one run of memory for every operand.
  void coalesce() {
    int out = 0;
    for (int d = 0; d < ndim; ++d) {
      if (sizes[d] == 1) continue;
      if (out > 0) {
        bool merge = true;
        for (int k = 0; k < N; ++k) merge = merge && strides[k][out - 1] == strides[k][d] * sizes[d];
        if (merge) {
          sizes[out - 1] *= sizes[d];
          for (int k = 0; k < N; ++k) strides[k][out - 1] = strides[k][d];
          continue;
        }
      }
      sizes[out] = sizes[d];
      for (int k = 0; k < N; ++k) strides[k][out] = strides[k][d];
      ++out;
    }
    ndim = out;
    if (ndim == 0) {  // a single element
      ndim = 1;
      sizes[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = 0;
    }
  }
};

namespace detail {

template <class T>
BRISK_INLINE compute_t<T> load(const T* p) {
  return static_cast<compute_t<T>>(*p);
}
// Bool is read as a byte compared with 0: GCC vectorizes selects on that, not on bool loads.
template <>
BRISK_INLINE bool load<bool>(const bool* p) {
  return *reinterpret_cast<const uint8_t*>(p) != 0;
}

// Accessors for the innermost loop: a dense run, or one value broadcast along it (stride 0).
// Picking the accessor per input outside the loop lets the compiler vectorize both cases
// (a scalar operand, a bias broadcast over H*W) instead of falling back to the strided loop.
template <class T>
struct DenseRun {
  const T* p;
  BRISK_INLINE compute_t<T> operator[](int64_t i) const { return load(p + i); }
};
template <class T>
struct Broadcast {
  compute_t<T> v;
  BRISK_INLINE compute_t<T> operator[](int64_t) const { return v; }
};

template <class Out, class F, class... Acc>
void run_inner(Out* o, int64_t n, F& f, Acc... acc) {
  for (int64_t i = 0; i < n; ++i) o[i] = Out(f(acc[i]...));
}

// Builds the accessor of input K from its innermost stride (0 or 1), then recurses.
template <size_t K, class Out, class F, class Ptrs, class... Acc>
void run_inner_dispatch(Out* o, int64_t n, F& f, const Ptrs& ptrs, const int64_t* strides, Acc... acc) {
  if constexpr (K == std::tuple_size_v<Ptrs>) {
    run_inner(o, n, f, acc...);
  } else {
    auto p = std::get<K>(ptrs);
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    if (strides[K] == 0) {
      run_inner_dispatch<K + 1>(o, n, f, ptrs, strides, acc..., Broadcast<T>{load(p)});
    } else {
      run_inner_dispatch<K + 1>(o, n, f, ptrs, strides, acc..., DenseRun<T>{p});
    }
  }
}

// Runs f over output indices [begin, end) of `it`, innermost dim as the tight loop.
template <class Out, class... In, class F, size_t... I>
void run_range(const StridedIter<1 + sizeof...(In)>& it, Out* out, [[maybe_unused]] std::tuple<const In*...> ins, F& f,
               int64_t begin, int64_t end, std::index_sequence<I...>) {
  constexpr int N = 1 + sizeof...(In);
  const int nd = it.ndim;
  const int64_t inner = it.sizes[nd - 1];
  // Multi-index and operand offsets at `begin`.
  int64_t idx[kMaxDims];
  int64_t off[N] = {};
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % it.sizes[d];
    rem /= it.sizes[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * it.strides[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(inner - idx[nd - 1], end - pos);
    const int64_t so = it.strides[0][nd - 1];
    Out* o = out + off[0];
    const int64_t in_strides[sizeof...(In) + 1] = {it.strides[1 + I][nd - 1]..., 0};
    bool dense = so == 1 && ((in_strides[I] == 0 || in_strides[I] == 1) && ...);
    if (dense) {
      auto ptrs = std::make_tuple((std::get<I>(ins) + off[1 + I])...);
      run_inner_dispatch<0>(o, n, f, ptrs, in_strides);
    } else {
      [[maybe_unused]] const auto ptrs = std::make_tuple((std::get<I>(ins) + off[1 + I])...);
      for (int64_t i = 0; i < n; ++i) o[i * so] = Out(f(load(std::get<I>(ptrs) + i * in_strides[I])...));
    }
    pos += n;
    // Advance the multi-index by n along the innermost dim, carrying outward.
    idx[nd - 1] += n;
    for (int k = 0; k < N; ++k) off[k] += n * it.strides[k][nd - 1];
    for (int d = nd - 1; d > 0 && idx[d] == it.sizes[d]; --d) {
      for (int k = 0; k < N; ++k) off[k] += it.strides[k][d - 1] - it.sizes[d] * it.strides[k][d];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Note [Tiled elementwise walk]
// Walking in output order, an input whose innermost stride is large (a transposed matrix)
// touches a new cache line for every element and uses one value of it. When some operand has
// a dim d of smaller stride than the innermost dim L, the walk goes tile by tile over (d, L):
// kTileRows indices of d times kTileCols of L, the other dims outside. Inside a tile each of
// the kTileCols lines such an operand touches is reused by the next rows, so it is read from
// L1 instead of memory; the dense operands still move in runs of kTileCols.
inline constexpr int64_t kTileRows = 16, kTileCols = 64;

// The dim to tile with the innermost one, or -1 when every operand already runs along it.
template <int N>
int tile_dim(const StridedIter<N>& it) {
  const int L = it.ndim - 1;
  if (L < 1) return -1;
  for (int k = 0; k < N; ++k) {
    const int64_t sl = std::llabs(it.strides[k][L]);
    if (sl <= 1) continue;
    int best = -1;
    for (int d = 0; d < L; ++d) {
      const int64_t sd = std::llabs(it.strides[k][d]);
      if (sd > 0 && sd < sl && it.sizes[d] > 1 && (best < 0 || sd < std::llabs(it.strides[k][best]))) best = d;
    }
    if (best >= 0) return best;
  }
  return -1;
}

template <int N>
int64_t tile_count(const StridedIter<N>& it, int dt) {
  const int L = it.ndim - 1;
  int64_t outer = 1;
  for (int d = 0; d < L; ++d)
    if (d != dt) outer *= it.sizes[d];
  return outer * ((it.sizes[dt] + kTileRows - 1) / kTileRows) * ((it.sizes[L] + kTileCols - 1) / kTileCols);
}

// Runs f over tiles [tb, te) of the (dt, innermost) tiling of `it`.
template <class Out, class... In, class F, size_t... I>
void run_tiles(const StridedIter<1 + sizeof...(In)>& it, int dt, Out* out,
               [[maybe_unused]] std::tuple<const In*...> ins, F& f, int64_t tb, int64_t te, std::index_sequence<I...>) {
  constexpr int N = 1 + sizeof...(In);
  const int L = it.ndim - 1;
  const int64_t rows = it.sizes[dt], cols = it.sizes[L];
  const int64_t tiles_r = (rows + kTileRows - 1) / kTileRows, tiles_c = (cols + kTileCols - 1) / kTileCols;
  const int64_t so = it.strides[0][L];
  [[maybe_unused]] const int64_t sl[sizeof...(In) + 1] = {it.strides[1 + I][L]..., 0};
  for (int64_t id = tb; id < te; ++id) {
    const int64_t bc = id % tiles_c, br = (id / tiles_c) % tiles_r;
    int64_t outer = id / (tiles_c * tiles_r);
    int64_t off[N] = {};
    for (int d = L - 1; d >= 0; --d) {
      if (d == dt) continue;
      const int64_t i = outer % it.sizes[d];
      outer /= it.sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * it.strides[k][d];
    }
    const int64_t r0 = br * kTileRows, r1 = std::min(rows, r0 + kTileRows);
    const int64_t c0 = bc * kTileCols, n = std::min(cols, c0 + kTileCols) - c0;
    for (int64_t r = r0; r < r1; ++r) {
      Out* o = out + off[0] + r * it.strides[0][dt] + c0 * so;
      [[maybe_unused]] const auto ptrs =
          std::make_tuple((std::get<I>(ins) + off[1 + I] + r * it.strides[1 + I][dt] + c0 * sl[I])...);
      for (int64_t j = 0; j < n; ++j) o[j * so] = Out(f(load(std::get<I>(ptrs) + j * sl[I])...));
    }
  }
}

}  // namespace detail

// out = f(ins...) elementwise. `out` has the broadcast shape; Out and In... are the element
// types of out and the inputs; f takes and returns compute types.
template <class Out, class... In, class F>
void elementwise(const Tensor& out, std::array<const Tensor*, sizeof...(In)> ins, F f) {
  constexpr int N = 1 + sizeof...(In);
  const int64_t numel = out.numel();
  if (numel == 0) return;
  std::array<const Tensor*, N> ops;
  ops[0] = &out;
  for (size_t k = 0; k < sizeof...(In); ++k) ops[k + 1] = ins[k];
  StridedIter<N> it(ops.data());
  Out* o = static_cast<Out*>(out.data_ptr());
  auto ptrs = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(static_cast<const In*>(ins[I]->data_ptr())...);
  }
  (std::index_sequence_for<In...>{});
  const int dt = elementwise_tiling().load(std::memory_order_relaxed) ? detail::tile_dim(it) : -1;
  // Work units: tiles for the tiled walk, output elements otherwise; threads split them in
  // contiguous chunks, each with its own copy of f.
  const int64_t units = dt >= 0 ? detail::tile_count(it, dt) : numel;
  auto run = [&](F& fn, int64_t b, int64_t e) {
    if (dt >= 0)
      detail::run_tiles<Out, In...>(it, dt, o, ptrs, fn, b, e, std::index_sequence_for<In...>{});
    else
      detail::run_range<Out, In...>(it, o, ptrs, fn, b, e, std::index_sequence_for<In...>{});
  };
  const int nt = int(std::min<int64_t>(threads_for(numel), units));
  if (nt <= 1) {
    run(f, 0, units);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    const int64_t chunk = (units + nt - 1) / nt;
    const int64_t b = std::min<int64_t>(units, t * chunk), e = std::min<int64_t>(units, b + chunk);
    F local = f;
    if (b < e) run(local, b, e);
  }
}

}  // namespace brisk::kernels::cpu
