// nn/module.cpp: Module's registration, traversal, state and hooks; the containers.
#include "nn/module.h"

#include <algorithm>
#include <sstream>
#include <typeinfo>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/nonfinite.h"

namespace brisk::nn {

std::string LoadReport::str() const {
  std::ostringstream s;
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    s << what << ":";
    for (const auto& k : v) s << " " << k;
    s << "; ";
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  list("shape mismatches", shape_mismatch);
  return s.str();
}

// ---- TensorDict

TensorDict::TensorDict(std::initializer_list<std::pair<std::string, Tensor>> items) {
  for (const auto& [name, t] : items) {
    BRISK_CHECK(!contains(name), "TensorDict: the name '", name, "' appears twice");
    items_.emplace_back(name, t);
  }
}

TensorDict::TensorDict(NamedTensors items) {
  for (auto& [name, t] : items) {
    BRISK_CHECK(!contains(name), "TensorDict: the name '", name, "' appears twice");
    items_.emplace_back(std::move(name), std::move(t));
  }
}

TensorDict& TensorDict::set(const std::string& name, Tensor t) {
  for (auto& [n, v] : items_) {
    if (n == name) {
      v = std::move(t);
      return *this;
    }
  }
  items_.emplace_back(name, std::move(t));
  return *this;
}

bool TensorDict::contains(const std::string& name) const {
  return std::any_of(items_.begin(), items_.end(), [&](const auto& p) { return p.first == name; });
}

std::vector<std::string> TensorDict::names() const {
  std::vector<std::string> v;
  for (const auto& p : items_) v.push_back(p.first);
  return v;
}

namespace {
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}
}  // namespace

Tensor& TensorDict::at(const std::string& name) {
  for (auto& [n, v] : items_)
    if (n == name) return v;
  BRISK_FAIL("TensorDict: no tensor named '", name, "' (it holds: ", joined(names()), ")");
}

const Tensor& TensorDict::at(const std::string& name) const { return const_cast<TensorDict*>(this)->at(name); }

const Tensor& TensorDict::only(const std::string& who) const {
  BRISK_CHECK(items_.size() == 1, who, ": expected exactly one tensor, got ", items_.size(), " (", joined(names()),
              ")");
  return items_[0].second;
}

// ---- forward (Note [Module signatures])

// The two defaults call each other; a module that overrides neither would recurse, so the second
// default entered on the same module, on the same thread, is the error (per thread: one module
// may run on several threads at once).
thread_local std::vector<const Module*> t_in_default_forward;

struct Module::DefaultForward {
  explicit DefaultForward(const Module& m) {
    BRISK_CHECK(std::find(t_in_default_forward.begin(), t_in_default_forward.end(), &m) == t_in_default_forward.end(),
                m.type_name_,
                ": this module defines no forward: override forward(const Tensor&) or "
                "forward_dict(const TensorDict&)");
    t_in_default_forward.push_back(&m);
  }
  ~DefaultForward() { t_in_default_forward.pop_back(); }
  DefaultForward(const DefaultForward&) = delete;
  DefaultForward& operator=(const DefaultForward&) = delete;
};

Tensor Module::forward(const Tensor& x) {
  DefaultForward guard(*this);
  return forward_dict(TensorDict{{"input", x}}).only(type_name_ + ": forward of one tensor (forward_dict's outputs)");
}

TensorDict Module::forward_dict(const TensorDict& inputs) {
  const Tensor& x = inputs.only(type_name_ + ": forward_dict of a single-tensor module (its inputs)");
  DefaultForward guard(*this);
  return TensorDict{{"output", forward(x)}};
}

bool Module::has_call_work() const {
  return !pre_hooks_.empty() || !hooks_.empty() || !dict_pre_hooks_.empty() || !dict_hooks_.empty() ||
         !derived_.empty();
}

Tensor Module::operator()(const Tensor& x) { return call_scoped(x, nullptr); }

