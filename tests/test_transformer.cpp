// tests/test_transformer.cpp: TransformerEncoderLayer, TransformerDecoderLayer,
// TransformerEncoder, RMSNorm, InstanceNorm2d and PReLU against PyTorch
// (tests/data/recurrent/transformer.json, made by tests/make_recurrent_reference.py): weights
// loaded by PyTorch's names (strict), outputs and the gradients of a weighted sum of the
// outputs w.r.t. the inputs and every parameter, in F32 (1e-5 / 1e-4) and F64 (1e-12); post- and
// pre-norm, relu and gelu, eval and train mode (dropout 0), causal and key padding masks;
// InstanceNorm2d's running statistics; Dropout2d's whole-channel masks; and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers_extra.h"
#include "nn/transformer.h"
#include "tests/reference.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::json;

namespace {

const json& reference() {
  static const json j = test::read_reference("recurrent/transformer.json");
  return j;
}
const json& find_case(const std::string& name) { return test::find_case(reference(), name); }
using test::rel_err;
using test::state_of;
using test::tensor_of;
using test::Worst;

nn::TransformerOptions options_of(const json& cfg) {
  nn::TransformerOptions o;
  o.dim_feedforward = cfg["dim_feedforward"];
  o.dropout = 0.0;
  o.activation = cfg.value("activation", "relu");
  o.layer_norm_eps = cfg.value("layer_norm_eps", 1e-5);
  o.batch_first = cfg["batch_first"];
  o.norm_first = cfg.value("norm_first", false);
  return o;
}

using Call = std::function<Tensor(nn::Module&, std::map<std::string, Tensor>&, std::map<std::string, Tensor>&)>;

// Loads the case's weights into m (converted to dt), runs `call`, backpropagates the weighted
// sum of the output and compares output and gradients.
void check_case(const json& c, nn::Module& m, const Call& call, DType dt, double out_tol, double grad_tol) {
  m.to(dt);
  nn::LoadReport rep = m.load_state_dict(state_of(c["params"], dt));  // strict: names and shapes must match
  CHECK(rep.ok());
  m.train(c["config"].value("train", true));
  std::map<std::string, Tensor> x, masks;
  for (auto& [k, v] : c["inputs"].items()) x[k] = tensor_of(v, dt).requires_grad_(true);
  for (auto& [k, v] : c["bool_inputs"].items()) masks[k] = tensor_of(v, DType::Bool);
  Tensor out = call(m, x, masks);
  Worst worst;
  worst.out = rel_err(out, c["outputs"]["output"]);
  CHECK_MESSAGE(worst.out <= out_tol, c["name"], " output ", dtype_name(dt), " ", worst.out);
  (out * tensor_of(c["loss_weights"]["output"], dt)).sum().backward();
  auto check_grad = [&](const std::string& key, const Tensor& g) {
    const double e = rel_err(g, c["grads"][key]);
    CHECK_MESSAGE(e <= grad_tol, c["name"], " grad ", key, " ", dtype_name(dt), " ", e);
    worst.grad = std::max(worst.grad, e);
  };
  for (auto& [k, t] : x) check_grad("input." + k, t.grad());
  int params = 0;
  for (auto& [k, p] : m.named_parameters()) {
    check_grad("param." + k, p.grad());
    ++params;
  }
  CHECK(params == int(c["params"].size()));
  worst.print(c, dt);
}

// Both dtypes, a fresh module each.
void check_case(const std::string& name, const std::function<std::shared_ptr<nn::Module>(const json&)>& make,
                const Call& call) {
  const json& c = find_case(name);
  check_case(c, *make(c["config"]), call, DType::F32, 1e-5, 1e-4);
  check_case(c, *make(c["config"]), call, DType::F64, 1e-12, 1e-12);
}

Tensor mask_or_none(std::map<std::string, Tensor>& masks, const char* k) {
  return masks.count(k) ? masks[k] : Tensor();
}

void check_encoder(const std::string& name) {
  check_case(
      name,
      [](const json& cfg) {
        return std::make_shared<nn::TransformerEncoderLayer>(cfg["d_model"], cfg["nhead"], options_of(cfg));
      },
      [](nn::Module& m, auto& x, auto& masks) {
        return static_cast<nn::TransformerEncoderLayer&>(m).forward(x["src"], mask_or_none(masks, "src_mask"),
                                                                    mask_or_none(masks, "src_key_padding_mask"));
      });
}

void check_decoder(const std::string& name) {
  check_case(
      name,
      [](const json& cfg) {
        return std::make_shared<nn::TransformerDecoderLayer>(cfg["d_model"], cfg["nhead"], options_of(cfg));
      },
      [](nn::Module& m, auto& x, auto& masks) {
        return static_cast<nn::TransformerDecoderLayer&>(m).forward(x["tgt"], x["memory"], masks["tgt_mask"], {}, {},
                                                                    masks["memory_key_padding_mask"]);
      });
}

Tensor call_input(nn::Module& m, std::map<std::string, Tensor>& x, std::map<std::string, Tensor>&) {
  return m(x["input"]);
}

}  // namespace

