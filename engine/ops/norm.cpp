// engine/ops/norm.cpp: OpDefs of the normalization ops, layer_norm and batch_norm: inference
// (shape and dtype checks that name the op and the shapes), backward formulas written with
// ordinary ops (so they run on every device and differentiate again), autocast policy Fp32;
// one block per op. Parameters: LayerNormParams, BatchNormParams (engine/op_params.h).
// Then the public forms rms_norm, layer_norm, batch_norm (with the running-statistics update,
// Note [Running statistics]) and group_norm.
// Not here: the kernels (kernels/<device>/norm.cpp), the layers (nn/layers.h).
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;

// Statistics (mean, rstd) are F64 for F64 inputs and F32 otherwise (see ops.def).
DType stat_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

void check_param(const Tensor& p, const Shape& want, DType dtype, const char* op, const char* what, const Tensor& x) {
  BRISK_CHECK(p.sizes() == want, op, ": ", what, " has shape ", p.sizes(), " but the input ", x.sizes(), " needs ",
              want);
  BRISK_CHECK(p.dtype() == dtype, op, ": ", what, " is ", p.str(), " but the input is ", x.str());
}

// Note [Normalization backward]
// With xhat = (x - mean) * rstd over a group of N elements (a row for layer norm, a channel
// over (B, *) for batch norm) and y = xhat * w + b:
//   gxhat = gy * w
//   gx    = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
//   gw    = sum over the other dims of gy * xhat,  gb = sum of gy.
// mean and rstd are outputs too (saved for backward); in double backward gradients reach
// them, so the formula also adds what flows into them, with d mean/dx = 1/N and
// d rstd/dx = -rstd^2 * xhat / N. Batch norm in eval mode uses fixed running statistics:
// gx = gy * w * rstd.

// gx contribution of gradients flowing into the saved mean/rstd outputs (double backward).
// gm, gr broadcast like mean/rstd; either may be undefined.
Tensor stats_grad(const Tensor& gm, const Tensor& gr, const Tensor& xhat, const Tensor& rstd, double n) {
  Tensor gx;
  if (gm.defined()) gx = expand(gm / n, xhat.sizes());
  if (gr.defined()) {
    Tensor t = gr * rstd * rstd * xhat * (-1.0 / n);
    gx = gx.defined() ? gx + t : t;
  }
  return gx;
}

// ---- layer_norm: x (*, N1..Nd), weight/bias (N1..Nd) -> y like x, mean/rstd (*, 1..1)
void layer_norm_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  const LayerNormParams p = LayerNormParams::from(attrs);
  BRISK_CHECK(is_floating(x.dtype()), "layer_norm: input must be floating, got ", x.str());
  BRISK_CHECK(p.normalized_dims >= 1 && p.normalized_dims <= x.dim(), "layer_norm: cannot normalize over the last ",
              p.normalized_dims, " dims of an input of shape ", x.sizes());
  const int lead = x.dim() - int(p.normalized_dims);
  Shape normalized;
  Shape stats = x.sizes();
  for (int d = lead; d < x.dim(); ++d) {
    normalized.push_back(x.sizes()[d]);
    stats[d] = 1;
  }
  check_param(in[1], normalized, x.dtype(), "layer_norm", "weight", x);
  check_param(in[2], normalized, x.dtype(), "layer_norm", "bias", x);
  BRISK_CHECK(p.eps >= 0, "layer_norm: eps must be non-negative, got ", p.eps);
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {stats, stat_dtype(x.dtype())};
  out[2] = {stats, stat_dtype(x.dtype())};
}

// Note [Fused layer norm backward]
// As batch norm's (Note [Fused batch norm backward]): when no gradient of the backward itself
// is wanted, none reached the saved statistics and the device has the kernel, one
// layer_norm_backward op gives (gx, gw, gb) in one pass per row (gx from the row's two sums,
// gw and gb summed over fixed blocks of rows, so the result does not depend on the number of
// threads) instead of the formula's dozen passes. rms_norm does the same with rms_norm_backward.
bool fused_norm_backward(const BackwardCtx& c, OpId backward_op, int n_stats) {
  if (GradMode::enabled() || !c.grads[0].defined()) return false;
  for (int i = 1; i <= n_stats; ++i) {
    if (c.grads[size_t(i)].defined()) return false;
  }
  return op_def(backward_op).kernels[int(c.device.type)] != nullptr;
}

