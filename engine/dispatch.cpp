// engine/dispatch.cpp: the op table and the one call path (Note [Dispatch]).
#include "engine/dispatch.h"

#include <cmath>
#include <vector>

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/nonfinite.h"
#include "engine/profiler.h"

namespace brisk {

void init();  // init.cpp: defines every OpDef and registers every built backend's kernels

namespace {
OpDef g_ops[kNumOps] = {
#define X(id, nm, nin, nout) OpDef{.name = nm, .n_in = nin, .n_out = nout},
#include "engine/ops.def"
#undef X
};
}  // namespace

OpDef& op_def(OpId id) { return g_ops[static_cast<int>(id)]; }

void register_kernel(OpId id, DeviceType device, KernelFn fn) { op_def(id).kernels[int(device)] = fn; }

void ensure_init() {
  static const bool done = (init(), true);
  (void)done;
}

namespace {

std::string describe_inputs(std::span<const Tensor> in) {
  std::ostringstream s;
  for (size_t i = 0; i < in.size(); ++i) s << (i ? ", " : "") << in[i].str();
  return s.str();
}

// Step 1: autocast. Returns true and fills `cast` when inputs were changed. Only F32, F16 and
// BF16 inputs are cast (F64 and integers never are, as in PyTorch); see Note [Autocast].
bool autocast_inputs(OpId id, std::span<const Tensor> in, std::vector<Tensor>& cast) {
  if (in.empty()) return false;
  AutocastState& st = autocast_state();
  const DeviceType dev = in[0].device().type;
  if (!st.enabled[int(dev)]) return false;
  const CastPolicy policy = autocast::policy_of(id, dev);
  if (policy == CastPolicy::None) return false;
  auto eligible = [](DType t) { return is_floating(t) && t != DType::F64; };
  DType target = policy == CastPolicy::Fp32 ? DType::F32 : st.dtype[int(dev)];
  if (policy == CastPolicy::Promote) {
    bool any = false;
    for (const Tensor& t : in) {
      if (!eligible(t.dtype())) continue;
      target = any ? promote_types(target, t.dtype()) : t.dtype();
      any = true;
    }
    if (!any) return false;
  }
  bool changed = false;
  cast.assign(in.begin(), in.end());
  const bool enabled = st.enabled[int(dev)];
  st.enabled[int(dev)] = false;  // the casts themselves are not autocast
  try {
    for (Tensor& t : cast) {
      if (eligible(t.dtype()) && t.dtype() != target) {
        t = autocast::cast_input(t, target);
        changed = true;
      }
    }
  } catch (...) {
    st.enabled[int(dev)] = enabled;
    throw;
  }
  st.enabled[int(dev)] = enabled;
  return changed;
}

// Returns the node recorded (nullptr when no input needs a gradient).
const Node* record(OpId id, const OpDef& op, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out,
                   Device device) {
  uint32_t mask = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (((op.diff_inputs >> i) & 1u) && in[i].requires_grad()) mask |= 1u << i;
  }
  if (!mask) return nullptr;
  auto node = std::make_shared<OpNode>();
  node->op = id;
  node->attrs = attrs;
  node->device = device;
  node->needs_grad_mask = mask;
  if (BRISK_UNLIKELY(scopes_tracked())) node->scope = current_scope();
  node->next_edges.resize(in.size());
  node->input_specs.resize(in.size());
  node->saved_inputs.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    node->input_specs[i] = {in[i].sizes(), in[i].dtype()};
    if ((mask >> i) & 1u) node->next_edges[i] = gradient_edge(in[i]);
    if ((op.save_inputs >> i) & 1u) node->saved_inputs[i] = SavedTensor(in[i], false);
  }
  node->slot_specs.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) node->slot_specs[i] = {out[i].sizes(), out[i].dtype()};
  set_history(out, node);
  node->saved_outputs.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if ((op.save_outputs >> i) & 1u) node->saved_outputs[i] = SavedTensor(out[i], true);
  }
  return node.get();
}

}  // namespace

