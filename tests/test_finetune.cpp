// tests/test_finetune.cpp: the mechanics fine-tuning relies on (examples/finetune/main.cpp), on
// tiny synthetic data: frozen parameters stay bit-identical under every optimizer (weight decay
// and momentum included, stale gradients too), a replaced head is what trains and is saved
// under its name, a saved backbone loads back to identical outputs, a non-strict load into a
// model with another head reports exactly the head's keys, parameter groups step by their own
// learning rates, and unfreezing mid-training makes the backbone move.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "brisk.h"
#include "nn/models/simple.h"
#include "nn/serialize_module.h"
#include "test_util.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

// backbone: Linear(4, 8), ReLU, Linear(8, 8), ReLU; head: Linear(8, 3). The head's name is a
// parameter so two models can differ only there.
class TinyNet : public nn::Module {
 public:
  explicit TinyNet(const std::string& head_name = "head", int64_t classes = 3) : Module("TinyNet"), head_(head_name) {
    auto backbone = std::make_shared<nn::Sequential>();
    backbone->push_back(std::make_shared<nn::Linear>(4, 8));
    backbone->push_back(std::make_shared<nn::ReLU>());
    backbone->push_back(std::make_shared<nn::Linear>(8, 8));
    backbone->push_back(std::make_shared<nn::ReLU>());
    register_module("backbone", backbone);
    register_module(head_name, std::make_shared<nn::Linear>(8, classes));
  }
  // Looks the children up by name on every call, so replace_module takes effect.
  Tensor forward(const Tensor& x) override { return (*child(head_))((*child("backbone"))(x)); }

 private:
  std::string head_;
};

// Deep copies of every parameter, by name.
nn::NamedTensors snapshot(const nn::Module& m) {
  nn::NamedTensors out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.detach().clone());
  return out;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  if (!(a.sizes() == b.sizes()) || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

// Whether the parameter `name` of m equals its value in `before`, bit for bit.
bool unchanged(const nn::Module& m, const nn::NamedTensors& before, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters())
    if (n == name)
      for (const auto& [bn, bp] : before)
        if (bn == name) return bit_identical(p, bp);
  FAIL("no parameter ", name);
  return false;
}

// One training step of cross entropy on a fixed synthetic batch.
void train_step(nn::Module& m, optim::Optimizer& opt) {
  Generator gen(7);
  const Tensor x = randn({6, 4}, DType::F32, Device::cpu(), &gen);
  const Tensor y = from_vector({0, 1, 2, 0, 1, 2}, {6}, DType::I64);
  opt.zero_grad();
  nn::functional::cross_entropy(m(x), y).backward();
  opt.step();
}

const char* kBackbone[] = {"backbone.0.weight", "backbone.0.bias", "backbone.2.weight", "backbone.2.bias"};
const char* kHead[] = {"head.weight", "head.bias"};

}  // namespace

