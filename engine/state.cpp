// engine/state.cpp: the thread-local grad-mode switch and the default random generator.
// Autocast's switches and cache: engine/autocast.cpp; anomaly mode's: engine/nonfinite.cpp.
#include "engine/grad_mode.h"
#include "engine/random.h"

namespace brisk {

namespace {
thread_local bool t_grad_enabled = true;
}  // namespace

bool GradMode::enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace brisk
