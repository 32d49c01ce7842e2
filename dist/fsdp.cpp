// dist/fsdp.cpp: FullyShardedDataParallel (dist/fsdp.h): the units and their flat layout, the
// gather / free cycle around each unit's forward and backward with prefetch, the gradients'
// reduce-scatter into the shards, and the sharded checkpoint.
#include "dist/fsdp.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>

#include "dist/ddp.h"
#include "dist/shard_file.h"
#include "engine/autograd.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/serialize.h"
#include "engine/shape.h"

namespace brisk::dist {

// Note [FSDP storage]
// All trainable parameters of a unit are views of ONE storage, the unit's flat buffer (their
// elements back to back, padded with zeros to N equal shards). Freeing a unit moves the
// buffer's bytes out of the StorageImpl (which stays, with no data and 0 bytes); gathering moves
// fresh bytes in and all-gathers the shards into them. The parameter tensors keep their
// identity, shapes and hooks, and so does every view of them and every tensor autograd saved in
// forward (all share the StorageImpl): in backward they read the re-gathered values without
// being touched (PyTorch's FSDP frees with storage().resize_(0) for the same reason). The
// collectives write the bytes without bumping the storage's version, so the saved tensors'
// in-place check holds. While a unit is freed its parameters have no data: reading them (a
// module().state_dict() saved to a file) is a use after free, which is why the wrapper offers
// full_state_dict().
//
// Note [FSDP schedule]
// Forward: a unit's forward pre-hook waits for its gather (started here, or earlier by
// prefetch), then starts the gather of the unit that followed it in the last forward; its
// forward hook frees it and hangs a hook on each output's gradient. Backward: that gradient
// hook fires before any of the unit's backward nodes run; it gathers the unit again and starts
// the gather of the unit before it. Every node that reads a parameter has an edge to the
// parameter's AccumulateGrad, so when the last of a unit's parameters has accumulated its
// gradient nothing needs the unit any more: the unit is freed and its gradients, which backward
// accumulated into one flat buffer (the hook made their .grad views of it), are reduce-scattered
// (Avg) into the shard's gradient, one reduce-scatter in flight at a time. The root unit (parameters outside every
// unit, and any parameter two units share) is gathered for the whole forward and freed the same way. At the end of
// backward the units whose gradients did not all come (unused parameters) are reduced with zeros there, as DDP's
// find_unused_parameters does. Every rank runs the same graph, so every rank issues the same collectives in the same
// order (a forward whose units run in another order than the last one's is still right: a unit gathered ahead and not
// used is freed at the end of the forward). Not supported: brisk::checkpoint (nn/grad_checkpoint.h) inside or around
// units: its nested backward would end this backward early.

namespace {

int64_t nbytes(const Tensor& t) { return t.defined() ? t.numel() * int64_t(t.element_size()) : 0; }

// Moves the bytes (and who frees them) from one storage to the other; devices stay.
void swap_bytes(StorageImpl& a, StorageImpl& b) {
  std::swap(a.data, b.data);
  std::swap(a.bytes, b.bytes);
  std::swap(a.allocator, b.allocator);
  std::swap(a.stream, b.stream);
  std::swap(a.deleter, b.deleter);
  std::swap(a.pinned, b.pinned);
}

std::string shard_name(size_t i) { return "shard" + std::to_string(i); }

// The unit of "shard<i>" or of an optimizer state "state.shard<i>.<buffer>"; -1 when neither.
int unit_of(const std::string& name) {
  std::string s = name.rfind("state.", 0) == 0 ? name.substr(6) : name;
  if (s.rfind("shard", 0) != 0) return -1;
  size_t end = 5;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  if (end == 5 || (end < s.size() && s[end] != '.')) return -1;
  return std::stoi(s.substr(5, end - 5));
}

}  // namespace

struct FullyShardedDataParallel::State {
  enum class Phase { Sharded, Gathering, Full };
  struct Unit {
    std::string name{};            // "" for the root
    nn::Module* module = nullptr;  // null for the root
    std::vector<Tensor> params{};  // trainable, each once, views of `storage`
    std::vector<int64_t> offsets{};
    int64_t numel = 0;  // unpadded
    int64_t shard = 0;  // elements per rank
    DType dtype = DType::F32;
    Device device{};
    Storage storage{};
    Tensor shard_param{};
    Tensor grad_flat{};  // in backward: the flat gradient the parameters' .grad are views of
    Phase phase = Phase::Sharded;
    WorkPtr gather{};
    std::vector<int> hooks{};  // the module's forward hooks
    size_t arrived = 0;        // gradients accumulated in this backward
    bool reduced = false;      // its reduce-scatter issued in this backward
    bool seen = false;         // its pre-backward hook ran in this backward
  };
  struct Pending {
    size_t unit = 0;
    WorkPtr work{};
    Tensor flat{};  // the unit's full flat gradient (freed when the reduce-scatter lands)
    Tensor out{};   // this rank's averaged shard of it
  };

