// nn/models/gpt2.h: a GPT-2 decoder with Hugging Face GPT-2's module names and layouts, so
// published weights load as they are: transformer.wte / wpe, transformer.h.{i}.ln_1,
// attn.c_attn (a "Conv1D": weight stored (in, out)), attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj,
// transformer.ln_f, and lm_head tied to wte. Causal self-attention, GELU (tanh form).
#pragma once

#include "nn/layers.h"

namespace brisk::nn::models {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  double dropout = 0.1;  // embedding, attention and residual dropout
  double layer_norm_eps = 1e-5;
};

// Hugging Face's Conv1D: y = x @ weight + bias with weight (in, out).
class HFConv1D : public Module {
 public:
  HFConv1D(int64_t in, int64_t out, double init_std = 0.02);  // weight N(0, init_std), bias 0
  Tensor forward(const Tensor& x) override;
};

class GPT2Block : public Module {
 public:
  explicit GPT2Block(const GPT2Config& c);
  Tensor forward(const Tensor& x) override;  // x: (B, T, C)

 private:
  int64_t n_head_;
  double dropout_;
};

class GPT2 : public Module {
 public:
  explicit GPT2(GPT2Config config = {});
  // idx: (B, T) I64 token ids -> logits (B, T, vocab).
  Tensor forward(const Tensor& idx) override;
  // Loads a Hugging Face GPT-2 state dict: accepts keys with or without the "transformer."
  // prefix, ignores the attention-mask buffers (attn.bias, attn.masked_bias) and a tied
  // lm_head.weight. Returns what was missing or unexpected.
  LoadReport load_hf_state_dict(const NamedTensors& state, bool strict = true);
  GPT2Config config;
};

}  // namespace brisk::nn::models
