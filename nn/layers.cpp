// nn/layers.cpp: constructors (parameters with PyTorch's shapes and default init) and
// forwards of the layers in nn/layers.h.
#include "nn/layers.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "engine/grad_mode.h"
#include "nn/init.h"

namespace brisk::nn {

namespace F = functional;

// ---- Linear
Linear::Linear(int64_t in, int64_t out, bool bias) : Module("Linear"), in_features(in), out_features(out) {
  BRISK_CHECK(in >= 0 && out >= 0, "Linear: negative size (", in, ", ", out, ")");
  Tensor& w = register_parameter("weight", empty({out, in}));
  Tensor b = bias ? empty({out}) : Tensor();
  init::linear_default_(w, b);
  if (bias) register_parameter("bias", b);
}

Tensor Linear::bias() { return maybe_parameter("bias"); }

Tensor Linear::forward(const Tensor& x) {
  BRISK_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear: input ", x.sizes(), " does not end in in_features ",
              in_features);
  return F::linear(x, weight(), bias());
}

// ---- convolutions
Conv2d::Conv2d(int64_t in, int64_t out, Pair k, ConvOptions opt)
    : Module("Conv2d"), in_channels(in), out_channels(out), kernel_size(k), options(opt) {
  BRISK_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0, "Conv2d: groups ", opt.groups,
              " must divide in_channels ", in, " and out_channels ", out);
  Tensor& w = register_parameter("weight", empty({out, in / opt.groups, k[0], k[1]}));
  Tensor b = opt.bias ? empty({out}) : Tensor();
  init::linear_default_(w, b);
  if (opt.bias) register_parameter("bias", b);
}

Tensor Conv2d::forward(const Tensor& x) {
  return F::conv2d(x, parameter("weight"), maybe_parameter("bias"), options.stride, options.padding, options.dilation,
                   options.groups);
}

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d, int64_t g, bool bias)
    : Module("Conv1d"), stride(s), padding(p), dilation(d), groups(g) {
  BRISK_CHECK(g > 0 && in % g == 0 && out % g == 0, "Conv1d: groups ", g, " must divide in_channels ", in,
              " and out_channels ", out);
  Tensor& w = register_parameter("weight", empty({out, in / g, k}));
  Tensor b = bias ? empty({out}) : Tensor();
  init::linear_default_(w, b);
  if (bias) register_parameter("bias", b);
}

Tensor Conv1d::forward(const Tensor& x) {
  return F::conv1d(x, parameter("weight"), maybe_parameter("bias"), stride, padding, dilation, groups);
}

// ---- pooling
MaxPool2d::MaxPool2d(Pair k, std::optional<Pair> s, Pair p, Pair d, bool c)
    : Module("MaxPool2d"), kernel(k), padding(p), dilation(d), stride(s), ceil_mode(c) {}
Tensor MaxPool2d::forward(const Tensor& x) { return F::max_pool2d(x, kernel, stride, padding, dilation, ceil_mode); }

AvgPool2d::AvgPool2d(Pair k, std::optional<Pair> s, Pair p, bool c, bool cip)
    : Module("AvgPool2d"), kernel(k), padding(p), stride(s), ceil_mode(c), count_include_pad(cip) {}
Tensor AvgPool2d::forward(const Tensor& x) {
  return F::avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Pair size) : Module("AdaptiveAvgPool2d"), output_size(size) {}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return F::adaptive_avg_pool2d(x, output_size); }

