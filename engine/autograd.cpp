// engine/autograd.cpp: nodes, saved tensors, AccumulateGrad, and the backward engine
// (run_backward, in the named steps of Note [The backward engine]) behind backward() and
// grad(). Graphs are freed iteratively (Note [Iterative graph release]). Not here: the
// backward formulas (beside each op in engine/ops/) or recording a node (engine/dispatch.cpp).
#include "engine/autograd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "engine/functions.h"
#include "engine/hooks.h"

namespace brisk {

namespace {
std::atomic<uint64_t> g_next_sequence{0};

// Note [Iterative graph release]
// Dropping the last output of a 1e5-op chain would destroy 1e5 nodes recursively and overflow
// the stack. Instead the first node destructor on a thread collects the nodes it would free
// (edges, and grad_fns held by saved inputs it owns alone) into a list and drains it in a
// loop; nested destructors append to that list rather than recursing.
thread_local std::vector<std::shared_ptr<Node>>* t_pending = nullptr;

void collect_tensor_history(Tensor& t, std::vector<std::shared_ptr<Node>>& out) {
  const auto& impl = t.impl_ptr();
  if (impl && impl.use_count() == 1 && impl->autograd && impl->autograd->grad_fn) {
    out.push_back(std::move(impl->autograd->grad_fn));
  }
}

template <class Collect>
void release_iteratively(Collect&& collect) {
  if (t_pending) {
    collect(*t_pending);
    return;
  }
  std::vector<std::shared_ptr<Node>> pending;
  t_pending = &pending;
  collect(pending);
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // when this was the last owner, its destructor appends its children
  }
  t_pending = nullptr;
}
}  // namespace

Node::Node() : sequence_nr(g_next_sequence.fetch_add(1, std::memory_order_relaxed)) {}

Node::~Node() {
  release_iteratively([this](std::vector<std::shared_ptr<Node>>& out) {
    for (Edge& e : next_edges) {
      if (e.node) out.push_back(std::move(e.node));
    }
  });
}

// ---- SavedTensor
SavedTensor::SavedTensor(const Tensor& t, bool is_output)
    : version_(t.version()), output_nr_(t.output_nr()), is_output_(is_output), requires_grad_(t.requires_grad()) {
  // An output's grad_fn is the saving node: keep only its data to avoid a reference cycle.
  data_ = is_output ? t.detach() : t;
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, const char* op) const {
  if (!data_.defined()) return data_;
  BRISK_CHECK(data_.version() == version_, op,
              ": a tensor saved for backward was modified by an in-place operation (its version is ", data_.version(),
              ", it was ", version_, " when saved): ", data_.str());
  if (!is_output_ || !requires_grad_ || !GradMode::enabled()) return data_;
  // create_graph: give the output its autograd identity back so double backward sees it.
  Tensor t = data_.detach();
  auto meta = std::make_unique<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = owner;
  meta->output_nr = output_nr_;
  t.impl()->autograd = std::move(meta);
  return t;
}

