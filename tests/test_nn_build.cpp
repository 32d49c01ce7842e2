// tests/test_nn_build.cpp: module building the way PyTorch code writes it: Sequential from a
// list, a vector or named pairs (children named as PyTorch names them), LayerNorm(int),
// ModuleList in a range-for (also after replace_module), MultiheadAttention with batch_first
// false and a causal mask through the module's call (hooks run), set_num_threads, the
// umbrella header compiling on its own, and option structs filled from one designated field
// with -Wmissing-field-initializers as an error (tests/check_field_defaults.py checks them all).
#include <doctest/doctest.h>

#include "brisk.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;

TEST_CASE("nn build: Sequential from a list, a vector and named pairs") {
  nn::Sequential a{std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>()};
  CHECK(a.state_dict()[0].first == "0.weight");
  std::vector<nn::ModulePtr> layers = {std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Tanh>(),
                                       std::make_shared<nn::Linear>(3, 2)};
  nn::Sequential b(layers);
  CHECK(b.size() == 3);
  CHECK(b.state_dict()[2].first == "2.weight");
  nn::Sequential c{{"fc1", std::make_shared<nn::Linear>(4, 3)},
                   {"act", std::make_shared<nn::ReLU>()},
                   {"fc2", std::make_shared<nn::Linear>(3, 2)}};
  const auto sd = c.state_dict();
  CHECK(sd[0].first == "fc1.weight");
  CHECK(sd[2].first == "fc2.weight");
  CHECK(c(ones({5, 4})).sizes() == Shape{5, 2});
  CHECK(error_text([] {
          nn::Sequential d{{"a.b", std::make_shared<nn::ReLU>()}};
        }).find("invalid") != std::string::npos);
}

TEST_CASE("nn build: LayerNorm(int) normalizes the last dim; ModuleList iterates") {
  nn::LayerNorm ln(8);
  CHECK(ln.normalized_shape == Shape{8});
  CHECK(ln.parameter("weight").sizes() == Shape{8});
  nn::ModuleList blocks{std::make_shared<nn::Linear>(8, 8), std::make_shared<nn::Linear>(8, 8)};
  blocks.push_back(std::make_shared<nn::Linear>(8, 8));
  Tensor x = ones({2, 8});
  int n = 0;
  for (const nn::ModulePtr& block : blocks) {
    x = (*block)(x);
    ++n;
  }
  CHECK(n == 3);
  blocks.replace_module("1", std::make_shared<nn::Identity>());
  std::vector<std::string> types;
  for (const nn::ModulePtr& block : blocks) types.push_back(block->type_name());
  CHECK(types == std::vector<std::string>{"Linear", "Identity", "Linear"});
}

TEST_CASE("nn build: MultiheadAttention with batch_first = false and a causal call that runs hooks") {
  manual_seed(0);
  nn::MultiheadAttention bf(8, 2, 0.0, true, /*batch_first=*/true);
  nn::MultiheadAttention tf(8, 2, 0.0, true, /*batch_first=*/false);
  tf.load_state_dict(bf.state_dict());
  Tensor x = randn({3, 5, 8});                       // (B, T, E)
  Tensor y_tf = tf(x.transpose(0, 1).contiguous());  // (T, B, E)
  CHECK(y_tf.sizes() == Shape{5, 3, 8});
  const auto a = bf(x).to_vector<double>(), b = y_tf.transpose(0, 1).contiguous().to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-6));
  // Causal through the call: position 0's output ignores later positions; a hook sees the call.
  nn::MultiheadAttention causal(8, 2, 0.0, true, true, /*causal=*/true);
  causal.load_state_dict(bf.state_dict());
  int hooked = 0;
  causal.register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++hooked; });
  Tensor x2 = x.clone();
  {
    NoGradGuard no_grad;
    narrow(x2, 1, 4, 1).fill_(100.0);  // change the last position only
  }
  const auto y1 = narrow(causal(x), 1, 0, 1).to_vector<double>(), y2 = narrow(causal(x2), 1, 0, 1).to_vector<double>();
  for (size_t i = 0; i < y1.size(); ++i) CHECK(y1[i] == doctest::Approx(y2[i]));
  CHECK(hooked == 2);
  const auto full1 = narrow(bf(x), 1, 0, 1).to_vector<double>(), full2 = narrow(bf(x2), 1, 0, 1).to_vector<double>();
  CHECK(full1 != full2);  // without the mask the change reaches position 0
}

