// nn/functional_norm.cpp: the public normalization functions layer_norm, batch_norm and
// group_norm (declared in nn/functional.h). They check the user's arguments against PyTorch's
// rules, stand in ones/zeros for an absent affine, call the layer_norm / batch_norm ops, and
// batch_norm updates the running statistics. group_norm is a composite over the layer_norm op.
// Not here: the OpDefs and backward formulas (engine/ops/norm.cpp), the kernels
// (kernels/<device>/norm.cpp), the layers that own the parameters (nn/layers.h).
#include "engine/autocast.h"
#include "engine/dispatch.h"
#include "engine/grad_mode.h"
#include "engine/op_params.h"
#include "nn/functional.h"

namespace brisk::nn::functional {

namespace {

// The dtype the parameters must have to meet x in op `id`: x's own, or F32 where autocast will
// bring every input of the op to F32 anyway (its policy is Fp32), so that F32 parameters are
// not rounded through a 16-bit x's dtype on the way.
DType param_dtype(OpId id, const Tensor& x) {
  const DeviceType dev = x.device().type;
  const bool to_f32 = autocast::is_enabled(dev) && autocast::policy_of(id, dev) == CastPolicy::Fp32;
  return to_f32 && x.dtype() != DType::F64 ? DType::F32 : x.dtype();
}

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

}  // namespace brisk::nn::functional
