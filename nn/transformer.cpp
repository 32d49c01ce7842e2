// nn/transformer.cpp: the transformer blocks of nn/transformer.h, composed of the layers of
// nn/layers.h (MultiheadAttention, Linear, LayerNorm, Dropout); the masks are merged into the
// one Bool mask MultiheadAttention takes.
// Not here: attention itself (nn/layers.cpp, nn/functional.cpp) and the recurrent layers.
#include "nn/transformer.h"

#include "nn/functional.h"
#include "nn/layers.h"

namespace brisk::nn {

namespace F = functional;

namespace {

void check_config(const char* type, int64_t d_model, int64_t nhead, const TransformerOptions& o) {
  BRISK_CHECK(d_model > 0 && nhead > 0 && d_model % nhead == 0, type, ": d_model ", d_model,
              " must be divisible by nhead ", nhead);
  BRISK_CHECK(o.activation == "relu" || o.activation == "gelu", type, ": unknown activation '", o.activation,
              "' (relu or gelu)");
  BRISK_CHECK(o.dim_feedforward > 0, type, ": dim_feedforward must be positive, got ", o.dim_feedforward);
  BRISK_CHECK(o.dropout >= 0 && o.dropout < 1, type, ": dropout must be in [0, 1), got ", o.dropout);
}

// x (T, B, E) or (B, T, E): its batch and sequence sizes.
struct Layout {
  int64_t batch = 0;
  int64_t seq = 0;
};

Layout layout_of(const char* type, const char* name, const Tensor& x, int64_t d_model, bool batch_first) {
  BRISK_CHECK(x.defined(), type, ": undefined ", name);
  BRISK_CHECK(x.dim() == 3 && x.size(2) == d_model, type, ": ", name, " ", x.sizes(), " must be ",
              batch_first ? "(B, T, " : "(T, B, ", d_model, ")");
  return batch_first ? Layout{x.size(0), x.size(1)} : Layout{x.size(1), x.size(0)};
}

// Note [Transformer masks]
// PyTorch takes an attention mask (T, S) or (B * nhead, T, S) and a key padding mask (B, S);
// MultiheadAttention here takes one Bool mask broadcastable to (B, nhead, T, S). The two are
// reshaped to (1, 1, T, S) / (B, nhead, T, S) and (B, 1, 1, S) and or-ed. Only Bool masks
// (true = masked) are taken: a float mask is an error rather than a silent misreading.
Tensor merge_masks(const char* type, const char* attn_name, const Tensor& attn_mask, const char* pad_name,
                   const Tensor& padding_mask, int64_t batch, int64_t nhead, int64_t t, int64_t s) {
  Tensor merged;
  if (attn_mask.defined()) {
    BRISK_CHECK(attn_mask.dtype() == DType::Bool, type, ": ", attn_name, " must be Bool (true = may not attend), got ",
                attn_mask.dtype());
    const bool ok2 = attn_mask.dim() == 2 && attn_mask.sizes() == Shape{t, s};
    const bool ok3 = attn_mask.dim() == 3 && attn_mask.sizes() == Shape{batch * nhead, t, s};
    BRISK_CHECK(ok2 || ok3, type, ": ", attn_name, " has shape ", attn_mask.sizes(), ", expected (", t, ", ", s,
                ") or (", batch * nhead, ", ", t, ", ", s, ")");
    merged = ok2 ? attn_mask : attn_mask.reshape({batch, nhead, t, s});
  }
  if (padding_mask.defined()) {
    BRISK_CHECK(padding_mask.dtype() == DType::Bool, type, ": ", pad_name, " must be Bool (true = padding), got ",
                padding_mask.dtype());
    const bool fits = padding_mask.sizes() == Shape{batch, s};
    BRISK_CHECK(fits, type, ": ", pad_name, " has shape ", padding_mask.sizes(), ", expected (", batch, ", ", s, ")");
    Tensor pad = padding_mask.reshape({batch, 1, 1, s});
    if (!merged.defined()) {
      merged = pad;
    } else {
      // Bool or: (a + b) > 0 in F32 (no logical ops on Bool).
      Tensor sum = cast(merged, DType::F32) + cast(pad, DType::F32);
      merged = gt(sum, scalar_tensor(0.0, DType::F32, sum.device()));
    }
  }
  return merged;
}

Tensor activate(const std::string& activation, const Tensor& x) {
  return activation == "gelu" ? gelu(x, false) : relu(x);
}

// The children both layers share, registered in PyTorch's order around the attention ones.
void register_feed_forward(Module& m, int64_t d_model, const TransformerOptions& o) {
  m.register_module("linear1", std::make_shared<Linear>(d_model, o.dim_feedforward, o.bias));
  m.register_module("dropout", std::make_shared<Dropout>(o.dropout));
  m.register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, d_model, o.bias));
}

// linear2(dropout(act(linear1(x)))) then dropout_name.
Tensor feed_forward(Module& m, const std::string& activation, const Tensor& x, const char* dropout_name) {
  Tensor h = m.submodule("dropout")(activate(activation, m.submodule("linear1")(x)));
  return m.submodule(dropout_name)(m.submodule("linear2")(h));
}

