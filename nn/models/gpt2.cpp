// nn/models/gpt2.cpp: GPT-2 as Hugging Face's GPT2LMHeadModel computes it.
#include "nn/models/gpt2.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <typeinfo>

#include "engine/nonfinite.h"
#include "engine/serialize.h"
#include "nn/init.h"

namespace brisk::nn::models {

namespace F = functional;

HFConv1D::HFConv1D(int64_t in, int64_t out, double init_std) : Module("Conv1D") {
  Tensor& w = register_parameter("weight", empty({in, out}));
  init::normal_(w, 0, init_std);
  register_parameter("bias", zeros({out}));
}

// x @ weight + bias in one op (the bias is the product's starting value; Note [Linear is an op]).
Tensor HFConv1D::forward(const Tensor& x) { return linear_in_out(x, parameter("weight"), parameter("bias")); }

namespace {
// Named child modules for the attention and MLP sub-blocks (their names are part of the keys).
class Holder : public Module {
 public:
  explicit Holder(const char* type) : Module(type) {}
};
}  // namespace

GPT2Attention::GPT2Attention(const GPT2Config& c, double residual_std)
    : Module("GPT2Attention"), n_head_(c.n_head), dropout_(c.dropout) {
  register_module("c_attn", std::make_shared<HFConv1D>(c.n_embd, 3 * c.n_embd));
  register_module("c_proj", std::make_shared<HFConv1D>(c.n_embd, c.n_embd, residual_std));
}

Tensor GPT2Attention::forward(const Tensor& x, const Tensor& mask, bool causal, bool use_cache) {
  const bool train = is_training();
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / n_head_;
  Tensor qkv = submodule("c_attn")(x);  // (B, T, 3C)
  auto heads = [&](int64_t i) { return qkv.narrow(2, i * c, c).view({b, t, n_head_, d}).transpose(1, 2); };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  if (use_cache) std::tie(k, v) = cache.append(k, v);
  Tensor y = F::scaled_dot_product_attention(q, k, v, mask, causal, dropout_, train);
  y = y.transpose(1, 2).reshape({b, t, c});  // (B, T, C)
  return submodule("c_proj")(y);
}

GPT2Block::GPT2Block(const GPT2Config& c) : Module("GPT2Block"), dropout_(c.dropout) {
  register_module("ln_1", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps));
  // GPT-2 scales the residual projections' init by 1/sqrt(2 * n_layer).
  const double residual_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  register_module("attn", std::make_shared<GPT2Attention>(c, residual_std));
  register_module("ln_2", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps));
  auto mlp = std::make_shared<Holder>("GPT2MLP");
  mlp->register_module("c_fc", std::make_shared<HFConv1D>(c.n_embd, 4 * c.n_embd));
  mlp->register_module("c_proj", std::make_shared<HFConv1D>(4 * c.n_embd, c.n_embd, residual_std));
  register_module("mlp", mlp);
}

Tensor GPT2Block::forward(const Tensor& x, const Tensor& mask, bool causal, bool use_cache) {
  const bool train = is_training();
  auto& attn = static_cast<GPT2Attention&>(submodule("attn"));
  // The branches are given to the residual adds (std::move): their buffers take the sums
  // (Note [Donated operands] in engine/ops/elementwise.cpp). dropout hands back its input
  // when it drops nothing, so its result replaces the branch instead of sharing it.
  Tensor a = attn((*child("ln_1"))(x), mask, causal, use_cache);
  a = F::dropout(a, dropout_, train);
  Tensor h = x + std::move(a);
  Module& mlp = submodule("mlp");
  Module& fc = mlp.submodule("c_fc");
  const Tensor u = (*child("ln_2"))(h);
  // c_fc and the tanh GELU as one op (Note [Linear with GELU] in engine/ops/linalg.cpp) where
  // calling c_fc would do no more than its forward: no hooks, no derived tensors, no scope to
  // enter, and the module still GPT-2's own (not one a quantizer put in its place).
  const bool fuse = typeid(fc) == typeid(HFConv1D) && !fc.has_call_work() && !scopes_tracked();
  const Tensor act = fuse ? linear_gelu(u, fc.parameter("weight"), fc.parameter("bias"), /*tanh=*/true, /*in_out=*/true)
                          : gelu(fc(u), /*tanh=*/true);
  Tensor m = mlp.submodule("c_proj")(act);
  m = F::dropout(m, dropout_, train);
  return h + std::move(m);
}

