// tests/test_module_containers.cpp: nn::ModuleList and nn::ModuleDict: a model built from them
// registers its parameters, buffers and submodules under PyTorch's names in PyTorch's order
// (tests/data/item8/containers.json, made by tests/make_item8_reference.py), loads PyTorch's
// weights and gives PyTorch's outputs and gradients; indexing, iteration, to(), replacing a
// child, and the errors (index out of range, missing key, duplicate or bad names, null).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "tests/paths.h"

using namespace brisk;
using json = nlohmann::json;

namespace {

// brisk's version of the script's ContainerNet.
struct ContainerNet : nn::Module {
  ContainerNet() : nn::Module("ContainerNet") {
    stem = register_module("stem", std::make_shared<nn::Linear>(3, 4));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks->push_back(std::make_shared<nn::Linear>(4, 4));
    blocks->push_back(std::make_shared<nn::ReLU>());
    blocks->push_back(std::make_shared<nn::BatchNorm1d>(4));
    auto inner = std::make_shared<nn::ModuleList>();
    inner->push_back(std::make_shared<nn::Linear>(4, 4, /*bias=*/false));
    blocks->push_back(inner);
    heads = register_module("heads", std::make_shared<nn::ModuleDict>());
    heads->insert("cls", std::make_shared<nn::Linear>(4, 2));
    heads->insert("aux", std::make_shared<nn::Linear>(4, 1));
  }
  std::pair<Tensor, Tensor> run(const Tensor& x) {
    Tensor h = (*stem)(x);
    int i = 0;
    for (const nn::ModulePtr& b : *blocks) {
      if (i++ < 3) h = (*b)(h);
    }
    auto inner = std::dynamic_pointer_cast<nn::ModuleList>((*blocks)[3]);
    h = (*(*inner)[0])(h);
    return {(*(*heads)["cls"])(h), (*(*heads)["aux"])(h)};
  }
  std::shared_ptr<nn::Linear> stem;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::ModuleDict> heads;
};

json load_containers() {
  std::filesystem::path path = ::brisk::test::data_dir() / "item8" / "containers.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in)["cases"][0];
}

double max_abs_diff(const Tensor& x, const json& ref) {
  std::vector<double> a = x.to_vector<double>();
  std::vector<double> b = ref.get<std::vector<double>>();
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("optimx: ModuleList and ModuleDict name parameters, buffers and modules as PyTorch, in its order") {
  json ref = load_containers();
  ContainerNet net;
  auto params = net.named_parameters();
  REQUIRE(params.size() == ref["named_parameters"].size());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].first == ref["named_parameters"][i][0].get<std::string>());
    CHECK(params[i].second.sizes() == Shape(ref["named_parameters"][i][1].get<std::vector<int64_t>>()));
  }
  auto state = net.state_dict();
  REQUIRE(state.size() == ref["state_dict"].size());
  for (size_t i = 0; i < state.size(); ++i) CHECK(state[i].first == ref["state_dict"][i].get<std::string>());
  std::vector<std::string> modules;
  for (auto& [name, m] : net.named_modules()) modules.push_back(name);
  CHECK(modules == ref["named_modules"].get<std::vector<std::string>>());
}

TEST_CASE("optimx: a ModuleList / ModuleDict model with PyTorch's weights gives PyTorch's outputs and gradients") {
  json ref = load_containers();
  ContainerNet net;
  net.to(DType::F64);
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : net.named_parameters()) {
      p.copy_(from_vector(ref["params"][name].get<std::vector<double>>(), p.sizes(), DType::F64));
    }
  }
  Tensor x = from_vector(ref["x"].get<std::vector<double>>(), {5, 3}, DType::F64);
  auto [cls, aux] = net.run(x);
  CHECK(max_abs_diff(cls, ref["cls"]) <= 1e-12);
  CHECK(max_abs_diff(aux, ref["aux"]) <= 1e-12);
  (sum(cls) + sum(aux) * 2.0).backward();
  for (auto& np : net.named_parameters()) {
    const std::string& name = np.first;
    const Tensor& p = np.second;
    REQUIRE_MESSAGE(p.grad().defined(), name);
    CHECK_MESSAGE(max_abs_diff(p.grad(), ref["grads"][name]) <= 1e-12, name);
  }
  // to() reaches every child of the containers.
  net.to(DType::F32);
  for (auto& np : net.named_parameters()) CHECK_MESSAGE(np.second.dtype() == DType::F32, np.first);
  for (auto& nb : net.named_buffers()) {
    if (nb.first.find("num_batches_tracked") == std::string::npos)
      CHECK_MESSAGE(nb.second.dtype() == DType::F32, nb.first);
  }
  CHECK(net.blocks->is_training());
  net.eval();
  CHECK_FALSE((*net.blocks)[2]->is_training());
  CHECK_FALSE((*net.heads)["aux"]->is_training());
}

TEST_CASE("optimx: ModuleList and ModuleDict indexing, iteration, replacement and errors") {
  nn::ModuleList list{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>()};
  CHECK(list.size() == 2);
  CHECK(list[0]->type_name() == "Linear");
  CHECK(list[1]->type_name() == "ReLU");
  list.push_back(std::make_shared<nn::Linear>(3, 1));
  CHECK(list.size() == 3);
  std::vector<std::string> kinds;
  for (const nn::ModulePtr& m : list) kinds.push_back(m->type_name());
  CHECK(kinds == std::vector<std::string>{"Linear", "ReLU", "Linear"});
  CHECK(list.named_parameters()[2].first == "2.weight");
  list.replace_module("1", std::make_shared<nn::Tanh>());
  CHECK(list[1]->type_name() == "Tanh");
  CHECK_THROWS_WITH_AS(list[3], doctest::Contains("ModuleList: index 3 out of range (size 3)"), Error);
  CHECK_THROWS_WITH_AS(list.push_back(nullptr), doctest::Contains("is null"), Error);

  nn::ModuleDict dict;
  dict.insert("b", std::make_shared<nn::Linear>(2, 2)).insert("a", std::make_shared<nn::Linear>(2, 1));
  CHECK(dict.contains("a"));
  CHECK_FALSE(dict.contains("c"));
  CHECK(dict.named_children()[0].first == "b");  // insertion order, as PyTorch
  CHECK(dict.state_dict()[0].first == "b.weight");
  CHECK_THROWS_WITH_AS(dict["c"], doctest::Contains("ModuleDict: no module 'c'"), Error);
  CHECK_THROWS_WITH_AS(dict.insert("a", std::make_shared<nn::ReLU>()), doctest::Contains("module 'a' already exists"),
                       Error);
  CHECK_THROWS_WITH_AS(dict.insert("x.y", std::make_shared<nn::ReLU>()), doctest::Contains("invalid"), Error);
  CHECK_THROWS_WITH_AS(dict.insert("", std::make_shared<nn::ReLU>()), doctest::Contains("invalid"), Error);
  // A state_dict saved from one dict loads into another with the same names; a wrong one is refused.
  nn::ModuleDict other;
  other.insert("b", std::make_shared<nn::Linear>(2, 2)).insert("a", std::make_shared<nn::Linear>(2, 1));
  other.load_state_dict(dict.state_dict());
  CHECK(other["a"]->parameter("weight").to_vector<double>() == dict["a"]->parameter("weight").to_vector<double>());
  nn::ModuleDict wrong;
  wrong.insert("a", std::make_shared<nn::Linear>(2, 2));
  CHECK_THROWS_AS(wrong.load_state_dict(dict.state_dict()), Error);
}
