// interop/onnx_ops.cpp: the ONNX importer's op table. Each row maps an ONNX op type (with the
// schema versions it handles and the attributes it reads) to a function of a few lines over
// brisk's public ops (engine/functions.h, nn/functional.h), so an imported graph has autograd
// and runs on every device with no kernel of its own. An op brisk lacks is left out of the
// table (load_model() refuses it) rather than written here from scratch.
// Not here: parsing and validating the model (interop/onnx_import.cpp).
#include "interop/onnx_ops.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/functions.h"
#include "nn/functional.h"

namespace brisk::onnx::detail {

namespace F = brisk::nn::functional;
using Outs = std::vector<Tensor>;

std::string Node::describe() const {
  return brisk::detail::cat("node '", name, "' (", op_type, ", opset ", opset, ")");
}

const Tensor& OpContext::in(size_t i) const {
  BRISK_CHECK(has(i), "input ", i, " is missing");
  return inputs[i];
}

int64_t OpContext::i(const std::string& name, int64_t fallback) const {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.i;
}

double OpContext::f(const std::string& name, double fallback) const {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.f;
}

std::string OpContext::s(const std::string& name, const std::string& fallback) const {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.s;
}

std::vector<int64_t> OpContext::ints(const std::string& name, std::vector<int64_t> fallback) const {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.ints;
}

const Tensor& OpContext::t(const std::string& name) const {
  auto it = node.attributes.find(name);
  BRISK_CHECK(it != node.attributes.end() && it->second.t.defined(), "attribute '", name, "' is missing");
  return it->second.t;
}

std::vector<int64_t> OpContext::values(size_t i) const { return in(i).to_vector<int64_t>(); }

namespace {

int64_t wrap(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  BRISK_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), "axis ", axis, " out of range for rank ", rank);
  return a;
}

// ---- elementwise
Tensor same_dtype(const Tensor& y, DType dtype) { return y.dtype() == dtype ? y : cast(y, dtype); }

Tensor onnx_div(const Tensor& a, const Tensor& b) {
  if (is_floating(a.dtype())) return div(a, b);
  // ONNX's integer division truncates (as C), brisk's div is true division.
  return same_dtype(trunc(div(cast(a, DType::F64), cast(b, DType::F64))), a.dtype());
}

Tensor onnx_pow(const Tensor& a, const Tensor& b) {
  if (is_floating(a.dtype())) return same_dtype(pow(a, same_dtype(b, a.dtype())), a.dtype());
  return same_dtype(round(pow(cast(a, DType::F64), cast(b, DType::F64))), a.dtype());
}

Tensor onnx_mod(const OpContext& c) {
  const Tensor& a = c.in(0);
  Tensor x = cast(a, DType::F64);
  Tensor y = cast(c.in(1), DType::F64);
  // fmod = 1: the sign of the dividend (C's fmod); 0: the sign of the divisor (Python's %).
  Tensor q = c.i("fmod", 0) ? trunc(div(x, y)) : floor(div(x, y));
  return same_dtype(sub(x, mul(y, q)), a.dtype());
}

// Before opset 7, a binary op's second input broadcast to the first only with broadcast = 1,
// placed at `axis` when given (suffix-aligned, as numpy, otherwise).
Tensor legacy_broadcast(const OpContext& c) {
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  if (c.node.since_version >= 7 || !c.has_attr("axis") || b.dim() >= a.dim()) return b;
  Shape sizes = b.sizes();
  int64_t axis = wrap(c.i("axis", 0), a.dim());
  while (axis + sizes.size() < int64_t(a.dim())) sizes.push_back(1);
  return reshape(b, sizes);
}

Tensor logical_not(const Tensor& x) { return eq(x, zeros_like(x)); }

Tensor fold(const OpContext& c, Tensor (*f)(const Tensor&, const Tensor&)) {
  Tensor acc = c.in(0);
  for (size_t k = 1; k < c.inputs.size(); ++k) acc = f(acc, c.in(k));
  return acc;
}

Tensor add2(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor max2(const Tensor& a, const Tensor& b) { return maximum(a, b); }
Tensor min2(const Tensor& a, const Tensor& b) { return minimum(a, b); }

Tensor is_inf(const OpContext& c) {
  const Tensor& x = c.in(0);
  Tensor pos = eq(x, scalar_operand(std::numeric_limits<double>::infinity(), x));
  Tensor neg_ = eq(x, scalar_operand(-std::numeric_limits<double>::infinity(), x));
  bool p = c.i("detect_positive", 1) != 0;
  bool n = c.i("detect_negative", 1) != 0;
  if (p && n) return isinf(x);
  if (p) return pos;
  if (n) return neg_;
  return zeros(x.sizes(), DType::Bool, x.device());
}

// ---- reductions
// The reduced dims: the `axes` attribute or (ReduceSum from opset 13) the second input; none
// means all dims unless noop_with_empty_axes.
std::vector<int64_t> reduce_axes(const OpContext& c, bool& noop) {
  std::vector<int64_t> axes = c.has_attr("axes") ? c.ints("axes") : (c.has(1) ? c.values(1) : std::vector<int64_t>{});
  noop = axes.empty() && c.i("noop_with_empty_axes", 0) != 0;
  if (axes.empty()) {
    for (int64_t d = 0; d < c.in(0).dim(); ++d) axes.push_back(d);
  }
  for (auto& a : axes) a = wrap(a, c.in(0).dim());
  std::sort(axes.begin(), axes.end());
  return axes;
}

using ReduceFn = Tensor (*)(const Tensor& x, const Shape& dims, bool keepdim);

Outs reduce(const OpContext& c, ReduceFn f, bool keep_dtype = true) {
  bool noop = false;
  std::vector<int64_t> axes = reduce_axes(c, noop);
  const Tensor& x = c.in(0);
  if (noop) return {x};
  bool keep = c.i("keepdims", 1) != 0;
  Tensor y = x.dim() == 0 ? x : f(x, Shape(axes), keep);
  return {keep_dtype ? same_dtype(y, x.dtype()) : y};
}

Tensor r_sum(const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }
Tensor r_mean(const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); }
Tensor r_max(const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); }
Tensor r_min(const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); }
Tensor r_l1(const Tensor& x, const Shape& d, bool k) { return sum(abs(x), d, k); }
Tensor r_l2(const Tensor& x, const Shape& d, bool k) { return sqrt(sum(mul(x, x), d, k)); }
Tensor r_sumsq(const Tensor& x, const Shape& d, bool k) { return sum(mul(x, x), d, k); }
Tensor r_logsum(const Tensor& x, const Shape& d, bool k) { return log(sum(x, d, k)); }
Tensor r_logsumexp(const Tensor& x, const Shape& d, bool k) { return logsumexp(x, d, k); }
Tensor r_prod(const Tensor& x, const Shape& d, bool k) {
  Tensor y = x;
  for (int j = d.size() - 1; j >= 0; --j) y = prod(y, d[j], true);
  if (!k) {
    for (int j = d.size() - 1; j >= 0; --j) y = squeeze(y, d[j]);
  }
  return y;
}

Outs arg_reduce(const OpContext& c, bool is_max) {
  Tensor x = c.in(0);
  int64_t axis = wrap(c.i("axis", 0), x.dim());
  bool keep = c.i("keepdims", 1) != 0;
  bool last = c.i("select_last_index", 0) != 0;
  if (last) x = flip(x, {axis});
  Tensor idx = is_max ? argmax(x, axis, keep) : argmin(x, axis, keep);
  // The first extreme of the flipped tensor is the last one of the original.
  if (last) idx = sub(full_like(idx, double(x.size(axis) - 1)), idx);
  return {idx};
}

// ---- softmax family: before opset 13 the input is seen as 2-D (dims before axis, after).
Tensor along_axis(const OpContext& c, Tensor (*f)(const Tensor&, int64_t)) {
  const Tensor& x = c.in(0);
  if (c.node.since_version >= 13) return f(x, wrap(c.i("axis", -1), x.dim()));
  int64_t axis = wrap(c.i("axis", 1), x.dim());
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.size(d);
  return reshape(f(reshape(x, {rows, -1}), 1), x.sizes());
}

Tensor softmax_(const Tensor& x, int64_t d) { return softmax(x, d); }
Tensor log_softmax_(const Tensor& x, int64_t d) { return log_softmax(x, d); }
Tensor hardmax_(const Tensor& x, int64_t d) {
  Shape sizes = Shape::filled(x.dim(), 1);
  sizes[d] = x.size(d);
  Tensor positions = reshape(arange(x.size(d), DType::I64, x.device()), sizes);
  return cast(eq(positions, argmax(x, d, true)), x.dtype());
}

// ---- shapes
Outs onnx_reshape(const OpContext& c) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> shape = c.node.since_version < 5 ? c.ints("shape") : c.values(1);
  bool allow_zero = c.i("allowzero", 0) != 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allow_zero) shape[d] = x.size(d);  // 0 copies the input's size
  }
  return {reshape(x, Shape(shape))};
}

Outs onnx_flatten(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = c.i("axis", 1);
  if (axis < 0) axis += x.dim();
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.size(d);
  int64_t cols = 1;
  for (int64_t d = axis; d < x.dim(); ++d) cols *= x.size(d);
  return {reshape(x, {rows, cols})};
}

Outs onnx_transpose(const OpContext& c) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> perm = c.ints("perm");
  if (perm.empty()) {
    for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
  }
  return {permute(x, Shape(perm))};
}

std::vector<int64_t> axes_of(const OpContext& c) {
  return c.has_attr("axes") ? c.ints("axes") : (c.has(1) ? c.values(1) : std::vector<int64_t>{});
}

Outs onnx_squeeze(const OpContext& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = axes_of(c);
  if (axes.empty()) return {squeeze(x)};
  for (auto& a : axes) a = wrap(a, x.dim());
  std::sort(axes.rbegin(), axes.rend());
  for (int64_t a : axes) x = squeeze(x, a);
  return {x};
}

Outs onnx_unsqueeze(const OpContext& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = axes_of(c);
  int64_t rank = x.dim() + int64_t(axes.size());
  for (auto& a : axes) a = wrap(a, rank);
  std::sort(axes.begin(), axes.end());
  for (int64_t a : axes) x = unsqueeze(x, a);
  return {x};
}

Outs onnx_concat(const OpContext& c) {
  std::vector<Tensor> parts(c.inputs.begin(), c.inputs.end());
  return {cat(parts, wrap(c.i("axis", c.node.since_version < 4 ? 1 : 0), c.in(0).dim()))};
}

Outs onnx_split(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = wrap(c.i("axis", 0), x.dim());
  std::vector<int64_t> sizes =
      c.has_attr("split") ? c.ints("split") : (c.has(1) ? c.values(1) : std::vector<int64_t>{});
  if (sizes.empty()) {
    int64_t n = int64_t(c.num_outputs());
    BRISK_CHECK(x.size(axis) % n == 0, "size ", x.size(axis), " does not split into ", n, " equal parts");
    sizes.assign(n, x.size(axis) / n);
  }
  return split(x, sizes, axis);
}

