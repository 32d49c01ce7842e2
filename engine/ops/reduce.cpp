// engine/ops/reduce.cpp: the reductions (sum, nansum, amax/amin, var, argmax/argmin, logsumexp),
// softmax/log_softmax and the losses (cross_entropy, fused with log_softmax, and mse_loss), one
// block per op: inference, backward formula, OpDef row, public function. Backward formulas are
// written with ordinary ops, so they run on every device and differentiate again; mean, std,
// max/min, sum_to and mse_loss are composites with no OpDef of their own. Semantics follow
// PyTorch: empty dims = all dims, keepdim, negative dims.
// Not here: the kernels (kernels/<device>/reduce.*) and their arithmetic (kernels/reduce_ops.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;
using P = CastPolicy;

// ---- dims
// Bit d set: dim d of an ndim-dim tensor is reduced. Empty dims: all of them. A 0-dim tensor
// accepts dim 0 and -1 (and has nothing to reduce), as in PyTorch.
uint32_t reduced_mask(int ndim, const Shape& dims, const char* op) {
  const uint32_t all = ndim == 0 ? 0u : (1u << ndim) - 1u;
  if (dims.empty()) return all;
  uint32_t bits = 0;
  for (int64_t d : dims) {
    const uint32_t bit = 1u << wrap_dim(d, ndim, op);
    BRISK_CHECK(!(bits & bit), op, ": dim ", d, " appears more than once in dims ", dims);
    bits |= bit;
  }
  return bits & all;
}

