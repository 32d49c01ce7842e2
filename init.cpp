// init.cpp: brisk::init(), the one place that knows every part: it defines the OpDefs
// (engine/ops) and registers the CPU backend with its kernels (kernels/cpu), then every backend
// whose library is linked (add_backend_init). It sits above engine/ and kernels/ so that neither
// depends on the other's registration. Runs once, on first use of any op (see ensure_init in
// engine/dispatch.cpp).
//
// Note [Backend libraries]: the CUDA backend is the library brisk_cuda (brisk::cuda), not part
// of brisk, so that a CPU-only program linked against a CUDA build of brisk needs neither the
// CUDA toolkit nor its runtime (libcudart) to link, start or run. brisk_cuda registers itself:
// kernels/cuda/link.cpp holds a static initializer that calls add_backend_init, and the symbol
// brisk_cuda_linked, which brisk::cuda's link interface names with `-u` so that the linker keeps
// that object out of the static archive even though nothing else refers to it. The same holds
// for dist's NCCL backend (brisk::dist_nccl, dist/nccl_group.cpp).
#include <mutex>
#include <vector>

#include "engine/backend.h"
#include "engine/ops/families.h"
#include "kernels/cpu/register.h"

namespace brisk {

namespace {

struct BackendInits {
  std::mutex mu;
  std::vector<void (*)()> fns;
  bool ran = false;  // init() has run the list; later additions run at once
};

BackendInits& backend_inits() {
  static BackendInits b;  // first use may be another library's static initializer
  return b;
}

}  // namespace

void add_backend_init(void (*register_fn)()) {
  BackendInits& b = backend_inits();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.ran) {
    register_fn();
  } else {
    b.fns.push_back(register_fn);
  }
}

void init() {
  detail::define_all_ops();
  kernels::cpu::register_all();
  BackendInits& b = backend_inits();
  std::lock_guard<std::mutex> lock(b.mu);
  for (auto fn : b.fns) fn();
  b.ran = true;
}

}  // namespace brisk
