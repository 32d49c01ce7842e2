// tests/test_module_dict.cpp: modules with several named inputs and outputs (TensorDict,
// Note [Module signatures] in nn/module.h) with hooks, state_dict, to(), summary and a saved
// file; and FeatureExtractor (nn/features.h): named intermediate outputs of any model.
#include <doctest/doctest.h>

#include <filesystem>

#include "brisk.h"
#include "nn/models/vision.h"
#include "nn/serialize_module.h"

using namespace brisk;

namespace {

// A trunk feeding two heads; takes {"x"}, returns {"classes", "groups"}.
class TwoHeads : public nn::Module {
 public:
  TwoHeads() : Module("TwoHeads") {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(4, 8));
    classes = register_module("classes", std::make_shared<nn::Linear>(8, 3));
    groups = register_module("groups", std::make_shared<nn::Linear>(8, 2));
  }
  nn::TensorDict forward_dict(const nn::TensorDict& in) override {
    Tensor h = relu((*trunk)(in["x"]));
    return {{"classes", (*classes)(h)}, {"groups", (*groups)(h)}};
  }
  std::shared_ptr<nn::Linear> trunk, classes, groups;
};

// Overrides neither forward.
class NoForward : public nn::Module {
 public:
  NoForward() : Module("NoForward") {}
};

bool same(const Tensor& a, const Tensor& b) { return allclose(a, b, 0, 0); }

}  // namespace

TEST_CASE("module dict: TensorDict keeps order, replaces by name, names what is missing") {
  nn::TensorDict d{{"a", ones({2})}, {"b", zeros({3})}};
  CHECK(d.names() == std::vector<std::string>{"a", "b"});
  d.set("a", zeros({1}));
  d.set("c", ones({1}));
  CHECK(d.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(d["a"].numel() == 1);
  CHECK(d.contains("c"));
  CHECK_FALSE(d.contains("z"));
  CHECK_THROWS_WITH_AS(d.at("z"), doctest::Contains("no tensor named 'z' (it holds: a, b, c)"), Error);
  CHECK_THROWS_WITH_AS(d.only("probe"), doctest::Contains("probe: expected exactly one tensor, got 3"), Error);
  CHECK_THROWS_WITH_AS((nn::TensorDict{{"a", ones({1})}, {"a", ones({1})}}), doctest::Contains("'a' appears twice"),
                       Error);
}

TEST_CASE("module dict: a two-headed module runs, hooks see and change its named outputs") {
  manual_seed(1);
  auto m = std::make_shared<TwoHeads>();
  Tensor x = randn({5, 4});
  nn::TensorDict out = (*m)(nn::TensorDict{{"x", x}});
  CHECK(out.names() == std::vector<std::string>{"classes", "groups"});
  CHECK(out["classes"].sizes() == Shape{5, 3});
  CHECK(same(out["groups"], (*m->groups)(relu((*m->trunk)(x)))));

  // Called with one tensor, it gets {"input": x}, which names no "x".
  CHECK_THROWS_WITH_AS((*m)(x), doctest::Contains("no tensor named 'x' (it holds: input)"), Error);

  int tensor_hook_runs = 0;
  const int th = m->register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++tensor_hook_runs; });
  std::vector<std::string> seen_in;
  const int pre = m->register_dict_forward_pre_hook([&](nn::Module&, nn::TensorDict& in) {
    seen_in = in.names();
    in["x"] = in["x"] * 2.0;  // the forward sees the change
  });
  const int post = m->register_dict_forward_hook([&](nn::Module&, const nn::TensorDict& in, nn::TensorDict& o) {
    CHECK(in.contains("x"));
    o.set("sum", o["classes"].sum());  // and the caller sees what the hook adds
  });
  nn::TensorDict hooked = (*m)(nn::TensorDict{{"x", x}});
  CHECK(seen_in == std::vector<std::string>{"x"});
  CHECK(hooked.names() == std::vector<std::string>{"classes", "groups", "sum"});
  CHECK(same(hooked["classes"], (*m->classes)(relu((*m->trunk)(x * 2.0)))));
  CHECK(tensor_hook_runs == 0);  // tensor hooks see tensor calls only
  m->remove_hook(pre);
  m->remove_hook(post);
  m->remove_hook(th);
  CHECK(same(((*m)(nn::TensorDict{{"x", x}}))["classes"], out["classes"]));
}

