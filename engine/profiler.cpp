// engine/profiler.cpp: the profiler's per-thread buffers, the run's start and stop, self times,
// key_averages, the table and the Chrome trace (engine/profiler.h, Note [Profiler]).
#include "engine/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/hooks.h"
#include "engine/serialize.h"
#include "engine/tensor.h"

namespace brisk::profiler {

namespace {

struct ThreadBuffer {
  std::mutex mu;
  std::vector<Event> events;
  uint64_t generation = 0;
  uint32_t id = 0;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::atomic<uint64_t> generation{0};
  std::atomic<int64_t> start_ns{0};  // steady_clock of the run's start
  std::atomic<bool> record_shapes{true};
  uint32_t next_thread = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: threads may record during static destruction
  return *r;
}

thread_local std::shared_ptr<ThreadBuffer> t_buffer;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ThreadBuffer& this_thread_buffer() {
  if (!t_buffer) {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    b->id = r.next_thread++;
    r.buffers.push_back(b);
    t_buffer = b;
  }
  return *t_buffer;
}

std::string fmt_time(int64_t ns) {
  char buf[32];
  if (ns >= 1'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.3f s", double(ns) * 1e-9);
  } else if (ns >= 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.3f ms", double(ns) * 1e-6);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f us", double(ns) * 1e-3);
  }
  return buf;
}

std::string fmt_bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t(1) << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / double(1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", double(b) / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  }
  return buf;
}

}  // namespace

const char* event_kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::Op: return "op";
    case EventKind::Backward: return "backward";
    case EventKind::Range: return "range";
    case EventKind::LoaderWait: return "loader";
  }
  return "?";
}

namespace detail {

int64_t now_ns() { return steady_ns() - registry().start_ns.load(std::memory_order_relaxed); }

bool record_shapes() { return registry().record_shapes.load(std::memory_order_relaxed); }

void record(Event&& e) {
  if (!is_active()) return;
  ThreadBuffer& b = this_thread_buffer();
  const uint64_t gen = registry().generation.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.generation != gen) {  // left over from an earlier run
    b.events.clear();
    b.generation = gen;
  }
  e.thread = b.id;
  b.events.push_back(std::move(e));
}

std::string describe_shapes(std::span<const Tensor> in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i) s += ", ";
    s += '[';
    const Shape& sz = in[i].sizes();
    for (int d = 0; d < sz.size(); ++d) {
      if (d) s += ", ";
      s += std::to_string(sz[d]);
    }
    s += ']';
  }
  return s;
}

std::string describe_dtypes(std::span<const Tensor> in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i) s += ", ";
    s += dtype_name(in[i].dtype());
  }
  return s;
}

}  // namespace detail

// ---- RecordFunction

RecordFunction::RecordFunction(std::string name, EventKind kind) : kind_(kind) {
  if (!is_active()) return;
  name_ = std::move(name);
  start_ = detail::now_ns();
}

RecordFunction::~RecordFunction() {
  if (start_ < 0) return;
  Event e;
  e.name = std::move(name_);
  e.kind = kind_;
  e.start_ns = start_;
  e.end_ns = detail::now_ns();
  e.sequence_nr = sequence_nr_;
  detail::record(std::move(e));
}

// ---- the hooks dispatch and the autograd engine call (engine/hooks.h)

namespace {

// Around every op: one Op event with its time, shapes, new bytes and tape node.
const Node* profile_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out,
                       hooks::OpRun next) {
  if (!is_active()) return next(id, in, attrs, out);
  const OpDef& op = op_def(id);
  Event e;
  e.name = op.name;
  e.kind = EventKind::Op;
  e.device = in.empty() ? attrs.device : in[0].device();
  if (detail::record_shapes()) {
    e.shapes = detail::describe_shapes(in);
    e.dtypes = detail::describe_dtypes(in);
  }
  bool provided[4] = {};
  for (size_t i = 0; i < out.size() && i < 4; ++i) provided[i] = out[i].defined();
  e.start_ns = detail::now_ns();
  const Node* node = next(id, in, attrs, out);
  e.end_ns = detail::now_ns();
  if (!op.view) {
    for (size_t i = 0; i < out.size() && i < 4; ++i) {
      if (!provided[i] && out[i].defined()) e.bytes += out[i].numel() * int64_t(out[i].element_size());
    }
  }
  if (node) e.sequence_nr = int64_t(node->sequence_nr);
  detail::record(std::move(e));
  return node;
}