Shape reduced_shape(const Shape& sizes, uint32_t bits, bool keepdim) {
  Shape out;
  for (int d = 0; d < sizes.size(); ++d) {
    if (!((bits >> d) & 1u)) {
      out.push_back(sizes[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// Number of elements that reduce into each output.
int64_t reduced_count(const Shape& sizes, uint32_t bits) {
  int64_t n = 1;
  for (int d = 0; d < sizes.size(); ++d) {
    if ((bits >> d) & 1u) n *= sizes[d];
  }
  return n;
}

// max, min, argmax, argmin have no identity: every output needs at least one element.
void check_nonempty(const Tensor& x, uint32_t bits, const Shape& out, const Attrs& a, const char* op) {
  BRISK_CHECK(reduced_count(x.sizes(), bits) > 0 || out.numel() == 0, op, ": cannot reduce input ", x.str(),
              " over dims ", a.dims, " (one has size 0): the ", op, " of no elements is undefined");
}

void check_floating_input(const Tensor& x, const char* op) {
  BRISK_CHECK(is_floating(x.dtype()), op, ": needs a floating input, got ", x.str());
}

// The output of a reduction over attrs.dims: x's dtype (or `dtype`), reduced shape.
TensorSpec reduced_spec(const Tensor& x, const Attrs& a, const char* op, DType dtype) {
  return {reduced_shape(x.sizes(), reduced_mask(x.dim(), a.dims, op), a.keepdim), dtype};
}

// Attrs of a reduction over `dims` of x, with dims checked, wrapped and sorted (empty: all).
Attrs reduce_attrs(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  BRISK_CHECK(x.defined(), op, ": undefined input");
  Attrs a;
  const uint32_t bits = reduced_mask(x.dim(), dims, op);
  if (!dims.empty()) {
    for (int d = 0; d < x.dim(); ++d) {
      if ((bits >> d) & 1u) a.dims.push_back(d);
    }
  }
  a.keepdim = keepdim;
  return a;
}

Tensor reduce_call(OpId id, const Tensor& x, const Shape& dims, bool keepdim) {
  return call1(id, {x}, reduce_attrs(x, dims, keepdim, op_name(id)));
}

// ---- helpers for backward formulas
const Tensor& g0(const BackwardCtx& c) { return c.grads[0]; }
const Shape& input_sizes(const BackwardCtx& c) { return c.in_specs[0].sizes; }

// A reduction's output (or its gradient) in keepdim form, so that it broadcasts against the input.
Tensor as_keepdim(const BackwardCtx& c, const Tensor& t, const char* op) {
  if (c.attrs.keepdim) return t;
  const Shape& sizes = input_sizes(c);
  return reshape(t, reduced_shape(sizes, reduced_mask(sizes.size(), c.attrs.dims, op), true));
}

// ---- sum: integers and Bool sum to I64
template <OpId Id>
void sum_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  out[0] = reduced_spec(x, a, op_name(Id), is_floating(x.dtype()) ? x.dtype() : DType::I64);
}

void sum_bw(const BackwardCtx& c, std::span<Tensor> gi) { gi[0] = expand(as_keepdim(c, g0(c), "sum"), input_sizes(c)); }

const OpDef kSum{.infer = sum_infer<OpId::Sum>, .backward = sum_bw, .autocast = P::Fp32};

// ---- nansum: sum's shape and dtype; NaN elements count as 0 and get no gradient (as PyTorch:
// the gradient times x == x)
void nansum_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  gi[0] = expand(as_keepdim(c, g0(c), "nansum"), input_sizes(c)) * cast(eq(x, x), x.dtype());
}
const OpDef kNansum{
    .infer = sum_infer<OpId::Nansum>, .backward = nansum_bw, .save_inputs = mask(0), .autocast = P::Fp32};

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) { return reduce_call(OpId::Sum, x, dims, keepdim); }
Tensor nansum(const Tensor& x, const Shape& dims, bool keepdim) { return reduce_call(OpId::Nansum, x, dims, keepdim); }

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  BRISK_CHECK(x.defined(), "mean: undefined input");
  BRISK_CHECK(is_floating(x.dtype()), "mean: needs a floating input, got ", x.str(), " (cast it first)");
  if (is_reduced_float(x.dtype())) {
    // A 16-bit sum can overflow where the mean would not: sum in F32, round once.
    return cast(mean(cast(x, DType::F32), dims, keepdim), x.dtype());
  }
  const int64_t n = reduced_count(x.sizes(), reduced_mask(x.dim(), dims, "mean"));
  return sum(x, dims, keepdim) / double(n);  // empty: 0 / 0 = NaN, as in PyTorch
}

// Sums the dims that broadcasting added (leading) or stretched (size 1 in `shape`); a plain
// view when only size-1 leading dims differ, and x itself when nothing does.
Tensor sum_to(const Tensor& x, const Shape& shape) {
  BRISK_CHECK(x.defined(), "sum_to: undefined input");
  if (x.sizes() == shape) return x;
  const int lead = x.dim() - shape.size();
  BRISK_CHECK(lead >= 0, "sum_to: cannot sum ", x.str(), " to the larger rank shape ", shape);
  Shape dims;
  for (int d = 0; d < x.dim(); ++d) {
    const int64_t have = x.sizes()[d];
    if (d < lead) {
      if (have != 1) dims.push_back(d);
      continue;
    }
    const int64_t want = shape[d - lead];
    BRISK_CHECK(want == have || want == 1, "sum_to: ", x.str(), " does not broadcast from ", shape, " (dim ", d, ": ",
                have, " vs ", want, ")");
    if (want == 1 && have != 1) dims.push_back(d);
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(sum(x, dims, true), shape);
}

namespace {

// ---- amax, amin (max/min are exact in every dtype: autocast leaves them alone, as PyTorch)
template <OpId Id>
void extremum_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  const char* op = op_name(Id);
  const TensorSpec spec = reduced_spec(x, a, op, x.dtype());
  check_nonempty(x, reduced_mask(x.dim(), a.dims, op), spec.sizes, a, op);
  out[0] = spec;
}

// Tied extremes share the gradient evenly, as PyTorch's amax/amin; where the result is NaN no
// element equals it, so the gradient is NaN (0 / 0), as theirs. attrs.flag (set by max(x) and
// min(x), PyTorch's torch.max(x)) makes the NaN elements share it instead.
template <OpId Id>
void extremum_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const char* op = op_name(Id);
  const Tensor& x = c.inputs[0];
  Tensor y = as_keepdim(c, c.outputs[0], op);
  Tensor hit = cast(eq(x, y), x.dtype());
  if (c.attrs.flag) hit = hit + cast(ne(x, x), x.dtype()) * cast(ne(y, y), x.dtype());
  Tensor count = sum(hit, c.attrs.dims, true);
  gi[0] = as_keepdim(c, g0(c), op) * hit / count;
}

template <OpId Id>
constexpr OpDef kExtremum{.infer = extremum_infer<Id>,
                          .backward = extremum_bw<Id>,
                          .save_inputs = mask(0),    // x
                          .save_outputs = mask(0)};  // y

// amax / amin of everything, with torch.max(x)'s gradient at a NaN result (see extremum_bw).
Tensor extremum_all(OpId id, const Tensor& x) {
  Attrs a = reduce_attrs(x, {}, false, id == OpId::Amax ? "max" : "min");
  a.flag = true;
  return call1(id, {x}, a);
}

}  // namespace

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return reduce_call(OpId::Amax, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return reduce_call(OpId::Amin, x, dims, keepdim); }
Tensor max(const Tensor& x) { return extremum_all(OpId::Amax, x); }
Tensor min(const Tensor& x) { return extremum_all(OpId::Amin, x); }