TEST_CASE("transformer: TransformerEncoderLayer post-norm relu in eval matches PyTorch (its fast path)") {
  check_encoder("encoder_post_norm_relu_eval");
}

TEST_CASE("transformer: TransformerEncoderLayer in training (dropout 0) with causal and padding masks, (T, B, E)") {
  check_encoder("encoder_post_norm_relu_train_masks");
}

TEST_CASE("transformer: TransformerEncoderLayer norm_first gelu in eval with masks matches PyTorch") {
  check_encoder("encoder_pre_norm_gelu_eval_masks");
}

TEST_CASE("transformer: TransformerEncoderLayer norm_first in training with layer_norm_eps 1e-3") {
  check_encoder("encoder_pre_norm_relu_train");
}

TEST_CASE("transformer: TransformerDecoderLayer post-norm and norm_first gelu match PyTorch, with masks") {
  check_decoder("decoder_post_norm_relu_eval");
  check_decoder("decoder_pre_norm_gelu_train");
}

TEST_CASE("transformer: TransformerEncoder stack of 2 layers with a final norm matches PyTorch") {
  check_case(
      "encoder_stack_2_layers_final_norm",
      [](const json& cfg) {
        return std::make_shared<nn::TransformerEncoder>(cfg["d_model"], cfg["nhead"], cfg["num_layers"],
                                                        options_of(cfg), /*final_norm=*/true);
      },
      [](nn::Module& m, auto& x, auto&) { return m(x["src"]); });
}

TEST_CASE("transformer: the causal flag equals a causal src_mask") {
  manual_seed(5);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  Tensor x = randn({2, 5, 8});
  Tensor causal = gt(arange(5).unsqueeze(0), arange(5).unsqueeze(1));  // j > i
  Tensor a = layer.forward(x, causal);
  CHECK(allclose(a, layer.forward(x, {}, {}, /*is_causal=*/true), 1e-6, 1e-6));
  CHECK(!allclose(a, layer(x)));
}

TEST_CASE("transformer: parameters are PyTorch's names") {
  nn::TransformerDecoderLayer layer(8, 2, {.dim_feedforward = 16});
  std::vector<std::string> names;
  for (auto& [k, p] : layer.named_parameters()) names.push_back(k);
  const std::vector<std::string> want = {"self_attn.in_proj_weight",
                                         "self_attn.in_proj_bias",
                                         "self_attn.out_proj.weight",
                                         "self_attn.out_proj.bias",
                                         "multihead_attn.in_proj_weight",
                                         "multihead_attn.in_proj_bias",
                                         "multihead_attn.out_proj.weight",
                                         "multihead_attn.out_proj.bias",
                                         "linear1.weight",
                                         "linear1.bias",
                                         "linear2.weight",
                                         "linear2.bias",
                                         "norm1.weight",
                                         "norm1.bias",
                                         "norm2.weight",
                                         "norm2.bias",
                                         "norm3.weight",
                                         "norm3.bias"};
  CHECK(names == want);
}

