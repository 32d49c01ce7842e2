// tests/test_transformer_api.cpp: the transformer modules called as PyTorch code calls them:
// masks and is_causal through operator() (the hooks run), floating (additive) masks from
// generate_square_subsequent_mask equal to is_causal and to the Bool mask, floating masks
// against PyTorch (tests/data/transformer_api/reference.json, made by
// tests/make_transformer_api_reference.py), MultiheadAttention's PyTorch default
// batch_first = false, TransformerEncoder(layer, num_layers, norm) with deep-copied layers, and
// the errors for bad masks.
#include <doctest/doctest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "nn/transformer.h"
#include "tests/reference.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::json;
using brisk::test::rel_err;
using brisk::test::tensor_of;

namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

const json& find_case(const std::string& name) {
  static const json j = test::read_reference("transformer_api/reference.json");
  return test::find_case(j, name);
}

// The case's mask `name`: Bool, or its finite part with -inf where the Bool part is true.
Tensor mask_of(const json& c, const std::string& name, DType dt) {
  const json& m = c["masks"][name];
  Tensor where = tensor_of(m["neg_inf"], DType::Bool);
  if (m["bias"].is_null()) return where;
  return masked_fill(tensor_of(m["bias"], dt), where, kNegInf);
}

nn::TransformerOptions options_of(const json& cfg) {
  return {.dim_feedforward = cfg["dim_feedforward"], .dropout = 0.0, .batch_first = cfg["batch_first"]};
}

// Loads the case into m (in dt), runs `call` on its inputs (requiring grad), backpropagates the
// weighted sum of the outputs and compares outputs and gradients.
void check_case(const json& c, nn::Module& m, DType dt, double out_tol, double grad_tol,
                const std::function<std::map<std::string, Tensor>(std::map<std::string, Tensor>&)>& call) {
  m.to(dt);
  CHECK(m.load_state_dict(test::state_of(c["params"], dt)).ok());
  m.eval();
  std::map<std::string, Tensor> x;
  for (auto& [k, v] : c["inputs"].items()) x[k] = tensor_of(v, dt).requires_grad_(true);
  std::map<std::string, Tensor> out = call(x);
  Tensor loss = scalar_tensor(0.0, dt);
  for (auto& [key, y] : out) {
    const std::string k = key;  // (clang: a structured binding cannot be captured by CHECK_MESSAGE)
    const double e = rel_err(y, c["outputs"][k]);
    CHECK_MESSAGE(e <= out_tol, c["name"], " ", k, " ", std::string(dtype_name(dt)), " ", e);
    loss = loss + (y * tensor_of(c["loss_weights"][k], dt)).sum();
  }
  loss.backward();
  for (auto& [key, t] : x) {
    const std::string k = key;
    const double e = rel_err(t.grad(), c["grads"]["input." + k]);
    CHECK_MESSAGE(e <= grad_tol, c["name"], " grad input.", k, " ", std::string(dtype_name(dt)), " ", e);
  }
  for (auto& [key, p] : m.named_parameters()) {
    const std::string k = key;
    const double e = rel_err(p.grad(), c["grads"]["param." + k]);
    CHECK_MESSAGE(e <= grad_tol, c["name"], " grad ", k, " ", std::string(dtype_name(dt)), " ", e);
  }
}

// Both dtypes.
template <class Make, class Call>
void check_both(const std::string& name, Make make, Call call) {
  const json& c = find_case(name);
  for (DType dt : {DType::F64, DType::F32}) {
    auto m = make(c["config"]);
    const bool f64 = dt == DType::F64;
    check_case(c, *m, dt, f64 ? 1e-12 : 1e-5, f64 ? 1e-11 : 1e-4,
               [&](std::map<std::string, Tensor>& x) { return call(*m, c, x, dt); });
  }
}

bool same(const Tensor& a, const Tensor& b, double tol = 1e-6) { return allclose(a, b, tol, tol); }

}  // namespace

// ---- 1. masks and is_causal through operator(), with the hooks