// Around each backward node: a range named after its forward op and linked to it by the node's
// sequence number (AccumulateGrad, which has none, shows as itself).
void profile_node(hooks::NodeCall& call, hooks::NodeRun next) {
  if (!is_active()) return next(call);
  const Node& n = *call.node;
  const bool op_node = !n.is_accumulator();
  RecordFunction range(op_node ? n.op_label() + " backward" : n.name(), EventKind::Backward);
  if (op_node) range.set_sequence_nr(int64_t(n.sequence_nr));
  next(call);
}

}  // namespace

// ---- Profiler

Profiler::Profiler(const ProfilerOptions& options) {
  // From the first run on, dispatch and the autograd engine call the profiler's hooks; each
  // returns at once when no run is active.
  hooks::profile_op.store(&profile_op, std::memory_order_relaxed);
  hooks::profile_node.store(&profile_node, std::memory_order_relaxed);
  Registry& r = registry();
  bool expected = false;
  // Set up before g_active turns on, so the first event sees this run's generation and start.
  BRISK_CHECK(!is_active(), "Profiler: a profiling run is already active (one at a time)");
  r.generation.fetch_add(1, std::memory_order_acq_rel);
  r.start_ns.store(steady_ns(), std::memory_order_relaxed);
  r.record_shapes.store(options.record_shapes, std::memory_order_relaxed);
  BRISK_CHECK(detail::g_active.compare_exchange_strong(expected, true),
              "Profiler: a profiling run is already active (one at a time)");
}

Profiler::~Profiler() {
  if (!stopped_) stop();
}

Profile Profiler::stop() {
  BRISK_CHECK(!stopped_, "Profiler::stop: already stopped");
  stopped_ = true;
  detail::g_active.store(false, std::memory_order_release);
  Registry& r = registry();
  const uint64_t gen = r.generation.load(std::memory_order_acquire);
  std::vector<Event> all;
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.buffers.begin(); it != r.buffers.end();) {
    ThreadBuffer& b = **it;
    {
      std::lock_guard<std::mutex> block(b.mu);
      if (b.generation == gen) {
        std::move(b.events.begin(), b.events.end(), std::back_inserter(all));
        b.events.clear();
      }
    }
    // A buffer only the registry still holds belongs to a thread that has exited.
    it = it->use_count() == 1 ? r.buffers.erase(it) : it + 1;
  }
  return Profile(std::move(all));
}

// ---- Profile

Profile::Profile(std::vector<Event> events) : events_(std::move(events)) {
  // Per thread, by start (an enclosing event first when two start together): a stack of open
  // events gives each its depth and subtracts it from its parent's self time.
  std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return std::tie(a.thread, a.start_ns, b.end_ns) < std::tie(b.thread, b.start_ns, a.end_ns);
  });
  std::vector<size_t> stack;
  for (size_t i = 0; i < events_.size(); ++i) {
    Event& e = events_[i];
    e.self_ns = e.duration_ns();
    while (!stack.empty() && (events_[stack.back()].thread != e.thread || events_[stack.back()].end_ns < e.end_ns ||
                              events_[stack.back()].end_ns <= e.start_ns)) {
      stack.pop_back();
    }
    e.depth = int(stack.size());
    if (!stack.empty()) events_[stack.back()].self_ns -= e.duration_ns();
    stack.push_back(i);
  }
}

int64_t Profile::wall_ns() const {
  if (events_.empty()) return 0;
  int64_t lo = events_.front().start_ns, hi = events_.front().end_ns;
  for (const Event& e : events_) {
    lo = std::min(lo, e.start_ns);
    hi = std::max(hi, e.end_ns);
  }
  return hi - lo;
}

std::vector<OpStats> Profile::key_averages(bool group_by_shape) const {
  std::map<std::tuple<std::string, int, std::string>, OpStats> groups;
  for (const Event& e : events_) {
    auto key = std::make_tuple(e.name, int(e.kind), group_by_shape ? e.shapes : std::string());
    OpStats& s = groups[key];
    if (s.count == 0) {
      s.name = e.name;
      s.kind = e.kind;
      if (group_by_shape) s.shapes = e.shapes;
    }
    ++s.count;
    s.total_ns += e.duration_ns();
    s.self_ns += e.self_ns;
    s.bytes += e.bytes;
  }
  std::vector<OpStats> out;
  out.reserve(groups.size());
  for (auto& [k, s] : groups) out.push_back(std::move(s));
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) { return a.self_ns > b.self_ns; });
  return out;
}