// Runs the fused backward op and keeps the gradients that are wanted.
void run_fused_norm_backward(const BackwardCtx& c, OpId backward_op, std::span<const Tensor> in, std::span<Tensor> gi) {
  Tensor out[3];
  call(backward_op, in, c.attrs, std::span<Tensor>(out, gi.size()));
  for (size_t i = 0; i < gi.size(); ++i) {
    if (c.needs_grad(int(i))) gi[i] = out[i];
  }
}

void layer_norm_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& mu = c.outputs[1];
  const Tensor& rstd = c.outputs[2];
  const Tensor& gy = c.grads[0];
  if (fused_norm_backward(c, OpId::LayerNormBackward, 2)) {
    const Tensor in[5] = {gy, x, w, mu, rstd};
    run_fused_norm_backward(c, OpId::LayerNormBackward, in, gi);
    return;
  }
  const int nd = int(LayerNormParams::from(c.attrs).normalized_dims);
  const int ndim = x.dim();
  Shape norm_dims, lead_dims;
  for (int d = 0; d < ndim; ++d) (d < ndim - nd ? lead_dims : norm_dims).push_back(d);
  const double n = double(c.in_specs[1].sizes.numel());
  Tensor xhat = (x - mu) * rstd;
  // Sums over the leading dims: with none, the gradient already has the parameter's shape.
  auto sum_lead = [&](const Tensor& t) { return lead_dims.empty() ? t : sum(t, lead_dims); };
  if (gy.defined()) {
    if (c.needs_grad(0)) {
      Tensor gxhat = gy * w;
      gi[0] = rstd * (gxhat - mean(gxhat, norm_dims, true) - xhat * mean(gxhat * xhat, norm_dims, true));
    }
    if (c.needs_grad(1)) gi[1] = sum_lead(gy * xhat);
    if (c.needs_grad(2)) gi[2] = sum_lead(gy);
  }
  if (c.needs_grad(0)) {
    Tensor extra = stats_grad(c.grads[1], c.grads[2], xhat, rstd, n);
    if (extra.defined()) gi[0] = gi[0].defined() ? gi[0] + extra : extra;
  }
}

const OpDef kLayerNorm{.infer = layer_norm_infer,
                       .backward = layer_norm_bw,
                       .save_inputs = mask(0, 1),     // x, weight
                       .save_outputs = mask(1, 2),    // mean, rstd
                       .diff_inputs = mask(0, 1, 2),  // x, weight, bias
                       .autocast = CastPolicy::Fp32};

// ---- layer_norm_backward: (gy, x, weight, mean, rstd) -> (gx, gw, gb); LayerNormParams
// Shapes of the normalized dims and the statistics (the normalized dims kept as 1) of x.
void norm_shapes(const Tensor& x, int64_t normalized_dims, const char* op, Shape& normalized, Shape& stats) {
  BRISK_CHECK(is_floating(x.dtype()), op, ": input must be floating, got ", x.str());
  BRISK_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(), op, ": cannot normalize over the last ",
              normalized_dims, " dims of an input of shape ", x.sizes());
  normalized = {};
  stats = x.sizes();
  for (int d = x.dim() - int(normalized_dims); d < x.dim(); ++d) {
    normalized.push_back(x.sizes()[d]);
    stats[d] = 1;
  }
}

void check_like(const Tensor& t, const Shape& sizes, DType dtype, const char* op, const char* what, const Tensor& x) {
  BRISK_CHECK(t.sizes() == sizes && t.dtype() == dtype, op, ": ", what, " ", t.str(), " does not match the input ",
              x.str(), " (expected ", sizes, " of ", dtype_name(dtype), ")");
}

void layer_norm_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor& x = in[1];
  Shape normalized, stats;
  norm_shapes(x, LayerNormParams::from(attrs).normalized_dims, "layer_norm_backward", normalized, stats);
  check_like(in[0], x.sizes(), x.dtype(), "layer_norm_backward", "gy", x);
  check_param(in[2], normalized, x.dtype(), "layer_norm_backward", "weight", x);
  check_like(in[3], stats, stat_dtype(x.dtype()), "layer_norm_backward", "mean", x);
  check_like(in[4], stats, stat_dtype(x.dtype()), "layer_norm_backward", "rstd", x);
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {normalized, x.dtype()};
  out[2] = {normalized, x.dtype()};
}

const OpDef kLayerNormBackward{.infer = layer_norm_backward_infer};

