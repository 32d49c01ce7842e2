// nn/module.h: Module, the unit models are built from: named parameters, buffers and child
// modules (dotted names exactly as PyTorch names the same architecture, so weights move
// between the two), train/eval, device and dtype moves, freezing, state_dict, and forward
// hooks (pruning and quantization hang masks and observers there), one-tensor and named-tensor
// forwards (TensorDict, Note [Module signatures]). Containers: Sequential,
// ModuleList, ModuleDict. Not here: the layers themselves (nn/layers.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace brisk::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict found: keys the module has but the file lacks, keys the file has but the
// module lacks, and keys present in both with different shapes.
struct LoadReport {
  std::vector<std::string> missing{};
  std::vector<std::string> unexpected{};
  std::vector<std::string> shape_mismatch{};  // "name: file (a, b) vs module (c, d)"
  bool ok() const { return missing.empty() && unexpected.empty() && shape_mismatch.empty(); }
  std::string str() const;
};

// Several named tensors, in order: the inputs or outputs of a module with more than one (a
// two-headed model, a backbone that returns features, attention's query/key/value). Names are
// unique; at() and operator[] on a missing name throw brisk::Error listing the names present.
class TensorDict {
 public:
  TensorDict() = default;
  TensorDict(std::initializer_list<std::pair<std::string, Tensor>> items);
  explicit TensorDict(NamedTensors items);
  // Adds or replaces `name` (a new name goes last).
  TensorDict& set(const std::string& name, Tensor t);
  const Tensor& at(const std::string& name) const;
  Tensor& at(const std::string& name);
  const Tensor& operator[](const std::string& name) const { return at(name); }
  Tensor& operator[](const std::string& name) { return at(name); }
  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  // The only tensor; brisk::Error naming `who` when there is not exactly one.
  const Tensor& only(const std::string& who) const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  const NamedTensors& items() const { return items_; }

