// dist/zero.h: ZeroRedundancyOptimizer, ZeRO stage 1 (Rajbhandari et al.; PyTorch's
// torch.distributed.optim.ZeroRedundancyOptimizer shards by whole parameters, this one by
// elements): the parameters are seen as one flat vector cut into size() equal shards; each
// rank's inner optimizer (SGD, Adam, AdamW: any elementwise rule) holds state for its shard
// only, 1/N of the whole, and steps it with the gradients every rank already has (averaged by
// DistributedDataParallel); an allgather then gives every rank the whole updated vector, so all
// replicas end with the weights one unsharded optimizer would give. Not here: gradient
// averaging (dist/ddp.h), sharding gradients or parameters themselves (ZeRO-2/3).
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
  // make: builds the inner optimizer over the one tensor it is given ("shard": this rank's
  // slice of the flat parameters). Parameters must share one dtype and device.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)>;
  ZeroRedundancyOptimizer(optim::NamedTensors params, ProcessGroupPtr group, Factory make);

  // Pulls this rank's shard from the parameters and its gradient from theirs (zeros where a
  // parameter has none), steps it, then allgathers every shard back into the parameters.
  void step();
  void zero_grad(bool set_to_none = true);

  int owner(const std::string& param_name) const;  // the rank whose shard holds its first element
  optim::Optimizer& local() { return *local_; }    // this rank's inner optimizer
  int64_t local_state_bytes() const;               // optimizer state this rank holds
  // This rank's shard's state (save one file per rank, as examples/ddp does).
  optim::OptimizerState state_dict() const { return local_->state_dict(); }
  void load_state_dict(const optim::OptimizerState& state) { local_->load_state_dict(state); }

 private:
  ProcessGroupPtr group_;
  optim::NamedTensors params_;
  std::vector<int64_t> offsets_;  // each parameter's first element in the flat vector
  int64_t shard_size_ = 0;        // elements per rank (the flat vector padded to size() shards)
  Tensor flat_;                   // the whole padded vector (allgather target, gradient staging)
  Tensor shard_;                  // this rank's slice, the inner optimizer's parameter
  std::unique_ptr<optim::Optimizer> local_;
};

}  // namespace brisk::dist
