// engine/autograd.h: the tape. A Node is one recorded op; its edges point at the nodes that
// produced its inputs (or at a leaf's AccumulateGrad). Outputs own their node, so a graph
// frees itself when the last output goes. backward() walks nodes in decreasing sequence
// number with dependency counts: no recursion, so a chain of 1e5 ops is fine.
// Not here: the backward formulas (they sit beside each op in engine/ops/).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/grad_mode.h"
#include "engine/op.h"
#include "engine/tensor.h"

namespace brisk {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
  int input_nr = 0;            // which of node's gradient slots this edge feeds
};

// Per-tensor autograd state. Exists only for tensors that take part in autograd.
struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;         // null for leaves
  int output_nr = 0;                     // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  // leaves: their AccumulateGrad, made on demand
  std::vector<GradHook> hooks;           // leaves: run on the incoming gradient
  std::vector<PostAccumulateHook> post_hooks;
};

class Node {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The node's name as PyTorch names it: "MulBackward0", "MmBackward0", "AccumulateGrad"
  // (what grad_fn shows when a tensor prints, and explain's graphs).
  virtual std::string name() const = 0;
  // The forward op the node differentiates ("mul", "matmul"); name() for nodes of no op. The
  // profiler's backward ranges and error messages use it.
  virtual std::string op_label() const { return name(); }
  // The tensors the node saved for backward (PyTorch's _saved_* attributes): an OpNode's saved
  // inputs in input order, then its saved outputs. An error after a backward without
  // retain_graph freed them; empty for nodes that save nothing.
  virtual std::vector<Tensor> saved_tensors() { return {}; }
  // grads: one per gradient slot (forward output). Returns one gradient per next edge.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release() {}
  // Number of gradient slots (forward outputs).
  int num_slots() const { return int(slot_specs.size()); }
  // True for a leaf's AccumulateGrad (a stored tag: the engine asks it on every node that
  // grad() reaches, where a dynamic_cast would cost a type-info walk).
  bool is_accumulator() const { return is_accumulator_; }

  std::vector<Edge> next_edges;
  std::vector<TensorSpec> slot_specs;  // sizes/dtype of each forward output (zero-filling)
  Device device;
  uint64_t sequence_nr;
  std::vector<std::pair<int, GradHook>> pre_hooks;  // (slot, hook): hooks of non-leaf tensors
  std::string scope;  // the module path the op ran in, kept while scopes are tracked (engine/nonfinite.h)

 protected:
  bool is_accumulator_ = false;
};

// A tensor saved for backward. Saved inputs keep the tensor; saved outputs keep only the data
// (their grad_fn is the saving node itself, so holding it would be a cycle) and get their
// autograd identity back on unpack. The storage version at save time is checked on unpack.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  Tensor unpack(const std::shared_ptr<Node>& owner, const char* op) const;
  bool defined() const { return data_.defined(); }
  void reset() { data_ = Tensor(); }
  Tensor& data() { return data_; }

 private:
  Tensor data_;
  uint32_t version_ = 0;
  int output_nr_ = 0;
  bool is_output_ = false;
  bool requires_grad_ = false;
};

// The node recorded for one call of an OpDef.
class OpNode : public Node, public std::enable_shared_from_this<OpNode> {
 public:
  OpId op;
  Attrs attrs;
  std::vector<SavedTensor> saved_inputs;   // sized n_in; defined where save_inputs says
  std::vector<SavedTensor> saved_outputs;  // sized n_out
  std::vector<TensorSpec> input_specs;
  uint32_t needs_grad_mask = 0;
  bool released = false;

  ~OpNode() override;
  std::string name() const override;
  std::string op_label() const override;
  std::vector<Tensor> saved_tensors() override;
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release() override;
};

// Sink for a leaf's gradient: runs its hooks, accumulates into .grad, runs post hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

  std::weak_ptr<TensorImpl> leaf;
};

// The edge through which a gradient reaches `t`: its grad_fn slot, or its AccumulateGrad.
Edge gradient_edge(const Tensor& t);

// Records `node` as the producer of `outputs` (floating outputs become requires_grad).
void set_history(std::span<Tensor> outputs, const std::shared_ptr<Node>& node);

namespace detail {
// Explain mode's step-through backward (engine/explain.h): called on this thread for every
// node the backward engine runs, with the gradients it received and the ones it returned
// (one per next edge). Null (the default): none, and the engine pays one thread-local load
// per node.
struct BackwardObserver {
  virtual ~BackwardObserver() = default;
  virtual void on_node(const Node& node, std::span<const Tensor> grads_in, std::span<const Tensor> grads_out) = 0;
};
BackwardObserver*& backward_observer();
}  // namespace detail

// Queues fn to run on this thread when the backward pass now running on it has finished its
// last node, before backward() returns (PyTorch's Engine.queue_callback; DistributedDataParallel
// waits for its last gradient buckets there). Outside a backward pass it is an error.
void queue_callback(std::function<void()> fn);

// Reverse-mode differentiation of `outputs` (scalars unless grad_outputs are given); grads
// accumulate into the leaves' .grad.
void backward(std::span<const Tensor> outputs, std::span<const Tensor> grad_outputs = {}, bool retain_graph = false,
              bool create_graph = false);

// Functional form: returns d(outputs)/d(inputs) without touching .grad. An input that the
// outputs do not depend on gets an undefined tensor when allow_unused, an error otherwise.
std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> inputs,
                         std::span<const Tensor> grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace brisk
