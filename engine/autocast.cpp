// engine/autocast.cpp: autocast's switches, policy table and cast cache (engine/autocast.h).
// Not here: where dispatch applies the policy (engine/dispatch.cpp, autocast_inputs).
#include "engine/autocast.h"

#include <atomic>
#include <sstream>
#include <unordered_map>

#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk {

// Note [Autocast]
// Defaults. Every OpDef names its policy (engine/ops/*.cpp), after PyTorch's autocast lists:
// Lower for matmul and conv2d (PyTorch's lower_precision_fp list: mm, matmul, linear, conv*,
// bmm, baddbmm, attention), LowerMixed for linear (the same products, its F32 weight read in
// BF16 by the kernel rather than cast: Note [Mixed linear] in engine/ops/linalg.cpp); Fp32 for exp, log, rsqrt, sqrt,
// pow, softplus, sum, var, softmax, log_softmax, logsumexp, cross_entropy, layer_norm and batch_norm (PyTorch's fp32
// and fp32_set_opt_dtype lists, and its CUDA handling of norms); Promote for add, sub, mul,
// div, maximum, minimum, comparisons, where, masked_fill, cat, index_add, scatter_add (the
// widest input wins, so mixed F32/BF16 inputs meet); None for views, copies, relu, pooling
// and everything exact in any dtype (amax, argmax). The defaults are the same on both device
// types: PyTorch's CPU list is narrower (it leaves softmax, exp, log and sum in BF16), and
// `set_policy(op, DeviceType::CPU, CastPolicy::None)` reproduces it op by op. As in PyTorch,
// only F32/F16/BF16 inputs are cast; F64 inputs and integers are left alone.
//
// The table holds one byte per (op, device): kDefault means "the OpDef's policy", anything
// else is an edit. Reads are relaxed atomics (an edit from another thread takes effect at
// its next op); edits are meant for set-up, not for the middle of a step.
//
// Cast cache. Inside one autocast region (from the outermost guard to its end) a parameter
// (a leaf that requires grad) cast to a dtype is cast once: the second use of a weight in a
// forward reuses the first cast, so backward sums both uses' gradients into one cast node.
// PyTorch does the same; brisk's key adds the grad mode (a cast made under no_grad has no
// tape and would poison a later use with grad) and checks the version counter (a weight
// changed in place inside the region is cast again). Thread-local; holds both tensors.

namespace {

constexpr uint8_t kDefault = 0xff;

std::atomic<uint8_t> g_policy[kNumOps][kNumDeviceTypes];

struct PolicyInit {
  PolicyInit() {
    for (auto& row : g_policy)
      for (auto& p : row) p.store(kDefault, std::memory_order_relaxed);
  }
} g_policy_init;

struct CacheKey {
  const TensorImpl* impl;
  DType dtype;
  bool grad;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.impl) ^ (size_t(k.dtype) << 1) ^ size_t(k.grad);
  }
};
struct CacheEntry {
  Tensor source;  // held so that its address is not reused while the entry lives
  Tensor cast;
  uint32_t version;
};

struct ThreadAutocast {
  AutocastState state;
  std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> cache;
  int64_t hits = 0;
  int64_t misses = 0;
};
thread_local ThreadAutocast t_autocast;

OpId op_named(std::string_view name, const char* who) {
  ensure_init();
  for (int i = 0; i < kNumOps; ++i) {
    if (name == op_def(OpId(i)).name) return OpId(i);
  }
  std::ostringstream known;
  int listed = 0;
  for (int i = 0; i < kNumOps; ++i) {
    if (op_def(OpId(i)).autocast == CastPolicy::None) continue;
    known << (listed++ ? ", " : "") << op_def(OpId(i)).name;
  }
  BRISK_FAIL(who, ": unknown op '", name, "' (ops with a default policy: ", known.str(),
             "; any name in engine/ops.def is accepted)");
}