Outs onnx_slice(const OpContext& c) {
  Tensor x = c.in(0);
  bool attrs = c.node.since_version < 10;
  std::vector<int64_t> starts = attrs ? c.ints("starts") : c.values(1);
  std::vector<int64_t> ends = attrs ? c.ints("ends") : c.values(2);
  std::vector<int64_t> axes = attrs ? c.ints("axes") : (c.has(3) ? c.values(3) : std::vector<int64_t>{});
  std::vector<int64_t> steps = (!attrs && c.has(4)) ? c.values(4) : std::vector<int64_t>(starts.size(), 1);
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t axis = wrap(axes[k], x.dim());
    int64_t n = x.size(axis);
    int64_t step = steps[k];
    BRISK_CHECK(step != 0, "slice step 0");
    int64_t start = starts[k] < 0 ? starts[k] + n : starts[k];
    int64_t end = ends[k] < 0 ? ends[k] + n : ends[k];
    // numpy's clamping: [0, n] going forward, [-1, n - 1] going backward.
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, n);
      end = std::clamp<int64_t>(end, 0, n);
      x = slice(x, axis, start, std::max(start, end), step);
    } else {
      start = std::clamp<int64_t>(start, -1, n - 1);
      end = std::clamp<int64_t>(end, -1, n - 1);
      std::vector<double> idx;
      for (int64_t j = start; j > end; j += step) idx.push_back(double(j));
      x = index_select(x, axis, from_vector(idx, {int64_t(idx.size())}, DType::I64, x.device()));
    }
  }
  return {x};
}

// Negative indices count from the end (Gather, GatherElements, OneHot).
Tensor wrap_indices(const Tensor& idx, int64_t n) {
  Tensor i = cast(idx, DType::I64);
  return where(lt(i, zeros_like(i)), add(i, full_like(i, double(n))), i);
}

Outs onnx_gather(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = wrap(c.i("axis", 0), x.dim());
  Tensor idx = wrap_indices(c.in(1), x.size(axis));
  Tensor picked = index_select(x, axis, reshape(idx, {idx.numel()}));
  Shape sizes;
  for (int64_t d = 0; d < axis; ++d) sizes.push_back(x.size(d));
  for (int64_t s : idx.sizes()) sizes.push_back(s);
  for (int64_t d = axis + 1; d < x.dim(); ++d) sizes.push_back(x.size(d));
  return {reshape(picked, sizes)};
}

Outs onnx_gather_elements(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = wrap(c.i("axis", 0), x.dim());
  return {gather(x, axis, wrap_indices(c.in(1), x.size(axis)))};
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (int k = 0; k < n; ++k) {
    int64_t x = k < n - a.size() ? 1 : a[k - (n - a.size())];
    int64_t y = k < n - b.size() ? 1 : b[k - (n - b.size())];
    BRISK_CHECK(x == y || x == 1 || y == 1, "shapes ", a, " and ", b, " do not broadcast");
    out[k] = x == 1 ? y : x;
  }
  return out;
}

Outs onnx_expand(const OpContext& c) {
  const Tensor& x = c.in(0);
  return {expand(x, broadcast_shapes(x.sizes(), Shape(c.values(1))))};
}

Outs onnx_shape(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t r = x.dim();
  int64_t start = std::clamp<int64_t>(c.i("start", 0) < 0 ? c.i("start", 0) + r : c.i("start", 0), 0, r);
  int64_t end = std::clamp<int64_t>(c.i("end", r) < 0 ? c.i("end", r) + r : c.i("end", r), 0, r);
  std::vector<double> sizes;
  for (int64_t d = start; d < end; ++d) sizes.push_back(double(x.size(d)));
  return {from_vector(sizes, {int64_t(sizes.size())}, DType::I64, x.device())};
}

Outs onnx_constant_of_shape(const OpContext& c) {
  Shape shape(c.values(0));
  if (!c.has_attr("value")) return {zeros(shape, DType::F32, c.device)};
  const Tensor& v = c.t("value");
  return {full(shape, v.item<double>(), v.dtype(), c.device)};
}

Outs onnx_range(const OpContext& c) {
  const Tensor& start = c.in(0);
  return {arange(start.item<double>(), c.in(1).item<double>(), c.in(2).item<double>(), start.dtype(), start.device())};
}

Outs onnx_pad(const OpContext& c) {
  const Tensor& x = c.in(0);
  bool attrs = c.node.since_version < 11;
  std::vector<int64_t> pads = attrs ? c.ints("pads") : c.values(1);
  double value = attrs ? c.f("value", 0.0) : (c.has(2) ? c.in(2).item<double>() : 0.0);
  std::string mode = c.s("mode", "constant");
  if (mode == "edge") mode = "replicate";
  int64_t r = x.dim();
  BRISK_CHECK(int64_t(pads.size()) == 2 * r, "pads has ", pads.size(), " values for rank ", r);
  // ONNX lists all begins then all ends, first dim first; brisk's pad wants pairs, last dim first.
  std::vector<int64_t> pairs;
  for (int64_t d = r - 1; d >= 0; --d) {
    pairs.push_back(pads[d]);
    pairs.push_back(pads[d + r]);
  }
  if (mode != "constant" && !is_floating(x.dtype())) {
    return {cast(F::pad(cast(x, DType::F64), pairs, mode), x.dtype())};  // brisk pads integers in constant mode only
  }
  return {F::pad(x, pairs, mode, mode == "constant" ? value : 0.0)};
}

Outs onnx_cumsum(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = wrap(c.values(1).at(0), x.dim());
  bool reverse = c.i("reverse", 0) != 0;
  Tensor v = reverse ? flip(x, {axis}) : x;
  Tensor y = cumsum(v, axis);
  if (c.i("exclusive", 0) != 0) y = sub(y, same_dtype(v, y.dtype()));
  if (reverse) y = flip(y, {axis});
  return {same_dtype(y, x.dtype())};
}

Outs onnx_depth_to_space(const OpContext& c) {
  const Tensor& x = c.in(0);  // (B, C, H, W)
  int64_t bs = c.i("blocksize", 1);
  int64_t b = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  Tensor y = c.s("mode", "DCR") == "DCR" ? permute(reshape(x, {b, bs, bs, ch / (bs * bs), h, w}), {0, 3, 4, 1, 5, 2})
                                         : permute(reshape(x, {b, ch / (bs * bs), bs, bs, h, w}), {0, 1, 4, 2, 5, 3});
  return {reshape(y, {b, ch / (bs * bs), h * bs, w * bs})};
}

Outs onnx_space_to_depth(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t bs = c.i("blocksize", 1);
  int64_t b = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  Tensor y = permute(reshape(x, {b, ch, h / bs, bs, w / bs, bs}), {0, 3, 5, 1, 2, 4});
  return {reshape(y, {b, ch * bs * bs, h / bs, w / bs})};
}

Outs onnx_topk(const OpContext& c) {
  const Tensor& x = c.in(0);
  SortResult r = topk(x, c.values(1).at(0), wrap(c.i("axis", -1), x.dim()), c.i("largest", 1) != 0, true);
  return {r.values, r.indices};
}

Outs onnx_one_hot(const OpContext& c) {
  const Tensor& idx = c.in(0);
  int64_t depth = int64_t(c.in(1).item<double>());
  const Tensor& values = c.in(2);
  int64_t axis = wrap(c.i("axis", -1), idx.dim() + 1);
  Shape sizes = Shape::filled(idx.dim() + 1, 1);
  sizes[axis] = depth;
  Tensor positions = reshape(arange(depth, DType::I64, idx.device()), sizes);
  Tensor hot = eq(unsqueeze(wrap_indices(idx, depth), axis), positions);
  return {where(hot, select(values, 0, 1), select(values, 0, 0))};
}

Outs onnx_eye_like(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t n = x.size(0), m = x.size(1);
  Tensor cols = unsqueeze(arange(m, DType::I64, x.device()), 0);
  Tensor rows = unsqueeze(arange(n, DType::I64, x.device()), 1);
  Tensor diag = eq(sub(cols, rows), full({1, 1}, double(c.i("k", 0)), DType::I64, x.device()));
  return {cast(diag, c.has_attr("dtype") ? dtype_from_onnx(c.i("dtype", 0), c.node.describe()) : x.dtype())};
}

Outs onnx_compress(const OpContext& c) {
  Tensor x = c.in(0);
  Tensor picks = reshape(nonzero(c.in(1)), {-1});
  if (!c.has_attr("axis")) return {index_select(reshape(x, {-1}), 0, picks)};
  return {index_select(x, wrap(c.i("axis", 0), x.dim()), picks)};
}

// ---- load-time checks of attribute values (OpEntry::check): what a row refuses is refused
// before anything runs.
std::string string_attr(const Node& n, const std::string& name, const std::string& fallback) {
  auto it = n.attributes.find(name);
  return it == n.attributes.end() ? fallback : it->second.s;
}

int64_t int_attr(const Node& n, const std::string& name, int64_t fallback) {
  auto it = n.attributes.find(name);
  return it == n.attributes.end() ? fallback : it->second.i;
}

void refuse_unless(bool ok, const std::string& what) {
  if (!ok) throw UnsupportedError(what + " is not supported");
}

void check_batch_norm(const Node& n) {
  refuse_unless(int_attr(n, "training_mode", 0) == 0, "training_mode 1 (batch statistics)");
  refuse_unless(int_attr(n, "spatial", 1) == 1, "spatial 0");
  refuse_unless(n.outputs.size() == 1, "the training outputs (running mean and variance)");
}

void check_resize(const Node& n) {
  std::string mode = string_attr(n, "mode", "nearest");
  refuse_unless(mode == "nearest" || mode == "linear" || (mode == "cubic" && n.op_type == "Resize"),
                "mode '" + mode + "'");
}

void check_scatter(const Node& n) {
  std::string reduction = string_attr(n, "reduction", "none");
  refuse_unless(reduction == "none" || reduction == "add", "reduction '" + reduction + "'");
}

void check_gather_nd(const Node& n) { refuse_unless(int_attr(n, "batch_dims", 0) == 0, "batch_dims > 0"); }

void check_einsum(const Node& n) {
  refuse_unless(string_attr(n, "equation", "").find("...") == std::string::npos,
                "an ellipsis in an einsum equation (brisk's einsum has none)");
}

// ---- recurrent layers (RNN, GRU, LSTM) unrolled over time with matmul and the gate
// functions: autograd runs through the loop (backpropagation through time for free).
enum class Cell { Rnn, Gru, Lstm };

void check_recurrent(const Node& n) {
  refuse_unless(n.attributes.count("clip") == 0, "clip");
  refuse_unless(int_attr(n, "input_forget", 0) == 0, "input_forget 1");
  auto it = n.attributes.find("activations");
  if (it == n.attributes.end()) return;
  std::vector<std::string> defaults = n.op_type == "RNN"   ? std::vector<std::string>{"Tanh"}
                                      : n.op_type == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                           : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const std::vector<std::string>& got = it->second.strings;
  for (size_t k = 0; k < got.size(); ++k) {
    std::string want = defaults[k % defaults.size()];
    refuse_unless(
        got[k].size() == want.size() && std::equal(got[k].begin(), got[k].end(), want.begin(),
                                                   [](char a, char b) { return std::tolower(a) == std::tolower(b); }),
        "activation '" + got[k] + "' (only the defaults)");
  }
}

