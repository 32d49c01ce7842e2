// engine/ops/shape.cpp: views (view/reshape, permute, expand, slice and the functions built
// on them: flatten, squeeze, unsqueeze, transpose, select, narrow), slice_backward (slice's
// gradient: zeros with the grad written into the sliced positions) and copies between devices,
// one block per op: view function or inference, backward formula, OpDef row, public functions.
// A view shares its input's storage: its ViewFn only computes sizes, strides and offset.
// Not here: the slice_backward kernels (kernels/cpu/shape.cpp, kernels/cuda/index.cu), the
// byte copies (each device's Backend, engine/backend.h), clone and contiguous
// (engine/ops/elementwise.cpp).
#include <numeric>

#include "engine/backend.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;

Tensor restride(const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  return make_view(x.storage(), sizes, strides, offset, x.dtype());
}

Tensor view_call(OpId id, const Tensor& x, const Attrs& a) {
  Tensor ins[1] = {x};
  Tensor out[1];
  call(id, ins, a, out);
  return out[0];
}

// ---- view: x viewed with attrs.shape (no -1 left), without copying
// Resolves one -1 in `shape` against numel; errors name the op.
Shape infer_size(const Shape& shape, int64_t numel, const Tensor& x, const char* op) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1, extent = 1;  // extent: see Note [Checked sizes] in engine/shape.h
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      BRISK_CHECK(infer < 0, op, ": only one size may be -1, got ", shape);
      infer = i;
    } else {
      BRISK_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape);
      BRISK_CHECK(checked_mul(extent, std::max<int64_t>(out[i], 1), extent), op, ": shape ", shape,
                  " has more elements than fit in 64 bits");
      known *= out[i];
    }
  }
  if (infer >= 0) {
    BRISK_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input ", x.str());
    out[infer] = numel / known;
  } else {
    BRISK_CHECK(known == numel, op, ": shape ", shape, " is invalid for input ", x.str(), " (", numel, " elements)");
  }
  return out;
}

// Strides that let `x` be viewed with `sizes` without copying, or false when there are none
// (PyTorch's computeStride: each run of input dims that is contiguous in memory may be
// re-split freely).
bool view_strides(const Tensor& x, const Shape& sizes, Shape& strides) {
  const Shape& old_sizes = x.sizes();
  const Shape& old_strides = x.strides();
  strides = Shape::filled(sizes.size(), 1);
  if (x.numel() == 0 || old_sizes.empty()) {
    strides = contiguous_strides(sizes);
    return true;
  }
  int view_d = sizes.size() - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = old_sizes.size() - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor view_fn(const Tensor& x, const Attrs& a) {
  Shape strides;
  BRISK_CHECK(view_strides(x, a.shape, strides), "view: ", a.shape, " is not compatible with the strides ", x.strides(),
              " of input ", x.str(), " (use reshape, which copies when it must)");
  return restride(x, a.shape, strides, x.offset());
}

void view_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = reshape(c.grads[0], c.in_specs[0].sizes); }

const OpDef kView{.view = view_fn, .backward = view_bw};

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  Attrs a;
  a.shape = infer_size(shape, x.numel(), x, "view");
  return view_call(OpId::View, x, a);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Attrs a;
  a.shape = infer_size(shape, x.numel(), x, "reshape");
  Shape strides;
  if (view_strides(x, a.shape, strides)) return view_call(OpId::View, x, a);
  return view_call(OpId::View, clone(x), a);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  int s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  BRISK_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape;
  for (int i = 0; i < s; ++i) shape.push_back(x.sizes()[i]);
  int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= x.sizes()[i];
  shape.push_back(n);
  for (int i = e + 1; i < x.dim(); ++i) shape.push_back(x.sizes()[i]);
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x;
  int d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.sizes()[d] != 1) return x;
  Shape s = x.sizes();
  s.erase(d);
  return view_call(OpId::View, x, [&] {
    Attrs a;
    a.shape = s;
    return a;
  }());
}