TEST_CASE("transformer: bad configuration and input are clear errors") {
  auto text = [](auto f) { return error_text(f); };
  CHECK(text([] {
          nn::TransformerEncoderLayer(10, 3);
        }).find("TransformerEncoderLayer: d_model 10 must be divisible by nhead 3") != std::string::npos);
  CHECK(text([] {
          nn::TransformerDecoderLayer(8, 2, {.activation = "swish"});
        }).find("TransformerDecoderLayer: unknown activation 'swish' (relu or gelu)") != std::string::npos);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .batch_first = true});
  CHECK(text([&] { layer(randn({2, 5, 6})); }).find("src (2, 5, 6) must be (B, T, 8)") != std::string::npos);
  CHECK(text([&] { layer(randn({5, 8})); }).find("src (5, 8) must be (B, T, 8)") != std::string::npos);
  CHECK(text([&] {
          layer.forward(randn({2, 5, 8}), zeros({5, 5}, DType::I64));
        }).find("src_mask must be Bool (true = not allowed) or floating (added to the scores), got I64") !=
        std::string::npos);
  CHECK(text([&] {
          layer.forward(randn({2, 5, 8}), zeros({4, 5}, DType::Bool));
        }).find("src_mask has shape (4, 5), expected (T, S) = (5, 5) or (B * heads, T, S) = (4, 5, 5)") !=
        std::string::npos);
  CHECK(text([&] {
          layer.forward(randn({2, 5, 8}), {}, zeros({5, 2}, DType::Bool));
        }).find("src_key_padding_mask has shape (5, 2), expected (B, S) = (2, 5)") != std::string::npos);
  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16});
  CHECK(text([&] {
          dec.forward(randn({4, 2, 8}), randn({5, 3, 8}));
        }).find("different batch sizes") != std::string::npos);
}

// ---- RMSNorm, InstanceNorm2d, PReLU, Dropout2d

TEST_CASE("transformer: RMSNorm matches PyTorch (eps None -> finfo eps, 2-D shape, no affine)") {
  check_case(
      "rms_norm_default_eps", [](const json&) { return std::make_shared<nn::RMSNorm>(6); }, call_input);
  check_case(
      "rms_norm_2d_eps",
      [](const json&) {
        return std::make_shared<nn::RMSNorm>(Shape{3, 6}, 1e-2);
      },
      call_input);
  check_case(
      "rms_norm_no_affine", [](const json&) { return std::make_shared<nn::RMSNorm>(6, std::nullopt, false); },
      call_input);
}

TEST_CASE("transformer: RMSNorm's default eps is the machine epsilon of the input's dtype") {
  nn::RMSNorm norm(2, std::nullopt, false);
  // A row of tiny values shows eps: y = x / sqrt(x^2 + eps), far from 1 when x^2 << eps.
  Tensor x = full({1, 2}, 1e-4);
  const double f32_eps = 1.1920928955078125e-07;
  CHECK(norm(x).to_vector<double>()[0] == doctest::Approx(1e-4 / std::sqrt(1e-8 + f32_eps)).epsilon(1e-5));
  Tensor x64 = full({1, 2}, 1e-9, DType::F64);
  CHECK(norm(x64).to_vector<double>()[0] == doctest::Approx(1e-9 / std::sqrt(1e-18 + 2.220446049250313e-16)));
}

TEST_CASE("transformer: InstanceNorm2d matches PyTorch (default, affine, unbatched)") {
  check_case(
      "instance_norm_default", [](const json&) { return std::make_shared<nn::InstanceNorm2d>(3); }, call_input);
  auto affine = [](const json&) { return std::make_shared<nn::InstanceNorm2d>(3, 1e-5, 0.1, true); };
  check_case("instance_norm_affine", affine, call_input);
  check_case("instance_norm_unbatched", affine, call_input);
}

