// search/nas.cpp: the search space, arch building, regularized evolution and REINFORCE of
// search/nas.h.
#include "search/nas.h"

#include <algorithm>
#include <numeric>

#include "engine/error.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/random.h"
#include "nn/layers.h"
#include "nn/recurrent.h"
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

namespace {

// The REINFORCE policy: per decision, logits for its options. Logits: one free vector per
// decision. LSTM (Zoph and Le 2017): one LSTMCell step per decision, fed the embedding of the
// previous choice (a learned start token first), a Linear head per decision on the hidden state.
class Controller {
 public:
  Controller(const SearchSpace& space, const ReinforceOptions& o) : kind_(o.controller) {
    const size_t nd = space.num_decisions();
    if (kind_ == ReinforceOptions::Controller::Logits) {
      for (size_t d = 0; d < nd; ++d) {
        Tensor t = zeros({int64_t(space.num_options(d))});
        t.requires_grad_(true);
        params_.push_back(t);
      }
      return;
    }
    BRISK_CHECK(o.hidden >= 1, "nas::reinforce_search: hidden must be >= 1, got ", o.hidden);
    // The module initialisers draw from the default generator: seed it for the build, then put
    // the caller's stream back.
    Generator& g = default_generator();
    const uint64_t seed = g.seed(), offset = g.offset();
    g.manual_seed(o.seed ^ 0x6e61735f6c73746dull);
    int64_t tokens = 0;
    for (size_t d = 0; d < nd; ++d) {
      offset_.push_back(tokens);
      tokens += int64_t(space.num_options(d));
      heads_.push_back(std::make_shared<nn::Linear>(o.hidden, int64_t(space.num_options(d))));
    }
    start_ = tokens;
    embed_ = std::make_shared<nn::Embedding>(tokens + 1, o.hidden);
    cell_ = std::make_shared<nn::LSTMCell>(o.hidden, o.hidden);
    g.manual_seed(seed);
    g.set_offset(offset);
    for (auto* m : std::initializer_list<nn::Module*>{embed_.get(), cell_.get()})
      for (const Tensor& t : m->parameters()) params_.push_back(t);
    for (const auto& h : heads_)
      for (const Tensor& t : h->parameters()) params_.push_back(t);
  }
  const std::vector<Tensor>& parameters() const { return params_; }
  void begin() {
    state_ = {};
    token_ = start_;
  }
  Tensor logits(size_t d) {
    if (kind_ == ReinforceOptions::Controller::Logits) return params_[d];
    Tensor x = (*embed_)(from_vector({double(token_)}, {1}, DType::I64));  // (1, hidden)
    state_ = cell_->forward(x, state_);
    return (*heads_[d])(state_.h).reshape({-1});
  }
  void feed(size_t d, size_t k) {
    if (kind_ == ReinforceOptions::Controller::LSTM) token_ = offset_[d] + int64_t(k);
  }

 private:
  ReinforceOptions::Controller kind_;
  std::vector<Tensor> params_{};
  std::vector<int64_t> offset_{};  // LSTM: decision d's first token
  int64_t start_ = 0, token_ = 0;
  std::shared_ptr<nn::Embedding> embed_{};
  std::shared_ptr<nn::LSTMCell> cell_{};
  std::vector<std::shared_ptr<nn::Linear>> heads_{};
  nn::LSTMState state_{};
};

struct Rollout {
  Arch arch{};
  Tensor logp{}, entropy{};                  // sums over the visited decisions (autograd)
  std::vector<std::vector<double>> probs{};  // per decision, the distribution it was drawn from
};

// Walks the decisions in order (the depth, then each layer's width, kernel, activation, skip),
// `choose` picking an option from each distribution. With all_layers every max_layers layer is
// visited (to report the policy) while the arch keeps only the chosen depth.
template <class Choose>
Rollout rollout(Controller& c, const SearchSpace& space, bool all_layers, Choose&& choose) {
  Rollout r;
  r.logp = zeros({});
  r.entropy = zeros({});
  r.probs.resize(space.num_decisions());
  c.begin();
  auto decide = [&](size_t d) {
    Tensor ls = log_softmax(c.logits(d), 0);
    Tensor p = exp(ls);
    r.probs[d] = p.to_vector<double>();
    const size_t k = choose(r.probs[d]);
    r.logp = r.logp + index_select(ls, 0, from_vector({double(k)}, {1}, DType::I64)).sum();
    r.entropy = r.entropy - (p * ls).sum();
    c.feed(d, k);
    return k;
  };
  const size_t depth = size_t(space.min_layers) + decide(0);
  const size_t visit = all_layers ? size_t(space.max_layers) : depth;
  for (size_t i = 0; i < visit; ++i) {
    Layer l;
    l.width = space.widths[decide(1 + 4 * i)];
    l.kernel = space.kernels[decide(2 + 4 * i)];
    l.activation = space.activations[decide(3 + 4 * i)];
    l.skip = decide(4 + 4 * i) == 1;
    if (i < depth) r.arch.layers.push_back(l);
  }
  return r;
}

size_t argmax_index(const std::vector<double>& p) { return size_t(std::max_element(p.begin(), p.end()) - p.begin()); }

}  // namespace

SearchResult reinforce_search(const SearchSpace& space, const EvaluateFn& evaluate, const ReinforceOptions& o) {
  space.validate();
  BRISK_CHECK(bool(evaluate), "nas::reinforce_search: no evaluate function");
  BRISK_CHECK(o.trials >= 1, "nas::reinforce_search: trials must be >= 1, got ", o.trials);
  BRISK_CHECK(o.lr > 0, "nas::reinforce_search: lr must be > 0, got ", o.lr);
  BRISK_CHECK(o.baseline_decay >= 0 && o.baseline_decay < 1,
              "nas::reinforce_search: baseline_decay must be in [0, 1), got ", o.baseline_decay);
  BRISK_CHECK(o.entropy_weight >= 0, "nas::reinforce_search: entropy_weight must be >= 0");
  std::mt19937_64 rng(o.seed);
  Controller controller(space, o);
  optim::Adam opt(controller.parameters(), {.lr = o.lr});
  auto sample = [&](const std::vector<double>& p) {
    return std::discrete_distribution<size_t>(p.begin(), p.end())(rng);
  };
  SearchResult r;
  double baseline = 0;
  for (int64_t t = 0; t < o.trials; ++t) {
    Rollout ro = rollout(controller, space, false, sample);
    Trial tr;
    tr.arch = std::move(ro.arch);
    tr.seed = o.seed * 1000003ull + size_t(t);
    tr.result = evaluate(tr.arch, tr.seed);
    const double reward = tr.result.accuracy;
    r.history.push_back(std::move(tr));
    if (t == 0) baseline = reward;
    const double advantage = reward - baseline;
    Tensor loss = ro.logp * (-advantage) - ro.entropy * o.entropy_weight;
    opt.zero_grad();
    loss.backward();
    opt.step();
    baseline = o.baseline_decay * baseline + (1 - o.baseline_decay) * reward;
  }
  {
    NoGradGuard ng;
    Rollout greedy = rollout(controller, space, true, argmax_index);
    r.probabilities = std::move(greedy.probs);
    r.greedy = std::move(greedy.arch);
  }
  r.best = argbest(r.history);
  return r;
}

}  // namespace brisk::nas