std::string Profile::table(size_t row_limit, bool group_by_shape) const {
  std::vector<OpStats> rows = key_averages(group_by_shape);
  int64_t self_total = 0;
  for (const OpStats& s : rows) self_total += s.self_ns;
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-36s %-8s %8s %12s %7s %12s %12s %11s%s\n", "name", "kind", "calls", "self",
                "self%", "total", "avg total", "out bytes", group_by_shape ? "  input shapes" : "");
  os << line << std::string(115, '-') << "\n";
  for (size_t i = 0; i < rows.size() && i < row_limit; ++i) {
    const OpStats& s = rows[i];
    std::string name = s.name.size() > 36 ? s.name.substr(0, 33) + "..." : s.name;
    std::snprintf(line, sizeof line, "%-36s %-8s %8lld %12s %6.1f%% %12s %12s %11s%s%s\n", name.c_str(),
                  event_kind_name(s.kind), (long long)s.count, fmt_time(s.self_ns).c_str(),
                  self_total ? 100.0 * double(s.self_ns) / double(self_total) : 0.0, fmt_time(s.total_ns).c_str(),
                  fmt_time(s.total_ns / std::max<int64_t>(1, s.count)).c_str(), fmt_bytes(s.bytes).c_str(),
                  group_by_shape ? "  " : "", s.shapes.c_str());
    os << line;
  }
  if (rows.size() > row_limit) os << "... " << rows.size() - row_limit << " more rows\n";
  os << "self time total: " << fmt_time(self_total) << " over " << events_.size() << " events; wall "
     << fmt_time(wall_ns()) << "\n";
  return os.str();
}

std::string Profile::chrome_trace_json() const {
  using Json = nlohmann::json;
  Json trace = Json::array();
  std::map<int64_t, const Event*> forward_of;  // sequence_nr -> the forward op that recorded the node
  for (const Event& e : events_) {
    if (e.kind == EventKind::Op && e.sequence_nr >= 0) forward_of[e.sequence_nr] = &e;
  }
  auto us = [](int64_t ns) { return double(ns) / 1000.0; };
  for (const Event& e : events_) {
    Json args = {{"device", e.device.str()}};
    if (!e.shapes.empty()) args["input shapes"] = e.shapes;
    if (!e.dtypes.empty()) args["input dtypes"] = e.dtypes;
    if (e.sequence_nr >= 0) args["sequence nr"] = e.sequence_nr;
    if (e.bytes) args["output bytes"] = e.bytes;
    trace.push_back({{"name", e.name},
                     {"cat", event_kind_name(e.kind)},
                     {"ph", "X"},
                     {"ts", us(e.start_ns)},
                     {"dur", us(e.duration_ns())},
                     {"pid", 1},
                     {"tid", e.thread},
                     {"args", args}});
    if (e.kind == EventKind::Backward && e.sequence_nr >= 0) {
      auto it = forward_of.find(e.sequence_nr);
      if (it == forward_of.end()) continue;
      const Event& f = *it->second;  // a flow arrow: forward op -> its backward
      trace.push_back({{"name", "forward-backward"},
                       {"cat", "fwdbwd"},
                       {"ph", "s"},
                       {"id", e.sequence_nr},
                       {"ts", us(f.start_ns)},
                       {"pid", 1},
                       {"tid", f.thread}});
      trace.push_back({{"name", "forward-backward"},
                       {"cat", "fwdbwd"},
                       {"ph", "f"},
                       {"bp", "e"},
                       {"id", e.sequence_nr},
                       {"ts", us(e.start_ns)},
                       {"pid", 1},
                       {"tid", e.thread}});
    }
  }
  Json doc = {{"traceEvents", trace}, {"displayTimeUnit", "ms"}, {"otherData", {{"producer", "brisk profiler"}}}};
  return doc.dump();
}

void Profile::export_chrome_trace(const std::string& path) const { write_file_atomic(path, chrome_trace_json()); }

}  // namespace brisk::profiler
