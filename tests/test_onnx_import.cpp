// tests/test_onnx_import.cpp: brisk::onnx::load_model on the small files of tests/data/onnx
// (made by tests/make_onnx_reference.py): an MLP exported with PyTorch's dotted names loads
// with its initializers as parameters (and an int64 one as a buffer) under those names, runs as
// the same brisk ops would, fine-tunes and loads its state_dict back; bad files (truncated, a
// cycle, data shorter than its shape, a 2^62-element initializer, an op, attribute value or
// dtype brisk lacks) are refused with errors that say what is wrong and where. ONNX's own test
// suite is tests/test_onnx_conformance.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "interop/onnx_import.h"
#include "nn/functional.h"
#include "paths.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

std::string onnx_file(const std::string& name) { return (test::data_dir() / "onnx" / name).string(); }

// The message of the brisk::Error that f throws ("" if none); `unsupported` tells whether it
// was an onnx::UnsupportedError.
std::string error_of(const std::function<void()>& f, bool* unsupported = nullptr) {
  try {
    f();
  } catch (const onnx::UnsupportedError& e) {
    if (unsupported) *unsupported = true;
    return e.what();
  } catch (const Error& e) {
    if (unsupported) *unsupported = false;
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("onnx import: initializers are parameters and buffers under their ONNX names") {
  auto model = onnx::load_model(onnx_file("mlp.onnx"));
  std::vector<std::string> keys;
  for (const auto& kv : model->state_dict()) keys.push_back(kv.first);
  CHECK(keys.size() == 5);
  for (const char* name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "shape"}) {
    CHECK_MESSAGE(std::find(keys.begin(), keys.end(), name) != keys.end(), name);
  }
  CHECK(model->named_parameters().size() == 4);  // the int64 shape is a buffer
  for (const Tensor& p : model->parameters()) CHECK(p.requires_grad());
  CHECK(model->input_names() == std::vector<std::string>{"input"});
  CHECK(model->output_names() == std::vector<std::string>{"output"});
}

// Note [GELU in imported graphs]: PyTorch 2.15's exports at opset 17 (tests/make_onnx_reference.py)
// of nn.GELU(), nn.GELU(approximate="tanh") and GPT-2's NewGELU (Pow, 0.5 first) run as the
// gelu op: no Erf or Tanh left, the values and gradients of brisk's gelu.
TEST_CASE("onnx import: GELU written as its math runs as the gelu op") {
  for (const auto& [file, tanh_form] : std::vector<std::pair<std::string, bool>>{
           {"gelu_erf.onnx", false}, {"gelu_tanh.onnx", true}, {"gelu_new.onnx", true}}) {
    const std::string name = file;  // (clang: no structured binding inside CAPTURE)
    CAPTURE(name);
    auto model = onnx::load_model(onnx_file(file));
    const std::vector<std::string> types = model->op_types();
    REQUIRE(types.size() == 1);
    CHECK(types[0].starts_with(tanh_form ? "Gelu (tanh form" : "Gelu (erf form"));
    Tensor x = (randn({4, 5}) * 3.0).requires_grad_();
    Tensor y = (*model)(x);
    Tensor want = gelu(x.detach(), tanh_form);
    CHECK(max(abs(y.detach() - want)).item<float>() < 1e-6f);
    (y * y).sum().backward();
    Tensor xr = x.detach().clone().requires_grad_();
    Tensor yr = gelu(xr, tanh_form);
    (yr * yr).sum().backward();
    CHECK(max(abs(x.grad() - xr.grad())).item<float>() < 1e-5f);
  }
}

TEST_CASE("onnx import: frozen initializers, and a state_dict that loads back") {
  auto frozen = onnx::load_model(onnx_file("mlp.onnx"), {.trainable_initializers = false});
  for (const Tensor& p : frozen->parameters()) CHECK_FALSE(p.requires_grad());
  auto model = onnx::load_model(onnx_file("mlp.onnx"));
  Tensor x = randn({3, 4});
  Tensor before = (*model)(x);
  nn::NamedTensors state;
  for (const auto& kv : model->state_dict()) state.emplace_back(kv.first, kv.second.clone());  // not aliases
  {
    NoGradGuard no_grad;
    for (Tensor p : model->parameters()) p.zero_();
  }
  CHECK_FALSE(allclose((*model)(x), before));
  CHECK(model->load_state_dict(state).ok());
  CHECK(allclose((*model)(x), before));
}

TEST_CASE("onnx import: an imported MLP computes what brisk's own ops compute") {
  auto model = onnx::load_model(onnx_file("mlp.onnx"));
  Tensor x = randn({5, 4});
  Tensor want =
      nn::functional::linear(relu(nn::functional::linear(x, model->submodule("fc1").parameter("weight"),
                                                         model->submodule("fc1").parameter("bias"))),
                             model->submodule("fc2").parameter("weight"), model->submodule("fc2").parameter("bias"));
  Tensor got = (*model)(x);
  CHECK(got.sizes() == Shape{5, 3});
  CHECK(allclose(got, want, 1e-5, 1e-6));
}

TEST_CASE("onnx import: fine-tuning an imported model lowers its loss") {
  auto model = onnx::load_model(onnx_file("mlp.onnx"));
  model->train();
  Tensor x = randn({16, 4});
  Tensor target = randn({16, 3});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    model->zero_grad();
    Tensor loss = mse_loss((*model)(x), target);
    loss.backward();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    NoGradGuard no_grad;
    for (Tensor p : model->parameters()) {
      REQUIRE(p.grad().defined());
      p.sub_(p.grad() * 0.1);
    }
  }
  CHECK(last < 0.8 * first);
}

