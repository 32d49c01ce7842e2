// tests/test_parity.cpp: brisk's models against PyTorch, from the reference files in
// tests/data/parity (made by tests/make_parity_reference.py, which says what each holds): the
// Fashion-MNIST CNN (PyTorch's seeded weights), torchvision's ResNet-18 (weights from a formula
// both sides compute, eval and train mode) and a tiny Hugging Face GPT-2 (seeded weights).
// Each loads the weights into brisk, runs forward and backward in F32 on the CPU and compares
// outputs (1e-5) and gradients (1e-4) by the relative error rel_err defines; the measured
// errors are printed with MESSAGE. The reverse direction: brisk writes brisk_gpt2.safetensors
// (checked byte for byte here; the script checks PyTorch loads it and gets brisk's logits).
// Set BRISK_REGENERATE_PARITY=1 to rewrite the two brisk_gpt2 files. Not here: CUDA (the CUDA
// tests compare each kernel to the CPU).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "engine/serialize.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/models/gpt2.h"
#include "nn/models/simple.h"
#include "nn/models/vision.h"
#include "nn/serialize_module.h"
#include "tests/paths.h"

using namespace brisk;
namespace fs = std::filesystem;
namespace F = brisk::nn::functional;

namespace {

constexpr double kOutputTol = 1e-5;
constexpr double kGradTol = 1e-4;

fs::path data_dir() { return ::brisk::test::data_dir() / "parity"; }

SafetensorsFile load_reference(const std::string& name) {
  fs::path path = data_dir() / name;
  REQUIRE_MESSAGE(fs::exists(path), "missing reference file ", path.string(),
                  " (tests/make_parity_reference.py makes it)");
  return load_safetensors(path.string());
}

const Tensor& find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  FAIL("reference tensor ", name, " not found");
  static Tensor none;
  return none;
}

Tensor param(nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters()) {
    if (n == name) return t;
  }
  FAIL("parameter ", name, " not found");
  return {};
}

