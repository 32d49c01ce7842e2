// engine/trace.cpp: the op recorder (engine/trace.h).
#include "engine/trace.h"

#include "engine/error.h"

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

Recorder::Recorder() {
  BRISK_CHECK(detail::current() == nullptr, "trace::Recorder: this thread is already recording");
  detail::current() = this;
  detail::g_recorders.fetch_add(1, std::memory_order_relaxed);
}

Recorder::~Recorder() {
  detail::current() = nullptr;
  detail::g_recorders.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace brisk::trace