TEST_CASE("onnx import: bad files are refused with errors that say what is wrong") {
  SUBCASE("a truncated model") {
    std::ifstream in(onnx_file("mlp.onnx"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::path cut = fs::temp_directory_path() / "brisk_onnx_truncated.onnx";
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::string msg = error_of([&] { onnx::load_model(cut.string()); });
    CHECK_MESSAGE(contains(msg, "does not parse"), msg);
    fs::remove(cut);
  }
  SUBCASE("a graph with a cycle") {
    std::string msg = error_of([] { onnx::load_model(onnx_file("cycle.onnx")); });
    CHECK_MESSAGE(contains(msg, "cycle"), msg);
  }
  SUBCASE("tensor data shorter than the shape says") {
    std::string msg = error_of([] { onnx::load_model(onnx_file("short_data.onnx")); });
    CHECK_MESSAGE((contains(msg, "8 bytes of data") && contains(msg, "need 64")), msg);
  }
  SUBCASE("a 2^62-element initializer allocates nothing") {
    std::string msg = error_of([] { onnx::load_model(onnx_file("huge.onnx")); });
    CHECK_MESSAGE(contains(msg, "too large"), msg);
  }
  SUBCASE("an op brisk lacks names the node, op type and opset") {
    bool unsupported = false;
    std::string msg = error_of([] { onnx::load_model(onnx_file("unsupported_op.onnx")); }, &unsupported);
    CHECK(unsupported);
    CHECK_MESSAGE((contains(msg, "'shift'") && contains(msg, "BitShift") && contains(msg, "opset 13")), msg);
  }
  SUBCASE("an attribute value the importer does not handle, before anything runs") {
    bool unsupported = false;
    std::string msg = error_of([] { onnx::load_model(onnx_file("training_batch_norm.onnx")); }, &unsupported);
    CHECK(unsupported);
    CHECK_MESSAGE((contains(msg, "'bn'") && contains(msg, "BatchNormalization") && contains(msg, "opset 15") &&
                   contains(msg, "training_mode")),
                  msg);
  }
  SUBCASE("a dtype brisk lacks") {
    bool unsupported = false;
    std::string msg = error_of([] { onnx::load_model(onnx_file("unsupported_dtype.onnx")); }, &unsupported);
    CHECK(unsupported);
    CHECK_MESSAGE(contains(msg, "UINT16"), msg);
  }
  SUBCASE("a missing file") {
    std::string msg = error_of([] { onnx::load_model(onnx_file("no_such_model.onnx")); });
    CHECK_MESSAGE(contains(msg, "cannot open"), msg);
  }
}
