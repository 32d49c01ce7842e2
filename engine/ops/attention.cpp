// engine/ops/attention.cpp: the fused scaled dot-product attention op and its backward op
// (shape and dtype checks naming the op and the shapes, the backward formula, autocast policy
// Lower as PyTorch's), and the public functions: scaled_dot_product_attention (the op where it
// applies, in the dtype autocast or q asks for, Note [When the fused attention runs]) and
// scaled_dot_product_attention_math (the same from matmul, masked_fill, softmax and dropout:
// the reference in the spec table, and what runs where the op does not).
// Not here: the kernels (kernels/cpu/attention.cpp, Note [Fused attention]).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "engine/autocast.h"
#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;

// t's sizes without the last `drop` dims.
Shape lead_dims(const Tensor& t, int drop) {
  Shape s = t.sizes();
  s.resize(std::max(0, s.size() - drop));
  return s;
}

// Leading dims, T, S, D, Dv of (q, k, v[, mask]); checks shapes, dtypes and devices.
struct Geometry {
  Shape lead;
  int64_t T, S, D, Dv;
};

Geometry check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                         bool additive) {
  BRISK_CHECK(q.dtype() == DType::F32 || q.dtype() == DType::F64 || q.dtype() == DType::BF16, op,
              ": takes F32, F64 or BF16, got q ", q.str());
  BRISK_CHECK(q.dtype() != DType::BF16 || q.device().is_cpu(), op,
              ": BF16 runs on the CPU only (the CUDA kernels take F32 or F64), got q ", q.str());
  BRISK_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": q ", q.sizes(), ", k ", k.sizes(),
              ", v ", v.sizes(), " must have the same number of dims (>= 2)");
  Geometry g{lead_dims(q, 2), q.size(-2), k.size(-2), q.size(-1), v.size(-1)};
  const Shape k_lead = lead_dims(k, 2), v_lead = lead_dims(v, 2);
  BRISK_CHECK(k_lead == g.lead && v_lead == g.lead && k.size(-1) == g.D && v.size(-2) == g.S, op, ": q ", q.sizes(),
              ", k ", k.sizes(), ", v ", v.sizes(),
              " do not fit: q (*, T, D), k (*, S, D), v (*, S, Dv) with the same leading dims");
  for (const Tensor* t : {&k, &v}) {
    BRISK_CHECK(t->dtype() == q.dtype() && t->device() == q.device(), op,
                ": k and v must share q's dtype and device: q ", q.str(), ", got ", t->str());
  }
  if (mask) {
    Shape want = g.lead;
    want.push_back(g.T);
    want.push_back(g.S);
    BRISK_CHECK(mask->sizes() == want, op, ": mask ", mask->sizes(), " must be expanded to ", want);
    const bool fits = additive ? mask->dtype() == q.dtype() || (q.dtype() == DType::BF16 && mask->dtype() == DType::F32)
                               : mask->dtype() == DType::Bool;
    BRISK_CHECK(fits, op, ": mask ", mask->str(),
                additive ? " must have q's dtype (additive; F32 also with BF16 q)" : " must be Bool (true = attend)");
    BRISK_CHECK(mask->device() == q.device(), op, ": mask ", mask->str(), " must be on q's device ", q.device());
  }
  return g;
}

// lse's dtype: q's, F32 for BF16 q (the softmax statistics are kept in F32).
DType lse_dtype(DType q) { return q == DType::BF16 ? DType::F32 : q; }

// ---- attention: (q, k, v[, mask]) -> (out, lse)
void attention_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() == 3 || in.size() == 4, "attention: takes (q, k, v[, mask]), got ", in.size(), " inputs");
  BRISK_CHECK(attrs.a >= 0 && attrs.a < 1, "attention: dropout p must be in [0, 1), got ", attrs.a);
  const Geometry g = check_attention("attention", in[0], in[1], in[2], in.size() == 4 ? &in[3] : nullptr, attrs.flag2);
  Shape o = g.lead, lse = g.lead;
  o.push_back(g.T);
  o.push_back(g.Dv);
  lse.push_back(g.T);
  out[0] = {o, in[0].dtype()};
  out[1] = {lse, lse_dtype(in[0].dtype())};
}

