// engine/ops/index.cpp: OpDefs and public functions of the indexing family: cat (and stack,
// its composite), index_select (and embedding, its composite), index_add, gather and
// scatter_add, one block per op: inference, backward formula, OpDef row, public functions.
// Inference checks every shape rule and names the offending tensor; index values are checked
// by the kernels (they live on the device). Backward formulas use the family itself: a
// gather's gradient is a scatter_add and the other way round. Not here: slicing views
// (engine/ops/shape.cpp) and the kernels (kernels/<device>/index.cpp).
#include "engine/grad_mode.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;
using P = CastPolicy;

void check_index_dtype(const Tensor& index, const char* op) {
  BRISK_CHECK(index.dtype() == DType::I64 || index.dtype() == DType::I32, op, ": index must be I64 or I32, got ",
              index.str());
}

// Sizes of t with a 0-dim tensor read as (1), the way the index ops treat scalars.
Shape at_least_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.sizes(); }

// gather and scatter_add: index has the input's rank, and is no larger than `other` in every
// dim (but `dim` itself when `skip_dim`).
void check_index_fits(const Tensor& index, const Tensor& other, int d, bool skip_dim, const char* op,
                      const char* other_name) {
  const Shape is = at_least_1d(index), os = at_least_1d(other);
  BRISK_CHECK(is.size() == os.size(), op, ": index ", index.str(), " and ", other_name, " ", other.str(),
              " must have the same number of dims");
  for (int k = 0; k < is.size(); ++k) {
    if (skip_dim && k == d) continue;
    BRISK_CHECK(is[k] <= os[k], op, ": index ", index.str(), " is larger than ", other_name, " ", other.str(),
                " in dim ", k);
  }
}

// ---- helpers for backward formulas
const Tensor& g0(const BackwardCtx& c) { return c.grads[0]; }
Tensor zeros_for_input(const BackwardCtx& c, int i) {
  const TensorSpec& s = c.in_specs[size_t(i)];
  return zeros(s.sizes, s.dtype, c.device);
}

// ---- cat: tensors joined along attrs.dim
// Note [Legacy empty tensors in cat]
// As in PyTorch, a 1-D tensor of size 0 may join a cat whatever the other shapes are: it is
// skipped by the shape checks, contributes nothing and gets an empty gradient.
bool skipped_by_cat(const Shape& s) { return s.size() == 1 && s[0] == 0; }

// The first input that takes part in cat's shape rules (all may be skipped: then input 0).
int cat_reference(std::span<const Tensor> in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!skipped_by_cat(in[i].sizes())) return int(i);
  }
  return 0;
}
int cat_reference(std::span<const TensorSpec> in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!skipped_by_cat(in[i].sizes)) return int(i);
  }
  return 0;
}

void cat_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(!in.empty(), "cat: expects a non-empty list of tensors");
  const int r = cat_reference(in);
  const Tensor& ref = in[size_t(r)];
  for (size_t i = 0; i < in.size(); ++i) {
    BRISK_CHECK(in[i].dim() > 0, "cat: tensor ", i, " is 0-dim and cannot be concatenated");
    BRISK_CHECK(in[i].dtype() == ref.dtype(), "cat: tensor ", i, " is ", in[i].str(), " but tensor ", r, " is ",
                ref.str(), " (dtypes must match)");
  }
  const int d = wrap_dim(attrs.dim, ref.dim(), "cat");
  Shape sizes = ref.sizes();
  sizes[d] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].sizes();
    if (skipped_by_cat(s)) continue;
    bool match = s.size() == ref.dim();
    for (int k = 0; match && k < s.size(); ++k) match = k == d || s[k] == ref.sizes()[k];
    BRISK_CHECK(match, "cat: tensor ", i, " has shape ", s, " but tensor ", r, " has shape ", ref.sizes(),
                "; sizes must match except in dim ", d);
    sizes[d] += s[d];
  }
  out[0] = {sizes, ref.dtype()};
}

// Each input's gradient is its slice of the output gradient.
void cat_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const int ref = cat_reference(c.in_specs);
  const int d = wrap_dim(c.attrs.dim, c.in_specs[size_t(ref)].sizes.size(), "cat");
  int64_t start = 0;
  for (size_t i = 0; i < c.in_specs.size(); ++i) {
    const Shape& s = c.in_specs[i].sizes;
    if (skipped_by_cat(s)) {
      if (c.needs_grad(int(i))) gi[i] = zeros_for_input(c, int(i));
      continue;
    }
    if (c.needs_grad(int(i))) gi[i] = narrow(g0(c), d, start, s[d]);
    start += s[d];
  }
}

const OpDef kCat{.infer = cat_infer, .backward = cat_bw, .autocast = P::Promote};

