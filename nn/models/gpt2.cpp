// nn/models/gpt2.cpp: GPT-2 as Hugging Face's GPT2LMHeadModel computes it.
#include "nn/models/gpt2.h"

#include <cmath>

#include "nn/init.h"

namespace brisk::nn::models {

namespace F = functional;

HFConv1D::HFConv1D(int64_t in, int64_t out, double init_std) : Module("Conv1D") {
  Tensor& w = register_parameter("weight", empty({in, out}));
  init::normal_(w, 0, init_std);
  register_parameter("bias", zeros({out}));
}

Tensor HFConv1D::forward(const Tensor& x) { return matmul(x, parameter("weight")) + parameter("bias"); }

namespace {
// Named child modules for the attention and MLP sub-blocks (their names are part of the keys).
class Holder : public Module {
 public:
  explicit Holder(const char* type) : Module(type) {}
};
}  // namespace

GPT2Block::GPT2Block(const GPT2Config& c) : Module("GPT2Block"), n_head_(c.n_head), dropout_(c.dropout) {
  register_module("ln_1", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps));
  auto attn = std::make_shared<Holder>("GPT2Attention");
  attn->register_module("c_attn", std::make_shared<HFConv1D>(c.n_embd, 3 * c.n_embd));
  // GPT-2 scales the residual projections' init by 1/sqrt(2 * n_layer).
  const double residual_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  attn->register_module("c_proj", std::make_shared<HFConv1D>(c.n_embd, c.n_embd, residual_std));
  register_module("attn", attn);
  register_module("ln_2", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps));
  auto mlp = std::make_shared<Holder>("GPT2MLP");
  mlp->register_module("c_fc", std::make_shared<HFConv1D>(c.n_embd, 4 * c.n_embd));
  mlp->register_module("c_proj", std::make_shared<HFConv1D>(4 * c.n_embd, c.n_embd, residual_std));
  register_module("mlp", mlp);
}

Tensor GPT2Block::forward(const Tensor& x) {
  bool train = is_training();
  int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / n_head_;
  Module& attn = submodule("attn");
  Tensor qkv = attn.submodule("c_attn")((*child("ln_1"))(x));  // (B, T, 3C)
  auto heads = [&](int64_t i) { return qkv.narrow(2, i * c, c).view({b, t, n_head_, d}).transpose(1, 2); };
  Tensor y = F::scaled_dot_product_attention(heads(0), heads(1), heads(2), {}, /*causal=*/true, dropout_, train);
  y = y.transpose(1, 2).reshape({b, t, c});  // (B, T, C)
  Tensor h = x + F::dropout(attn.submodule("c_proj")(y), dropout_, train);
  Module& mlp = submodule("mlp");
  Tensor m = mlp.submodule("c_proj")(gelu(mlp.submodule("c_fc")((*child("ln_2"))(h)), /*tanh=*/true));
  return h + F::dropout(m, dropout_, train);
}

GPT2::GPT2(GPT2Config c) : Module("GPT2LMHeadModel"), config(c) {
  auto tr = std::make_shared<Holder>("GPT2Model");
  // Embedding's own N(0, 1) init is skipped: GPT-2's replaces it (one draw per weight, not two).
  auto wte = tr->register_module("wte", init::skip_init<Embedding>(c.vocab_size, c.n_embd));
  auto wpe = tr->register_module("wpe", init::skip_init<Embedding>(c.n_positions, c.n_embd));
  init::normal_(wte->parameter("weight"), 0, 0.02);
  init::normal_(wpe->parameter("weight"), 0, 0.01);
  auto h = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPT2Block>(c));
  tr->register_module("h", h);
  tr->register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps));
  register_module("transformer", tr);
}

Tensor GPT2::forward(const Tensor& idx) {
  BRISK_CHECK(idx.dim() == 2 && idx.dtype() == DType::I64, "GPT2: expects token ids (B, T) I64, got ", idx.str());
  int64_t t = idx.size(1);
  BRISK_CHECK(t <= config.n_positions, "GPT2: sequence length ", t, " exceeds n_positions ", config.n_positions);
  Module& tr = submodule("transformer");
  const Tensor& wte = tr.submodule("wte").parameter("weight");
  Tensor pos = arange(t, DType::I64, idx.device());
  Tensor x = tr.submodule("wte")(idx) + tr.submodule("wpe")(pos);  // (B, T, C)
  x = F::dropout(x, config.dropout, is_training());
  Module& blocks = tr.submodule("h");
  for (auto& [name, block] : blocks.named_children()) x = (*block)(x);
  x = tr.submodule("ln_f")(x);
  return matmul(x, wte.t());  // lm_head tied to wte: (B, T, vocab)
}

LoadReport GPT2::load_hf_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors renamed;
  for (const auto& [key, t] : state) {
    std::string k = key;
    if (k.ends_with(".attn.bias") || k.ends_with(".attn.masked_bias") || k == "lm_head.weight") continue;
    if (!k.starts_with("transformer.")) k = "transformer." + k;
    renamed.emplace_back(k, t);
  }
  return load_state_dict(renamed, strict);
}

}  // namespace brisk::nn::models
