// engine/trace.h: a record of the ops a forward dispatches, for the tools that need the graph
// a computation took (ONNX export, interop/onnx_export.h). While a trace::Recorder lives, every
// op its thread dispatches at the top level is appended to it with its attributes and its
// input and output tensors (the handles themselves, so a later op's input is recognized as an
// earlier op's output by identity). Ops that run inside another op (a kernel's own calls,
// autocast's casts) are part of that op and are not recorded. With no recorder alive the
// dispatcher pays one relaxed atomic load per op, as for the profiler.
// Not here: the profiler's timing events (engine/profiler.h), the autograd tape.
#pragma once

#include <atomic>
#include <span>
#include <vector>

#include "engine/op.h"
#include "engine/tensor.h"

namespace brisk::trace {

struct OpRecord {
  OpId id{};
  Attrs attrs{};
  std::vector<Tensor> inputs{};
  std::vector<Tensor> outputs{};
};

class Recorder {
 public:
  Recorder();  // one per thread at a time (a second on the same thread is an error)
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  const std::vector<OpRecord>& records() const { return records_; }

 private:
  friend void detail_record(OpId, std::span<const Tensor>, const Attrs&, std::span<const Tensor>);
  std::vector<OpRecord> records_;
};
void detail_record(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<const Tensor> out);

namespace detail {
extern std::atomic<int> g_recorders;  // alive on any thread
inline bool any_active() { return g_recorders.load(std::memory_order_relaxed) > 0; }
// The dispatcher's side: enter() before an op, leave() after it with the op's record; only the
// outermost op of this thread's recorder is kept.
Recorder*& current();
bool enter();  // whether this thread records (and the op is outermost)
void leave(bool outermost, OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<const Tensor> out);
}  // namespace detail

}  // namespace brisk::trace