TEST_CASE("transformer: InstanceNorm2d tracks running statistics as PyTorch and uses them in eval") {
  const json& c = find_case("instance_norm_running_stats");
  nn::InstanceNorm2d norm(3, 1e-5, 0.2, true, true);
  nn::NamedTensors state;
  for (auto& [k, v] : c["params"].items())
    state.emplace_back(k, tensor_of(v, k == "num_batches_tracked" ? DType::I64 : DType::F32));
  CHECK(norm.load_state_dict(state).ok());
  {
    NoGradGuard ng;
    norm(tensor_of(c["inputs"]["x1"], DType::F32));
    norm(tensor_of(c["inputs"]["x2"], DType::F32));
  }
  for (auto& named : norm.state_dict()) {
    const std::string& k = named.first;
    CHECK_MESSAGE(rel_err(named.second, c["after_train"][k]) <= 1e-6, k, " ",
                  rel_err(named.second, c["after_train"][k]));
  }
  norm.eval();
  Tensor y = norm(tensor_of(c["inputs"]["x3"], DType::F32));
  CHECK(rel_err(y, c["outputs"]["eval_output"]) <= 1e-5);
}

TEST_CASE("transformer: PReLU with one slope and with one per channel matches PyTorch") {
  check_case(
      "prelu_single", [](const json&) { return std::make_shared<nn::PReLU>(); }, call_input);
  check_case(
      "prelu_channels", [](const json&) { return std::make_shared<nn::PReLU>(3); }, call_input);
}

TEST_CASE("transformer: Dropout2d zeroes whole channels, scales the rest, and is the identity in eval") {
  manual_seed(11);
  nn::Dropout2d drop(0.5);
  Tensor x = rand({8, 16, 3, 4}) + 1.0;  // no zeros of its own
  Tensor y = drop(x);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  int dropped = 0;
  for (int64_t plane = 0; plane < 8 * 16; ++plane) {
    bool all_zero = true, all_scaled = true;
    for (int64_t i = 0; i < 12; ++i) {
      const size_t k = size_t(plane * 12 + i);
      all_zero = all_zero && yv[k] == 0;
      all_scaled = all_scaled && std::abs(yv[k] - 2 * xv[k]) <= 1e-6 * xv[k];
    }
    CHECK((all_zero || all_scaled));
    dropped += all_zero;
  }
  CHECK(dropped > 30);  // about half of 128 planes
  CHECK(dropped < 98);
  drop.eval();
  CHECK(allclose(drop(x), x, 0, 0));
  // A 3-D input is (N, C, L), as PyTorch 2.x reads it: each (n, c) row is dropped whole.
  drop.train();
  Tensor u = drop(rand({16, 8, 5}) + 1.0);
  int rows_dropped = 0;
  for (int64_t n = 0; n < 16; ++n)
    for (int64_t ch = 0; ch < 8; ++ch) {
      std::vector<double> v = u.select(0, n).select(0, ch).to_vector<double>();
      const bool zero = v[0] == 0;
      for (double e : v) CHECK((e == 0) == zero);
      rows_dropped += zero;
    }
  CHECK(rows_dropped > 30);
  CHECK(rows_dropped < 98);
}

TEST_CASE("transformer: the small layers reject bad input with clear errors") {
  auto text = [](auto f) { return error_text(f); };
  nn::RMSNorm rms(Shape{3, 6});
  CHECK(text([&] {
          rms(randn({2, 6, 3}));
        }).find("RMSNorm: input (2, 6, 3) does not end in normalized_shape (3, 6)") != std::string::npos);
  nn::InstanceNorm2d inorm(3);
  CHECK(text([&] {
          inorm(randn({2, 4, 5, 5}));
        }).find("InstanceNorm2d: input (2, 4, 5, 5) has 4 channels") != std::string::npos);
  CHECK(text([&] { inorm(randn({2, 3})); }).find("expected input (B, C, H, W) or (C, H, W)") != std::string::npos);
  nn::PReLU prelu(3);
  CHECK(text([&] {
          prelu(randn({2, 4, 5}));
        }).find("PReLU: input (2, 4, 5) has 4 channels in dim 1") != std::string::npos);
  CHECK(text([] { nn::Dropout2d(1.5); }).find("Dropout2d: p must be in [0, 1]") != std::string::npos);
  nn::Dropout2d d2;
  CHECK(text([&] { d2(randn({2, 3})); }).find("Dropout2d: expected input") != std::string::npos);
}
