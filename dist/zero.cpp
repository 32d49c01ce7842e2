// dist/zero.cpp: ZeroRedundancyOptimizer (dist/zero.h): the flat layout, the shard's pull
// (values and gradients), the local step and the allgather back into the parameters; for stage
// 2 the gradient hooks and the reduce-scatter at the end of backward.
#include "dist/zero.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "dist/shard_file.h"
#include "engine/autograd.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/serialize.h"

namespace brisk::dist {

// Stage 2: the first gradient hook of a backward queues reduce() for its end; reduce() packs
// every parameter's gradient into the flat buffer (zeros where none), reduce-scatters the
// average into this rank's shard (adding to what earlier backwards left there), and frees the
// parameters' gradients. Only the shard survives until step().
struct ZeroRedundancyOptimizer::Stage2 {
  ProcessGroupPtr group;
  optim::NamedTensors params;
  std::vector<int64_t> offsets;
  Tensor flat;        // the padded flat gradient (staging for the reduce-scatter)
  Tensor grad_shard;  // this rank's averaged gradient, accumulated over backwards
  bool queued = false;

  void reduce() {
    queued = false;
    NoGradGuard no_grad;
    flat.zero_();
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i].second;
      const Tensor g = p.grad();
      if (g.defined()) narrow(flat, 0, offsets[i], p.numel()).copy_(reshape(g, {p.numel()}));
      p.zero_grad(true);  // freed: the shard is all that stays
    }
    Tensor mine = zeros_like(grad_shard);
    group->reduce_scatter(mine, flat, ReduceOp::Avg)->wait();
    grad_shard.add_(mine);
  }
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(optim::NamedTensors params, ProcessGroupPtr group, Factory make,
                                                 ZeroOptions options)
    : group_(std::move(group)), params_(std::move(params)), options_(options) {
  BRISK_CHECK(options_.stage == 1 || options_.stage == 2, "ZeroRedundancyOptimizer: stage must be 1 or 2, got ",
              options_.stage, " (stage 3, sharded parameters, is dist::FullyShardedDataParallel in dist/fsdp.h)");
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
  if (options_.stage == 2) {
    // No DDP wraps the model here: rank 0's parameters go to every rank, as DDP's would.
    NoGradGuard no_grad;
    for (auto& [name, p] : params_) {
      Tensor dense = p.is_contiguous() ? p : p.contiguous();
      group_->broadcast(dense, 0)->wait();
      if (dense.impl() != p.impl()) p.copy_(dense);
    }
    stage2_ = std::make_shared<Stage2>();
    stage2_->group = group_;
    stage2_->params = params_;
    stage2_->offsets = offsets_;
    stage2_->flat = flat_;  // shared staging: step() no longer needs it by then
    stage2_->grad_shard = zeros({shard_size_}, p0.dtype(), p0.device());
    std::weak_ptr<Stage2> weak = stage2_;
    for (auto& [name, p] : params_) {
      if (!p.requires_grad()) continue;
      p.register_post_accumulate_grad_hook([weak](Tensor&) {
        std::shared_ptr<Stage2> s = weak.lock();
        if (!s || s->queued) return;
        s->queued = true;
        queue_callback([weak] {
          if (std::shared_ptr<Stage2> s2 = weak.lock()) s2->reduce();
        });
      });
    }
  }
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {  // values, so that a loaded model is respected
    const Tensor& p = params_[i].second;
    narrow(flat_, 0, offsets_[i], p.numel()).copy_(reshape(p, {p.numel()}));
  }
  const int64_t first = shard_size_ * group_->rank();
  shard_.copy_(narrow(flat_, 0, first, shard_size_));
  if (stage2_) {
    shard_.set_grad(stage2_->grad_shard.clone());  // averaged at the end of backward (zeros if none ran)
  } else {
    pull_gradients(first);
  }
  local_->step();
  gather_back();
}

void ZeroRedundancyOptimizer::pull_gradients(int64_t first) {
  flat_.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {  // then gradients, in the same buffer
    const Tensor& p = params_[i].second;
    const Tensor g = p.grad();
    if (g.defined()) narrow(flat_, 0, offsets_[i], p.numel()).copy_(reshape(g, {p.numel()}));
  }
  shard_.set_grad(narrow(flat_, 0, first, shard_size_).clone());
}

