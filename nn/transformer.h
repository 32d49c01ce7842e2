// nn/transformer.h: PyTorch's transformer blocks: TransformerEncoderLayer,
// TransformerDecoderLayer and the TransformerEncoder stack, with PyTorch's arguments, defaults
// (dim_feedforward 2048, dropout 0.1, relu, batch_first false, post-norm) and parameter names
// (self_attn.in_proj_weight, ..., linear1, linear2, norm1, norm2[, multihead_attn, norm3]), so a
// PyTorch state_dict loads unchanged. Attention is nn::MultiheadAttention (nn/layers.h).
// Masks are Bool, true = may not attend (PyTorch's bool masks; float additive masks are not
// taken): attn masks (T, S) or (B * nhead, T, S), key padding masks (B, S).
// Not here: the full nn.Transformer (encoder + decoder stacks), nested-tensor fast paths.
//
//   nn::TransformerEncoderLayer layer(512, 8, {.dropout = 0.1, .batch_first = true});
//   Tensor y = layer.forward(x, {}, padding_mask);   // x (B, T, 512), padding_mask (B, T)
#pragma once

#include <string>

#include "nn/module.h"

namespace brisk::nn {

// The options after (d_model, nhead), in PyTorch's keyword order.
struct TransformerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;             // after attention, inside and after the feed-forward, and in attention
  std::string activation = "relu";  // of the feed-forward: "relu" or "gelu" (exact erf form)
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // (B, T, E) instead of PyTorch's default (T, B, E)
  bool norm_first = false;   // pre-norm x + f(norm(x)) instead of post-norm norm(x + f(x))
  bool bias = true;          // of the linear layers, attention and layer norms
};

// Self-attention then a feed-forward, each a residual branch:
//   post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x)); x = x + ff(norm2(x))
// with sa = dropout1(self_attn(x, x, x)) and ff = dropout2(linear2(dropout(act(linear1(x))))).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerOptions options = {});
  // src (T, B, E) or (B, T, E) if batch_first. is_causal adds the causal mask (PyTorch takes
  // it as a hint that src_mask is causal; here it suffices alone, and with a causal src_mask
  // the result is the same).
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  int64_t d_model, nhead;
  TransformerOptions options;
};

// Self-attention, cross-attention over `memory`, then a feed-forward:
//   post-norm: x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x)); x = x + mha(norm2(x), memory); x = x + ff(norm3(x))
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerOptions options = {});
  // tgt (T, B, E), memory (S, B, E) (batch first if batch_first); tgt_mask (T, T), memory_mask
  // (T, S), key padding masks (B, T) / (B, S).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  // The one-tensor forward stays Module's (a decoder layer needs memory: calling it is an error
  // naming the module), visible beside the overload above.
  using Module::forward;
  int64_t d_model, nhead;
  TransformerOptions options;
};

// num_layers encoder layers ("layers.0", "layers.1", ...) and an optional final LayerNorm
// ("norm"), as torch.nn.TransformerEncoder(layer, num_layers, norm). PyTorch deep-copies one
// layer, so its layers start equal; here each layer draws its own initial weights.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerOptions options = {},
                     bool final_norm = false);
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  int64_t num_layers;
};

}  // namespace brisk::nn