// A node's input masks are 32-bit (see record() in engine/dispatch.cpp), so a longer list is
// concatenated in groups of this many, then the groups are concatenated.
constexpr size_t kMaxCatInputs = 32;

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  BRISK_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) BRISK_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
  if (tensors.size() > kMaxCatInputs) {
    std::vector<Tensor> groups;
    for (size_t b = 0; b < tensors.size(); b += kMaxCatInputs) {
      size_t e = std::min(tensors.size(), b + kMaxCatInputs);
      groups.push_back(cat(std::vector<Tensor>(tensors.begin() + b, tensors.begin() + e), dim));
    }
    return cat(groups, dim);
  }
  DType common = tensors[0].dtype();
  for (const Tensor& t : tensors) common = promote_types(common, t.dtype());
  std::vector<Tensor> in;
  for (const Tensor& t : tensors) in.push_back(cast(t, common));
  const Tensor& ref = in[size_t(cat_reference(in))];
  BRISK_CHECK(ref.dim() > 0, "cat: tensor ", cat_reference(in), " is 0-dim and cannot be concatenated");
  Attrs attrs;
  attrs.dim = wrap_dim(dim, ref.dim(), "cat");
  Tensor out[1];
  call(OpId::Cat, in, attrs, out);
  return out[0];
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  BRISK_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  const Shape& first = tensors[0].sizes();
  for (size_t i = 1; i < tensors.size(); ++i) {
    BRISK_CHECK(tensors[i].sizes() == first, "stack: tensor ", i, " has shape ", tensors[i].sizes(),
                " but tensor 0 has shape ", first, " (all must be equal)");
  }
  const int d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

namespace {

// ---- index_select: (x, index (n) or 0-D) -> x with dim attrs.dim of size n
void index_select_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor &x = in[0], &index = in[1];
  check_index_dtype(index, "index_select");
  BRISK_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D, got ", index.str());
  const int d = wrap_dim(attrs.dim, x.dim(), "index_select");
  if (x.dim() == 0) {
    BRISK_CHECK(index.numel() == 1, "index_select: a 0-dim input takes exactly one index, got ", index.str());
    out[0] = {x.sizes(), x.dtype()};
    return;
  }
  Shape sizes = x.sizes();
  sizes[d] = index.numel();
  out[0] = {sizes, x.dtype()};
}

// The rows of g added into zeros of x's shape: an embedding's backward. Without create_graph
// the add goes in place: into the gradient x already has from its other consumers when the
// engine hands it over (a tied weight: GPT-2's wte and its head; Note [Adding into a pending
// gradient] in engine/autograd.cpp), else into fresh zeros (no copy of a vocabulary-sized
// tensor); with create_graph, the functional index_add, which differentiates again.
void index_select_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (GradMode::enabled()) {
    gi[0] = index_add(zeros_for_input(c, 0), c.attrs.dim, c.inputs[1], g0(c));
    return;
  }
  Tensor z = c.take_pending_grad(0);
  if (!z.defined()) z = zeros_for_input(c, 0);
  const Tensor in[3] = {z, c.inputs[1], g0(c)};
  Tensor out[1] = {z};
  call(OpId::IndexAdd, in, c.attrs, out);
  gi[0] = z;
}

const OpDef kIndexSelect{.infer = index_select_infer,
                         .backward = index_select_bw,
                         .save_inputs = mask(1),   // index
                         .diff_inputs = mask(0)};  // x

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs attrs;
  attrs.dim = wrap_dim(dim, x.dim(), "index_select");
  return call1(OpId::IndexSelect, {x, index}, attrs);
}

// Rows of weight picked by the flattened indices; index_select's backward (index_add into
// zeros) sums the gradients of repeated indices.
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  BRISK_CHECK(weight.dim() == 2, "embedding: weight must be (V, D), got ", weight.str());
  Tensor rows = index_select(weight, 0, reshape(indices, {indices.numel()}));
  Shape sizes = indices.sizes();
  sizes.push_back(weight.sizes()[1]);
  return view(rows, sizes);
}

namespace {

// ---- index_add: (x, index (n) or 0-D, src) -> x plus src's slices at the indices of dim
void index_add_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor &x = in[0], &index = in[1], &src = in[2];
  check_index_dtype(index, "index_add");
  BRISK_CHECK(index.dim() <= 1, "index_add: index must be 0-D or 1-D, got ", index.str());
  BRISK_CHECK(x.dtype() == src.dtype(), "index_add: input ", x.str(), " and source ", src.str(),
              " must have the same dtype");
  const int d = wrap_dim(attrs.dim, x.dim(), "index_add");
  Shape want = at_least_1d(x);
  want[d] = index.numel();
  const bool scalar_ok = x.dim() == 0 && src.numel() == 1 && src.dim() <= 1;
  BRISK_CHECK(scalar_ok || at_least_1d(src) == want, "index_add: source ", src.str(), " must have shape ", want,
              " (the input ", x.str(), " with dim ", d, " of size index.numel() = ", index.numel(), ")");
  out[0] = {x.sizes(), x.dtype()};
}

void index_add_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = g0(c);
  if (!c.needs_grad(2)) return;
  Tensor rows = index_select(g0(c), c.attrs.dim, c.inputs[1]);
  const Shape& src_sizes = c.in_specs[2].sizes;
  gi[2] = rows.sizes() == src_sizes ? rows : reshape(rows, src_sizes);  // a 0-dim input's (1) source
}