  std::weak_ptr<State> self{};
  ProcessGroupPtr group{};
  bool prefetch = true;
  std::vector<Unit> units{};
  int root = -1;                  // index of the root unit, -1 when it holds nothing
  std::vector<size_t> order{};    // units in the order the last forward ran them
  std::vector<size_t> running{};  // ... and this forward
  bool in_forward = false;
  bool in_backward = false;
  std::vector<Pending> reducing{};
  int64_t transient = 0, peak = 0, prefetched = 0;

  int64_t padded(const Unit& u) const { return u.shard * group->size(); }
  int64_t padded_bytes(const Unit& u) const { return padded(u) * int64_t(dtype_size(u.dtype)); }
  Tensor flat_view(const Unit& u) const { return make_view(u.storage, {padded(u)}, {1}, 0, u.dtype); }
  void add_transient(int64_t delta) {
    transient += delta;
    peak = std::max(peak, transient);
  }

  void start_gather(size_t i, bool ahead) {
    Unit& u = units[i];
    if (u.phase != Phase::Sharded) return;
    Storage fresh = make_storage(size_t(padded_bytes(u)), u.device);
    swap_bytes(*u.storage, *fresh);
    add_transient(padded_bytes(u));
    Tensor out = flat_view(u);
    u.gather = group->allgather_into_tensor(out, u.shard_param);
    u.phase = Phase::Gathering;
    if (ahead) ++prefetched;
  }
  void ensure_full(size_t i) {
    start_gather(i, false);
    Unit& u = units[i];
    if (u.phase == Phase::Gathering) {
      u.gather->wait();
      u.gather.reset();
      u.phase = Phase::Full;
    }
  }
  void reshard(size_t i) {
    Unit& u = units[i];
    if (u.phase == Phase::Sharded) return;
    if (u.gather) {
      u.gather->wait();
      u.gather.reset();
    }
    StorageImpl dead;  // takes the bytes and frees them as it goes
    swap_bytes(*u.storage, dead);
    add_transient(-padded_bytes(u));
    u.phase = Phase::Sharded;
  }

  void pre_forward(size_t i) {
    if (in_forward) running.push_back(i);
    ensure_full(i);
    if (!prefetch || !in_forward) return;
    const size_t pos = running.size() - 1;
    if (pos + 1 < order.size() && order[pos] == i) start_gather(order[pos + 1], true);
  }

  void post_forward(size_t i, const nn::TensorDict& outputs) {
    if (GradMode::enabled()) {
      std::weak_ptr<State> weak = self;
      for (const auto& [name, t] : outputs) {
        if (!t.defined() || !t.requires_grad() || !t.grad_fn()) continue;
        t.register_hook([weak, i](const Tensor&) {
          if (std::shared_ptr<State> s = weak.lock()) s->pre_backward(i);
          return Tensor();
        });
      }
    }
    reshard(i);
  }

  // The unit's .grad become views of one zeroed flat buffer, so that backward accumulates
  // straight into what the reduce-scatter sends (AccumulateGrad adds in place to a .grad that
  // exists): no copy, and no second full-size gradient.
  void prepare_grads(size_t i) {
    Unit& u = units[i];
    if (u.grad_flat.defined()) return;
    NoGradGuard no_grad;
    u.grad_flat = zeros({padded(u)}, u.dtype, u.device);
    add_transient(nbytes(u.grad_flat));
    for (size_t k = 0; k < u.params.size(); ++k) {
      const Tensor& p = u.params[k];
      Tensor slot = reshape(narrow(u.grad_flat, 0, u.offsets[k], p.numel()), p.sizes());
      if (p.grad().defined()) slot.copy_(p.grad());
      p.set_grad(slot);
    }
  }

