// dist/zero.cpp: ZeroRedundancyOptimizer (dist/zero.h): the partition, the local step and
// the broadcast of each rank's parameters, one flat buffer per rank and dtype-uniform shards
// (a shard of mixed dtypes is broadcast tensor by tensor).
#include "dist/zero.h"

#include <algorithm>
#include <numeric>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(optim::NamedTensors params, ProcessGroupPtr group, Factory make)
    : group_(std::move(group)), params_(std::move(params)) {
  BRISK_CHECK(group_ && make, "ZeroRedundancyOptimizer: needs a process group and an optimizer factory");
  const int n = group_->size();
  // Greedy partition, largest parameters first, each to the rank with the fewest elements so
  // far (ties to the lower rank): the same on every rank, since it depends on shapes only.
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].second.numel() > params_[b].second.numel(); });
  std::vector<int64_t> load(size_t(n), 0);
  owner_.assign(params_.size(), 0);
  for (size_t i : order) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[size_t(r)] += params_[i].second.numel();
  }
  owned_.assign(size_t(n), {});
  for (size_t i = 0; i < params_.size(); ++i) owned_[size_t(owner_[i])].push_back(i);
  optim::NamedTensors mine;
  for (size_t i : owned_[size_t(group_->rank())]) mine.push_back(params_[i]);
  local_ = make(std::move(mine));
  BRISK_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: the factory returned no optimizer");
  flat_.resize(size_t(n));
  for (int r = 0; r < n; ++r) {
    const auto& idx = owned_[size_t(r)];
    if (idx.empty()) continue;
    const Tensor& p0 = params_[idx[0]].second;
    bool uniform = true;
    int64_t total = 0;
    for (size_t i : idx) {
      uniform &= params_[i].second.dtype() == p0.dtype() && params_[i].second.device() == p0.device();
      total += params_[i].second.numel();
    }
    if (uniform) flat_[size_t(r)] = zeros({total}, p0.dtype(), p0.device());
  }
}

void ZeroRedundancyOptimizer::step() {
  local_->step();
  NoGradGuard no_grad;
  const int me = group_->rank();
  for (int r = 0; r < group_->size(); ++r) {
    const auto& idx = owned_[size_t(r)];
    if (idx.empty()) continue;
    Tensor& flat = flat_[size_t(r)];
    if (!flat.defined()) {  // a mixed shard: one broadcast per tensor
      for (size_t i : idx) {
        Tensor& p = params_[i].second;
        Tensor d = p.is_contiguous() ? p : p.contiguous();
        group_->broadcast(d, r)->wait();
        if (d.impl() != p.impl()) p.copy_(d);
      }
      continue;
    }
    int64_t at = 0;
    if (r == me) {
      for (size_t i : idx) {
        const Tensor& p = params_[i].second;
        narrow(flat, 0, at, p.numel()).copy_(reshape(p, {p.numel()}));
        at += p.numel();
      }
    }
    group_->broadcast(flat, r)->wait();
    if (r == me) continue;
    at = 0;
    for (size_t i : idx) {
      Tensor& p = params_[i].second;
      p.copy_(reshape(narrow(flat, 0, at, p.numel()), p.sizes()));
      at += p.numel();
    }
  }
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (auto& [name, p] : params_) p.zero_grad(set_to_none);
}

int ZeroRedundancyOptimizer::owner(const std::string& param_name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first == param_name) return owner_[i];
  }
  BRISK_FAIL("ZeroRedundancyOptimizer: no parameter named '", param_name, "'");
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, t] : local_->state_dict().tensors) bytes += t.numel() * int64_t(t.element_size());
  return bytes;
}

}  // namespace brisk::dist