// ---- OpNode
namespace {
// Note [Backward node names]
// PyTorch names the node of op foo_bar "FooBarBackward<k>", k telling overloads apart; brisk
// derives the same from the op name and overrides the ops PyTorch names after another function
// (conv2d runs as convolution, layer_norm as native_layer_norm) or overloads (pow with a
// scalar exponent is PowBackward0, with a tensor PowBackward1). Fused ops with no PyTorch
// counterpart keep their own name (cross_entropy: CrossEntropyBackward0, where PyTorch shows
// NllLossBackward0 over LogSoftmaxBackward0).
std::string camel_backward_name(std::string_view op) {
  std::string out;
  bool up = true;
  for (size_t i = 0; i < op.size(); ++i) {
    const char c = op[i];
    if (c == '_') {
      up = true;
      continue;
    }
    // "2d" -> "2D" as in AvgPool2DBackward0
    const bool dim_suffix = c == 'd' && i > 0 && op[i - 1] >= '0' && op[i - 1] <= '9';
    out += (up || dim_suffix) && c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c;
    up = false;
  }
  return out + "Backward0";
}

std::string backward_node_name(const OpNode& n) {
  const std::string op = op_name(n.op);
  static const std::unordered_map<std::string, std::string> renamed = {
      {"pow_scalar", "PowBackward0"},
      {"pow", "PowBackward1"},
      {"cast", "ToCopyBackward0"},
      {"to_device", "ToCopyBackward0"},
      {"dropout", "NativeDropoutBackward0"},
      {"clamp", "ClampBackward1"},
      {"conv2d", "ConvolutionBackward0"},
      {"max_pool2d", "MaxPool2DWithIndicesBackward0"},
      {"layer_norm", "NativeLayerNormBackward0"},
      {"batch_norm", "NativeBatchNormBackward0"},
      {"linalg_solve", "LinalgSolveExBackward0"},
      {"linalg_cholesky", "LinalgCholeskyExBackward0"},
  };
  if (auto it = renamed.find(op); it != renamed.end()) return it->second;
  if (op == "sum" && !n.slot_specs.empty() && !n.input_specs.empty())  // SumBackward1: over dims
    return n.slot_specs[0].sizes.size() == 0 ? "SumBackward0" : "SumBackward1";
  if (op == "linear" && !n.input_specs.empty() && n.input_specs[0].sizes.size() <= 2)  // torch's addmm / mm
    return n.input_specs.size() == 3 ? "AddmmBackward0" : "MmBackward0";
  if (op == "matmul" && n.input_specs.size() == 2) {
    const size_t a = n.input_specs[0].sizes.size(), b = n.input_specs[1].sizes.size();
    if (a == 2 && b == 2) return "MmBackward0";
    if (a == 3 && b == 3) return "BmmBackward0";
  }
  return camel_backward_name(op);
}
}  // namespace

std::string OpNode::name() const { return backward_node_name(*this); }
std::string OpNode::op_label() const { return op_name(op); }

std::vector<Tensor> OpNode::saved_tensors() {
  BRISK_CHECK(!released, op_name(op),
              ": saved_tensors after a backward freed them; pass retain_graph=true to that backward");
  std::shared_ptr<Node> self = std::static_pointer_cast<Node>(shared_from_this());
  std::vector<Tensor> out;
  for (const SavedTensor& s : saved_inputs)
    if (s.defined()) out.push_back(s.unpack(self, op_name(op)));
  for (const SavedTensor& s : saved_outputs)
    if (s.defined()) out.push_back(s.unpack(self, op_name(op)));
  return out;
}

// Note [Adding into a pending gradient] (below, beside the engine).
Tensor take_pending_gradient(const void* node, int input);

std::vector<Tensor> OpNode::apply(std::vector<Tensor>&& grads) {
  const OpDef& def = op_def(op);
  BRISK_CHECK(!released, def.name,
              ": backward through the graph a second time (saved tensors were freed); pass retain_graph=true to the "
              "first backward");
  std::shared_ptr<Node> self = std::static_pointer_cast<Node>(shared_from_this());
  std::vector<Tensor> ins(saved_inputs.size()), outs(saved_outputs.size());
  for (size_t i = 0; i < ins.size(); ++i) ins[i] = saved_inputs[i].unpack(self, def.name);
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = saved_outputs[i].unpack(self, def.name);
  BackwardCtx ctx{attrs, ins, outs, input_specs, grads, device, needs_grad_mask};
  ctx.take_pending_fn = &take_pending_gradient;
  ctx.node = this;
  std::vector<Tensor> result(next_edges.size());
  def.backward(ctx, result);
  return result;
}

void OpNode::release() {
  released = true;
  for (auto& s : saved_inputs) s.reset();
  for (auto& s : saved_outputs) s.reset();
}

OpNode::~OpNode() {
  release_iteratively([this](std::vector<std::shared_ptr<Node>>& out) {
    for (SavedTensor& s : saved_inputs) {
      if (s.defined()) collect_tensor_history(s.data(), out);
    }
  });
}