namespace {

// ---- var: attrs.a = correction (1 = unbiased)
void var_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  check_floating_input(in[0], "var");
  out[0] = reduced_spec(in[0], a, "var", in[0].dtype());
}

// d var / dx = 2 (x - mean) / (n - correction).
void var_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  const Shape& sizes = input_sizes(c);
  const int64_t n = reduced_count(sizes, reduced_mask(sizes.size(), c.attrs.dims, "var"));
  const double divisor = std::max(0.0, double(n) - c.attrs.a);
  Tensor centered = x - mean(x, c.attrs.dims, true);
  gi[0] = as_keepdim(c, g0(c), "var") * centered * (2.0 / divisor);
}

const OpDef kVar{.infer = var_infer, .backward = var_bw, .save_inputs = mask(0), .autocast = P::Fp32};

}  // namespace

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  Attrs a = reduce_attrs(x, dims, keepdim, "var");
  a.a = double(correction);
  return call1(OpId::Var, {x}, a);
}

// sqrt(var) with PyTorch's conventions: for F32 and 16-bit inputs the variance is taken in F64
// and the root rounded once (as PyTorch's CPU kernel accumulates in double), so that a variance
// beyond the dtype's range (|x| ~ 1e20 in F32) or below it (denormals) still gives the right
// std; and the gradient is 0 where the std is 0 (PyTorch masks it), not 0 * inf = NaN.
Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  BRISK_CHECK(x.defined(), "std: undefined input");
  const bool widen = is_floating(x.dtype()) && x.dtype() != DType::F64;
  Tensor v = var(widen ? cast(x, DType::F64) : x, dims, correction, keepdim);
  Tensor zero = eq(v, scalar_tensor(0.0, v.dtype(), v.device()));
  Tensor s = where(zero, zeros_like(v), sqrt(masked_fill(v, zero, 1.0)));  // no sqrt'(0) = inf in backward
  return widen ? cast(s, x.dtype()) : s;
}

namespace {

// ---- argmax, argmin: over attrs.dim, or with attrs.flag over all elements (a flat index).
// Not differentiable.
template <OpId Id>
void arg_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  const char* op = op_name(Id);
  BRISK_CHECK(x.dtype() != DType::Bool, op, ": no kernel for dtype Bool (", x.str(), ")");
  const uint32_t all = x.dim() == 0 ? 0u : (1u << x.dim()) - 1u;
  const uint32_t bits = a.flag ? all : (1u << wrap_dim(a.dim, x.dim(), op)) & all;
  const Shape shape = (a.flag && !a.keepdim) ? Shape{} : reduced_shape(x.sizes(), bits, a.keepdim);
  check_nonempty(x, bits, shape, a, op);
  out[0] = {shape, DType::I64};
}

template <OpId Id>
constexpr OpDef kArg{.infer = arg_infer<Id>};

