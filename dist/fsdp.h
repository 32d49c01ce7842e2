// dist/fsdp.h: FullyShardedDataParallel (ZeRO-3, PyTorch's FSDP with flat parameters): the
// model is cut into units (listed submodules; what no unit holds is the root unit); each rank
// keeps only a flat 1/N shard of every unit's parameters, gradients and optimizer state. A
// unit's full parameters are all-gathered just before its forward and again before its
// backward and freed after each (the next unit's gather is started early: prefetch); its
// gradients are reduce-scattered (averaged) into the shard's gradient as soon as backward has
// produced them all. Any brisk optimizer steps the shards (the wrapper's parameters). Sharded
// checkpoints load at another world size. Not here: data-parallel replicas (dist/ddp.h),
// sharding the optimizer state alone (ZeRO-1/2, dist/zero.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace brisk::dist {

struct FSDPOptions {
  // Dotted paths of the submodules that are units ("body.0", "blocks.3"); none nested in
  // another. Empty: every direct child of the module that holds a trainable parameter.
  std::vector<std::string> units{};
  // Start the all-gather of the next unit (the order of the last forward; reversed in
  // backward) while this one computes.
  bool prefetch = true;
};

// Bytes this rank holds now (see memory()).
struct FSDPMemory {
  int64_t shard_params = 0;     // the flat shards of every unit
  int64_t shard_grads = 0;      // their gradients
  int64_t gathered_params = 0;  // full parameters gathered now (0 between steps)
  int64_t full_grads = 0;       // full-size .grad still on the wrapped module's parameters
  int64_t replicated = 0;       // frozen parameters and buffers (not sharded)
  // The largest gathered parameters + full gradients + reduce-scatter staging seen at once
  // since reset_peak() (the transient cost of a step: about three units, not the model).
  int64_t peak_transient = 0;
};

// The wrapper is a Module whose parameters are the shards, named "shard<i>" (unit i: the root
// first when it holds parameters, then the units in the order given), so an optimizer built
// from fsdp.named_parameters() steps exactly this rank's share. The wrapped module's own
// parameters keep their identity and shapes, but their storage is empty except while their
// unit runs (Note [FSDP storage] in dist/fsdp.cpp): read the model through full_state_dict(),
// not module().state_dict(), and take it before the wrapper goes (the parameters stay empty).
class FullyShardedDataParallel : public nn::Module {
 public:
  // Broadcasts rank 0's parameters and buffers, then shards every unit. Collective.
  FullyShardedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroupPtr group, FSDPOptions options = {});
  ~FullyShardedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  nn::Module& module() { return *module_; }
  const ProcessGroupPtr& group() const { return group_; }

  size_t num_units() const;                      // the root included
  const std::string& unit_name(size_t i) const;  // "" for the root, else its path
  int64_t unit_numel(size_t i) const;            // its parameters' elements (unpadded)
  FSDPMemory memory() const;
  void reset_peak();
  // All-gathers (number of units gathered in forward and backward) that were started ahead of
  // their use by prefetch, since construction.
  int64_t prefetched() const;

  // The module's state_dict() (parameters gathered, then copied) on every rank, or on rank 0
  // only (an empty result elsewhere). Collective.
  nn::NamedTensors full_state_dict(bool rank0_only = false);
  // Loads a full state (module().state_dict()'s keys, e.g. from full_state_dict()) into the
  // shards: every rank passes the same values. Collective.
  void load_full_state_dict(const nn::NamedTensors& state);

  // Sharded checkpoint: every rank writes dir/fsdp.rank<r>.safetensors (its shards, the
  // optimizer's state of them when `optimizer` is given, and the layout), then a barrier.
  // Collective. Buffers and frozen parameters (the same on every rank) are not in it: save
  // them from rank 0 (module().state_dict()) if the model has any that change.
  void save_sharded(const std::string& dir, const optim::Optimizer* optimizer = nullptr) const;
  // Loads one written at any world size: each rank reads the old shards that overlap its own
  // (dir must be visible to every rank); the units must have the element counts saved. A
  // missing or mismatched file is an error naming it. Collective.
  void load_sharded(const std::string& dir, optim::Optimizer* optimizer = nullptr);

  struct State;  // the units, shared with the hooks (dist/fsdp.cpp)

 protected:
  void on_train(bool on) override;

 private:
  std::shared_ptr<nn::Module> module_;
  ProcessGroupPtr group_;
  FSDPOptions options_;
  std::shared_ptr<State> state_;
};

using FSDP = FullyShardedDataParallel;

}  // namespace brisk::dist
