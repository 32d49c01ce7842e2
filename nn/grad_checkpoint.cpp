// nn/grad_checkpoint.cpp: CheckpointBackward and checkpoint_sequential (nn/grad_checkpoint.h,
// Note [Gradient checkpointing]).
#include "nn/grad_checkpoint.h"

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/grad_mode.h"
#include "engine/random.h"

namespace brisk {

namespace {

class CheckpointBackward : public Node {
 public:
  CheckpointFn fn;
  std::vector<Tensor> inputs;  // as given (kept alive; their versions are checked)
  std::vector<uint32_t> versions;
  uint64_t seed = 0, offset = 0;
  AutocastState autocast{};
  bool released = false;

  std::string name() const override { return "checkpoint"; }
  void release() override {
    inputs.clear();
    released = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    BRISK_CHECK(!released,
                "checkpoint: backward through the graph a second time (its inputs were freed); pass "
                "retain_graph=true to the first backward");
    BRISK_CHECK(!GradMode::enabled(),
                "checkpoint: create_graph (double backward) through a checkpointed segment is not supported");
    for (size_t i = 0; i < inputs.size(); ++i) {
      BRISK_CHECK(inputs[i].version() == versions[i], "checkpoint: input ", i,
                  " was modified in place after the forward pass; the segment cannot be recomputed");
    }
    std::vector<Tensor> detached(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      detached[i] = inputs[i].detach();
      if (inputs[i].requires_grad()) detached[i].requires_grad_(true);
    }
    Generator& gen = default_generator();
    const uint64_t seed_now = gen.seed(), offset_now = gen.offset();
    AutocastState& ac = autocast_state();
    const AutocastState ac_now = ac;
    std::vector<Tensor> outs;
    try {
      gen.manual_seed(seed);
      gen.set_offset(offset);
      for (int d = 0; d < kNumDeviceTypes; ++d) {
        ac.enabled[d] = autocast.enabled[d];
        ac.dtype[d] = autocast.dtype[d];
      }
      GradModeGuard on(true);
      outs = fn(detached);
    } catch (...) {
      gen.manual_seed(seed_now);
      gen.set_offset(offset_now);
      ac = ac_now;
      throw;
    }
    gen.manual_seed(seed_now);
    gen.set_offset(offset_now);
    ac = ac_now;
    BRISK_CHECK(outs.size() == grads.size(), "checkpoint: the recomputation returned ", outs.size(),
                " outputs, the forward pass ", grads.size());
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (grads[i].defined() && outs[i].defined() && outs[i].requires_grad()) {
        roots.push_back(outs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) backward(roots, root_grads);
    std::vector<Tensor> result(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (detached[i].requires_grad()) result[i] = detached[i].grad();
    }
    return result;
  }
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  BRISK_CHECK(fn, "checkpoint: no function");
  for (size_t i = 0; i < inputs.size(); ++i) BRISK_CHECK(inputs[i].defined(), "checkpoint: input ", i, " is undefined");
  if (!GradMode::enabled()) return fn(inputs);  // nothing to save memory on

  auto node = std::make_shared<CheckpointBackward>();
  node->fn = fn;
  node->inputs = inputs;
  node->seed = default_generator().seed();
  node->offset = default_generator().offset();
  node->autocast = autocast_state();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    BRISK_CHECK(outs[i].defined(), "checkpoint: output ", i, " is undefined");
    for (const Tensor& in : inputs) {
      // An input returned as is would get the checkpoint as its history: return a copy.
      if (outs[i].impl() == in.impl()) outs[i] = outs[i].clone();
    }
  }
  node->device = inputs.empty() ? (outs.empty() ? Device::cpu() : outs[0].device()) : inputs[0].device();
  node->versions.resize(inputs.size());
  node->next_edges.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->versions[i] = inputs[i].version();
    if (inputs[i].requires_grad()) node->next_edges[i] = gradient_edge(inputs[i]);
  }
  node->slot_specs.resize(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) node->slot_specs[i] = {outs[i].sizes(), outs[i].dtype()};
  set_history(outs, node);
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  BRISK_CHECK(fn, "checkpoint: no function");
  auto outs = checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, {input});
  return outs[0];
}

}  // namespace brisk

namespace brisk::nn {

Tensor checkpoint_sequential(const Sequential& seq, int64_t every, const Tensor& input) {
  BRISK_CHECK(every >= 1, "checkpoint_sequential: every must be >= 1, got ", every);
  const int64_t n = int64_t(seq.size());
  Tensor x = input;
  int64_t start = 0;
  for (; start + every < n; start += every) {
    x = checkpoint(
        [&seq, start, every](const Tensor& in) {
          Tensor h = in;
          for (int64_t i = start; i < start + every; ++i) h = (*seq[size_t(i)])(h);
          return h;
        },
        x);
  }
  for (int64_t i = start; i < n; ++i) x = (*seq[size_t(i)])(x);
  return x;
}

}  // namespace brisk::nn
