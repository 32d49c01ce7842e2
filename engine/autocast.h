// engine/autocast.h: automatic mixed precision. Inside an AutocastGuard, dispatch casts an
// op's floating inputs as the op's cast policy for that device says (Lower: to the autocast
// dtype; Fp32: to F32; Promote: to the widest input; None: left alone). Casts are ops, so
// they are recorded and backward sees the cast types. Switches are thread-local, per device
// type; the policy table is global and editable at run time (brisk::autocast below).
// See Note [Autocast] in engine/autocast.cpp for the defaults and the cast cache.
// Not here: gradient scaling (optim/grad_scaler.h), F32 master weights (optim/optimizer.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/op.h"

namespace brisk {

class Tensor;

struct AutocastState {
  bool enabled[kNumDeviceTypes] = {false, false};
  DType dtype[kNumDeviceTypes] = {DType::BF16, DType::F16};
  int depth = 0;  // open AutocastGuards on this thread (any device, enabled or not)
};

AutocastState& autocast_state();

// Turns autocast on (or off: `enabled = false` nests inside an enabled region) for one device
// type until the guard ends. dtype: F16 or BF16. The cast cache is emptied when the outermost
// guard of the thread ends.
class AutocastGuard {
 public:
  AutocastGuard(DeviceType device, DType dtype, bool enabled = true);
  explicit AutocastGuard(Device device, DType dtype, bool enabled = true)
      : AutocastGuard(device.type, dtype, enabled) {}
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};

namespace autocast {

bool is_enabled(DeviceType device);
DType dtype(DeviceType device);  // the lower dtype in use (meaningful while enabled)

// The policy table. Ops are named as in engine/ops.def ("conv2d", "matmul", "softmax").
// An unknown name is a brisk::Error listing the ops that autocast acts on.
CastPolicy policy(std::string_view op, DeviceType device);
void set_policy(std::string_view op, CastPolicy policy);                     // every device
void set_policy(std::string_view op, DeviceType device, CastPolicy policy);  // one device
void reset_policies();                                                       // back to the defaults (Note [Autocast])
const char* policy_name(CastPolicy policy);

struct PolicyRow {
  std::string op{};
  CastPolicy cpu{};
  CastPolicy cuda{};
};
// Every op with its policy on each device (ops.def order).
std::vector<PolicyRow> policies();

// The policy dispatch applies to op `id` on `device` (an array read).
CastPolicy policy_of(OpId id, DeviceType device);

// The cast cache of this thread: entries live until the outermost guard ends.
struct CacheStats {
  int64_t entries = 0;
  int64_t hits = 0;    // casts served from the cache since the outermost guard began
  int64_t misses = 0;  // casts computed and stored
};
CacheStats cache_stats();
void clear_cache();

// x cast to `dtype` for an op's input under autocast: served from the cache when x is a
// parameter (a leaf that requires grad), computed with brisk::cast otherwise.
Tensor cast_input(const Tensor& x, DType dtype);

}  // namespace autocast

}  // namespace brisk