TEST_CASE("module dict: state_dict, a saved file, to(F64) and summary work as for any module") {
  manual_seed(2);
  auto a = std::make_shared<TwoHeads>();
  auto b = std::make_shared<TwoHeads>();
  Tensor x = randn({3, 4});
  CHECK_FALSE(same((*a)(nn::TensorDict{{"x", x}})["groups"], (*b)(nn::TensorDict{{"x", x}})["groups"]));
  std::vector<std::string> keys;
  for (const auto& [k, t] : a->state_dict()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"trunk.weight", "trunk.bias", "classes.weight", "classes.bias",
                                         "groups.weight", "groups.bias"});
  const std::string path = (std::filesystem::temp_directory_path() / "brisk_two_heads.safetensors").string();
  nn::save_module(*a, path);
  CHECK(nn::load_module(*b, path).ok());
  std::filesystem::remove(path);
  nn::TensorDict ya = (*a)(nn::TensorDict{{"x", x}}), yb = (*b)(nn::TensorDict{{"x", x}});
  CHECK(same(ya["classes"], yb["classes"]));
  CHECK(same(ya["groups"], yb["groups"]));

  b->to(DType::F64);
  nn::TensorDict y64 = (*b)(nn::TensorDict{{"x", cast(x, DType::F64)}});
  CHECK(y64["groups"].dtype() == DType::F64);
  CHECK(allclose(cast(y64["groups"], DType::F32), ya["groups"], 1e-5, 1e-6));
  const std::string s = a->summary();
  CHECK(s.find("classes: Linear (27 parameters)") != std::string::npos);
  CHECK(s.find("groups: Linear (18 parameters)") != std::string::npos);
}

TEST_CASE("module dict: single-tensor modules take a one-entry dict; dict hooks see tensor calls") {
  manual_seed(3);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  Tensor x = randn({4, 3});
  nn::TensorDict y = (*lin)(nn::TensorDict{{"anything", x}});
  CHECK(y.names() == std::vector<std::string>{"output"});
  CHECK(same(y["output"], (*lin)(x)));
  CHECK_THROWS_WITH_AS((*lin)(nn::TensorDict{{"a", x}, {"b", x}}),
                       doctest::Contains("expected exactly one tensor, got 2"), Error);

  std::vector<std::string> names;
  lin->register_dict_forward_hook([&](nn::Module&, const nn::TensorDict& in, nn::TensorDict& out) {
    names = in.names();
    names.push_back(out.names()[0]);
    out["output"] = out["output"] + 1.0;  // the tensor call returns what the hook wrote
  });
  Tensor hooked = (*lin)(x);
  CHECK(names == std::vector<std::string>{"input", "output"});
  CHECK(same(hooked, y["output"] + 1.0));
}

TEST_CASE("module dict: a module without a forward is a clear error, called either way") {
  NoForward m;
  CHECK_THROWS_WITH_AS(m(ones({2})), doctest::Contains("NoForward: this module defines no forward"), Error);
  CHECK_THROWS_WITH_AS(m(nn::TensorDict{{"x", ones({2})}}),
                       doctest::Contains("NoForward: this module defines no forward"), Error);
  // and the failed call leaves nothing behind: a later error is the same one.
  CHECK_THROWS_WITH_AS(m(ones({2})), doctest::Contains("defines no forward"), Error);
}