// q, k, v <- gout (a gradient reaching lse is internal: the public function does not return it).
void attention_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& gout = c.grads[0];
  if (!gout.defined()) return;
  std::vector<Tensor> in = {gout, c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0], c.outputs[1]};
  if (c.inputs.size() == 4) in.push_back(c.inputs[3]);
  Tensor out[3];
  call(OpId::AttentionBackward, in, c.attrs, out);
  for (int i = 0; i < 3; ++i) {
    if (c.needs_grad(i)) gi[i] = out[i];
  }
}

void attention_backward_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() == 6 || in.size() == 7, "attention_backward: takes (gout, q, k, v, out, lse[, mask]), got ",
              in.size(), " inputs");
  const Geometry g =
      check_attention("attention_backward", in[1], in[2], in[3], in.size() == 7 ? &in[6] : nullptr, attrs.flag2);
  Shape o = g.lead, lse = g.lead;
  o.push_back(g.T);
  o.push_back(g.Dv);
  lse.push_back(g.T);
  BRISK_CHECK(in[0].sizes() == o && in[4].sizes() == o && in[5].sizes() == lse, "attention_backward: gout ",
              in[0].sizes(), " and out ", in[4].sizes(), " must be ", o, ", lse ", in[5].sizes(), " must be ", lse);
  for (int i : {0, 4, 5}) {
    const DType want = i == 5 ? lse_dtype(in[1].dtype()) : in[1].dtype();
    BRISK_CHECK(in[size_t(i)].dtype() == want, "attention_backward: operand ", i, " is ", in[size_t(i)].str(),
                ", expected ", want, " (q is ", in[1].dtype(), ")");
  }
  for (int i = 0; i < 3; ++i) out[size_t(i)] = {in[size_t(i) + 1].sizes(), in[1].dtype()};
}

const OpDef kAttention{.infer = attention_infer,
                       .backward = attention_bw,
                       .save_inputs = mask(0, 1, 2, 3),  // q, k, v, mask
                       .save_outputs = mask(0, 1),       // out, lse
                       .diff_inputs = mask(0, 1, 2),     // a mask gets no gradient (the math form gives one)
                       .autocast = CastPolicy::Lower};
// Backward runs in the forward's dtype (its inputs are the forward's own tensors).
const OpDef kAttentionBackward{.infer = attention_backward_infer, .autocast = CastPolicy::None};

struct Checked {
  Tensor mask;  // expanded to (*, T, S), or undefined
  double scale;
};

Checked check_public(const char* fn, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     double dropout_p, std::optional<double> scale) {
  BRISK_CHECK(q.defined() && k.defined() && v.defined(), fn, ": q, k and v must be defined");
  BRISK_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), fn, ": q ", q.sizes(), ", k ", k.sizes(),
              ", v ", v.sizes(), " must have the same number of dims (>= 2)");
  BRISK_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), fn, ": q ", q.sizes(), ", k ", k.sizes(), ", v ",
              v.sizes(), " do not fit (q/k last dims, k/v sequence dims)");
  BRISK_CHECK(dropout_p >= 0 && dropout_p < 1, fn, ": dropout_p must be in [0, 1), got ", dropout_p);
  Checked c{Tensor(), scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)))};
  if (mask.defined()) {
    BRISK_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()), fn,
                ": mask must be Bool (true = attend) or floating (added to the scores), got ", mask.str());
    Shape scores = lead_dims(q, 1);
    scores.push_back(k.size(-2));
    BRISK_CHECK(mask.dim() <= int64_t(scores.size()), fn, ": mask ", mask.sizes(), " does not broadcast to ", scores);
    for (int64_t i = 1; i <= mask.dim(); ++i) {
      const int64_t m = mask.size(-i), s = scores[scores.size() - size_t(i)];
      BRISK_CHECK(m == s || m == 1, fn, ": mask ", mask.sizes(), " does not broadcast to the scores ", scores);
    }
    c.mask = expand(mask, scores);
  }
  return c;
}

}  // namespace

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                         double dropout_p, bool is_causal, std::optional<double> scale,
                                         Generator* gen) {
  const Checked c = check_public("scaled_dot_product_attention_math", q, k, v, mask, dropout_p, scale);
  Tensor scores = matmul(q, k.transpose(-2, -1)) * c.scale;  // (*, T, S)
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const int64_t t = q.size(-2), s = k.size(-2);
    // Query i attends keys j <= i (the top-left diagonal, as PyTorch's tril(diagonal=0)).
    Tensor rows = arange(t, DType::I64, q.device()).unsqueeze(1);
    Tensor cols = arange(s, DType::I64, q.device()).unsqueeze(0);
    scores = masked_fill(scores, gt(cols, rows), neg_inf);
  }
  if (c.mask.defined()) {
    scores = c.mask.dtype() == DType::Bool
                 ? masked_fill(scores, eq(c.mask, zeros({}, DType::Bool, q.device())), neg_inf)
                 : scores + c.mask.to(scores.dtype());
  }
  Tensor attn = softmax(scores, -1);
  if (dropout_p > 0) attn = dropout(attn, dropout_p, true, gen);
  return matmul(attn, v);
}

