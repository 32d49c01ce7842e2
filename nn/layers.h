// nn/layers.h: the layers, each a Module with PyTorch's parameter names, shapes and default
// initialization, whose forward calls its functional form (nn/functional.h). Constructors
// take the arguments in PyTorch's order; options beyond the first few are named structs.
#pragma once

#include <memory>
#include <typeinfo>

#include "nn/functional.h"
#include "nn/kv_cache.h"
#include "nn/module.h"

namespace brisk::nn {

using functional::Pair;

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor& weight() { return parameter("weight"); }  // (out, in)
  Tensor bias();                                    // (out) or undefined
  int64_t in_features, out_features;
};

struct ConvOptions {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, ConvOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvOptions options = {})
      : Conv2d(in_channels, out_channels, Pair{kernel_size, kernel_size}, options) {}
  Tensor forward(const Tensor& x) override;
  int64_t in_channels, out_channels;
  Pair kernel_size;
  ConvOptions options;
};

class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  int64_t stride, padding, dilation, groups;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair kernel, std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                     Pair dilation = {1, 1}, bool ceil_mode = false);
  explicit MaxPool2d(int64_t kernel) : MaxPool2d(Pair{kernel, kernel}) {}
  Tensor forward(const Tensor& x) override;
  bool is_window_max() const override { return typeid(*this) == typeid(MaxPool2d); }
  Pair kernel, padding, dilation;
  std::optional<Pair> stride;
  bool ceil_mode;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair kernel, std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                     bool ceil_mode = false, bool count_include_pad = true);
  explicit AvgPool2d(int64_t kernel) : AvgPool2d(Pair{kernel, kernel}) {}
  Tensor forward(const Tensor& x) override;
  Pair kernel, padding;
  std::optional<Pair> stride;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size);
  explicit AdaptiveAvgPool2d(int64_t size) : AdaptiveAvgPool2d(Pair{size, size}) {}
  Tensor forward(const Tensor& x) override;
  Pair output_size;
};

// BatchNorm1d (inputs (B, C) or (B, C, L)) and BatchNorm2d ((B, C, H, W)): parameters weight,
// bias; buffers running_mean, running_var, num_batches_tracked, as PyTorch.
class BatchNorm : public Module {
 public:
  BatchNorm(const char* type, int expected_dims_lo, int expected_dims_hi, int64_t num_features, double eps,
            double momentum, bool affine, bool track_running_stats);
  Tensor forward(const Tensor& x) override;
  int64_t num_features;
  double eps, momentum;

 private:
  int lo_, hi_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", 2, 3, num_features, eps, momentum, affine, track_running_stats) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", 4, 4, num_features, eps, momentum, affine, track_running_stats) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  // LayerNorm(128): the last dim, as PyTorch takes an int.
  explicit LayerNorm(int64_t normalized_dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_dim}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;
  double eps;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  int64_t num_groups, num_channels;
  double eps;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;  // indices I64 (*) -> (*, dim)
  int64_t num_embeddings, embedding_dim;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  int64_t start_dim, end_dim;
};

// Stateless activations.
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
  // Not a subclass, whose forward may differ.
  bool commutes_with_window_max() const override { return typeid(*this) == typeid(ReLU); }
};
class ReLU6 : public Module {
 public:
  ReLU6() : Module("ReLU6") {}
  Tensor forward(const Tensor& x) override { return clamp(x, 0.0, 6.0); }
};
class GELU : public Module {
 public:
  explicit GELU(bool tanh_approximation = false) : Module("GELU"), tanh_approximation(tanh_approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, tanh_approximation); }
  bool tanh_approximation;
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override { return brisk::tanh(x); }
};
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override { return brisk::softmax(x, dim); }
  int64_t dim;
};