Tensor Module::call_with(const Tensor& x, const ForwardFn& forward_fn) { return call_scoped(x, &forward_fn); }

// forward_fn null: forward(x).
Tensor Module::call_scoped(const Tensor& x, const ForwardFn* forward_fn) {
  if (BRISK_UNLIKELY(scopes_tracked())) {
    if (!scope_named_) name_scopes();  // first called as a root: name the tree below
    ScopeGuard scope(scope_);
    return call_with_hooks(x, forward_fn);
  }
  return call_with_hooks(x, forward_fn);
}

TensorDict Module::operator()(const TensorDict& inputs) {
  if (BRISK_UNLIKELY(scopes_tracked())) {
    if (!scope_named_) name_scopes();
    ScopeGuard scope(scope_);
    return call_dict_with_hooks(inputs);
  }
  return call_dict_with_hooks(inputs);
}

void Module::name_scopes() {
  for (auto& [path, m] : named_modules()) {
    m->scope_ = path;
    m->scope_named_ = true;
  }
}

Tensor Module::call_with_hooks(const Tensor& x, const ForwardFn* forward_fn) {
  auto run = [&](const Tensor& in) { return forward_fn ? (*forward_fn)(in) : forward(in); };
  if (!has_call_work()) return run(x);
  refresh_derived();
  Tensor in = x;
  for (auto& [id, hook] : pre_hooks_) hook(*this, in);
  if (!dict_pre_hooks_.empty()) {
    TensorDict d{{"input", in}};
    for (auto& [id, hook] : dict_pre_hooks_) hook(*this, d);
    in = d.only(type_name_ + ": a dict forward pre-hook of a single-tensor call (its inputs)");
  }
  Tensor out = run(in);
  for (auto& [id, hook] : hooks_) hook(*this, in, out);
  if (!dict_hooks_.empty()) {
    const TensorDict din{{"input", in}};
    TensorDict dout{{"output", out}};
    for (auto& [id, hook] : dict_hooks_) hook(*this, din, dout);
    out = dout.only(type_name_ + ": a dict forward hook of a single-tensor call (its outputs)");
  }
  return out;
}

TensorDict Module::call_dict_with_hooks(const TensorDict& inputs) {
  if (!has_call_work()) return forward_dict(inputs);
  refresh_derived();
  TensorDict in = inputs;
  for (auto& [id, hook] : dict_pre_hooks_) hook(*this, in);
  TensorDict out = forward_dict(in);
  for (auto& [id, hook] : dict_hooks_) hook(*this, in, out);
  return out;
}

namespace {
void check_name(const std::string& owner, const std::string& name, const char* what) {
  BRISK_CHECK(!name.empty() && name.find('.') == std::string::npos, owner, ": invalid ", what, " name '", name,
              "' (must be non-empty and contain no '.')");
}
template <class V>
auto find_named(V& v, const std::string& name) {
  return std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
}
}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(type_name_, name, "parameter");
  BRISK_CHECK(find_named(params_, name) == params_.end(), type_name_, ": parameter '", name, "' already exists");
  if (t.defined() && requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_name(type_name_, name, "buffer");
  BRISK_CHECK(find_named(buffers_, name) == buffers_.end(), type_name_, ": buffer '", name, "' already exists");
  buffers_.emplace_back(name, std::move(t));
  if (!persistent) non_persistent_.push_back(name);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, ModulePtr m) {
  check_name(type_name_, name, "module");
  BRISK_CHECK(m, type_name_, ": module '", name, "' is null");
  BRISK_CHECK(find_named(children_, name) == children_.end(), type_name_, ": module '", name, "' already exists");
  children_.emplace_back(name, std::move(m));
}

void Module::replace_module(const std::string& path, ModulePtr m) {
  BRISK_CHECK(m, type_name_, ": replace_module('", path, "') with a null module");
  size_t dot = path.rfind('.');
  Module& owner = dot == std::string::npos ? *this : submodule(path.substr(0, dot));
  std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  auto it = find_named(owner.children_, leaf);
  BRISK_CHECK(it != owner.children_.end(), type_name_, ": no submodule '", path, "' to replace");
  it->second = std::move(m);
}