GPT2::GPT2(GPT2Config c) : CausalLM("GPT2LMHeadModel"), config(c) {
  BRISK_CHECK(c.n_embd > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0 && c.n_layer >= 0 && c.vocab_size > 0 &&
                  c.n_positions > 0,
              "GPT2: n_embd (", c.n_embd, ") must be a positive multiple of n_head (", c.n_head, "), with vocab_size (",
              c.vocab_size, ") and n_positions (", c.n_positions, ") > 0");
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

Tensor GPT2::forward(const Tensor& idx) { return forward_step(idx, {}, /*use_cache=*/false, /*last_only=*/false); }

namespace {

// Note [Masks while generating]
// The positions and the attention mask of `t` new tokens after `past` cached ones. Without
// padding: positions past.., and no mask at all where the causal flag says it all (no cache
// yet: top-left and bottom-right diagonals agree when T == S; one new token: it sees every
// key). With left padding (mask row b: 0 = pad): a real token's position counts the real tokens
// before it (Hugging Face's cumsum - 1; pads get 1, which nothing real sees), and query i sees
// key j when j <= past + i and key j is real, or j is the query itself: a pad query then
// attends to itself alone instead of to no key (a row of no keys is NaN, and a NaN pad value
// would reach real queries through 0 * NaN in P V).
struct StepMasks {
  Tensor positions;  // (B or 1, t) I64
  Tensor mask;       // Bool (B or 1, 1, t, S) or undefined
  bool causal = false;
};

StepMasks step_masks(const Tensor& attention_mask, int64_t b, int64_t past, int64_t t, Device device) {
  StepMasks r;
  const int64_t s = past + t;
  std::vector<int64_t> real;
  if (attention_mask.defined()) {
    BRISK_CHECK(attention_mask.dim() == 2 && attention_mask.size(0) == b && attention_mask.size(1) == s,
                "GPT2: attention_mask must be (B, cached + new) = (", b, ", ", s, "), got ", attention_mask.str());
    real = attention_mask.to_vector<int64_t>();
    if (std::all_of(real.begin(), real.end(), [](int64_t x) { return x != 0; })) real.clear();
  }
  if (real.empty()) {
    r.positions = arange(past, past + t, 1, DType::I64, device).unsqueeze(0);
    if (past == 0) {
      r.causal = true;
    } else if (t > 1) {
      std::unique_ptr<bool[]> m(new bool[size_t(t * s)]);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < s; ++j) m[size_t(i * s + j)] = j <= past + i;
      r.mask = from_data(m.get(), {1, 1, t, s}, device);
    }
    return r;
  }
  std::vector<int64_t> pos(size_t(b * t));
  std::unique_ptr<bool[]> m(new bool[size_t(b * t * s)]);
  for (int64_t bi = 0; bi < b; ++bi) {
    const int64_t* row = real.data() + bi * s;
    int64_t seen = 0;
    for (int64_t j = 0; j < s; ++j) {
      seen += row[j] != 0;
      if (j >= past) pos[size_t(bi * t + j - past)] = row[j] != 0 ? seen - 1 : 1;
    }
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < s; ++j) m[size_t((bi * t + i) * s + j)] = j == past + i || (j < past + i && row[j] != 0);
  }
  r.positions = from_data(pos.data(), {b, t}, device);
  r.mask = from_data(m.get(), {b, 1, t, s}, device);
  return r;
}

}  // namespace

Tensor GPT2::hidden(const Tensor& idx, const Tensor& attention_mask, bool use_cache, bool last_only) {
  BRISK_CHECK(idx.dim() == 2 && idx.dtype() == DType::I64, "GPT2: expects token ids (B, T) I64, got ", idx.str());
  const int64_t b = idx.size(0), t = idx.size(1);
  const int64_t past = use_cache ? cached_length() : 0;
  BRISK_CHECK(past + t <= config.n_positions, "GPT2: sequence length ", past + t, " (", past, " cached + ", t,
              " new) exceeds n_positions ", config.n_positions);
  const StepMasks sm = step_masks(attention_mask, b, past, t, idx.device());
  Module& tr = submodule("transformer");
  Tensor x = tr.submodule("wte")(idx) + tr.submodule("wpe")(sm.positions);  // (B, T, C)
  x = F::dropout(x, config.dropout, is_training());
  for (auto& [name, block] : tr.submodule("h").named_children()) {
    auto* gb = dynamic_cast<GPT2Block*>(block.get());
    BRISK_CHECK(gb, "GPT2: transformer.h.", name, " is a ", block->type_name(), ", not a GPT2Block");
    x = (*gb)(x, sm.mask, sm.causal, use_cache);
  }
  if (last_only) x = x.narrow(1, t - 1, 1);
  return tr.submodule("ln_f")(x);
}

Tensor GPT2::forward_step(const Tensor& idx, const Tensor& attention_mask, bool use_cache, bool last_only) {
  const Tensor x = hidden(idx, attention_mask, use_cache, last_only);
  // lm_head tied to wte: x @ wte^T, (B, T, vocab). Through linear, so that autocast casts the
  // dense parameter (a transposed view's cast reads it strided: 2.7x slower per element).
  return F::linear(x, submodule("transformer").submodule("wte").parameter("weight"));
}