TEST_CASE("threads: set_num_threads and get_num_threads") {
  const int before = get_num_threads();
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  set_num_threads(before);
  CHECK(get_num_threads() == before);
  CHECK(error_text([] { set_num_threads(0); }).find("at least 1 thread") != std::string::npos);
}

// Each struct filled with one designated field, as user code does; a member without a default
// initializer would make this file fail to compile.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wmissing-field-initializers"
TEST_CASE("nn build: option structs fill from one designated field without warnings") {
  const nn::ConvOptions conv{.stride = {2, 2}};
  const optim::SGDOptions sgd{.lr = 0.1};
  const optim::AdamWOptions adamw{.weight_decay = 0.0};
  const optim::EarlyStoppingOptions stop{.patience = 3};
  const optim::CyclicLROptions cyclic{.base_lr = {0.01}, .max_lr = {0.1}};
  const optim::OneCycleLROptions one_cycle{.max_lr = {0.1}, .total_steps = 10};
  const optim::ReduceLROnPlateauOptions plateau{.factor = 0.5};
  const optim::GradScalerOptions scaler{.init_scale = 1024.0};
  const data::CsvOptions csv{.target = data::CsvColumn("y")};
  const data::LoaderOptions loader{.batch_size = 8};
  const data::Example example{.input = ones({2})};
  const nn::LoadReport report{.missing = {"w"}};
  CHECK(conv.stride[0] == 2);
  CHECK(sgd.lr.get() == 0.1);
  CHECK(adamw.weight_decay.is_set());
  CHECK(stop.patience == 3);
  CHECK(cyclic.max_lr.size() == 1);
  CHECK(one_cycle.total_steps == 10);
  CHECK(plateau.factor == 0.5);
  CHECK(scaler.init_scale == 1024.0);
  CHECK(csv.target->name == "y");
  CHECK(loader.batch_size == 8);
  CHECK(!example.target.defined());
  CHECK(report.unexpected.empty());
}
#pragma GCC diagnostic pop

TEST_CASE("nn build: skip_init builds without drawing; a load then gives the initialized model's outputs") {
  nn::models::GPT2Config c{.vocab_size = 64, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 4};
  Generator& g = default_generator();
  manual_seed(3);
  auto reference = std::make_shared<nn::models::GPT2>(c);
  reference->eval();
  const uint64_t after_build = g.offset();
  CHECK(after_build > 0);
  auto skipped = nn::init::skip_init<nn::models::GPT2>(c);
  CHECK(g.offset() == after_build);  // nothing drawn
  CHECK_FALSE(nn::init::init_skipped());
  {
    nn::init::SkipInitGuard outer;
    {
      nn::init::SkipInitGuard inner;
      Tensor t = zeros({4});
      nn::init::normal_(t);
      nn::init::constant_(t, 5);
      CHECK(t.sum().item<double>() == 0);  // left as it was
    }
    CHECK(nn::init::init_skipped());  // guards nest
  }
  skipped->load_state_dict(reference->state_dict(), /*strict=*/true);
  skipped->eval();
  const Tensor idx = from_vector({1, 5, 9, 63, 0, 7}, {1, 6}, DType::I64);
  CHECK(equal((*skipped)(idx), (*reference)(idx)));
  // GPT-2's init, one draw per weight: N(0, 0.02) embeddings, residual projections scaled by
  // 1/sqrt(2 n_layer).
  auto big = std::make_shared<nn::models::GPT2>(
      nn::models::GPT2Config{.vocab_size = 4000, .n_embd = 64, .n_layer = 4, .n_head = 4});
  auto std_of = [&](const std::string& name) {
    for (auto& [n, p] : big->named_parameters())
      if (n == name) return std::sqrt(var(p.to(DType::F64)).item<double>());
    FAIL("no parameter " << name);
    return 0.0;
  };
  CHECK(std_of("transformer.wte.weight") == doctest::Approx(0.02).epsilon(0.02));
  CHECK(std_of("transformer.h.0.mlp.c_proj.weight") == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(std_of("transformer.h.0.mlp.c_fc.weight") == doctest::Approx(0.02).epsilon(0.05));
}