void Module::collect(const std::string& prefix, bool params, bool recurse, bool persistent_only,
                     NamedTensors& out) const {
  const auto& own = params ? params_ : buffers_;
  for (const auto& [name, t] : own) {
    if (!t.defined()) continue;
    if (persistent_only && !params &&
        std::find(non_persistent_.begin(), non_persistent_.end(), name) != non_persistent_.end()) {
      continue;
    }
    out.emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, true, persistent_only, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", true, recurse, false, out);
  // A parameter shared by two modules appears once, under its first name (as PyTorch).
  NamedTensors unique;
  for (auto& p : out) {
    bool seen =
        std::any_of(unique.begin(), unique.end(), [&](const auto& q) { return q.second.impl() == p.second.impl(); });
    if (!seen) unique.push_back(std::move(p));
  }
  return unique;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, recurse, false, out);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (auto& [name, child] : children_) {
    auto sub = child->named_modules(prefix.empty() ? name : prefix + "." + name);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

ModulePtr Module::child(const std::string& name) const {
  auto it = find_named(children_, name);
  return it == children_.end() ? nullptr : it->second;
}

Module& Module::submodule(const std::string& path) {
  Module* m = this;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    ModulePtr c = m->child(part);
    BRISK_CHECK(c, type_name_, ": no submodule '", path, "' (missing '", part, "')");
    m = c.get();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *m;
}

Tensor& Module::parameter(const std::string& name) {
  auto it = find_named(params_, name);
  if (it != params_.end()) return it->second;
  auto d = std::find_if(derived_.begin(), derived_.end(), [&](const Derived& e) { return e.name == name; });
  BRISK_CHECK(d != derived_.end(), type_name_, ": no parameter '", name, "'");
  return d->value;
}

Tensor& Module::buffer(const std::string& name) {
  auto it = find_named(buffers_, name);
  BRISK_CHECK(it != buffers_.end(), type_name_, ": no buffer '", name, "'");
  return it->second;
}

Tensor Module::maybe_parameter(const std::string& name) const {
  auto it = find_named(params_, name);
  if (it != params_.end()) return it->second;
  auto d = std::find_if(derived_.begin(), derived_.end(), [&](const Derived& e) { return e.name == name; });
  return d == derived_.end() ? Tensor() : d->value;
}

Tensor Module::remove_parameter(const std::string& name) {
  auto it = find_named(params_, name);
  BRISK_CHECK(it != params_.end(), type_name_, ": remove_parameter: no parameter '", name, "'");
  Tensor t = std::move(it->second);
  params_.erase(it);
  return t;
}

Tensor Module::remove_buffer(const std::string& name) {
  auto it = find_named(buffers_, name);
  BRISK_CHECK(it != buffers_.end(), type_name_, ": remove_buffer: no buffer '", name, "'");
  Tensor t = std::move(it->second);
  buffers_.erase(it);
  std::erase(non_persistent_, name);
  return t;
}

void Module::set_derived(const std::string& name, DeriveFn fn) {
  check_name(type_name_, name, "derived tensor");
  BRISK_CHECK(find_named(params_, name) == params_.end(), type_name_, ": set_derived: '", name,
              "' is a parameter (remove it first)");
  BRISK_CHECK(fn, type_name_, ": set_derived('", name, "') with an empty function");
  Tensor value = fn(*this);
  auto d = std::find_if(derived_.begin(), derived_.end(), [&](const Derived& e) { return e.name == name; });
  if (d != derived_.end()) {
    d->fn = std::move(fn);
    d->value = std::move(value);
  } else {
    derived_.push_back({name, std::move(fn), std::move(value)});
  }
}

void Module::remove_derived(const std::string& name) {
  auto n = std::erase_if(derived_, [&](const Derived& e) { return e.name == name; });
  BRISK_CHECK(n > 0, type_name_, ": remove_derived: no derived tensor '", name, "'");
}

bool Module::has_derived(const std::string& name) const {
  return std::any_of(derived_.begin(), derived_.end(), [&](const Derived& e) { return e.name == name; });
}

std::vector<std::string> Module::derived_names() const {
  std::vector<std::string> out;
  for (const auto& e : derived_) out.push_back(e.name);
  return out;
}

void Module::refresh_derived() {
  for (auto& e : derived_) e.value = e.fn(*this);
}

Tensor Module::maybe_buffer(const std::string& name) const {
  auto it = find_named(buffers_, name);
  return it == buffers_.end() ? Tensor() : it->second;
}

NamedTensors Module::state_dict() const {
  // PyTorch orders each module's parameters, then its buffers, then its children.
  NamedTensors out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    m.collect(prefix, true, false, false, out);
    m.collect(prefix, false, false, true, out);
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".");
  };
  walk(*this, "");
  return out;
}

