// tests/test_optim_groups.cpp: parameter groups inherit the optimizer's options, as PyTorch's
// do (Note [Group options inherit] in optim/optimizer.h): for every optimizer, a group that sets
// one field keeps every other field the optimizer was built with, whatever the struct's
// defaults are; a group given nothing copies the optimizer's; schedulers see the inherited lr.
#include <doctest/doctest.h>

#include <string>

#include "engine/functions.h"
#include "optim/optim.h"

using namespace brisk;

namespace {

Tensor param() {
  Tensor t = zeros({2});
  t.requires_grad_(true);
  return t;
}

// Every option of group 1 equals group 0's except `changed`, which equals `value`.
void check_inherits(const optim::Optimizer& opt, const std::string& changed, double value) {
  REQUIRE(opt.num_groups() == 2);
  const optim::OptimizerState st = opt.state_dict();
  int compared = 0;
  for (const auto& [key, v] : st.scalars) {
    if (key.rfind("group.0.", 0) != 0 || key == "group.0.num_params") continue;
    const std::string field = key.substr(8);
    CAPTURE(field);
    const double other = st.scalars.at("group.1." + field);
    CHECK(other == (field == changed ? value : v));
    ++compared;
  }
  CHECK(compared >= 5);
}

}  // namespace

TEST_CASE("param groups: every optimizer's new group inherits the fields it does not set") {
  Tensor a = param(), b = param();
  {
    optim::SGD opt({a}, {.lr = 0.3, .momentum = 0.8, .dampening = 0.1, .weight_decay = 1e-4, .maximize = true});
    opt.add_param_group({b}, {.weight_decay = 0.0});
    check_inherits(opt, "weight_decay", 0.0);
  }
  {
    optim::Adam opt({a}, {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .amsgrad = true});
    opt.add_param_group({b}, {.weight_decay = 0.0});  // the probe: lr 3e-3 and beta2 0.99 kept
    check_inherits(opt, "weight_decay", 0.0);
    CHECK(opt.options(1).lr == 3e-3);
    CHECK(opt.options(1).beta2 == 0.99);
  }
  {
    optim::AdamW opt({a}, {.lr = 5e-4, .weight_decay = 0.05});
    opt.add_param_group({b}, {.weight_decay = 0.0});  // 0 set explicitly, not AdamW's 0.01 default
    check_inherits(opt, "weight_decay", 0.0);
  }
  {
    optim::RMSprop opt({a}, {.lr = 0.02, .alpha = 0.9, .momentum = 0.5, .centered = true});
    opt.add_param_group({b}, {.lr = 0.001});
    check_inherits(opt, "lr", 0.001);
  }
  {
    optim::Adagrad opt({a}, {.lr = 0.05, .lr_decay = 0.01, .initial_accumulator_value = 0.1});
    opt.add_param_group({b}, {.eps = 1e-6});
    check_inherits(opt, "eps", 1e-6);
  }
  {  // a group given nothing is the optimizer's options; a set field equal to the default is kept
    optim::Adam opt({a}, {.lr = 0.01});
    opt.add_param_group({b});
    check_inherits(opt, "", 0.0);
    Tensor c = param();
    opt.add_param_group({c}, {.lr = 1e-3});  // the struct's default value, but set: it wins
    CHECK(opt.options(2).lr == 1e-3);
    CHECK(opt.options(2).beta1 == 0.9);
  }
}

TEST_CASE("param groups: schedulers start from the inherited learning rate") {
  Tensor a = param(), b = param();
  optim::SGD opt({a}, {.lr = 0.5, .momentum = 0.9});
  opt.add_param_group({b}, {.weight_decay = 1e-3});
  optim::StepLR sched(opt, 1, 0.1);
  sched.step();
  CHECK(opt.lr(0) == doctest::Approx(0.05));
  CHECK(opt.lr(1) == doctest::Approx(0.05));  // not 1e-4 from SGDOptions' default lr
  CHECK(opt.get(1, "momentum") == 0.9);
}