// ---- rms_norm: x (*, N1..Nd), weight (N1..Nd) -> y like x, rstd (*, 1..1)
// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) over the normalized dims. Backward
// (as Note [Normalization backward] without the mean): with xhat = x * rstd, gxhat = gy * w,
//   gx = rstd * (gxhat - xhat * mean(gxhat * xhat)),  gw = sum of gy * xhat,
// plus, in double backward, what flows into rstd: d rstd/dx = -rstd^2 * xhat / N.
void rms_norm_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  const LayerNormParams p = LayerNormParams::from(attrs);
  Shape normalized, stats;
  norm_shapes(x, p.normalized_dims, "rms_norm", normalized, stats);
  check_param(in[1], normalized, x.dtype(), "rms_norm", "weight", x);
  BRISK_CHECK(p.eps >= 0, "rms_norm: eps must be non-negative, got ", p.eps);
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {stats, stat_dtype(x.dtype())};
}

void rms_norm_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& rstd = c.outputs[1];
  const Tensor& gy = c.grads[0];
  if (fused_norm_backward(c, OpId::RmsNormBackward, 1)) {
    const Tensor in[4] = {gy, x, w, rstd};
    run_fused_norm_backward(c, OpId::RmsNormBackward, in, gi);
    return;
  }
  const int nd = int(LayerNormParams::from(c.attrs).normalized_dims);
  const int ndim = x.dim();
  Shape norm_dims, lead_dims;
  for (int d = 0; d < ndim; ++d) (d < ndim - nd ? lead_dims : norm_dims).push_back(d);
  const double n = double(c.in_specs[1].sizes.numel());
  Tensor xhat = x * rstd;
  if (gy.defined()) {
    if (c.needs_grad(0)) {
      Tensor gxhat = gy * w;
      gi[0] = rstd * (gxhat - xhat * mean(gxhat * xhat, norm_dims, true));
    }
    if (c.needs_grad(1)) gi[1] = lead_dims.empty() ? gy * xhat : sum(gy * xhat, lead_dims);
  }
  if (c.needs_grad(0)) {
    Tensor extra = stats_grad(Tensor(), c.grads[1], xhat, rstd, n);
    if (extra.defined()) gi[0] = gi[0].defined() ? gi[0] + extra : extra;
  }
}

const OpDef kRmsNorm{.infer = rms_norm_infer,
                     .backward = rms_norm_bw,
                     .save_inputs = mask(0, 1),  // x, weight
                     .save_outputs = mask(1),    // rstd
                     .diff_inputs = mask(0, 1),  // x, weight
                     .autocast = CastPolicy::Fp32};

// ---- rms_norm_backward: (gy, x, weight, rstd) -> (gx, gw); LayerNormParams
void rms_norm_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor& x = in[1];
  Shape normalized, stats;
  norm_shapes(x, LayerNormParams::from(attrs).normalized_dims, "rms_norm_backward", normalized, stats);
  check_like(in[0], x.sizes(), x.dtype(), "rms_norm_backward", "gy", x);
  check_param(in[2], normalized, x.dtype(), "rms_norm_backward", "weight", x);
  check_like(in[3], stats, stat_dtype(x.dtype()), "rms_norm_backward", "rstd", x);
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {normalized, x.dtype()};
}

const OpDef kRmsNormBackward{.infer = rms_norm_backward_infer};

// ---- batch_norm: x (B, C, *), weight/bias/running_mean/running_var (C) -> y like x, mean/rstd (C)
void batch_norm_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor& x = in[0];
  const BatchNormParams p = BatchNormParams::from(attrs);
  BRISK_CHECK(is_floating(x.dtype()), "batch_norm: input must be floating, got ", x.str());
  BRISK_CHECK(x.dim() >= 2, "batch_norm: input must have shape (B, C, *), got ", x.sizes());
  const int64_t channels = x.sizes()[1];
  const Shape c{channels};
  check_param(in[1], c, x.dtype(), "batch_norm", "weight", x);
  check_param(in[2], c, x.dtype(), "batch_norm", "bias", x);
  check_param(in[3], c, x.dtype(), "batch_norm", "running_mean", x);
  check_param(in[4], c, x.dtype(), "batch_norm", "running_var", x);
  BRISK_CHECK(p.eps >= 0, "batch_norm: eps must be non-negative, got ", p.eps);
  if (p.training) {
    const int64_t per_channel = channels == 0 ? 0 : x.numel() / channels;
    BRISK_CHECK(per_channel != 1, "batch_norm: expected more than 1 value per channel when training, got input size ",
                x.sizes());
  }
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {c, stat_dtype(x.dtype())};
  out[2] = {c, stat_dtype(x.dtype())};
}