LoadReport Module::load_state_dict(const NamedTensors& state, bool strict) {
  LoadReport report;
  NamedTensors mine = state_dict();
  std::map<std::string, const Tensor*> given;
  for (const auto& [k, t] : state) given[k] = &t;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (auto& [k, t] : mine) {
    auto it = given.find(k);
    if (it == given.end()) {
      report.missing.push_back(k);
      continue;
    }
    const Tensor& src = *it->second;
    if (!(src.sizes() == t.sizes())) {
      report.shape_mismatch.push_back(detail::cat(k, ": file ", src.sizes(), " vs module ", t.sizes()));
    } else {
      copies.emplace_back(t, &src);
    }
    given.erase(it);
  }
  for (const auto& [k, t] : given) report.unexpected.push_back(k);
  BRISK_CHECK(!strict || report.ok(), "load_state_dict (", type_name_, "): ", report.str());
  NoGradGuard ng;
  for (auto& [dst, src] : copies) {
    const bool same =
        dst.data_ptr() == src->data_ptr() && dst.dtype() == src->dtype() && dst.strides() == src->strides();
    if (same) continue;  // read in place (nn::load_module)
    dst.copy_(*src);
  }
  return report;
}

void Module::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device) {
  NoGradGuard ng;
  for (auto& [n, t] : params_) {
    if (t.defined() && !(t.device() == device)) t.set_data(t.detach().to(device));
  }
  for (auto& [n, t] : buffers_) {
    if (t.defined() && !(t.device() == device)) t.set_data(t.to(device));
  }
  refresh_derived();
  for (auto& [n, c] : children_) c->to(device);
}

void Module::to(DType dtype) {
  BRISK_CHECK(is_floating(dtype), type_name_, ": to(", dtype, "): modules convert to floating dtypes only");
  NoGradGuard ng;
  for (auto& [n, t] : params_) {
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(cast(t.detach(), dtype));
  }
  for (auto& [n, t] : buffers_) {
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(cast(t, dtype));
  }
  refresh_derived();
  for (auto& [n, c] : children_) c->to(dtype);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) p.zero_grad(set_to_none);
}

void Module::requires_grad_(bool on) {
  for (Tensor& p : parameters()) p.requires_grad_(on);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_) c->apply(fn);
  fn(*this);
}

