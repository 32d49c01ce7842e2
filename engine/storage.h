// engine/storage.h: StorageImpl, the refcounted buffer under one or more tensor views.
// It owns the bytes (returned to its allocator on destruction) and carries the version
// counter that autograd uses to detect in-place changes of saved tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/allocator.h"
#include "engine/device.h"

namespace brisk {

struct StorageImpl {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  Allocator* allocator = nullptr;      // owner of `data`, or nullptr for external memory
  uint64_t stream = 0;                 // allocator reuse key (CUDA stream)
  std::function<void(void*)> deleter;  // for external memory (from_blob); may be empty
  bool pinned = false;                 // page-locked host memory
  uint32_t version = 0;                // bumped by every in-place write

  StorageImpl() = default;
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  ~StorageImpl() {
    if (allocator) {
      allocator->deallocate(data, bytes, stream);
    } else if (deleter) {
      deleter(data);
    }
  }
};

using Storage = std::shared_ptr<StorageImpl>;

// `bytes` of uninitialized memory on `device`, from that device's caching allocator.
// pinned: page-locked host memory (device must be CPU; needs the CUDA backend).
Storage make_storage(size_t bytes, Device device, bool pinned = false);

}  // namespace brisk