Outs recurrent(const OpContext& c, Cell cell) {
  bool batch_first = c.i("layout", 0) != 0;
  Tensor x = batch_first ? transpose(c.in(0), 0, 1) : c.in(0);  // (T, N, I)
  int64_t steps = x.size(0), batch = x.size(1);
  int64_t gates = cell == Cell::Rnn ? 1 : (cell == Cell::Gru ? 3 : 4);
  int64_t hidden = c.i("hidden_size", c.in(2).size(2));
  std::string direction = c.s("direction", "forward");
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (c.has(4)) {
    for (int64_t len : c.values(4)) {
      if (len != steps) throw UnsupportedError("sequence_lens shorter than the sequence is not supported");
    }
  }
  std::vector<Tensor> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    Tensor w = select(c.in(1), 0, d);  // (G * H, I)
    Tensor r = select(c.in(2), 0, d);  // (G * H, H)
    Tensor wb, rb;
    if (c.has(3)) {
      Tensor b = select(c.in(3), 0, d);  // (2 * G * H)
      wb = slice(b, 0, 0, gates * hidden);
      rb = slice(b, 0, gates * hidden, 2 * gates * hidden);
    } else {
      wb = rb = zeros({gates * hidden}, x.dtype(), x.device());
    }
    Tensor h = c.has(5) ? select(c.in(5), 0, d) : zeros({batch, hidden}, x.dtype(), x.device());
    Tensor cstate = c.has(6) ? select(c.in(6), 0, d) : zeros({batch, hidden}, x.dtype(), x.device());
    Tensor peep = c.has(7) ? select(c.in(7), 0, d) : Tensor{};  // (3 * H): i, o, f
    Tensor xw = add(matmul(x, transpose(w, 0, 1)), wb);         // (T, N, G * H), all steps at once
    std::vector<Tensor> out(steps);
    for (int64_t step = 0; step < steps; ++step) {
      int64_t t = reverse ? steps - 1 - step : step;
      Tensor g = select(xw, 0, t);
      if (cell == Cell::Rnn) {
        h = brisk::tanh(add(g, add(matmul(h, transpose(r, 0, 1)), rb)));
      } else if (cell == Cell::Gru) {
        std::vector<Tensor> gx = chunk(g, 3, 1), rw = chunk(r, 3, 0), rbs = chunk(rb, 3, 0);
        Tensor z = sigmoid(add(gx[0], add(matmul(h, transpose(rw[0], 0, 1)), rbs[0])));
        Tensor reset = sigmoid(add(gx[1], add(matmul(h, transpose(rw[1], 0, 1)), rbs[1])));
        Tensor candidate = c.i("linear_before_reset", 0) != 0
                               ? brisk::tanh(add(gx[2], mul(reset, add(matmul(h, transpose(rw[2], 0, 1)), rbs[2]))))
                               : brisk::tanh(add(gx[2], add(matmul(mul(reset, h), transpose(rw[2], 0, 1)), rbs[2])));
        h = add(mul(sub(ones_like(z), z), candidate), mul(z, h));
      } else {
        std::vector<Tensor> gg = chunk(add(g, add(matmul(h, transpose(r, 0, 1)), rb)), 4, 1);  // i, o, f, c
        std::vector<Tensor> p = peep.defined() ? chunk(peep, 3, 0) : std::vector<Tensor>{};
        Tensor i = sigmoid(p.empty() ? gg[0] : add(gg[0], mul(p[0], cstate)));
        Tensor f = sigmoid(p.empty() ? gg[2] : add(gg[2], mul(p[2], cstate)));
        cstate = add(mul(f, cstate), mul(i, brisk::tanh(gg[3])));
        Tensor o = sigmoid(p.empty() ? gg[1] : add(gg[1], mul(p[1], cstate)));
        h = mul(o, brisk::tanh(cstate));
      }
      out[t] = h;
    }
    ys.push_back(stack(out, 0));  // (T, N, H)
    hs.push_back(h);
    cs.push_back(cstate);
  }
  Tensor y = stack(ys, 1);    // (T, dirs, N, H)
  Tensor y_h = stack(hs, 0);  // (dirs, N, H)
  Tensor y_c = stack(cs, 0);
  if (batch_first) {
    y = permute(y, {2, 0, 1, 3});  // (N, T, dirs, H)
    y_h = transpose(y_h, 0, 1);
    y_c = transpose(y_c, 0, 1);
  }
  return {y, y_h, y_c};
}

// ---- Resize and Upsample: one axis at a time (linear, cubic and nearest are separable), each
// as index_select of taps times weights computed on the host exactly as ONNX's reference
// (onnx/backend/test/case/node/resize.py), so gradients reach the input.
struct ResizeSpec {
  std::string mode = "nearest";
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

std::vector<double> cubic_coeffs(double r, double a) {
  double s = 1 - r;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * s - (a + 3)) * s * s + 1, ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a};
}

Tensor resize_axis(const Tensor& x, int64_t axis, int64_t out, double scale, const ResizeSpec& spec, double roi0,
                   double roi1) {
  int64_t in = x.size(axis);
  double out_width = scale * double(in);  // the reference's (fractional) output width
  int taps = spec.mode == "nearest" ? 1 : (spec.mode == "linear" ? 2 : 4);
  std::vector<std::vector<double>> index(taps, std::vector<double>(out)), weight(taps, std::vector<double>(out));
  std::vector<double> outside(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    double xo = 0;
    const std::string& m = spec.coordinates;
    if (m == "align_corners") {
      xo = out_width == 1 ? 0.0 : double(o) * double(in - 1) / (out_width - 1);
    } else if (m == "asymmetric") {
      xo = double(o) / scale;
    } else if (m == "tf_crop_and_resize") {
      xo = out_width == 1 ? (roi1 - roi0) * double(in - 1) / 2
                          : double(o) * (roi1 - roi0) * double(in - 1) / (out_width - 1);
      xo += roi0 * double(in - 1);
      outside[o] = (xo < 0 || xo > double(in - 1)) ? 1.0 : 0.0;
    } else if (m == "tf_half_pixel_for_nn") {
      xo = (double(o) + 0.5) / scale;
    } else if (m == "pytorch_half_pixel") {
      xo = out_width == 1 ? -0.5 : (double(o) + 0.5) / scale - 0.5;
    } else {
      xo = (double(o) + 0.5) / scale - 0.5;
    }
    // The reference's neighbours: an integral coordinate is the second of its two taps.
    double base = std::floor(xo);
    double r = xo - base;
    if (r == 0) {
      base -= 1;
      r = 1;
    }
    std::vector<double> coeffs;
    std::vector<double> at;
    if (taps == 1) {
      bool up = r == 1 || (spec.nearest == "round_prefer_floor" && r > 0.5) ||
                (spec.nearest == "round_prefer_ceil" && r >= 0.5) || spec.nearest == "ceil";
      at = {up ? base + 1 : base};
      coeffs = {1.0};
    } else if (taps == 2) {
      at = {base, base + 1};
      coeffs = {1 - r, r};
    } else {
      at = {base - 1, base, base + 1, base + 2};
      coeffs = cubic_coeffs(r, spec.cubic_a);
    }
    if (spec.exclude_outside) {
      double total = 0;
      for (int t = 0; t < taps; ++t) {
        if (at[t] < 0 || at[t] > double(in - 1)) coeffs[t] = 0;
        total += coeffs[t];
      }
      for (double& cf : coeffs) cf /= total;
    }
    for (int t = 0; t < taps; ++t) {
      index[t][o] = std::clamp(at[t], 0.0, double(in - 1));  // edge padding
      weight[t][o] = coeffs[t];
    }
  }
  Shape along = Shape::filled(x.dim(), 1);
  along[axis] = out;
  Tensor y;
  for (int t = 0; t < taps; ++t) {
    Tensor picked = index_select(x, axis, from_vector(index[t], {out}, DType::I64, x.device()));
    if (taps > 1) picked = mul(picked, from_vector(weight[t], along, x.dtype(), x.device()));
    y = y.defined() ? add(y, picked) : picked;
  }
  if (spec.coordinates == "tf_crop_and_resize") {
    Tensor mask = from_vector(outside, along, DType::Bool, x.device());
    y = where(mask, full({}, spec.extrapolation, y.dtype(), y.device()), y);
  }
  return y;
}

Outs resize_with(const OpContext& c, const ResizeSpec& spec, std::vector<double> scales, std::vector<int64_t> sizes,
                 std::vector<double> roi) {
  Tensor y = c.in(0);
  int64_t r = y.dim();
  BRISK_CHECK(sizes.empty() || int64_t(sizes.size()) == r, "sizes has ", sizes.size(), " values for rank ", r);
  BRISK_CHECK(!sizes.empty() || int64_t(scales.size()) == r, "scales has ", scales.size(), " values for rank ", r);
  for (int64_t d = 0; d < r; ++d) {
    int64_t in = y.size(d);
    int64_t out = sizes.empty() ? int64_t(std::floor(double(in) * scales[d])) : sizes[d];
    double scale = sizes.empty() ? scales[d] : double(out) / double(in);
    double roi0 = roi.size() == size_t(2 * r) ? roi[d] : 0.0;
    double roi1 = roi.size() == size_t(2 * r) ? roi[d + r] : 1.0;
    if (out == in && scale == 1.0 && spec.coordinates != "tf_crop_and_resize") continue;
    y = resize_axis(y, d, out, scale, spec, roi0, roi1);
  }
  return {y};
}

std::vector<double> as_doubles(const Tensor& t) { return t.to_vector<double>(); }

Outs onnx_resize(const OpContext& c) {
  ResizeSpec spec;
  spec.mode = c.s("mode", "nearest");
  spec.coordinates = c.s("coordinate_transformation_mode", "half_pixel");
  spec.nearest = c.s("nearest_mode", "round_prefer_floor");
  spec.cubic_a = c.f("cubic_coeff_a", -0.75);
  spec.exclude_outside = c.i("exclude_outside", 0) != 0;
  spec.extrapolation = c.f("extrapolation_value", 0.0);
  std::vector<double> roi = c.has(1) ? as_doubles(c.in(1)) : std::vector<double>{};
  std::vector<double> scales = c.has(2) ? as_doubles(c.in(2)) : std::vector<double>{};
  std::vector<int64_t> sizes = c.has(3) ? c.values(3) : std::vector<int64_t>{};
  return resize_with(c, spec, scales, sizes, roi);
}

// Upsample (deprecated by Resize): asymmetric coordinates; nearest rounds down.
Outs onnx_upsample(const OpContext& c) {
  ResizeSpec spec;
  spec.mode = c.s("mode", "nearest");
  spec.coordinates = "asymmetric";
  spec.nearest = "floor";
  std::vector<double> scales = c.has_attr("scales") ? c.node.attributes.at("scales").floats : as_doubles(c.in(1));
  return resize_with(c, spec, scales, {}, {});
}

// ---- scatter, gather by tuples, local response normalization
Outs onnx_scatter_elements(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = wrap(c.i("axis", 0), x.dim());
  Tensor idx = wrap_indices(c.in(1), x.size(axis));
  const Tensor& updates = c.in(2);
  std::string reduction = c.s("reduction", "none");
  if (reduction == "add") return {scatter_add(x, axis, idx, updates)};
  // Replace: clear the written positions, then add the updates there (ONNX leaves duplicate
  // indices undefined).
  Tensor written = gt(scatter_add(zeros_like(x), axis, idx, ones_like(updates)), zeros_like(x));
  return {scatter_add(where(written, zeros_like(x), x), axis, idx, updates)};
}

// The flat row index of each index tuple (..., k) into x's first k dims.
Tensor flat_rows(const Tensor& x, const Tensor& idx) {
  int64_t k = idx.size(idx.dim() - 1);
  Tensor linear =
      zeros(Shape(std::vector<int64_t>(idx.sizes().begin(), idx.sizes().end() - 1)), DType::I64, x.device());
  int64_t stride = 1;
  for (int64_t d = k - 1; d >= 0; --d) {
    Tensor part = wrap_indices(select(idx, idx.dim() - 1, d), x.size(d));
    linear = add(linear, mul(part, full({}, double(stride), DType::I64, x.device())));
    stride *= x.size(d);
  }
  return reshape(linear, {-1});
}

