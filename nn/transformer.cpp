// nn/transformer.cpp: the transformer blocks of nn/transformer.h, composed of the layers of
// nn/layers.h (MultiheadAttention, Linear, LayerNorm, Dropout); masks are checked here under the
// blocks' own names and handed to MultiheadAttention, which merges them (Note [Attention masks]
// in nn/layers.cpp).
// Not here: attention itself (nn/layers.cpp, nn/functional.cpp) and the recurrent layers.
#include "nn/transformer.h"

#include <limits>
#include <typeinfo>

#include "engine/nonfinite.h"
#include "nn/functional.h"
#include "nn/init.h"
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

Tensor activate(const std::string& activation, const Tensor& x) {
  return activation == "gelu" ? gelu(x, false) : relu(x);
}

// The children both layers share, registered in PyTorch's order around the attention ones.
void register_feed_forward(Module& m, int64_t d_model, const TransformerOptions& o) {
  m.register_module("linear1", std::make_shared<Linear>(d_model, o.dim_feedforward, o.bias));
  m.register_module("dropout", std::make_shared<Dropout>(o.dropout));
  m.register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, d_model, o.bias));
}

// linear2(dropout(act(linear1(x)))) then dropout_name. With "gelu", linear1 and the GELU run as
// one op (Note [Linear with GELU] in engine/ops/linalg.cpp) where calling linear1 would do no
// more than its forward: a plain Linear (not a quantizer's replacement) with no hooks or derived
// tensors, and no scope to enter.
Tensor feed_forward(Module& m, const std::string& activation, const Tensor& x, const char* dropout_name) {
  Module& l1 = m.submodule("linear1");
  Tensor a;
  if (activation == "gelu" && typeid(l1) == typeid(Linear) && !l1.has_call_work() && !scopes_tracked()) {
    auto& lin = static_cast<Linear&>(l1);
    a = linear_gelu(x, lin.weight(), lin.bias(), /*tanh=*/false);
  } else {
    a = activate(activation, l1(x));
  }
  Tensor h = m.submodule("dropout")(a);
  return m.submodule(dropout_name)(m.submodule("linear2")(h));
}

std::shared_ptr<MultiheadAttention> attention(int64_t d_model, int64_t nhead, const TransformerOptions& o) {
  return std::make_shared<MultiheadAttention>(d_model, nhead, o.dropout, o.bias, o.batch_first);
}

std::shared_ptr<LayerNorm> norm(int64_t d_model, const TransformerOptions& o) {
  return std::make_shared<LayerNorm>(d_model, o.layer_norm_eps, true, o.bias);
}

// A deep copy of an encoder or decoder layer: built again from its options without drawing
// initial values, moved to its device and dtype, then given its values.
template <class Layer>
std::shared_ptr<Layer> clone_layer(const Layer& layer) {
  std::shared_ptr<Layer> copy = init::skip_init<Layer>(layer.d_model, layer.nhead, layer.options);
  const NamedTensors params = layer.named_parameters();
  if (!params.empty()) {
    copy->to(params[0].second.device());
    copy->to(params[0].second.dtype());
  }
  copy->load_state_dict(layer.state_dict());
  NamedTensors copied = copy->named_parameters();
  for (size_t i = 0; i < copied.size(); ++i) copied[i].second.requires_grad_(params[i].second.requires_grad());
  copy->train(layer.is_training());
  return copy;
}

const TransformerEncoderLayer& non_null(const std::shared_ptr<TransformerEncoderLayer>& layer) {
  BRISK_CHECK(layer != nullptr, "TransformerEncoder: encoder_layer is null");
  return *layer;
}

}  // namespace

Tensor generate_square_subsequent_mask(int64_t sz, DType dtype, Device device) {
  BRISK_CHECK(sz >= 0, "generate_square_subsequent_mask: sz must be >= 0, got ", sz);
  BRISK_CHECK(dtype == DType::Bool || is_floating(dtype),
              "generate_square_subsequent_mask: dtype must be floating (0 / -inf) or Bool, got ", dtype);
  Tensor rows = arange(sz, DType::I64, device).unsqueeze(1);
  Tensor cols = arange(sz, DType::I64, device).unsqueeze(0);
  Tensor future = gt(cols, rows);  // (sz, sz), true above the diagonal
  if (dtype == DType::Bool) return future;
  return masked_fill(zeros({sz, sz}, dtype, device), future, -std::numeric_limits<double>::infinity());
}

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

