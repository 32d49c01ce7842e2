// train/nas.cpp: the search space, arch building, regularized evolution and REINFORCE of
// train/nas.h.
#include "train/nas.h"

#include <algorithm>
#include <numeric>

#include "engine/error.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "optim/adam.h"

namespace brisk::nas {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::SiLU: return "silu";
  }
  return "?";
}

namespace {

size_t uniform_index(std::mt19937_64& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

template <class T>
size_t index_of(const std::vector<T>& v, const T& x) {
  return size_t(std::find(v.begin(), v.end(), x) - v.begin());
}

// One conv layer with its activation and optional skip.
class Block : public nn::Module {
 public:
  Block(int64_t in, const Layer& l) : Module("NasBlock"), act_(l.activation) {
    conv_ = register_module(
        "conv",
        std::make_shared<nn::Conv2d>(in, l.width, l.kernel, nn::ConvOptions{.padding = {l.kernel / 2, l.kernel / 2}}));
    skip_ = l.skip;
    if (l.skip && in != l.width) proj_ = register_module("proj", std::make_shared<nn::Conv2d>(in, l.width, 1));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*conv_)(x);
    h = act_ == Activation::ReLU ? relu(h) : act_ == Activation::GELU ? gelu(h) : silu(h);
    if (skip_) h = h + (proj_ ? (*proj_)(x) : x);
    return h;
  }

 private:
  Activation act_;
  bool skip_ = false;
  std::shared_ptr<nn::Module> conv_, proj_;
};

}  // namespace

std::string Arch::str() const {
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    if (i) s += "-";
    s += std::to_string(l.width) + "k" + std::to_string(l.kernel) + activation_name(l.activation);
    if (l.skip) s += "+s";
  }
  return s;
}

std::shared_ptr<nn::Module> Arch::build(int64_t in_channels, int64_t classes) const {
  BRISK_CHECK(!layers.empty(), "nas::Arch::build: no layers");
  auto net = std::make_shared<nn::Sequential>();
  int64_t c = in_channels;
  for (size_t i = 0; i < layers.size(); ++i) {
    BRISK_CHECK(layers[i].width > 0 && layers[i].kernel > 0 && layers[i].kernel % 2 == 1, "nas::Arch::build: layer ", i,
                " needs a positive width and an odd kernel");
    net->push_back(std::make_shared<Block>(c, layers[i]));
    c = layers[i].width;
    if (i < 2) net->push_back(std::make_shared<nn::MaxPool2d>(2));
  }
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(c, classes));
  return net;
}

void SearchSpace::validate() const {
  BRISK_CHECK(!widths.empty() && !kernels.empty() && !activations.empty(),
              "nas::SearchSpace: widths, kernels and activations need at least one option each");
  BRISK_CHECK(min_layers >= 1 && max_layers >= min_layers, "nas::SearchSpace: need 1 <= min_layers <= max_layers, got ",
              min_layers, " and ", max_layers);
}

size_t SearchSpace::num_options(size_t d) const {
  BRISK_CHECK(d < num_decisions(), "nas::SearchSpace::num_options: decision ", d, " out of range");
  if (d == 0) return size_t(max_layers - min_layers + 1);
  switch ((d - 1) % 4) {
    case 0: return widths.size();
    case 1: return kernels.size();
    case 2: return activations.size();
    default: return 2;
  }
}

Arch SearchSpace::sample(std::mt19937_64& rng) const {
  validate();
  Arch a;
  const size_t depth = size_t(min_layers) + uniform_index(rng, size_t(max_layers - min_layers + 1));
  for (size_t i = 0; i < depth; ++i) {
    Layer l;
    l.width = widths[uniform_index(rng, widths.size())];
    l.kernel = kernels[uniform_index(rng, kernels.size())];
    l.activation = activations[uniform_index(rng, activations.size())];
    l.skip = uniform_index(rng, 2) == 1;
    a.layers.push_back(l);
  }
  return a;
}

