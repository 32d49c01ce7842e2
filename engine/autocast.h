// engine/autocast.h: automatic mixed precision. Inside an AutocastGuard, dispatch casts an
// op's floating inputs as its OpDef's CastPolicy says (Lower: to the autocast dtype; Fp32: to
// F32; Promote: to the widest input). Casts are ops, so they are recorded and backward sees
// the cast types. Thread-local, per device type.
#pragma once

#include "engine/device.h"
#include "engine/dtype.h"

namespace brisk {

struct AutocastState {
  bool enabled[kNumDeviceTypes] = {false, false};
  DType dtype[kNumDeviceTypes] = {DType::BF16, DType::F16};
};

AutocastState& autocast_state();

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

}  // namespace brisk