// The relative error of `got` against the reference `want`:
//   max_i |got_i - want_i| / max(max_i |want_i|, 1e-30)
// (the largest deviation measured against the tensor's scale, so near-zero entries do not
// dominate; tests/make_parity_reference.py uses the same). Infinite on a shape mismatch or NaN.
double rel_err(const Tensor& got, const Tensor& want) {
  if (!got.defined() || got.sizes() != want.sizes()) return INFINITY;
  std::vector<double> a = got.to_vector<double>();
  std::vector<double> b = want.to_vector<double>();
  double diff = 0;
  double scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

// Largest error seen per kind, for the MESSAGE the lead quotes.
struct Worst {
  double output = 0;
  double grad = 0;
  std::string output_at = "-";
  std::string grad_at = "-";
  void output_ok(const std::string& what, const Tensor& got, const Tensor& want) {
    double e = rel_err(got, want);
    CAPTURE(what);
    CHECK(e <= kOutputTol);
    if (e > output) output = e, output_at = what;
  }
  void grad_ok(const std::string& what, const Tensor& got, const Tensor& want) {
    double e = rel_err(got, want);
    CAPTURE(what);
    CHECK(e <= kGradTol);
    if (e > grad) grad = e, grad_at = what;
  }
  std::string str() const {
    std::ostringstream s;
    s << "outputs max rel err " << output << " (" << output_at << "), gradients " << grad << " (" << grad_at << ")";
    return s.str();
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---------------------------------------------------------------------------- ResNet formula

// See Note [ResNet formula] in tests/make_parity_reference.py: element i of state_dict tensor
// k is float32(center + scale * (2u - 1)), u from a splitmix-style hash of (i, k), in float64.
Tensor formula_tensor(uint64_t k, const Shape& shape, double center, double scale) {
  std::vector<double> v(size_t(shape.numel()));
  for (uint64_t i = 0; i < v.size(); ++i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull + (k + 1) * 0xD1B54A32D192ED03ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 32;
    double u = double(x >> 11) * 0x1p-53;
    double two_u_minus_1 = 2.0 * u - 1.0;  // exact
    // Rounded on its own, as numpy does: volatile keeps a compiler from fusing it into an fma.
    volatile double scaled = scale * two_u_minus_1;
    v[i] = double(float(center + scaled));
  }
  return from_vector(v, shape, DType::F32);
}

// Fills every parameter and buffer of `model` by the formula; returns the per-tensor sums
// (float64 over the float32 values) that the script stores as formula_sums.
std::vector<double> fill_resnet(nn::Module& model) {
  nn::NamedTensors filled;
  std::vector<double> sums;
  uint64_t k = 0;
  for (const auto& [name, t] : model.state_dict()) {
    const Shape& s = t.sizes();
    double center = 0, scale = 0.1;
    if (name.ends_with("num_batches_tracked")) {
      filled.emplace_back(name, zeros(s, DType::I64));
      sums.push_back(0);
      ++k;
      continue;
    }
    if (name.ends_with("running_mean")) {
      center = 0, scale = 0.1;
    } else if (name.ends_with("running_var")) {
      center = 1, scale = 0.5;
    } else if (t.dim() > 1) {
      center = 0, scale = std::sqrt(3.0 / double(t.numel() / t.size(0)));  // variance 1 / fan_in
    } else if (name.starts_with("fc.")) {
      center = 0, scale = 0.1;
    } else if (name.ends_with("weight")) {
      center = 1, scale = 0.25;  // BatchNorm weight
    } else {
      center = 0, scale = 0.1;  // BatchNorm bias
    }
    Tensor v = formula_tensor(k, s, center, scale);
    double sum = 0;
    for (double x : v.to_vector<double>()) sum += x;
    sums.push_back(sum);
    filled.emplace_back(name, v);
    ++k;
  }
  model.load_state_dict(filled, /*strict=*/true);
  return sums;
}

std::vector<std::string> keys_of(const nn::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [n, t] : tensors) out.push_back(n);
  return out;
}

// ---------------------------------------------------------------------------- GPT-2

nn::models::GPT2Config tiny_gpt2_config() {
  return {.vocab_size = 101,
          .n_positions = 32,
          .n_embd = 64,
          .n_layer = 2,
          .n_head = 2,
          .dropout = 0.0,
          .layer_norm_eps = 1e-5};
}

// HF's LM loss for labels = ids: logits at t predict ids at t + 1, mean over B * (T - 1).
Tensor lm_loss(const Tensor& logits, const Tensor& ids) {
  int64_t b = logits.size(0), t = logits.size(1), v = logits.size(2);
  Tensor pred = logits.narrow(1, 0, t - 1).reshape({b * (t - 1), v});
  Tensor labels = ids.narrow(1, 1, t - 1).reshape({b * (t - 1)});
  return F::cross_entropy(pred, labels);
}

}  // namespace

// ------------------------------------------------------------------------------------- CNN

TEST_CASE("parity: SmallCNN matches PyTorch's logits and gradients (eval mode)") {
  SafetensorsFile io = load_reference("cnn_io.safetensors");
  nn::models::SmallCNN model;
  nn::load_module(model, (data_dir() / "cnn.safetensors").string(), /*strict=*/true);
  // Eval only: train mode's dropout draws from each framework's own RNG.
  model.eval();
  Tensor x = find(io.tensors, "input").clone();
  x.requires_grad_(true);
  Tensor logits = model(x);
  Tensor loss = F::cross_entropy(logits, find(io.tensors, "target"));
  loss.backward();
  Worst w;
  w.output_ok("logits_eval", logits, find(io.tensors, "logits_eval"));
  w.output_ok("loss_eval", loss, find(io.tensors, "loss_eval"));
  w.grad_ok("grad.input", x.grad(), find(io.tensors, "grad.input"));
  int grads = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    w.grad_ok("grad." + name, p.grad(), find(io.tensors, "grad." + name));
    ++grads;
  }
  CHECK(grads == 8);
  MESSAGE("SmallCNN vs PyTorch, eval mode: ", w.str());
}

// ---------------------------------------------------------------------------------- ResNet-18

