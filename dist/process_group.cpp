// dist/process_group.cpp: what every backend shares (dist/backend.h: call fingerprints, the
// tensor checks, the debug comparison) and the process-wide state: init_process_group, world,
// launch_info, destroy_process_group, and the "mpi" section of the environment report. Not here: the MPI and NCCL
// backends themselves.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "dist/backend.h"
#include "engine/backend.h"

namespace brisk::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Product: return "product";
  }
  return "?";
}

bool Work::wait() {
  // The backend fails the call at the group's timeout; the slack covers its polling.
  if (wait(default_timeout_ + std::chrono::seconds(5))) return true;
  BRISK_FAIL(describe(), ": did not complete within the group's timeout");
}

namespace detail {

namespace {
std::atomic<bool> g_any_broken{false};
NcclFactory g_nccl_factory = nullptr;  // constant-initialized: set by another library's static initializer

bool is_reduction(const char* call) { return !std::strcmp(call, "allreduce") || !std::strcmp(call, "reduce_scatter"); }
// This object is in every program that uses dist, so its sections join the environment report.
[[maybe_unused]] const bool g_env_added = (add_env_section(&mpi_env_section), true);
}  // namespace

namespace {
std::mutex g_broken_mu;
std::string g_first_broken_error;

// Registered when the first group breaks (after the process state, so it runs before their
// destructors): leaves with kBrokenGroupExitStatus, without MPI_Finalize or the destructors
// that would wait on threads stuck in a collective with the dead peer.
void exit_after_broken_group() {
  std::fflush(nullptr);
  std::string error;
  {
    std::lock_guard<std::mutex> lock(g_broken_mu);
    error = g_first_broken_error;
  }
  std::fprintf(stderr, "brisk::dist: exiting with status %d because a process group broke: %s\n",
               kBrokenGroupExitStatus, error.c_str());
  std::fflush(stderr);
  abort_mpi(kBrokenGroupExitStatus);  // where MPI runs: mpirun ends the job with this status
  std::_Exit(kBrokenGroupExitStatus);
}
}  // namespace

void mark_broken(const std::string& error) {
  std::lock_guard<std::mutex> lock(g_broken_mu);
  if (g_any_broken.exchange(true)) return;
  g_first_broken_error = error;
  std::atexit(exit_after_broken_group);
}

std::string broken_group_error(const std::string& call, const std::string& first_error) {
  return call +
         ": not run, the group is broken since an earlier call failed (a broken group stays broken: "
         "end the process or start a new group); that call's error: " +
         first_error;
}

void set_nccl_factory(NcclFactory factory) { g_nccl_factory = factory; }

Fingerprint fingerprint(const char* call, ReduceOp op, int peer, const Tensor& t) {
  Fingerprint f;
  std::memset(static_cast<void*>(&f), 0, sizeof f);  // padding too: ranks compare the raw bytes
  std::strncpy(f.call, call, sizeof f.call - 1);
  f.collective = true;
  f.op = int32_t(op);
  f.peer = peer;
  if (t.defined()) {
    f.dtype = int32_t(t.dtype());
    f.dims = int32_t(t.dim());
    for (int i = 0; i < t.dim() && i < 8; ++i) f.sizes[i] = t.sizes()[i];
  } else {
    f.dtype = -1;
  }
  return f;
}

namespace {
std::string call_text(const Fingerprint& f) {
  std::ostringstream s;
  s << f.call;
  if (is_reduction(f.call)) s << "(" << reduce_op_name(ReduceOp(f.op)) << ")";
  if (f.dtype >= 0) {
    s << " of " << DType(f.dtype) << " (";
    for (int i = 0; i < f.dims; ++i) s << (i ? ", " : "") << f.sizes[i];
    s << ")";
  }
  if (f.peer >= 0) {
    s << (!std::strcmp(f.call, "broadcast") ? " from root "
          : !std::strcmp(f.call, "send")    ? " to rank "
                                            : " from rank ")
      << f.peer;
  }
  return s.str();
}
}  // namespace

std::string describe(const Fingerprint& f, const ProcessGroup& g) {
  std::ostringstream s;
  s << call_text(f) << " on group '" << g.options().name << "' (rank " << g.rank() << " of " << g.size() << ", "
    << g.backend() << ")";
  return s.str();
}

std::string compare_fingerprints(const std::vector<Fingerprint>& all, int my_rank, const ProcessGroup& g) {
  for (size_t r = 1; r < all.size(); ++r) {
    if (std::memcmp(&all[r], &all[0], sizeof(Fingerprint)) == 0) continue;
    std::ostringstream s;
    s << "collective mismatch on group '" << g.options().name << "' (seen from rank " << my_rank << "): rank " << r
      << " calls " << call_text(all[r]) << " but rank 0 calls " << call_text(all[0]);
    return s.str();
  }
  return "";
}

void check_tensor(const Tensor& t, const char* call, const ProcessGroup& g, DeviceType device) {
  BRISK_CHECK(t.defined(), call, ": undefined tensor (group '", g.options().name, "')");
  BRISK_CHECK(t.device().type == device, call, ": group '", g.options().name, "' (", g.backend(), ") takes ",
              device == DeviceType::CPU ? "CPU" : "CUDA", " tensors, got ", t.str(), " on ", t.device());
  BRISK_CHECK(t.is_contiguous(), call, ": ", t.str(), " is not contiguous (call .contiguous() first)");
}

}  // namespace detail

