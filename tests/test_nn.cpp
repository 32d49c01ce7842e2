// tests/test_nn.cpp: Module mechanics (names as PyTorch, state_dict, strict loading, freezing,
// replacing children, hooks, train/eval, device/dtype moves) and the model zoo's parameter
// names and counts against torchvision / Hugging Face.
#include <doctest/doctest.h>

#include <limits>
#include <set>

#include "brisk.h"
#include "nn/layers.h"
#include "nn/models/gpt2.h"
#include "nn/models/simple.h"
#include "nn/models/vision.h"

using namespace brisk;
using namespace brisk::nn;

namespace {
std::vector<std::string> keys(const NamedTensors& t) {
  std::vector<std::string> k;
  for (auto& [n, v] : t) k.push_back(n);
  return k;
}
bool has(const NamedTensors& t, const std::string& name) {
  for (auto& [n, v] : t) {
    if (n == name) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("nn: Sequential names children 0, 1, ... and state_dict matches PyTorch's order") {
  Sequential s{std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), std::make_shared<BatchNorm1d>(3)};
  CHECK(keys(s.state_dict()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "2.running_mean",
                                                         "2.running_var", "2.num_batches_tracked"});
  CHECK(keys(s.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(s.num_parameters() == 4 * 3 + 3 + 3 + 3);
}

TEST_CASE("nn: Linear and Conv2d start from PyTorch's default distribution") {
  manual_seed(3);
  Linear lin(100, 50);
  double bound = 1.0 / std::sqrt(100.0);
  CHECK(amax(abs(lin.weight())).item<double>() <= bound);
  CHECK(amax(abs(lin.weight())).item<double>() > 0.9 * bound);
  Conv2d conv(8, 4, 3);
  CHECK(conv.parameter("weight").sizes() == Shape{4, 8, 3, 3});
  CHECK(amax(abs(conv.parameter("weight"))).item<double>() <= 1.0 / std::sqrt(72.0));
}

TEST_CASE("nn: load_state_dict is strict by default and reports differences otherwise") {
  auto a = std::make_shared<Linear>(3, 2);
  auto b = std::make_shared<Linear>(3, 2);
  b->load_state_dict(a->state_dict());
  CHECK(equal(a->weight(), b->weight()));
  NamedTensors bad = a->state_dict();
  bad.emplace_back("extra", zeros({1}));
  bad[0].second = zeros({5, 5});
  CHECK_THROWS_WITH_AS(b->load_state_dict(bad), doctest::Contains("unexpected keys: extra"), Error);
  LoadReport r = b->load_state_dict(bad, /*strict=*/false);
  CHECK(r.unexpected == std::vector<std::string>{"extra"});
  REQUIRE(r.shape_mismatch.size() == 1);
  CHECK(r.shape_mismatch[0] == "weight: file (5, 5) vs module (2, 3)");
  NamedTensors partial{{"bias", zeros({2})}};
  LoadReport p = b->load_state_dict(partial, false);
  CHECK(p.missing == std::vector<std::string>{"weight"});
  CHECK(b->bias().to_vector<float>() == std::vector<float>{0, 0});
}

TEST_CASE("nn: freezing, replacing the head, apply, train/eval") {
  auto net = models::resnet18(10);
  net->requires_grad_(false);
  CHECK(net->num_parameters(/*trainable_only=*/true) == 0);
  net->replace_module("fc", std::make_shared<Linear>(512, 5));
  CHECK(net->num_parameters(true) == 512 * 5 + 5);
  CHECK(net->submodule("fc").parameter("weight").sizes() == Shape{5, 512});
  int convs = 0;
  net->apply([&](Module& m) { convs += m.type_name() == "Conv2d"; });
  CHECK(convs == 20);
  net->eval();
  CHECK_FALSE(net->submodule("layer1.0.bn1").is_training());
  net->train();
  CHECK(net->submodule("layer4.1").is_training());
  CHECK_THROWS_WITH_AS(net->replace_module("nope", std::make_shared<Identity>()), doctest::Contains("nope"), Error);
}

TEST_CASE("nn: forward hooks see inputs and can replace outputs") {
  Linear lin(2, 2);
  int pre = 0;
  int handle = lin.register_forward_pre_hook([&](Module&, Tensor&) { ++pre; });
  lin.register_forward_hook([](Module&, const Tensor&, Tensor& out) { out = zeros_like(out); });
  Tensor y = lin(ones({1, 2}));
  CHECK(pre == 1);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 0});
  lin.remove_hook(handle);
  lin(ones({1, 2}));
  CHECK(pre == 1);
}

TEST_CASE("nn: to(dtype) keeps parameter identity (optimizers keep working)") {
  Linear lin(3, 2);
  Tensor w = lin.weight();
  lin.to(DType::F64);
  CHECK(w.dtype() == DType::F64);
  CHECK(w.requires_grad());
  CHECK(lin.weight().impl() == w.impl());
}

TEST_CASE("nn: torchvision models have torchvision's names and parameter counts") {
  auto r18 = models::resnet18();
  CHECK(r18->num_parameters() == 11689512);
  NamedTensors sd = r18->state_dict();
  CHECK(sd.size() == 122);
  CHECK(has(sd, "conv1.weight"));
  CHECK(has(sd, "layer1.0.bn1.running_mean"));
  CHECK(has(sd, "layer2.0.downsample.0.weight"));
  CHECK(has(sd, "layer2.0.downsample.1.num_batches_tracked"));
  CHECK(has(sd, "fc.bias"));
  CHECK(models::resnet34()->num_parameters() == 21797672);
  CHECK(models::resnet50()->num_parameters() == 25557032);
  CHECK(models::vgg11()->num_parameters() == 132863336);
  auto vgg16 = models::vgg16();
  CHECK(vgg16->num_parameters() == 138357544);
  CHECK(has(vgg16->state_dict(), "features.28.weight"));
  CHECK(has(vgg16->state_dict(), "classifier.6.bias"));
  auto mb = models::MobileNetV2();
  CHECK(mb.num_parameters() == 3504872);
  NamedTensors msd = mb.state_dict();
  CHECK(has(msd, "features.0.0.weight"));
  CHECK(has(msd, "features.1.conv.0.0.weight"));  // depthwise of the t=1 block
  CHECK(has(msd, "features.1.conv.1.weight"));
  CHECK(has(msd, "features.2.conv.3.running_var"));
  CHECK(has(msd, "features.18.1.weight"));
  CHECK(has(msd, "classifier.1.weight"));
}

TEST_CASE("nn: GPT-2 has Hugging Face's names, layouts and parameter count") {
  models::GPT2Config small;
  small.n_layer = 1;  // keep the test light: count one block and the embeddings
  models::GPT2 g(small);
  NamedTensors sd = g.state_dict();
  CHECK(has(sd, "transformer.wte.weight"));
  CHECK(has(sd, "transformer.wpe.weight"));
  CHECK(has(sd, "transformer.h.0.ln_1.weight"));
  CHECK(has(sd, "transformer.h.0.attn.c_attn.weight"));
  CHECK(has(sd, "transformer.h.0.mlp.c_proj.bias"));
  CHECK(has(sd, "transformer.ln_f.bias"));
  CHECK(g.submodule("transformer.h.0.attn.c_attn").parameter("weight").sizes() == Shape{768, 2304});  // (in, out)
  // GPT-2 small: 124,439,808 parameters = embeddings + 12 blocks + ln_f.
  int64_t block = 7087872, emb = 50257 * 768 + 1024 * 768, lnf = 2 * 768;
  CHECK(g.num_parameters() == emb + block + lnf);
  // Hugging Face checkpoints name keys without "transformer." and carry mask buffers.
  NamedTensors hf;
  for (auto& [k, t] : sd) hf.emplace_back(k.substr(std::string("transformer.").size()), t);
  hf.emplace_back("h.0.attn.bias", zeros({1, 1, 4, 4}));
  CHECK(g.load_hf_state_dict(hf).ok());
}

TEST_CASE("nn: conv and pooling geometry near 2^63 is an error naming the op, never a wrapped size") {
  namespace F = nn::functional;
  const int64_t huge = int64_t(1) << 62;
  Tensor x = zeros({1, 1, 4, 4});
  Tensor w = zeros({1, 1, 3, 3});
  CHECK_THROWS_WITH_AS(F::conv2d(x, w, {}, {1, 1}, {huge, 0}), doctest::Contains("conv2d: padded input height"), Error);
  CHECK_THROWS_WITH_AS(
      F::conv2d(x, w, {}, {1, 1}, {0, 0}, {1, huge}),
      doctest::Contains("conv2d: dilated kernel width (4611686018427387904 x 2 + 1) overflows 64 bits"), Error);
  CHECK_THROWS_WITH_AS(F::max_pool2d(x, {3, 3}, std::nullopt, {0, 0}, {huge, 1}),
                       doctest::Contains("max_pool2d: dilated window size"), Error);
  CHECK_THROWS_WITH_AS(F::max_pool2d(x, {2, 2}, F::Pair{std::numeric_limits<int64_t>::max(), 1}, {0, 0}, {1, 1}, true),
                       doctest::Contains("max_pool2d: output span"), Error);
  CHECK(F::max_pool2d(x, {2, 2}, F::Pair{huge, 1}).sizes() == Shape{1, 1, 1, 3});  // a huge stride is fine
}
