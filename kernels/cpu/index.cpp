// kernels/cpu/index.cpp: CPU kernels of cat, index_select, index_add, gather and scatter_add.
// Two loops do the indexing: a gather loop (out[o, j, i] = x[o, index[o, j, i], i]) and a
// scatter-add loop (out[o, index[o, j, i], i] += src[o, j, i]); index_select and index_add
// are those loops with the 1-D index broadcast along the other dims. Every index is checked
// before anything is written. Scatter-adds are race-free and deterministic: threads split the
// (o, i) positions and each walks j in order, so repeated indices add up in a fixed order.
// Not here: the shape rules (engine/ops/index.cpp).
#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

// A run of dims walked by one flat row-major index, size-1 dims dropped and neighbours that
// are one run of memory merged (so most groups end up with zero or one dim).
struct DimGroup {
  int n = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];

  DimGroup(const Shape& sz, const Shape& st, int begin, int end) {
    for (int d = begin; d < end; ++d) {
      if (sz[d] == 1) continue;
      if (n > 0 && strides[n - 1] == st[d] * sz[d]) {
        sizes[n - 1] *= sz[d];
        strides[n - 1] = st[d];
        continue;
      }
      sizes[n] = sz[d];
      strides[n] = st[d];
      ++n;
    }
  }

  int64_t numel() const {
    int64_t total = 1;
    for (int d = 0; d < n; ++d) total *= sizes[d];
    return total;
  }

  // Offset (in elements) of the k-th element of the group.
  int64_t offset(int64_t k) const {
    if (n == 0) return 0;
    if (n == 1) return k * strides[0];
    int64_t off = 0;
    for (int d = n - 1; d >= 0; --d) {
      off += (k % sizes[d]) * strides[d];
      k /= sizes[d];
    }
    return off;
  }
};

// One operand seen as (outer, along, inner) around `dim`, walking the logical sizes `sizes`
// (the index space) with its own strides.
struct Split {
  DimGroup outer, inner;
  int64_t along;  // stride of `dim`

  Split(const Shape& sizes, const Shape& strides, int dim)
      : outer(sizes, strides, 0, dim), inner(sizes, strides, dim + 1, sizes.size()), along(strides[dim]) {}
};

// The index ops read a 0-dim tensor as (1).
Tensor as_1d(const Tensor& t) {
  if (t.dim() > 0) return t;
  return make_view(t.storage(), {1}, {1}, t.offset(), t.dtype());
}

// `index` (0-D or 1-D) broadcast over `sizes`: it varies along `dim` only.
Tensor index_along(const Tensor& index, const Shape& sizes, int dim) {
  Shape strides = Shape::filled(sizes.size(), 0);
  strides[dim] = index.dim() == 1 ? index.strides()[0] : 0;
  return make_view(index.storage(), sizes, strides, index.offset(), index.dtype());
}

// Throws before any write when an index is outside [0, size).
template <class I>
void check_indices(const Tensor& index, int64_t size, int dim, const char* op) {
  const I* p = static_cast<const I*>(index.data_ptr());
  DimGroup all(index.sizes(), index.strides(), 0, index.dim());
  const int64_t n = index.numel();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = int64_t(p[all.offset(k)]);
    BRISK_CHECK(v >= 0 && v < size, op, ": index ", v, " is out of range for dim ", dim, " of size ", size);
  }
}

template <class F>
void dispatch_index(DType t, const char* op, F&& f) {
  if (t == DType::I64) return f(int64_t{});
  if (t == DType::I32) return f(int32_t{});
  BRISK_FAIL(op, ": index must be I64 or I32, got ", t);
}

// out[o, j, i] = x[o, index[o, j, i], i] over the sizes of `out`; `x` and `index` are read
// with their own strides over the same sizes (x's size along dim does not matter).
template <class T, class I>
void gather_loop(const Tensor& out, const Tensor& x, const Tensor& index, int dim) {
  const Shape& sizes = out.sizes();
  const Split so(sizes, out.strides(), dim), sx(sizes, x.strides(), dim), si(sizes, index.strides(), dim);
  const int64_t along_n = sizes[dim];
  const int64_t rows = so.outer.numel() * along_n;
  const int64_t inner_n = so.inner.numel();
  T* po = static_cast<T*>(out.data_ptr());
  const T* px = static_cast<const T*>(x.data_ptr());
  const I* pi = static_cast<const I*>(index.data_ptr());
  const int nt = threads_for(rows * inner_n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r / along_n;
    const int64_t j = r % along_n;
    T* out_row = po + so.outer.offset(o) + j * so.along;
    const I* index_row = pi + si.outer.offset(o) + j * si.along;
    const T* x_rows = px + sx.outer.offset(o);
    for (int64_t i = 0; i < inner_n; ++i) {
      const int64_t k = int64_t(index_row[si.inner.offset(i)]);
      out_row[so.inner.offset(i)] = x_rows[k * sx.along + sx.inner.offset(i)];
    }
  }
}

inline constexpr int64_t kScatterBlock = 256;  // inner positions one scatter work unit owns