namespace {

struct World {
  std::mutex mu;
  ProcessGroupPtr group;
  std::vector<std::weak_ptr<ProcessGroup>> all;
  Launch launch;
  bool started = false;
  bool destroyed = false;
};

World& state() {
  static World w;
  return w;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  BRISK_CHECK(end && *end == '\0' && x >= 0 && x < (1 << 24), "init_process_group: environment variable ", name, "='",
              v, "' is not a rank");
  return int(x);
}

void at_exit() { destroy_process_group(); }

}  // namespace

Launch launch_info() {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  return w.launch;
}

bool is_initialized() {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  return w.group != nullptr;
}

ProcessGroupPtr world() {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  BRISK_CHECK(w.group, "dist::world: call dist::init_process_group() first");
  return w.group;
}

ProcessGroupPtr init_process_group(Backend backend, Device device, GroupOptions options) {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  BRISK_CHECK(!w.destroyed, "init_process_group: called after destroy_process_group (MPI cannot start twice)");
  if (!w.started) {
    detail::start_mpi();
    int rank = 0, size = 1;
    detail::mpi_world(rank, size);
    const int env_rank = env_int("RANK", rank), env_size = env_int("WORLD_SIZE", size);
    BRISK_CHECK(env_rank == rank && env_size == size, "init_process_group: RANK=", env_rank, " WORLD_SIZE=", env_size,
                " disagree with MPI's rank ", rank, " of ", size, " (start the job with mpirun)");
    const int local = env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank));
    w.launch = {rank, size, local};
    w.started = true;
    std::atexit(at_exit);
  }
  if (backend == Backend::Auto) backend = device.is_cuda() ? Backend::Nccl : Backend::Mpi;
  ProcessGroupPtr g;
  if (backend == Backend::Mpi) {
    BRISK_CHECK(device.is_cpu(), "init_process_group: the MPI backend takes CPU tensors, not ", device);
    g = detail::make_mpi_group(options);
  } else {
    Device d = device;
    if (d.is_cpu() || d.index < 0) {
      brisk::Backend* cuda = find_backend(DeviceType::CUDA);
      BRISK_CHECK(cuda && cuda->device_count() > 0, "init_process_group: NCCL needs a CUDA device, none found");
      d = Device::cuda(w.launch.local_rank % cuda->device_count());
    }
    GroupOptions boot = options;
    boot.name = options.name + ".bootstrap";
    BRISK_CHECK(detail::g_nccl_factory, "init_process_group: the NCCL backend (", d,
                ") needs brisk::dist_nccl linked: a CUDA build of brisk with NCCL, and the program linked to "
                "brisk::dist_nccl (find_package(brisk COMPONENTS nccl))");
    g = detail::g_nccl_factory(options, d, detail::make_mpi_group(boot));
  }
  w.all.push_back(g);
  if (!w.group) w.group = g;
  return g;
}

bool is_nccl_available() { return detail::g_nccl_factory != nullptr; }

void destroy_process_group() {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  if (!w.started || w.destroyed) return;
  w.group.reset();
  for (auto& weak : w.all) {
    if (ProcessGroupPtr g = weak.lock()) g->shutdown();  // no thread may call MPI after finalize
  }
  w.all.clear();
  detail::finish_mpi(detail::g_any_broken.load());
  w.destroyed = true;
}

}  // namespace brisk::dist
