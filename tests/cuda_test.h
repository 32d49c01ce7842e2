// tests/cuda_test.h: what the CUDA test files share: BRISK_REQUIRE_GPU() (a test case that
// needs a GPU returns early, with a message, where there is none, so the suite passes on
// machines without one) and kGpu, the device those tests use. Only for BRISK_WITH_CUDA builds.
// Not here: the CPU/CUDA comparison helpers (each test file keeps its own).
#pragma once

#include <doctest/doctest.h>

#include "engine/device.h"
#include "kernels/cuda/cuda.h"

namespace brisk::test {

inline bool has_gpu() { return cuda::device_count() > 0; }

inline const Device kGpu = Device::cuda(0);

}  // namespace brisk::test

#define BRISK_REQUIRE_GPU()                         \
  do {                                              \
    if (!::brisk::test::has_gpu()) {                \
      MESSAGE("skipped: no CUDA device available"); \
      return;                                       \
    }                                               \
  } while (0)