int Module::register_forward_pre_hook(ForwardPreHook hook) {
  pre_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

int Module::register_forward_hook(ForwardHook hook) {
  hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

int Module::register_dict_forward_pre_hook(DictForwardPreHook hook) {
  dict_pre_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

int Module::register_dict_forward_hook(DictForwardHook hook) {
  dict_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

void Module::remove_hook(int handle) {
  auto same = [&](const auto& p) { return p.first == handle; };
  std::erase_if(pre_hooks_, same);
  std::erase_if(hooks_, same);
  std::erase_if(dict_pre_hooks_, same);
  std::erase_if(dict_hooks_, same);
}

std::string Module::summary() const {
  std::ostringstream s;
  std::function<void(const Module&, const std::string&, int)> walk = [&](const Module& m, const std::string& name,
                                                                         int depth) {
    // Buffers too (BN statistics, a quantized layer's int8 weights and scales): a compressed
    // model's summary says what it holds, not "0 parameters".
    int64_t values = 0, bytes = 0;
    for (const auto& [n, b] : m.named_buffers()) {
      values += b.numel();
      bytes += b.numel() * int64_t(dtype_size(b.dtype()));
    }
    s << std::string(size_t(depth) * 2, ' ') << (name.empty() ? "" : name + ": ") << m.type_name_ << " ("
      << m.num_parameters() << " parameters";
    if (values > 0) s << "; buffers: " << values << " values, " << bytes << " bytes";
    s << ")\n";
    for (const auto& [n, c] : m.children_) walk(*c, n, depth + 1);
  };
  walk(*this, "", 0);
  return s.str();
}

// ---- containers
Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<ModulePtr>& modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(std::initializer_list<std::pair<std::string, ModulePtr>> named) : Module("Sequential") {
  for (const auto& [name, m] : named) push_back(name, m);
}

Sequential& Sequential::push_back(ModulePtr m) { return push_back(std::to_string(size()), std::move(m)); }

Sequential& Sequential::push_back(const std::string& name, ModulePtr m) {
  register_module(name, std::move(m));
  return *this;
}

// Note [ReLU before max pool]
// max_pool2d(relu(x)) == relu(max_pool2d(x)) for any window, padding, dilation and ceil mode:
// relu is monotone, so the window's maximum maps to the maximum of the relus, and every window
// holds at least one real element. The gradients agree too: where the window's maximum is
// positive both send g to the same first maximum; where it is <= 0 both give zero (relu's
// gradient at the chosen element, or at the pooled value); a NaN propagates and gets zero
// gradient either way. So Sequential runs a ReLU followed by a MaxPool2d in the other order:
// the ReLU then touches a quarter of the elements (2x2 pools) and its full-size output and
// gradient are never made (in the Fashion-MNIST CNN ~5% of the epoch). Sequential asks the
// children's traits (Module::commutes_with_window_max, Module::is_window_max: nn::ReLU and
// nn::MaxPool2d say yes) rather than knowing the layers, and swaps only children with no hooks
// (a hook on either would see the swap).
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const auto children = named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    Module& m = *children[i].second;
    if (i + 1 < children.size()) {
      Module& next = *children[i + 1].second;
      if (m.commutes_with_window_max() && next.is_window_max() && !m.has_call_work() && !next.has_call_work()) {
        h = m(next(h));
        ++i;
        continue;
      }
    }
    h = m(h);
  }
  return h;
}

ModulePtr Sequential::operator[](size_t i) const {
  auto c = named_children();
  BRISK_CHECK(i < c.size(), "Sequential: index ", i, " out of range (size ", c.size(), ")");
  return c[i].second;
}

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) : Module("ModuleList") {
  for (const auto& m : modules) push_back(m);
}

ModuleList& ModuleList::push_back(ModulePtr m) {
  register_module(std::to_string(size()), std::move(m));
  return *this;
}

std::vector<ModulePtr>::const_iterator ModuleList::begin() const {
  items_.clear();
  for (auto& [name, m] : named_children()) items_.push_back(m);
  return items_.begin();
}

ModulePtr ModuleList::operator[](size_t i) const {
  auto c = named_children();
  BRISK_CHECK(i < c.size(), "ModuleList: index ", i, " out of range (size ", c.size(), ")");
  return c[i].second;
}

ModuleDict& ModuleDict::insert(const std::string& name, ModulePtr m) {
  register_module(name, std::move(m));
  return *this;
}

ModulePtr ModuleDict::operator[](const std::string& name) const {
  ModulePtr m = child(name);
  BRISK_CHECK(m, "ModuleDict: no module '", name, "'");
  return m;
}

}  // namespace brisk::nn