Tensor squeeze(const Tensor& x) {
  Shape s;
  for (int64_t v : x.sizes()) {
    if (v != 1) s.push_back(v);
  }
  if (s.size() == x.dim()) return x;
  Attrs a;
  a.shape = s;
  return view_call(OpId::View, x, a);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Attrs a;
  a.shape = x.sizes();
  a.shape.insert(d, 1);
  return view_call(OpId::View, x, a);
}

namespace {

// ---- permute: x's dims reordered as attrs.dims (a view)
Tensor permute_fn(const Tensor& x, const Attrs& a) {
  const Shape& dims = a.dims;
  BRISK_CHECK(dims.size() == x.dim(), "permute: ", dims.size(), " dims given for input ", x.str());
  Shape sizes = Shape::filled(x.dim(), 0), strides = Shape::filled(x.dim(), 0);
  bool seen[kMaxDims] = {};
  for (int i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], x.dim(), "permute");
    BRISK_CHECK(!seen[d], "permute: dim ", d, " repeats in ", dims);
    seen[d] = true;
    sizes[i] = x.sizes()[d];
    strides[i] = x.strides()[d];
  }
  return restride(x, sizes, strides, x.offset());
}

void permute_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Shape& dims = c.attrs.dims;
  Shape inverse = Shape::filled(dims.size(), 0);
  for (int i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dims.size(), "permute")] = i;
  gi[0] = permute(c.grads[0], inverse);
}

const OpDef kPermute{.view = permute_fn, .backward = permute_bw};

}  // namespace

Tensor permute(const Tensor& x, const Shape& dims) {
  Attrs a;
  a.dims = dims;
  return view_call(OpId::Permute, x, a);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int a0 = wrap_dim(d0, x.dim(), "transpose"), a1 = wrap_dim(d1, x.dim(), "transpose");
  if (x.dim() < 2 || a0 == a1) return x;
  Shape dims;
  for (int i = 0; i < x.dim(); ++i) dims.push_back(i);
  std::swap(dims[a0], dims[a1]);
  return permute(x, dims);
}

namespace {

// ---- expand: x broadcast to attrs.shape (-1 keeps a size) with stride 0 (a view)
Tensor expand_fn(const Tensor& x, const Attrs& a) {
  const Shape& target = a.shape;
  BRISK_CHECK(target.size() >= x.dim(), "expand: target ", target, " has fewer dims than input ", x.str());
  int lead = target.size() - x.dim();
  Shape sizes = target, strides = Shape::filled(target.size(), 0);
  int64_t extent = 1;  // see Note [Checked sizes] in engine/shape.h
  for (int i = 0; i < target.size(); ++i) {
    const int64_t s = target[i] == -1 && i >= lead ? x.sizes()[i - lead] : target[i];
    BRISK_CHECK(s >= -1, "expand: invalid size ", s, " in target ", target);
    BRISK_CHECK(s < 0 || checked_mul(extent, std::max<int64_t>(s, 1), extent), "expand: target ", target,
                " has more elements than fit in 64 bits");
  }
  for (int i = 0; i < target.size(); ++i) {
    if (i < lead) {
      BRISK_CHECK(target[i] >= 0, "expand: size -1 is not allowed for a new leading dim, target ", target);
      continue;
    }
    int64_t s = x.sizes()[i - lead];
    if (target[i] == -1 || target[i] == s) {
      sizes[i] = s;
      strides[i] = x.strides()[i - lead];
    } else {
      BRISK_CHECK(s == 1, "expand: input ", x.str(), " cannot expand to ", target, " (dim ", i, ": ", s, " vs ",
                  target[i], ")");
    }
  }
  return restride(x, sizes, strides, x.offset());
}

void expand_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = sum_to(c.grads[0], c.in_specs[0].sizes); }

const OpDef kExpand{.view = expand_fn, .backward = expand_bw};

}  // namespace

Tensor expand(const Tensor& x, const Shape& shape) {
  Attrs a;
  a.shape = shape;
  return view_call(OpId::Expand, x, a);
}