// out[o, index[o, j, i], i] += src[o, j, i] over the sizes of `src` (with index read over the
// same sizes). Work units are (o, block of i); each walks j in order, so no two threads touch
// one output element and the sum order does not depend on the thread count.
template <class T, class I>
void scatter_add_loop(const Tensor& out, const Tensor& src, const Tensor& index, int dim) {
  const Shape& sizes = src.sizes();
  const Split so(sizes, out.strides(), dim), ss(sizes, src.strides(), dim), si(sizes, index.strides(), dim);
  const int64_t along_n = sizes[dim];
  const int64_t outer_n = ss.outer.numel();
  const int64_t inner_n = ss.inner.numel();
  const int64_t blocks = (inner_n + kScatterBlock - 1) / kScatterBlock;
  const int64_t units = outer_n * blocks;
  T* po = static_cast<T*>(out.data_ptr());
  const T* ps = static_cast<const T*>(src.data_ptr());
  const I* pi = static_cast<const I*>(index.data_ptr());
  const int nt = int(std::clamp<int64_t>(threads_for(outer_n * along_n * inner_n), 1, units));
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t o = u / blocks;
    const int64_t begin = (u % blocks) * kScatterBlock;
    const int64_t end = std::min(inner_n, begin + kScatterBlock);
    T* out_rows = po + so.outer.offset(o);
    for (int64_t j = 0; j < along_n; ++j) {
      const T* src_row = ps + ss.outer.offset(o) + j * ss.along;
      const I* index_row = pi + si.outer.offset(o) + j * si.along;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t k = int64_t(index_row[si.inner.offset(i)]);
        T& dst = out_rows[k * so.along + so.inner.offset(i)];
        dst = T(compute_t<T>(dst) + compute_t<T>(src_row[ss.inner.offset(i)]));
      }
    }
  }
}

template <class T>
void copy_into(const Tensor& dst, const Tensor& src) {
  elementwise<T, T>(dst, {&src}, [](compute_t<T> v) { return v; });
}

// ---- kernels
// out: (..., sum of n_t, ...); each input is copied into its window of out along dim.
void cat_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& y = out[0];
  const int d = int(attrs.dim);
  int64_t start = 0;
  dispatch_all(y.dtype(), "cat", [&](auto tag) {
    using T = decltype(tag);
    for (const Tensor& t : in) {
      if (t.numel() == 0) continue;  // also the skipped legacy (0) tensors
      Tensor window = make_view(y.storage(), t.sizes(), y.strides(), y.offset() + start * y.strides()[d], y.dtype());
      copy_into<T>(window, t);
      start += t.sizes()[d];
    }
  });
}

// x: (..., N, ...), index: (K) -> out: (..., K, ...)
void index_select_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor y = as_1d(out[0]);
  const Tensor& index = in[1];
  const int d = int(attrs.dim);
  dispatch_index(index.dtype(), "index_select", [&](auto itag) {
    using I = decltype(itag);
    check_indices<I>(index, x.sizes()[d], d, "index_select");
    if (y.numel() == 0) return;
    Tensor idx = index_along(index, y.sizes(), d);
    dispatch_all(y.dtype(), "index_select", [&](auto tag) { gather_loop<decltype(tag), I>(y, x, idx, d); });
  });
}

// x: (..., N, ...), index: (K), src: (..., K, ...) -> out: x with src's rows added at index
void index_add_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor src = as_1d(in[2]);
  const Tensor y = as_1d(out[0]);
  const Tensor& index = in[1];
  const int d = int(attrs.dim);
  dispatch_index(index.dtype(), "index_add", [&](auto itag) {
    using I = decltype(itag);
    check_indices<I>(index, x.sizes()[d], d, "index_add");
    dispatch_numeric(y.dtype(), "index_add", [&](auto tag) {
      using T = decltype(tag);
      if (y.data_ptr() != x.data_ptr() || y.strides() != x.strides()) copy_into<T>(y, x);  // else in place
      if (src.numel() == 0) return;
      scatter_add_loop<T, I>(y, src, index_along(index, src.sizes(), d), d);
    });
  });
}

// x: (..., N, ...), index: (..., K, ...) -> out: index's shape
void gather_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor index = as_1d(in[1]);
  const Tensor y = as_1d(out[0]);
  const int d = int(attrs.dim);
  dispatch_index(index.dtype(), "gather", [&](auto itag) {
    using I = decltype(itag);
    check_indices<I>(index, x.sizes()[d], d, "gather");
    if (y.numel() == 0) return;
    dispatch_all(y.dtype(), "gather", [&](auto tag) { gather_loop<decltype(tag), I>(y, x, index, d); });
  });
}

// x: (..., N, ...), index: (..., K, ...), src at least index's size -> out: x's shape
void scatter_add_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = as_1d(in[0]);
  const Tensor index = as_1d(in[1]);
  const Tensor src = as_1d(in[2]);
  const Tensor y = as_1d(out[0]);
  const int d = int(attrs.dim);
  dispatch_index(index.dtype(), "scatter_add", [&](auto itag) {
    using I = decltype(itag);
    check_indices<I>(index, x.sizes()[d], d, "scatter_add");
    dispatch_numeric(y.dtype(), "scatter_add", [&](auto tag) {
      using T = decltype(tag);
      copy_into<T>(y, x);
      if (index.numel() == 0) return;
      // src is read over index's sizes (it may be larger).
      Tensor src_window = make_view(src.storage(), index.sizes(), src.strides(), src.offset(), src.dtype());
      scatter_add_loop<T, I>(y, src_window, index, d);
    });
  });
}

}  // namespace

void register_index() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Cat, cpu, cat_kernel);
  register_kernel(OpId::IndexSelect, cpu, index_select_kernel);
  register_kernel(OpId::IndexAdd, cpu, index_add_kernel);
  register_kernel(OpId::Gather, cpu, gather_kernel);
  register_kernel(OpId::ScatterAdd, cpu, scatter_add_kernel);
}

}  // namespace brisk::kernels::cpu
