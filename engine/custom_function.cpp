// engine/custom_function.cpp: the node behind autograd::Function (engine/custom_function.h).
#include "engine/custom_function.h"

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::autograd {

// One call of a custom function: it owns the context (saved tensors, saved_data) and the
// user's backward; its edges point at the tensor inputs that required grad.
class FunctionNode : public Node, public std::enable_shared_from_this<FunctionNode> {
 public:
  FunctionCtx ctx;
  FunctionBackward backward;
  std::vector<TensorSpec> input_specs;

  std::string name() const override { return ctx.name_ + "Backward"; }
  std::string op_label() const override { return ctx.name_; }
  std::vector<Tensor> saved_tensors() override { return ctx.get_saved_variables(); }
  void release() override {
    ctx.saved_.clear();
    ctx.released_ = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const std::string& fn = ctx.name_;
    BRISK_CHECK(!ctx.released_, fn,
                ": backward through the graph a second time (saved tensors were freed); pass retain_graph=true to the "
                "first backward");
    if (ctx.materialize_grads_) {
      for (size_t i = 0; i < grads.size(); ++i)
        if (!grads[i].defined()) grads[i] = zeros(slot_specs[i].sizes, slot_specs[i].dtype, device);
    }
    struct InBackward {  // get_saved_variables is allowed only while backward runs
      FunctionCtx& c;
      explicit InBackward(FunctionCtx& ctx) : c(ctx) { c.in_backward_ = true; }
      ~InBackward() { c.in_backward_ = false; }
    } scope(ctx);
    std::vector<Tensor> result = backward(ctx, std::move(grads));
    BRISK_CHECK(result.size() == input_specs.size(), fn, ": backward returned ", result.size(), " gradients for ",
                input_specs.size(), " tensor inputs");
    for (size_t i = 0; i < result.size(); ++i) {
      if (!ctx.needs_input_grad_[i]) {
        result[i] = Tensor();  // asked for nothing: dropped, as PyTorch does
        continue;
      }
      if (!result[i].defined()) continue;  // no gradient: zero
      BRISK_CHECK(result[i].sizes() == input_specs[i].sizes, fn, ": backward returned a gradient of shape ",
                  result[i].sizes(), " for input ", i, " of shape ", input_specs[i].sizes);
      BRISK_CHECK(is_floating(result[i].dtype()), fn, ": backward returned a ", dtype_name(result[i].dtype()),
                  " gradient for input ", i, "; gradients are floating");
    }
    return result;
  }
};

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) {
  BRISK_CHECK(!in_backward_ && owner_.expired(), name_, ": save_for_backward is called in forward");
  to_save_ = std::move(tensors);
}

std::vector<Tensor> FunctionCtx::get_saved_variables() const {
  BRISK_CHECK(
      !released_, name_,
      ": the saved tensors were freed by a backward; pass retain_graph=true to that backward to use them again");
  std::shared_ptr<Node> owner = owner_.lock();
  BRISK_CHECK(owner, name_, ": get_saved_variables is called in backward (in forward, use the tensors themselves)");
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (const SavedTensor& s : saved_) out.push_back(s.unpack(owner, name_.c_str()));
  return out;
}

void FunctionCtx::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  BRISK_CHECK(owner_.expired(), name_, ": mark_non_differentiable is called in forward");
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.insert(t.impl());
}

bool FunctionCtx::needs_input_grad(size_t i) const {
  BRISK_CHECK(i < needs_input_grad_.size(), name_, ": needs_input_grad(", i, ") of a function with ",
              needs_input_grad_.size(), " tensor inputs");
  return needs_input_grad_[i];
}

std::vector<Tensor> apply_function(const std::string& name, const std::vector<Tensor>& inputs,
                                   const FunctionForward& forward, FunctionBackward backward) {
  BRISK_CHECK(!name.empty(), "apply_function: the function needs a name");
  BRISK_CHECK(forward && backward, name, ": forward and backward must both be given");
  FunctionCtx ctx;
  ctx.name_ = name;
  const bool recording = GradMode::enabled();
  bool any = false;
  ctx.needs_input_grad_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ctx.needs_input_grad_[i] = recording && inputs[i].defined() && inputs[i].requires_grad();
    any = any || ctx.needs_input_grad_[i];
  }

  std::vector<Tensor> outs;
  {
    NoGradGuard off;  // the forward's own ops are not recorded: this node stands for them
    outs = forward(ctx);
  }
  BRISK_CHECK(!outs.empty(), name, ": forward returned no tensor");
  for (size_t i = 0; i < outs.size(); ++i) {
    BRISK_CHECK(outs[i].defined(), name, ": forward's output ", i, " is undefined");
    for (const Tensor& in : inputs)  // an input returned as is would get this node as its history
      if (in.defined() && outs[i].impl() == in.impl()) outs[i] = outs[i].clone();
  }
  if (!any) return outs;  // nothing to differentiate: no node, nothing saved

  // Made after forward, the node's sequence number is above every input's producer: the engine
  // runs it before them.
  auto node = std::make_shared<FunctionNode>();
  node->ctx = std::move(ctx);
  FunctionCtx& c = node->ctx;
  node->backward = std::move(backward);
  node->device = outs[0].device();
  node->next_edges.resize(inputs.size());
  node->input_specs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    node->input_specs[i] = {inputs[i].sizes(), inputs[i].dtype()};
    if (c.needs_input_grad_[i]) node->next_edges[i] = gradient_edge(inputs[i]);
  }
  node->slot_specs.resize(outs.size());
  std::vector<Tensor> differentiable(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    node->slot_specs[i] = {outs[i].sizes(), outs[i].dtype()};
    if (!c.non_differentiable_.count(outs[i].impl())) differentiable[i] = outs[i];
  }
  set_history(differentiable, node);  // slot i is output i; marked and integer outputs skipped
  c.owner_ = node;

  // Pack what forward saved: an output keeps only its data (its grad_fn is this node).
  c.saved_.reserve(c.to_save_.size());
  for (const Tensor& t : c.to_save_) {
    if (!t.defined()) {
      c.saved_.emplace_back();
      continue;
    }
    bool is_output = false;
    for (const Tensor& o : differentiable) is_output = is_output || (o.defined() && o.impl() == t.impl());
    c.saved_.emplace_back(t, is_output);
  }
  c.to_save_.clear();
  c.non_differentiable_.clear();
  return outs;
}

}  // namespace brisk::autograd