TEST_CASE("parity: ResNet-18 matches torchvision in eval and train mode") {
  SafetensorsFile io = load_reference("resnet18_io.safetensors");
  const std::vector<std::string> grad_names = {"input",
                                               "conv1.weight",
                                               "bn1.bias",
                                               "layer1.0.bn1.weight",
                                               "layer3.0.downsample.0.weight",
                                               "layer4.1.bn2.weight",
                                               "fc.weight",
                                               "fc.bias"};
  Tensor target = find(io.tensors, "target");
  for (const char* mode : {"eval", "train"}) {
    const std::string m = mode;
    CAPTURE(m);
    auto model = nn::models::resnet18(10);
    std::vector<double> sums = fill_resnet(*model);
    if (m == "eval") {
      // The same keys in the same order as torchvision, and the same formula values.
      auto keys = nlohmann::json::parse(io.metadata.at("state_dict_keys")).get<std::vector<std::string>>();
      CHECK(keys_of(model->state_dict()) == keys);
      std::vector<double> want = find(io.tensors, "formula_sums").to_vector<double>();
      REQUIRE(want.size() == sums.size());
      for (size_t i = 0; i < sums.size(); ++i) {
        CAPTURE(keys[i]);
        CHECK(std::abs(sums[i] - want[i]) <= 1e-9 * std::max(1.0, std::abs(want[i])));
      }
    }
    model->train(m == "train");
    Tensor x = find(io.tensors, "input").clone();
    x.requires_grad_(true);
    Tensor logits = (*model)(x);
    Tensor loss = F::cross_entropy(logits, target);
    loss.backward();
    Worst w;
    w.output_ok("logits_" + m, logits, find(io.tensors, "logits_" + m));
    w.output_ok("loss_" + m, loss, find(io.tensors, "loss_" + m));
    for (const std::string& name : grad_names) {
      Tensor g = name == "input" ? x.grad() : param(*model, name).grad();
      w.grad_ok("grad_" + m + "." + name, g, find(io.tensors, "grad_" + m + "." + name));
    }
    if (m == "train") {
      // One train-mode forward moved the running statistics (momentum 0.1, unbiased variance).
      for (const char* bn : {"bn1", "layer1.0.bn1", "layer4.1.bn2", "layer3.0.downsample.1"}) {
        nn::Module& layer = model->submodule(bn);
        for (const char* stat : {"running_mean", "running_var"}) {
          std::string key = std::string("after_train.") + bn + "." + stat;
          w.output_ok(key, layer.buffer(stat), find(io.tensors, key));
        }
        CHECK(layer.buffer("num_batches_tracked").item<int64_t>() == 1);
      }
    }
    MESSAGE("ResNet-18 vs torchvision, ", m, " mode: ", w.str());
  }
}

// ---------------------------------------------------------------------------------------- GPT-2

TEST_CASE("parity: GPT-2 matches Hugging Face transformers' logits, loss and gradients") {
  SafetensorsFile io = load_reference("gpt2_io.safetensors");
  SafetensorsFile weights = load_reference("gpt2.safetensors");
  Tensor ids = find(io.tensors, "input_ids");
  for (bool train : {false, true}) {  // dropout 0: train mode computes the same
    CAPTURE(train);
    nn::models::GPT2 model(tiny_gpt2_config());
    CHECK(model.load_hf_state_dict(weights.tensors, /*strict=*/true).ok());
    model.train(train);
    Tensor logits = model(ids);
    Tensor loss = lm_loss(logits, ids);
    loss.backward();
    Worst w;
    w.output_ok("logits", logits, find(io.tensors, "logits"));
    w.output_ok("loss", loss, find(io.tensors, "loss"));
    int grads = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      // wte's gradient includes the tied lm_head's share; c_attn's is (in, out) as HF's.
      w.grad_ok("grad." + name, p.grad(), find(io.tensors, "grad." + name));
      ++grads;
    }
    CHECK(grads == 2 + 2 * 12 + 2);
    MESSAGE("GPT-2 vs transformers, ", std::string(train ? "train" : "eval"), " mode: ", w.str());
  }
}