void check_device(DeviceType device, const char* who) {
  BRISK_CHECK(unsigned(device) < unsigned(kNumDeviceTypes), who, ": invalid device type ", int(device));
}

}  // namespace

AutocastState& autocast_state() { return t_autocast.state; }

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : device_(device) {
  check_device(device, "AutocastGuard");
  BRISK_CHECK(dtype == DType::BF16 || dtype == DType::F16, "AutocastGuard: dtype must be F16 or BF16, got ", dtype,
              " (device ", device == DeviceType::CPU ? "cpu" : "cuda", ")");
  AutocastState& st = t_autocast.state;
  prev_enabled_ = st.enabled[int(device)];
  prev_dtype_ = st.dtype[int(device)];
  st.enabled[int(device)] = enabled;
  st.dtype[int(device)] = dtype;
  ++st.depth;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& st = t_autocast.state;
  st.enabled[int(device_)] = prev_enabled_;
  st.dtype[int(device_)] = prev_dtype_;
  if (--st.depth == 0) autocast::clear_cache();
}

namespace autocast {

bool is_enabled(DeviceType device) { return t_autocast.state.enabled[int(device)]; }
DType dtype(DeviceType device) { return t_autocast.state.dtype[int(device)]; }

CastPolicy policy_of(OpId id, DeviceType device) {
  const uint8_t p = g_policy[int(id)][int(device)].load(std::memory_order_relaxed);
  return p == kDefault ? op_def(id).autocast : CastPolicy(p);
}

CastPolicy policy(std::string_view op, DeviceType device) {
  check_device(device, "autocast::policy");
  return policy_of(op_named(op, "autocast::policy"), device);
}

void set_policy(std::string_view op, DeviceType device, CastPolicy policy) {
  check_device(device, "autocast::set_policy");
  BRISK_CHECK(uint8_t(policy) <= uint8_t(CastPolicy::LowerMixed), "autocast::set_policy: invalid policy ", int(policy),
              " for op '", op, "'");
  g_policy[int(op_named(op, "autocast::set_policy"))][int(device)].store(uint8_t(policy), std::memory_order_relaxed);
}

void set_policy(std::string_view op, CastPolicy policy) {
  for (int d = 0; d < kNumDeviceTypes; ++d) set_policy(op, DeviceType(d), policy);
}

void reset_policies() {
  for (auto& row : g_policy)
    for (auto& p : row) p.store(kDefault, std::memory_order_relaxed);
}

const char* policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::None: return "none";
    case CastPolicy::Lower: return "lower";
    case CastPolicy::Fp32: return "fp32";
    case CastPolicy::Promote: return "promote";
    case CastPolicy::LowerMixed: return "lower_mixed";
  }
  return "invalid";
}

std::vector<PolicyRow> policies() {
  ensure_init();
  std::vector<PolicyRow> rows;
  for (int i = 0; i < kNumOps; ++i) {
    rows.push_back({op_def(OpId(i)).name, policy_of(OpId(i), DeviceType::CPU), policy_of(OpId(i), DeviceType::CUDA)});
  }
  return rows;
}

CacheStats cache_stats() { return {int64_t(t_autocast.cache.size()), t_autocast.hits, t_autocast.misses}; }

void clear_cache() {
  t_autocast.cache.clear();
  t_autocast.hits = 0;
  t_autocast.misses = 0;
}

Tensor cast_input(const Tensor& x, DType dtype) {
  const bool cacheable = t_autocast.state.depth > 0 && x.requires_grad() && x.is_leaf();
  if (!cacheable) return cast(x, dtype);
  const CacheKey key{x.impl(), dtype, GradMode::enabled()};
  auto it = t_autocast.cache.find(key);
  if (it != t_autocast.cache.end() && it->second.version == x.version()) {
    ++t_autocast.hits;
    return it->second.cast;
  }
  Tensor y = cast(x, dtype);
  t_autocast.cache[key] = {x, y, x.version()};
  ++t_autocast.misses;
  return y;
}

}  // namespace autocast

}  // namespace brisk
