// nn/functional.cpp: activations, dropout, embedding, attention and losses, written with
// engine ops (their gradients come from those ops). The forms that are ops (linear, conv,
// pooling, resizing, normalization) live in engine/ops/ (engine/functions.h).
#include "nn/functional.h"

#include <cmath>
#include <limits>

namespace brisk::nn::functional {

Tensor softmax(const Tensor& x, int64_t dim) { return brisk::softmax(x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return brisk::log_softmax(x, dim); }
Tensor dropout(const Tensor& x, double p, bool training) { return brisk::dropout(x, p, training); }
Tensor embedding(const Tensor& indices, const Tensor& weight) { return brisk::embedding(weight, indices); }

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                                    double dropout_p, bool training) {
  return brisk::scaled_dot_product_attention(q, k, v, mask, training ? dropout_p : 0.0, causal);
}

namespace {

Tensor reduce(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None: return loss;
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: return loss.mean();
  }
  return loss;
}

// (N, C, d1, ...) -> (N * d1 * ..., C) and the matching flat target.
std::pair<Tensor, Tensor> flatten_classes(const Tensor& x, const Tensor& target, const char* op) {
  BRISK_CHECK(x.dim() >= 1, op, ": input must have a class dim, got ", x.sizes());
  if (x.dim() <= 2) return {x.dim() == 1 ? x.unsqueeze(0) : x, target.dim() == 0 ? target.unsqueeze(0) : target};
  BRISK_CHECK(target.dim() == x.dim() - 1, op, ": target ", target.sizes(), " does not fit input ", x.sizes());
  Shape perm;
  perm.push_back(0);
  for (int d = 2; d < x.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return {x.permute(perm).reshape({-1, x.size(1)}), target.reshape({-1})};
}

// Per-sample weighted NLL: (loss per sample (N), weight of its target (N)); ignored samples 0.
std::pair<Tensor, Tensor> weighted_nll(const Tensor& logp, const Tensor& target, const Tensor& weight,
                                       int64_t ignore_index, const char* op) {
  BRISK_CHECK(target.dtype() == DType::I64, op, ": target must be I64 class indices, got ", target.dtype());
  BRISK_CHECK(target.dim() == 1 && target.size(0) == logp.size(0), op, ": target ", target.sizes(),
              " does not fit input ", logp.sizes());
  int64_t c = logp.size(1);
  Tensor ignored = eq(target, full({}, double(ignore_index), DType::I64, target.device()));
  Tensor safe = where(ignored, zeros_like(target), target);
  for (int64_t t : safe.to_vector<int64_t>()) {
    BRISK_CHECK(t >= 0 && t < c, op, ": target ", t, " is out of range for ", c, " classes");
  }
  Tensor picked = gather(logp, 1, safe.unsqueeze(1)).squeeze(1);  // (N)
  Tensor w = weight.defined() ? index_select(weight.to(logp.dtype()), 0, safe) : ones_like(picked);
  w = masked_fill(w, ignored, 0.0);
  return {neg(picked) * w, w};
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target, const Tensor& bias,
                            Reduction reduction, int64_t ignore_index, double label_smoothing) {
  return brisk::linear_cross_entropy(x, weight, target, bias, reduction, label_smoothing, ignore_index);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  auto [logp, t] = flatten_classes(log_probs, target, "nll_loss");
  auto [loss, w] = weighted_nll(logp, t, weight, ignore_index, "nll_loss");
  if (reduction == Reduction::Mean) return loss.sum() / w.sum();
  if (reduction == Reduction::None) return target.dim() == 0 ? loss.squeeze(0) : loss.reshape(target.sizes());
  return loss.sum();
}

namespace {

// cross_entropy with class probabilities (target of the logits' shape), as PyTorch's
// cross_entropy_loss_prob_target: -sum_c w[c] * q[c] * log_softmax(x)[c] with the smoothed
// target q = (1 - eps) * target + eps / C; 'mean' divides by the number of samples
// (N * d1 * ...), whatever the weights.
Tensor cross_entropy_prob_target(const Tensor& logits, const Tensor& target, const Tensor& weight, Reduction reduction,
                                 int64_t ignore_index, double label_smoothing) {
  BRISK_CHECK(is_floating(target.dtype()), "cross_entropy: a target of the logits' shape ", logits.sizes(),
              " holds class probabilities and must be floating, got ", target.dtype(),
              " (class indices have no class dim: (N) or (N, d1, ...))");
  BRISK_CHECK(ignore_index < 0, "cross_entropy: ignore_index (", ignore_index,
              ") is not supported for probability targets");
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  const int64_t c = logits.size(class_dim);
  Tensor logp = brisk::log_softmax(logits, class_dim);
  Tensor q = label_smoothing > 0 ? target * (1 - label_smoothing) + label_smoothing / double(c) : target;
  Tensor prod = logp * q;
  if (weight.defined()) {
    BRISK_CHECK(weight.dim() == 1 && weight.size(0) == c, "cross_entropy: weight ", weight.sizes(), " does not match ",
                c, " classes");
    Shape wshape;
    for (int64_t d = 0; d < logits.dim(); ++d) wshape.push_back(d == class_dim ? c : 1);
    prod = prod * weight.to(logp.dtype()).reshape(wshape);
  }
  switch (reduction) {
    case Reduction::None: return neg(prod.sum({class_dim}));
    case Reduction::Sum: return neg(prod.sum());
    case Reduction::Mean: return neg(prod.sum()) / double(logits.numel() / std::max<int64_t>(c, 1));
  }
  return prod;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  BRISK_CHECK(logits.defined() && target.defined(), "cross_entropy: undefined logits or target");
  BRISK_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing ", label_smoothing,
              " is outside [0, 1]");
  // As PyTorch: a target of the logits' own shape holds class probabilities.
  if (logits.dim() >= 1 && target.sizes() == logits.sizes()) {
    return cross_entropy_prob_target(logits, target, weight, reduction, ignore_index, label_smoothing);
  }
  auto [x, t] = flatten_classes(logits, target, "cross_entropy");
  Tensor loss;
  if (!weight.defined()) {
    // The fused kernel (log_softmax + NLL + smoothing in one pass).
    loss = brisk::cross_entropy(x, t, reduction, label_smoothing, ignore_index);
    if (reduction != Reduction::None) return loss;
    return target.dim() == 0 ? loss.squeeze(0) : loss.reshape(target.sizes());
  }
  BRISK_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1), "cross_entropy: weight ", weight.sizes(),
              " does not match ", x.size(1), " classes");
  Tensor logp = brisk::log_softmax(x, 1);
  auto [nll, w] = weighted_nll(logp, t, weight, ignore_index, "cross_entropy");
  Tensor per_sample = nll;
  if (label_smoothing > 0) {
    // PyTorch: (1 - eps) * w[y] * nll + eps / C * sum_c w[c] * (-logp[c]); ignored samples 0
    // (only those: a sample whose own class weighs 0 keeps its smoothing term).
    double eps = label_smoothing;
    int64_t c = x.size(1);
    Tensor keep = cast(ne(t, full({}, double(ignore_index), DType::I64, t.device())), x.dtype());
    Tensor smooth = neg(logp * weight.to(x.dtype())).sum({1}) * keep;
    per_sample = nll * (1 - eps) + smooth * (eps / double(c));
  }
  if (reduction == Reduction::Mean) return per_sample.sum() / w.sum();
  if (reduction == Reduction::Sum) return per_sample.sum();
  return target.dim() == 0 ? per_sample.squeeze(0) : per_sample.reshape(target.sizes());
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return brisk::mse_loss(input, target, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return reduce(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  BRISK_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  Tensor d = abs(input - target);
  if (beta == 0) return reduce(d, reduction);
  Tensor small = lt(d, full({}, beta, d.dtype(), d.device()));
  // The quadratic branch sees d clamped to beta: where it is not taken its gradient is 0, and
  // 0 * d would be NaN for an infinite d.
  Tensor dq = clamp_max(d, beta);
  Tensor loss = where(small, dq * dq * (0.5 / beta), d - 0.5 * beta);
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& x, const Tensor& y, const Tensor& weight, Reduction reduction) {
  BRISK_CHECK(x.defined() && y.defined() && x.sizes() == y.sizes(), "binary_cross_entropy: target ",
              y.defined() ? y.str() : "undefined", " does not match input ", x.defined() ? x.str() : "undefined");
  BRISK_CHECK(is_floating(x.dtype()), "binary_cross_entropy: expects floating probabilities, got ", x.str());
  BRISK_CHECK(x.numel() == 0 || (amin(x.detach()).item<double>() >= 0 && amax(x.detach()).item<double>() <= 1),
              "binary_cross_entropy: input values must be in [0, 1] (probabilities; use "
              "binary_cross_entropy_with_logits for logits)");
  // log clamped at -100 as PyTorch, so 0 * log(0) stays finite. The gradient through the clamp
  // is 0 where it binds (x = 0 or 1 exactly), where PyTorch's formula divides by eps instead.
  Tensor log_x = clamp_min(log(x), -100.0);
  Tensor log_1mx = clamp_min(log(1.0 - x), -100.0);
  Tensor loss = neg(y * log_x + (1.0 - y) * log_1mx);
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  BRISK_CHECK(delta > 0, "huber_loss: delta must be positive, got ", delta);
  // smooth_l1 with beta = delta, times delta (PyTorch's identity).
  return smooth_l1_loss(input, target, reduction, delta) * delta;
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin, Reduction reduction) {
  BRISK_CHECK(x1.defined() && x2.defined() && y.defined() && x1.sizes() == x2.sizes() && x1.dim() >= 1 &&
                  x1.dim() <= 2 && y.dim() == x1.dim() - 1 && (y.dim() == 0 || y.size(0) == x1.size(0)),
              "cosine_embedding_loss: expects x1, x2 of one shape (N, D) or (D) and y (N) or 0-dim, got ",
              x1.defined() ? x1.str() : "undefined", ", ", x2.defined() ? x2.str() : "undefined", ", ",
              y.defined() ? y.str() : "undefined");
  const double eps = 1e-12;  // PyTorch's EPSILON in the squared norms (ATen's loss code)
  Tensor dot = sum(x1 * x2, {-1});
  Tensor m1 = sum(x1 * x1, {-1}) + eps, m2 = sum(x2 * x2, {-1}) + eps;
  Tensor cos = dot / sqrt(m1 * m2);
  Tensor yy = cast(y, cos.dtype());
  Tensor pos = 1.0 - cos, neg_part = clamp_min(cos - margin, 0.0);
  Tensor loss = where(eq(yy, ones_like(yy)), pos, where(eq(yy, -ones_like(yy)), neg_part, zeros_like(pos)));
  return reduce(loss, reduction);
}

Tensor triplet_margin_loss(const Tensor& a, const Tensor& p_, const Tensor& n, double margin, double p, double eps,
                           bool swap, Reduction reduction) {
  BRISK_CHECK(a.defined() && p_.defined() && n.defined() && a.sizes() == p_.sizes() && a.sizes() == n.sizes() &&
                  a.dim() >= 1 && a.dim() <= 2,
              "triplet_margin_loss: expects anchor, positive, negative of one shape (N, D) or (D), got ",
              a.defined() ? a.str() : "undefined", ", ", p_.defined() ? p_.str() : "undefined", ", ",
              n.defined() ? n.str() : "undefined");
  BRISK_CHECK(p > 0, "triplet_margin_loss: p must be positive, got ", p);
  auto dist = [&](const Tensor& u, const Tensor& v) { return brisk::norm(u - v + eps, p, {-1}); };
  Tensor d_ap = dist(a, p_), d_an = dist(a, n);
  if (swap) d_an = minimum(d_an, dist(p_, n));
  return reduce(clamp_min(d_ap - d_an + margin, 0.0), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& y, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  BRISK_CHECK(x.sizes() == y.sizes(), "binary_cross_entropy_with_logits: target ", y.sizes(), " does not match input ",
              x.sizes());
  // Stable form: softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)). Its derivative is right at
  // x = 0 too: maximum splits a tie half and half and abs'(0) = 0, so d/dx = -0.5 = -sigmoid(0)
  // and the loss's gradient is PyTorch's sigmoid(x) - y everywhere (a zero-initialized head
  // moves). clamp_min would pass the whole gradient at the bound and give -y at x = 0.
  Tensor softplus_neg = maximum(neg(x), zeros({}, x.dtype(), x.device())) + log(exp(neg(abs(x))) + 1.0);
  Tensor loss;
  if (pos_weight.defined()) {
    Tensor lw = (pos_weight - 1.0) * y + 1.0;
    loss = (1.0 - y) * x + lw * softplus_neg;
  } else {
    loss = (1.0 - y) * x + softplus_neg;
  }
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  Tensor loss;
  if (log_target) {
    loss = exp(target) * (target - input);
  } else {
    // PyTorch's xlogy(t, t) - t * input: t log t is 0 where t == 0, t * input is not masked
    // (0 * -inf = NaN, as theirs).
    Tensor zero = eq(target, zeros_like(target));
    Tensor safe = where(zero, ones_like(target), target);
    loss = masked_fill(target * log(safe), zero, 0.0) - target * input;
  }
  return reduce(loss, reduction);
}

Tensor kl_div_batchmean(const Tensor& input, const Tensor& target, bool log_target) {
  Tensor total = kl_div(input, target, Reduction::Sum, log_target);
  return input.dim() == 0 ? total : total / double(input.size(0));
}

}  // namespace brisk::nn::functional