// ---- normalization
BatchNorm::BatchNorm(const char* type, int lo, int hi, int64_t n, double eps, double momentum, bool affine, bool track)
    : Module(type), num_features(n), eps(eps), momentum(momentum), lo_(lo), hi_(hi) {
  if (affine) {
    register_parameter("weight", ones({n}));
    register_parameter("bias", zeros({n}));
  }
  if (track) {
    register_buffer("running_mean", zeros({n}));
    register_buffer("running_var", ones({n}));
    register_buffer("num_batches_tracked", zeros({}, DType::I64));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  BRISK_CHECK(x.dim() >= lo_ && x.dim() <= hi_, type_name(), ": expected ", lo_ == hi_ ? "" : "2-D or ", hi_,
              "-D input, got ", x.sizes());
  BRISK_CHECK(x.size(1) == num_features, type_name(), ": input ", x.sizes(), " has ", x.size(1), " channels, expected ",
              num_features);
  Tensor running_mean = maybe_buffer("running_mean");
  Tensor running_var = maybe_buffer("running_var");
  bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && running_mean.defined()) {
    NoGradGuard ng;
    buffer("num_batches_tracked").add_(1.0);
  }
  return F::batch_norm(x, running_mean, running_var, maybe_parameter("weight"), maybe_parameter("bias"),
                       use_batch_stats, momentum, eps);
}

