// nn/transformer.h: PyTorch's transformer blocks: TransformerEncoderLayer,
// TransformerDecoderLayer and the TransformerEncoder stack, with PyTorch's arguments, defaults
// (dim_feedforward 2048, dropout 0.1, relu, batch_first false, post-norm), calls and parameter
// names (self_attn.in_proj_weight, ..., linear1, linear2, norm1, norm2[, multihead_attn, norm3]),
// so PyTorch code ports line by line and a PyTorch state_dict loads unchanged. Attention is
// nn::MultiheadAttention (nn/layers.h). Masks as PyTorch's (Note [Attention masks] in
// nn/layers.cpp): attn masks (T, S) or (B * nhead, T, S), key padding masks (B, S), each Bool
// (true = may not attend) or floating (added to the scores, as
// generate_square_subsequent_mask's 0 / -inf). Calls through operator() run the hooks.
// Not here: the full nn.Transformer and TransformerDecoder stacks, nested-tensor fast paths.
//
//   nn::TransformerEncoderLayer layer(512, 8, {.dropout = 0.1, .batch_first = true});
//   nn::TransformerEncoder encoder(layer, 4, std::make_shared<nn::LayerNorm>(512));
//   Tensor mask = nn::generate_square_subsequent_mask(T);   // (T, T): 0, -inf above the diagonal
//   Tensor y = encoder(x, mask, padding_mask, /*is_causal=*/true);  // x (B, T, 512), padding (B, T)
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

// torch.nn.Transformer.generate_square_subsequent_mask: (sz, sz), 0 on and below the diagonal
// and -inf above it, in a floating dtype; in Bool, true above it (the same mask, true = may not
// attend).
Tensor generate_square_subsequent_mask(int64_t sz, DType dtype = DType::F32, Device device = Device::cpu());

// Self-attention then a feed-forward, each a residual branch:
//   post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x)); x = x + ff(norm2(x))
// with sa = dropout1(self_attn(x, x, x)) and ff = dropout2(linear2(dropout(act(linear1(x))))).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerOptions options = {});
  // PyTorch's layer(src, src_mask, src_key_padding_mask, is_causal), through the module's call
  // (the hooks run and see src); layer(x) is the call without masks. src (T, B, E) or (B, T, E)
  // if batch_first. is_causal adds the causal mask (PyTorch takes it as a hint that src_mask is
  // causal; here it suffices alone, and with a causal src_mask the result is the same).
  using Module::operator();
  Tensor operator()(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                    bool is_causal = false);
  // The same without the hooks.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  // A deep copy (PyTorch's copy.deepcopy, which TransformerEncoder(layer, n) makes n of): the
  // options, the parameter values in tensors of its own on the same device and dtype,
  // requires_grad and the train mode; not the hooks or derived tensors.
  std::shared_ptr<TransformerEncoderLayer> clone() const;
  int64_t d_model, nhead;
  TransformerOptions options;
};

// Self-attention, cross-attention over `memory`, then a feed-forward:
//   post-norm: x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x)); x = x + mha(norm2(x), memory); x = x + ff(norm3(x))
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerOptions options = {});
  // PyTorch's layer(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
  // memory_key_padding_mask, tgt_is_causal, memory_is_causal), through the module's call (the
  // hooks see tgt). tgt (T, B, E), memory (S, B, E) (batch first if batch_first); tgt_mask
  // (T, T), memory_mask (T, S), key padding masks (B, T) / (B, S).
  using Module::operator();
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                    const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                    const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                    bool memory_is_causal = false);
  // The same without the hooks.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  // The one-tensor forward stays Module's (a decoder layer needs memory: calling it is an error
  // naming the module), visible beside the overload above.
  using Module::forward;
  // A deep copy, as TransformerEncoderLayer::clone.
  std::shared_ptr<TransformerDecoderLayer> clone() const;
  int64_t d_model, nhead;
  TransformerOptions options;
};

// num_layers encoder layers ("layers.0", "layers.1", ...) and an optional final norm ("norm"),
// as torch.nn.TransformerEncoder(encoder_layer, num_layers, norm).
class TransformerEncoder : public Module {
 public:
  // PyTorch's form: num_layers deep copies of encoder_layer (each starts equal to it, with
  // parameters of its own) and `norm` (a module, used as given) or none.
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers, ModulePtr norm = nullptr);
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& encoder_layer, int64_t num_layers,
                     ModulePtr norm = nullptr);
  // brisk's shorthand: num_layers TransformerEncoderLayer(d_model, nhead, options), each drawing
  // its own initial weights, and a final LayerNorm(d_model) when final_norm. The same names.
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerOptions options = {},
                     bool final_norm = false);
  // PyTorch's encoder(src, mask, src_key_padding_mask, is_causal), through the module's call
  // and each layer's (their hooks run). PyTorch's is_causal = None (detect a causal mask) is
  // false here: the mask is applied as given, which gives the same result.
  using Module::operator();
  Tensor operator()(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                    bool is_causal = false);
  // The same without this module's hooks.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  int64_t num_layers;
};

}  // namespace brisk::nn
