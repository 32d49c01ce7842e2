// kernels/cuda/linear_cross_entropy.cpp: the CUDA kernels of linear_cross_entropy and its
// backward op, composed of brisk ops that have CUDA kernels (linear and matmul: cuBLASLt;
// logsumexp, exp, index_select, the elementwise ops: kernels/cuda/*.cu) over chunks of the
// vocabulary, so that no (N, V) tensor is made (Note [Linear cross-entropy recomputes the
// logits] in engine/ops/linear_cross_entropy.cpp). Each chunk's logits are one linear call;
// the forward keeps one logsumexp per row and chunk and combines them; the target's logit and
// the logits' sum (label smoothing) come from the target's row of w and the column sum of w.
// Written with device-agnostic ops only: tests/test_linear_cross_entropy.cpp runs these
// functions on CPU tensors against the CPU kernel. Not here: a hand-fused CUDA kernel (the
// products are cuBLAS's either way; fusing the softmax would save the chunk's extra passes).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autocast.h"
#include "engine/functions.h"
#include "engine/op.h"
#include "engine/op_params.h"
#include "engine/tensor.h"
#include "kernels/cuda/register.h"

namespace brisk::kernels::cuda {

namespace {

// Classes per chunk: about 8M logits (32 MB in F32), a multiple of 64.
int64_t chunk_classes(int64_t n, int64_t v) {
  int64_t c = (int64_t(1) << 23) / std::max<int64_t>(n, 1);
  c = std::max<int64_t>(64, c / 64 * 64);
  return std::max<int64_t>(1, std::min(c, v));
}

Tensor narrow_or_empty(const Tensor& t, int64_t start, int64_t length) {
  return t.defined() ? t.narrow(0, start, length) : Tensor();
}

// The rows whose target is not ignore_index (Bool (N)), and the targets with ignored rows
// sent to class 0 (for the row gathers).
struct Targets {
  Tensor valid{}, safe{};
};

Targets targets(const Tensor& t, int64_t ignore_index) {
  const Tensor ignore = scalar_tensor(double(ignore_index), DType::I64, t.device());
  Targets r;
  r.valid = ne(t, ignore);
  r.safe = where(r.valid, t, zeros_like(t));
  return r;
}

// (x, w, target[, bias]) -> (loss, lse (N)) in the accumulation dtype of out[1].
void linear_cross_entropy_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1], &target = in[2];
  const Tensor bias = in.size() == 4 ? in[3] : Tensor();
  const CrossEntropyParams p = CrossEntropyParams::from(attrs);
  const DType acc = out[1].dtype();
  AutocastGuard no_autocast(x.device().type, DType::BF16, false);  // inputs arrive cast already
  const int64_t n = x.size(0), v = w.size(0);
  const Targets t = targets(target, p.ignore_index);
  const int64_t chunk = chunk_classes(n, v);
  std::vector<Tensor> lses;
  for (int64_t v0 = 0; v0 < v; v0 += chunk) {
    const int64_t vc = std::min(chunk, v - v0);
    const Tensor logits = cast(linear(x, w.narrow(0, v0, vc), narrow_or_empty(bias, v0, vc)), acc);
    lses.push_back(logsumexp(logits, {1}, true));  // (N, 1)
  }
  const Tensor lse = lses.empty() ? full({n}, -INFINITY, acc, x.device()) : logsumexp(cat(lses, 1), {1});
  const Tensor xa = cast(x, acc);
  Tensor target_logit = sum(xa * cast(index_select(w, 0, t.safe), acc), {1});
  if (bias.defined()) target_logit = target_logit + cast(index_select(bias, 0, t.safe), acc);
  Tensor rows = lse - target_logit * (1 - p.label_smoothing);
  if (p.label_smoothing > 0) {
    Tensor logit_sum = matmul(xa, sum(cast(w, acc), {0}));
    if (bias.defined()) logit_sum = logit_sum + sum(cast(bias, acc));
    rows = rows - logit_sum * (p.label_smoothing / double(v));
  }
  rows = where(t.valid, rows, zeros_like(rows));
  Tensor loss = rows;
  if (p.reduction == Reduction::Sum) loss = sum(rows);
  if (p.reduction == Reduction::Mean) loss = sum(rows) / sum(cast(t.valid, acc));
  out[0].copy_(loss);
  out[1].copy_(lse);
}

// (grad, x, w, target, lse[, bias]) -> (dx, dw, dbias): per chunk, d = s_i (softmax - q) from
// the recomputed logits and the saved lse; dw's rows = d^T @ x, dx += d @ w's rows, dbias's
// entries = d's column sums.
void linear_cross_entropy_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor &grad = in[0], &x = in[1], &w = in[2], &target = in[3], &lse = in[4];
  const Tensor bias = in.size() == 6 ? in[5] : Tensor();
  const CrossEntropyParams p = CrossEntropyParams::from(attrs);
  const DType acc = lse.dtype();
  AutocastGuard no_autocast(x.device().type, DType::BF16, false);
  const int64_t n = x.size(0), v = w.size(0), k = x.size(1);
  const Targets t = targets(target, p.ignore_index);
  const Tensor valid = cast(t.valid, acc);
  Tensor scale = p.reduction == Reduction::None ? grad : expand(grad, {n});
  if (p.reduction == Reduction::Mean) scale = scale / sum(valid);
  scale = unsqueeze(scale * valid, 1);  // (N, 1), 0 on ignored rows
  const Tensor lse_col = unsqueeze(lse, 1);
  Tensor dx = zeros({n, k}, acc, x.device());
  out[1].zero_();
  if (bias.defined()) out[2].zero_();
  const int64_t chunk = chunk_classes(n, v);
  for (int64_t v0 = 0; n > 0 && v0 < v; v0 += chunk) {
    const int64_t vc = std::min(chunk, v - v0);
    const Tensor wc = w.narrow(0, v0, vc);
    const Tensor logits = cast(linear(x, wc, narrow_or_empty(bias, v0, vc)), acc);
    Tensor d = exp(logits - lse_col) * scale;
    if (p.label_smoothing > 0) d = d - scale * (p.label_smoothing / double(v));
    const Tensor classes = arange(double(v0), double(v0 + vc), 1, DType::I64, x.device());
    const Tensor onehot = cast(eq(unsqueeze(target, 1), unsqueeze(classes, 0)), acc);  // (N, vc)
    d = d - onehot * (scale * (1 - p.label_smoothing));
    const Tensor d_low = cast(d, x.dtype());
    out[1].narrow(0, v0, vc).copy_(matmul(transpose(d_low, 0, 1), x));
    dx = dx + cast(matmul(d_low, wc), acc);
    if (bias.defined()) out[2].narrow(0, v0, vc).copy_(sum(d, {0}));
  }
  out[0].copy_(dx);
}

}  // namespace

void register_linear_cross_entropy() {
  register_kernel(OpId::LinearCrossEntropy, DeviceType::CUDA, linear_cross_entropy_kernel);
  register_kernel(OpId::LinearCrossEntropyBackward, DeviceType::CUDA, linear_cross_entropy_backward_kernel);
}

}  // namespace brisk::kernels::cuda