namespace {

// ---- slice: x[start:end:step] along attrs.dim (a view; start, end clipped by slice())
Tensor slice_fn(const Tensor& x, const Attrs& a) {
  int d = int(a.dim);
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[d] = a.end == a.start ? 0 : (a.end - a.start - 1) / a.step + 1;  // no overflow for any step
  if (sizes[d] > 1) strides[d] *= a.step;  // step < size of the dim: within the checked extent
  return restride(x, sizes, strides, x.offset() + a.start * x.strides()[d]);
}

void slice_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  Attrs a = c.attrs;
  a.shape = c.in_specs[0].sizes;
  gi[0] = call1(OpId::SliceBackward, {c.grads[0]}, a);
}

const OpDef kSlice{.view = slice_fn, .backward = slice_bw};

}  // namespace

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  BRISK_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "slice");
  BRISK_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = x.sizes()[d];
  auto clip = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  Attrs a;
  a.dim = d;
  a.start = clip(start);
  a.end = std::max(a.start, clip(end));
  a.step = step;
  return view_call(OpId::Slice, x, a);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  BRISK_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "narrow");
  int64_t n = x.sizes()[d];
  if (start < 0) start += n;
  BRISK_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, "narrow: start ", start, " + length ",
              length, " is out of range for dim ", d, " of size ", n);
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  BRISK_CHECK(x.dim() > 0, "select: cannot select from a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.sizes()[d];
  BRISK_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return squeeze(slice(x, d, index, index + 1, 1), d);
}

namespace {

// ---- slice_backward: (grad) -> zeros of attrs.shape, grad in the positions slice's attrs pick
void slice_backward_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  out[0] = {a.shape, in[0].dtype()};
}

void slice_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Attrs& a = c.attrs;
  gi[0] = slice(c.grads[0], a.dim, a.start, a.end, a.step);
}

const OpDef kSliceBackward{.infer = slice_backward_infer, .backward = slice_backward_bw};

// ---- to_device: a dense copy of x on attrs.device (attrs.flag: non_blocking)
void to_device_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  out[0] = {in[0].sizes(), in[0].dtype()};
}

void to_device_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = to_device(c.grads[0], c.device); }

// Copies a dense tensor between devices; the non-CPU side's backend moves the bytes.
void to_device_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& src = in[0];
  Tensor& dst = out[0];
  BRISK_CHECK(src.is_contiguous() && dst.is_contiguous(), "to_device: needs dense tensors");
  Device owner = dst.device().is_cpu() ? src.device() : dst.device();
  size_t bytes = size_t(src.numel()) * src.element_size();
  backend(owner).copy(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), bytes, a.flag);
}

// Its kernel, to_device_kernel, is installed for every device by define_shape_ops.
const OpDef kToDevice{.infer = to_device_infer, .backward = to_device_bw, .to_attrs_device = true};

}  // namespace

Tensor to_device(const Tensor& x, Device device, bool non_blocking) {
  BRISK_CHECK(x.defined(), "to_device: undefined input");
  if (x.device() == device) return x;
  backend(device);  // clear error when the target does not exist
  Attrs a;
  a.device = device;
  a.flag = non_blocking;
  return view_call(OpId::ToDevice, contiguous(x), a);
}

// ---- composites: pieces along a dim (views), roll, repeat/tile, tril/triu
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  BRISK_CHECK(x.defined() && x.dim() > 0, "split: needs a tensor with at least one dim");
  BRISK_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.sizes()[size_t(d)];
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < n; start += split_size)
    pieces.push_back(narrow(x, d, start, std::min(split_size, n - start)));
  if (pieces.empty()) pieces.push_back(x);  // a dim of size 0 splits into one empty piece
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  BRISK_CHECK(x.defined() && x.dim() > 0, "split: needs a tensor with at least one dim");
  const int d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.sizes()[size_t(d)];
  int64_t total = 0;
  for (int64_t s : sizes) {
    BRISK_CHECK(s >= 0, "split: sizes must be non-negative, got ", s);
    total += s;
  }
  BRISK_CHECK(total == n, "split: sizes add up to ", total, " but dim ", d, " has size ", n, " (", x.str(), ")");
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(narrow(x, d, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  BRISK_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  BRISK_CHECK(x.defined() && x.dim() > 0, "chunk: needs a tensor with at least one dim");
  const int64_t n = x.sizes()[size_t(wrap_dim(dim, x.dim(), "chunk"))];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  BRISK_CHECK(x.defined() && x.dim() > 0, "unbind: needs a tensor with at least one dim");
  const int d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.sizes()[size_t(d)]; ++i) out.push_back(select(x, d, i));
  return out;
}

