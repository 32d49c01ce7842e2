// kernels/cuda/cuda.h: the public face of the CUDA backend: device discovery, the current
// stream per device (Stream, StreamGuard), events for ordering and timing, the TF32 switch
// and the caching allocator's statistics. Plain C++: it pulls in no CUDA header, so user code
// and tests include it freely. Every function is callable without a GPU (device_count() is
// then 0, is_available() false); those that need a device throw brisk::Error.
// Not here: kernels (kernels/cuda/*.cu) and the internal helpers (kernels/cuda/runtime.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

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

// ---- CUDA graphs (Note [CUDA graphs] in kernels/cuda/graph.cpp)
// Records the kernels that a piece of brisk code queues (a whole training step, say) once, then
// launches them all again with one call. The recorded kernels keep their arguments: the same
// tensors at the same addresses, the same shapes, the same scalars. So new data goes into the
// static input tensors by copy_ before each replay, and the outputs (loss, gradients, updated
// parameters) are read from the tensors the captured code produced.
//
//   cuda::Graph graph;
//   graph.capture([&] {                        // warm-up runs, then the recorded run
//     opt.zero_grad();                         // set to none: backward writes, not accumulates
//     loss = cross_entropy(model(static_x), static_y);
//     loss.backward();
//     opt.step();                              // SGD; Adam refuses (host-side bias corrections)
//   });
//   for (auto& [x, y] : batches) { static_x.copy_(x); static_y.copy_(y); graph.replay(); }
//
// While capturing, a host<->device copy or a synchronization is a brisk::Error (they cannot be
// recorded), as is freeing device memory (out of memory during capture). The blocks that the
// captured code allocated stay reserved for the graph (empty_cache keeps them) until reset().
class Graph {
 public:
  explicit Graph(int device = 0);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Runs fn `warmup` times on the graph's stream (not recorded: lazy library set-up, cuDNN's
  // algorithm choice and the allocator's first allocations happen here), then records one run.
  // If fn throws while recording, the capture is abandoned and the exception propagates.
  void capture(const std::function<void()>& fn, int warmup = 2);
  // The two halves of capture(fn, 0), for code that cannot be a single callable.
  void capture_begin();
  void capture_end();
  // Launches the recorded work on the graph's stream, ordered after the work already queued
  // on the current stream, and makes the current stream wait for it.
  void replay();
  // Drops the recorded graph and gives its memory back to the cache.
  void reset();
  bool captured() const { return exec_ != nullptr; }
  bool capturing() const { return capturing_; }
  int device() const { return device_; }
  Stream stream() const { return stream_; }
  size_t num_nodes() const { return nodes_; }  // kernels, copies and memsets recorded

 private:
  void abandon();
  void retain();
  int device_ = 0;
  Stream stream_{};
  Event before_{}, after_{};  // order the graph's stream with the current one
  Stream prev_{};             // the current stream before capture_begin
  void* graph_ = nullptr;     // cudaGraph_t
  void* exec_ = nullptr;      // cudaGraphExec_t
  bool capturing_ = false;
  bool retained_ = false;  // the allocator keeps stream_'s blocks
  size_t nodes_ = 0;
};

// Whether the calling thread is recording a graph on `device`'s current stream.
bool is_capturing(int device = 0);

}  // namespace brisk::kernels::cuda

// brisk::cuda::is_available(), as torch.cuda reads.
namespace brisk {
namespace cuda = kernels::cuda;
}
