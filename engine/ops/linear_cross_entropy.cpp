// engine/ops/linear_cross_entropy.cpp: linear_cross_entropy, a classifier head fused into its
// loss: cross_entropy(x @ w^T + bias, target) without the (N, V) logits, and its backward op
// (shape and dtype checks naming the op, the autocast policy, the public function).
// Kernels: kernels/cpu/linear_cross_entropy.cpp. Not here: cross_entropy itself and its
// parameters (engine/ops/reduce.cpp, CrossEntropyParams in engine/op_params.h).
#include "engine/ops/families.h"

namespace brisk {
namespace {

using detail::define;
using detail::mask;

// Note [Linear cross-entropy recomputes the logits]
// A language model's head and loss, linear then cross_entropy, keep the (N, V) logits alive from
// the forward to the backward and make a second (N, V) tensor for their gradient: at N = 2048
// tokens and GPT-2's V = 50257 that is 411 MB each in F32, the largest tensors of a small GPT's
// step. linear_cross_entropy walks the vocabulary in chunks (kernels/cpu/linear_cross_entropy.cpp):
// each chunk's logits (N, Vc) are made by the GEMM into one scratch buffer of a few MB, folded
// into a running logsumexp per row (and the target's logit picked out), and dropped. The forward
// saves only the rows' logsumexp (N values).
// Its backward op recomputes each chunk's logits, turns them into s_i (softmax - q) with the
// saved logsumexp (no second pass for the row's maximum), and multiplies right away: dw for the
// chunk's rows of w in one product (written once), dx accumulated (N, K, small).
// The other choice, the Liger kernel's, computes the gradient during the forward (one product
// fewer: 3 instead of 4) and keeps dx and dw until the backward scales them by the incoming
// gradient. It was not taken because it is not simpler: dw (as large as the weight) is held from
// the forward on and computed even when no backward follows (evaluation under grad mode);
// Reduction::None cannot be done that way (the per-row gradient is known only in the backward
// and dw sums over rows); and a double backward through saved gradients would be silently wrong.
// Recomputing costs one (N, V, K) product more than the unfused pair, which the saved memory
// traffic of two (N, V) tensors partly pays back: at GPT-2's head, N = 2048, F32 steps take
// 1.2x the pair's time at 0.19x its peak memory, BF16 autocast steps 0.55x the time at 0.25x
// the memory (examples/bench/bench_linear_ce.cpp, docs/performance.md).
// Double backward is not supported (the backward op has no backward of its own), as for
// attention_backward.

// The dtype of the loss and the saved logsumexp: F64 for F64 inputs, else F32 (a BF16 product
// under autocast still does its softmax in F32, and the loss is F32, as cross_entropy's is).
DType lce_acc_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

Shape lce_loss_shape(int64_t n, const CrossEntropyParams& p) {
  return p.reduction == Reduction::None ? Shape{n} : Shape{};
}

// x (N, K), w (V, K), target I64 (N), bias (V) or null, all checked against each other.
void check_lce_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& target, const Tensor* bias,
                      const CrossEntropyParams& p) {
  BRISK_CHECK(x.dim() == 2 && is_floating(x.dtype()), op, ": input must be floating (N, K), got ", x.str());
  BRISK_CHECK(w.dim() == 2 && w.size(1) == x.size(1), op, ": weight must be (V, ", x.size(1), ") for input ", x.str(),
              ", got ", w.str());
  BRISK_CHECK(w.dtype() == x.dtype(), op, ": dtypes differ (input ", x.str(), ", weight ", w.str(), ")");
  BRISK_CHECK(target.dtype() == DType::I64 && target.dim() == 1 && target.size(0) == x.size(0), op,
              ": target must be I64 class indices of shape (", x.size(0), ") for input ", x.str(), ", got ",
              target.str());
  if (bias) {
    BRISK_CHECK(bias->dim() == 1 && bias->size(0) == w.size(0) && bias->dtype() == x.dtype(), op, ": bias must be (",
                w.size(0), ") of ", dtype_name(x.dtype()), " for weight ", w.str(), ", got ", bias->str());
  }
  BRISK_CHECK(p.label_smoothing >= 0 && p.label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ",
              p.label_smoothing);
}

// ---- linear_cross_entropy: (x (N, K), w (V, K), target I64 (N)[, bias (V)]) -> (loss, lse (N))
void lce_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() == 3 || in.size() == 4,
              "linear_cross_entropy: takes (input, weight, target) or (input, weight, target, bias), got ", in.size(),
              " inputs");
  const CrossEntropyParams p = CrossEntropyParams::from(a);
  check_lce_inputs("linear_cross_entropy", in[0], in[1], in[2], in.size() == 4 ? &in[3] : nullptr, p);
  const DType acc = lce_acc_dtype(in[0].dtype());
  out[0] = {lce_loss_shape(in[0].size(0), p), acc};
  out[1] = {Shape{in[0].size(0)}, acc};
}

