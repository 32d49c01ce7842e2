// dist/zero.cpp: ZeroRedundancyOptimizer (dist/zero.h): the flat layout, the shard's pull
// (values and gradients), the local step and the allgather back into the parameters.
#include "dist/zero.h"

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(optim::NamedTensors params, ProcessGroupPtr group, Factory make)
    : group_(std::move(group)), params_(std::move(params)) {
  BRISK_CHECK(group_ && make, "ZeroRedundancyOptimizer: needs a process group and an optimizer factory");
  BRISK_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: no parameters");
  const Tensor& p0 = params_[0].second;
  int64_t total = 0;
  for (const auto& [name, p] : params_) {
    BRISK_CHECK(p.dtype() == p0.dtype() && p.device() == p0.device(), "ZeroRedundancyOptimizer: parameter '", name,
                "' is ", p.str(), " but '", params_[0].first, "' is ", p0.str(), " (one dtype and device)");
    offsets_.push_back(total);
    total += p.numel();
  }
  const int64_t n = group_->size();
  shard_size_ = (total + n - 1) / n;
  flat_ = zeros({shard_size_ * n}, p0.dtype(), p0.device());
  shard_ = zeros({shard_size_}, p0.dtype(), p0.device());
  shard_.requires_grad_(true);
  local_ = make({{"shard", shard_}});
  BRISK_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: the factory returned no optimizer");
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {  // values, so that a loaded model is respected
    const Tensor& p = params_[i].second;
    narrow(flat_, 0, offsets_[i], p.numel()).copy_(reshape(p, {p.numel()}));
  }
  const int64_t first = shard_size_ * group_->rank();
  shard_.copy_(narrow(flat_, 0, first, shard_size_));
  flat_.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {  // then gradients, in the same buffer
    const Tensor& p = params_[i].second;
    const Tensor g = p.grad();
    if (g.defined()) narrow(flat_, 0, offsets_[i], p.numel()).copy_(reshape(g, {p.numel()}));
  }
  shard_.set_grad(narrow(flat_, 0, first, shard_size_).clone());
  local_->step();
  group_->allgather_into_tensor(flat_, shard_)->wait();
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    p.copy_(reshape(narrow(flat_, 0, offsets_[i], p.numel()), p.sizes()));
  }
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (auto& [name, p] : params_) p.zero_grad(set_to_none);
}

int ZeroRedundancyOptimizer::owner(const std::string& param_name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first == param_name) return int(offsets_[i] / shard_size_);
  }
  BRISK_FAIL("ZeroRedundancyOptimizer: no parameter named '", param_name, "'");
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, t] : local_->state_dict().tensors) bytes += t.numel() * int64_t(t.element_size());
  return bytes;
}

}  // namespace brisk::dist