  void begin_backward() {
    if (in_backward) return;
    in_backward = true;
    for (Unit& u : units) {
      u.arrived = 0;
      u.reduced = false;
      u.seen = false;
    }
    if (root >= 0) prepare_grads(size_t(root));
    std::weak_ptr<State> weak = self;
    queue_callback([weak] {
      if (std::shared_ptr<State> s = weak.lock()) s->end_backward();
    });
  }

  void pre_backward(size_t i) {
    begin_backward();
    Unit& u = units[i];
    if (u.reduced) return;
    ensure_full(i);
    if (!u.seen) {
      u.seen = true;
      auto at = std::find(order.rbegin(), order.rend(), i);
      if (prefetch && at != order.rend() && std::next(at) != order.rend() && !units[*std::next(at)].reduced) {
        start_gather(*std::next(at), true);
      }
    }
    // The last unit's reduce-scatter lands before this unit's gradient buffer exists: about three
    // units at a time (this one, its gradients, the next one gathered ahead), not four.
    drain();
    prepare_grads(i);
  }

  void on_grad(size_t i) {
    begin_backward();
    Unit& u = units[i];
    if (u.reduced) return;
    if (++u.arrived == u.params.size()) reduce(i);
  }

  void reduce(size_t i) {
    Unit& u = units[i];
    u.reduced = true;
    NoGradGuard no_grad;
    drain();  // one reduce-scatter in flight at a time
    reshard(i);
    prepare_grads(i);  // a unit whose pre-backward hook did not run: its .grad are copied in
    Tensor flat = std::move(u.grad_flat);
    u.grad_flat = Tensor();
    for (size_t k = 0; k < u.params.size(); ++k) {
      const Tensor& p = u.params[k];
      const Tensor g = p.grad();
      // Replaced rather than added to (a backward with create_graph): copy it in.
      if (g.defined() && g.storage() != flat.storage()) {
        narrow(flat, 0, u.offsets[k], p.numel()).copy_(reshape(g, {p.numel()}));
      }
      p.zero_grad(true);
    }
    Tensor out = zeros({u.shard}, u.dtype, u.device);
    reducing.push_back({i, group->reduce_scatter(out, flat, ReduceOp::Avg), flat, out});
  }

  void drain() {
    NoGradGuard no_grad;
    for (Pending& p : reducing) {
      p.work->wait();
      const Tensor& shard = units[p.unit].shard_param;
      Tensor g = shard.grad();
      if (g.defined()) {
        g.add_(p.out);  // backwards before a step accumulate
      } else {
        shard.set_grad(p.out);
      }
      add_transient(-nbytes(p.flat));
    }
    reducing.clear();
  }