// Note [Fused batch norm backward]
// The formula above takes about a dozen passes over the activation (xhat, gy * w, two means,
// products, sums); a ResNet's or MobileNet's training step runs one per batch norm layer. When
// no gradient of the backward itself is wanted (grad mode off: not create_graph), no gradient
// reached the saved statistics, and the device has the kernel, the batch_norm_backward op does
// the same in two passes per channel (the sums of gy and gy * xhat, then gx); otherwise the
// formula runs, which differentiates again.
bool fused_batch_norm_backward(const BackwardCtx& c) {
  return !GradMode::enabled() && c.grads[0].defined() && !c.grads[1].defined() && !c.grads[2].defined() &&
         op_def(OpId::BatchNormBackward).kernels[int(c.device.type)] != nullptr;
}

void batch_norm_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& gy = c.grads[0];
  const bool training = BatchNormParams::from(c.attrs).training;
  if (fused_batch_norm_backward(c)) {
    Attrs a;
    a.flag = training;
    const Tensor in[5] = {gy, x, w, c.outputs[1], c.outputs[2]};
    Tensor out[3];
    call(OpId::BatchNormBackward, in, a, out);
    for (int i = 0; i < 3; ++i) {
      if (c.needs_grad(i)) gi[i] = out[i];
    }
    return;
  }
  const int ndim = x.dim();
  const int64_t channels = x.sizes()[1];
  // (C) -> (1, C, 1, ...), to broadcast against x
  Shape bshape = Shape::filled(ndim, 1);
  bshape[1] = channels;
  Shape dims;  // every dim but C
  for (int d = 0; d < ndim; ++d) {
    if (d != 1) dims.push_back(d);
  }
  const Tensor mu = view(c.outputs[1], bshape);
  const Tensor rstd = view(c.outputs[2], bshape);
  const Tensor wb = view(w, bshape);
  Tensor xhat = (x - mu) * rstd;
  if (gy.defined()) {
    if (c.needs_grad(0)) {
      Tensor gxhat = gy * wb;
      if (training) {
        gi[0] = rstd * (gxhat - mean(gxhat, dims, true) - xhat * mean(gxhat * xhat, dims, true));
      } else {
        gi[0] = gxhat * rstd;
      }
    }
    if (c.needs_grad(1)) gi[1] = sum(gy * xhat, dims);
    if (c.needs_grad(2)) gi[2] = sum(gy, dims);
  }
  // In eval mode mean/rstd come from the running statistics, which take no gradient.
  if (c.needs_grad(0) && training) {
    const double n = double(x.numel() / std::max<int64_t>(channels, 1));
    const Tensor gm = c.grads[1].defined() ? view(c.grads[1], bshape) : Tensor();
    const Tensor gr = c.grads[2].defined() ? view(c.grads[2], bshape) : Tensor();
    Tensor extra = stats_grad(gm, gr, xhat, rstd, n);
    if (extra.defined()) gi[0] = gi[0].defined() ? gi[0] + extra : extra;
  }
}

const OpDef kBatchNorm{.infer = batch_norm_infer,
                       .backward = batch_norm_bw,
                       .save_inputs = mask(0, 1),     // x, weight
                       .save_outputs = mask(1, 2),    // mean, rstd
                       .diff_inputs = mask(0, 1, 2),  // x, weight, bias (not the running stats)
                       .autocast = CastPolicy::Fp32};

// ---- batch_norm_backward: (gy, x, weight, mean, rstd) -> (gx, gw, gb)
void batch_norm_backward_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Tensor& x = in[1];
  BRISK_CHECK(is_floating(x.dtype()) && x.dim() >= 2, "batch_norm_backward: x must be floating (B, C, *), got ",
              x.str());
  BRISK_CHECK(in[0].sizes() == x.sizes() && in[0].dtype() == x.dtype(), "batch_norm_backward: gy ", in[0].str(),
              " must match x ", x.str());
  const Shape c{x.sizes()[1]};
  check_param(in[2], c, x.dtype(), "batch_norm_backward", "weight", x);
  check_param(in[3], c, stat_dtype(x.dtype()), "batch_norm_backward", "mean", x);
  check_param(in[4], c, stat_dtype(x.dtype()), "batch_norm_backward", "rstd", x);
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {c, x.dtype()};
  out[2] = {c, x.dtype()};
}

