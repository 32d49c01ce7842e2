// engine/state.cpp: the thread-local switches (grad mode, anomaly mode, autocast) and the
// default random generator.
#include "engine/autocast.h"
#include "engine/grad_mode.h"
#include "engine/random.h"

namespace brisk {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
thread_local AutocastState t_autocast;
}  // namespace

bool GradMode::enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }
bool AnomalyMode::enabled() { return t_anomaly; }
void AnomalyMode::set_enabled(bool enabled) { t_anomaly = enabled; }

AutocastState& autocast_state() { return t_autocast; }

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled)
    : device_(device), prev_enabled_(t_autocast.enabled[int(device)]), prev_dtype_(t_autocast.dtype[int(device)]) {
  t_autocast.enabled[int(device)] = enabled;
  t_autocast.dtype[int(device)] = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_autocast.enabled[int(device_)] = prev_enabled_;
  t_autocast.dtype[int(device_)] = prev_dtype_;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace brisk
