// engine/profiler.h: brisk::profiler, a scoped profiling run (PyTorch's torch.profiler). While
// a Profiler is alive every dispatched op is recorded (name, input shapes and dtypes, device,
// CPU time, bytes of its outputs, the autograd node it recorded), every backward node as a
// range linked to the forward op that made it, user ranges (RecordFunction: "data",
// "forward", "optimizer", ...) and the data loader's waits. stop() returns a Profile: a summary
// table sorted by self time (key_averages()) and a Chrome trace JSON file that Perfetto and
// chrome://tracing open. With no run active the cost is one relaxed atomic load per op
// (Note [Profiler]). Not here: the anomaly mode (engine/nonfinite.h), allocator statistics
// (engine/allocator.h), CUDA-side timing (not recorded yet: CUDA ops show their CPU launch
// time).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/device.h"

namespace brisk {
class Tensor;
}

namespace brisk::profiler {

// Note [Profiler]
// Events go into one buffer per thread (registered with the run; a mutex per buffer that only
// its thread and stop() take), so threads (loader workers, OpenMP callers) never contend.
// Times are steady_clock nanoseconds since the run started. Nesting is per thread and follows
// RAII scopes, so an event's children are the events of its thread that start and end within
// it; self time is its duration minus its direct children's. A forward op that records an
// autograd node carries the node's sequence number; the backward range of that node carries
// the same number, which the trace draws as a flow arrow from forward to backward. The
// dispatcher tests is_active() once per op (engine/dispatch.cpp) and runs the recording path
// only when a run is on; bench_overhead measures both.

enum class EventKind : uint8_t { Op, Backward, Range, LoaderWait };
const char* event_kind_name(EventKind kind);  // "op", "backward", "range", "loader"

struct Event {
  std::string name{};
  EventKind kind = EventKind::Op;
  int64_t start_ns = 0;  // since the run started
  int64_t end_ns = 0;
  uint32_t thread = 0;   // 0, 1, ... in the order threads first recorded
  std::string shapes{};  // inputs' sizes, "[128, 784], [256, 784]" (record_shapes)
  std::string dtypes{};  // inputs' dtypes, "F32, F32"
  Device device = Device::cpu();
  int64_t sequence_nr = -1;  // the autograd node's (forward op that recorded one, or backward)
  int64_t bytes = 0;         // bytes of the op's outputs that it allocated
  int64_t self_ns = 0;       // filled by stop(): duration minus direct children
  int depth = 0;             // filled by stop(): nesting depth on its thread
  int64_t duration_ns() const { return end_ns - start_ns; }
};

struct OpStats {
  std::string name{};
  EventKind kind = EventKind::Op;
  std::string shapes{};  // set when grouped by shape
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
  int64_t bytes = 0;
};

class Profile {
 public:
  Profile() = default;
  explicit Profile(std::vector<Event> events);
  const std::vector<Event>& events() const { return events_; }
  // Aggregates by name (and kind; by input shapes too when group_by_shape), sorted by self time.
  std::vector<OpStats> key_averages(bool group_by_shape = false) const;
  // key_averages() as a text table: name, calls, self and total time with percentages, average,
  // bytes; the first row_limit rows and the totals.
  std::string table(size_t row_limit = 25, bool group_by_shape = false) const;
  std::string chrome_trace_json() const;
  // Writes chrome_trace_json() atomically (temp file, rename).
  void export_chrome_trace(const std::string& path) const;
  int64_t wall_ns() const;  // first start to last end

 private:
  std::vector<Event> events_;
};

struct ProfilerOptions {
  bool record_shapes = true;  // inputs' shapes and dtypes per op (a few hundred ns per op)
};

// Starts a run on construction; stop() (or the destructor) ends it. One run at a time: a
// second Profiler while one is active is a brisk::Error.
class Profiler {
 public:
  explicit Profiler(const ProfilerOptions& options = {});
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  Profile stop();

 private:
  bool stopped_ = false;
};

namespace detail {
inline std::atomic<bool> g_active{false};
}
inline bool is_active() { return detail::g_active.load(std::memory_order_relaxed); }

// A user range ("data", "forward", "optimizer"): recorded from construction to destruction
// when a run is active, nothing otherwise.
class RecordFunction {
 public:
  explicit RecordFunction(std::string name, EventKind kind = EventKind::Range);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;
  void set_sequence_nr(int64_t s) { sequence_nr_ = s; }

 private:
  std::string name_;
  int64_t start_ = -1;  // -1: not recording
  int64_t sequence_nr_ = -1;
  EventKind kind_;
};

namespace detail {
int64_t now_ns();  // since the active run started
bool record_shapes();
void record(Event&& e);  // into this thread's buffer (drops it when no run is active)
std::string describe_shapes(std::span<const Tensor> in);
std::string describe_dtypes(std::span<const Tensor> in);
}  // namespace detail

}  // namespace brisk::profiler