TEST_CASE("features: intermediate outputs of a Sequential, renamed, with the rest skipped") {
  manual_seed(4);
  auto l0 = std::make_shared<nn::Linear>(6, 5);
  auto l2 = std::make_shared<nn::Linear>(5, 4);
  auto l4 = std::make_shared<nn::Linear>(4, 2);
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{l0, std::make_shared<nn::ReLU>(), l2, std::make_shared<nn::ReLU>(), l4});
  CHECK(nn::feature_node_names(*model) == std::vector<std::string>{"0", "1", "2", "3", "4"});
  Tensor x = randn({3, 6});
  const Tensor h1 = relu((*l0)(x)), h2 = (*l2)(h1);

  int last_runs = 0;
  l4->register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++last_runs; });
  nn::FeatureExtractor fx(model, {{"1", "hidden"}, {"2", "pre"}});
  nn::TensorDict f = fx(x);
  CHECK(f.names() == std::vector<std::string>{"hidden", "pre"});
  CHECK(same(f["hidden"], h1));
  CHECK(same(f["pre"], h2));
  CHECK(last_runs == 0);  // stop_early: the layers after the last node did not run

  // Plain calls of the model are unaffected while the extractor exists.
  Tensor y = (*model)(x);
  CHECK(last_runs == 1);
  CHECK(same(y, (*l4)(relu(h2))));

  // stop_early off: everything runs and the model's output comes back as "output".
  nn::FeatureExtractor full(model, {"2"}, {.stop_early = false});
  nn::TensorDict g = full(x);
  CHECK(g.names() == std::vector<std::string>{"2", "output"});
  CHECK(same(g["output"], y));

  // Features are part of the graph: gradients reach the parameters before the node.
  Tensor loss = f["pre"].sum();
  loss.backward();
  CHECK(l0->weight().grad().defined());
  CHECK_FALSE(l4->weight().grad().defined());
}

TEST_CASE("features: a ResNet's stages, a multi-output node, and clear errors") {
  manual_seed(5);
  auto net = nn::models::resnet18(10);
  net->eval();
  nn::FeatureExtractor fx(net, {{"layer2", "c3"}, {"layer4", "c5"}});
  nn::TensorDict f = fx(randn({1, 3, 64, 64}));
  CHECK(f["c3"].sizes() == Shape{1, 128, 8, 8});
  CHECK(f["c5"].sizes() == Shape{1, 512, 2, 2});

  // A node with several outputs gives "<name>.<key>" entries.
  auto heads = std::make_shared<TwoHeads>();
  struct Wrap : nn::Module {
    std::shared_ptr<TwoHeads> h;
    explicit Wrap(std::shared_ptr<TwoHeads> m) : Module("Wrap"), h(register_module("heads", std::move(m))) {}
    Tensor forward(const Tensor& x) override { return (*h)(nn::TensorDict{{"x", x}})["classes"]; }
  };
  auto wrap = std::make_shared<Wrap>(heads);
  nn::FeatureExtractor hx(wrap, {"heads", "heads.trunk"});
  nn::TensorDict h = hx(randn({2, 4}));
  CHECK(h.names() == std::vector<std::string>{"heads.classes", "heads.groups", "heads.trunk"});

  CHECK_THROWS_WITH_AS(nn::FeatureExtractor(wrap, {"head"}),
                       doctest::Contains("Wrap has no module 'head'; its nodes are: heads, heads.trunk"), Error);
  CHECK_THROWS_WITH_AS(nn::FeatureExtractor(wrap, std::vector<nn::FeatureNode>{}),
                       doctest::Contains("no nodes requested"), Error);
  CHECK_THROWS_WITH_AS(nn::FeatureExtractor(wrap, {{"heads", "a"}, {"heads.trunk", "a"}}),
                       doctest::Contains("the name 'a' is given to two nodes"), Error);
  struct Skips : nn::Module {
    std::shared_ptr<nn::Linear> used, unused;
    Skips()
        : Module("Skips"),
          used(register_module("used", std::make_shared<nn::Linear>(2, 2))),
          unused(register_module("unused", std::make_shared<nn::Linear>(2, 2))) {}
    Tensor forward(const Tensor& x) override { return (*used)(x); }
  };
  nn::FeatureExtractor sx(std::make_shared<Skips>(), {"unused"});
  CHECK_THROWS_WITH_AS(sx(ones({1, 2})), doctest::Contains("module 'unused' (Linear) did not run in Skips's forward"),
                       Error);
}
