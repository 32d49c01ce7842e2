// engine/allocator.cpp: CachingAllocator and the CPU raw allocator behind cpu_allocator().
#include "engine/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>

#include "engine/error.h"

namespace brisk {

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes <= 256) return std::max<size_t>(64, (bytes + 63) & ~size_t(63));
  if (bytes >= kLargeBlock) {
    constexpr size_t kGranule = size_t(64) << 10;
    return (bytes + kGranule - 1) / kGranule * kGranule;
  }
  size_t pow2 = std::bit_floor(bytes - 1);  // largest power of two below bytes
  size_t step = pow2 / 4;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

void* CachingAllocator::allocate(size_t bytes, uint64_t stream) {
  if (bytes == 0) return nullptr;
  // Past this no device has the memory, and the rounding below would wrap around.
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    throw OutOfMemoryError(
        detail::cat("allocator: out of memory allocating ", bytes, " bytes (more than any device has)"));
  }
  const size_t size = round_size(bytes);
  const bool large = size >= kLargeBlock;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (limit_ != 0 && stats_.allocated + size > limit_) {
      throw OutOfMemoryError(detail::cat("allocator: out of memory allocating ", bytes, " bytes: ", stats_.allocated,
                                         " bytes in use and a limit of ", limit_, " bytes (Allocator::set_limit)"));
    }
    // Small: the block of this exact class. Large: the smallest at most a quarter larger.
    // (An entry whose list empties is erased, so the lower bound is a block of some size.)
    auto it = large ? free_.lower_bound({stream, size}) : free_.find({stream, size});
    if (it != free_.end() && it->first.first == stream && (!large || it->first.second <= size + size / 4)) {
      const size_t block = it->first.second;
      void* p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_.erase(it);
      if (large) large_[p] = block;
      stats_.cached -= block;
      stats_.allocated += block;
      stats_.peak = std::max(stats_.peak, stats_.allocated);
      ++stats_.cache_hits;
      return p;
    }
  }
  void* p = raw_.alloc(size, raw_.ctx);
  if (!p) {
    empty_cache();
    p = raw_.alloc(size, raw_.ctx);
  }
  if (!p) throw OutOfMemoryError(detail::cat("allocator: out of memory allocating ", bytes, " bytes"));
  std::lock_guard<std::mutex> lock(mu_);
  if (large) large_[p] = size;
  stats_.allocated += size;
  stats_.peak = std::max(stats_.peak, stats_.allocated);
  ++stats_.system_allocs;
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes, uint64_t stream) {
  if (!ptr) return;
  size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (size >= kLargeBlock) {  // the block's own size, which a best fit may have made larger
    auto it = large_.find(ptr);
    if (it != large_.end()) {
      size = it->second;
      large_.erase(it);
    }
  }
  free_[{stream, size}].push_back(ptr);
  stats_.allocated -= size;
  stats_.cached += size;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.allocated;
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = bytes;
}

size_t CachingAllocator::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_;
}

namespace {
struct Hooks {
  std::mutex mu;
  std::vector<void (*)()> fns;
};
Hooks& hooks() {
  static Hooks* h = new Hooks();  // leaked: allocators are used during static destruction
  return *h;
}
}  // namespace

void add_empty_cache_hook(void (*fn)()) {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mu);
  if (std::find(h.fns.begin(), h.fns.end(), fn) == h.fns.end()) h.fns.push_back(fn);
}

void CachingAllocator::empty_cache() {
  {
    Hooks& h = hooks();
    std::lock_guard<std::mutex> lock(h.mu);
    for (auto fn : h.fns) fn();
  }
  std::map<std::pair<uint64_t, size_t>, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The free blocks of retained streams stay: a captured graph still addresses them.
    for (auto it = free_.begin(); it != free_.end();) {
      if (retained_.count(it->first.first)) {
        ++it;
        continue;
      }
      stats_.cached -= it->first.second * it->second.size();
      blocks.insert(free_.extract(it++));
    }
  }
  for (auto& [key, ptrs] : blocks) {
    for (void* p : ptrs) raw_.free(p, key.second, raw_.ctx);
  }
}

void CachingAllocator::retain_stream(uint64_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ++retained_[stream];
}

void CachingAllocator::release_stream(uint64_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = retained_.find(stream);
  if (it != retained_.end() && --it->second == 0) retained_.erase(it);
}

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

// A block of 2 MiB or more starts on a huge page, and its size is not rounded to whole huge
// pages: the partial huge page at its end keeps small pages, so that the block's resident size
// is its own (Note [Caching allocator]).
void* cpu_raw_alloc(size_t bytes, void*) {
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes) != 0) return nullptr;
  if (bytes >= kHugePage) {  // advice only; failure is harmless
    const size_t whole = bytes / kHugePage * kHugePage;
    madvise(p, whole, MADV_HUGEPAGE);
  }
  return p;
}

void cpu_raw_free(void* p, size_t, void*) { std::free(p); }

}  // namespace

Allocator& cpu_allocator() {
  // Leaked on purpose: tensors held in static objects may be freed after this would be.
  static CachingAllocator* alloc = new CachingAllocator(RawMemory{cpu_raw_alloc, cpu_raw_free, nullptr});
  return *alloc;
}

}  // namespace brisk