TEST_CASE("transformer api: layer(x, mask, padding, is_causal) runs the hooks and equals forward") {
  manual_seed(1);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  Tensor x = randn({2, 5, 8});
  Tensor pad = zeros({2, 5}, DType::Bool);
  {
    NoGradGuard ng;
    narrow(narrow(pad, 0, 1, 1), 1, 3, 2).fill_(1.0);
  }
  int pre = 0, post = 0;
  layer.register_forward_pre_hook([&](nn::Module&, Tensor& in) {
    CHECK(in.sizes() == Shape{2, 5, 8});
    ++pre;
  });
  layer.register_forward_hook([&](nn::Module&, const Tensor&, Tensor& out) {
    ++post;
    out = out * 2.0;  // what the hook leaves is what the call returns
  });
  Tensor y = layer(x, {}, pad, /*is_causal=*/true);
  CHECK(pre == 1);
  CHECK(post == 1);
  CHECK(same(y, layer.forward(x, {}, pad, true) * 2.0));
  layer(x);  // the one-tensor call still runs them
  CHECK(post == 2);
  // The attention inside runs through its call too: a hook on self_attn sees every call.
  int attn_calls = 0;
  layer.submodule("self_attn").register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++attn_calls; });
  layer(x, nn::generate_square_subsequent_mask(5));
  CHECK(attn_calls == 1);
}

TEST_CASE(
    "transformer api: TransformerEncoder and TransformerDecoderLayer calls run the hooks of the stack and its layers") {
  manual_seed(2);
  nn::TransformerEncoderLayer proto(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  nn::TransformerEncoder encoder(proto, 3);
  int stack_calls = 0, layer_calls = 0;
  encoder.register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++stack_calls; });
  for (const nn::ModulePtr& l : static_cast<nn::ModuleList&>(encoder.submodule("layers")))
    l->register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++layer_calls; });
  Tensor x = randn({5, 2, 8});  // (T, B, E)
  Tensor y = encoder(x, nn::generate_square_subsequent_mask(5), {}, /*is_causal=*/true);
  CHECK(stack_calls == 1);
  CHECK(layer_calls == 3);
  CHECK(same(y, encoder.forward(x, {}, {}, true)));

  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  int dec_calls = 0;
  dec.register_forward_pre_hook([&](nn::Module&, Tensor& tgt) {
    CHECK(tgt.sizes() == Shape{4, 2, 8});  // the hooks see tgt
    ++dec_calls;
  });
  Tensor tgt = randn({4, 2, 8}), memory = randn({5, 2, 8});
  Tensor out = dec(tgt, memory, nn::generate_square_subsequent_mask(4), {}, {}, {}, /*tgt_is_causal=*/true);
  CHECK(dec_calls == 1);
  CHECK(same(out, dec.forward(tgt, memory, {}, {}, {}, {}, true)));
}

TEST_CASE("transformer api: mha(q, k, v, ...) is PyTorch's call: output and weights, hooks run") {
  manual_seed(3);
  nn::MultiheadAttention mha(8, 2);
  int calls = 0;
  mha.register_forward_hook([&](nn::Module&, const Tensor& in, Tensor&) {
    CHECK(in.sizes() == Shape{4, 2, 8});  // the query
    ++calls;
  });
  Tensor q = randn({4, 2, 8}), kv = randn({6, 2, 8});
  auto [out, weights] = mha(q, kv, kv);
  CHECK(calls == 1);
  CHECK(out.sizes() == Shape{4, 2, 8});
  CHECK(weights.sizes() == Shape{2, 4, 6});  // averaged over heads
  auto r = mha.forward_with_weights(q, kv, kv);
  CHECK(same(out, r.output));
  CHECK(same(weights, r.weights));
  // need_weights = false: no weights, the same output (the fused path).
  Tensor pad = zeros({2, 6}, DType::Bool);
  auto fast = mha(q, kv, kv, pad, /*need_weights=*/false);
  CHECK(calls == 2);
  CHECK(!fast.weights.defined());
  CHECK(same(fast.output, out, 1e-5));
  // Causal through the call: weights above the diagonal are 0.
  auto causal = mha(q, q, q, {}, true, {}, /*average_attn_weights=*/false, /*is_causal=*/true);
  CHECK(causal.weights.sizes() == Shape{2, 2, 4, 4});
  CHECK(same(causal.weights, masked_fill(causal.weights, nn::generate_square_subsequent_mask(4, DType::Bool), 0.0), 0));
  CHECK(same(causal.output, mha(q, q, q, {}, false, {}, true, true).output, 1e-5));
}

// ---- 2. floating masks

