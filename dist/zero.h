// dist/zero.h: ZeroRedundancyOptimizer, ZeRO stage 1 (Rajbhandari et al.; PyTorch's
// torch.distributed.optim.ZeroRedundancyOptimizer shards by whole parameters, this one by
// elements): the parameters are seen as one flat vector cut into size() equal shards; each
// rank's inner optimizer (SGD, Adam, AdamW: any elementwise rule) holds state for its shard
// only, 1/N of the whole, and steps it with the gradients every rank already has (averaged by
// DistributedDataParallel); an allgather then gives every rank the whole updated vector, so all
// replicas end with the weights one unsharded optimizer would give. Stage 2 (ZeRO-2,
// ZeroOptions::stage) also shards the gradients: at the end of each backward the flat gradient is
// reduce-scattered (averaged) into this rank's shard and the parameters' own gradients are freed,
// so between steps a rank holds 1/N of the gradients too (the model is then not wrapped in DDP:
// this does the averaging). Not here: gradient averaging for stage 1 (dist/ddp.h), sharding the
// parameters themselves (ZeRO-3: dist/fsdp.h, FullyShardedDataParallel).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "optim/optimizer.h"

namespace brisk::dist {

struct ZeroOptions {
  // 1: optimizer state sharded (gradients averaged by DDP). 2: gradients too: the parameters'
  // gradients are reduce-scattered into this rank's shard at the end of every backward (several
  // backwards before a step accumulate there) and freed; do not wrap the model in DDP then (the
  // constructor broadcasts rank 0's parameters, as DDP's does).
  int stage = 1;
};

class ZeroRedundancyOptimizer {
 public:
  // make: builds the inner optimizer over the one tensor it is given ("shard": this rank's
  // slice of the flat parameters). Parameters must share one dtype and device.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)>;
  ZeroRedundancyOptimizer(optim::NamedTensors params, ProcessGroupPtr group, Factory make, ZeroOptions options = {});
  ~ZeroRedundancyOptimizer();

  // Pulls this rank's shard from the parameters and its gradient from theirs (zeros where a
  // parameter has none), steps it, then allgathers every shard back into the parameters.
  void step();
  void zero_grad(bool set_to_none = true);

  int owner(const std::string& param_name) const;  // the rank whose shard holds its first element
  optim::Optimizer& local() { return *local_; }    // this rank's inner optimizer
  int64_t local_state_bytes() const;               // optimizer state this rank holds
  // Gradient bytes this rank holds now: the parameters' .grad (stage 1), or the gradient shard
  // plus any .grad not yet reduce-scattered (stage 2).
  int64_t local_grad_bytes() const;
  int stage() const { return options_.stage; }
  // This rank's shard's state (save one file per rank, as examples/ddp does).
  optim::OptimizerState state_dict() const { return local_->state_dict(); }
  void load_state_dict(const optim::OptimizerState& state) { local_->load_state_dict(state); }

  // Sharded checkpoint of the optimizer state: every rank writes dir/zero.rank<r>.safetensors
  // (its shard's state, atomically, with the layout in the metadata), then a barrier. Collective.
  void save_sharded(const std::string& dir) const;
  // Loads such a checkpoint written at any world size: each rank reads the old shards that
  // overlap its new one (dir must be visible to every rank) and takes the non-sharded state
  // (step counts) from rank 0's file. The parameters' layout must be the one saved (same
  // total element count); a missing or mismatched file is an error naming it. Collective.
  void load_sharded(const std::string& dir);

 private:
  ProcessGroupPtr group_;
  optim::NamedTensors params_;
  std::vector<int64_t> offsets_;  // each parameter's first element in the flat vector
  int64_t shard_size_ = 0;        // elements per rank (the flat vector padded to size() shards)
  Tensor flat_;                   // the whole padded vector (allgather target, gradient staging)
  Tensor shard_;                  // this rank's slice, the inner optimizer's parameter
  std::unique_ptr<optim::Optimizer> local_;
  ZeroOptions options_;
  void pull_gradients(int64_t first);  // stage 1: this rank's slice of the (DDP-averaged) .grad
  void gather_back();                  // every rank's updated shard into the parameters
  int64_t total_elements() const;      // the parameters' elements (the flat vector unpadded)
  struct Stage2;                       // the gradient hooks' shared state (dist/zero.cpp)
  std::shared_ptr<Stage2> stage2_;
};

}  // namespace brisk::dist
