// nn/functional.h: the functional forms of the layers (PyTorch's torch.nn.functional), each a
// few lines over engine ops. Layers (nn/layers.h) own parameters and call these. Those that
// are ops themselves (linear, conv, pooling, padding and resizing, normalization) are declared
// in engine/functions.h beside the other ops and re-exported here.
// Layout is NCHW; weights have PyTorch's shapes, so PyTorch checkpoints load unchanged.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/functions.h"

namespace brisk::nn::functional {

// The layers' functional forms that are ops live with their OpDefs (engine/functions.h,
// engine/ops/<family>.cpp); they are the same functions here.
using ::brisk::adaptive_avg_pool1d;
using ::brisk::adaptive_avg_pool2d;
using ::brisk::adaptive_max_pool1d;
using ::brisk::adaptive_max_pool2d;
using ::brisk::adaptive_max_pool2d_with_indices;
using ::brisk::avg_pool1d;
using ::brisk::avg_pool2d;
using ::brisk::batch_norm;
using ::brisk::conv1d;
using ::brisk::conv2d;
using ::brisk::conv_transpose1d;
using ::brisk::conv_transpose2d;
using ::brisk::group_norm;
using ::brisk::interpolate;
using ::brisk::InterpolateOptions;
using ::brisk::layer_norm;
using ::brisk::linear;
using ::brisk::max_pool1d;
using ::brisk::max_pool1d_with_indices;
using ::brisk::max_pool2d;
using ::brisk::max_pool2d_with_indices;
using ::brisk::pad;
using ::brisk::Pair;
using ::brisk::pixel_shuffle;
using ::brisk::pixel_unshuffle;
using ::brisk::rms_norm;

// ---- activations, dropout, embedding (nn/functional.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
Tensor embedding(const Tensor& indices, const Tensor& weight);

// ---- attention (nn/functional.cpp)
// q (B, H, T, D), k/v (B, H, S, D); mask broadcastable to (B, H, T, S), as PyTorch's
// attn_mask: Bool, true = take part in attention (false = masked out), or floating, added to
// the scores (-inf masks out). (nn::MultiheadAttention's Bool masks mean the opposite, true =
// not allowed, as PyTorch's do.)
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
                                    bool causal = false, double dropout_p = 0.0, bool training = true);

// ---- losses (nn/functional.cpp); reduction none/mean/sum as PyTorch
// logits (N, C) or (N, C, d1, ...), target I64 class indices (N) or (N, d1, ...), or floating
// class probabilities of the logits' shape (PyTorch's soft targets: mean divides by N * d1 * ...,
// not by the weights; ignore_index must stay negative); weight (C) or undefined.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100, double label_smoothing = 0.0);
// cross_entropy(linear(x, weight, bias), target) without the (N, V) logits (the classifier
// head fused into its loss): x (N, K) or (*, K), weight (V, K), target I64 (N) or (*), bias (V)
// or undefined; the engine op brisk::linear_cross_entropy with this file's argument order.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target, const Tensor& bias = {},
                            Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                            double label_smoothing = 0.0);
// log_probs (N, C) or (N, C, d1, ...), target I64.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = {},
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// pos_weight (C) or undefined, weight broadcastable to input or undefined.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);
// input: log-probabilities; target: probabilities (or log-probabilities when log_target).
// Reduction::Mean averages over all elements, as PyTorch's 'mean'.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);
// PyTorch's reduction='batchmean' (the true KL divergence per sample): the sum divided by
// input.size(0) (the sum for a 0-dim input).
Tensor kl_div_batchmean(const Tensor& input, const Tensor& target, bool log_target = false);
// PyTorch's BCELoss on probabilities in [0, 1] (logs clamped at -100, as PyTorch); prefer
// binary_cross_entropy_with_logits for stability.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (PyTorch's HuberLoss).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);
// x1, x2 (N, D) or (D); y (N) or 0-dim of +1 / -1: 1 - cos where y = 1, max(0, cos - margin)
// where y = -1 (PyTorch's CosineEmbeddingLoss, eps 1e-12 in the squared norms).
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin = 0.0,
                             Reduction reduction = Reduction::Mean);
// max(d(a, p) - d(a, n) + margin, 0) with the p-norm distance of (a - b + eps) over the last
// dim (PyTorch's TripletMarginLoss; swap uses min(d(a, n), d(p, n))).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin = 1.0,
                           double p = 2.0, double eps = 1e-6, bool swap = false, Reduction reduction = Reduction::Mean);

}  // namespace brisk::nn::functional