  void end_backward() {
    for (size_t i = 0; i < units.size(); ++i) {
      if (!units[i].reduced) reduce(i);
    }
    drain();
    for (size_t i = 0; i < units.size(); ++i) reshard(i);  // gathered ahead but not used
    in_backward = false;
  }
};

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroupPtr group,
                                                   FSDPOptions options)
    : nn::Module("FullyShardedDataParallel"),
      module_(std::move(module)),
      group_(std::move(group)),
      options_(std::move(options)) {
  BRISK_CHECK(module_ && group_, "FullyShardedDataParallel: needs a module and a process group");
  broadcast_module_state(*module_, *group_, 0);  // every rank starts from rank 0's weights
  std::vector<std::string> paths = options_.units;
  if (paths.empty()) {
    for (auto& [name, child] : module_->named_children()) {
      if (child->num_parameters(true) > 0) paths.push_back(name);
    }
  }
  for (const std::string& a : paths) {
    for (const std::string& b : paths) {
      BRISK_CHECK(a == b || b.rfind(a + ".", 0) != 0, "FullyShardedDataParallel: unit '", b, "' is inside unit '", a,
                  "' (units may not nest)");
      BRISK_CHECK(&a == &b || a != b, "FullyShardedDataParallel: unit '", a, "' is listed twice");
    }
  }
  // Which units hold each trainable parameter (a tensor two units share goes to the root).
  std::vector<nn::Module*> mods;
  std::map<TensorImpl*, int> holders;
  std::vector<nn::NamedTensors> unit_params;
  for (const std::string& path : paths) {
    nn::Module* m = nullptr;
    try {
      m = &module_->submodule(path);
    } catch (const Error&) {
      BRISK_FAIL("FullyShardedDataParallel: the module has no submodule '", path, "' (a unit)");
    }
    mods.push_back(m);
    unit_params.emplace_back();
    std::map<TensorImpl*, bool> mine;
    for (auto& [name, p] : m->named_parameters()) {
      if (!p.requires_grad() || mine[p.impl()]) continue;
      mine[p.impl()] = true;
      ++holders[p.impl()];
      unit_params.back().push_back({path + "." + name, p});
    }
  }
  nn::NamedTensors root_params;
  {
    std::map<TensorImpl*, bool> seen;
    for (auto& [name, p] : module_->named_parameters()) {
      if (!p.requires_grad() || holders[p.impl()] == 1 || seen[p.impl()]) continue;
      seen[p.impl()] = true;
      root_params.push_back({name, p});
    }
  }
  state_ = std::make_shared<State>();
  State& st = *state_;
  st.self = state_;
  st.group = group_;
  st.prefetch = options_.prefetch;
  auto add_unit = [&](const std::string& name, nn::Module* m, const nn::NamedTensors& params) {
    nn::NamedTensors own;
    for (const auto& [n, p] : params) {
      if (m == nullptr || holders[p.impl()] == 1) own.push_back({n, p});
    }
    if (own.empty()) return;
    State::Unit u;
    u.name = name;
    u.module = m;
    const Tensor& p0 = own[0].second;
    u.dtype = p0.dtype();
    u.device = p0.device();
    for (const auto& [n, p] : own) {
      BRISK_CHECK(p.dtype() == u.dtype && p.device() == u.device, "FullyShardedDataParallel: parameter '", n, "' is ",
                  p.str(), " but '", own[0].first, "' of the same unit is ", p0.str(),
                  " (one dtype and device a unit)");
      u.offsets.push_back(u.numel);
      u.numel += p.numel();
      u.params.push_back(p);
    }
    const int64_t n = group_->size();
    u.shard = (u.numel + n - 1) / n;
    NoGradGuard no_grad;
    Tensor flat = zeros({u.shard * n}, u.dtype, u.device);
    for (size_t k = 0; k < u.params.size(); ++k) {
      Tensor& p = u.params[k];
      narrow(flat, 0, u.offsets[k], p.numel()).copy_(reshape(p.detach(), {p.numel()}));
    }
    u.storage = flat.storage();
    for (size_t k = 0; k < u.params.size(); ++k) {
      Tensor& p = u.params[k];
      p.set_data(make_view(u.storage, p.sizes(), contiguous_strides(p.sizes()), u.offsets[k], u.dtype));
      p.zero_grad(true);
    }
    u.shard_param = narrow(flat, 0, u.shard * group_->rank(), u.shard).clone();
    u.phase = State::Phase::Full;
    st.units.push_back(std::move(u));
  };
  add_unit("", nullptr, root_params);
  if (!st.units.empty()) st.root = 0;
  for (size_t k = 0; k < paths.size(); ++k) add_unit(paths[k], mods[k], unit_params[k]);
  BRISK_CHECK(!st.units.empty(), "FullyShardedDataParallel: the module has no trainable parameter");

  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < st.units.size(); ++i) {
    State::Unit& u = st.units[i];
    register_parameter(shard_name(i), u.shard_param, true);
    st.reshard(i);
    for (const Tensor& p : u.params) {
      p.register_post_accumulate_grad_hook([weak, i](Tensor&) {
        if (std::shared_ptr<State> s = weak.lock()) s->on_grad(i);
      });
    }
    if (!u.module) continue;
    u.hooks.push_back(u.module->register_dict_forward_pre_hook([weak, i](nn::Module&, nn::TensorDict&) {
      if (std::shared_ptr<State> s = weak.lock()) s->pre_forward(i);
    }));
    u.hooks.push_back(
        u.module->register_dict_forward_hook([weak, i](nn::Module&, const nn::TensorDict&, nn::TensorDict& out) {
          if (std::shared_ptr<State> s = weak.lock()) s->post_forward(i, out);
        }));
  }
  st.peak = st.transient = 0;
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (State::Unit& u : state_->units) {
    for (int h : u.hooks) u.module->remove_hook(h);
  }
}

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  State& st = *state_;
  BRISK_CHECK(!st.in_backward, "FullyShardedDataParallel: forward called inside its own backward");
  if (st.root >= 0) {  // fresh values: a root left gathered by a forward without backward may be stale
    st.reshard(size_t(st.root));
    st.ensure_full(size_t(st.root));
  }
  st.running.clear();
  st.in_forward = true;
  Tensor out;
  try {
    out = (*module_)(x);
  } catch (...) {
    st.in_forward = false;
    throw;
  }
  st.in_forward = false;
  st.order = st.running;
  for (size_t i = 0; i < st.units.size(); ++i) {
    if (int(i) != st.root) st.reshard(i);  // gathered ahead but not used
  }
  if (st.root >= 0 && !(GradMode::enabled() && out.requires_grad())) st.reshard(size_t(st.root));
  return out;
}

