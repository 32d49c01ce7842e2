// dist/ddp.cpp: DistributedDataParallel (dist/ddp.h): buckets, the gradient hooks that fill
// and launch them, and the end-of-backward callback that waits and writes the averages back.
#include "dist/ddp.h"

#include <chrono>
#include <mutex>
#include <sstream>

#include "engine/autograd.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::dist {

// Note [DDP buckets]
// Parameters that require grad are cut, in reverse registration order (roughly the order in
// which backward produces their gradients), into buckets of at most bucket_cap_mb of one dtype
// and device; each bucket owns one flat buffer. A post-accumulate hook on each parameter copies
// its gradient into its slot; when a bucket's last slot is filled, its allreduce (Avg) is
// started on the group's own thread (MPI) or stream (NCCL) and backward goes on, so the
// communication overlaps the remaining backward. Buckets are started strictly in order (a
// ready bucket waits for the ones before it), so every rank issues the same collectives in the
// same order. At the end of backward (autograd's queue_callback) the remaining buckets are
// started, all are waited for, and each gradient is overwritten with its average. A parameter
// that got no gradient is an error naming it, or, with find_unused_parameters, a zero slot (the
// parameter's gradient becomes the average of the other ranks' gradients, as in PyTorch).
// Inside no_sync() the hooks do nothing: gradients accumulate in .grad, and the next
// synchronized backward copies the accumulated values into the buckets.

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;  // indices into `params`
    std::vector<int64_t> offsets;
    Tensor flat;
    size_t pending = 0;
    bool ready = false;
    WorkPtr work;
  };

  ProcessGroupPtr group;
  DDPOptions options;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<size_t> bucket_of, slot_of;
  std::vector<bool> got_grad;
  std::vector<Bucket> buckets;
  size_t next_launch = 0;
  bool in_backward = false;
  bool no_sync = false;
  SyncStats stats;
  SyncStats building;

  void begin() {
    for (Bucket& b : buckets) {
      b.pending = b.params.size();
      b.ready = false;
      b.work.reset();
    }
    std::fill(got_grad.begin(), got_grad.end(), false);
    next_launch = 0;
    building = {};
    in_backward = true;
  }

  // Consecutive parameters of one dtype and device, up to `cap` bytes a bucket (one parameter
  // larger than cap gets a bucket of its own).
  void build_buckets(int64_t cap) {
    bucket_of.resize(params.size());
    slot_of.resize(params.size());
    got_grad.assign(params.size(), false);
    int64_t bytes = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      const int64_t b = p.numel() * int64_t(p.element_size());
      const Tensor* first = buckets.empty() ? nullptr : &params[buckets.back().params[0]];
      if (!first || bytes + b > cap || first->dtype() != p.dtype() || first->device() != p.device()) {
        buckets.emplace_back();
        bytes = 0;
      }
      Bucket& bk = buckets.back();
      bucket_of[i] = buckets.size() - 1;
      slot_of[i] = bk.params.size();
      bk.offsets.push_back(bk.params.empty() ? 0 : bk.offsets.back() + params[bk.params.back()].numel());
      bk.params.push_back(i);
      bytes += b;
    }
    for (Bucket& bk : buckets) {
      const Tensor& last = params[bk.params.back()];
      bk.flat = zeros({bk.offsets.back() + last.numel()}, last.dtype(), last.device());
    }
  }

  Tensor slot(size_t i) {
    const Bucket& b = buckets[bucket_of[i]];
    return reshape(narrow(b.flat, 0, b.offsets[slot_of[i]], params[i].numel()), params[i].sizes());
  }

  void launch_in_order() {
    while (next_launch < buckets.size() && buckets[next_launch].ready) {
      Bucket& b = buckets[next_launch++];
      building.bucket_launch_ns.push_back(now_ns());
      b.work = group->allreduce(b.flat, ReduceOp::Avg);
    }
  }

  void mark(size_t i, const Tensor* grad) {
    if (got_grad[i]) return;  // a leaf's gradient arrives once per backward
    got_grad[i] = true;
    NoGradGuard no_grad;
    Tensor s = slot(i);
    if (grad) {
      s.copy_(*grad);
    } else {
      s.zero_();
    }
    Bucket& b = buckets[bucket_of[i]];
    if (--b.pending == 0) {
      b.ready = true;
      launch_in_order();
    }
  }

  // The end of backward: start what is left, wait for everything, write the averages back.
  void finish() {
    building.backward_end_ns = now_ns();
    in_backward = false;
    std::vector<std::string> missing;
    for (size_t i = 0; i < params.size(); ++i) {
      if (got_grad[i]) continue;
      if (options.find_unused_parameters) {
        mark(i, nullptr);
      } else {
        missing.push_back(names[i]);
      }
    }
    if (!missing.empty()) {
      std::ostringstream s;
      for (size_t k = 0; k < missing.size(); ++k) s << (k ? ", " : "") << "'" << missing[k] << "'";
      BRISK_FAIL("DistributedDataParallel: parameter", missing.size() > 1 ? "s " : " ", s.str(),
                 " got no gradient in this backward (not used by the loss?); pass find_unused_parameters = true, or "
                 "freeze them (requires_grad_(false)) before wrapping");
    }
    for (Bucket& b : buckets) b.work->wait();
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = params[i].grad();
      if (g.defined() && g.is_contiguous() && g.dtype() == params[i].dtype()) {
        g.copy_(slot(i));
      } else {
        params[i].set_grad(slot(i).clone());
      }
    }
    building.synced_ns = now_ns();
    stats = building;
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroupPtr group,
                                                 DDPOptions options)
    : nn::Module("DistributedDataParallel"), module_(std::move(module)), group_(std::move(group)), options_(options) {
  BRISK_CHECK(module_ && group_, "DistributedDataParallel: needs a module and a process group");
  BRISK_CHECK(options_.bucket_cap_mb > 0 && options_.bucket_cap_mb <= 1e6,
              "DistributedDataParallel: bucket_cap_mb must be in (0, 1e6], got ", options_.bucket_cap_mb);
  // The wrapped module's own names (see dist/ddp.h).
  for (auto& [name, child] : module_->named_children()) register_module(name, child);
  for (auto& [name, p] : module_->named_parameters(false)) register_parameter(name, p, p.requires_grad());
  for (auto& [name, b] : module_->named_buffers(false)) register_buffer(name, b);

  broadcast_module_state(*module_, *group_, 0);  // every rank starts from rank 0's weights

  state_ = std::make_shared<State>();
  State& st = *state_;
  st.group = group_;
  st.options = options_;
  const nn::NamedTensors named = module_->named_parameters();
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    if (!it->second.requires_grad()) continue;
    st.names.push_back(it->first);
    st.params.push_back(it->second);
  }
  st.build_buckets(int64_t(options_.bucket_cap_mb * 1024 * 1024));

  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < st.params.size(); ++i) {
    st.params[i].register_post_accumulate_grad_hook([weak, i](Tensor& leaf) {
      std::shared_ptr<State> s = weak.lock();
      if (!s || s->no_sync) return;  // the wrapper is gone, or gradients accumulate locally
      if (!s->in_backward) {
        s->begin();
        queue_callback([weak] {
          if (std::shared_ptr<State> s2 = weak.lock()) s2->finish();
        });
      }
      const Tensor g = leaf.grad();
      s->mark(i, &g);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (options_.broadcast_buffers && group_->size() > 1) {
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) {
      if (b.is_contiguous()) group_->broadcast(b, 0)->wait();
    }
  }
  return (*module_)(x);
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.state_->no_sync) {
  ddp_.state_->no_sync = true;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->no_sync = prev_; }

size_t DistributedDataParallel::num_buckets() const { return state_->buckets.size(); }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_params() const {
  std::vector<std::vector<std::string>> out;
  for (const State::Bucket& b : state_->buckets) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(state_->names[i]);
  }
  return out;
}

const SyncStats& DistributedDataParallel::last_sync() const { return state_->stats; }

void broadcast_module_state(nn::Module& module, ProcessGroup& group, int root) {
  NoGradGuard no_grad;
  for (auto& [name, t] : module.state_dict()) {
    Tensor dense = t.is_contiguous() ? t : t.contiguous();
    group.broadcast(dense, root)->wait();
    if (dense.impl() != t.impl()) t.copy_(dense);
  }
}

}  // namespace brisk::dist