Tensor TransformerEncoderLayer::operator()(const Tensor& src, const Tensor& src_mask, const Tensor& padding_mask,
                                           bool is_causal) {
  return call_with(src, [&](const Tensor& x) { return forward(x, src_mask, padding_mask, is_causal); });
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& padding_mask,
                                        bool is_causal) {
  const char* type = "TransformerEncoderLayer";
  Layout l = layout_of(type, "src", src, d_model, options.batch_first);
  check_attn_mask(type, "src_mask", src_mask, l.batch, nhead, l.seq, l.seq);
  check_key_padding_mask(type, "src_key_padding_mask", padding_mask, l.batch, l.seq);
  auto& attn = static_cast<MultiheadAttention&>(submodule("self_attn"));
  auto sa = [&](const Tensor& x) {
    return submodule("dropout1")(attn(x, x, x, padding_mask, /*need_weights=*/false, src_mask, true, is_causal).output);
  };
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

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const { return clone_layer(*this); }

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

Tensor TransformerDecoderLayer::operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                           const Tensor& memory_mask, const Tensor& tgt_padding_mask,
                                           const Tensor& memory_padding_mask, bool tgt_is_causal,
                                           bool memory_is_causal) {
  return call_with(tgt, [&](const Tensor& x) {
    return forward(x, memory, tgt_mask, memory_mask, tgt_padding_mask, memory_padding_mask, tgt_is_causal,
                   memory_is_causal);
  });
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_padding_mask,
                                        const Tensor& memory_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
  const char* type = "TransformerDecoderLayer";
  Layout lt = layout_of(type, "tgt", tgt, d_model, options.batch_first);
  Layout lm = layout_of(type, "memory", memory, d_model, options.batch_first);
  BRISK_CHECK(lt.batch == lm.batch, type, ": tgt ", tgt.sizes(), " and memory ", memory.sizes(),
              " have different batch sizes");
  check_attn_mask(type, "tgt_mask", tgt_mask, lt.batch, nhead, lt.seq, lt.seq);
  check_attn_mask(type, "memory_mask", memory_mask, lt.batch, nhead, lt.seq, lm.seq);
  check_key_padding_mask(type, "tgt_key_padding_mask", tgt_padding_mask, lt.batch, lt.seq);
  check_key_padding_mask(type, "memory_key_padding_mask", memory_padding_mask, lt.batch, lm.seq);
  auto& self_attn = static_cast<MultiheadAttention&>(submodule("self_attn"));
  auto& cross_attn = static_cast<MultiheadAttention&>(submodule("multihead_attn"));
  auto sa = [&](const Tensor& x) {
    Tensor y = self_attn(x, x, x, tgt_padding_mask, /*need_weights=*/false, tgt_mask, true, tgt_is_causal).output;
    return submodule("dropout1")(y);
  };
  auto mha = [&](const Tensor& x) {
    Tensor y =
        cross_attn(x, memory, memory, memory_padding_mask, /*need_weights=*/false, memory_mask, true, memory_is_causal)
            .output;
    return submodule("dropout2")(y);
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

std::shared_ptr<TransformerDecoderLayer> TransformerDecoderLayer::clone() const { return clone_layer(*this); }

// ---- encoder stack

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t n, ModulePtr norm)
    : Module("TransformerEncoder"), num_layers(n) {
  BRISK_CHECK(n > 0, "TransformerEncoder: num_layers must be positive, got ", n);
  auto layers = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < n; ++i) layers->push_back(layer.clone());
  register_module("layers", layers);
  if (norm) register_module("norm", std::move(norm));
}

TransformerEncoder::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& layer, int64_t n, ModulePtr norm)
    : TransformerEncoder(non_null(layer), n, std::move(norm)) {}

TransformerEncoder::TransformerEncoder(int64_t d, int64_t h, int64_t n, TransformerOptions o, bool final_norm)
    : Module("TransformerEncoder"), num_layers(n) {
  BRISK_CHECK(n > 0, "TransformerEncoder: num_layers must be positive, got ", n);
  auto layers = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < n; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(d, h, o));
  register_module("layers", layers);
  if (final_norm) register_module("norm", norm(d, o));
}

Tensor TransformerEncoder::operator()(const Tensor& src, const Tensor& mask, const Tensor& padding_mask,
                                      bool is_causal) {
  return call_with(src, [&](const Tensor& x) { return forward(x, mask, padding_mask, is_causal); });
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& padding_mask, bool is_causal) {
  Tensor x = src;
  auto& layers = static_cast<ModuleList&>(submodule("layers"));
  for (const ModulePtr& layer : layers)
    x = static_cast<TransformerEncoderLayer&>(*layer)(x, mask, padding_mask, is_causal);
  ModulePtr final_norm = child("norm");
  return final_norm ? (*final_norm)(x) : x;
}

}  // namespace brisk::nn
