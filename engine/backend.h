// engine/backend.h: the small per-device interface (memory, copies, synchronization) and the
// registry that maps a DeviceType to its Backend. Ops are NOT methods here: kernels are
// registered per op in the OpDef table (engine/op.h), so adding an op never touches this.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/allocator.h"
#include "engine/device.h"

namespace brisk {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  // Devices of this type present at run time (0 for CUDA without a driver or GPU).
  virtual int device_count() const = 0;
  virtual Allocator& allocator(int index) = 0;
  // Stream that new work on `index` is queued on; keys allocator reuse. 0 for the CPU.
  virtual uint64_t current_stream(int /*index*/) { return 0; }
  // Copies bytes between memory of this backend and the CPU (or within this backend).
  // non_blocking lets the copy run asynchronously when the host side is pinned memory.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                    bool non_blocking) = 0;
  virtual void memset(void* dst, int value, size_t bytes, Device device) = 0;
  virtual void synchronize(int index) = 0;
  // Page-locked host memory (CUDA) for fast, asynchronous host<->device copies; nullptr when
  // the backend has none.
  virtual Allocator* pinned_allocator() { return nullptr; }
  // Whether the calling thread is recording a CUDA graph on device `index` (kernels/cuda/cuda.h:
  // Graph); code that bakes host-side values into the work it queues checks it.
  virtual bool is_capturing(int /*index*/) { return false; }
};

// Registered by a kernel library's registrar (Note [Backend libraries] in engine/backend.cpp).
// A second registration replaces the first.
void register_backend(Backend* backend);
// A kernel library (kernels/cpu/link.cpp, brisk_cuda's kernels/cuda/link.cpp) adds the function
// that registers its backend and kernels, at static-initialization time; init() runs each, and
// one added after init() has run is run at once. So a program that does not link the library
// has no trace of that backend (Note [Backend libraries] in engine/backend.cpp).
void add_backend_init(void (*register_fn)());
// Defines every OpDef, then runs the registrars added so far. Runs once, through ensure_init()
// (engine/dispatch.h) on first use of any op.
void init();
// nullptr when the backend is not built in.
Backend* find_backend(DeviceType type);
// The backend of `device`; throws brisk::Error when it is not built or the index is absent.
Backend& backend(Device device);

}  // namespace brisk
