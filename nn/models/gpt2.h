// nn/models/gpt2.h: a GPT-2 decoder with Hugging Face GPT-2's module names and layouts, so
// published weights load as they are: transformer.wte / wpe, transformer.h.{i}.ln_1,
// attn.c_attn (a "Conv1D": weight stored (in, out)), attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj,
// transformer.ln_f, and lm_head tied to wte. Causal self-attention, GELU (tanh form).
// Generation (nn/generate.h): each attention module keeps a KV cache; GPT2::generate.
#pragma once

#include "nn/generate.h"
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

  // Hugging Face's config.json of a GPT-2 (vocab_size, n_positions, n_embd, n_layer, n_head,
  // layer_norm_epsilon, the dropouts); fields it lacks keep GPT-2's defaults. A model type other
  // than "gpt2", or an activation other than GELU's tanh form, is an error naming the field.
  static GPT2Config from_json(const std::string& path);
};

// Hugging Face's Conv1D: y = x @ weight + bias with weight (in, out).
class HFConv1D : public Module {
 public:
  HFConv1D(int64_t in, int64_t out, double init_std = 0.02);  // weight N(0, init_std), bias 0
  Tensor forward(const Tensor& x) override;
};

// GPT-2's attention (c_attn, c_proj) with the KV cache generation fills.
class GPT2Attention : public Module {
 public:
  GPT2Attention(const GPT2Config& c, double residual_std);
  Tensor forward(const Tensor& x) override { return forward(x, {}, true); }
  // x (B, t, C). mask: Bool (B or 1, 1, t, S), true = attend, S the keys (the cached ones and
  // these t) or undefined; causal: query i attends keys j <= i (with no cache in use).
  // use_cache: keys and values join `cache` and the queries attend to all of it.
  Tensor forward(const Tensor& x, const Tensor& mask, bool causal, bool use_cache = false);
  // The same through the module's call (scope, hooks).
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& mask, bool causal, bool use_cache = false) {
    return call_with(x, [&](const Tensor& h) { return forward(h, mask, causal, use_cache); });
  }
  KVCache cache;

 private:
  int64_t n_head_;
  double dropout_;
};

class GPT2Block : public Module {
 public:
  explicit GPT2Block(const GPT2Config& c);
  Tensor forward(const Tensor& x) override { return forward(x, {}, true); }  // x: (B, T, C)
  Tensor forward(const Tensor& x, const Tensor& mask, bool causal, bool use_cache = false);
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& mask, bool causal, bool use_cache = false) {
    return call_with(x, [&](const Tensor& h) { return forward(h, mask, causal, use_cache); });
  }

 private:
  double dropout_;
};

class GPT2 : public CausalLM {
 public:
  explicit GPT2(GPT2Config config = {});
  // A Hugging Face GPT-2 directory: config.json and model.safetensors (any alignment, with or
  // without the "transformer." prefix); a weight whose shape disagrees with the config is an
  // error naming it.
  static std::shared_ptr<GPT2> from_pretrained(const std::string& dir);
  // idx: (B, T) I64 token ids -> logits (B, T, vocab).
  Tensor forward(const Tensor& idx) override;
  Tensor forward_step(const Tensor& ids, const Tensor& attention_mask, bool use_cache, bool last_only) override;
  // nanoGPT's model(idx, targets): the mean cross-entropy of next-token targets (B, T) I64 (or
  // flattened to (B * T); rows whose target is ignore_index are skipped), with the tied head fused into the loss
  // (linear_cross_entropy): the (B, T, vocab) logits are never made. Equals
  // cross_entropy(forward(idx) as (B * T, vocab), targets) and has the same gradients.
  Tensor loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index = -100);
  void reset_cache() override;
  void reserve_cache(int64_t positions) override;
  int64_t cached_length() const override;
  int64_t max_positions() const override { return config.n_positions; }
  // Loads a Hugging Face GPT-2 state dict: accepts keys with or without the "transformer."
  // prefix, ignores the attention-mask buffers (attn.bias, attn.masked_bias) and a tied
  // lm_head.weight. Returns what was missing or unexpected.
  LoadReport load_hf_state_dict(const NamedTensors& state, bool strict = true);
  GPT2Config config;

 private:
  // The final layer norm's output (B, T or 1, C): everything but the head.
  Tensor hidden(const Tensor& idx, const Tensor& attention_mask, bool use_cache, bool last_only);
};

}  // namespace brisk::nn::models
