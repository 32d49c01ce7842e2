// engine/backend.cpp: the backend registry and make_storage.
#include "engine/backend.h"

#include <mutex>
#include <vector>

#include "engine/dispatch.h"
#include "engine/error.h"
#include "engine/ops/families.h"
#include "engine/storage.h"

namespace brisk {

namespace {
Backend* g_backends[kNumDeviceTypes] = {};
}

void register_backend(Backend* b) { g_backends[int(b->type())] = b; }

Backend* find_backend(DeviceType type) {
  ensure_init();
  return g_backends[int(type)];
}

Backend& backend(Device device) {
  Backend* b = find_backend(device.type);
  BRISK_CHECK(b, device, ": no ", device.is_cuda() ? "CUDA" : "CPU",
              " backend in this program: link brisk::cuda (find_package(brisk COMPONENTS cuda), or "
              "pkg-config brisk-cuda) from a build of brisk configured with -DBRISK_CUDA=ON");
  int n = b->device_count();
  BRISK_CHECK(device.index >= 0 && device.index < n, device, ": no such device (", n, " ",
              device.is_cuda() ? "CUDA" : "CPU", " device", n == 1 ? "" : "s", " present)");
  return *b;
}

Storage make_storage(size_t bytes, Device device, bool pinned) {
  Backend& b = backend(device);
  auto s = std::make_shared<StorageImpl>();
  if (pinned) {
    BRISK_CHECK(device.is_cpu(), "pin_memory: pinned memory is host memory, got device ", device);
    Backend* cuda = find_backend(DeviceType::CUDA);
    Allocator* pa = cuda && cuda->device_count() > 0 ? cuda->pinned_allocator() : nullptr;
    BRISK_CHECK(pa, "pin_memory: needs the CUDA backend and a GPU (none available)");
    s->allocator = pa;
    s->pinned = true;
  } else {
    s->allocator = &b.allocator(device.index);
    s->stream = b.current_stream(device.index);
  }
  s->data = s->allocator->allocate(bytes, s->stream);
  s->bytes = bytes;
  s->device = device;
  return s;
}

// Note [Backend libraries]
// Every backend joins a program the same way, so the engine never calls a kernel library: the
// CPU kernels (brisk's layer kernels/cpu, kernels/cpu/link.cpp) and the CUDA backend (the
// library brisk_cuda, kernels/cuda/link.cpp) each hold a static initializer that calls
// add_backend_init with their registrar, and a symbol (brisk_kernels_cpu_linked,
// brisk_cuda_linked) that the link interface names with `-u`, so that the linker keeps that
// object out of the static archive even though nothing else refers to it. init() defines the
// OpDefs (engine/ops) and then runs the registrars. brisk_cuda is a library of its own so that
// a CPU-only program linked against a CUDA build of brisk needs neither the CUDA toolkit nor its
// runtime (libcudart) to link, start or run. The same holds for dist's NCCL backend
// (brisk::dist_nccl, dist/nccl_group.cpp). init() runs once, on first use of any op
// (ensure_init in engine/dispatch.cpp).
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
  BackendInits& b = backend_inits();
  std::lock_guard<std::mutex> lock(b.mu);
  for (auto fn : b.fns) fn();
  b.ran = true;
}

}  // namespace brisk