// ---- AccumulateGrad
AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf_impl) : leaf(leaf_impl) {
  sequence_nr = UINT64_MAX;  // runs as soon as it is ready
  is_accumulator_ = true;
  slot_specs.push_back({leaf_impl->sizes, leaf_impl->dtype});
  device = leaf_impl->storage->device;
}

// A leaf's gradient hooks in order (removed ones are empty), each may replace the gradient.
static Tensor run_leaf_hooks(AutogradMeta& m, Tensor g) {
  for (GradHook& hook : m.hooks) {
    if (!hook) continue;
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  return g;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  std::shared_ptr<TensorImpl> impl = leaf.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor t(impl);
  AutogradMeta& m = *impl->autograd;
  Tensor g = std::move(grads[0]);
  g = run_leaf_hooks(m, std::move(g));
  if (!m.grad.defined()) {
    // Keep the incoming gradient only when nothing else can see or alias it.
    bool owned =
        g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() && !g.requires_grad();
    m.grad = owned ? g : (GradMode::enabled() ? clone(g) : clone(g.detach()));
  } else if (GradMode::enabled()) {
    m.grad = m.grad + g;  // create_graph: keep the sum differentiable
  } else {
    m.grad.add_(g);
  }
  for (PostAccumulateHook& hook : m.post_hooks) {
    if (hook) hook(t);
  }
  return {};
}

// ---- graph helpers
Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = t.impl()->autograd.get();
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(std::span<Tensor> outputs, const std::shared_ptr<Node>& node) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& t = outputs[i];
    if (!t.defined() || !is_floating(t.dtype())) continue;
    TensorImpl* impl = t.impl();
    if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
    impl->autograd->requires_grad = true;
    impl->autograd->grad_fn = node;
    impl->autograd->output_nr = int(i);
  }
}

// ---- the engine
namespace {

struct ByPriority {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Brings a gradient to the shape and dtype of the slot it feeds; a wrong shape is a bug in a
// backward formula and is reported with the op's name.
Tensor validate(const Node& producer, const Node& consumer, int slot, Tensor g) {
  const TensorSpec& spec = consumer.slot_specs[size_t(slot)];
  BRISK_CHECK(g.sizes() == spec.sizes, "backward of ", producer.op_label(), ": gradient of shape ", g.sizes(),
              " for an input of shape ", spec.sizes);
  if (g.dtype() != spec.dtype) g = cast(g, spec.dtype);
  return g;
}

// Note [The backward engine]
// run_backward is four named steps over one GraphTask: seed_roots (the outputs' edges and
// their first gradients), count_dependencies (how many edges reach each node, found by an
// explicit stack, never recursion), prune_for_grad (grad() only: where to capture and which
// nodes lead there) and run_ready_loop (pop the ready node with the highest sequence number,
// apply it, pass its gradients on). A node becomes ready when every edge into it has
// delivered, so its gradient buffer is complete when it runs; the order (and so every sum)
// is the same from run to run.
struct GraphTask {
  bool retain_graph = false;
  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  std::unordered_map<Node*, int> deps;  // edges into each reachable node not yet delivered
  std::vector<Node*> order;             // grad() only: reachable nodes, discovery order
  // grad() only: node -> (slot, input index) to capture, and the nodes on a path to one.
  std::vector<Tensor>* captured = nullptr;
  std::unordered_map<Node*, std::vector<std::pair<int, size_t>>> capture_at;
  std::unordered_set<Node*> needed;
  // Gradients waiting for their node, and the nodes whose gradients are complete.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::priority_queue<Node*, std::vector<Node*>, ByPriority> ready;
  std::unordered_set<Node*> queued;
};

// The root edges and their gradients: the given ones, or ones for scalar outputs.
void seed_roots(GraphTask& task, std::span<const Tensor> roots, std::span<const Tensor> root_grads) {
  BRISK_CHECK(root_grads.empty() || root_grads.size() == roots.size(), "backward: ", roots.size(), " outputs but ",
              root_grads.size(), " gradients");
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    BRISK_CHECK(r.defined(), "backward: output ", i, " is undefined");
    BRISK_CHECK(r.requires_grad(), "backward: output ", i, " ", r.str(),
                " does not require grad and has no grad_fn (was it computed under NoGradGuard, or from tensors "
                "that do not require grad?)");
    Tensor g;
    if (!root_grads.empty() && root_grads[i].defined()) {
      g = root_grads[i];
      BRISK_CHECK(g.sizes() == r.sizes(), "backward: gradient ", g.str(), " does not match output ", r.str());
    } else {
      BRISK_CHECK(r.numel() == 1, "backward: a gradient can be implied only for a scalar output; output ", i,
                  " has shape ", r.sizes(), " (pass a gradient of that shape)");
      g = ones_like(r.detach());
    }
    task.root_edges.push_back(gradient_edge(r));
    task.root_grads.push_back(g);
  }
}

// How many edges point at each node reachable from the roots.
void count_dependencies(GraphTask& task) {
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  auto discover = [&](Node* n) {
    if (!seen.insert(n).second) return;
    stack.push_back(n);
    if (task.captured) task.order.push_back(n);  // only prune_for_grad reads it
  };
  for (const Edge& e : task.root_edges) discover(e.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++task.deps[e.node.get()];
      discover(e.node.get());
    }
  }
}