void ZeroRedundancyOptimizer::gather_back() {
  group_->allgather_into_tensor(flat_, shard_)->wait();
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    p.copy_(reshape(narrow(flat_, 0, offsets_[i], p.numel()), p.sizes()));
  }
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (auto& [name, p] : params_) p.zero_grad(set_to_none);
  if (stage2_) {
    NoGradGuard no_grad;
    stage2_->grad_shard.zero_();
  }
}

int64_t ZeroRedundancyOptimizer::local_grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, p] : params_) {
    if (p.grad().defined()) bytes += p.grad().numel() * int64_t(p.grad().element_size());
  }
  if (stage2_) bytes += stage2_->grad_shard.numel() * int64_t(stage2_->grad_shard.element_size());
  return bytes;
}

namespace {

std::string shard_file(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("zero.rank" + std::to_string(rank) + ".safetensors")).string();
}

using detail::exact;

int64_t meta_int(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  return detail::meta_int(f, key, path, "ZeroRedundancyOptimizer::load_sharded");
}

}  // namespace

// Note [Resharding ZeRO state]: the state of the flat vector's elements is cut into equal
// shards of `shard` elements at save time and of shard_size_ now; element e of the padded flat
// vector lives in old file e / shard at offset e % shard. Per-element buffers (exp_avg, ...)
// have the shard's length; anything else (a step count tensor) is the same on every rank and
// taken from rank 0's file.
void ZeroRedundancyOptimizer::save_sharded(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  const optim::OptimizerState st = local_->state_dict();
  std::map<std::string, std::string> meta{{"zero.world", std::to_string(group_->size())},
                                          {"zero.rank", std::to_string(group_->rank())},
                                          {"zero.shard", std::to_string(shard_size_)},
                                          {"zero.total", std::to_string(total_elements())}};
  for (const auto& [k, v] : st.scalars) meta["scalar." + k] = exact(v);
  save_safetensors(shard_file(dir, group_->rank()), st.tensors, meta);
  group_->barrier()->wait();
}

void ZeroRedundancyOptimizer::load_sharded(const std::string& dir) {
  const std::string first_path = shard_file(dir, 0);
  const SafetensorsFile head = load_safetensors(first_path);
  const int64_t old_world = meta_int(head, "zero.world", first_path);
  const int64_t old_shard = meta_int(head, "zero.shard", first_path);
  const int64_t total = meta_int(head, "zero.total", first_path);
  BRISK_CHECK(total == total_elements(), "ZeroRedundancyOptimizer::load_sharded: ", first_path, " holds the state of ",
              total, " parameter elements, these parameters have ", total_elements());
  optim::OptimizerState st;
  for (const auto& [k, v] : head.metadata) {
    if (k.rfind("scalar.", 0) == 0) st.scalars[k.substr(7)] = std::stod(v);
  }
  // This rank's new range [lo, hi) of the padded flat vector, gathered from the old files.
  const int64_t lo = shard_size_ * group_->rank(), hi = lo + shard_size_;
  std::map<int64_t, SafetensorsFile> files;
  files[0] = head;
  for (const auto& [name, t0] : head.tensors) {
    if (t0.numel() != old_shard) {  // not per element: the same on every rank
      st.tensors.push_back({name, t0});
      continue;
    }
    Tensor mine = zeros({shard_size_}, t0.dtype());
    for (int64_t k = lo / old_shard; k < old_world && k * old_shard < hi; ++k) {
      if (!files.count(k)) files[k] = load_safetensors(shard_file(dir, int(k)));
      const SafetensorsFile& f = files[k];
      const Tensor* src = nullptr;
      for (const auto& [n2, t] : f.tensors) {
        if (n2 == name) src = &t;
      }
      BRISK_CHECK(src && src->numel() == old_shard, "ZeroRedundancyOptimizer::load_sharded: ", shard_file(dir, int(k)),
                  " has no tensor '", name, "' of ", old_shard, " elements");
      const int64_t a = std::max(lo, k * old_shard), b = std::min(hi, (k + 1) * old_shard);
      narrow(mine, 0, a - lo, b - a).copy_(narrow(*src, 0, a - k * old_shard, b - a));
    }
    st.tensors.push_back({name, mine});
  }
  local_->load_state_dict(st);
  group_->barrier()->wait();
}

int64_t ZeroRedundancyOptimizer::total_elements() const { return offsets_.back() + params_.back().second.numel(); }

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