Tensor GPT2::loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index) {
  BRISK_CHECK(targets.dtype() == DType::I64 &&
                  (targets.sizes() == idx.sizes() || (targets.dim() == 1 && targets.numel() == idx.numel())),
              "GPT2::loss: targets must be I64 of the token ids' shape ", idx.sizes(), " (or flattened), got ",
              targets.str());
  const Tensor x = hidden(idx, {}, /*use_cache=*/false, /*last_only=*/false);  // (B, T, C)
  const Tensor& wte = submodule("transformer").submodule("wte").parameter("weight");
  return F::linear_cross_entropy(x, wte, targets.reshape(idx.sizes()), {}, Reduction::Mean, ignore_index);
}

void GPT2::reset_cache() {
  apply([](Module& m) {
    if (auto* a = dynamic_cast<GPT2Attention*>(&m)) a->cache.reset();
  });
}

void GPT2::reserve_cache(int64_t positions) {
  apply([&](Module& m) {
    if (auto* a = dynamic_cast<GPT2Attention*>(&m)) a->cache.reserve(positions);
  });
}

int64_t GPT2::cached_length() const {
  auto& blocks = const_cast<GPT2&>(*this).submodule("transformer.h");
  for (auto& [name, block] : blocks.named_children())
    if (auto* a = dynamic_cast<GPT2Attention*>(block->child("attn").get())) return a->cache.length();
  return 0;
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

GPT2Config GPT2Config::from_json(const std::string& path) {
  std::ifstream f(path);
  BRISK_CHECK(f, "GPT2Config::from_json: cannot open ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    BRISK_FAIL("GPT2Config::from_json: ", path, ": not valid JSON (", e.what(), ")");
  }
  BRISK_CHECK(j.is_object(), "GPT2Config::from_json: ", path, ": expected a JSON object");
  GPT2Config c;
  auto get_int = [&](const char* key, int64_t& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    BRISK_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, "GPT2Config::from_json: ", path, ": field '",
                key, "' must be a positive integer, got ", j[key].dump());
    out = j[key].get<int64_t>();
  };
  auto get_double = [&](const char* key, double& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    BRISK_CHECK(j[key].is_number(), "GPT2Config::from_json: ", path, ": field '", key, "' must be a number, got ",
                j[key].dump());
    out = j[key].get<double>();
  };
  if (j.contains("model_type")) {
    BRISK_CHECK(j["model_type"] == "gpt2", "GPT2Config::from_json: ", path, ": model_type is ", j["model_type"].dump(),
                ", not \"gpt2\"");
  }
  get_int("vocab_size", c.vocab_size);
  get_int("n_positions", c.n_positions);
  get_int("n_embd", c.n_embd);
  get_int("n_layer", c.n_layer);
  get_int("n_head", c.n_head);
  get_double("layer_norm_epsilon", c.layer_norm_eps);
  get_double("resid_pdrop", c.dropout);  // one rate for all three dropouts (HF's are equal in every published GPT-2)
  int64_t inner = 4 * c.n_embd;
  get_int("n_inner", inner);
  BRISK_CHECK(inner == 4 * c.n_embd, "GPT2Config::from_json: ", path, ": n_inner ", inner,
              " is not supported (brisk's GPT2 has an MLP of 4 * n_embd = ", 4 * c.n_embd, ")");
  if (j.contains("activation_function")) {
    const auto act = j["activation_function"];
    BRISK_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "GPT2Config::from_json: ", path,
                ": activation_function ", act.dump(), " is not supported (GELU's tanh form: gelu_new)");
  }
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    BRISK_CHECK(!j.contains(key) || !j[key].is_boolean() || !j[key].get<bool>(), "GPT2Config::from_json: ", path, ": ",
                key, " = true is not supported");
  }
  BRISK_CHECK(
      !j.contains("scale_attn_weights") || !j["scale_attn_weights"].is_boolean() || j["scale_attn_weights"].get<bool>(),
      "GPT2Config::from_json: ", path, ": scale_attn_weights = false is not supported");
  return c;
}

std::shared_ptr<GPT2> GPT2::from_pretrained(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(dir) / "config.json", weights = fs::path(dir) / "model.safetensors";
  BRISK_CHECK(fs::exists(config) && fs::exists(weights), "GPT2::from_pretrained: ", dir,
              " needs config.json and model.safetensors (Hugging Face's layout)");
  GPT2Config c = GPT2Config::from_json(config.string());
  auto model = init::skip_init<GPT2>(c);
  const LoadReport report = model->load_hf_state_dict(load_safetensors(weights.string()).tensors, /*strict=*/false);
  BRISK_CHECK(report.ok(), "GPT2::from_pretrained: ", weights.string(), " does not fit ", config.string(), ": ",
              report.str());
  return model;
}

}  // namespace brisk::nn::models