Tensor arg_call(OpId id, const Tensor& x, int64_t dim, bool keepdim, bool flat) {
  BRISK_CHECK(x.defined(), op_name(id), ": undefined input");
  Attrs a;
  a.dim = flat ? 0 : wrap_dim(dim, x.dim(), op_name(id));
  a.keepdim = keepdim;
  a.flag = flat;
  return call1(id, {x}, a);
}

}  // namespace

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return arg_call(OpId::Argmax, x, dim, keepdim, false); }
Tensor argmax(const Tensor& x) { return arg_call(OpId::Argmax, x, 0, false, true); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return arg_call(OpId::Argmin, x, dim, keepdim, false); }

namespace {

// ---- softmax, log_softmax over attrs.dim
template <OpId Id>
void softmax_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  check_floating_input(x, op_name(Id));
  wrap_dim(a.dim, x.dim(), op_name(Id));
  out[0] = {x.sizes(), x.dtype()};
}

void softmax_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  const Tensor& g = g0(c);
  gi[0] = y * (g - sum(g * y, {c.attrs.dim}, true));
}

void log_softmax_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& y = c.outputs[0];
  const Tensor& g = g0(c);
  gi[0] = g - exp(y) * sum(g, {c.attrs.dim}, true);
}

const OpDef kSoftmax{.infer = softmax_infer<OpId::Softmax>,
                     .backward = softmax_bw,
                     .save_outputs = mask(0),  // y
                     .autocast = P::Fp32};
const OpDef kLogSoftmax{.infer = softmax_infer<OpId::LogSoftmax>,
                        .backward = log_softmax_bw,
                        .save_outputs = mask(0),  // y
                        .autocast = P::Fp32};

Tensor softmax_call(OpId id, const Tensor& x, int64_t dim) {
  BRISK_CHECK(x.defined(), op_name(id), ": undefined input");
  Attrs a;
  a.dim = wrap_dim(dim, x.dim(), op_name(id));
  return call1(id, {x}, a);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_call(OpId::Softmax, x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_call(OpId::LogSoftmax, x, dim); }

namespace {

// ---- logsumexp over attrs.dims, as torch.logsumexp: every element -inf gives -inf, a +inf
// gives +inf, NaN propagates, no elements give -inf (kernels: RowLse::logsumexp).
void logsumexp_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  check_floating_input(in[0], "logsumexp");
  out[0] = reduced_spec(in[0], a, "logsumexp", in[0].dtype());
}

// d/dx = exp(x - y): the softmax over the reduced dims, as PyTorch's logsumexp_backward.
void logsumexp_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  const Tensor y = as_keepdim(c, c.outputs[0], "logsumexp");
  gi[0] = as_keepdim(c, g0(c), "logsumexp") * exp(x - y);
}

const OpDef kLogsumexp{.infer = logsumexp_infer,
                       .backward = logsumexp_bw,
                       .save_inputs = mask(0),   // x
                       .save_outputs = mask(0),  // y
                       .autocast = P::Fp32};

}  // namespace

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_call(OpId::Logsumexp, x, dims, keepdim);
}

namespace {

// ---- cross_entropy: (logits (N, C), target I64 (N)) -> loss, fused with log_softmax; its
// parameters are CrossEntropyParams (engine/op_params.h).
// Shape of the loss: (N) without reduction, 0-dim with one.
Shape ce_output_shape(const Tensor& logits, const CrossEntropyParams& p) {
  return p.reduction == Reduction::None ? Shape{logits.sizes()[0]} : Shape{};
}

void check_ce_inputs(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p, const char* op) {
  BRISK_CHECK(logits.dim() == 2 && is_floating(logits.dtype()), op, ": logits must be floating (N, C), got ",
              logits.str());
  BRISK_CHECK(target.dtype() == DType::I64 && target.dim() == 1 && target.sizes()[0] == logits.sizes()[0], op,
              ": target must be I64 class indices of shape (", logits.sizes()[0], ") for logits ", logits.str(),
              ", got ", target.str());
  BRISK_CHECK(p.label_smoothing >= 0 && p.label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ",
              p.label_smoothing);
}

// The rows' logsumexp that cross_entropy saves: F32, F64 for F64 logits.
DType lse_dtype(DType logits) { return logits == DType::F64 ? DType::F64 : DType::F32; }

void ce_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  const CrossEntropyParams p = CrossEntropyParams::from(a);
  check_ce_inputs(in[0], in[1], p, "cross_entropy");
  out[0] = {ce_output_shape(in[0], p), in[0].dtype()};
  out[1] = {Shape{in[0].sizes()[0]}, lse_dtype(in[0].dtype())};
}