TEST_CASE("parity: the comparison catches a transposed weight layout") {
  // The tests above must be able to fail: a Conv1D weight read as (out, in) (transposed) or a
  // convolution kernel flipped (true convolution instead of PyTorch's cross-correlation) moves
  // the outputs far beyond the tolerance.
  SafetensorsFile weights = load_reference("gpt2.safetensors");
  SafetensorsFile io = load_reference("gpt2_io.safetensors");
  nn::NamedTensors wrong;
  for (const auto& [name, t] : weights.tensors) {
    bool square_conv1d = name.ends_with("attn.c_proj.weight");  // (64, 64): loads either way
    wrong.emplace_back(name, square_conv1d ? t.t().contiguous() : t);
  }
  nn::models::GPT2 model(tiny_gpt2_config());
  CHECK(model.load_hf_state_dict(wrong, /*strict=*/true).ok());
  model.eval();
  NoGradGuard ng;
  double e = rel_err(model(find(io.tensors, "input_ids")), find(io.tensors, "logits"));
  MESSAGE("GPT-2 with c_proj transposed: logits rel err ", e);
  CHECK(e > 100 * kOutputTol);

  SafetensorsFile cnn_io = load_reference("cnn_io.safetensors");
  nn::models::SmallCNN cnn;
  nn::load_module(cnn, (data_dir() / "cnn.safetensors").string(), /*strict=*/true);
  cnn.eval();
  Tensor& k = cnn.submodule("features.0").parameter("weight");  // (32, 1, 3, 3)
  std::vector<double> v = k.to_vector<double>();
  for (size_t f = 0; f < v.size(); f += 9) std::reverse(v.begin() + long(f), v.begin() + long(f + 9));  // flip 3x3
  k.copy_(from_vector(v, k.sizes()));
  double ec = rel_err(cnn(find(cnn_io.tensors, "input")), find(cnn_io.tensors, "logits_eval"));
  MESSAGE("SmallCNN with the first kernel flipped: logits rel err ", ec);
  CHECK(ec > 100 * kOutputTol);
}

// ---------------------------------------------------------------------------- reverse direction

TEST_CASE("parity: brisk writes the committed brisk_gpt2.safetensors that PyTorch is checked to load") {
  // brisk_gpt2.safetensors: the tiny GPT-2 with weights drawn by brisk's seeded uniform_,
  // written by brisk (Hugging Face names, Conv1D weights (in, out), no lm_head). The script
  // loads it into transformers' GPT2LMHeadModel (load_state_dict(strict=True) on its
  // transformer; lm_head is tied) and checks PyTorch's logits against
  // brisk_gpt2_logits.safetensors. Here: brisk still writes the same bytes and still computes
  // the same logits. uniform_, not the model's normal_ init: rand is Philox plus one fma, the
  // same bits on every machine, while randn goes through libm's logf/cosf.
  const fs::path golden = data_dir() / "brisk_gpt2.safetensors";
  const fs::path golden_logits = data_dir() / "brisk_gpt2_logits.safetensors";
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"writer", "brisk"}};
  nn::models::GPT2 model(tiny_gpt2_config());
  manual_seed(2024);
  for (auto& [name, p] : model.named_parameters()) {
    bool ln_weight = name.find(".ln_") != std::string::npos && name.ends_with("weight");
    if (ln_weight) {
      nn::init::uniform_(p, 0.8, 1.2);
    } else if (name.ends_with("bias")) {
      nn::init::uniform_(p, -0.1, 0.1);
    } else {
      nn::init::uniform_(p, -0.15, 0.15);
    }
  }
  model.eval();
  SafetensorsFile io = load_reference("gpt2_io.safetensors");
  Tensor logits;
  {
    NoGradGuard ng;
    logits = model(find(io.tensors, "input_ids"));
  }
  if (std::getenv("BRISK_REGENERATE_PARITY")) {
    nn::save_module(model, golden.string(), meta);
    save_safetensors(golden_logits.string(), {{"logits", logits}}, meta);
  }
  REQUIRE_MESSAGE(fs::exists(golden), "missing ", golden.string(), " (BRISK_REGENERATE_PARITY=1 writes it)");
  fs::path tmp = fs::temp_directory_path() / ("brisk-parity-" + std::to_string(::getpid()) + ".safetensors");
  nn::save_module(model, tmp.string(), meta);
  bool same = read_bytes(tmp.string()) == read_bytes(golden.string());
  fs::remove(tmp);
  CHECK_MESSAGE(same, golden.string(),
                " is no longer what brisk writes: if that is intended, rewrite it with "
                "BRISK_REGENERATE_PARITY=1 and rerun tests/make_parity_reference.py --check");
  SafetensorsFile committed = load_reference("brisk_gpt2_logits.safetensors");
  double e = rel_err(logits, find(committed.tensors, "logits"));
  MESSAGE("GPT-2 (brisk init): logits vs the committed brisk logits, rel err ", e);
  CHECK(e <= kOutputTol);
}