const OpDef kBatchNormBackward{.infer = batch_norm_backward_infer};

}  // namespace

// torch.finfo(dtype).eps: the gap between 1 and the next representable value (rms_norm's
// default eps, as PyTorch's).
double machine_epsilon(DType t) {
  switch (t) {
    case DType::F64: return 2.220446049250313e-16;  // 2^-52
    case DType::F16: return 0.0009765625;           // 2^-10
    case DType::BF16: return 0.0078125;             // 2^-7
    default: return 1.1920928955078125e-07;         // 2^-23
  }
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  BRISK_CHECK(x.defined(), "rms_norm: undefined input");
  const int64_t k = normalized_shape.size();
  bool fits = k >= 1 && x.dim() >= k;
  for (int64_t i = 0; fits && i < k; ++i) fits = x.sizes()[x.dim() - k + i] == normalized_shape[i];
  BRISK_CHECK(fits, "rms_norm: normalized_shape ", normalized_shape, " does not match the trailing dims of input ",
              x.str());
  const double e = eps ? *eps : machine_epsilon(x.dtype());
  BRISK_CHECK(e >= 0, "rms_norm: eps must be non-negative, got ", e);
  Attrs a;
  LayerNormParams{.normalized_dims = k, .eps = e}.store(a);
  // An absent weight is ones (no gradient flows to it), as layer_norm's absent affine.
  const Tensor w = weight.defined() ? weight : ones(normalized_shape, x.dtype(), x.device());
  Tensor out[2];
  const Tensor in[2] = {x, w};
  call(OpId::RmsNorm, in, a, out);
  return out[0];
}

// ==== the public forms (engine/functions.h): layer_norm, batch_norm, group_norm. They check the
// user's arguments against PyTorch's rules, stand in ones/zeros for an absent affine, call the
// layer_norm / batch_norm ops, and batch_norm updates the running statistics; group_norm is a
// composite over the layer_norm op.

namespace {

// The dtype the parameters must have to meet x in op `id`: the one dispatch will run the op in
// (F32 under autocast, whose policy for the norms is Fp32), so that F32 parameters are not
// rounded through a 16-bit x's dtype on the way.
DType param_dtype(OpId id, const Tensor& x) { return dispatch_dtype(id, x); }

// `p` in dtype `t`, or `fill` of `shape` when p is undefined (no affine).
Tensor param_or(const Tensor& p, const Shape& shape, double fill, DType t, Device device) {
  if (!p.defined()) return full(shape, fill, t, device);
  return p.dtype() == t ? p : cast(p, t);
}

void check_param(const Tensor& p, const Shape& want, const char* op, const char* what, const Tensor& x) {
  if (!p.defined()) return;
  BRISK_CHECK(p.sizes() == want, op, ": ", what, " has shape ", p.sizes(), " but the input ", x.sizes(), " needs ",
              want);
}

// Runs the layer_norm op over the last `normalized.size()` dims; returns y.
Tensor layer_norm_op(const Tensor& x, const Shape& normalized, const Tensor& weight, const Tensor& bias, double eps) {
  const DType t = param_dtype(OpId::LayerNorm, x);
  Tensor in[3] = {x, param_or(weight, normalized, 1.0, t, x.device()), param_or(bias, normalized, 0.0, t, x.device())};
  Attrs attrs;
  LayerNormParams{.normalized_dims = normalized.size(), .eps = eps}.store(attrs);
  Tensor out[3];
  call(OpId::LayerNorm, in, attrs, out);
  return out[0];
}

}  // namespace

// x (*, normalized_shape) -> y like x
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  BRISK_CHECK(x.defined(), "layer_norm: undefined input");
  const int nd = normalized_shape.size();
  bool match = nd >= 1 && nd <= x.dim();
  for (int i = 0; match && i < nd; ++i) match = x.sizes()[x.dim() - nd + i] == normalized_shape[i];
  BRISK_CHECK(match, "layer_norm: normalized_shape ", normalized_shape, " does not match the trailing dims of input ",
              x.sizes());
  check_param(weight, normalized_shape, "layer_norm", "weight", x);
  check_param(bias, normalized_shape, "layer_norm", "bias", x);
  return layer_norm_op(x, normalized_shape, weight, bias, eps);
}