// Note [Cross-entropy saves the logsumexp]
// The forward computes each row's logsumexp anyway; saving it (N values) lets the backward
// write softmax - onehot in one pass over the logits (one exp per element) instead of two
// (the row's logsumexp again, then the exp). Over a 50257-word vocabulary that is the largest
// elementwise pass of a small GPT's step. Gradients never flow into the saved lse (a gradient
// reaching it is dropped: it is an internal output, not returned by cross_entropy).
void cross_entropy_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (!c.grads[0].defined()) return;
  gi[0] = call1(OpId::CrossEntropyBackward, {c.grads[0], c.inputs[0], c.inputs[1], c.outputs[1]}, c.attrs);
}

const OpDef kCrossEntropy{.infer = ce_infer,
                          .backward = cross_entropy_bw,
                          .save_inputs = mask(0, 1),  // logits, target
                          .save_outputs = mask(1),    // lse
                          .diff_inputs = mask(0),     // logits
                          .autocast = P::Fp32};

// ---- cross_entropy_backward: (grad, logits, target) -> dlogits; CrossEntropyParams as above
void ce_backward_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  const Tensor& grad = in[0];
  const Tensor& logits = in[1];
  const CrossEntropyParams p = CrossEntropyParams::from(a);
  check_ce_inputs(logits, in[2], p, "cross_entropy_backward");
  BRISK_CHECK(grad.dtype() == logits.dtype() && grad.sizes() == ce_output_shape(logits, p),
              "cross_entropy_backward: grad ", grad.str(), " does not match the loss of logits ", logits.str());
  BRISK_CHECK(in[3].dtype() == lse_dtype(logits.dtype()) && in[3].sizes() == Shape{logits.sizes()[0]},
              "cross_entropy_backward: lse ", in[3].str(), " does not match logits ", logits.str(), " (expected (",
              logits.sizes()[0], ") of ", dtype_name(lse_dtype(logits.dtype())), ")");
  out[0] = {logits.sizes(), logits.dtype()};
}

// Note [Cross-entropy double backward]
// cross_entropy_backward(g, logits, t) = s_i (p_i - q_i) on non-ignored rows, where p = softmax
// (logits), q the smoothed one-hot target and s_i the per-row scale (g_i, g, or g / valid rows).
// It is linear in g, and its derivative in the logits is the softmax Jacobian scaled by s_i:
//   d/dg:      sum over (i, c) of gg * (p - q) on valid rows (per row for reduction None)
//   d/dlogits: s_i p_i (gg_i - <gg_i, p_i>)
// (p - q) on valid rows is this op itself with g = ones and reduction None.
void cross_entropy_backward_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& grad = c.inputs[0];
  const Tensor& logits = c.inputs[1];
  const Tensor& target = c.inputs[2];
  const Tensor& gg = g0(c);
  const CrossEntropyParams p = CrossEntropyParams::from(c.attrs);
  const Tensor ignore = scalar_tensor(double(p.ignore_index), DType::I64, target.device());
  const Tensor valid = cast(ne(target, ignore), logits.dtype());
  const Tensor n_valid = sum(valid);
  if (c.needs_grad(0)) {
    CrossEntropyParams unit = p;
    unit.reduction = Reduction::None;
    Attrs unit_attrs = c.attrs;
    unit.store(unit_attrs);
    Tensor ones_n = ones({logits.sizes()[0]}, logits.dtype(), logits.device());
    Tensor p_minus_q = call1(OpId::CrossEntropyBackward, {ones_n, logits, target, c.inputs[3]}, unit_attrs);
    Tensor per_row = sum(gg * p_minus_q, {1});
    if (p.reduction == Reduction::None) {
      gi[0] = per_row;
    } else if (p.reduction == Reduction::Sum) {
      gi[0] = sum(per_row);
    } else {
      gi[0] = sum(per_row) / n_valid;
    }
  }
  if (c.needs_grad(1)) {
    Tensor scale = p.reduction == Reduction::Mean ? grad / n_valid : grad;
    Tensor row_scale = unsqueeze(scale * valid, 1);
    Tensor prob = softmax(logits, 1);
    gi[1] = row_scale * prob * (gg - sum(gg * prob, {1}, true));
  }
}