const OpDef kIndexAdd{.infer = index_add_infer,
                      .backward = index_add_bw,
                      .save_inputs = mask(1),     // index
                      .diff_inputs = mask(0, 2),  // x, src
                      .autocast = P::Promote};

}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Attrs attrs;
  attrs.dim = wrap_dim(dim, x.dim(), "index_add");
  return call1(OpId::IndexAdd, {x, index, src}, attrs);
}

namespace {

// ---- gather: (x, index) -> out of index's sizes, x read at the indices along attrs.dim
void gather_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor &x = in[0], &index = in[1];
  check_index_dtype(index, "gather");
  const int d = wrap_dim(attrs.dim, x.dim(), "gather");
  check_index_fits(index, x, d, true, "gather", "input");
  out[0] = {index.sizes(), x.dtype()};
}

void gather_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  gi[0] = scatter_add(zeros_for_input(c, 0), c.attrs.dim, c.inputs[1], g0(c));
}

const OpDef kGather{.infer = gather_infer,
                    .backward = gather_bw,
                    .save_inputs = mask(1),   // index
                    .diff_inputs = mask(0)};  // x

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs attrs;
  attrs.dim = wrap_dim(dim, x.dim(), "gather");
  return call1(OpId::Gather, {x, index}, attrs);
}

namespace {

// ---- scatter_add: (x, index, src) -> x plus src added at the indices along attrs.dim
void scatter_add_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor &x = in[0], &index = in[1], &src = in[2];
  check_index_dtype(index, "scatter_add");
  BRISK_CHECK(x.dtype() == src.dtype(), "scatter_add: input ", x.str(), " and source ", src.str(),
              " must have the same dtype");
  const int d = wrap_dim(attrs.dim, x.dim(), "scatter_add");
  check_index_fits(index, x, d, true, "scatter_add", "input");
  check_index_fits(index, src, d, false, "scatter_add", "source");
  out[0] = {x.sizes(), x.dtype()};
}

// Zero-pads t at the end of each dim up to `sizes` (slice_backward is exactly that).
Tensor pad_to(Tensor t, const Shape& sizes) {
  for (int d = 0; d < sizes.size(); ++d) {
    if (t.sizes()[d] == sizes[d]) continue;
    Attrs a;
    a.dim = d;
    a.start = 0;
    a.end = t.sizes()[d];
    a.step = 1;
    a.shape = t.sizes();
    a.shape[d] = sizes[d];
    t = call1(OpId::SliceBackward, {t}, a);
  }
  return t;
}

// src may be larger than index: only its leading block was read, the rest gets zeros.
void scatter_add_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (c.needs_grad(0)) gi[0] = g0(c);
  if (c.needs_grad(2)) gi[2] = pad_to(gather(g0(c), c.attrs.dim, c.inputs[1]), c.in_specs[2].sizes);
}

const OpDef kScatterAdd{.infer = scatter_add_infer,
                        .backward = scatter_add_bw,
                        .save_inputs = mask(1),     // index
                        .diff_inputs = mask(0, 2),  // x, src
                        .autocast = P::Promote};

}  // namespace

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Attrs attrs;
  attrs.dim = wrap_dim(dim, x.dim(), "scatter_add");
  return call1(OpId::ScatterAdd, {x, index, src}, attrs);
}

// ---- composites: nonzero, where(cond), masked_select
Tensor nonzero(const Tensor& x) {
  BRISK_CHECK(x.defined(), "nonzero: undefined input");
  // Host-side: the count decides the output's size. Bool 0/1 read as double.
  const std::vector<double> v = cast(x.detach(), DType::F64).to_vector<double>();
  const int nd = x.dim();
  std::vector<int64_t> coords;
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t count = 0;
  for (size_t flat = 0; flat < v.size(); ++flat) {
    if (v[flat] != 0) {  // NaN is nonzero, as in PyTorch
      coords.insert(coords.end(), idx.begin(), idx.end());
      ++count;
    }
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < x.sizes()[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  Tensor out = from_data(coords.data(), {count, int64_t(nd)});
  return x.device().is_cpu() ? out : out.to(x.device());
}

std::vector<Tensor> where(const Tensor& cond) {
  Tensor nz = nonzero(cond);
  std::vector<Tensor> out;
  for (int64_t d = 0; d < nz.size(1); ++d) out.push_back(contiguous(select(nz, 1, d)));
  return out;
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  BRISK_CHECK(x.defined() && mask.defined(), "masked_select: undefined input");
  BRISK_CHECK(mask.dtype() == DType::Bool, "masked_select: the mask must be Bool, got ", mask.str());
  const Shape s = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  Tensor flat = reshape(expand(x, s), {-1});
  Tensor m = reshape(expand(mask, s), {-1});
  Tensor idx = reshape(nonzero(m), {-1});
  return index_select(flat, 0, idx);  // differentiable in x
}

namespace detail {

void define_index_ops() {
  define(OpId::Cat, kCat);
  define(OpId::IndexSelect, kIndexSelect);
  define(OpId::IndexAdd, kIndexAdd);
  define(OpId::Gather, kGather);
  define(OpId::ScatterAdd, kScatterAdd);
}

}  // namespace detail

}  // namespace brisk
