// train/batch_size.cpp: the batch-size finder (train/batch_size.h).
#include "train/batch_size.h"

#include <cmath>
#include <sstream>

#include "engine/allocator.h"
#include "engine/backend.h"
#include "engine/error.h"

namespace brisk::training {

double scale_lr(double base_lr, int64_t base_batch, int64_t batch, LrScaling rule) {
  BRISK_CHECK(base_batch >= 0 && batch >= 0, "scale_lr: batch sizes must be >= 0, got base ", base_batch, " and ",
              batch);
  if (base_batch == 0 || rule == LrScaling::None) return base_lr;
  double ratio = double(batch) / double(base_batch);
  return rule == LrScaling::Linear ? base_lr * ratio : base_lr * std::sqrt(ratio);
}

namespace {

// Restores the allocator's limit however the search ends.
struct LimitGuard {
  Allocator& alloc;
  size_t old;
  ~LimitGuard() { alloc.set_limit(old); }
};

}  // namespace

BatchSizeResult find_batch_size(const std::function<void(int64_t batch)>& step, const BatchSizeSearch& s) {
  BRISK_CHECK(step, "find_batch_size: no step function");
  BRISK_CHECK(s.initial >= 1 && s.max_batch >= s.initial, "find_batch_size: need 1 <= initial <= max_batch, got ",
              s.initial, " and ", s.max_batch);
  BRISK_CHECK(s.memory_budget > 0 || !s.device.is_cpu(),
              "find_batch_size: a memory_budget is required on the CPU (running out of host memory is not an "
              "error the search can catch)");
  Allocator& alloc = backend(s.device).allocator(s.device.index);
  LimitGuard guard{alloc, alloc.limit()};
  if (s.memory_budget > 0) {
    alloc.empty_cache();
    size_t in_use = alloc.stats().allocated;
    BRISK_CHECK(in_use < s.memory_budget, "find_batch_size: ", in_use, " bytes are already in use on ", s.device,
                ", at or above the budget of ", s.memory_budget, " bytes");
    alloc.set_limit(s.memory_budget);
  }

  BatchSizeResult r;
  auto probe = [&](int64_t batch) {
    alloc.empty_cache();
    alloc.reset_peak();
    BatchSizeProbe p{batch, true, 0};
    try {
      step(batch);
      p.peak_bytes = alloc.stats().peak;
    } catch (const OutOfMemoryError&) {
      p.fits = false;
    }
    alloc.empty_cache();
    r.probes.push_back(p);
    if (p.fits && batch > r.batch_size) {
      r.batch_size = batch;
      r.peak_bytes = p.peak_bytes;
    }
    return p.fits;
  };

  // Doubling: lo fits (or is 0), hi does not (or is max_batch + 1).
  int64_t lo = 0, hi = s.max_batch + 1;
  for (int64_t b = s.initial;; b = std::min(b * 2, s.max_batch)) {
    if (!probe(b)) {
      hi = b;
      break;
    }
    lo = b;
    if (b == s.max_batch) break;
  }
  if (lo == 0) hi = s.initial;  // not even the first fit: nothing below it is tried
  while (lo > 0 && hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (probe(mid) ? lo : hi) = mid;
  }
  r.lr = scale_lr(s.base_lr, s.base_batch, r.batch_size, s.scaling);
  return r;
}

std::string BatchSizeResult::to_string() const {
  std::ostringstream os;
  os << "batch-size search:";
  for (const BatchSizeProbe& p : probes) {
    os << " " << p.batch << (p.fits ? "" : "(oom)");
  }
  os << "\n";
  if (batch_size == 0) {
    os << "  nothing fits\n";
  } else {
    os << "  largest batch that fits: " << batch_size << " (peak " << double(peak_bytes) / (1 << 20)
       << " MiB), learning rate " << lr << "\n";
  }
  return os.str();
}

}  // namespace brisk::training