bool SearchSpace::contains(const Arch& a) const {
  if (int64_t(a.layers.size()) < min_layers || int64_t(a.layers.size()) > max_layers) return false;
  for (const Layer& l : a.layers)
    if (index_of(widths, l.width) == widths.size() || index_of(kernels, l.kernel) == kernels.size() ||
        index_of(activations, l.activation) == activations.size())
      return false;
  return true;
}

Arch Arch::mutate(const SearchSpace& space, std::mt19937_64& rng) const {
  space.validate();
  BRISK_CHECK(space.contains(*this), "nas::Arch::mutate: ", str(), " is outside the search space");
  // The decisions that have another value to take.
  std::vector<size_t> open;
  if (space.max_layers > space.min_layers) open.push_back(0);
  for (size_t i = 0; i < layers.size(); ++i)
    for (size_t k = 0; k < 4; ++k)
      if (space.num_options(1 + 4 * i + k) > 1) open.push_back(1 + 4 * i + k);
  BRISK_CHECK(!open.empty(), "nas::Arch::mutate: the search space has a single architecture");
  Arch child = *this;
  const size_t d = open[uniform_index(rng, open.size())];
  if (d == 0) {
    const bool can_grow =
        int64_t(layers.size())<space.max_layers, can_shrink = int64_t(layers.size())> space.min_layers;
    const bool grow = can_grow && (!can_shrink || uniform_index(rng, 2) == 0);
    if (grow)
      child.layers.push_back(layers.back());
    else
      child.layers.pop_back();
    return child;
  }
  Layer& l = child.layers[(d - 1) / 4];
  auto other = [&](size_t current, size_t n) {  // uniform over the n - 1 other options
    const size_t j = uniform_index(rng, n - 1);
    return j >= current ? j + 1 : j;
  };
  switch ((d - 1) % 4) {
    case 0: l.width = space.widths[other(index_of(space.widths, l.width), space.widths.size())]; break;
    case 1: l.kernel = space.kernels[other(index_of(space.kernels, l.kernel), space.kernels.size())]; break;
    case 2:
      l.activation = space.activations[other(index_of(space.activations, l.activation), space.activations.size())];
      break;
    default: l.skip = !l.skip;
  }
  return child;
}

namespace {

size_t argbest(const std::vector<Trial>& h) {
  size_t b = 0;
  for (size_t i = 1; i < h.size(); ++i)
    if (h[i].result.accuracy > h[b].result.accuracy) b = i;
  return b;
}

}  // namespace

SearchResult regularized_evolution(const SearchSpace& space, const EvaluateFn& evaluate, const EvolutionOptions& o) {
  space.validate();
  BRISK_CHECK(bool(evaluate), "nas::regularized_evolution: no evaluate function");
  BRISK_CHECK(o.population >= 2, "nas::regularized_evolution: population must be >= 2, got ", o.population);
  BRISK_CHECK(o.sample_size >= 1 && o.sample_size <= o.population,
              "nas::regularized_evolution: sample_size must be in [1, population], got ", o.sample_size);
  BRISK_CHECK(o.cycles >= 0, "nas::regularized_evolution: cycles must be >= 0, got ", o.cycles);
  std::mt19937_64 rng(o.seed);
  SearchResult r;
  auto run = [&](Arch a) {
    Trial t;
    t.arch = std::move(a);
    t.seed = o.seed * 1000003ull + r.history.size();
    t.result = evaluate(t.arch, t.seed);
    r.history.push_back(std::move(t));
    r.population.push_back(r.history.size() - 1);
  };
  for (int64_t i = 0; i < o.population; ++i) run(space.sample(rng));
  std::vector<size_t> slots(size_t(o.population));
  for (int64_t c = 0; c < o.cycles; ++c) {
    std::iota(slots.begin(), slots.end(), size_t(0));
    // The first sample_size of a partial Fisher-Yates shuffle: a sample without replacement.
    for (size_t i = 0; i < size_t(o.sample_size); ++i)
      std::swap(slots[i], slots[i + uniform_index(rng, slots.size() - i)]);
    size_t parent = r.population[slots[0]];
    for (size_t i = 1; i < size_t(o.sample_size); ++i) {
      const size_t h = r.population[slots[i]];
      if (r.history[h].result.accuracy > r.history[parent].result.accuracy) parent = h;
    }
    run(r.history[parent].arch.mutate(space, rng));
    r.population.erase(r.population.begin());  // aging: the oldest dies
  }
  r.best = argbest(r.history);
  return r;
}

