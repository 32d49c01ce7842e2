// engine/backend.cpp: the backend registry and make_storage.
#include "engine/backend.h"

#include "engine/dispatch.h"
#include "engine/error.h"
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

}  // namespace brisk