Outs onnx_gather_nd(const OpContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& idx = c.in(1);  // (..., k): tuples into x's first k dims
  int64_t k = idx.size(idx.dim() - 1);
  Shape flat = {-1};
  for (int64_t d = k; d < x.dim(); ++d) flat.push_back(x.size(d));
  Tensor picked = index_select(reshape(x, flat), 0, flat_rows(x, idx));
  Shape sizes(std::vector<int64_t>(idx.sizes().begin(), idx.sizes().end() - 1));
  for (int64_t d = k; d < x.dim(); ++d) sizes.push_back(x.size(d));
  return {reshape(picked, sizes)};
}

Outs onnx_lrn(const OpContext& c) {
  const Tensor& x = c.in(0);  // (B, C, ...)
  int64_t size = c.i("size", 1);
  int64_t channels = x.size(1);
  // The window over channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2).
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<int64_t> pads(2 * (x.dim() - 1), 0);
  pads[pads.size() - 2] = before;
  pads[pads.size() - 1] = after;
  Tensor sq = F::pad(mul(x, x), pads);
  Tensor window;
  for (int64_t j = 0; j < size; ++j) {
    Tensor part = slice(sq, 1, j, j + channels);
    window = window.defined() ? add(window, part) : part;
  }
  double alpha = c.f("alpha", 1e-4), beta = c.f("beta", 0.75), bias = c.f("bias", 1.0);
  Tensor denom = pow(add(mul(window, scalar_operand(alpha / double(size), x)), scalar_operand(bias, x)), beta);
  return {div(x, denom)};
}

// ---- quantization: integer tensors with a scale and a zero point, computed in F32 (brisk's
// int8 kernels are for its own quantized layers, not for these semantics).
// A per-axis (1-D) scale or zero point shaped to broadcast along `axis` of a rank-r tensor.
Tensor along(const Tensor& t, int64_t axis, int64_t r) {
  if (t.dim() != 1 || t.numel() == 1 || r <= 1) return t;
  Shape sizes = Shape::filled(r, 1);
  sizes[wrap(axis, r)] = t.size(0);
  return reshape(t, sizes);
}

Tensor saturate(const Tensor& y, DType dtype) {
  double lo = dtype == DType::U8 ? 0 : (dtype == DType::I8 ? -128 : -2147483648.0);
  double hi = dtype == DType::U8 ? 255 : (dtype == DType::I8 ? 127 : 2147483647.0);
  return cast(clamp(y, lo, hi), dtype);
}

Outs onnx_quantize(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = c.i("axis", 1);
  Tensor scale = along(cast(c.in(1), DType::F32), axis, x.dim());
  DType out = c.has(2) ? c.in(2).dtype() : DType::U8;
  Tensor y = round(div(cast(x, DType::F32), scale));  // half to even, as ONNX
  if (c.has(2)) y = add(y, along(cast(c.in(2), DType::F32), axis, x.dim()));
  return {saturate(y, out)};
}

Outs onnx_dequantize(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = c.i("axis", 1);
  Tensor y = cast(x, DType::F32);
  if (c.has(2)) y = sub(y, along(cast(c.in(2), DType::F32), axis, x.dim()));
  return {mul(y, along(cast(c.in(1), DType::F32), axis, x.dim()))};
}

Outs onnx_dynamic_quantize(const OpContext& c) {
  Tensor x = cast(c.in(0), DType::F32);
  Tensor zero = zeros({}, DType::F32, x.device());
  Tensor lo = minimum(amin(x), zero);
  Tensor hi = maximum(amax(x), zero);
  Tensor scale = div(sub(hi, lo), scalar_operand(255.0, x));
  Tensor zp = saturate(round(clamp(neg(div(lo, scale)), 0, 255)), DType::U8);
  Tensor y = saturate(add(round(div(x, scale)), cast(zp, DType::F32)), DType::U8);
  return {y, scale, zp};
}

// x - zero point in F32; a 1-D zero point of a matrix is per row (dim 0).
Tensor centered(const OpContext& c, size_t value, size_t zero_point, int64_t zp_axis) {
  Tensor v = cast(c.in(value), DType::F32);
  if (!c.has(zero_point)) return v;
  return sub(v, along(cast(c.in(zero_point), DType::F32), zp_axis, v.dim()));
}

Outs onnx_matmul_integer(const OpContext& c) {
  Tensor a = centered(c, 0, 2, c.in(0).dim() - 2);
  Tensor b = centered(c, 1, 3, c.in(1).dim() - 1);
  return {cast(round(matmul(a, b)), DType::I32)};
}

Outs onnx_conv(const OpContext& c);

Outs onnx_conv_integer(const OpContext& c) {
  OpContext f{c.node, {centered(c, 0, 2, 1), centered(c, 1, 3, 0)}, c.device};
  return {cast(round(onnx_conv(f)[0]), DType::I32)};
}

Tensor dequantized(const OpContext& c, size_t value, size_t scale, size_t zero_point, int64_t axis) {
  Tensor v = sub(cast(c.in(value), DType::F32), along(cast(c.in(zero_point), DType::F32), axis, c.in(value).dim()));
  return mul(v, along(cast(c.in(scale), DType::F32), axis, c.in(value).dim()));
}

Tensor requantized(const Tensor& y, const OpContext& c, size_t scale, size_t zero_point) {
  return saturate(add(round(div(y, cast(c.in(scale), DType::F32))), cast(c.in(zero_point), DType::F32)),
                  c.in(zero_point).dtype());
}

Outs onnx_qlinear_matmul(const OpContext& c) {
  Tensor y = matmul(dequantized(c, 0, 1, 2, c.in(0).dim() - 2), dequantized(c, 3, 4, 5, c.in(3).dim() - 1));
  return {requantized(y, c, 6, 7)};
}

Outs onnx_qlinear_conv(const OpContext& c) {
  Tensor x = dequantized(c, 0, 1, 2, 1);
  Tensor w = dequantized(c, 3, 4, 5, 0);
  OpContext f{c.node, {x, w}, c.device};
  if (c.has(8)) {
    // The int32 bias is in units of x_scale * w_scale.
    Tensor s = mul(cast(c.in(1), DType::F32), cast(c.in(4), DType::F32));
    f.inputs.push_back(mul(cast(c.in(8), DType::F32), s));
  }
  return {requantized(onnx_conv(f)[0], c, 6, 7)};
}

// ---- signal windows (periodic: the period is size, else size - 1)
Outs window_fn(const OpContext& c, const std::vector<double>& a) {
  int64_t size = c.values(0).at(0);
  double period = c.i("periodic", 1) != 0 ? double(size) : double(size - 1);
  std::vector<double> w(size);
  for (int64_t n = 0; n < size; ++n) {
    double sum = 0;
    for (size_t k = 0; k < a.size(); ++k) sum += a[k] * std::cos(2 * M_PI * double(k) * double(n) / period);
    w[n] = sum;
  }
  return {from_vector(w, {size}, dtype_from_onnx(c.i("output_datatype", 1), c.node.describe()), c.in(0).device())};
}

// ---- scatter by tuples, unpooling, reversing sequences
Outs onnx_scatter_nd(const OpContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& idx = c.in(1);
  int64_t k = idx.size(idx.dim() - 1);
  Shape flat = {-1};
  for (int64_t d = k; d < x.dim(); ++d) flat.push_back(x.size(d));
  Tensor rows = flat_rows(x, idx);
  Tensor xs = reshape(x, flat);
  Shape update_sizes = flat;
  update_sizes[0] = rows.numel();
  Tensor updates = reshape(c.in(2), update_sizes);
  if (c.s("reduction", "none") == "none") {
    Shape mask_sizes = Shape::filled(xs.dim(), 1);
    mask_sizes[0] = xs.size(0);
    Tensor hits =
        index_add(zeros({xs.size(0)}, DType::F32, x.device()), 0, rows, ones({rows.numel()}, DType::F32, x.device()));
    xs = where(reshape(gt(hits, zeros_like(hits)), mask_sizes), zeros_like(xs), xs);
  }
  return {reshape(index_add(xs, 0, rows, updates), x.sizes())};
}

Outs onnx_max_unpool(const OpContext& c) {
  const Tensor& x = c.in(0);  // (B, C, spatial...)
  std::vector<int64_t> kernel = c.ints("kernel_shape");
  int64_t n = int64_t(kernel.size());
  std::vector<int64_t> strides = c.ints("strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = c.ints("pads", std::vector<int64_t>(2 * n, 0));
  Shape natural = {x.size(0), x.size(1)};
  for (int64_t d = 0; d < n; ++d)
    natural.push_back((x.size(2 + d) - 1) * strides[d] + kernel[d] - pads[d] - pads[d + n]);
  Shape out = c.has(2) ? Shape(c.values(2)) : natural;
  Tensor idx = reshape(cast(c.in(1), DType::I64), {-1});
  if (out != natural) {
    // The indices count within the natural output; move each to the same (B, C, spatial...)
    // coordinates of the requested one.
    std::vector<int64_t> flat = idx.to_vector<int64_t>();
    std::vector<double> moved(flat.size());
    for (size_t k = 0; k < flat.size(); ++k) {
      int64_t rest = flat[k], target = 0, stride = 1;
      for (int d = natural.size() - 1; d >= 0; --d) {
        target += (rest % natural[d]) * stride;
        rest /= natural[d];
        stride *= out[d];
      }
      moved[k] = double(target);
    }
    idx = from_vector(moved, {int64_t(moved.size())}, DType::I64, x.device());
  }
  Tensor flat_out = zeros({out.numel()}, x.dtype(), x.device());
  return {reshape(index_add(flat_out, 0, idx, reshape(x, {-1})), out)};
}

Outs onnx_reverse_sequence(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t batch_axis = c.i("batch_axis", 1), time_axis = c.i("time_axis", 0);
  std::vector<int64_t> lens = c.values(1);
  int64_t steps = x.size(time_axis), batch = x.size(batch_axis);
  // idx[t, b] (in the axes' order): the reversed position within the first lens[b] steps.
  std::vector<double> idx(steps * batch);
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t b = 0; b < batch; ++b) {
      double v = double(t < lens[b] ? lens[b] - 1 - t : t);
      idx[time_axis < batch_axis ? t * batch + b : b * steps + t] = v;
    }
  }
  Shape sizes = Shape::filled(x.dim(), 1);
  sizes[time_axis] = steps;
  sizes[batch_axis] = batch;
  Tensor index = contiguous(expand(from_vector(idx, sizes, DType::I64, x.device()), x.sizes()));
  return {gather(x, time_axis, index)};
}