void FullyShardedDataParallel::on_train(bool on) { module_->train(on); }

size_t FullyShardedDataParallel::num_units() const { return state_->units.size(); }
const std::string& FullyShardedDataParallel::unit_name(size_t i) const { return state_->units.at(i).name; }
int64_t FullyShardedDataParallel::unit_numel(size_t i) const { return state_->units.at(i).numel; }
int64_t FullyShardedDataParallel::prefetched() const { return state_->prefetched; }
void FullyShardedDataParallel::reset_peak() { state_->peak = state_->transient; }

FSDPMemory FullyShardedDataParallel::memory() const {
  const State& st = *state_;
  FSDPMemory m;
  for (const State::Unit& u : st.units) {
    m.shard_params += nbytes(u.shard_param);
    m.shard_grads += nbytes(u.shard_param.grad());
    if (u.phase != State::Phase::Sharded) m.gathered_params += st.padded_bytes(u);
    for (const Tensor& p : u.params) m.full_grads += nbytes(p.grad());
  }
  for (const auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) m.replicated += nbytes(p);
  }
  for (const auto& [name, b] : module_->named_buffers()) m.replicated += nbytes(b);
  m.peak_transient = st.peak;
  return m;
}

nn::NamedTensors FullyShardedDataParallel::full_state_dict(bool rank0_only) {
  State& st = *state_;
  BRISK_CHECK(!st.in_forward && !st.in_backward, "FullyShardedDataParallel::full_state_dict: called inside a pass");
  std::vector<bool> was_sharded;
  for (size_t i = 0; i < st.units.size(); ++i) {
    was_sharded.push_back(st.units[i].phase == State::Phase::Sharded);
    st.ensure_full(i);
  }
  nn::NamedTensors out;
  if (!rank0_only || group_->rank() == 0) {
    NoGradGuard no_grad;
    for (const auto& [name, t] : module_->state_dict()) out.push_back({name, t.detach().clone()});
  }
  for (size_t i = 0; i < st.units.size(); ++i) {
    if (was_sharded[i]) st.reshard(i);
  }
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const nn::NamedTensors& state) {
  State& st = *state_;
  BRISK_CHECK(!st.in_forward && !st.in_backward,
              "FullyShardedDataParallel::load_full_state_dict: called inside a pass");
  for (size_t i = 0; i < st.units.size(); ++i) st.ensure_full(i);
  module_->load_state_dict(state);
  NoGradGuard no_grad;
  for (size_t i = 0; i < st.units.size(); ++i) {
    State::Unit& u = st.units[i];
    u.shard_param.copy_(narrow(st.flat_view(u), 0, u.shard * group_->rank(), u.shard));
    st.reshard(i);
  }
}

namespace {

std::string fsdp_file(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("fsdp.rank" + std::to_string(rank) + ".safetensors")).string();
}

using detail::exact;

int64_t meta_int(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  return detail::meta_int(f, key, path, "FullyShardedDataParallel::load_sharded");
}

}  // namespace