// grad(): capture at the inputs' edges, and run only the nodes on a path to one of them.
void prune_for_grad(GraphTask& task, std::span<const Tensor> inputs) {
  task.captured->assign(inputs.size(), Tensor());
  for (size_t i = 0; i < inputs.size(); ++i) {
    BRISK_CHECK(inputs[i].requires_grad(), "grad: input ", i, " ", inputs[i].str(), " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    task.capture_at[e.node.get()].push_back({e.input_nr, i});
  }
  // A node is needed when it is a capture point or leads to one. Children have a smaller
  // sequence number than their consumers (AccumulateGrad excepted, but it has no children
  // and is needed only as a capture point), so increasing order sees children first.
  for (auto& [n, slots] : task.capture_at) task.needed.insert(n);
  std::vector<Node*> by_seq = task.order;
  std::sort(by_seq.begin(), by_seq.end(), [](Node* a, Node* b) { return a->sequence_nr < b->sequence_nr; });
  for (Node* n : by_seq) {
    bool need = task.needed.count(n) > 0;
    for (const Edge& e : n->next_edges) need = need || (e.node && task.needed.count(e.node.get()));
    if (need) task.needed.insert(n);
  }
}

// The task whose ready loop runs on this thread (null outside one; a nested backward saves and
// restores it).
thread_local GraphTask* t_running = nullptr;

// Whether `cur`, a gradient waiting in a task's buffer, can be changed in place: nothing but the
// buffer holds it or its storage, dense, no graph (create_graph) around it.
bool free_to_change(const Tensor& cur) {
  return cur.defined() && !GradMode::enabled() && cur.impl_ptr().use_count() == 1 && cur.storage().use_count() == 1 &&
         cur.is_contiguous() && !cur.requires_grad();
}

}  // namespace

// Note [Adding into a pending gradient]
// A tied weight's gradient has parts from several consumers: GPT-2's wte gets a dense
// 50257 x 768 product from the head, then the embedding's rows. Summed the usual way, the
// embedding's backward fills a second dense buffer with zeros, adds its rows and the engine
// adds the two buffers (two extra passes, 154 MB held twice at the peak). BackwardCtx's
// take_pending_grad(i) hands the formula the part already waiting for input i when the
// engine could change it in place anyway (Note [Accumulating in place]): the embedding's
// backward adds its rows into it and returns it, and accumulate() finds the slot empty and
// takes it back. The slot is moved out, so no other consumer's part can be lost or counted
// twice; a formula that takes it must return it.
Tensor take_pending_gradient(const void* node, int input) {
  if (!t_running || input < 0) return {};
  const auto* n = static_cast<const OpNode*>(node);
  if (size_t(input) >= n->next_edges.size() || size_t(input) >= n->input_specs.size()) return {};
  const Edge& e = n->next_edges[size_t(input)];
  if (!e.node) return {};
  auto it = t_running->buffers.find(e.node.get());
  if (it == t_running->buffers.end() || size_t(e.input_nr) >= it->second.size()) return {};
  Tensor& cur = it->second[size_t(e.input_nr)];
  const TensorSpec& spec = n->input_specs[size_t(input)];
  if (!free_to_change(cur) || cur.sizes() != spec.sizes || cur.dtype() != spec.dtype || cur.device() != n->device)
    return {};
  return std::move(cur);
}