TEST_CASE("transformer api: generate_square_subsequent_mask is PyTorch's (0 / -inf, Bool true above the diagonal)") {
  Tensor m = nn::generate_square_subsequent_mask(3);
  CHECK(m.dtype() == DType::F32);
  const std::vector<double> want = {0, kNegInf, kNegInf, 0, 0, kNegInf, 0, 0, 0};
  CHECK(m.to_vector<double>() == want);
  CHECK(nn::generate_square_subsequent_mask(2, DType::F64).dtype() == DType::F64);
  Tensor b = nn::generate_square_subsequent_mask(3, DType::Bool);
  CHECK(b.to_vector<double>() == std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(nn::generate_square_subsequent_mask(0).sizes() == Shape{0, 0});
  CHECK(error_text([] {
          nn::generate_square_subsequent_mask(3, DType::I64);
        }).find("generate_square_subsequent_mask: dtype must be floating (0 / -inf) or Bool, got I64") !=
        std::string::npos);
}

TEST_CASE("transformer api: the float causal mask equals is_causal and the Bool mask, in layers, stacks and MHA") {
  manual_seed(4);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  Tensor x = randn({6, 3, 8});  // (T, B, E)
  Tensor fmask = nn::generate_square_subsequent_mask(6);
  Tensor bmask = nn::generate_square_subsequent_mask(6, DType::Bool);
  Tensor causal = layer(x, {}, {}, /*is_causal=*/true);
  CHECK(same(layer(x, fmask), causal));
  CHECK(same(layer(x, bmask), causal));
  CHECK(same(layer(x, fmask, {}, true), causal));  // PyTorch's way: the mask and the hint
  CHECK(!same(layer(x), causal));
  // Per head (B * nhead, T, S), as PyTorch lays it out.
  CHECK(same(layer(x, fmask.unsqueeze(0).expand({6, 6, 6}).contiguous()), causal));

  nn::TransformerEncoder stack(layer, 2, std::make_shared<nn::LayerNorm>(8));
  Tensor s = stack(x, {}, {}, true);
  CHECK(same(stack(x, fmask), s));
  CHECK(same(stack(x, bmask), s));

  // A float key padding mask (-inf on padding) equals the Bool one, alone and beside either mask.
  Tensor pad = zeros({3, 6}, DType::Bool);
  {
    NoGradGuard ng;
    narrow(narrow(pad, 0, 2, 1), 1, 4, 2).fill_(1.0);
  }
  Tensor fpad = masked_fill(zeros({3, 6}), pad, kNegInf);
  CHECK(same(layer(x, {}, fpad), layer(x, {}, pad)));
  CHECK(same(layer(x, fmask, pad), layer(x, bmask, pad)));
  CHECK(same(layer(x, bmask, fpad), layer(x, bmask, pad)));
  CHECK(same(layer(x, fmask, fpad), layer(x, {}, pad, true)));

  nn::MultiheadAttention mha(8, 2);
  auto r = mha(x, x, x, {}, true, {}, true, /*is_causal=*/true);
  CHECK(same(mha(x, x, x, {}, true, fmask).weights, r.weights));
  CHECK(same(mha(x, x, x, {}, false, fmask).output, r.output, 1e-5));
  CHECK(same(mha.forward(x, x, x, fmask), r.output, 1e-5));  // forward takes floating masks too
}

TEST_CASE("transformer api: float masks in TransformerEncoderLayer match PyTorch (F64 1e-12, F32 1e-5)") {
  check_both(
      "encoder_layer_float_masks",
      [](const json& cfg) {
        return std::make_shared<nn::TransformerEncoderLayer>(cfg["d_model"], cfg["nhead"], options_of(cfg));
      },
      [](nn::TransformerEncoderLayer& m, const json& c, auto& x, DType dt) {
        return std::map<std::string, Tensor>{
            {"output", m(x["src"], mask_of(c, "src_mask", dt), mask_of(c, "src_key_padding_mask", dt))}};
      });
}

TEST_CASE("transformer api: float and mixed masks in MultiheadAttention match PyTorch, weights included") {
  for (const char* name : {"mha_float_masks", "mha_bool_padding_float_attn"}) {
    check_both(
        name, [](const json& cfg) { return std::make_shared<nn::MultiheadAttention>(cfg["d_model"], cfg["nhead"]); },
        [](nn::MultiheadAttention& m, const json& c, auto& x, DType dt) {
          Tensor kpm = mask_of(c, "key_padding_mask", dt), attn = mask_of(c, "attn_mask", dt);
          auto [out, weights] = m(x["query"], x["key"], x["value"], kpm, true, attn, /*average=*/false);
          {
            NoGradGuard ng;  // the fused path gives the same output
            CHECK(same(m(x["query"], x["key"], x["value"], kpm, false, attn).output, out, 1e-5));
          }
          return std::map<std::string, Tensor>{{"output", out}, {"weights", weights}};
        });
  }
}

TEST_CASE("transformer api: a GPT-style PyTorch-form stack with the subsequent mask and is_causal matches PyTorch") {
  check_both(
      "encoder_stack_causal",
      [](const json& cfg) {
        nn::TransformerEncoderLayer layer(cfg["d_model"], cfg["nhead"], options_of(cfg));
        auto stack = std::make_shared<nn::TransformerEncoder>(
            layer, cfg["num_layers"].get<int64_t>(), std::make_shared<nn::LayerNorm>(cfg["d_model"].get<int64_t>()));
        std::vector<std::string> keys;
        for (auto& [k, t] : stack->state_dict()) keys.push_back(k);
        CHECK(keys == cfg["state_dict_keys"].get<std::vector<std::string>>());
        return stack;
      },
      [](nn::TransformerEncoder& m, const json& c, auto& x, DType dt) {
        Tensor mask = mask_of(c, "mask", dt);
        CHECK(allclose(mask, nn::generate_square_subsequent_mask(5, dt), 0, 0));
        return std::map<std::string, Tensor>{
            {"output", m(x["src"], mask, mask_of(c, "src_key_padding_mask", dt), /*is_causal=*/true)}};
      });
}

// ---- 3. MultiheadAttention's default layout

TEST_CASE("transformer api: MultiheadAttention defaults to batch_first = false, (T, B, E), as PyTorch") {
  manual_seed(5);
  nn::MultiheadAttention tbe(8, 2);
  CHECK_FALSE(tbe.batch_first);
  nn::MultiheadAttention bte(8, 2, 0.0, true, /*batch_first=*/true);
  bte.load_state_dict(tbe.state_dict());
  Tensor x = randn({5, 3, 8});  // (T, B, E)
  Tensor y = tbe(x);
  CHECK(y.sizes() == Shape{5, 3, 8});
  CHECK(same(y.transpose(0, 1), bte(x.transpose(0, 1).contiguous()), 1e-5));
}

// ---- 4. TransformerEncoder(encoder_layer, num_layers, norm)

TEST_CASE(
    "transformer api: TransformerEncoder(layer, n, norm) copies the layer n times, with parameters of their own") {
  manual_seed(6);
  nn::TransformerEncoderLayer proto(8, 2, {.dim_feedforward = 16});
  nn::TransformerEncoder stack(proto, 3, std::make_shared<nn::LayerNorm>(8));
  CHECK(stack.num_layers == 3);
  const nn::NamedTensors want = proto.state_dict();
  auto& layers = static_cast<nn::ModuleList&>(stack.submodule("layers"));
  REQUIRE(layers.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    auto& layer = static_cast<nn::TransformerEncoderLayer&>(*layers[i]);
    CHECK(layer.options.dim_feedforward == 16);
    const nn::NamedTensors got = layer.state_dict();
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      CHECK(got[k].first == want[k].first);
      CHECK(allclose(got[k].second, want[k].second, 0, 0));  // equal to the template at construction
      CHECK(got[k].second.data_ptr() != want[k].second.data_ptr());
    }
  }
  // Independent: changing one layer changes neither the template nor the other layers.
  {
    NoGradGuard ng;
    layers[0]->submodule("linear1").parameter("weight").fill_(7.0);
  }
  CHECK(!allclose(proto.submodule("linear1").parameter("weight"), full({16, 8}, 7.0)));
  CHECK(allclose(layers[1]->submodule("linear1").parameter("weight"), proto.submodule("linear1").parameter("weight")));
  // The same names as brisk's shorthand, so each loads the other's state_dict.
  nn::TransformerEncoder shorthand(8, 2, 3, {.dim_feedforward = 16}, /*final_norm=*/true);
  std::vector<std::string> a, b;
  for (auto& [k, t] : stack.state_dict()) a.push_back(k);
  for (auto& [k, t] : shorthand.state_dict()) b.push_back(k);
  CHECK(a == b);
  CHECK(a.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(a.back() == "norm.bias");
  CHECK(shorthand.load_state_dict(stack.state_dict()).ok());
  // Without a norm there is none; the shared_ptr form is the same.
  nn::TransformerEncoder bare(std::make_shared<nn::TransformerEncoderLayer>(8, 2), 2);
  CHECK(bare.child("norm") == nullptr);
  CHECK(bare.state_dict().back().first == "layers.1.norm2.bias");
}

TEST_CASE("transformer api: a layer's clone keeps its dtype, requires_grad and mode; the PyTorch form draws nothing") {
  nn::TransformerEncoderLayer proto(8, 2, {.dim_feedforward = 16, .norm_first = true});
  proto.to(DType::F64);
  proto.submodule("norm1").requires_grad_(false);
  proto.eval();
  auto copy = proto.clone();
  CHECK(copy->options.norm_first);
  CHECK_FALSE(copy->is_training());
  CHECK(copy->submodule("self_attn").parameter("in_proj_weight").dtype() == DType::F64);
  CHECK_FALSE(copy->submodule("norm1").parameter("weight").requires_grad());
  CHECK(copy->submodule("linear1").parameter("weight").requires_grad());
  Tensor x = randn({4, 2, 8}, DType::F64);
  CHECK(allclose(copy->forward(x), proto.forward(x), 0, 0));
  const uint64_t before = default_generator().offset();
  nn::TransformerEncoder stack(proto, 4);
  CHECK(default_generator().offset() == before);  // copies, as copy.deepcopy: no initial draws
  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16});
  auto dec_copy = dec.clone();
  CHECK(allclose(dec_copy->submodule("multihead_attn").parameter("in_proj_weight"),
                 dec.submodule("multihead_attn").parameter("in_proj_weight"), 0, 0));
}