// Note [Running statistics]
// As PyTorch: in training, running_mean = (1 - m) * running_mean + m * batch_mean and
// running_var = (1 - m) * running_var + m * batch_var * n / (n - 1) (unbiased), with n the
// values per channel, under NoGradGuard, in place (bumping the buffers' versions). The batch
// variance comes back from the op's rstd as 1 / rstd^2 - eps: exact to the statistics'
// precision relative to var + eps, which is what eval mode then uses.
// x (B, C, *), running stats / weight / bias (C) -> y like x
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  BRISK_CHECK(x.defined(), "batch_norm: undefined input");
  BRISK_CHECK(x.dim() >= 2, "batch_norm: input must have shape (B, C, *), got ", x.sizes());
  BRISK_CHECK(running_mean.defined() == running_var.defined(),
              "batch_norm: running_mean and running_var must both be given or both be absent");
  const int64_t channels = x.sizes()[1];
  const Shape c{channels};
  check_param(weight, c, "batch_norm", "weight", x);
  check_param(bias, c, "batch_norm", "bias", x);
  check_param(running_mean, c, "batch_norm", "running_mean", x);
  check_param(running_var, c, "batch_norm", "running_var", x);
  const bool tracked = running_mean.defined();
  const bool use_batch_stats = training || !tracked;  // untracked: always batch statistics

  const DType t = param_dtype(OpId::BatchNorm, x);
  const Tensor w = param_or(weight, c, 1.0, t, x.device());
  const Tensor b = param_or(bias, c, 0.0, t, x.device());
  // In training the op does not read the running statistics; untracked ones are stood in for
  // by the (C)-shaped weight and bias.
  Tensor in[5] = {x, w, b, tracked ? param_or(running_mean, c, 0.0, t, x.device()) : b,
                  tracked ? param_or(running_var, c, 1.0, t, x.device()) : w};
  Attrs attrs;
  BatchNormParams{.training = use_batch_stats, .eps = eps}.store(attrs);
  Tensor out[3];
  call(OpId::BatchNorm, in, attrs, out);

  const int64_t n = channels == 0 ? 0 : x.numel() / channels;
  if (training && tracked && n > 0) {
    NoGradGuard no_grad;
    const Tensor mean = out[1].detach();
    const Tensor rstd = out[2].detach();
    const Tensor batch_var = clamp_min(1.0 / (rstd * rstd) - eps, 0.0);
    const Tensor unbiased = batch_var * (double(n) / double(n - 1));
    Tensor rm = running_mean;
    Tensor rv = running_var;
    rm.copy_(cast(rm, mean.dtype()) * (1.0 - momentum) + mean * momentum);
    rv.copy_(cast(rv, unbiased.dtype()) * (1.0 - momentum) + unbiased * momentum);
  }
  return out[0];
}

// x (B, C, *) -> (B, G, C / G * prod(*)) normalized per group -> per-channel affine
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  BRISK_CHECK(x.defined(), "group_norm: undefined input");
  BRISK_CHECK(x.dim() >= 2, "group_norm: input must have shape (B, C, *), got ", x.sizes());
  const int64_t channels = x.sizes()[1];
  BRISK_CHECK(groups > 0 && channels % groups == 0, "group_norm: ", channels, " channels of input ", x.sizes(),
              " are not divisible by ", groups, " groups");
  const Shape c{channels};
  check_param(weight, c, "group_norm", "weight", x);
  check_param(bias, c, "group_norm", "bias", x);
  int64_t per_group = channels / groups;
  for (int d = 2; d < x.dim(); ++d) per_group *= x.sizes()[d];
  const Tensor grouped = reshape(x, {x.sizes()[0], groups, per_group});
  Tensor y = reshape(layer_norm_op(grouped, {per_group}, {}, {}, eps), x.sizes());
  if (!weight.defined() && !bias.defined()) return y;
  Shape bshape = Shape::filled(x.dim(), 1);
  bshape[1] = channels;
  if (weight.defined()) y = y * reshape(weight, bshape);
  if (bias.defined()) y = y + reshape(bias, bshape);
  return y;
}

namespace detail {

void define_norm_ops() {
  define(OpId::LayerNormBackward, kLayerNormBackward);
  define(OpId::RmsNorm, kRmsNorm);
  define(OpId::RmsNormBackward, kRmsNormBackward);
  define(OpId::BatchNormBackward, kBatchNormBackward);
  define(OpId::LayerNorm, kLayerNorm);
  define(OpId::BatchNorm, kBatchNorm);
}

}  // namespace detail

}  // namespace brisk