namespace {

// Note [Accumulating in place]
// Gradients reaching one slot from several consumers are summed. Without create_graph the sum
// goes into the first gradient's own buffer when nothing else can see it (its tensor and
// storage held only here, dense, same sizes and dtype as the sum): a tied weight's gradient
// (GPT-2's 50257 x 768 wte, from the head and the embedding) is then added into a warm buffer
// instead of a fresh one whose pages the kernel must first fault in (139 -> ~35 ms per step).
// With create_graph the sum is an op of the graph, as before.
void accumulate(GraphTask& task, Node* n, int slot, Tensor g) {
  std::vector<Tensor>& buf = task.buffers[n];
  if (buf.empty()) buf.resize(size_t(n->num_slots()));
  Tensor& cur = buf[size_t(slot)];
  if (!cur.defined()) {
    cur = std::move(g);
    return;
  }
  const bool owned = free_to_change(cur) && g.defined() && g.sizes() == cur.sizes() && g.dtype() == cur.dtype() &&
                     g.device() == cur.device() && cur.storage() != g.storage();
  if (owned) {
    cur.add_(g);
  } else {
    cur = cur + g;
  }
}

// Queues a node whose every incoming edge has delivered (once, though a root may be reached twice).
void push_ready(GraphTask& task, Node* n) {
  if (task.queued.insert(n).second) task.ready.push(n);
}

// A ready node's complete gradients, one per slot, after its tensors' pre-hooks.
std::vector<Tensor> take_gradients(GraphTask& task, Node* n) {
  auto it = task.buffers.find(n);
  std::vector<Tensor> grads;
  if (it != task.buffers.end()) {
    grads = std::move(it->second);
    task.buffers.erase(it);
  }
  grads.resize(size_t(n->num_slots()));
  for (auto& [slot, hook] : n->pre_hooks) {
    if (!hook || !grads[size_t(slot)].defined()) continue;
    Tensor r = hook(grads[size_t(slot)]);
    if (r.defined()) grads[size_t(slot)] = r;
  }
  return grads;
}

// grad(): keeps the gradients asked for at n; says whether n must run (it leads to another
// capture point). A leaf's AccumulateGrad never runs: grad() leaves .grad alone.
bool capture_and_continue(GraphTask& task, Node* n, const std::vector<Tensor>& grads) {
  auto it = task.capture_at.find(n);
  if (it != task.capture_at.end()) {
    Tensor leaf_grad;  // a leaf's hooks run on what grad() returns for it, as in PyTorch
    if (n->is_accumulator() && grads[0].defined()) {
      if (auto impl = static_cast<AccumulateGrad*>(n)->leaf.lock())
        leaf_grad = run_leaf_hooks(*impl->autograd, grads[0]);
    }
    for (auto [slot, idx] : it->second) (*task.captured)[idx] = leaf_grad.defined() ? leaf_grad : grads[size_t(slot)];
  }
  return !n->is_accumulator() && task.needed.count(n) > 0;
}

// Hands n's output gradients to its edges, then counts the edges as delivered.
void pass_gradients(GraphTask& task, const Node& n, std::vector<Tensor>& out) {
  for (size_t j = 0; j < n.next_edges.size() && j < out.size(); ++j) {
    const Edge& e = n.next_edges[j];
    if (!e.node || !out[j].defined()) continue;
    accumulate(task, e.node.get(), e.input_nr, validate(n, *e.node, e.input_nr, out[j]));
  }
  for (const Edge& e : n.next_edges) {
    if (e.node && --task.deps[e.node.get()] == 0) push_ready(task, e.node.get());
  }
}

// A backward node's formula (hooks::NodeRun), and the same inside the non-finite watch's hook.
void run_formula(hooks::NodeCall& call) { *call.out = call.node->apply(std::move(*call.grads)); }

void run_checked(hooks::NodeCall& call) {
  if (auto around = hooks::check_node.load(std::memory_order_relaxed); BRISK_UNLIKELY(around != nullptr)) {
    around(call, &run_formula);
  } else {
    run_formula(call);
  }
}

thread_local detail::BackwardObserver* t_observer = nullptr;

void run_ready_loop(GraphTask& task) {
  struct Running {  // t_running for this loop, restored after it (nested backward calls)
    GraphTask* prev;
    explicit Running(GraphTask* t) : prev(std::exchange(t_running, t)) {}
    ~Running() { t_running = prev; }
  } running(&task);
  while (!task.ready.empty()) {
    Node* n = task.ready.top();
    task.ready.pop();
    std::vector<Tensor> grads = take_gradients(task, n);
    if (task.captured && !capture_and_continue(task, n, grads)) continue;
    std::vector<Tensor> out;
    std::vector<Tensor> observed_in;
    if (BRISK_UNLIKELY(t_observer != nullptr)) observed_in = grads;  // shallow: apply consumes grads
    // The formula, with the tools' hooks around it where installed (engine/hooks.h): the
    // profiler's range outside, the non-finite watch's scope and check inside.
    hooks::NodeCall call{n, &grads, &out};
    if (auto around = hooks::profile_node.load(std::memory_order_relaxed); BRISK_UNLIKELY(around != nullptr)) {
      around(call, &run_checked);
    } else {
      run_checked(call);
    }
    if (BRISK_UNLIKELY(t_observer != nullptr)) t_observer->on_node(*n, observed_in, out);
    if (!task.retain_graph) n->release();
    pass_gradients(task, *n, out);
  }
}

// See Note [The backward engine]. `captured` is null for backward(), the result for grad().
// The callbacks queued during the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

// Runs the queued callbacks in order once the ready loop is done, also when it threw (then the
// first error wins and the callbacks still run, so that a hook's pending work is not left).
struct CallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* prev;
  CallbackScope() : prev(t_callbacks) { t_callbacks = &callbacks; }
  void run() {
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();  // a callback may queue more
    callbacks.clear();
  }
  ~CallbackScope() { t_callbacks = prev; }
};