// ---- data-dependent outputs computed on the host (the values read back, as nonzero does)
// NonMaxSuppression: per batch and class, boxes by descending score, each kept unless it
// overlaps a kept one by IoU > iou_threshold. Output (count, 3) I64: batch, class, box.
Outs onnx_non_max_suppression(const OpContext& c) {
  const Tensor& boxes = c.in(0);   // (B, N, 4)
  const Tensor& scores = c.in(1);  // (B, C, N)
  int64_t max_out = c.has(2) ? c.values(2).at(0) : 0;
  double iou_limit = c.has(3) ? c.in(3).item<double>() : 0.0;
  bool has_floor = c.has(4);
  double score_floor = has_floor ? c.in(4).item<double>() : 0.0;
  bool centered = c.i("center_point_box", 0) != 0;
  int64_t nb = boxes.size(0), n = boxes.size(1), nc = scores.size(1);
  std::vector<double> bx = boxes.to_vector<double>(), sc = scores.to_vector<double>();
  // Corners (y1, x1, y2, x2), ordered, of box i of batch b.
  auto corners = [&](int64_t b, int64_t i) {
    const double* p = &bx[(b * n + i) * 4];
    if (centered) return std::array<double, 4>{p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
    return std::array<double, 4>{std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]),
                                 std::max(p[1], p[3])};
  };
  auto iou = [&](int64_t b, int64_t i, int64_t j) {
    auto p = corners(b, i), q = corners(b, j);
    double h = std::max(0.0, std::min(p[2], q[2]) - std::max(p[0], q[0]));
    double w = std::max(0.0, std::min(p[3], q[3]) - std::max(p[1], q[1]));
    double inter = h * w;
    double uni = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter;
    return uni <= 0 ? 0.0 : inter / uni;
  };
  std::vector<double> out;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t k = 0; k < nc; ++k) {
      const double* s = &sc[(b * nc + k) * n];
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i) {
        if (!has_floor || s[i] > score_floor) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (int64_t(kept.size()) >= max_out) break;
        if (std::all_of(kept.begin(), kept.end(), [&](int64_t j) { return iou(b, i, j) <= iou_limit; })) {
          kept.push_back(i);
          out.insert(out.end(), {double(b), double(k), double(i)});
        }
      }
    }
  }
  return {from_vector(out, {int64_t(out.size() / 3), 3}, DType::I64, boxes.device())};
}

// Unique: the distinct elements (or slices along `axis`), sorted or in order of first
// occurrence, with their first indices, each input's position among them, and counts.
Outs onnx_unique(const OpContext& c) {
  const Tensor& x = c.in(0);
  bool by_axis = c.has_attr("axis");
  int64_t axis = by_axis ? wrap(c.i("axis", 0), x.dim()) : 0;
  Shape to_front;
  to_front.push_back(axis);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != axis) to_front.push_back(d);
  }
  Tensor rows = by_axis ? contiguous(permute(x, to_front)) : reshape(x, {-1});
  int64_t n = rows.size(0);
  int64_t width = n == 0 ? 0 : rows.numel() / n;
  std::vector<double> v = rows.to_vector<double>();
  auto row = [&](int64_t i) { return std::vector<double>(v.begin() + i * width, v.begin() + (i + 1) * width); };
  std::vector<int64_t> first;  // first occurrence of each distinct row
  std::map<std::vector<double>, int64_t> seen;
  for (int64_t i = 0; i < n; ++i) {
    if (seen.emplace(row(i), int64_t(first.size())).second) first.push_back(i);
  }
  if (c.i("sorted", 1) != 0) {
    std::sort(first.begin(), first.end(), [&](int64_t a, int64_t b) { return row(a) < row(b); });
  }
  std::map<std::vector<double>, int64_t> rank;
  for (size_t k = 0; k < first.size(); ++k) rank[row(first[k])] = int64_t(k);
  std::vector<double> inverse(n), counts(first.size(), 0.0), firsts(first.begin(), first.end());
  for (int64_t i = 0; i < n; ++i) {
    inverse[i] = double(rank[row(i)]);
    counts[size_t(inverse[i])] += 1;
  }
  int64_t m = int64_t(first.size());
  Tensor idx = from_vector(firsts, {m}, DType::I64, x.device());
  Tensor y = index_select(rows, 0, idx);
  if (by_axis) {
    Shape back = Shape::filled(x.dim(), 0);
    for (int64_t d = 0; d < x.dim(); ++d) back[to_front[d]] = d;
    y = permute(y, back);
  }
  return {y, idx, from_vector(inverse, {n}, DType::I64, x.device()), from_vector(counts, {m}, DType::I64, x.device())};
}

// GridSample (4-D): the sample positions and weights from the grid on the host (as ONNX's
// reference), the values gathered from x on its device, so gradients reach x (not the grid).
double reflect(double v, double lo, double hi) {
  double range = hi - lo;
  if (range <= 0) return lo;
  if (v < lo || v > hi) {
    double dx = v < lo ? lo - v : v - hi;
    auto n = int64_t(dx / range);
    double r = dx - double(n) * range;
    bool even = n % 2 == 0;
    v = v < lo ? (even ? lo + r : hi - r) : (even ? hi - r : lo + r);
  }
  return v;
}

Outs onnx_grid_sample(const OpContext& c) {
  const Tensor& x = c.in(0);     // (N, C, H, W)
  const Tensor& grid = c.in(1);  // (N, Ho, Wo, 2): x then y, in [-1, 1]
  if (x.dim() != 4) throw UnsupportedError("only 4-d inputs are supported");
  bool align = c.i("align_corners", 0) != 0;
  std::string mode = c.s("mode", "bilinear"), padding = c.s("padding_mode", "zeros");
  int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  int64_t ho = grid.size(1), wo = grid.size(2), m = ho * wo;
  std::vector<double> g = grid.to_vector<double>();
  int taps = mode == "nearest" ? 1 : 4;
  std::vector<std::vector<double>> index(taps, std::vector<double>(n * m)), weight(taps, std::vector<double>(n * m));
  auto unnormalize = [&](double v, int64_t size) {
    return align ? (v + 1) / 2 * double(size - 1) : ((v + 1) * double(size) - 1) / 2;
  };
  auto bound = [&](double v, int64_t size) {
    if (padding == "border") return std::clamp(v, 0.0, double(size - 1));
    if (padding == "reflection") {
      return std::clamp(align ? reflect(v, 0, double(size - 1)) : reflect(v, -0.5, double(size) - 0.5), 0.0,
                        double(size - 1));
    }
    return v;
  };
  for (int64_t k = 0; k < n * m; ++k) {
    double px = bound(unnormalize(g[2 * k], w), w), py = bound(unnormalize(g[2 * k + 1], h), h);
    std::vector<std::array<double, 3>> picks;  // row, column, weight
    if (taps == 1) {
      picks.push_back({std::nearbyint(py), std::nearbyint(px), 1.0});
    } else {
      double x0 = std::floor(px), y0 = std::floor(py), fx = px - x0, fy = py - y0;
      picks = {{y0, x0, (1 - fy) * (1 - fx)},
               {y0, x0 + 1, (1 - fy) * fx},
               {y0 + 1, x0, fy * (1 - fx)},
               {y0 + 1, x0 + 1, fy * fx}};
    }
    for (int t = 0; t < taps; ++t) {
      double r = picks[t][0], col = picks[t][1];
      bool inside = r >= 0 && r <= double(h - 1) && col >= 0 && col <= double(w - 1);
      r = std::clamp(r, 0.0, double(h - 1));  // border and reflection: the edge pixel
      col = std::clamp(col, 0.0, double(w - 1));
      index[t][k] = r * double(w) + col;
      weight[t][k] = (inside || padding != "zeros") ? picks[t][2] : 0.0;
    }
  }
  Tensor plane = reshape(x, {n, ch, h * w});
  Tensor y;
  for (int t = 0; t < taps; ++t) {
    Tensor idx = contiguous(expand(from_vector(index[t], {n, 1, m}, DType::I64, x.device()), {n, ch, m}));
    Tensor part = mul(gather(plane, 2, idx), from_vector(weight[t], {n, 1, m}, x.dtype(), x.device()));
    y = y.defined() ? add(y, part) : part;
  }
  return {reshape(y, {n, ch, ho, wo})};
}

void check_grid_sample(const Node& n) {
  std::string mode = string_attr(n, "mode", "bilinear");
  refuse_unless(mode == "bilinear" || mode == "nearest", "mode '" + mode + "'");
}

// ---- convolution and pooling, written for 2-D; a 1-D input runs as (B, C, 1, L).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, begin, end;  // per spatial dim
};

Window window(const OpContext& c, const Tensor& x, std::vector<int64_t> kernel) {
  int64_t n = x.dim() - 2;
  if (n < 1 || n > 3)
    throw UnsupportedError(brisk::detail::cat("a ", n, "-d window (input ", x.sizes(), ") is not supported"));
  Window w;
  w.kernel = kernel;
  w.strides = c.ints("strides", std::vector<int64_t>(n, 1));
  w.dilations = c.ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = c.ints("pads", std::vector<int64_t>(2 * n, 0));
  std::string auto_pad = c.s("auto_pad", "NOTSET");
  w.begin.assign(pads.begin(), pads.begin() + n);
  w.end.assign(pads.begin() + n, pads.end());
  for (int64_t d = 0; d < n; ++d) {
    if (auto_pad == "VALID") {
      w.begin[d] = w.end[d] = 0;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t in = x.size(2 + d);
      int64_t out = (in + w.strides[d] - 1) / w.strides[d];
      int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[d] + (kernel[d] - 1) * w.dilations[d] + 1 - in);
      w.begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.end[d] = total - w.begin[d];
    }
  }
  return w;
}

// Lifts a 1-D window to 2-D (H = 1).
Window lift(Window w) {
  if (w.kernel.size() == 2) return w;
  w.kernel.insert(w.kernel.begin(), 1);
  w.strides.insert(w.strides.begin(), 1);
  w.dilations.insert(w.dilations.begin(), 1);
  w.begin.insert(w.begin.begin(), 0);
  w.end.insert(w.end.begin(), 0);
  return w;
}

bool symmetric(const Window& w) { return w.begin == w.end; }
F::Pair pair(const std::vector<int64_t>& v) { return {v[0], v[1]}; }
std::vector<int64_t> explicit_pads(const Window& w) { return {w.begin[1], w.end[1], w.begin[0], w.end[0]}; }
Tensor to_2d(const Tensor& x) { return x.dim() == 3 ? unsqueeze(x, 2) : x; }
Tensor from_2d(const Tensor& y, int rank) { return rank == 3 ? squeeze(y, 2) : y; }

// Note [3-d windows from 2-d ones]: brisk has no 3-d convolution or pooling. A 3-d window is
// its depth taps' 2-d windows combined (summed for convolution, max or mean for pooling): for
// tap j the depth slices j * dilation + o * stride (o over the output depths) are a batch of
// 2-d inputs. kd 2-d calls; autograd comes with them.
struct DepthTaps {
  Tensor x;  // padded
  int64_t od = 0;
};

DepthTaps depth_taps(const Tensor& x, const Window& w, double pad_value) {
  DepthTaps t;
  t.x = F::pad(x, {w.begin[2], w.end[2], w.begin[1], w.end[1], w.begin[0], w.end[0]}, "constant", pad_value);
  t.od = (t.x.size(2) - w.dilations[0] * (w.kernel[0] - 1) - 1) / w.strides[0] + 1;
  return t;
}

// Tap j's depth slices as a batch of 2-d inputs: (B * od, C, H, W).
Tensor tap(const DepthTaps& t, const Window& w, int64_t j) {
  const Tensor& x = t.x;
  int64_t start = j * w.dilations[0];
  Tensor xs = slice(x, 2, start, start + (t.od - 1) * w.strides[0] + 1, w.strides[0]);
  return reshape(permute(xs, {0, 2, 1, 3, 4}), {x.size(0) * t.od, x.size(1), x.size(3), x.size(4)});
}

// (B * od, C', oh, ow) -> (B, C', od, oh, ow)
Tensor untap(const Tensor& y, int64_t batch, int64_t od) {
  return permute(reshape(y, {batch, od, y.size(1), y.size(2), y.size(3)}), {0, 2, 1, 3, 4});
}

