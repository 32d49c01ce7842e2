// engine/trace.cpp: the op recorder (engine/trace.h).
#include "engine/trace.h"

#include "engine/error.h"
#include "engine/hooks.h"

namespace brisk::trace {

namespace detail {
std::atomic<int> g_recorders{0};
namespace {
thread_local Recorder* t_recorder = nullptr;
thread_local int t_depth = 0;
}  // namespace

bool enter() {
  if (!t_recorder) return false;
  return t_depth++ == 0;
}

void leave(bool outermost, OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<const Tensor> out) {
  if (!t_recorder) return;
  --t_depth;
  if (outermost) detail_record(id, in, attrs, out);
}

Recorder*& current() { return t_recorder; }
}  // namespace detail

void detail_record(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<const Tensor> out) {
  Recorder* r = detail::current();
  r->records_.push_back(
      {id, attrs, std::vector<Tensor>(in.begin(), in.end()), std::vector<Tensor>(out.begin(), out.end())});
}

namespace {

// Around every op (engine/hooks.h): the outermost op of a recording thread is recorded with its
// inputs as given (before autocast) and its outputs.
const Node* trace_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out,
                     hooks::OpRun next) {
  if (!detail::any_active()) return next(id, in, attrs, out);
  const bool outermost = detail::enter();
  const Node* node = nullptr;
  try {
    node = next(id, in, attrs, out);
  } catch (...) {
    detail::leave(false, id, in, attrs, out);
    throw;
  }
  detail::leave(outermost, id, in, attrs, out);
  return node;
}

}  // namespace

Recorder::Recorder() {
  BRISK_CHECK(detail::current() == nullptr, "trace::Recorder: this thread is already recording");
  hooks::trace_op.store(&trace_op, std::memory_order_relaxed);  // from the first recorder on
  detail::current() = this;
  detail::g_recorders.fetch_add(1, std::memory_order_relaxed);
}

Recorder::~Recorder() {
  detail::current() = nullptr;
  detail::g_recorders.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace brisk::trace
