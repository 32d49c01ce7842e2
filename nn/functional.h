// nn/functional.h: the functional forms of the layers (PyTorch's torch.nn.functional), each a
// few lines over engine ops. Layers (nn/layers.h) own parameters and call these.
// Layout is NCHW; weights have PyTorch's shapes, so PyTorch checkpoints load unchanged.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/functions.h"

namespace brisk::nn::functional {

using Pair = std::array<int64_t, 2>;

// ---- linear and convolution (nn/functional_conv.cpp)
// x (*, in), weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// x (B, C, H, W), weight (O, C / groups, kh, kw), bias (O) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = {1, 1},
              Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);
// x (B, C, L), weight (O, C / groups, k): conv2d with H = 1.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
// stride defaults to the kernel size (as PyTorch) when empty.
Tensor max_pool2d(const Tensor& x, Pair kernel, std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                  Pair dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, Pair kernel, std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);

// ==== begin: padding, resizing, transposed convolution, 1-d and adaptive max pooling ==========
// (issue 17, item 5). Conv3d / conv_transpose3d / 3-d pooling do not exist in brisk: a 5-D
// input to conv2d or conv_transpose2d is an error that says so.

// ---- transposed convolution and more pooling (nn/functional_conv.cpp)
// x (B, C_in, H, W) or unbatched (C_in, H, W); weight in PyTorch's layout (C_in, C_out /
// groups, kh, kw); bias (C_out) or undefined. Output size per axis: (H - 1) * stride - 2 *
// padding + dilation * (kh - 1) + output_padding + 1, where output_padding must be smaller than
// stride or dilation (as PyTorch). The gradient of conv2d with respect to its input.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = {1, 1},
                        Pair padding = {0, 0}, Pair output_padding = {0, 0}, int64_t groups = 1,
                        Pair dilation = {1, 1});
// x (B, C_in, L) or (C_in, L), weight (C_in, C_out / groups, k): conv_transpose2d with H = 1.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);
// x (B, C, L) or (C, L): max_pool2d / avg_pool2d over (B, C, 1, L); stride defaults to kernel.
// The indices of *_with_indices are positions along L, as PyTorch's return_indices.
Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  int64_t dilation = 1, bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel,
                                                  std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                                                  int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
// max_pool2d's values and its indices into each H * W plane (PyTorch's return_indices).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel,
                                                  std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                                                  Pair dilation = {1, 1}, bool ceil_mode = false);
// x (B, C, H, W) or (C, H, W); PyTorch's adaptive windows; indices into each H * W plane.
Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size);
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Pair output_size);
// x (B, C, L) or (C, L).
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);

// ---- padding and resizing (nn/functional_resize.cpp)
// PyTorch's F.pad: `pad` holds (before, after) pairs, the LAST dim first ({left, right, top,
// bottom, ...}), at most x.dim() pairs. mode "constant" (fills `value`), "reflect" (mirror
// without the edge; each pad < the dim's size), "replicate" (repeat the edge), "circular"
// (wrap; each pad <= the dim's size). Negative pads crop, in every mode (circular wraps
// around what the crops leave, as PyTorch). Any number of the trailing dims may be padded
// (PyTorch's non-constant modes take at most 3).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant", double value = 0.0);

// Options of interpolate: exactly one of size and scale_factor, each one value for every
// spatial dim or one per spatial dim.
struct InterpolateOptions {
  std::vector<int64_t> size = {};          // output spatial sizes
  std::vector<double> scale_factor = {};   // output size = floor(input size * scale_factor)
  std::string mode = "nearest";            // nearest, nearest-exact, linear (3-D), bilinear (4-D), trilinear (5-D)
  std::optional<bool> align_corners = {};  // linear modes only; unset = false, as PyTorch
  // false: the given scale_factor places the samples (PyTorch's default); true: input / output size.
  bool recompute_scale_factor = false;
};
// x (B, C, L), (B, C, H, W) or (B, C, D, H, W). Sample positions, rounding and clamping as
// PyTorch's CPU kernels (coordinates in float, in double for F64 inputs; nearest in float).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// (*, C * r^2, H, W) -> (*, C, H * r, W * r), and its inverse.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// ==== end: padding, resizing, transposed convolution, 1-d and adaptive max pooling ============

// ---- normalization (nn/functional_norm.cpp)
// Normalizes over the trailing dims `normalized_shape`; weight/bias of that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// RMS normalization over the trailing dims (torch.nn.functional.rms_norm; brisk::rms_norm).
using ::brisk::rms_norm;
// x (B, C, *). training: batch statistics, and running stats (if defined) updated with momentum;
// eval: the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);
// x (B, C, *) in `groups` groups of channels; weight/bias (C).
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

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
