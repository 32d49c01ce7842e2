// init.cpp: brisk::init(), the one place that knows every part: it defines the OpDefs
// (engine/ops) and registers each built backend with its kernels (kernels/*). It sits above
// engine/ and kernels/ so that neither depends on the other's registration. Runs once, on
// first use of any op (see ensure_init in engine/dispatch.cpp).
#include "engine/ops/families.h"
#include "kernels/cpu/register.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/register.h"
#endif

namespace brisk {

void init() {
  detail::define_all_ops();
  kernels::cpu::register_all();
#ifdef BRISK_WITH_CUDA
  kernels::cuda::register_all();
#endif
}

}  // namespace brisk