const OpDef kCrossEntropyBackward{.infer = ce_backward_infer,
                                  .backward = cross_entropy_backward_bw,
                                  .save_inputs = mask(0, 1, 2, 3),  // grad, logits, target, lse
                                  .diff_inputs = mask(0, 1),        // grad, logits
                                  .autocast = P::Fp32};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, double label_smoothing,
                     int64_t ignore_index) {
  BRISK_CHECK(logits.defined() && target.defined(), "cross_entropy: undefined input");
  if (logits.dim() == 1) {
    // One sample: logits (C), target 0-dim.
    BRISK_CHECK(target.dim() == 0, "cross_entropy: logits ", logits.str(), " (one sample) need a 0-dim target, got ",
                target.str());
    Tensor loss = cross_entropy(unsqueeze(logits, 0), unsqueeze(target, 0), reduction, label_smoothing, ignore_index);
    return reduction == Reduction::None ? squeeze(loss, 0) : loss;
  }
  if (logits.dim() > 2) {
    // (N, C, d1, ...) with target (N, d1, ...): classes to the last dim, one row per position.
    Shape expected = logits.sizes();
    expected.erase(1);
    BRISK_CHECK(target.sizes() == expected, "cross_entropy: target ", target.str(), " does not match logits ",
                logits.str(), " (expected target shape ", expected, ")");
    Shape perm;
    perm.push_back(0);
    for (int d = 2; d < logits.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    Tensor rows = reshape(permute(logits, perm), {target.numel(), logits.sizes()[1]});
    Tensor loss = cross_entropy(rows, reshape(target, {target.numel()}), reduction, label_smoothing, ignore_index);
    return reduction == Reduction::None ? reshape(loss, target.sizes()) : loss;
  }
  Attrs a;
  CrossEntropyParams{.ignore_index = ignore_index, .label_smoothing = label_smoothing, .reduction = reduction}.store(a);
  Tensor out[2];
  const Tensor in[2] = {logits, target};
  call(OpId::CrossEntropy, in, a, out);
  return out[0];
}

// ---- mse_loss (composite)
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  BRISK_CHECK(input.defined() && target.defined(), "mse_loss: undefined input");
  // PyTorch broadcasts here with a warning; a silent (N) vs (N, 1) broadcast is a classic bug.
  BRISK_CHECK(input.sizes() == target.sizes(), "mse_loss: input ", input.str(), " and target ", target.str(),
              " have different shapes");
  Tensor d = input - target;
  Tensor sq = d * d;
  if (reduction == Reduction::None) return sq;
  if (reduction == Reduction::Sum) return sum(sq);
  return mean(sq);
}

// ---- composites: values with indices, logical reductions, tests, norms, one_hot
static SortResult extremum_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  Tensor idx = is_max ? argmax(x, dim, true) : argmin(x, dim, true);
  if (x.dim() == 0) return {clone(x), keepdim ? idx : idx.reshape({})};
  Tensor v = gather(x, dim, idx);  // gradient to the chosen element, as torch.max(x, dim)
  if (!keepdim) {
    v = squeeze(v, dim);
    idx = squeeze(idx, dim);
  }
  return {v, idx};
}
SortResult max(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(x, dim, keepdim, true); }
SortResult min(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(x, dim, keepdim, false); }

