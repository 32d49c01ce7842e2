// engine/state.cpp: the thread-local switches (grad mode, anomaly mode) and the default random
// generator. Autocast's switches and cache: engine/autocast.cpp.
#include "engine/grad_mode.h"
#include "engine/random.h"

namespace brisk {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
}  // namespace

bool GradMode::enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }
bool AnomalyMode::enabled() { return t_anomaly; }
void AnomalyMode::set_enabled(bool enabled) { t_anomaly = enabled; }

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace brisk