void run_backward(std::span<const Tensor> roots, std::span<const Tensor> root_grads, bool retain_graph,
                  bool create_graph, std::span<const Tensor> inputs, std::vector<Tensor>* captured, bool allow_unused) {
  CallbackScope callbacks;
  GraphTask task;
  task.retain_graph = retain_graph;
  task.captured = captured;
  seed_roots(task, roots, root_grads);
  count_dependencies(task);
  if (captured) prune_for_grad(task, inputs);

  GradModeGuard mode(create_graph);
  for (size_t i = 0; i < task.root_edges.size(); ++i) {
    Node* n = task.root_edges[i].node.get();
    accumulate(task, n, task.root_edges[i].input_nr, task.root_grads[i]);
    if (task.deps[n] == 0) push_ready(task, n);
  }
  run_ready_loop(task);
  callbacks.run();

  if (captured && !allow_unused) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      BRISK_CHECK((*captured)[i].defined(), "grad: input ", i, " ", inputs[i].str(),
                  " is not used by the outputs (pass allow_unused=true)");
    }
  }
}

}  // namespace

detail::BackwardObserver*& detail::backward_observer() { return t_observer; }

void queue_callback(std::function<void()> fn) {
  BRISK_CHECK(t_callbacks != nullptr, "queue_callback: no backward pass is running on this thread");
  t_callbacks->push_back(std::move(fn));
}

void backward(std::span<const Tensor> outputs, std::span<const Tensor> grad_outputs, bool retain_graph,
              bool create_graph) {
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, {}, nullptr, false);
}

std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> inputs,
                         std::span<const Tensor> grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Tensor> result;
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, inputs, &result, allow_unused);
  return result;
}

}  // namespace brisk
