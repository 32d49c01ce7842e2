// search/nas.h: a small architecture search (brisk::nas, issue 19 item 3). A cell space of 1-4
// conv layers, each with a width, a kernel size (3 or 5), an activation (relu, gelu, silu) and a
// skip connection; two searches over it: regularized evolution (Real et al. 2019, aging: the
// oldest member dies each cycle) and a REINFORCE controller, an LSTM policy (Zoph and Le 2017)
// or one vector of logits per decision, trained with brisk autograd and Adam on
// -(reward - baseline) * sum(log_prob) - entropy_weight * entropy, baseline an exponential
// moving average of the reward. Both draw from a seeded std::mt19937_64, so a search reproduces
// from its seed (given a deterministic evaluate_fn).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nn/module.h"

namespace brisk::nas {

enum class Activation { ReLU, GELU, SiLU };
const char* activation_name(Activation a);

struct Layer {
  int64_t width = 16;
  int64_t kernel = 3;
  Activation activation = Activation::ReLU;
  bool skip = false;
  bool operator==(const Layer&) const = default;
};

struct SearchSpace;

// One architecture: the layers in order. Decisions (the unit of mutate and of the controller):
// the depth, then per layer its width, kernel, activation and skip.
struct Arch {
  std::vector<Layer> layers{};
  // "16k3relu-32k5gelu+s": per layer width, kernel, activation, "+s" for a skip.
  std::string str() const;
  // A copy with exactly one decision changed to a different value: the depth (growing appends a
  // copy of the last layer, shrinking drops it) or one active layer's width, kernel, activation
  // or skip.
  Arch mutate(const SearchSpace& space, std::mt19937_64& rng) const;
  // A CNN for (N, in_channels, 28, 28) images: per layer conv (padding k/2) then activation; a
  // skip adds the layer's input (a 1x1 conv when the widths differ). 2x2 max pooling after the
  // first two layers, then global average pooling and a Linear to `classes` logits.
  std::shared_ptr<nn::Module> build(int64_t in_channels, int64_t classes) const;
  bool operator==(const Arch&) const = default;
};

struct SearchSpace {
  std::vector<int64_t> widths = {8, 16, 32};
  std::vector<int64_t> kernels = {3, 5};
  std::vector<Activation> activations = {Activation::ReLU, Activation::GELU, Activation::SiLU};
  int64_t min_layers = 1, max_layers = 4;
  void validate() const;                    // brisk::Error when a list is empty or the depths are bad
  Arch sample(std::mt19937_64& rng) const;  // every decision uniform
  bool contains(const Arch& a) const;
  // Number of decisions and each one's options: [0] depth, then 1 + 4 * i + {0 width, 1 kernel,
  // 2 activation, 3 skip} for layer i < max_layers.
  size_t num_decisions() const { return size_t(1 + 4 * max_layers); }
  size_t num_options(size_t decision) const;
};

struct EvalResult {
  double accuracy = 0;  // the fitness / reward, higher is better
  int64_t params = 0;
  double latency_ms = 0;
};
using EvaluateFn = std::function<EvalResult(const Arch&, uint64_t seed)>;

struct Trial {
  Arch arch{};
  EvalResult result{};
  uint64_t seed = 0;  // the seed evaluate_fn got
};

struct SearchResult {
  std::vector<Trial> history{};      // every evaluation, in order
  size_t best = 0;                   // index into history of the highest accuracy (first on ties)
  std::vector<size_t> population{};  // evolution: the final population as history indices, oldest first
  // reinforce: the final policy along its greedy rollout (argmax at every decision, all
  // max_layers layers visited), one distribution per decision; for the Logits controller these
  // are the decisions' independent distributions.
  std::vector<std::vector<double>> probabilities{};
  Arch greedy{};  // reinforce: the argmax arch of the final policy
  const Trial& best_trial() const { return history.at(best); }
};

struct EvolutionOptions {
  int64_t population = 10;
  int64_t sample_size = 3;
  int64_t cycles = 20;  // evaluations after the initial population; total = population + cycles
  uint64_t seed = 0;
};
// Regularized evolution: a random initial population; each cycle samples sample_size members
// (without replacement), mutates the best of them, evaluates and appends the child, and removes
// the oldest member.
SearchResult regularized_evolution(const SearchSpace& space, const EvaluateFn& evaluate,
                                   const EvolutionOptions& options = {});

struct ReinforceOptions {
  // LSTM: one LSTMCell step per decision fed the embedding of the previous choice, a Linear
  // head per decision, so later decisions depend on earlier ones. Logits: independent
  // per-decision logits (initialised to zero, the uniform policy).
  enum class Controller { LSTM, Logits };
  int64_t trials = 20;
  double lr = 0.1;              // Adam on the controller's parameters
  double baseline_decay = 0.8;  // b <- decay * b + (1 - decay) * reward (b starts at the first reward)
  double entropy_weight = 0.0;
  uint64_t seed = 0;  // sampling, and the LSTM's initial weights (the default generator is left as it was)
  Controller controller = Controller::LSTM;
  int64_t hidden = 32;  // LSTM: embedding and hidden size
};
// REINFORCE: per trial sample an arch from the policy, evaluate it, one Adam step on
// -(reward - baseline) * sum(log_prob of the active decisions) - entropy_weight * entropy.
SearchResult reinforce_search(const SearchSpace& space, const EvaluateFn& evaluate,
                              const ReinforceOptions& options = {});

}  // namespace brisk::nas
