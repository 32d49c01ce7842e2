// train/batch_size.h: the batch-size finder. The largest batch whose training step fits a
// memory budget, found by doubling and then a binary search, with out-of-memory caught as an
// error (OutOfMemoryError from the device's caching allocator), and the learning rate scaled
// to it by the linear or square-root rule (the guide's sections 2.1 and 7.1). On CUDA the
// budget defaults to the device itself; on the CPU, where running out of memory means the
// kernel's OOM killer rather than an error, a budget is required and is enforced through the
// allocator's limit (Allocator::set_limit). Not here: the step itself (the caller's), the
// allocator (engine/allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/device.h"

namespace brisk::training {

enum class LrScaling { None, Linear, Sqrt };

struct BatchSizeSearch {
  Device device = Device::cpu();
  // Bytes the step may hold at once on `device` (allocator bytes in use, parameters and
  // optimizer state included). Required on the CPU; on CUDA 0 means the device's memory.
  size_t memory_budget = 0;
  int64_t initial = 1;        // first batch tried; then doubled
  int64_t max_batch = 65536;  // never tried beyond (e.g. the dataset's size)
  // The learning rate tuned at base_batch, scaled to the batch found: lr * found / base
  // (Linear, Goyal et al.) or lr * sqrt(found / base) (Sqrt, for Adam-like optimizers).
  double base_lr = 0;
  int64_t base_batch = 0;  // 0: no scaling (result.lr = base_lr)
  LrScaling scaling = LrScaling::Linear;
};

struct BatchSizeProbe {
  int64_t batch = 0;
  bool fits = false;
  size_t peak_bytes = 0;  // allocator high-water mark during the step (0 when it did not fit)
};

struct BatchSizeResult {
  int64_t batch_size = 0;                // largest batch that fit; 0 when not even `initial` did
  double lr = 0;                         // base_lr scaled to batch_size
  size_t peak_bytes = 0;                 // the step's peak at batch_size
  std::vector<BatchSizeProbe> probes{};  // in the order tried
  std::string to_string() const;         // a few lines: the probes and the answer
};

// Runs step(batch) (one forward, backward and optimizer step at that batch size; whatever it
// allocates is freed when it returns) for each candidate. A step that throws OutOfMemoryError
// marks the batch as too large; any other exception propagates. Every step gets the cache
// emptied before it, so what counts is what the step holds, not leftovers. The allocator's
// previous limit is restored on return. Assumes the peak grows with the batch (it does for
// ordinary steps); the answer is the largest b tried with fits(b) and !fits(b + 1) or b = max.
BatchSizeResult find_batch_size(const std::function<void(int64_t batch)>& step, const BatchSizeSearch& search);

// base_lr scaled from base_batch to `batch` by `rule` (base_batch 0: base_lr).
double scale_lr(double base_lr, int64_t base_batch, int64_t batch, LrScaling rule);

}  // namespace brisk::training