SearchResult reinforce_search(const SearchSpace& space, const EvaluateFn& evaluate, const ReinforceOptions& o) {
  space.validate();
  BRISK_CHECK(bool(evaluate), "nas::reinforce_search: no evaluate function");
  BRISK_CHECK(o.trials >= 1, "nas::reinforce_search: trials must be >= 1, got ", o.trials);
  BRISK_CHECK(o.lr > 0, "nas::reinforce_search: lr must be > 0, got ", o.lr);
  BRISK_CHECK(o.baseline_decay >= 0 && o.baseline_decay < 1,
              "nas::reinforce_search: baseline_decay must be in [0, 1), got ", o.baseline_decay);
  BRISK_CHECK(o.entropy_weight >= 0, "nas::reinforce_search: entropy_weight must be >= 0");
  std::mt19937_64 rng(o.seed);
  const size_t nd = space.num_decisions();
  std::vector<Tensor> logits;
  for (size_t d = 0; d < nd; ++d) {
    Tensor t = zeros({int64_t(space.num_options(d))});
    t.requires_grad_(true);
    logits.push_back(t);
  }
  optim::Adam opt(logits, {.lr = o.lr});
  auto probs_of = [&](size_t d) {
    NoGradGuard ng;
    return softmax(logits[d], 0).to_vector<double>();
  };
  SearchResult r;
  double baseline = 0;
  for (int64_t t = 0; t < o.trials; ++t) {
    // Sample: the depth, then the decisions of the active layers.
    std::vector<std::pair<size_t, size_t>> chosen;  // (decision, option)
    auto draw = [&](size_t d) {
      const std::vector<double> p = probs_of(d);
      const size_t k = std::discrete_distribution<size_t>(p.begin(), p.end())(rng);
      chosen.emplace_back(d, k);
      return k;
    };
    Arch a;
    const size_t depth = size_t(space.min_layers) + draw(0);
    for (size_t i = 0; i < depth; ++i) {
      Layer l;
      l.width = space.widths[draw(1 + 4 * i)];
      l.kernel = space.kernels[draw(2 + 4 * i)];
      l.activation = space.activations[draw(3 + 4 * i)];
      l.skip = draw(4 + 4 * i) == 1;
      a.layers.push_back(l);
    }
    Trial tr;
    tr.arch = std::move(a);
    tr.seed = o.seed * 1000003ull + size_t(t);
    tr.result = evaluate(tr.arch, tr.seed);
    const double reward = tr.result.accuracy;
    r.history.push_back(std::move(tr));
    if (t == 0) baseline = reward;
    const double advantage = reward - baseline;
    Tensor logp = zeros({}), entropy = zeros({});
    for (auto [d, k] : chosen) {
      Tensor ls = log_softmax(logits[d], 0);
      logp = logp + index_select(ls, 0, from_vector({double(k)}, {1}, DType::I64)).sum();
      entropy = entropy - (exp(ls) * ls).sum();
    }
    Tensor loss = logp * (-advantage) - entropy * o.entropy_weight;
    opt.zero_grad();
    loss.backward();
    opt.step();
    baseline = o.baseline_decay * baseline + (1 - o.baseline_decay) * reward;
  }
  for (size_t d = 0; d < nd; ++d) r.probabilities.push_back(probs_of(d));
  r.best = argbest(r.history);
  return r;
}

}  // namespace brisk::nas