LayerNorm::LayerNorm(Shape shape, double eps, bool affine, bool bias)
    : Module("LayerNorm"), normalized_shape(shape), eps(eps) {
  if (affine) {
    register_parameter("weight", ones(shape));
    if (bias) register_parameter("bias", zeros(shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return F::layer_norm(x, normalized_shape, maybe_parameter("weight"), maybe_parameter("bias"), eps);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(eps) {
  BRISK_CHECK(groups > 0 && channels % groups == 0, "GroupNorm: num_groups ", groups, " must divide num_channels ",
              channels);
  if (affine) {
    register_parameter("weight", ones({channels}));
    register_parameter("bias", zeros({channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  return F::group_norm(x, num_groups, maybe_parameter("weight"), maybe_parameter("bias"), eps);
}

// ---- misc
Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  BRISK_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return F::dropout(x, p, is_training()); }

Embedding::Embedding(int64_t n, int64_t dim) : Module("Embedding"), num_embeddings(n), embedding_dim(dim) {
  Tensor& w = register_parameter("weight", empty({n, dim}));
  init::normal_(w, 0, 1);
}
Tensor Embedding::forward(const Tensor& indices) { return F::embedding(indices, parameter("weight")); }

Flatten::Flatten(int64_t s, int64_t e) : Module("Flatten"), start_dim(s), end_dim(e) {}
Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

// ---- attention
MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, double dropout, bool bias, bool batch_first, bool causal)
    : Module("MultiheadAttention"),
      embed_dim(e),
      num_heads(h),
      dropout(dropout),
      batch_first(batch_first),
      causal(causal) {
  BRISK_CHECK(h > 0 && e % h == 0, "MultiheadAttention: embed_dim ", e, " must be divisible by num_heads ", h);
  Tensor& w = register_parameter("in_proj_weight", empty({3 * e, e}));
  init::xavier_uniform_(w);
  if (bias) register_parameter("in_proj_bias", zeros({3 * e}));
  auto out = register_module("out_proj", std::make_shared<Linear>(e, e, bias));
  if (bias) {
    Tensor ob = out->bias();
    init::zeros_(ob);
  }
}

void check_attn_mask(const std::string& who, const char* name, const Tensor& mask, int64_t batch, int64_t heads,
                     int64_t t, int64_t s) {
  if (!mask.defined()) return;
  BRISK_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()), who, ": ", name,
              " must be Bool (true = not allowed) or floating (added to the scores), got ", mask.dtype());
  const bool ok2 = mask.dim() == 2 && mask.sizes() == Shape{t, s};
  const bool ok3 = mask.dim() == 3 && mask.sizes() == Shape{batch * heads, t, s};
  BRISK_CHECK(ok2 || ok3, who, ": ", name, " has shape ", mask.sizes(), ", expected (T, S) = (", t, ", ", s,
              ") or (B * heads, T, S) = (", batch * heads, ", ", t, ", ", s, ")");
}

void check_key_padding_mask(const std::string& who, const char* name, const Tensor& mask, int64_t batch, int64_t s) {
  if (!mask.defined()) return;
  BRISK_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()), who, ": ", name,
              " must be Bool (true = padding) or floating (added to the scores), got ", mask.dtype());
  const bool fits = mask.sizes() == Shape{batch, s};
  BRISK_CHECK(fits, who, ": ", name, " has shape ", mask.sizes(), ", expected (B, S) = (", batch, ", ", s, ")");
}

namespace {

// Note [Attention masks]
// PyTorch's MultiheadAttention takes attn_mask (T, S) or (B * H, T, S) and key_padding_mask
// (B, S), each Bool (true = not allowed) or floating (added to the scores). They are viewed as
// (T, S) / (B, H, T, S) and (B, 1, 1, S) and merged into one mask broadcastable to
// (B, H, T, S): two Bool masks are or-ed and stay Bool; otherwise a Bool one becomes 0 / -inf
// in `dtype` (the query's) and the two are added, as PyTorch's _canonical_mask does.
// scaled_dot_product_attention's Bool masks mean the opposite (true = attend): forward()
// inverts a Bool mask on the way there.
Tensor additive(const Tensor& mask, DType dtype) {
  if (mask.dtype() != DType::Bool) return mask.to(dtype);
  return masked_fill(zeros(mask.sizes(), dtype, mask.device()), mask, -std::numeric_limits<double>::infinity());
}

Tensor merge_attention_masks(const Tensor& attn_mask, const Tensor& padding_mask, int64_t batch, int64_t heads,
                             int64_t t, int64_t s, DType dtype) {
  Tensor attn = attn_mask.defined() && attn_mask.dim() == 3 ? attn_mask.reshape({batch, heads, t, s}) : attn_mask;
  Tensor pad = padding_mask.defined() ? padding_mask.reshape({batch, 1, 1, s}) : Tensor();
  if (!attn.defined() || !pad.defined()) return attn.defined() ? attn : pad;
  if (attn.dtype() == DType::Bool && pad.dtype() == DType::Bool) {
    // Bool or: (a + b) > 0 in F32 (no logical ops on Bool).
    Tensor sum = cast(attn, DType::F32) + cast(pad, DType::F32);
    return gt(sum, scalar_tensor(0.0, DType::F32, sum.device()));
  }
  return additive(attn, dtype) + additive(pad, dtype);
}

// (T, B, E) inputs are attended as (B, T, E).
Tensor batch_major(const Tensor& x, bool batch_first) { return batch_first ? x : x.transpose(0, 1); }

}  // namespace

MultiheadAttention::WithWeights MultiheadAttention::operator()(const Tensor& query, const Tensor& key,
                                                               const Tensor& value, const Tensor& key_padding_mask,
                                                               bool need_weights, const Tensor& attn_mask, bool average,
                                                               bool is_causal) {
  WithWeights r;
  Tensor out = call_with(query, [&](const Tensor& q) {
    if (need_weights) {
      r = forward_with_weights(q, key, value, key_padding_mask, attn_mask, average, is_causal);
      return r.output;
    }
    BRISK_CHECK(q.dim() == 3 && key.dim() == 3, "MultiheadAttention: query ", q.sizes(), ", key ", key.sizes(),
                " must be ", batch_first ? "(B, T, " : "(T, B, ", embed_dim, ")");
    const int64_t bsz = q.size(batch_first ? 0 : 1), t = q.size(batch_first ? 1 : 0);
    const int64_t s = key.size(batch_first ? 1 : 0) + (use_cache ? cache.length() : 0);
    check_key_padding_mask("MultiheadAttention", "key_padding_mask", key_padding_mask, bsz, s);
    check_attn_mask("MultiheadAttention", "attn_mask", attn_mask, bsz, num_heads, t, s);
    Tensor mask = merge_attention_masks(attn_mask, key_padding_mask, bsz, num_heads, t, s, q.dtype());
    return forward(q, key, value, mask, is_causal);
  });
  r.output = out;  // what the forward hooks left
  return r;
}

Tensor MultiheadAttention::forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask,
                                   bool is_causal) {
  BRISK_CHECK(q_in.dim() == 3 && q_in.size(2) == embed_dim && k_in.dim() == 3 && v_in.dim() == 3,
              "MultiheadAttention: query ", q_in.sizes(), ", key ", k_in.sizes(), ", value ", v_in.sizes(), " must be ",
              batch_first ? "(B, T, " : "(T, B, ", embed_dim, ")");
  BRISK_CHECK(!mask.defined() || mask.dtype() == DType::Bool || is_floating(mask.dtype()),
              "MultiheadAttention: attn_mask must be Bool (true = not allowed) or floating (added to the scores), got ",
              mask.dtype());
  const Tensor q = batch_major(q_in, batch_first);
  const Tensor k = batch_major(k_in, batch_first);
  const Tensor v = batch_major(v_in, batch_first);
  const Tensor& w = parameter("in_proj_weight");
  Tensor b = maybe_parameter("in_proj_bias");
  auto proj = [&](const Tensor& x, int64_t i) {
    Tensor wi = w.narrow(0, i * embed_dim, embed_dim);
    Tensor bi = b.defined() ? b.narrow(0, i * embed_dim, embed_dim) : Tensor();
    Tensor y = F::linear(x, wi, bi);  // (B, T, E)
    int64_t bsz = y.size(0), t = y.size(1), d = embed_dim / num_heads;
    return y.view({bsz, t, num_heads, d}).transpose(1, 2);  // (B, H, T, D)
  };
  Tensor qh = proj(q, 0), kh = proj(k, 1), vh = proj(v, 2);
  // MultiheadAttention's Bool masks say where attention is not allowed; sdpa's where it is.
  Tensor allowed =
      mask.defined() && mask.dtype() == DType::Bool ? eq(mask, zeros({}, DType::Bool, mask.device())) : mask;
  if (use_cache) {
    const int64_t past = cache.length();
    std::tie(kh, vh) = cache.append(kh, vh);
    if (is_causal && past > 0) {
      // The bottom-right diagonal: query i is position past + i. A (T, S) Bool mask joins the
      // caller's (and with a Bool one; a float one gets -inf where the diagonal forbids).
      const int64_t t = qh.size(2), s = kh.size(2);
      Tensor rows =
          arange(t, DType::I64, qh.device()).unsqueeze(1) + scalar_tensor(double(past), DType::I64, qh.device());
      Tensor diag = le(arange(s, DType::I64, qh.device()).unsqueeze(0), rows);  // (T, S), true = attend
      if (!allowed.defined()) {
        allowed = diag;
      } else if (allowed.dtype() == DType::Bool) {
        allowed = gt(cast(allowed, DType::F32) + cast(diag, DType::F32), scalar_tensor(1.5, DType::F32, qh.device()));
      } else {
        allowed = allowed + additive(eq(diag, zeros({}, DType::Bool, qh.device())), allowed.dtype());
      }
      is_causal = false;
    }
  }
  Tensor o = F::scaled_dot_product_attention(qh, kh, vh, allowed, is_causal, dropout, is_training());  // (B, H, T, D)
  Tensor merged = o.transpose(1, 2).reshape({q.size(0), q.size(1), embed_dim});
  Tensor out = (*child("out_proj"))(merged);
  return batch_first ? out : out.transpose(0, 1);
}

MultiheadAttention::WithWeights MultiheadAttention::forward_with_weights(const Tensor& q_in, const Tensor& k_in,
                                                                         const Tensor& v_in,
                                                                         const Tensor& key_padding_mask,
                                                                         const Tensor& attn_mask, bool average,
                                                                         bool is_causal) {
  BRISK_CHECK(q_in.dim() == 3 && q_in.size(2) == embed_dim && k_in.dim() == 3 && v_in.dim() == 3,
              "MultiheadAttention: query ", q_in.sizes(), ", key ", k_in.sizes(), ", value ", v_in.sizes(), " must be ",
              batch_first ? "(B, T, " : "(T, B, ", embed_dim, ")");
  const Tensor q = batch_major(q_in, batch_first);
  const Tensor k = batch_major(k_in, batch_first);
  const Tensor v = batch_major(v_in, batch_first);
  const int64_t bsz = q.size(0), t = q.size(1), s = k.size(1), d = embed_dim / num_heads;
  BRISK_CHECK(k.size(0) == bsz && v.size(0) == bsz && v.size(1) == s, "MultiheadAttention: query ", q_in.sizes(),
              ", key ", k_in.sizes(), ", value ", v_in.sizes(), " do not agree on batch and key length");
  check_key_padding_mask("MultiheadAttention", "key_padding_mask", key_padding_mask, bsz, s);
  check_attn_mask("MultiheadAttention", "attn_mask", attn_mask, bsz, num_heads, t, s);
  const Tensor& w = parameter("in_proj_weight");
  Tensor b = maybe_parameter("in_proj_bias");
  auto proj = [&](const Tensor& x, int64_t i) {
    Tensor wi = w.narrow(0, i * embed_dim, embed_dim);
    Tensor bi = b.defined() ? b.narrow(0, i * embed_dim, embed_dim) : Tensor();
    Tensor y = F::linear(x, wi, bi);                                // (B, T, E)
    return y.view({bsz, x.size(1), num_heads, d}).transpose(1, 2);  // (B, H, T, D)
  };
  Tensor qh = proj(q, 0), kh = proj(k, 1), vh = proj(v, 2);
  Tensor scores = matmul(qh, kh.transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));  // (B, H, T, S)
  const double neg_inf = -std::numeric_limits<double>::infinity();
  Tensor mask = merge_attention_masks(attn_mask, key_padding_mask, bsz, num_heads, t, s, scores.dtype());
  if (mask.defined())
    scores = mask.dtype() == DType::Bool ? masked_fill(scores, mask, neg_inf) : scores + mask.to(scores.dtype());
  if (is_causal) {
    Tensor rows = arange(t, DType::I64, q.device()).unsqueeze(1);
    Tensor cols = arange(s, DType::I64, q.device()).unsqueeze(0);
    scores = masked_fill(scores, gt(cols, rows), neg_inf);  // key j <= query i, as scaled_dot_product_attention
  }
  Tensor attn = brisk::softmax(scores, -1);
  if (dropout > 0 && is_training()) attn = brisk::dropout(attn, dropout, true);
  Tensor merged = matmul(attn, vh).transpose(1, 2).reshape({bsz, t, embed_dim});
  Tensor out = (*child("out_proj"))(merged);
  return {batch_first ? out : out.transpose(0, 1), average ? attn.mean({1}) : attn};
}

