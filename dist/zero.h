// dist/zero.h: ZeroRedundancyOptimizer, ZeRO stage 1 (torch.distributed.optim.ZeRO): the
// optimizer state is sharded across ranks. Each parameter is owned by one rank (greedy by
// size, so shards hold about 1/N of the elements); each rank's inner optimizer (SGD, Adam,
// AdamW, ...) holds state for its own parameters only and steps them with the gradients every
// rank already has (averaged by DistributedDataParallel); then every rank broadcasts the
// parameters it owns, so all replicas end with the same weights as one unsharded optimizer.
// Not here: gradient averaging (dist/ddp.h), sharding parameters or gradients (ZeRO-2/3).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "optim/optimizer.h"

namespace brisk::dist {

class ZeroRedundancyOptimizer {
 public:
  // make: builds the inner optimizer over the parameters it is given (this rank's shard).
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)>;
  ZeroRedundancyOptimizer(optim::NamedTensors params, ProcessGroupPtr group, Factory make);

  void step();  // the local step, then one broadcast per rank of the parameters it owns
  void zero_grad(bool set_to_none = true);

  int owner(const std::string& param_name) const;  // the rank that steps it
  optim::Optimizer& local() { return *local_; }    // this rank's inner optimizer
  // Bytes of optimizer state this rank holds (its shard of the buffers).
  int64_t local_state_bytes() const;
  // This rank's shard's state (the parameters it owns; gather the ranks' files to rebuild).
  optim::OptimizerState state_dict() const { return local_->state_dict(); }
  void load_state_dict(const optim::OptimizerState& state) { local_->load_state_dict(state); }

 private:
  ProcessGroupPtr group_;
  optim::NamedTensors params_;
  std::vector<int> owner_;                  // per parameter
  std::vector<std::vector<size_t>> owned_;  // per rank: indices into params_
  std::vector<Tensor> flat_;                // per rank: the broadcast buffer of its parameters
  std::unique_ptr<optim::Optimizer> local_;
};

}  // namespace brisk::dist
