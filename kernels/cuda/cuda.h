// kernels/cuda/cuda.h: the public face of the CUDA backend: device discovery, the current
// stream per device (Stream, StreamGuard), events for ordering and timing, the TF32 switch
// and the caching allocator's statistics. Plain C++: it pulls in no CUDA header, so user code
// and tests include it freely. Every function is callable without a GPU (device_count() is
// then 0, is_available() false); those that need a device throw brisk::Error.
// Not here: kernels (kernels/cuda/*.cu) and the internal helpers (kernels/cuda/runtime.h).
#pragma once

#include <cstdint>

#include "engine/allocator.h"

namespace brisk::kernels::cuda {

// GPUs usable now: 0 without a driver or a GPU (never an error).
int device_count();
inline bool is_available() { return device_count() > 0; }
// Waits for all work queued on `device` (-1: every device), then reports errors that kernels
// recorded on the device (an out-of-range index, see Note [Device errors]).
void synchronize(int device = -1);

// TF32 tensor-core math for F32 matmuls (about 8x faster, ~1e-3 relative error). Off by
// default, as in PyTorch.
void set_allow_tf32(bool allow);
bool allow_tf32();

// ---- memory (the per-device caching allocator; see Note [Caching allocator])
AllocatorStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
// Returns cached, unused device blocks to the driver (cudaFree).
void empty_cache(int device = 0);
AllocatorStats pinned_memory_stats();

// ---- streams and events
// A queue of work on one device. Streams made by Stream::create live as long as the process
// (as in PyTorch), so copying a Stream is free and never dangles.
class Stream {
 public:
  Stream() = default;  // the null stream handle (only for comparison)
  static Stream create(int device = 0, bool high_priority = false);
  // The stream brisk queues on when no other is current: one per device, made on first use.
  static Stream default_stream(int device = 0);
  void* handle() const { return handle_; }  // a cudaStream_t
  int device() const { return device_; }
  uint64_t id() const { return reinterpret_cast<uint64_t>(handle_); }
  void synchronize() const;
  bool query() const;  // true when all its work is done
  friend bool operator==(Stream a, Stream b) { return a.handle_ == b.handle_ && a.device_ == b.device_; }

 private:
  friend Stream current_stream(int device);
  Stream(void* handle, int device) : handle_(handle), device_(device) {}
  void* handle_ = nullptr;
  int device_ = 0;
};

// The calling thread's current stream on `device` (thread-local; default_stream until set).
Stream current_stream(int device = 0);
void set_current_stream(Stream stream);

// Makes `stream` current on its device for a scope.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// A marker in a stream: record it, then wait on it (host or another stream) or time between two.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(Stream stream);
  void record();  // on the current stream of the current device
  void synchronize() const;
  bool query() const;
  // Makes `stream` wait for this event (no host blocking).
  void block(Stream stream) const;
  // Milliseconds between this event and `end` (both recorded, made with timing = true).
  float elapsed_ms(const Event& end) const;
  void* handle() const { return event_; }

 private:
  void ensure(int device);
  void* event_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

// Makes `device` current for the calling thread for a scope (cudaSetDevice), restoring the
// previous one after. A no-op when it is already current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

}  // namespace brisk::kernels::cuda

// brisk::cuda::is_available(), as torch.cuda reads.
namespace brisk {
namespace cuda = kernels::cuda;
}