// ---- errors

TEST_CASE("transformer api: bad masks through the calls are errors naming the module and the shapes") {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .batch_first = true});
  Tensor x = randn({2, 5, 8});
  CHECK(error_text([&] {
          layer(x, zeros({5, 4}));
        })
            .find("TransformerEncoderLayer: src_mask has shape (5, 4), expected (T, S) = (5, 5) or "
                  "(B * heads, T, S) = (4, 5, 5)") != std::string::npos);
  CHECK(error_text([&] {
          layer(x, zeros({5, 5}, DType::I32));
        })
            .find("TransformerEncoderLayer: src_mask must be Bool (true = not allowed) or floating (added to the "
                  "scores), got I32") != std::string::npos);
  CHECK(error_text([&] {
          layer(x, {}, zeros({2, 4}));
        }).find("TransformerEncoderLayer: src_key_padding_mask has shape (2, 4), expected (B, S) = (2, 5)") !=
        std::string::npos);
  CHECK(error_text([&] {
          layer(x, {}, zeros({2, 5}, DType::I64));
        }).find("src_key_padding_mask must be Bool (true = padding) or floating (added to the scores), got I64") !=
        std::string::npos);
  nn::TransformerEncoder stack(layer, 2);
  CHECK(error_text([&] {
          stack(x, nn::generate_square_subsequent_mask(4));
        }).find("TransformerEncoderLayer: src_mask has shape (4, 4)") != std::string::npos);
  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16});
  CHECK(error_text([&] {
          dec(randn({4, 2, 8}), randn({5, 2, 8}), {}, zeros({4, 4}));
        }).find("TransformerDecoderLayer: memory_mask has shape (4, 4), expected (T, S) = (4, 5)") !=
        std::string::npos);
  nn::MultiheadAttention mha(8, 2);
  Tensor q = randn({3, 2, 8});
  CHECK(error_text([&] {
          mha(q, q, q, {}, false, zeros({2, 3, 3}));
        })
            .find("MultiheadAttention: attn_mask has shape (2, 3, 3), expected (T, S) = (3, 3) or (B * heads, T, S) = "
                  "(4, 3, 3)") != std::string::npos);
  CHECK(error_text([&] {
          mha(q, q, q, zeros({3, 2}, DType::Bool));
        }).find("MultiheadAttention: key_padding_mask has shape (3, 2), expected (B, S) = (2, 3)") !=
        std::string::npos);
  CHECK(error_text([&] {
          mha.forward(q, q, q, zeros({3, 3}, DType::I64));
        }).find("MultiheadAttention: attn_mask must be Bool (true = not allowed) or floating") != std::string::npos);
  CHECK(error_text([] {
          nn::TransformerEncoder(std::shared_ptr<nn::TransformerEncoderLayer>(), 2);
        }).find("TransformerEncoder: encoder_layer is null") != std::string::npos);
  CHECK(error_text([&] {
          nn::TransformerEncoder(layer, 0);
        }).find("TransformerEncoder: num_layers must be positive, got 0") != std::string::npos);
}
