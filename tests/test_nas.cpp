// tests/test_nas.cpp: brisk::nas (search/nas.h): sampling, mutation, build, regularized evolution
// and REINFORCE on synthetic objectives.
#include <doctest/doctest.h>

#include <set>

#include "brisk.h"
#include "search/nas.h"

using namespace brisk;

namespace {

// Reward: matching decisions against a hidden target (depth, then per layer the four choices).
double match_score(const nas::Arch& a, const nas::Arch& target) {
  double s = a.layers.size() == target.layers.size() ? 1 : 0;
  for (size_t i = 0; i < std::min(a.layers.size(), target.layers.size()); ++i) {
    const nas::Layer &x = a.layers[i], &y = target.layers[i];
    s += (x.width == y.width) + (x.kernel == y.kernel) + (x.activation == y.activation) + (x.skip == y.skip);
  }
  return s;
}

size_t decisions_changed(const nas::Arch& a, const nas::Arch& b) {
  size_t n = a.layers.size() != b.layers.size();
  for (size_t i = 0; i < std::min(a.layers.size(), b.layers.size()); ++i) {
    const nas::Layer &x = a.layers[i], &y = b.layers[i];
    n += (x.width != y.width) + (x.kernel != y.kernel) + (x.activation != y.activation) + (x.skip != y.skip);
  }
  return n;
}

}  // namespace

TEST_CASE("nas: sampling stays in the space and reproduces from the seed") {
  nas::SearchSpace space;
  std::mt19937_64 a(7), b(7), c(8);
  std::set<size_t> depths;
  bool differs = false;
  for (int i = 0; i < 200; ++i) {
    const nas::Arch x = space.sample(a), y = space.sample(b), z = space.sample(c);
    CHECK(space.contains(x));
    CHECK(x == y);
    differs |= !(x == z);
    depths.insert(x.layers.size());
  }
  CHECK(differs);
  CHECK(depths == std::set<size_t>{1, 2, 3, 4});
  nas::SearchSpace bad;
  bad.min_layers = 3;
  bad.max_layers = 2;
  CHECK_THROWS_AS(bad.validate(), Error);
}

TEST_CASE("nas: mutate changes exactly one decision") {
  nas::SearchSpace space;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 300; ++i) {
    const nas::Arch a = space.sample(rng), m = a.mutate(space, rng);
    CHECK(space.contains(m));
    CHECK(decisions_changed(a, m) == 1);
  }
}

TEST_CASE("nas: build gives (2, 10) logits for sampled archs, skips included") {
  nas::SearchSpace space;
  space.widths = {4, 8};
  std::mt19937_64 rng(3);
  const Tensor x = randn({2, 1, 28, 28});
  int with_skip = 0, with_proj = 0;
  for (int i = 0; i < 8; ++i) {
    nas::Arch a = space.sample(rng);
    if (i == 0)
      a.layers = {{4, 3, nas::Activation::GELU, true},
                  {4, 5, nas::Activation::SiLU, true}};  // 1->4 proj, 4->4 identity
    for (size_t j = 0; j < a.layers.size(); ++j)
      if (a.layers[j].skip) {
        ++with_skip;
        with_proj += (j == 0 ? 1 : a.layers[j - 1].width) != a.layers[j].width;
      }
    auto m = a.build(1, 10);
    const Tensor y = (*m)(x);
    CHECK(y.shape() == Shape{2, 10});
    CHECK(std::isfinite(y.sum().item<double>()));
  }
  CHECK(with_skip > 0);
  CHECK(with_proj > 0);
}

TEST_CASE("nas: regularized evolution beats random sampling on a synthetic objective") {
  nas::SearchSpace space;
  nas::Arch target;
  target.layers = {
      {32, 5, nas::Activation::SiLU, true}, {8, 3, nas::Activation::GELU, false}, {16, 5, nas::Activation::ReLU, true}};
  const double best_possible = 1 + 4 * 3;
  auto eval = [&](const nas::Arch& a, uint64_t) { return nas::EvalResult{match_score(a, target), 0, 0}; };
  double evo = 0, rnd = 0;
  const int seeds = 10;
  for (int s = 0; s < seeds; ++s) {
    const nas::SearchResult r = nas::regularized_evolution(
        space, eval, {.population = 20, .sample_size = 5, .cycles = 280, .seed = uint64_t(s)});
    CHECK(r.history.size() == 300);
    evo += r.best_trial().result.accuracy;
    std::mt19937_64 rng(1000 + s);
    double best = 0;
    for (int i = 0; i < 300; ++i) best = std::max(best, match_score(space.sample(rng), target));
    rnd += best;
  }
  evo /= seeds;
  rnd /= seeds;
  MESSAGE("evolution mean best ", evo, ", random mean best ", rnd, " of ", best_possible);
  CHECK(evo >= best_possible - 1);
  CHECK(evo > rnd + 2);
  // Reproducible from the seed.
  const auto a = nas::regularized_evolution(space, eval, {.population = 5, .sample_size = 2, .cycles = 10, .seed = 4});
  const auto b = nas::regularized_evolution(space, eval, {.population = 5, .sample_size = 2, .cycles = 10, .seed = 4});
  for (size_t i = 0; i < a.history.size(); ++i) CHECK(a.history[i].arch == b.history[i].arch);
}