// Multi-head attention, as torch.nn.MultiheadAttention: query (T, B, E), key/value (S, B, E)
// -> (T, B, E) (PyTorch's default), or (B, T, E) / (B, S, E) -> (B, T, E) with batch_first.
// Parameters as PyTorch: in_proj_weight (3E, E), in_proj_bias (3E), out_proj.{weight, bias}.
// Masks as PyTorch's (Note [Attention masks]): attn_mask (T, S) or (B * num_heads, T, S),
// key_padding_mask (B, S), each Bool (true = not allowed) or floating (added to the scores, as
// generate_square_subsequent_mask's 0 / -inf, nn/transformer.h). The calls:
//   auto [out, weights] = mha(q, k, v);  // PyTorch's call; the hooks run and see the query
//   Tensor y = mha(q, k, v, key_padding_mask, /*need_weights=*/false, attn_mask).output;
//   Tensor y = mha(x);  // self-attention (hooks run), with the causal mask when `causal` is set
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, bool causal = false);
  // The output and the attention weights (after dropout, as PyTorch's): (B, T, S) averaged
  // over heads or (B, H, T, S), whatever batch_first; undefined when not asked for.
  struct WithWeights {
    Tensor output{};
    Tensor weights{};
  };
  // PyTorch's forward(query, key, value, key_padding_mask, need_weights, attn_mask,
  // average_attn_weights, is_causal) through the module's call. is_causal adds the causal mask
  // (PyTorch takes it as a hint that attn_mask is causal; here it suffices alone, and with a
  // causal attn_mask the result is the same). need_weights false takes the fused path.
  using Module::operator();
  WithWeights operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                         const Tensor& key_padding_mask = {}, bool need_weights = true, const Tensor& attn_mask = {},
                         bool average_attn_weights = true, bool is_causal = false);
  // The output only, without the hooks; attn_mask: Bool (true = not allowed) or floating,
  // broadcastable to (B, H, T, S) (PyTorch's (B * H, T, S) layout is the call's).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = {},
                 bool causal = false);
  Tensor forward(const Tensor& x) override { return forward(x, x, x, {}, causal); }
  // The call with need_weights, without the hooks.
  WithWeights forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask = {}, const Tensor& attn_mask = {},
                                   bool average_attn_weights = true, bool causal = false);
  int64_t embed_dim, num_heads;
  double dropout;
  bool batch_first;
  bool causal;  // mha(x) masks future positions
  // Incremental decoding (self-attention): while use_cache, each call appends the projected
  // keys and values of its key / value inputs to `cache` and the queries attend to everything
  // cached; a causal call then lets query i see keys j <= cached + i (the bottom-right
  // diagonal), and attn_mask is (T, S) or (B * H, T, S) over all S cached keys. The weights
  // path (need_weights) does not use the cache. cache.reset() starts a new sequence.
  KVCache cache;
  bool use_cache = false;
};

// The checks of PyTorch's attention masks (MultiheadAttention's, the transformer blocks'), with
// the caller's names in the errors ("TransformerEncoderLayer: src_mask has shape (4, 5),
// expected ..."); for batch B, heads H, T queries and S keys. Undefined masks pass.
void check_attn_mask(const std::string& who, const char* name, const Tensor& mask, int64_t batch, int64_t heads,
                     int64_t t, int64_t s);
void check_key_padding_mask(const std::string& who, const char* name, const Tensor& mask, int64_t batch, int64_t s);

// Loss modules hold their options; call them with (input, target).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(Tensor weight = {}, Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                            double label_smoothing = 0.0);
  Tensor operator()(const Tensor& logits, const Tensor& target);
  Reduction reduction;
  int64_t ignore_index;
  double label_smoothing;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(Tensor weight = {}, Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
  Tensor operator()(const Tensor& log_probs, const Tensor& target);
  Reduction reduction;
  int64_t ignore_index;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : Module("MSELoss"), reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) {
    return functional::mse_loss(input, target, reduction);
  }
  Reduction reduction;
};

class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : Module("L1Loss"), reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) { return functional::l1_loss(input, target, reduction); }
  Reduction reduction;
};

class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0)
      : Module("SmoothL1Loss"), reduction(reduction), beta(beta) {}
  Tensor operator()(const Tensor& input, const Tensor& target) {
    return functional::smooth_l1_loss(input, target, reduction, beta);
  }
  Reduction reduction;
  double beta;
};

class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Tensor weight = {}, Reduction reduction = Reduction::Mean, Tensor pos_weight = {});
  Tensor operator()(const Tensor& logits, const Tensor& target);
  Reduction reduction;
};

class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::Mean, bool log_target = false)
      : Module("KLDivLoss"), reduction(reduction), log_target(log_target) {}
  Tensor operator()(const Tensor& input, const Tensor& target) {
    return functional::kl_div(input, target, reduction, log_target);
  }
  Reduction reduction;
  bool log_target;
};

}  // namespace brisk::nn
