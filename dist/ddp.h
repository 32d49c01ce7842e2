// dist/ddp.h: DistributedDataParallel, data parallelism as torch.nn.parallel.DDP: every rank
// holds a replica of the model and its own shard of the data; gradients are averaged across
// ranks during backward, bucket by bucket, so communication overlaps the rest of backward
// (Note [DDP buckets] in dist/ddp.cpp). Not here: the process groups (dist/process_group.h),
// sharded optimizer state (dist/zero.h), sharding the data (data::DistributedSampler).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"

namespace brisk::dist {

struct DDPOptions {                     // fields in DistributedDataParallel's keyword order
  bool broadcast_buffers = true;        // rank 0's buffers (batch-norm statistics) before each forward
  double bucket_cap_mb = 25;            // gradient bytes per allreduce (PyTorch's default)
  bool find_unused_parameters = false;  // a parameter without a gradient: zeros, not an error
};

// What the last synchronized backward did, for tests and benchmarks (steady-clock ns).
struct SyncStats {
  std::vector<int64_t> bucket_launch_ns{};  // when each bucket's allreduce was started, in order
  int64_t backward_end_ns = 0;              // when the backward pass finished its last node
  int64_t synced_ns = 0;                    // when every averaged gradient was in place
};

// The wrapper is itself a Module whose parameters, buffers and children are the wrapped
// module's, under the same names: ddp.state_dict() has the keys of module.state_dict() (no
// "module." prefix, unlike PyTorch; loading either into the other just works), and an
// optimizer built from ddp.named_parameters() steps the wrapped module's tensors.
class DistributedDataParallel : public nn::Module {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank, then builds the buckets.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroupPtr group, DDPOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  nn::Module& module() { return *module_; }
  const ProcessGroupPtr& group() const { return group_; }

  // While alive, backward accumulates gradients locally without communication (gradient
  // accumulation); the first backward after it averages everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }

  size_t num_buckets() const;
  // Parameter names per bucket, in launch order (reverse registration order).
  std::vector<std::vector<std::string>> bucket_params() const;
  const SyncStats& last_sync() const;

  struct State;  // shared with the gradient hooks (dist/ddp.cpp)

 private:
  std::shared_ptr<nn::Module> module_;
  ProcessGroupPtr group_;
  DDPOptions options_;
  std::shared_ptr<State> state_;
};

// Copies rank `root`'s parameters and buffers (module.state_dict()) to every rank of the group,
// in place: how DDP and FSDP start every rank from the same weights (PyTorch's
// sync_module_states).
void broadcast_module_state(nn::Module& module, ProcessGroup& group, int root = 0);

}  // namespace brisk::dist
