// engine/dispatch.cpp: the op table and the one call path (Note [Dispatch]).
#include "engine/dispatch.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <vector>

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/hooks.h"
#include "engine/kernel_override.h"

namespace brisk {

namespace {
OpDef g_ops[kNumOps] = {
#define X(id, nm, nin, nout) OpDef{.name = nm, .n_in = nin, .n_out = nout},
#include "engine/ops.def"
#undef X
};
}  // namespace

OpDef& op_def(OpId id) { return g_ops[static_cast<int>(id)]; }

namespace {
thread_local bool t_in_init = false;  // this thread is running init()
}  // namespace

// A kernel registered before the first op would be overwritten by init(): run init first
// (except from inside init, whose own registrations these are).
void register_kernel(OpId id, DeviceType device, KernelFn fn) {
  if (!t_in_init) ensure_init();
  op_def(id).kernels[int(device)] = fn;
}

void ensure_init() {
  static const bool done = [] {
    t_in_init = true;
    try {
      init();
    } catch (...) {
      t_in_init = false;
      throw;
    }
    t_in_init = false;
    return true;
  }();
  (void)done;
}

// Note [Kernel overrides]
// replace_kernel (engine/kernel_override.h) leaves the OpDef's KernelFn alone: the built-in
// kernel stays where init() put it, and an override is a separate immutable record per
// (op, device) holding the new callable, the dtypes it takes and the kernel it fell back to.
// Installing swaps the record under a mutex and sets a flag that call() tests (one relaxed
// load per op: the cost when nothing is replaced); calls running on other threads keep the
// record they loaded alive through its shared_ptr. A guard saves the record it replaced and
// puts it back, so nested guards unwind exactly.
namespace {

struct Override {
  Kernel fn;
  uint32_t dtype_mask = ~0u;  // bit t: calls of DType t run fn
  Kernel fallback;            // what ran before (empty: no kernel)
};
using OverridePtr = std::shared_ptr<const Override>;

struct OverrideTable {
  std::mutex mu;
  OverridePtr slot[kNumOps][kNumDeviceTypes];
  std::atomic<bool> replaced[kNumOps][kNumDeviceTypes] = {};
};
OverrideTable& overrides() {
  static OverrideTable t;
  return t;
}

DType call_dtype(std::span<const Tensor> in, std::span<Tensor> out) {
  return in.empty() ? out[0].dtype() : in[0].dtype();
}

Kernel builtin_callable(OpId id, DeviceType device) {
  KernelFn fn = op_def(id).kernels[int(device)];
  if (!fn) return {};
  return [fn](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) { fn(in, out, attrs); };
}

void run_override(const Override& ov, OpId id, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType t = call_dtype(in, out);
  if ((ov.dtype_mask >> int(t)) & 1u) {
    ov.fn(in, out, attrs);
  } else {
    BRISK_CHECK(ov.fallback, op_name(id), ": the replaced kernel takes no ", t,
                " and there was no kernel to fall back to");
    ov.fallback(in, out, attrs);
  }
}

Kernel override_callable(const OverridePtr& ov, OpId id) {
  return [ov, id](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
    run_override(*ov, id, in, out, attrs);
  };
}

// The kernel (op, device) runs now, as a callable; the caller holds the table's mutex.
Kernel current_callable_locked(OpId id, DeviceType device) {
  const OverridePtr& ov = overrides().slot[int(id)][int(device)];
  return ov ? override_callable(ov, id) : builtin_callable(id, device);
}

void install_locked(OpId id, DeviceType device, OverridePtr ov) {
  OverrideTable& t = overrides();
  const bool any = bool(ov);
  t.slot[int(id)][int(device)] = std::move(ov);
  t.replaced[int(id)][int(device)].store(any, std::memory_order_release);
}

void check_op_device(OpId id, DeviceType device, const char* fn) {
  BRISK_CHECK(int(id) < kNumOps, fn, ": op id ", int(id), " is out of range");
  BRISK_CHECK(int(device) < kNumDeviceTypes, fn, ": device type ", int(device), " is out of range");
}

}  // namespace

OpId op_id(std::string_view name) {
  ensure_init();
  for (int i = 0; i < kNumOps; ++i) {
    if (name == g_ops[i].name) return OpId(i);
  }
  std::string near;
  for (int i = 0; i < kNumOps; ++i) {
    const std::string_view n = g_ops[i].name;
    if (!name.empty() && (n.find(name) != std::string_view::npos || name.find(n) != std::string_view::npos)) {
      near += near.empty() ? "" : ", ";
      near += n;
    }
  }
  BRISK_CHECK(false, "op_id: no op named '", name, "' in engine/ops.def",
              near.empty() ? std::string() : "; similar: " + near);
  return OpId::kCount;
}

namespace {
// Installs a new override record on top of what (op, device) runs now; the caller holds the
// table's mutex. Returns the kernel it replaced.
Kernel replace_locked(OpId id, DeviceType device, Kernel fn, const std::vector<DType>& dtypes) {
  auto ov = std::make_shared<Override>();
  ov->fn = std::move(fn);
  if (!dtypes.empty()) {
    ov->dtype_mask = 0;
    for (DType t : dtypes) ov->dtype_mask |= 1u << int(t);
  }
  Kernel previous = current_callable_locked(id, device);
  ov->fallback = previous;
  install_locked(id, device, std::move(ov));
  return previous;
}
}  // namespace

Kernel replace_kernel(OpId id, DeviceType device, Kernel fn, std::vector<DType> dtypes) {
  check_op_device(id, device, "replace_kernel");
  BRISK_CHECK(fn, "replace_kernel: ", op_name(id), ": the new kernel is empty");
  ensure_init();
  std::lock_guard<std::mutex> lock(overrides().mu);
  return replace_locked(id, device, std::move(fn), dtypes);
}

Kernel builtin_kernel(OpId id, DeviceType device) {
  check_op_device(id, device, "builtin_kernel");
  ensure_init();
  return builtin_callable(id, device);
}

Kernel current_kernel(OpId id, DeviceType device, DType dtype) {
  check_op_device(id, device, "current_kernel");
  ensure_init();
  std::lock_guard<std::mutex> lock(overrides().mu);
  const OverridePtr& ov = overrides().slot[int(id)][int(device)];
  if (!ov) return builtin_callable(id, device);
  return ((ov->dtype_mask >> int(dtype)) & 1u) ? ov->fn : ov->fallback;  // a fallback dispatches on dtype itself
}

void restore_builtin_kernel(OpId id, DeviceType device) {
  check_op_device(id, device, "restore_builtin_kernel");
  std::lock_guard<std::mutex> lock(overrides().mu);
  install_locked(id, device, nullptr);
}

bool is_kernel_replaced(OpId id, DeviceType device) {
  check_op_device(id, device, "is_kernel_replaced");
  return overrides().replaced[int(id)][int(device)].load(std::memory_order_acquire);
}

KernelOverride::KernelOverride(OpId op, DeviceType device, Kernel fn, std::vector<DType> dtypes)
    : op_(op), device_(device) {
  check_op_device(op, device, "KernelOverride");
  BRISK_CHECK(fn, "KernelOverride: ", op_name(op), ": the new kernel is empty");
  ensure_init();
  // Saving the record and installing the new one under one lock: no other replacement can
  // slip in between, so the destructor restores exactly what this guard covered.
  std::lock_guard<std::mutex> lock(overrides().mu);
  saved_ = overrides().slot[int(op)][int(device)];
  previous_ = replace_locked(op, device, std::move(fn), dtypes);
}

KernelOverride::~KernelOverride() {
  std::lock_guard<std::mutex> lock(overrides().mu);
  install_locked(op_, device_, std::static_pointer_cast<const Override>(saved_));
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
      // LowerMixed: the op reads F32 operands after the first at the lower precision itself.
      const bool kept = policy == CastPolicy::LowerMixed && &t != &cast[0] && t.dtype() == DType::F32;
      if (eligible(t.dtype()) && t.dtype() != target && !kept) {
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
  if (auto scope_of = hooks::op_scope.load(std::memory_order_relaxed); BRISK_UNLIKELY(scope_of != nullptr)) {
    if (const std::string* scope = scope_of()) node->scope = *scope;
  }
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

inline void run_kernel(OpId id, DeviceType device, KernelFn kernel, bool replaced, std::span<const Tensor> in,
                       std::span<Tensor> out, const Attrs& attrs) {
  if (BRISK_LIKELY(!replaced)) {
    kernel(in, out, attrs);
    return;
  }
  OverridePtr ov;
  {
    std::lock_guard<std::mutex> lock(overrides().mu);
    ov = overrides().slot[int(id)][int(device)];
  }
  if (ov) {
    run_override(*ov, id, in, out, attrs);
  } else {
    BRISK_CHECK(kernel, op_name(id), ": no kernel");
    kernel(in, out, attrs);
  }
}

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
    const bool replaced =
        BRISK_UNLIKELY(overrides().replaced[int(id)][int(device.type)].load(std::memory_order_acquire));
    BRISK_CHECK(kernel || replaced, op.name, ": no kernel for device ", device, " (inputs: ", describe_inputs(in), ")");
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
    // Kernels run with recording off: an op a kernel calls is part of this op, not of the tape.
    if (GradMode::enabled()) {
      NoGradGuard no_grad;
      run_kernel(id, device.type, kernel, replaced, in, out, attrs);
    } else {
      run_kernel(id, device.type, kernel, replaced, in, out, attrs);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (provided[i]) out[i].bump_version();  // written in place
    }
  }
  if (auto check = hooks::check_op.load(std::memory_order_relaxed); BRISK_UNLIKELY(check != nullptr)) {
    check(op.name, out);
  }
  if (op.backward && GradMode::enabled()) return record(id, op, in, attrs, out, device);
  return nullptr;
}

// The profiler's hook (engine/hooks.h) around call_impl, when installed.
const Node* call_untraced(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) {
  if (auto around = hooks::profile_op.load(std::memory_order_relaxed); BRISK_UNLIKELY(around != nullptr)) {
    return around(id, in, attrs, out, &call_impl);
  }
  return call_impl(id, in, attrs, out);
}

}  // namespace

// Every op: the op recorder's and the profiler's hooks around the call, where installed (Note
// [Profiler] in engine/profiler.h, engine/trace.h).
void call(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) {
  ensure_init();
  if (auto around = hooks::trace_op.load(std::memory_order_relaxed); BRISK_UNLIKELY(around != nullptr)) {
    around(id, in, attrs, out, &call_untraced);
    return;
  }
  call_untraced(id, in, attrs, out);
}

DType dispatch_dtype(OpId id, const Tensor& x) {
  const DeviceType dev = x.device().type;
  const AutocastState& st = autocast_state();
  if (!st.enabled[int(dev)] || !is_floating(x.dtype()) || x.dtype() == DType::F64) return x.dtype();
  switch (autocast::policy_of(id, dev)) {
    case CastPolicy::Fp32: return DType::F32;
    case CastPolicy::Lower:
    case CastPolicy::LowerMixed: return st.dtype[int(dev)];
    default: return x.dtype();
  }
}

Tensor call1(OpId id, std::initializer_list<Tensor> in, const Attrs& attrs) {
  Tensor out[1];
  call(id, std::span<const Tensor>(in.begin(), in.size()), attrs, out);
  return out[0];
}

}  // namespace brisk