void FullyShardedDataParallel::save_sharded(const std::string& dir, const optim::Optimizer* optimizer) const {
  const State& st = *state_;
  std::filesystem::create_directories(dir);
  nn::NamedTensors tensors;
  std::map<std::string, std::string> meta{{"fsdp.world", std::to_string(group_->size())},
                                          {"fsdp.rank", std::to_string(group_->rank())},
                                          {"fsdp.units", std::to_string(st.units.size())}};
  for (size_t i = 0; i < st.units.size(); ++i) {
    const State::Unit& u = st.units[i];
    tensors.push_back({shard_name(i), u.shard_param.detach()});
    const std::string key = "fsdp." + shard_name(i);
    meta[key + ".numel"] = std::to_string(u.numel);
    meta[key + ".shard"] = std::to_string(u.shard);
    meta[key + ".unit"] = u.name;
  }
  if (optimizer) {
    const optim::OptimizerState os = optimizer->state_dict();
    for (const auto& t : os.tensors) tensors.push_back(t);
    for (const auto& [k, v] : os.scalars) meta["scalar." + k] = exact(v);
  }
  save_safetensors(fsdp_file(dir, group_->rank()), tensors, meta);
  group_->barrier()->wait();
}

// Note [Resharding FSDP checkpoints]: as Note [Resharding ZeRO state] in dist/zero.cpp, per
// unit: element e of unit i's padded flat vector sat in old file e / shard_i at offset
// e % shard_i. Tensors of a unit's shard length ("shard<i>" and the optimizer's per-element
// buffers "state.shard<i>.*") are cut anew; the rest (step counts) comes from rank 0's file.
void FullyShardedDataParallel::load_sharded(const std::string& dir, optim::Optimizer* optimizer) {
  State& st = *state_;
  BRISK_CHECK(!st.in_forward && !st.in_backward, "FullyShardedDataParallel::load_sharded: called inside a pass");
  for (size_t i = 0; i < st.units.size(); ++i) st.reshard(i);
  const std::string first_path = fsdp_file(dir, 0);
  const SafetensorsFile head = load_safetensors(first_path);
  const int64_t old_world = meta_int(head, "fsdp.world", first_path);
  BRISK_CHECK(meta_int(head, "fsdp.units", first_path) == int64_t(st.units.size()),
              "FullyShardedDataParallel::load_sharded: ", first_path, " holds ",
              meta_int(head, "fsdp.units", first_path), " units, this model has ", st.units.size());
  std::vector<int64_t> old_shard;
  for (size_t i = 0; i < st.units.size(); ++i) {
    const std::string key = "fsdp." + shard_name(i);
    const int64_t numel = meta_int(head, key + ".numel", first_path);
    BRISK_CHECK(numel == st.units[i].numel, "FullyShardedDataParallel::load_sharded: ", first_path, " holds ", numel,
                " elements for unit ", i, " ('", st.units[i].name, "'), this model's has ", st.units[i].numel);
    old_shard.push_back(meta_int(head, key + ".shard", first_path));
  }
  std::map<int64_t, SafetensorsFile> files;
  files[0] = head;
  optim::OptimizerState os;
  for (const auto& [k, v] : head.metadata) {
    if (k.rfind("scalar.", 0) == 0) os.scalars[k.substr(7)] = std::stod(v);
  }
  NoGradGuard no_grad;
  for (const auto& [name, t0] : head.tensors) {
    const int i = unit_of(name);
    if (i < 0 || i >= int(st.units.size()) || t0.numel() != old_shard[size_t(i)]) {
      os.tensors.push_back({name, t0});  // not per element: the same on every rank
      continue;
    }
    const int64_t shard = st.units[size_t(i)].shard, old = old_shard[size_t(i)];
    const int64_t lo = shard * group_->rank(), hi = lo + shard;
    Tensor mine = zeros({shard}, t0.dtype());
    for (int64_t k = lo / old; k < old_world && k * old < hi; ++k) {
      if (!files.count(k)) files[k] = load_safetensors(fsdp_file(dir, int(k)));
      const Tensor* src = nullptr;
      for (const auto& [n2, t] : files[k].tensors) {
        if (n2 == name) src = &t;
      }
      BRISK_CHECK(src && src->numel() == old, "FullyShardedDataParallel::load_sharded: ", fsdp_file(dir, int(k)),
                  " has no tensor '", name, "' of ", old, " elements");
      const int64_t a = std::max(lo, k * old), b = std::min(hi, (k + 1) * old);
      narrow(mine, 0, a - lo, b - a).copy_(narrow(*src, 0, a - k * old, b - a));
    }
    if (name == shard_name(size_t(i))) {
      st.units[size_t(i)].shard_param.copy_(mine);
    } else {
      os.tensors.push_back({name, mine});
    }
  }
  if (optimizer) optimizer->load_state_dict(os);
  group_->barrier()->wait();
}

}  // namespace brisk::dist