// See Note [Linear cross-entropy recomputes the logits]. Gradients never flow into the saved
// lse (an internal output, as cross_entropy's).
void lce_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  if (!c.grads[0].defined()) return;
  const bool has_bias = c.inputs.size() == 4;
  std::vector<Tensor> in = {c.grads[0], c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[1]};
  if (has_bias) in.push_back(c.inputs[3]);
  Tensor out[3];
  call(OpId::LinearCrossEntropyBackward, in, c.attrs, out);
  gi[0] = out[0];
  gi[1] = out[1];
  if (has_bias) gi[3] = out[2];
}

const OpDef kLinearCrossEntropy{.infer = lce_infer,
                                .backward = lce_bw,
                                .save_inputs = mask(0, 1, 2, 3),  // x, w, target, bias
                                .save_outputs = mask(1),          // lse
                                .diff_inputs = mask(0, 1, 3),     // x, w, bias
                                .autocast = CastPolicy::Lower};   // the GEMM in BF16; softmax in F32

// ---- linear_cross_entropy_backward: (grad, x, w, target, lse[, bias]) -> (dx, dw, dbias)
void lce_backward_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() == 5 || in.size() == 6,
              "linear_cross_entropy_backward: takes (grad, input, weight, target, lse[, bias]), got ", in.size(),
              " inputs");
  const CrossEntropyParams p = CrossEntropyParams::from(a);
  const Tensor &grad = in[0], &x = in[1], &w = in[2], &lse = in[4];
  check_lce_inputs("linear_cross_entropy_backward", x, w, in[3], in.size() == 6 ? &in[5] : nullptr, p);
  const DType acc = lce_acc_dtype(x.dtype());
  BRISK_CHECK(grad.dtype() == acc && grad.sizes() == lce_loss_shape(x.size(0), p),
              "linear_cross_entropy_backward: grad ", grad.str(), " does not match the loss of input ", x.str());
  BRISK_CHECK(lse.dtype() == acc && lse.sizes() == Shape{x.size(0)}, "linear_cross_entropy_backward: lse ", lse.str(),
              " does not match input ", x.str(), " (expected (", x.size(0), ") of ", dtype_name(acc), ")");
  out[0] = {x.sizes(), x.dtype()};
  out[1] = {w.sizes(), w.dtype()};
  out[2] = {Shape{in.size() == 6 ? w.size(0) : 0}, x.dtype()};
}

// Its inputs are the forward's, already cast: no autocast (the F32 grad must stay F32).
const OpDef kLinearCrossEntropyBackward{.infer = lce_backward_infer, .autocast = CastPolicy::None};

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target, const Tensor& bias,
                            Reduction reduction, double label_smoothing, int64_t ignore_index) {
  BRISK_CHECK(x.defined() && weight.defined() && target.defined(),
              "linear_cross_entropy: undefined input, weight or target");
  BRISK_CHECK(x.dim() >= 1 && target.dim() == x.dim() - 1, "linear_cross_entropy: target ", target.str(),
              " must have the input's shape without its last dim (input ", x.str(), ")");
  if (x.dim() != 2) {
    // (*, K) with target (*): one row per position.
    Shape expected = x.sizes();
    expected.erase(x.dim() - 1);
    BRISK_CHECK(target.sizes() == expected, "linear_cross_entropy: target ", target.str(), " does not match input ",
                x.str(), " (expected target shape ", expected, ")");
    const Tensor loss =
        linear_cross_entropy(reshape(x, {target.numel(), x.size(-1)}), weight, reshape(target, {target.numel()}), bias,
                             reduction, label_smoothing, ignore_index);
    return reduction == Reduction::None ? reshape(loss, target.sizes()) : loss;
  }
  Attrs a;
  CrossEntropyParams{.ignore_index = ignore_index, .label_smoothing = label_smoothing, .reduction = reduction}.store(a);
  Tensor out[2];
  if (bias.defined()) {
    const Tensor in[4] = {x, weight, target, bias};
    call(OpId::LinearCrossEntropy, in, a, out);
  } else {
    const Tensor in[3] = {x, weight, target};
    call(OpId::LinearCrossEntropy, in, a, out);
  }
  return out[0];
}

namespace detail {

void define_linear_cross_entropy_ops() {
  define(OpId::LinearCrossEntropy, kLinearCrossEntropy);
  define(OpId::LinearCrossEntropyBackward, kLinearCrossEntropyBackward);
}

}  // namespace detail
}  // namespace brisk