static Tensor count_nonzero_in(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  BRISK_CHECK(x.defined(), op, ": undefined input");
  Tensor nz = ne(x, zeros({}, x.dtype(), x.device()));
  return sum(cast(nz, DType::I64), dims, keepdim);
}
Tensor any(const Tensor& x) { return gt(count_nonzero_in(x, {}, false, "any"), zeros({}, DType::I64, x.device())); }
Tensor any(const Tensor& x, int64_t dim, bool keepdim) {
  return gt(count_nonzero_in(x, {dim}, keepdim, "any"), zeros({}, DType::I64, x.device()));
}
Tensor all(const Tensor& x) {
  return eq(count_nonzero_in(x, {}, false, "all"), full({}, double(x.numel()), DType::I64, x.device()));
}
Tensor all(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(wrap_dim(dim, x.dim(), "all"))];
  return eq(count_nonzero_in(x, {dim}, keepdim, "all"), full({}, double(n), DType::I64, x.device()));
}

Tensor isnan(const Tensor& x) {
  BRISK_CHECK(x.defined(), "isnan: undefined input");
  if (!is_floating(x.dtype())) return zeros(x.sizes(), DType::Bool, x.device());
  return ne(x, x);
}
Tensor isfinite(const Tensor& x) {
  BRISK_CHECK(x.defined(), "isfinite: undefined input");
  if (!is_floating(x.dtype())) return ones(x.sizes(), DType::Bool, x.device());
  Tensor d = x.detach();
  return eq(d - d, zeros({}, x.dtype(), x.device()));  // inf - inf and NaN - NaN are NaN
}
Tensor isinf(const Tensor& x) {
  BRISK_CHECK(x.defined(), "isinf: undefined input");
  if (!is_floating(x.dtype())) return zeros(x.sizes(), DType::Bool, x.device());
  Tensor big = full({}, std::numeric_limits<double>::infinity(), x.dtype(), x.device());
  return eq(abs(x.detach()), big);
}

Tensor norm(const Tensor& x, double p, const Shape& dims, bool keepdim) {
  BRISK_CHECK(x.defined(), "norm: undefined input");
  BRISK_CHECK(is_floating(x.dtype()), "norm: expects a floating tensor, got ", x.str());
  BRISK_CHECK(p > 0, "norm: p must be positive (1, 2, inf, ...), got ", p);
  if (std::isinf(p)) return amax(abs(x), dims, keepdim);
  if (p == 1) return sum(abs(x), dims, keepdim);
  if (p == 2) {
    // sqrt(sum x^2) with the gradient 0 (not NaN) at a zero vector, as PyTorch's subgradient.
    Tensor s = sum(x * x, dims, keepdim);
    Tensor zero = eq(s, zeros_like(s));
    return where(zero, zeros_like(s), sqrt(masked_fill(s, zero, 1.0)));
  }
  return pow(sum(pow(abs(x), p), dims, keepdim), 1.0 / p);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  BRISK_CHECK(indices.defined() && indices.dtype() == DType::I64,
              "one_hot: expects an I64 tensor of class indices, got ",
              indices.defined() ? indices.str() : std::string("undefined"));
  if (indices.numel() > 0) {
    const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
    BRISK_CHECK(lo >= 0, "one_hot: class indices must be non-negative, got ", lo);
    if (num_classes < 0) num_classes = hi + 1;
    BRISK_CHECK(hi < num_classes, "one_hot: class index ", hi, " is out of range for num_classes ", num_classes);
  } else {
    BRISK_CHECK(num_classes >= 0, "one_hot: cannot infer num_classes from an empty tensor");
  }
  Tensor classes = arange(num_classes, DType::I64, indices.device());
  return cast(eq(indices.unsqueeze(-1), classes), DType::I64);
}

namespace detail {

void define_reduce_ops() {
  define(OpId::Sum, kSum);
  define(OpId::Nansum, kNansum);
  define(OpId::Amax, kExtremum<OpId::Amax>);
  define(OpId::Amin, kExtremum<OpId::Amin>);
  define(OpId::Var, kVar);
  define(OpId::Argmax, kArg<OpId::Argmax>);
  define(OpId::Argmin, kArg<OpId::Argmin>);
  define(OpId::Softmax, kSoftmax);
  define(OpId::LogSoftmax, kLogSoftmax);
  define(OpId::Logsumexp, kLogsumexp);
  define(OpId::CrossEntropy, kCrossEntropy);
  define(OpId::CrossEntropyBackward, kCrossEntropyBackward);
}

}  // namespace detail

}  // namespace brisk