F::Pair hw(const std::vector<int64_t>& v) { return {v[1], v[2]}; }

Tensor conv3d(const OpContext& c, const Window& w) {
  DepthTaps t = depth_taps(c.in(0), w, 0.0);
  Tensor y;
  for (int64_t j = 0; j < w.kernel[0]; ++j) {
    Tensor yj =
        F::conv2d(tap(t, w, j), select(c.in(1), 2, j), {}, hw(w.strides), {0, 0}, hw(w.dilations), c.i("group", 1));
    y = y.defined() ? add(y, yj) : yj;
  }
  y = untap(y, t.x.size(0), t.od);
  return c.has(2) ? add(y, reshape(c.in(2), {1, -1, 1, 1, 1})) : y;
}

Tensor pool3d(const OpContext& c, const Window& w, bool is_max) {
  if (c.i("ceil_mode", 0) != 0) throw UnsupportedError("ceil_mode with a 3-d window is not supported");
  const Tensor& x = c.in(0);
  DepthTaps t = depth_taps(x, w, is_max ? -std::numeric_limits<double>::infinity() : 0.0);
  F::Pair k = hw(w.kernel), st = hw(w.strides);
  Tensor y, count;
  for (int64_t j = 0; j < w.kernel[0]; ++j) {
    Tensor xj = tap(t, w, j);
    Tensor yj = is_max ? F::max_pool2d(xj, k, st, {0, 0}, hw(w.dilations)) : F::avg_pool2d(xj, k, st);
    y = !y.defined() ? yj : (is_max ? maximum(y, yj) : add(y, yj));
  }
  y = untap(y, x.size(0), t.od);
  if (is_max) return y;
  if (c.i("count_include_pad", 0) != 0) return div(y, scalar_operand(double(w.kernel[0]), y));
  // Without count_include_pad, divide by the share of each window inside the input.
  DepthTaps ones_t = depth_taps(ones_like(x), w, 0.0);
  for (int64_t j = 0; j < w.kernel[0]; ++j) {
    Tensor cj = F::avg_pool2d(tap(ones_t, w, j), k, st);
    count = count.defined() ? add(count, cj) : cj;
  }
  return div(y, untap(count, x.size(0), t.od));
}

Outs onnx_conv(const OpContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& weight = c.in(1);
  std::vector<int64_t> kernel(weight.sizes().begin() + 2, weight.sizes().end());
  if (x.dim() == 5) return {conv3d(c, window(c, x, kernel))};
  Window w = lift(window(c, x, kernel));
  Tensor x2 = to_2d(x);
  Tensor w2 = to_2d(weight);
  Tensor bias = c.has(2) ? c.in(2) : Tensor{};
  F::Pair padding = {0, 0};
  if (symmetric(w)) {
    padding = pair(w.begin);
  } else {
    x2 = F::pad(x2, explicit_pads(w));
  }
  Tensor y = F::conv2d(x2, w2, bias, pair(w.strides), padding, pair(w.dilations), c.i("group", 1));
  return {from_2d(y, x.dim())};
}