TEST_CASE("finetune: a frozen backbone stays bit-identical under every optimizer, decay and momentum included") {
  // Each optimizer gets ALL parameters (as named_parameters() passes them) with weight decay,
  // and momentum where it has one: a frozen parameter has no gradient, so none may touch it.
  const std::vector<std::string> kinds = {"sgd", "sgd-reference", "adam", "adamw", "rmsprop", "adagrad"};
  for (const std::string& kind : kinds) {
    CAPTURE(kind);
    manual_seed(1);
    TinyNet m;
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == "sgd" || kind == "sgd-reference")
      opt = std::make_unique<optim::SGD>(
          m.named_parameters(),
          optim::SGDOptions{
              .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .fused = kind == "sgd"});
    else if (kind == "adam")
      opt = std::make_unique<optim::Adam>(m.named_parameters(), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
    else if (kind == "adamw")
      opt = std::make_unique<optim::AdamW>(m.named_parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
    else if (kind == "rmsprop")
      opt = std::make_unique<optim::RMSprop>(m.named_parameters(),
                                             optim::RMSpropOptions{.lr = 0.01, .weight_decay = 0.01, .momentum = 0.5});
    else
      opt = std::make_unique<optim::Adagrad>(m.named_parameters(),
                                             optim::AdagradOptions{.lr = 0.1, .weight_decay = 0.01});

    // Two steps with everything trainable build momentum and moment buffers for the backbone.
    train_step(m, *opt);
    train_step(m, *opt);
    // Freeze after a backward, without zero_grad: the backbone keeps a stale gradient.
    Generator gen(3);
    nn::functional::cross_entropy(m(randn({6, 4}, DType::F32, Device::cpu(), &gen)),
                                  from_vector({2, 1, 0, 2, 1, 0}, {6}, DType::I64))
        .backward();
    m.submodule("backbone").requires_grad_(false);
    CHECK(m.num_parameters(true) == 8 * 3 + 3);
    const nn::NamedTensors before = snapshot(m);
    opt->step();  // the stale gradients are still there
    for (int i = 0; i < 3; ++i) train_step(m, *opt);
    for (const char* name : kBackbone) {
      CAPTURE(name);
      CHECK(unchanged(m, before, name));
    }
    for (const char* name : kHead) {
      CAPTURE(name);
      CHECK_FALSE(unchanged(m, before, name));
    }
  }
}

TEST_CASE("finetune: a replaced head is what trains and is saved under its name") {
  manual_seed(2);
  nn::models::SmallCNN cnn(5);
  auto old_head = cnn.submodule("classifier.3").named_parameters();
  const Tensor old_weight = old_head[0].second.detach().clone();
  auto new_head = std::make_shared<nn::Linear>(128, 3);
  cnn.replace_module("classifier.3", new_head);

  const nn::NamedTensors sd = cnn.state_dict();
  REQUIRE(sd.size() == 8);
  CHECK(sd[6].first == "classifier.3.weight");
  CHECK(sd[7].first == "classifier.3.bias");
  CHECK(sd[6].second.sizes() == Shape{3, 128});
  CHECK(sd[6].second.data_ptr() == new_head->weight().data_ptr());  // the new module's tensor itself
  CHECK(cnn.num_parameters() == 32 * 9 + 32 + 64 * 32 * 9 + 64 + 3136 * 128 + 128 + 128 * 3 + 3);

  cnn.requires_grad_(false);
  new_head->requires_grad_(true);
  optim::SGD opt(cnn.named_parameters(), {.lr = 0.1});
  const Tensor new_before = new_head->weight().detach().clone();
  const Tensor conv_before = cnn.submodule("features.0").parameter("weight").detach().clone();
  Generator gen(5);
  const Tensor x = randn({4, 1, 28, 28}, DType::F32, Device::cpu(), &gen);
  const Tensor logits = cnn(x);
  CHECK(logits.sizes() == Shape{4, 3});
  opt.zero_grad();
  nn::functional::cross_entropy(logits, from_vector({0, 1, 2, 1}, {4}, DType::I64)).backward();
  opt.step();
  CHECK_FALSE(bit_identical(new_head->weight(), new_before));
  CHECK(bit_identical(cnn.submodule("features.0").parameter("weight"), conv_before));
  CHECK(bit_identical(old_head[0].second, old_weight));  // the old head is out of the model
  CHECK_FALSE(old_head[0].second.grad().defined());
}

TEST_CASE("finetune: a saved backbone loads back to identical outputs") {
  test::TempDir dir{"brisk-ft"};
  manual_seed(3);
  nn::models::SmallCNN pretrained(5);
  nn::save_module(pretrained, dir.file("pretrained.safetensors"));
  manual_seed(4);  // other initial weights, to be overwritten
  nn::models::SmallCNN loaded(5);
  CHECK(nn::load_module(loaded, dir.file("pretrained.safetensors")).ok());
  pretrained.eval();
  loaded.eval();
  Generator gen(9);
  const Tensor x = randn({3, 1, 28, 28}, DType::F32, Device::cpu(), &gen);
  NoGradGuard ng;
  CHECK(bit_identical(pretrained(x), loaded(x)));
  // With a new head, the features the head sees are still the pretrained ones.
  loaded.replace_module("classifier.3", std::make_shared<nn::Linear>(128, 2));
  CHECK(bit_identical(pretrained.submodule("features")(x), loaded.submodule("features")(x)));
  CHECK(loaded(x).sizes() == Shape{3, 2});
}

TEST_CASE("finetune: a non-strict load into a model with another head reports exactly the head's keys") {
  manual_seed(5);
  TinyNet source("head", 3);
  const nn::NamedTensors state = source.state_dict();
  {  // same head name, other number of classes: the head's two keys are mis-shaped
    manual_seed(6);
    TinyNet target("head", 5);
    const Tensor head_before = target.submodule("head").parameter("weight").detach().clone();
    const nn::LoadReport r = target.load_state_dict(state, false);
    CHECK(r.missing.empty());
    CHECK(r.unexpected.empty());
    REQUIRE(r.shape_mismatch.size() == 2);
    CHECK(r.shape_mismatch[0] == "head.weight: file (3, 8) vs module (5, 8)");
    CHECK(r.shape_mismatch[1] == "head.bias: file (3) vs module (5)");
    for (const char* name : kBackbone) {
      CAPTURE(name);
      CHECK(unchanged(target, state, name));  // the backbone loaded
    }
    CHECK(bit_identical(target.submodule("head").parameter("weight"), head_before));  // the head kept its init
  }
  {  // another head name: its keys are missing, the file's head keys unexpected
    manual_seed(6);
    TinyNet target("fc", 3);
    const nn::LoadReport r = target.load_state_dict(state, false);
    CHECK(r.missing == std::vector<std::string>{"fc.weight", "fc.bias"});
    CHECK(r.unexpected == std::vector<std::string>{"head.bias", "head.weight"});  // sorted by name
    CHECK(r.shape_mismatch.empty());
    for (const char* name : kBackbone) CHECK(unchanged(target, state, name));
  }
  {  // strict: an error naming the keys, and nothing copied
    manual_seed(6);
    TinyNet target("head", 5);
    const nn::NamedTensors before = snapshot(target);
    const std::string msg = test::error_text([&] { target.load_state_dict(state, true); });
    CHECK(msg.find("head.weight") != std::string::npos);
    for (const char* name : kBackbone) CHECK(unchanged(target, before, name));
  }
}

TEST_CASE("finetune: parameter groups move each parameter by its group's learning rate times its gradient") {
  // Powers of two for the learning rates: lr * grad is exact, so the expected value is the
  // optimizer's arithmetic exactly, whatever the gradients are.
  for (const bool fused : {true, false}) {
    CAPTURE(fused);
    manual_seed(7);
    TinyNet m;
    nn::NamedTensors backbone, head;
    for (auto& [name, p] : m.named_parameters())
      (name.rfind("backbone.", 0) == 0 ? backbone : head).emplace_back(name, p);
    optim::SGD opt(head, {.lr = 0.5, .fused = fused});
    opt.add_param_group(backbone, {.lr = 0.0625});
    CHECK(opt.lr(0) == 0.5);
    CHECK(opt.lr(1) == 0.0625);
    CHECK(opt.get(1, "fused") == (fused ? 1.0 : 0.0));  // inherited
    const nn::NamedTensors before = snapshot(m);
    Generator gen(11);
    const Tensor x = randn({6, 4}, DType::F32, Device::cpu(), &gen);
    opt.zero_grad();
    nn::functional::cross_entropy(m(x), from_vector({0, 1, 2, 0, 1, 2}, {6}, DType::I64)).backward();
    nn::NamedTensors grads;
    for (auto& [name, p] : m.named_parameters()) grads.emplace_back(name, p.grad().clone());
    opt.step();
    const nn::NamedTensors after = m.named_parameters();
    for (size_t i = 0; i < after.size(); ++i) {
      const std::string& name = after[i].first;
      CAPTURE(name);
      const double lr = name.rfind("backbone.", 0) == 0 ? 0.0625 : 0.5;
      const std::vector<float> p0 = before[i].second.to_vector<float>(), g = grads[i].second.to_vector<float>(),
                               p1 = after[i].second.to_vector<float>();
      REQUIRE(g.size() == p1.size());
      int exact = 0;
      for (size_t j = 0; j < p1.size(); ++j) exact += p1[j] == p0[j] + g[j] * float(-lr);
      CHECK(exact == int(p1.size()));
      CHECK_FALSE(bit_identical(after[i].second, before[i].second));
    }
  }
}

TEST_CASE("finetune: unfreezing mid-training makes the backbone start moving at its own rate") {
  manual_seed(8);
  TinyNet m;
  nn::NamedTensors backbone, head;
  for (auto& [name, p] : m.named_parameters())
    (name.rfind("backbone.", 0) == 0 ? backbone : head).emplace_back(name, p);
  optim::Adam opt(head, {.lr = 1e-2});
  opt.add_param_group(backbone, {.lr = 1e-3});
  m.submodule("backbone").requires_grad_(false);
  CHECK(m.num_parameters(true) == 8 * 3 + 3);
  const nn::NamedTensors start = snapshot(m);
  for (int i = 0; i < 3; ++i) train_step(m, opt);
  for (const char* name : kBackbone) CHECK(unchanged(m, start, name));
  for (const char* name : kBackbone) CHECK(opt.state(name) == nullptr);  // never stepped
  CHECK(opt.state("head.weight")->step == 3);

  m.submodule("backbone").requires_grad_(true);
  CHECK(m.num_parameters(true) == m.num_parameters());
  const nn::NamedTensors thawed = snapshot(m);
  train_step(m, opt);
  for (const char* name : kBackbone) {
    CAPTURE(name);
    CHECK_FALSE(unchanged(m, thawed, name));
    REQUIRE(opt.state(name) != nullptr);
    CHECK(opt.state(name)->step == 1);  // Adam's bias correction starts afresh for the backbone
  }
  CHECK(opt.state("head.weight")->step == 4);
  // Adam's first step moves each element by about lr (m / sqrt(v) = sign(g)): the backbone's
  // largest move is its group's 1e-3, not the head's 1e-2.
  const Tensor moved = abs(m.submodule("backbone.0").parameter("weight").detach() - thawed[0].second);
  CHECK(max(moved).item<double>() == doctest::Approx(1e-3).epsilon(1e-3));
}
