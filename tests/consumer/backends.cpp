// tests/consumer/backends.cpp: which backends an installed brisk registers in a program that
// links it (Note [Backend libraries] in engine/backend.cpp). Built by tests/consumer/CMakeLists.txt with
// EXPECT_CUDA=1 when the program links brisk::cuda; exits 1 when the registry disagrees, and
// checks that a CUDA tensor without the backend is a clear brisk::Error.
#include <brisk.h>

#include <cstdio>
#include <string>

#ifndef EXPECT_CUDA
#define EXPECT_CUDA 0
#endif

int main() {
  using namespace brisk;
  Tensor x = ones({2, 2});  // the first op runs init(), which registers every linked backend
  const bool cpu = find_backend(DeviceType::CPU) != nullptr;
  const bool cuda = find_backend(DeviceType::CUDA) != nullptr;
  std::printf("backends: cpu %s, cuda %s (expected %s)\n", cpu ? "yes" : "no", cuda ? "yes" : "no",
              EXPECT_CUDA ? "yes" : "no");
  if (!cpu || cuda != bool(EXPECT_CUDA)) return 1;
  if (!cuda || find_backend(DeviceType::CUDA)->device_count() == 0) {
    try {
      (void)x.to(Device::cuda());
      std::printf("a CUDA tensor without a CUDA device did not fail\n");
      return 1;
    } catch (const Error& e) {
      std::printf("x.to(cuda:0): %s\n", std::string(e.what()).substr(0, 120).c_str());
    }
  }
  return 0;
}