std::shared_ptr<MultiheadAttention> attention(int64_t d_model, int64_t nhead, const TransformerOptions& o) {
  return std::make_shared<MultiheadAttention>(d_model, nhead, o.dropout, o.bias, o.batch_first);
}

std::shared_ptr<LayerNorm> norm(int64_t d_model, const TransformerOptions& o) {
  return std::make_shared<LayerNorm>(d_model, o.layer_norm_eps, true, o.bias);
}

}  // namespace

// ---- encoder layer

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t h, TransformerOptions o)
    : Module("TransformerEncoderLayer"), d_model(d), nhead(h), options(std::move(o)) {
  check_config("TransformerEncoderLayer", d, h, options);
  register_module("self_attn", attention(d, h, options));
  register_feed_forward(*this, d, options);
  register_module("norm1", norm(d, options));
  register_module("norm2", norm(d, options));
  register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& padding_mask,
                                        bool is_causal) {
  const char* type = "TransformerEncoderLayer";
  Layout l = layout_of(type, "src", src, d_model, options.batch_first);
  Tensor mask =
      merge_masks(type, "src_mask", src_mask, "src_key_padding_mask", padding_mask, l.batch, nhead, l.seq, l.seq);
  auto& attn = static_cast<MultiheadAttention&>(submodule("self_attn"));
  auto sa = [&](const Tensor& x) { return submodule("dropout1")(attn.forward(x, x, x, mask, is_causal)); };
  auto ff = [&](const Tensor& x) { return feed_forward(*this, options.activation, x, "dropout2"); };
  Module& norm1 = submodule("norm1");
  Module& norm2 = submodule("norm2");
  Tensor x = src;
  if (options.norm_first) {
    x = x + sa(norm1(x));
    return x + ff(norm2(x));
  }
  x = norm1(x + sa(x));
  return norm2(x + ff(x));
}

// ---- decoder layer

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d, int64_t h, TransformerOptions o)
    : Module("TransformerDecoderLayer"), d_model(d), nhead(h), options(std::move(o)) {
  check_config("TransformerDecoderLayer", d, h, options);
  register_module("self_attn", attention(d, h, options));
  register_module("multihead_attn", attention(d, h, options));
  register_feed_forward(*this, d, options);
  register_module("norm1", norm(d, options));
  register_module("norm2", norm(d, options));
  register_module("norm3", norm(d, options));
  register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  register_module("dropout2", std::make_shared<Dropout>(options.dropout));
  register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_padding_mask,
                                        const Tensor& memory_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
  const char* type = "TransformerDecoderLayer";
  Layout lt = layout_of(type, "tgt", tgt, d_model, options.batch_first);
  Layout lm = layout_of(type, "memory", memory, d_model, options.batch_first);
  BRISK_CHECK(lt.batch == lm.batch, type, ": tgt ", tgt.sizes(), " and memory ", memory.sizes(),
              " have different batch sizes");
  Tensor self_mask = merge_masks(type, "tgt_mask", tgt_mask, "tgt_key_padding_mask", tgt_padding_mask, lt.batch, nhead,
                                 lt.seq, lt.seq);
  Tensor cross_mask = merge_masks(type, "memory_mask", memory_mask, "memory_key_padding_mask", memory_padding_mask,
                                  lt.batch, nhead, lt.seq, lm.seq);
  auto& self_attn = static_cast<MultiheadAttention&>(submodule("self_attn"));
  auto& cross_attn = static_cast<MultiheadAttention&>(submodule("multihead_attn"));
  auto sa = [&](const Tensor& x) {
    return submodule("dropout1")(self_attn.forward(x, x, x, self_mask, tgt_is_causal));
  };
  auto mha = [&](const Tensor& x) {
    return submodule("dropout2")(cross_attn.forward(x, memory, memory, cross_mask, memory_is_causal));
  };
  auto ff = [&](const Tensor& x) { return feed_forward(*this, options.activation, x, "dropout3"); };
  Module& norm1 = submodule("norm1");
  Module& norm2 = submodule("norm2");
  Module& norm3 = submodule("norm3");
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + sa(norm1(x));
    x = x + mha(norm2(x));
    return x + ff(norm3(x));
  }
  x = norm1(x + sa(x));
  x = norm2(x + mha(x));
  return norm3(x + ff(x));
}

// ---- encoder stack

TransformerEncoder::TransformerEncoder(int64_t d, int64_t h, int64_t n, TransformerOptions o, bool final_norm)
    : Module("TransformerEncoder"), num_layers(n) {
  BRISK_CHECK(n > 0, "TransformerEncoder: num_layers must be positive, got ", n);
  auto layers = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < n; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(d, h, o));
  register_module("layers", layers);
  if (final_norm) register_module("norm", norm(d, o));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& padding_mask, bool is_causal) {
  Tensor x = src;
  auto& layers = static_cast<ModuleList&>(submodule("layers"));
  for (const ModulePtr& layer : layers)
    x = static_cast<TransformerEncoderLayer&>(*layer).forward(x, mask, padding_mask, is_causal);
  ModulePtr final_norm = child("norm");
  return final_norm ? (*final_norm)(x) : x;
}

}  // namespace brisk::nn