Outs onnx_conv_transpose(const OpContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& weight = c.in(1);  // (C_in, C_out / groups, k...)
  int64_t n = x.dim() - 2;
  if (n != 1 && n != 2) {
    throw UnsupportedError(
        brisk::detail::cat("a ", n, "-d transposed convolution (input ", x.sizes(), ") is not supported"));
  }
  std::vector<int64_t> kernel(weight.sizes().begin() + 2, weight.sizes().end());
  std::vector<int64_t> strides = c.ints("strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> dilations = c.ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> out_pad = c.ints("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> pads = c.ints("pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> output_shape = c.ints("output_shape");
  std::string auto_pad = c.s("auto_pad", "NOTSET");
  // The full output (no padding), then cropped by the pads: asymmetric pads and output_shape
  // need no case of their own.
  std::vector<int64_t> full(n);
  for (int64_t d = 0; d < n; ++d) {
    full[d] = (x.size(2 + d) - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 + out_pad[d];
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t target = output_shape.empty() ? x.size(2 + d) * strides[d] : output_shape[output_shape.size() - n + d];
      int64_t total = full[d] - target;
      pads[d] = total < 0 ? 0 : (auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2);
      pads[d + n] = total - pads[d];
    } else if (auto_pad == "VALID") {
      pads[d] = pads[d + n] = 0;
    }
  }
  Tensor x2 = to_2d(x);
  Tensor w2 = to_2d(weight);
  Window lifted = lift(Window{kernel, strides, dilations, {}, {}});
  std::vector<int64_t> op2 = out_pad;
  if (n == 1) op2.insert(op2.begin(), 0);
  Tensor y =
      F::conv_transpose2d(x2, w2, {}, pair(lifted.strides), {0, 0}, pair(op2), c.i("group", 1), pair(lifted.dilations));
  // Negative pads (an output_shape beyond the full output) extend it with zeros at the end.
  for (int64_t d = 0; d < n; ++d) {
    int64_t axis = y.dim() - n + d;
    int64_t size = y.size(axis);
    y = slice(y, axis, std::max<int64_t>(pads[d], 0), size - std::max<int64_t>(pads[d + n], 0));
    if (pads[d + n] < 0) {
      std::vector<int64_t> extra(2 * (y.dim() - axis), 0);
      extra[extra.size() - 1] = -pads[d + n];
      y = F::pad(y, extra);
    }
  }
  if (c.has(2)) y = add(y, reshape(c.in(2), {1, -1, 1, 1}));
  return {from_2d(y, x.dim())};
}

Outs onnx_max_pool(const OpContext& c) {
  if (!is_floating(c.in(0).dtype())) {
    // brisk pools floating tensors; every 8-bit value is exact in F32.
    OpContext f{c.node, c.inputs, c.device};
    f.inputs[0] = cast(c.in(0), DType::F32);
    Outs y = onnx_max_pool(f);
    y[0] = cast(y[0], c.in(0).dtype());
    return y;
  }
  const Tensor& x = c.in(0);
  if (x.dim() == 5) {
    if (c.num_outputs() > 1) throw UnsupportedError("the indices of a 3-d max pool are not supported");
    return {pool3d(c, window(c, x, c.ints("kernel_shape")), true)};
  }
  Window w = lift(window(c, x, c.ints("kernel_shape")));
  Tensor x2 = to_2d(x);
  bool ceil_mode = c.i("ceil_mode", 0) != 0;
  bool pad_inside = symmetric(w) && w.begin[0] * 2 <= w.kernel[0] && w.begin[1] * 2 <= w.kernel[1];
  if (c.num_outputs() > 1 && !c.node.outputs[1].empty()) {
    BRISK_CHECK(pad_inside, "indices with asymmetric pads are not supported");
    auto [y, idx] =
        F::max_pool2d_with_indices(x2, pair(w.kernel), pair(w.strides), pair(w.begin), pair(w.dilations), ceil_mode);
    // PyTorch's indices count within each (H, W) plane; ONNX's within the whole tensor.
    int64_t planes = x2.size(0) * x2.size(1);
    int64_t area = x2.size(2) * x2.size(3);
    Tensor base = reshape(mul(arange(planes, DType::I64, x.device()), full({1}, double(area), DType::I64, x.device())),
                          {x2.size(0), x2.size(1), 1, 1});
    if (c.i("storage_order", 0) == 1) {
      // Column-major positions within the plane: w * H + h.
      Tensor h = onnx_div(idx, full({}, double(x2.size(3)), DType::I64, x.device()));
      Tensor w_ = sub(idx, mul(h, full({}, double(x2.size(3)), DType::I64, x.device())));
      idx = add(mul(w_, full({}, double(x2.size(2)), DType::I64, x.device())), h);
    }
    return {from_2d(y, x.dim()), from_2d(add(idx, base), x.dim())};
  }
  F::Pair padding = {0, 0};
  if (pad_inside) {
    padding = pair(w.begin);
  } else {
    x2 = F::pad(x2, explicit_pads(w), "constant", -std::numeric_limits<double>::infinity());
  }
  return {from_2d(F::max_pool2d(x2, pair(w.kernel), pair(w.strides), padding, pair(w.dilations), ceil_mode), x.dim())};
}

Outs onnx_average_pool(const OpContext& c) {
  const Tensor& x = c.in(0);
  if (x.dim() == 5) return {pool3d(c, window(c, x, c.ints("kernel_shape")), false)};
  Window w = lift(window(c, x, c.ints("kernel_shape")));
  Tensor x2 = to_2d(x);
  bool ceil_mode = c.i("ceil_mode", 0) != 0;
  bool include_pad = c.i("count_include_pad", 0) != 0;
  bool pad_inside = symmetric(w) && w.begin[0] * 2 <= w.kernel[0] && w.begin[1] * 2 <= w.kernel[1];
  if (pad_inside) {
    return {
        from_2d(F::avg_pool2d(x2, pair(w.kernel), pair(w.strides), pair(w.begin), ceil_mode, include_pad), x.dim())};
  }
  // Asymmetric pads: average the zero-padded input; without count_include_pad divide by the
  // share of each window that lies inside the input (the same pooling of ones).
  Tensor y = F::avg_pool2d(F::pad(x2, explicit_pads(w)), pair(w.kernel), pair(w.strides), {0, 0}, ceil_mode, true);
  if (!include_pad) {
    Tensor inside = F::avg_pool2d(F::pad(ones_like(x2), explicit_pads(w)), pair(w.kernel), pair(w.strides), {0, 0},
                                  ceil_mode, true);
    y = div(y, inside);
  }
  return {from_2d(y, x.dim())};
}

Shape spatial_dims(const Tensor& x) {
  Shape dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

Outs onnx_batch_norm(const OpContext& c) {
  return {
      F::batch_norm(c.in(0), c.in(3), c.in(4), c.in(1), c.in(2), false, c.f("momentum", 0.9), c.f("epsilon", 1e-5))};
}

Outs onnx_layer_norm(const OpContext& c) {
  const Tensor& x0 = c.in(0);
  int64_t axis = wrap(c.i("axis", -1), x0.dim());
  // stash_type 1 (the default): statistics in F32 for 16-bit inputs.
  bool up = c.i("stash_type", 1) == 1 && is_reduced_float(x0.dtype());
  Tensor x = up ? cast(x0, DType::F32) : x0;
  Shape dims;
  for (int64_t d = axis; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu = mean(x, dims, true);
  Tensor centered = sub(x, mu);
  Tensor inv_std = rsqrt(add(mean(mul(centered, centered), dims, true), scalar_operand(c.f("epsilon", 1e-5), x)));
  Tensor y = same_dtype(mul(centered, inv_std), x0.dtype());
  y = mul(y, c.in(1));
  if (c.has(2)) y = add(y, c.in(2));
  return {y, mu, inv_std};
}

Tensor to_i64(const Tensor& t) { return same_dtype(t, DType::I64); }

Reduction reduction_of(const OpContext& c) {
  std::string r = c.s("reduction", "mean");
  BRISK_CHECK(r == "mean" || r == "sum" || r == "none", "unknown reduction '", r, "'");
  return r == "mean" ? Reduction::Mean : (r == "sum" ? Reduction::Sum : Reduction::None);
}

int64_t ignore_index_of(const OpContext& c) {
  // No ignore_index: none ignored (a value no target has).
  return c.i("ignore_index", std::numeric_limits<int64_t>::min());
}

Outs onnx_nll(const OpContext& c) {
  return {F::nll_loss(c.in(0), to_i64(c.in(1)), c.has(2) ? c.in(2) : Tensor{}, reduction_of(c), ignore_index_of(c))};
}

Outs onnx_softmax_cross_entropy(const OpContext& c) {
  Tensor logp = log_softmax(c.in(0), 1);
  Tensor loss = F::nll_loss(logp, to_i64(c.in(1)), c.has(2) ? c.in(2) : Tensor{}, reduction_of(c), ignore_index_of(c));
  return {loss, logp};
}

Outs onnx_gemm(const OpContext& c) {
  Tensor a = c.i("transA", 0) ? transpose(c.in(0), 0, 1) : c.in(0);
  Tensor b = c.i("transB", 0) ? transpose(c.in(1), 0, 1) : c.in(1);
  Tensor y = matmul(a, b);
  double alpha = c.f("alpha", 1.0);
  if (alpha != 1.0) y = mul(y, scalar_operand(alpha, y));
  if (c.has(2)) {
    double beta = c.f("beta", 1.0);
    y = add(y, beta == 1.0 ? c.in(2) : mul(c.in(2), scalar_operand(beta, c.in(2))));
  }
  return {y};
}

Outs onnx_constant(const OpContext& c) {
  const Node& n = c.node;
  if (c.has_attr("value")) return {to_device(c.t("value"), c.device)};
  if (c.has_attr("value_float")) return {scalar_tensor(c.f("value_float", 0), DType::F32, c.device)};
  if (c.has_attr("value_int")) return {full({}, double(c.i("value_int", 0)), DType::I64, c.device)};
  if (c.has_attr("value_floats")) {
    const std::vector<double>& v = n.attributes.at("value_floats").floats;
    return {from_vector(v, {int64_t(v.size())}, DType::F32, c.device)};
  }
  std::vector<int64_t> v = c.ints("value_ints");
  std::vector<double> d(v.begin(), v.end());
  return {from_vector(d, {int64_t(d.size())}, DType::I64, c.device)};
}

Outs onnx_dropout(const OpContext& c) {
  // Inference: the identity, and a mask of ones when asked for.
  const Tensor& x = c.in(0);
  double ratio = c.has(1) ? c.in(1).item<double>() : c.f("ratio", 0.5);
  if (c.has(2) && c.in(2).item<bool>() && ratio != 0) {
    throw UnsupportedError("training mode (random masks) is not supported (inference only)");
  }
  return {x, ones(x.sizes(), DType::Bool, x.device())};
}

Outs onnx_clip(const OpContext& c) {
  Tensor y = c.in(0);
  if (c.node.since_version < 11) {
    return {clamp(y, c.f("min", -std::numeric_limits<double>::infinity()),
                  c.f("max", std::numeric_limits<double>::infinity()))};
  }
  if (c.has(1)) y = maximum(y, c.in(1));
  if (c.has(2)) y = minimum(y, c.in(2));
  return {y};
}

Outs onnx_lp_norm(const OpContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = wrap(c.i("axis", -1), x.dim());
  return {div(x, norm(x, double(c.i("p", 2)), {axis}, true))};
}

Outs onnx_mvn(const OpContext& c) {
  const Tensor& x = c.in(0);
  Shape dims(c.ints("axes", {0, 2, 3}));
  Tensor mu = mean(x, dims, true);
  Tensor var_ = sub(mean(mul(x, x), dims, true), mul(mu, mu));
  return {div(sub(x, mu), add(sqrt(var_), scalar_operand(1e-9, x)))};
}

Outs onnx_einsum(const OpContext& c) {
  std::string equation = c.s("equation", "");
  return {einsum(equation, std::vector<Tensor>(c.inputs.begin(), c.inputs.end()))};
}

Outs onnx_prelu(const OpContext& c) {
  const Tensor& x = c.in(0);
  Tensor slope = c.in(1);
  // Opset 6 and before: a 1-D slope is per channel (dim 1).
  if (c.node.since_version < 7 && slope.dim() == 1 && x.dim() > 2 && slope.size(0) == x.size(1)) {
    Shape sizes = Shape::filled(x.dim() - 1, 1);
    sizes[0] = slope.size(0);
    slope = reshape(slope, sizes);
  }
  return {where(lt(x, zeros_like(x)), mul(x, slope), x)};
}

// A unary op from a brisk function of one tensor.
#define BRISK_ONNX_UNARY(expr)     \
  [](const OpContext& c) -> Outs { \
    const Tensor& x = c.in(0);     \
    return {expr};                 \
  }
#define BRISK_ONNX_BINARY(expr)           \
  [](const OpContext& c) -> Outs {        \
    const Tensor& a = c.in(0);            \
    const Tensor b = legacy_broadcast(c); \
    return {expr};                        \
  }

Tensor scalar(double v, const Tensor& like) { return scalar_operand(v, like); }

}  // namespace

// Hand-aligned table:
// clang-format off
const std::vector<OpEntry>& op_table() {
  static const std::vector<OpEntry> table = {
      // ---- elementwise, one input
      {"Abs", 1, 17, BRISK_ONNX_UNARY(brisk::abs(x)), {}},
      {"Neg", 1, 17, BRISK_ONNX_UNARY(neg(x)), {}},
      {"Exp", 1, 17, BRISK_ONNX_UNARY(brisk::exp(x)), {}},
      {"Log", 1, 17, BRISK_ONNX_UNARY(brisk::log(x)), {}},
      {"Sqrt", 1, 17, BRISK_ONNX_UNARY(brisk::sqrt(x)), {}},
      {"Reciprocal", 1, 17, BRISK_ONNX_UNARY(reciprocal(x)), {}},
      {"Floor", 1, 17, BRISK_ONNX_UNARY(brisk::floor(x)), {}},
      {"Ceil", 1, 17, BRISK_ONNX_UNARY(brisk::ceil(x)), {}},
      {"Round", 11, 17, BRISK_ONNX_UNARY(brisk::round(x)), {}},
      {"Sign", 9, 17, BRISK_ONNX_UNARY(sign(x)), {}},
      {"Sin", 7, 17, BRISK_ONNX_UNARY(brisk::sin(x)), {}},
      {"Cos", 7, 17, BRISK_ONNX_UNARY(brisk::cos(x)), {}},
      {"Tan", 7, 17, BRISK_ONNX_UNARY(div(brisk::sin(x), brisk::cos(x))), {}},
      {"Sinh", 9, 17, BRISK_ONNX_UNARY(mul(sub(brisk::exp(x), brisk::exp(neg(x))), scalar(0.5, x))), {}},
      {"Cosh", 9, 17, BRISK_ONNX_UNARY(mul(add(brisk::exp(x), brisk::exp(neg(x))), scalar(0.5, x))), {}},
      {"Asinh", 9, 17, BRISK_ONNX_UNARY(brisk::log(add(x, brisk::sqrt(add(mul(x, x), scalar(1, x)))))), {}},
      {"Acosh", 9, 17, BRISK_ONNX_UNARY(brisk::log(add(x, brisk::sqrt(sub(mul(x, x), scalar(1, x)))))), {}},
      {"Atanh", 9, 17, BRISK_ONNX_UNARY(mul(brisk::log(div(add(scalar(1, x), x), sub(scalar(1, x), x))), scalar(0.5, x))), {}},
      {"Tanh", 1, 17, BRISK_ONNX_UNARY(brisk::tanh(x)), {}},
      {"Sigmoid", 1, 17, BRISK_ONNX_UNARY(sigmoid(x)), {}},
      {"Relu", 1, 17, BRISK_ONNX_UNARY(relu(x)), {}},
      {"Erf", 9, 17, BRISK_ONNX_UNARY(erf(x)), {}},
      {"Softplus", 1, 17, BRISK_ONNX_UNARY(softplus(x)), {}},
      {"Softsign", 1, 17, BRISK_ONNX_UNARY(div(x, add(brisk::abs(x), scalar(1, x)))), {}},
      {"IsNaN", 9, 17, BRISK_ONNX_UNARY(isnan(x)), {}},
      {"IsInf", 10, 17, [](const OpContext& c) -> Outs { return {is_inf(c)}; }, {"detect_negative", "detect_positive"}},
      {"Not", 1, 17, BRISK_ONNX_UNARY(logical_not(x)), {}},
      {"Identity", 1, 17, BRISK_ONNX_UNARY(x), {}},
      {"HardSigmoid", 1, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         return {clamp(add(mul(x, scalar(c.f("alpha", 0.2), x)), scalar(c.f("beta", 0.5), x)), 0, 1)};
       }, {"alpha", "beta"}},
      {"HardSwish", 14, 17, BRISK_ONNX_UNARY(hardswish(x)), {}},
      {"Elu", 1, 17, [](const OpContext& c) -> Outs { return {elu(c.in(0), c.f("alpha", 1.0))}; }, {"alpha"}},
      {"Selu", 1, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         double gamma = c.f("gamma", 1.0507009873554804934193349852946);
         return {mul(elu(x, c.f("alpha", 1.6732632423543772848170429916717)), scalar(gamma, x))};
       }, {"alpha", "gamma"}},
      {"LeakyRelu", 1, 17, [](const OpContext& c) -> Outs { return {leaky_relu(c.in(0), c.f("alpha", 0.01))}; }, {"alpha"}},
      {"Celu", 12, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         double alpha = c.f("alpha", 1.0);
         return {mul(elu(div(x, scalar(alpha, x)), 1.0), scalar(alpha, x))};
       }, {"alpha"}},
      {"ThresholdedRelu", 10, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         return {where(gt(x, scalar(c.f("alpha", 1.0), x)), x, zeros_like(x))};
       }, {"alpha"}},
      {"Shrink", 9, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         double lambd = c.f("lambd", 0.5), bias = c.f("bias", 0.0);
         Tensor lo = where(lt(x, scalar(-lambd, x)), add(x, scalar(bias, x)), zeros_like(x));
         return {where(gt(x, scalar(lambd, x)), sub(x, scalar(bias, x)), lo)};
       }, {"bias", "lambd"}},
      {"PRelu", 1, 17, onnx_prelu, {}},
      {"Clip", 1, 17, onnx_clip, {"min", "max"}},
      // ---- elementwise, two or more inputs (numpy broadcasting)
      {"Add", 1, 17, BRISK_ONNX_BINARY(add(a, b)), {"broadcast", "axis"}},
      {"Sub", 1, 17, BRISK_ONNX_BINARY(sub(a, b)), {"broadcast", "axis"}},
      {"Mul", 1, 17, BRISK_ONNX_BINARY(mul(a, b)), {"broadcast", "axis"}},
      {"Div", 1, 17, BRISK_ONNX_BINARY(onnx_div(a, b)), {"broadcast", "axis"}},
      {"Pow", 1, 17, BRISK_ONNX_BINARY(onnx_pow(a, b)), {"broadcast", "axis"}},
      {"Mod", 10, 17, [](const OpContext& c) -> Outs { return {onnx_mod(c)}; }, {"fmod"}},
      {"Equal", 1, 17, BRISK_ONNX_BINARY(eq(a, b)), {"broadcast", "axis"}},
      {"Less", 1, 17, BRISK_ONNX_BINARY(lt(a, b)), {"broadcast", "axis"}},
      {"LessOrEqual", 12, 17, BRISK_ONNX_BINARY(le(a, b)), {}},
      {"Greater", 1, 17, BRISK_ONNX_BINARY(gt(a, b)), {"broadcast", "axis"}},
      {"GreaterOrEqual", 12, 17, BRISK_ONNX_BINARY(ge(a, b)), {}},
      {"And", 1, 17, BRISK_ONNX_BINARY(where(a, b, zeros_like(b))), {"broadcast", "axis"}},
      {"Or", 1, 17, BRISK_ONNX_BINARY(where(a, ones_like(b), b)), {"broadcast", "axis"}},
      {"Xor", 1, 17, BRISK_ONNX_BINARY(ne(a, b)), {"broadcast", "axis"}},
      {"Where", 9, 17, [](const OpContext& c) -> Outs { return {where(c.in(0), c.in(1), c.in(2))}; }, {}},
      {"Max", 1, 17, [](const OpContext& c) -> Outs { return {fold(c, max2)}; }, {}},
      {"Min", 1, 17, [](const OpContext& c) -> Outs { return {fold(c, min2)}; }, {}},
      {"Sum", 1, 17, [](const OpContext& c) -> Outs { return {fold(c, add2)}; }, {}},
      {"Mean", 1, 17, [](const OpContext& c) -> Outs {
         Tensor s = fold(c, add2);
         return {div(s, scalar(double(c.inputs.size()), s))};
       }, {}},
      // ---- reductions
      {"ReduceSum", 1, 17, [](const OpContext& c) { return reduce(c, r_sum); }, {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceMean", 1, 17, [](const OpContext& c) { return reduce(c, r_mean); }, {"axes", "keepdims"}},
      {"ReduceMax", 1, 17, [](const OpContext& c) { return reduce(c, r_max); }, {"axes", "keepdims"}},
      {"ReduceMin", 1, 17, [](const OpContext& c) { return reduce(c, r_min); }, {"axes", "keepdims"}},
      {"ReduceProd", 1, 17, [](const OpContext& c) { return reduce(c, r_prod); }, {"axes", "keepdims"}},
      {"ReduceL1", 1, 17, [](const OpContext& c) { return reduce(c, r_l1); }, {"axes", "keepdims"}},
      {"ReduceL2", 1, 17, [](const OpContext& c) { return reduce(c, r_l2); }, {"axes", "keepdims"}},
      {"ReduceSumSquare", 1, 17, [](const OpContext& c) { return reduce(c, r_sumsq); }, {"axes", "keepdims"}},
      {"ReduceLogSum", 1, 17, [](const OpContext& c) { return reduce(c, r_logsum); }, {"axes", "keepdims"}},
      {"ReduceLogSumExp", 1, 17, [](const OpContext& c) { return reduce(c, r_logsumexp); }, {"axes", "keepdims"}},
      {"ArgMax", 1, 17, [](const OpContext& c) { return arg_reduce(c, true); }, {"axis", "keepdims", "select_last_index"}},
      {"ArgMin", 1, 17, [](const OpContext& c) { return arg_reduce(c, false); }, {"axis", "keepdims", "select_last_index"}},
      {"CumSum", 11, 17, onnx_cumsum, {"exclusive", "reverse"}},
      {"TopK", 10, 17, onnx_topk, {"axis", "largest", "sorted"}},
      {"Det", 11, 17, BRISK_ONNX_UNARY(linalg::det(x)), {}},
      // ---- shapes and indexing
      {"Reshape", 1, 17, onnx_reshape, {"allowzero", "shape"}},
      {"Flatten", 1, 17, onnx_flatten, {"axis"}},
      {"Transpose", 1, 17, onnx_transpose, {"perm"}},
      {"Squeeze", 1, 17, onnx_squeeze, {"axes"}},
      {"Unsqueeze", 1, 17, onnx_unsqueeze, {"axes"}},
      {"Concat", 1, 17, onnx_concat, {"axis"}},
      {"Split", 2, 17, onnx_split, {"axis", "split"}},
      {"Slice", 1, 17, onnx_slice, {"starts", "ends", "axes"}},
      {"Gather", 1, 17, onnx_gather, {"axis"}},
      {"GatherElements", 11, 17, onnx_gather_elements, {"axis"}},
      {"Expand", 8, 17, onnx_expand, {}},
      {"Tile", 6, 17, [](const OpContext& c) -> Outs { return {tile(c.in(0), Shape(c.values(1)))}; }, {}},
      {"Shape", 1, 17, onnx_shape, {"start", "end"}},
      {"Size", 1, 17, BRISK_ONNX_UNARY(full({}, double(x.numel()), DType::I64, x.device())), {}},
      {"ConstantOfShape", 9, 17, onnx_constant_of_shape, {"value"}},
      {"Range", 11, 17, onnx_range, {}},
      {"Pad", 2, 17, onnx_pad, {"mode", "pads", "value"}},
      {"Cast", 6, 17, [](const OpContext& c) -> Outs { return {cast(c.in(0), dtype_from_onnx(c.i("to", 0), c.node.describe()))}; }, {"to"}},
      {"CastLike", 15, 17, BRISK_ONNX_BINARY(cast(a, b.dtype())), {}},
      {"Dropout", 1, 17, onnx_dropout, {"seed", "ratio", "is_test"}},
      {"Trilu", 14, 17, [](const OpContext& c) -> Outs {
         int64_t k = c.has(1) ? c.values(1).at(0) : 0;
         return {c.i("upper", 1) ? triu(c.in(0), k) : tril(c.in(0), k)};
       }, {"upper"}},
      {"OneHot", 9, 17, onnx_one_hot, {"axis"}},
      {"EyeLike", 9, 17, onnx_eye_like, {"k", "dtype"}},
      {"Compress", 9, 17, onnx_compress, {"axis"}},
      {"NonZero", 9, 17, BRISK_ONNX_UNARY(contiguous(transpose(nonzero(x), 0, 1))), {}},
      {"DepthToSpace", 1, 17, onnx_depth_to_space, {"blocksize", "mode"}},
      {"SpaceToDepth", 1, 17, onnx_space_to_depth, {"blocksize"}},
      {"Einsum", 12, 17, onnx_einsum, {"equation"}, check_einsum},
      {"Constant", 1, 17, onnx_constant, {"value", "value_float", "value_floats", "value_int", "value_ints"}},
      // ---- neural-network layers
      {"MatMul", 1, 17, BRISK_ONNX_BINARY(matmul(a, b)), {}},
      {"Gemm", 1, 17, onnx_gemm, {"alpha", "beta", "broadcast", "transA", "transB"}},
      {"Conv", 1, 17, onnx_conv, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
      {"ConvTranspose", 1, 17, onnx_conv_transpose,
       {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"}},
      {"MaxPool", 1, 17, onnx_max_pool, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}},
      {"AveragePool", 1, 17, onnx_average_pool, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}},
      {"GlobalAveragePool", 1, 17, BRISK_ONNX_UNARY(mean(x, spatial_dims(x), true)), {}},
      {"GlobalMaxPool", 1, 17, BRISK_ONNX_UNARY(amax(x, spatial_dims(x), true)), {}},
      {"GlobalLpPool", 2, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         return {norm(x, double(c.i("p", 2)), spatial_dims(x), true)};
       }, {"p"}},
      {"BatchNormalization", 1, 17, onnx_batch_norm, {"epsilon", "is_test", "momentum", "spatial", "training_mode"}, check_batch_norm},
      {"InstanceNormalization", 6, 17, [](const OpContext& c) -> Outs {
         const Tensor& x = c.in(0);
         return {F::group_norm(x, x.size(1), c.in(1), c.in(2), c.f("epsilon", 1e-5))};
       }, {"epsilon"}},
      {"LayerNormalization", 17, 17, onnx_layer_norm, {"axis", "epsilon", "stash_type"}},
      {"LpNormalization", 1, 17, onnx_lp_norm, {"axis", "p"}},
      {"MeanVarianceNormalization", 9, 17, onnx_mvn, {"axes"}},
      {"Softmax", 1, 17, [](const OpContext& c) -> Outs { return {along_axis(c, softmax_)}; }, {"axis"}},
      {"LogSoftmax", 1, 17, [](const OpContext& c) -> Outs { return {along_axis(c, log_softmax_)}; }, {"axis"}},
      {"Hardmax", 1, 17, [](const OpContext& c) -> Outs { return {along_axis(c, hardmax_)}; }, {"axis"}},
      {"Resize", 11, 17, onnx_resize, {"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                                       "extrapolation_value", "mode", "nearest_mode"}, check_resize},
      {"Upsample", 9, 9, onnx_upsample, {"mode"}, check_resize},
      {"LRN", 1, 17, onnx_lrn, {"alpha", "beta", "bias", "size"}},
      {"ScatterElements", 11, 17, onnx_scatter_elements, {"axis", "reduction"}, check_scatter},
      {"Scatter", 9, 10, onnx_scatter_elements, {"axis"}},
      {"GatherND", 11, 17, onnx_gather_nd, {"batch_dims"}, check_gather_nd},
      {"QuantizeLinear", 10, 13, onnx_quantize, {"axis"}},
      {"DequantizeLinear", 10, 13, onnx_dequantize, {"axis"}},
      {"DynamicQuantizeLinear", 11, 11, onnx_dynamic_quantize, {}},
      {"MatMulInteger", 10, 10, onnx_matmul_integer, {}},
      {"ConvInteger", 10, 10, onnx_conv_integer, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
      {"QLinearMatMul", 10, 10, onnx_qlinear_matmul, {}},
      {"QLinearConv", 10, 10, onnx_qlinear_conv, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
      {"HannWindow", 17, 17, [](const OpContext& c) { return window_fn(c, {0.5, -0.5}); }, {"output_datatype", "periodic"}},
      {"HammingWindow", 17, 17, [](const OpContext& c) { return window_fn(c, {25.0 / 46, -21.0 / 46}); },
       {"output_datatype", "periodic"}},
      {"BlackmanWindow", 17, 17, [](const OpContext& c) { return window_fn(c, {0.42, -0.5, 0.08}); },
       {"output_datatype", "periodic"}},
      {"ScatterND", 11, 17, onnx_scatter_nd, {"reduction"}, check_scatter},
      {"MaxUnpool", 9, 17, onnx_max_unpool, {"kernel_shape", "pads", "strides"}},
      {"ReverseSequence", 10, 17, onnx_reverse_sequence, {"batch_axis", "time_axis"}},
      {"RNN", 7, 17, [](const OpContext& c) { return recurrent(c, Cell::Rnn); },
       {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"}, check_recurrent},
      {"GRU", 7, 17, [](const OpContext& c) { return recurrent(c, Cell::Gru); },
       {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout",
        "linear_before_reset"}, check_recurrent},
      {"LSTM", 7, 17, [](const OpContext& c) { return recurrent(c, Cell::Lstm); },
       {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget",
        "layout"}, check_recurrent},
      {"NonMaxSuppression", 10, 17, onnx_non_max_suppression, {"center_point_box"}},
      {"Unique", 11, 17, onnx_unique, {"axis", "sorted"}},
      {"GridSample", 16, 17, onnx_grid_sample, {"align_corners", "mode", "padding_mode"}, check_grid_sample},
      {"NegativeLogLikelihoodLoss", 12, 17, onnx_nll, {"ignore_index", "reduction"}},
      {"SoftmaxCrossEntropyLoss", 12, 17, onnx_softmax_cross_entropy, {"ignore_index", "reduction"}},
  };
  return table;
}
// clang-format on

const OpEntry* find_op(const std::string& op_type, int since_version) {
  for (const OpEntry& e : op_table()) {
    if (op_type == e.op_type && since_version >= e.first && since_version <= e.last) return &e;
  }
  return nullptr;
}

}  // namespace brisk::onnx::detail