TEST_CASE("nas: aging removes the oldest member, not the worst") {
  nas::SearchSpace space;
  int64_t calls = 0;
  // Fitness rises with evaluation order, so the oldest is also the worst: still check it is
  // removed by age with a reversed objective too.
  for (int sign : {1, -1}) {
    calls = 0;
    auto eval = [&](const nas::Arch&, uint64_t) { return nas::EvalResult{double(sign * calls++), 0, 0}; };
    const auto r = nas::regularized_evolution(space, eval, {.population = 6, .sample_size = 2, .cycles = 9, .seed = 1});
    REQUIRE(r.history.size() == 15);
    REQUIRE(r.population.size() == 6);
    for (size_t i = 0; i < 6; ++i) CHECK(r.population[i] == 9 + i);  // the 6 youngest, oldest first
    CHECK(r.best == (sign > 0 ? 14u : 0u));
  }
  auto eval = [](const nas::Arch&, uint64_t) { return nas::EvalResult{}; };
  CHECK_THROWS_AS(nas::regularized_evolution(space, eval, {.population = 1}), Error);
  CHECK_THROWS_AS(nas::regularized_evolution(space, eval, {.population = 4, .sample_size = 5}), Error);
  CHECK_THROWS_AS(nas::reinforce_search(space, eval, {.trials = 0}), Error);
}

TEST_CASE("nas: REINFORCE raises the probability of the rewarded choices") {
  nas::SearchSpace space;
  // Reward 1 for kernel 5 in the first layer and depth 2, else 0 (each part 0.5).
  auto eval = [](const nas::Arch& a, uint64_t) {
    return nas::EvalResult{0.5 * (a.layers[0].kernel == 5) + 0.5 * (a.layers.size() == 2), 0, 0};
  };
  using C = nas::ReinforceOptions::Controller;
  for (C controller : {C::Logits, C::LSTM}) {
    CAPTURE(int(controller));
    const nas::ReinforceOptions o{.trials = 150,
                                  .lr = controller == C::Logits ? 0.1 : 0.02,
                                  .baseline_decay = 0.8,
                                  .entropy_weight = 0,
                                  .seed = 2,
                                  .controller = controller};
    const uint64_t offset_before = default_generator().offset();
    const auto r = nas::reinforce_search(space, eval, o);
    CHECK(default_generator().offset() == offset_before);  // the controller's init left the stream alone
    REQUIRE(r.probabilities.size() == space.num_decisions());
    MESSAGE("p(kernel 5 in layer 0) = ", r.probabilities[2][1], ", p(depth 2) = ", r.probabilities[0][1]);
    CHECK(r.probabilities[2][1] > 0.8);
    CHECK(r.probabilities[0][1] > 0.8);
    REQUIRE(r.greedy.layers.size() == 2);
    CHECK(r.greedy.layers[0].kernel == 5);
    // The last 30 sampled archs mostly earn the full reward.
    double late = 0;
    for (size_t i = r.history.size() - 30; i < r.history.size(); ++i) late += r.history[i].result.accuracy;
    CHECK(late / 30 > 0.8);
    const auto again = nas::reinforce_search(space, eval, o);
    CHECK(again.probabilities == r.probabilities);
    for (size_t i = 0; i < r.history.size(); ++i) CHECK(again.history[i].arch == r.history[i].arch);
  }
}

TEST_CASE("nas: the LSTM controller learns a reward that couples two decisions") {
  // Reward 1 when layer 1's width equals layer 0's (depth fixed at 2): the controller must
  // learn the pair, layer 1 sampled after it has seen layer 0's choice.
  nas::SearchSpace space;
  space.min_layers = space.max_layers = 2;
  auto eval = [](const nas::Arch& a, uint64_t) {
    return nas::EvalResult{double(a.layers[0].width == a.layers[1].width), 0, 0};
  };
  for (uint64_t seed : {1, 2, 3}) {
    const auto r = nas::reinforce_search(space, eval, {.trials = 200, .lr = 0.02, .baseline_decay = 0.8, .seed = seed});
    double early = 0, late = 0;
    for (size_t i = 0; i < 50; ++i) early += r.history[i].result.accuracy;
    for (size_t i = r.history.size() - 50; i < r.history.size(); ++i) late += r.history[i].result.accuracy;
    MESSAGE("seed ", seed, ": mean reward of the first 50 trials ", early / 50, ", of the last 50 ", late / 50);
    CHECK(late / 50 > 0.9);
    CHECK(late > early);
    REQUIRE(r.greedy.layers.size() == 2);
    CHECK(r.greedy.layers[0].width == r.greedy.layers[1].width);
  }
  CHECK_THROWS_AS(nas::reinforce_search(space, eval, {.trials = 1, .hidden = 0}), Error);
}