 private:
  NamedTensors items_;
};

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // Note [Module signatures]: a module's forward takes one tensor (most layers) or several
  // named ones (forward_dict: a two-headed model, a backbone returning features). Override
  // either; each default runs the other, so every module can be called both ways:
  //   forward(x)         = forward_dict({{"input", x}}), which must give exactly one tensor;
  //   forward_dict(in)   = {{"output", forward(in.only())}} for exactly one input.
  // A module overriding neither throws brisk::Error when called. operator() runs the hooks,
  // derived tensors and scopes around either. A module whose forward takes more than the tensor
  // (masks, flags: TransformerEncoderLayer's `layer(src, src_mask, padding_mask, is_causal)`)
  // adds an operator() overload built on call_with(), so such calls run the hooks too.
  virtual Tensor forward(const Tensor& x);
  virtual TensorDict forward_dict(const TensorDict& inputs);
  Tensor operator()(const Tensor& x);
  TensorDict operator()(const TensorDict& inputs);

  // ---- registration (names must be unique per module and contain no dot)
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: the child must derive from brisk::nn::Module");
    add_child(name, m);
    return m;
  }
  // Swaps a child (fine-tuning replaces the classifier head). `path` may be dotted.
  void replace_module(const std::string& path, ModulePtr m);

  // ---- traversal (registration order, depth first, PyTorch's names)
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  ModulePtr child(const std::string& name) const;  // nullptr when absent
  Module& submodule(const std::string& path);      // dotted path; throws when absent
  Tensor& parameter(const std::string& name);      // direct parameter; throws when absent
  Tensor& buffer(const std::string& name);
  // The direct parameter / buffer `name`, or an undefined tensor (optional bias, stats).
  Tensor maybe_parameter(const std::string& name) const;
  Tensor maybe_buffer(const std::string& name) const;
  // Unregisters a direct parameter / buffer and returns it (PyTorch's `del m._parameters[name]`;
  // pruning renames `weight` to `weight_orig` this way, keeping the tensor's identity).
  Tensor remove_parameter(const std::string& name);
  Tensor remove_buffer(const std::string& name);

  // ---- derived tensors: PyTorch's plain tensor attributes that a forward pre-hook recomputes
  // (a pruned module's `weight` = weight_orig * weight_mask, compress/prune.h). fn runs when set and
  // before each call's forward (before the pre-hooks), in the caller's grad mode, so gradients
  // flow through it; parameter(name) and maybe_parameter(name) return the latest value when no
  // parameter has that name. Neither a parameter nor a buffer: not in state_dict.
  using DeriveFn = std::function<Tensor(Module&)>;
  void set_derived(const std::string& name, DeriveFn fn);
  void remove_derived(const std::string& name);
  bool has_derived(const std::string& name) const;
  std::vector<std::string> derived_names() const;

  // ---- state
  // Parameters and persistent buffers, as PyTorch's state_dict (same keys, same order).
  NamedTensors state_dict() const;
  // Copies values in place (device and dtype of the module kept). strict: any missing,
  // unexpected or mis-shaped key is an error listing them; otherwise they are reported.
  LoadReport load_state_dict(const NamedTensors& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device device);
  void to(DType dtype);  // floating parameters and buffers only
  void zero_grad(bool set_to_none = true);
  void requires_grad_(bool on);  // freeze (false) or unfreeze every parameter
  int64_t num_parameters(bool trainable_only = false) const;
  void apply(const std::function<void(Module&)>& fn);  // children first, then this

  // ---- hooks
  using ForwardPreHook = std::function<void(Module&, Tensor& input)>;
  using ForwardHook = std::function<void(Module&, const Tensor& input, Tensor& output)>;
  int register_forward_pre_hook(ForwardPreHook hook);
  int register_forward_hook(ForwardHook hook);
  // Hooks that see every call, as named tensors: a single-tensor call shows {"input": x} and
  // {"output": y}, and what the hook writes there is what the call uses and returns. The
  // single-tensor hooks above see single-tensor calls only (those of call_with() included, which
  // show the first tensor). Both kinds run in registration order within their kind, tensor
  // hooks first.
  using DictForwardPreHook = std::function<void(Module&, TensorDict& inputs)>;
  using DictForwardHook = std::function<void(Module&, const TensorDict& inputs, TensorDict& outputs)>;
  int register_dict_forward_pre_hook(DictForwardPreHook hook);
  int register_dict_forward_hook(DictForwardHook hook);
  void remove_hook(int handle);  // any kind

  // A line per module: its type, the parameters of its subtree and, where it holds any, its
  // buffers' values and bytes ("fc: DynamicQuantLinear (0 parameters; buffers: 2056 values,
  // 2116 bytes)" for a quantized layer, whose weights are buffers).
  std::string summary() const;

  // The scope this module's ops run in while scopes are tracked (anomaly mode, a
  // NonfiniteWatch: engine/nonfinite.h): its path from the module first called as a root
  // ("layer2.0.conv1"; "" for the root). name_scopes() (re)names this module's tree.
  const std::string& scope() const { return scope_; }
  void name_scopes();
  // Whether calling the module does more than forward(): hooks, or derived parameters (pruning's
  // masks) to refresh. Sequential reorders only children without it (Note [ReLU before max pool]).
  bool has_call_work() const;
  // Traits Sequential's reordering reads (Note [ReLU before max pool] in nn/module.cpp), so that
  // the container needs to know no layer: a map applied to each element on its own that is
  // monotone non-decreasing with zero gradient where it is flat (ReLU), and a maximum over
  // windows of the input that sends the gradient to the first maximum (MaxPool2d).
  virtual bool commutes_with_window_max() const { return false; }
  virtual bool is_window_max() const { return false; }

 protected:
  // Called by train(); layers whose behaviour changes (dropout, batch norm) read is_training().
  virtual void on_train(bool) {}

  // A call with arguments beyond one tensor: what operator()(x) runs (scope, derived tensors,
  // hooks) around forward_fn(x) instead of forward(x). The hooks see x as the input (PyTorch's
  // hooks see it as args[0]), a pre-hook's replacement is what forward_fn gets, and forward_fn's
  // result is the output. forward_fn captures the other arguments:
  //   return call_with(src, [&](const Tensor& s) { return forward(s, src_mask, padding_mask, is_causal); });
  using ForwardFn = std::function<Tensor(const Tensor&)>;
  Tensor call_with(const Tensor& x, const ForwardFn& forward_fn);

 private:
  void add_child(const std::string& name, ModulePtr m);
  Tensor call_scoped(const Tensor& x, const ForwardFn* forward_fn);
  Tensor call_with_hooks(const Tensor& x, const ForwardFn* forward_fn);
  TensorDict call_dict_with_hooks(const TensorDict& x);
  void collect(const std::string& prefix, bool params, bool recurse, bool persistent_only, NamedTensors& out) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::string> non_persistent_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  struct Derived {
    std::string name;
    DeriveFn fn;
    Tensor value;
  };
  std::vector<Derived> derived_;
  void refresh_derived();
  std::vector<std::pair<int, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> hooks_;
  std::vector<std::pair<int, DictForwardPreHook>> dict_pre_hooks_;
  std::vector<std::pair<int, DictForwardHook>> dict_hooks_;
  struct DefaultForward;  // the two default forwards calling each other (neither overridden)
  int next_hook_ = 0;
  std::string scope_;
  bool scope_named_ = false;
};

// Runs its children in order; children are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const std::vector<ModulePtr>& modules);
  // Named children, as PyTorch's Sequential(OrderedDict(...)): {{"fc1", fc1}, {"act", act}}.
  Sequential(std::initializer_list<std::pair<std::string, ModulePtr>> named);
  Sequential& push_back(ModulePtr m);
  Sequential& push_back(const std::string& name, ModulePtr m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return named_children().size(); }
  ModulePtr operator[](size_t i) const;
};

// Holds modules by index ("0", "1", ...); forward is the owner's business.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<ModulePtr> modules);
  ModuleList& push_back(ModulePtr m);
  size_t size() const { return named_children().size(); }
  ModulePtr operator[](size_t i) const;
  // for (const nn::ModulePtr& block : blocks) x = (*block)(x); begin() takes a fresh snapshot
  // of the children (replace_module included), which end() shares.
  std::vector<ModulePtr>::const_iterator begin() const;
  std::vector<ModulePtr>::const_iterator end() const { return items_.end(); }

 private:
  mutable std::vector<ModulePtr> items_;
};

// Holds modules by name; forward is the owner's business.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  ModuleDict& insert(const std::string& name, ModulePtr m);
  ModulePtr operator[](const std::string& name) const;
  bool contains(const std::string& name) const { return child(name) != nullptr; }
};

}  // namespace brisk::nn
