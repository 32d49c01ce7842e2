// engine/allocator.h: the Allocator interface and CachingAllocator, the size-class cache that
// every device uses (CPU heap here; cudaMalloc and pinned host memory in kernels/cuda).
// Freed blocks are kept for reuse instead of going back to the system: on the project's VMs
// the first touch of a fresh page costs ~11 us, so a training step that re-faults its memory
// runs several times slower (see Note [Caching allocator]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace brisk {

struct AllocatorStats {
  size_t allocated = 0;        // bytes handed out and not yet returned (size-class rounded)
  size_t cached = 0;           // bytes held in free lists, ready for reuse
  size_t peak = 0;             // high-water mark of `allocated`
  uint64_t system_allocs = 0;  // calls to the underlying allocator (malloc, cudaMalloc, ...)
  uint64_t cache_hits = 0;     // allocations served from the cache
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `stream` keys reuse for devices with streams (CUDA); 0 elsewhere.
  virtual void* allocate(size_t bytes, uint64_t stream = 0) = 0;
  virtual void deallocate(void* ptr, size_t bytes, uint64_t stream = 0) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() {}
  virtual void empty_cache() {}
  // A cap on the bytes handed out and not yet returned (AllocatorStats::allocated, size-class
  // rounded); a request past it throws OutOfMemoryError as if the device were full. 0: none
  // (the default). For budgets on the CPU and for testing what fits in less memory than the
  // device has (PyTorch's set_per_process_memory_fraction).
  virtual void set_limit(size_t /*bytes*/) {}
  virtual size_t limit() const { return 0; }
  // Keeps the cached blocks of `stream` out of empty_cache() until as many release_stream
  // calls: a CUDA graph captured on that stream addresses them (Note [Graph memory pool] in
  // kernels/cuda/graph.cpp).
  virtual void retain_stream(uint64_t /*stream*/) {}
  virtual void release_stream(uint64_t /*stream*/) {}
};

// Where a CachingAllocator gets memory from. `alloc` returns nullptr when out of memory.
struct RawMemory {
  void* (*alloc)(size_t bytes, void* ctx);
  void (*free)(void* ptr, size_t bytes, void* ctx);
  void* ctx = nullptr;
};

// Note [Caching allocator]
// Small requests (below kLargeBlock, 1 MiB) are rounded up to a size class (64-byte granularity
// below 256 bytes, then four classes per power of two, so at most 25% is wasted); a freed block
// goes to the free list of its (stream, class) and the next request of that class and stream
// takes it back. Large requests are rounded to 64 KiB only, and take the smallest free block of
// their stream that is at least as large and at most a quarter larger (best fit; the block keeps
// its size, recorded while it is handed out). A training loop asks for the same sizes every
// step and gets them back exactly, while the blocks made once (parameters, optimizer state) are
// not rounded up by as much as a quarter: under classes GPT-2 124M's parameters took 543 MB for
// 498 MB of data, and as much again for each of AdamW's two moments. Blocks are never split or
// merged: simple, and a step's sizes repeat.
// When the raw allocator fails, the cache is emptied and the request retried once (on CUDA,
// cudaFree waits for the device, so no queued kernel still uses a freed block); a second
// failure, or a request past the limit (set_limit), throws OutOfMemoryError.
// Not handled yet (known limit): a device block is reused by the next request on the stream
// it was allocated on, with no record of other streams that used it. A tensor made on stream
// A, used by a kernel queued on stream B and dropped before B ran must be kept alive (or the
// streams synchronized) by the caller; PyTorch's record_stream is the missing piece.
class CachingAllocator : public Allocator {
 public:
  explicit CachingAllocator(RawMemory raw) : raw_(raw) {}
  ~CachingAllocator() override;

  void* allocate(size_t bytes, uint64_t stream = 0) override;
  void deallocate(void* ptr, size_t bytes, uint64_t stream = 0) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;
  void set_limit(size_t bytes) override;
  size_t limit() const override;
  void retain_stream(uint64_t stream) override;
  void release_stream(uint64_t stream) override;

  // The size a request of `bytes` is rounded to (a class below kLargeBlock, 64 KiB above).
  static size_t round_size(size_t bytes);
  static constexpr size_t kLargeBlock = size_t(1) << 20;

 private:
  RawMemory raw_;
  mutable std::mutex mu_;
  std::map<std::pair<uint64_t, size_t>, std::vector<void*>> free_;  // (stream, block size) -> blocks
  std::unordered_map<void*, size_t> large_;                         // large blocks handed out -> size
  AllocatorStats stats_;
  size_t limit_ = 0;
  std::map<uint64_t, int> retained_;  // stream -> retain count
};

// The process-wide CPU allocator: 64-byte aligned, huge pages advised for blocks >= 2 MiB.
Allocator& cpu_allocator();

// Functions every CachingAllocator::empty_cache() runs first: the CPU kernels register one
// that makes their per-thread workspaces (kernels/cpu/scratch.h) give their blocks back on
// next use, so that memory a large product once needed does not stay counted as in use.
void add_empty_cache_hook(void (*fn)());

}  // namespace brisk