// Note [Dispatch]
// Every op goes through call(): (1) autocast casts inputs per the op's policy (casts are ops,
// so they are recorded); (2) devices and arity are checked and the OpDef infers output sizes
// and dtypes, naming the op, shapes, dtypes and device on error; (3) outputs are allocated on
// the device (or the caller's are checked and written in place); (4) the kernel registered
// for (op, device) runs; (5) when grad mode is on and an input requires grad, a Node is
// recorded. View ops skip 3-4: their ViewFn returns a tensor over the input's storage.
// While a profiling run is active, call() goes through call_profiled, which times the same
// path (Note [Profiler] in engine/profiler.h); otherwise that costs one relaxed load.
namespace {

const Node* call_impl(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) {
  const OpDef& op = op_def(id);
  BRISK_CHECK(op.infer || op.view, op.name, ": op is declared but not defined");
  BRISK_CHECK(op.n_in < 0 || int(in.size()) == op.n_in, op.name, ": expects ", op.n_in, " inputs, got ", in.size());
  BRISK_CHECK(int(out.size()) == op.n_out, op.name, ": expects ", op.n_out, " outputs, got ", out.size());
  for (size_t i = 0; i < in.size(); ++i) BRISK_CHECK(in[i].defined(), op.name, ": input ", i, " is undefined");

  std::vector<Tensor> cast;
  if (autocast_inputs(id, in, cast)) in = cast;

  Device device = in.empty() ? attrs.device : in[0].device();
  for (size_t i = 1; i < in.size(); ++i) {
    BRISK_CHECK(in[i].device() == device, op.name, ": inputs are on different devices (", describe_inputs(in), ")");
  }

  if (op.view) {
    out[0] = op.view(in[0], attrs);
    out[0].impl()->is_view = true;
  } else {
    TensorSpec specs[4];
    BRISK_CHECK(out.size() <= 4, op.name, ": more than 4 outputs");
    op.infer(in, attrs, std::span<TensorSpec>(specs, out.size()));
    const Device out_device = op.to_attrs_device ? attrs.device : device;
    KernelFn kernel = op.kernels[int(device.type)];
    BRISK_CHECK(kernel, op.name, ": no kernel for device ", device, " (inputs: ", describe_inputs(in), ")");
    bool provided[4] = {};
    for (size_t i = 0; i < out.size(); ++i) {
      provided[i] = out[i].defined();
      if (provided[i]) {
        BRISK_CHECK(
            out[i].sizes() == specs[i].sizes && out[i].dtype() == specs[i].dtype && out[i].device() == out_device,
            op.name, ": output ", i, " is ", out[i].str(), " but the op produces ", specs[i].dtype, " ", specs[i].sizes,
            " on ", out_device);
      } else {
        out[i] = make_empty(specs[i].sizes, specs[i].dtype, out_device);
      }
    }
    kernel(in, out, attrs);
    for (size_t i = 0; i < out.size(); ++i) {
      if (provided[i]) out[i].bump_version();  // written in place
    }
  }
  if (BRISK_UNLIKELY(scopes_tracked())) detail::check_outputs(op.name, current_scope(), false, out);
  if (op.backward && GradMode::enabled()) return record(id, op, in, attrs, out, device);
  return nullptr;
}

[[gnu::noinline]] void call_profiled(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) {
  const OpDef& op = op_def(id);
  profiler::Event e;
  e.name = op.name;
  e.kind = profiler::EventKind::Op;
  e.device = in.empty() ? attrs.device : in[0].device();
  if (profiler::detail::record_shapes()) {
    e.shapes = profiler::detail::describe_shapes(in);
    e.dtypes = profiler::detail::describe_dtypes(in);
  }
  bool provided[4] = {};
  for (size_t i = 0; i < out.size() && i < 4; ++i) provided[i] = out[i].defined();
  e.start_ns = profiler::detail::now_ns();
  const Node* node = call_impl(id, in, attrs, out);
  e.end_ns = profiler::detail::now_ns();
  if (!op.view) {
    for (size_t i = 0; i < out.size() && i < 4; ++i) {
      if (!provided[i] && out[i].defined()) e.bytes += out[i].numel() * int64_t(out[i].element_size());
    }
  }
  if (node) e.sequence_nr = int64_t(node->sequence_nr);
  profiler::detail::record(std::move(e));
}

}  // namespace

void call(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) {
  ensure_init();
  if (BRISK_UNLIKELY(profiler::is_active())) {
    call_profiled(id, in, attrs, out);
    return;
  }
  call_impl(id, in, attrs, out);
}

Tensor call1(OpId id, std::initializer_list<Tensor> in, const Attrs& attrs) {
  Tensor out[1];
  call(id, std::span<const Tensor>(in.begin(), in.size()), attrs, out);
  return out[0];
}

}  // namespace brisk