// ---- losses
CrossEntropyLoss::CrossEntropyLoss(Tensor weight, Reduction r, int64_t ignore, double smoothing)
    : Module("CrossEntropyLoss"), reduction(r), ignore_index(ignore), label_smoothing(smoothing) {
  if (weight.defined()) register_buffer("weight", weight);
}
Tensor CrossEntropyLoss::operator()(const Tensor& logits, const Tensor& target) {
  return F::cross_entropy(logits, target, maybe_buffer("weight"), reduction, ignore_index, label_smoothing);
}

NLLLoss::NLLLoss(Tensor weight, Reduction r, int64_t ignore) : Module("NLLLoss"), reduction(r), ignore_index(ignore) {
  if (weight.defined()) register_buffer("weight", weight);
}
Tensor NLLLoss::operator()(const Tensor& log_probs, const Tensor& target) {
  return F::nll_loss(log_probs, target, maybe_buffer("weight"), reduction, ignore_index);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(Tensor weight, Reduction r, Tensor pos_weight)
    : Module("BCEWithLogitsLoss"), reduction(r) {
  if (weight.defined()) register_buffer("weight", weight);
  if (pos_weight.defined()) register_buffer("pos_weight", pos_weight);
}
Tensor BCEWithLogitsLoss::operator()(const Tensor& logits, const Tensor& target) {
  return F::binary_cross_entropy_with_logits(logits, target, maybe_buffer("weight"), maybe_buffer("pos_weight"),
                                             reduction);
}

}  // namespace brisk::nn
