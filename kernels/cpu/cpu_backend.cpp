// kernels/cpu/cpu_backend.cpp: the CPU Backend (host memory from the caching allocator).
#include <cstring>

#include "engine/backend.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {
class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }
  int device_count() const override { return 1; }
  Allocator& allocator(int) override { return cpu_allocator(); }
  void copy(void* dst, Device, const void* src, Device, size_t bytes, bool) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void memset(void* dst, int value, size_t bytes, Device) override {
    if (bytes) std::memset(dst, value, bytes);
  }
  void synchronize(int) override {}
};
}  // namespace

void register_backend() {
  static CpuBackend backend;
  brisk::register_backend(&backend);
}

}  // namespace brisk::kernels::cpu