// Note [When the fused attention runs]
// The op takes F32 / F64 on the CPU and on CUDA (brisk's own kernels, kernels/cuda/
// attention.cu, head sizes up to kMaxCudaHead), and BF16 on the CPU (the BF16 GEMM's
// products, F32 softmax and accumulators, Note [Fused attention]). Its autocast policy is
// Lower, as PyTorch's (scaled_dot_product_attention is on both of its lower_precision_fp
// lists): under CPU autocast (BF16) it runs the BF16 kernel. The public function asks
// dispatch which dtype the op would get (dispatch_dtype: autocast's, else q's); where no kernel
// takes it (F16 anywhere, BF16 on CUDA) it runs the op in F32 with autocast off and rounds the
// output once to that dtype, so the result has the dtype PyTorch's would. A floating mask that
// requires grad, a device without the kernel and larger CUDA heads take the math form, which
// records the matmuls and the softmax and differentiates the mask too.
namespace {

constexpr int64_t kMaxCudaHead = 256;  // kernels/cuda/attention.cu's per-thread accumulators

bool fused_attention_runs(const Tensor& q, const Tensor& v) {
  if (q.device().is_cpu()) return true;
  if (op_def(OpId::Attention).kernels[int(q.device().type)] == nullptr) return false;
  return q.size(-1) <= kMaxCudaHead && v.size(-1) <= kMaxCudaHead && q.dim() <= 8;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale, Generator* gen) {
  const Checked c = check_public("scaled_dot_product_attention", q, k, v, mask, dropout_p, scale);
  const bool mask_grad = c.mask.defined() && c.mask.requires_grad();
  if (!fused_attention_runs(q, v) || !is_floating(q.dtype()) || mask_grad || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype()) {
    return scaled_dot_product_attention_math(q, k, v, mask, dropout_p, is_causal, scale, gen);
  }
  const DeviceType dev = q.device().type;
  const DType want = dispatch_dtype(OpId::Attention, q);  // what the op gets: autocast's or q's
  const bool native = want == DType::F32 || want == DType::F64 || (want == DType::BF16 && dev == DeviceType::CPU);
  // Without a kernel for `want`: F32, with autocast off so that dispatch keeps it.
  const DType compute = native ? want : DType::F32;
  std::optional<AutocastGuard> no_autocast;
  if (!native && autocast::is_enabled(dev)) no_autocast.emplace(dev, autocast::dtype(dev), false);
  Attrs attrs;
  attrs.a = dropout_p;
  attrs.b = c.scale;
  attrs.flag = is_causal;
  attrs.start = 0;  // the causal diagonal: query i attends keys j <= i + start
  attrs.flag2 = c.mask.defined() && c.mask.dtype() != DType::Bool;
  if (dropout_p > 0) {
    Generator& g = gen ? *gen : default_generator();
    attrs.seed = g.seed();
    int64_t elements = 1;
    for (int64_t i = 0; i < q.dim() - 1; ++i) elements *= q.size(i);
    attrs.offset = g.reserve(uint64_t(elements * k.size(-2)));  // one uniform per score
  }
  std::vector<Tensor> in = {q.to(compute), k.to(compute), v.to(compute)};
  // An additive mask in the op's dtype, F32 with BF16 (added to F32 scores).
  if (c.mask.defined()) in.push_back(attrs.flag2 ? c.mask.to(compute == DType::BF16 ? DType::F32 : compute) : c.mask);
  Tensor out[2];
  call(OpId::Attention, in, attrs, out);
  return out[0].to(want);
}

namespace detail {

void define_attention_ops() {
  define(OpId::Attention, kAttention);
  define(OpId::AttentionBackward, kAttentionBackward);
}

}  // namespace detail

}  // namespace brisk