Tensor roll(const Tensor& x, int64_t shifts, int64_t dim) {
  BRISK_CHECK(x.defined() && x.dim() > 0, "roll: needs a tensor with at least one dim");
  const int d = wrap_dim(dim, x.dim(), "roll");
  const int64_t n = x.sizes()[size_t(d)];
  if (n == 0) return clone(x);
  const int64_t s = ((shifts % n) + n) % n;
  if (s == 0) return clone(x);
  return cat({narrow(x, d, n - s, s), narrow(x, d, 0, n - s)}, d);
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  BRISK_CHECK(x.defined(), "repeat: undefined input");
  BRISK_CHECK(int64_t(repeats.size()) >= x.dim(), "repeat: ", repeats.size(), " repeats for a tensor with ", x.dim(),
              " dims (need at least as many)");
  for (int64_t r : repeats) BRISK_CHECK(r >= 0, "repeat: repeats must be non-negative, got ", repeats);
  // x padded with leading 1s to len(repeats) dims, each dim d viewed as (1, n_d), expanded to
  // (r_d, n_d) and merged: whole copies tiled, as torch.Tensor.repeat.
  const size_t k = repeats.size();
  Shape padded = Shape::filled(int(k), 1);
  for (int d = 0; d < x.dim(); ++d) padded[k - size_t(x.dim()) + size_t(d)] = x.sizes()[size_t(d)];
  Shape split_shape, expanded, merged;
  for (size_t d = 0; d < k; ++d) {
    split_shape.push_back(1);
    split_shape.push_back(padded[d]);
    expanded.push_back(repeats[d]);
    expanded.push_back(padded[d]);
    merged.push_back(detail::checked_term(repeats[d], padded[d], 0, "repeat", "a repeated size"));
  }
  return reshape(expand(reshape(x, split_shape), expanded), merged);
}

Tensor tile(const Tensor& x, const Shape& reps) {
  BRISK_CHECK(x.defined(), "tile: undefined input");
  Shape r = reps;
  while (int64_t(r.size()) < x.dim()) r.insert(0, 1);
  return repeat(x, r);
}

static Tensor triangle(const Tensor& x, int64_t diagonal, bool lower) {
  const char* op = lower ? "tril" : "triu";
  BRISK_CHECK(x.defined() && x.dim() >= 2, op, ": needs a tensor with at least 2 dims, got ",
              x.defined() ? x.str() : std::string("undefined"));
  const int64_t m = x.sizes()[size_t(x.dim() - 2)], n = x.sizes()[size_t(x.dim() - 1)];
  Tensor rows = arange(m, DType::I64, x.device()).unsqueeze(1);
  Tensor cols = arange(n, DType::I64, x.device()).unsqueeze(0) - diagonal;
  Tensor keep = lower ? le(cols, rows) : ge(cols, rows);  // j - diagonal <= i (tril)
  return where(keep, x, zeros({}, x.dtype(), x.device()));
}
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false); }

namespace detail {

void define_shape_ops() {
  define(OpId::View, kView);
  define(OpId::Permute, kPermute);
  define(OpId::Expand, kExpand);
  define(OpId::Slice, kSlice);
  define(OpId::SliceBackward, kSliceBackward);
  define(OpId::ToDevice, kToDevice);
  for (int d = 0; d < kNumDeviceTypes; ++d) op_def(OpId::ToDevice).kernels[d] = to_device_kernel;
}

}  // namespace detail

}  // namespace brisk
