// dist/process_group.cpp: what every backend shares (dist/backend.h: call fingerprints, the
// tensor checks, the debug comparison) and the process-wide state: init_process_group, world,
// launch_info, destroy_process_group, init_from_env (the environment rendezvous without MPI), and the "mpi"
// section of the environment report. Not here: the MPI, Gloo and NCCL backends themselves.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "dist/backend.h"
#include "dist/store.h"
#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/half.h"

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
NcclFactory g_nccl_factory = nullptr;    // constant-initialized: set by another library's static initializer
const MpiBackend* g_mpi = nullptr;       // the same, by brisk::dist's
NcclSplitter g_nccl_splitter = nullptr;  // the same, by brisk::dist_nccl's

bool is_reduction(const char* call) { return !std::strcmp(call, "allreduce") || !std::strcmp(call, "reduce_scatter"); }
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
  if (g_mpi) g_mpi->abort(kBrokenGroupExitStatus);  // where MPI runs: mpirun ends the job with this status
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
void set_mpi_backend(const MpiBackend* backend) { g_mpi = backend; }
void set_nccl_splitter(NcclSplitter splitter) { g_nccl_splitter = splitter; }
const MpiBackend* mpi_backend() { return g_mpi; }

uint64_t next_work_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

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

// t /= n in place (Avg after the sum), rounding once per element.
void divide(const Tensor& t, int n) {
  const int64_t count = t.numel();
  switch (t.dtype()) {
    case DType::F32: {
      float* p = static_cast<float*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] /= float(n);
      break;
    }
    case DType::F64: {
      double* p = static_cast<double*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] /= double(n);
      break;
    }
    case DType::F16: {
      Half* p = static_cast<Half*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] = Half(float(p[i]) / float(n));
      break;
    }
    case DType::BF16: {
      BFloat16* p = static_cast<BFloat16*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] = BFloat16(float(p[i]) / float(n));
      break;
    }
    default: break;
  }
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
  // How this process joined its job: mpirun (MPI started) or the environment (init_from_env).
  enum class Mode { None, Mpi, Env } mode = Mode::None;
  std::shared_ptr<TcpStore> store;  // Env: the rendezvous store (served by rank 0)
  std::string master_addr;
  int groups_made = 0;  // Env: groups made so far, the same count on every rank (key prefixes)
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

// The MPI backend, or an error naming `call` where this program has none.
const detail::MpiBackend& mpi(const char* call) {
  const detail::MpiBackend* m = detail::mpi_backend();
  BRISK_CHECK(m, call, ": the MPI backend needs brisk::dist linked; this program links brisk::dist_core only ",
              "(start it with brisk-run and use init_from_env, or link brisk::dist)");
  return *m;
}

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  BRISK_CHECK(v && *v, "init_from_env: environment variable ", name,
              " is not set (start the program with brisk-run, or set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE as "
              "torchrun does)");
  return v;
}

int env_required_int(const char* name, int lo, int hi) {
  const std::string v = env_text(name);
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  BRISK_CHECK(end && *end == '\0' && x >= lo && x <= hi, "init_from_env: environment variable ", name, "='", v,
              "' is not a number in [", lo, ", ", hi, "]");
  return int(x);
}

Device cuda_device_for(const Launch& launch, Device device) {
  if (device.is_cuda() && device.index >= 0) return device;
  brisk::Backend* cuda = find_backend(DeviceType::CUDA);
  BRISK_CHECK(cuda && cuda->device_count() > 0, "init_process_group: NCCL needs a CUDA device, none found");
  return Device::cuda(launch.local_rank % cuda->device_count());
}

ProcessGroupPtr make_nccl(const Launch& launch, Device device, const GroupOptions& options,
                          const ProcessGroupPtr& bootstrap) {
  const Device d = cuda_device_for(launch, device);
  BRISK_CHECK(detail::g_nccl_factory, "init_process_group: the NCCL backend (", d,
              ") needs brisk::dist_nccl linked: a CUDA build of brisk with NCCL, and the program linked to "
              "brisk::dist_nccl (find_package(brisk COMPONENTS nccl))");
  return detail::g_nccl_factory(options, d, bootstrap);
}

// init_from_env with the world's lock held. Note [Environment rendezvous] in docs/DECISIONS.md.
ProcessGroupPtr init_env_locked(World& w, Backend backend, Device device, GroupOptions options) {
  BRISK_CHECK(w.mode != World::Mode::Mpi, "init_from_env: this process already started MPI (init_process_group); ",
              "a job joins through mpirun or through the environment, not both");
  if (backend == Backend::Auto) backend = device.is_cuda() ? Backend::Nccl : Backend::Gloo;
  BRISK_CHECK(backend != Backend::Mpi,
              "init_from_env: the MPI backend joins its job through mpirun (use init_process_group)");
  BRISK_CHECK(backend != Backend::Gloo || device.is_cpu(), "init_from_env: the Gloo backend takes CPU tensors, not ",
              device);
  BRISK_CHECK(detail::gloo_available(), "init_from_env: this build of brisk has no Gloo backend (install libgloo-dev ",
              "and reconfigure); without it, start the job with mpirun and init_process_group");
  if (w.mode == World::Mode::None) {
    const std::string addr = env_text("MASTER_ADDR");
    const int port = env_required_int("MASTER_PORT", 1, 65535);
    const int size = env_required_int("WORLD_SIZE", 1, 1 << 24);
    const int rank = env_required_int("RANK", 0, size - 1);
    const int local = env_int("LOCAL_RANK", rank);
    w.store = std::make_shared<TcpStore>(addr, port, rank == 0, options.timeout);
    w.master_addr = addr;
    w.launch = {rank, size, local};
    w.started = true;
    w.mode = World::Mode::Env;
    std::atexit(at_exit);
  }
  std::string prefix = "g";  // (not "g" + to_string: GCC 12's -Wrestrict false positive)
  prefix += std::to_string(w.groups_made++);
  prefix += '/';
  ProcessGroupPtr g;
  if (backend == Backend::Gloo) {
    g = detail::make_gloo_group(options, w.store, prefix, w.launch.rank, w.launch.size, w.master_addr);
  } else {
    const Device d = cuda_device_for(w.launch, device);  // its errors before the bootstrap group
    GroupOptions boot = options;
    boot.name = options.name + ".bootstrap";
    g = make_nccl(w.launch, d, options,
                  detail::make_gloo_group(boot, w.store, prefix, w.launch.rank, w.launch.size, w.master_addr));
  }
  w.all.push_back(g);
  if (!w.group) w.group = g;
  return g;
}

// This host's first IPv4 address that is not loopback (127.0.0.1 when it has none): where
// rank 0's store is announced under mpirun, where no MASTER_ADDR names it.
std::string first_ipv4() {
  ifaddrs* all = nullptr;
  std::string out = "127.0.0.1";
  if (getifaddrs(&all) != 0) return out;
  for (ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) {
      out = text;
      break;
    }
  }
  freeifaddrs(all);
  return out;
}

// Under mpirun, init_process_group(Backend::Gloo): a Gloo group beside MPI's (to compare them,
// or for Gloo's algorithms). Rank 0 serves the store on a free port and announces its address
// and port over MPI; the store then works as init_from_env's.
ProcessGroupPtr gloo_beside_mpi(World& w, GroupOptions options) {
  BRISK_CHECK(detail::gloo_available(), "init_process_group: this build of brisk has no Gloo backend (install ",
              "libgloo-dev and reconfigure)");
  if (!w.store) {
    GroupOptions boot = options;
    boot.name = options.name + ".rendezvous";
    ProcessGroupPtr mpi_group = mpi("init_process_group").make_group(boot);
    constexpr int64_t kAddr = 64;
    Tensor info = zeros({1 + kAddr}, DType::I64);  // the port, then the address's characters
    if (w.launch.rank == 0) {
      w.store = std::make_shared<TcpStore>("127.0.0.1", 0, true, options.timeout);
      const std::string addr = first_ipv4();
      int64_t* p = static_cast<int64_t*>(info.data_ptr());
      p[0] = w.store->port();
      for (size_t i = 0; i < addr.size() && i < size_t(kAddr); ++i) p[1 + i] = addr[i];
      w.master_addr = addr;
    }
    mpi_group->broadcast(info, 0)->wait();
    mpi_group->shutdown();
    if (w.launch.rank != 0) {
      const int64_t* p = static_cast<const int64_t*>(info.data_ptr());
      std::string addr;
      for (int64_t i = 0; i < kAddr && p[1 + i]; ++i) addr += char(p[1 + i]);
      w.store = std::make_shared<TcpStore>(addr, int(p[0]), false, options.timeout);
      w.master_addr = addr;
    }
  }
  std::string prefix = "g";
  prefix += std::to_string(w.groups_made++);
  prefix += '/';
  ProcessGroupPtr g = detail::make_gloo_group(options, w.store, prefix, w.launch.rank, w.launch.size, w.master_addr);
  w.all.push_back(g);
  return g;
}

// Env mode, at the end: every rank checks in through the store before rank 0 (its server) may
// leave, so that no rank still needs it. A short wait: a rank that died must not hold the
// others' exit for the group's timeout.
void exit_rendezvous(World& w) {
  if (!w.store || detail::g_any_broken.load()) return;
  try {
    const int64_t n = w.store->add("exit/count", 1);
    if (n == w.launch.size) w.store->set("exit/done", {1});
    w.store->wait({"exit/done"}, std::min<Duration>(w.store->timeout(), std::chrono::seconds(30)));
  } catch (const Error&) {
    // A peer is gone; nothing is left to hand over.
  }
}

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
  if (backend == Backend::Gloo && w.mode == World::Mode::Mpi) return gloo_beside_mpi(w, std::move(options));
  if (backend == Backend::Gloo || (w.mode == World::Mode::Env && backend != Backend::Mpi)) {
    return init_env_locked(w, backend, device, std::move(options));  // Auto and NCCL: as init_from_env
  }
  BRISK_CHECK(w.mode != World::Mode::Env, "init_process_group: this process joined its job through init_from_env ",
              "(rank ", w.launch.rank, " of ", w.launch.size, ", no MPI): the MPI backend cannot join it");
  if (!w.started) {
    const detail::MpiBackend& m = mpi("init_process_group");
    m.start();
    int rank = 0, size = 1;
    m.world(rank, size);
    const int env_rank = env_int("RANK", rank), env_size = env_int("WORLD_SIZE", size);
    BRISK_CHECK(env_rank == rank && env_size == size, "init_process_group: RANK=", env_rank, " WORLD_SIZE=", env_size,
                " disagree with MPI's rank ", rank, " of ", size, " (start the job with mpirun)");
    const int local = env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank));
    w.launch = {rank, size, local};
    w.started = true;
    w.mode = World::Mode::Mpi;
    std::atexit(at_exit);
  }
  if (backend == Backend::Auto) backend = device.is_cuda() ? Backend::Nccl : Backend::Mpi;
  ProcessGroupPtr g;
  if (backend == Backend::Mpi) {
    BRISK_CHECK(device.is_cpu(), "init_process_group: the MPI backend takes CPU tensors, not ", device);
    g = mpi("init_process_group").make_group(options);
  } else {
    Device d = device;
    if (d.is_cpu() || d.index < 0) {
      brisk::Backend* cuda = find_backend(DeviceType::CUDA);
      BRISK_CHECK(cuda && cuda->device_count() > 0, "init_process_group: NCCL needs a CUDA device, none found");
      d = Device::cuda(w.launch.local_rank % cuda->device_count());
    }
    GroupOptions boot = options;
    boot.name = options.name + ".bootstrap";
    g = make_nccl(w.launch, d, options, mpi("init_process_group").make_group(boot));
  }
  w.all.push_back(g);
  if (!w.group) w.group = g;
  return g;
}

ProcessGroupPtr init_from_env(Backend backend, Device device, GroupOptions options) {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  BRISK_CHECK(!w.destroyed, "init_from_env: called after destroy_process_group");
  return init_env_locked(w, backend, device, std::move(options));
}

namespace {

std::string rank_list(const std::vector<int>& ranks) {  // "0,2"
  std::ostringstream s;
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? "," : "") << ranks[i];
  return s.str();
}

// What a rank outside a sub-group holds: every call is an error naming it and the group.
class NonMemberGroup : public ProcessGroup {
 public:
  NonMemberGroup(GroupOptions options, std::vector<int> ranks, int me, std::string backend)
      : ProcessGroup(std::move(options)), ranks_(std::move(ranks)), me_(me), backend_(std::move(backend)) {}
  int rank() const override { return -1; }
  int size() const override { return int(ranks_.size()); }
  const char* backend() const override { return backend_.c_str(); }
  WorkPtr allreduce(Tensor&, ReduceOp) override { fail("allreduce"); }
  WorkPtr broadcast(Tensor&, int) override { fail("broadcast"); }
  WorkPtr allgather(std::vector<Tensor>&, const Tensor&) override { fail("allgather"); }
  WorkPtr allgather_into_tensor(Tensor&, const Tensor&) override { fail("allgather_into_tensor"); }
  WorkPtr reduce_scatter(Tensor&, const Tensor&, ReduceOp) override { fail("reduce_scatter"); }
  WorkPtr barrier() override { fail("barrier"); }
  WorkPtr send(const Tensor&, int, int) override { fail("send"); }
  WorkPtr recv(Tensor&, int, int) override { fail("recv"); }
  void shutdown() override {}

 private:
  [[noreturn]] void fail(const char* call) const {
    BRISK_FAIL(call, ": rank ", me_, " is not a member of group '", options_.name, "' (world ranks ", rank_list(ranks_),
               "); only its members may call it");
  }
  std::vector<int> ranks_;
  int me_;
  std::string backend_;
};

}  // namespace

ProcessGroupPtr new_group(const std::vector<int>& ranks, GroupOptions options) {
  ProcessGroupPtr world_group = world();
  World& w = state();
  const int n = w.launch.size, me = w.launch.rank;
  if (options.name == GroupOptions{}.name) options.name = "group(" + rank_list(ranks) + ")";
  BRISK_CHECK(!ranks.empty(), "new_group: no ranks for group '", options.name, "'");
  std::vector<bool> seen(size_t(n), false);
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    BRISK_CHECK(r >= 0 && r < n, "new_group: rank ", r, " of group '", options.name, "' is outside the world of ", n,
                " ranks");
    BRISK_CHECK(!seen[size_t(r)], "new_group: rank ", r, " appears twice in group '", options.name, "'");
    seen[size_t(r)] = true;
    if (r == me) index = int(i);
  }
  world_group->barrier()->wait();  // nothing in flight on the world while the group is made
  std::lock_guard<std::mutex> lock(w.mu);
  const std::string backend = world_group->backend();
  ProcessGroupPtr g;
  auto cpu_subgroup = [&](GroupOptions o) -> ProcessGroupPtr {
    if (w.mode == World::Mode::Mpi) return mpi("new_group").make_subgroup(std::move(o), index);
    std::string prefix = "g";  // every rank counts every group, member or not
    prefix += std::to_string(w.groups_made++);
    prefix += '/';
    if (index < 0) return nullptr;
    return detail::make_gloo_group(std::move(o), w.store, prefix, index, int(ranks.size()), w.master_addr);
  };
  if (backend == "nccl") {  // ncclCommSplit of the world's communicator, a CPU sub-group beside it
    GroupOptions boot = options;
    boot.name = options.name + ".bootstrap";
    ProcessGroupPtr b = cpu_subgroup(boot);
    BRISK_CHECK(detail::g_nccl_splitter, "new_group: the NCCL backend needs brisk::dist_nccl linked");
    g = detail::g_nccl_splitter(world_group, options, b);
  } else {
    g = cpu_subgroup(options);
  }
  if (!g) return std::make_shared<NonMemberGroup>(std::move(options), ranks, me, backend);
  w.all.push_back(g);
  return g;
}

DeviceMesh init_device_mesh(int rows, int cols, GroupOptions options) {
  const int n = world()->size(), me = world()->rank();
  BRISK_CHECK(rows >= 1 && cols >= 1 && int64_t(rows) * cols == n, "init_device_mesh: a ", rows, " x ", cols,
              " mesh needs ", int64_t(rows) * cols, " ranks, the world has ", n);
  const std::string base = options.name == GroupOptions{}.name ? "mesh" : options.name;
  DeviceMesh m;
  m.rows = rows;
  m.cols = cols;
  m.row = me / cols;
  m.col = me % cols;
  for (int i = 0; i < rows; ++i) {
    std::vector<int> ranks;
    for (int j = 0; j < cols; ++j) ranks.push_back(i * cols + j);
    options.name = base + ".row" + std::to_string(i);
    ProcessGroupPtr g = new_group(ranks, options);
    if (i == m.row) m.row_group = g;
  }
  for (int j = 0; j < cols; ++j) {
    std::vector<int> ranks;
    for (int i = 0; i < rows; ++i) ranks.push_back(i * cols + j);
    options.name = base + ".col" + std::to_string(j);
    ProcessGroupPtr g = new_group(ranks, options);
    if (j == m.col) m.col_group = g;
  }
  return m;
}

bool is_nccl_available() { return detail::g_nccl_factory != nullptr; }
bool is_gloo_available() { return detail::gloo_available(); }

void destroy_process_group() {
  World& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  if (!w.started || w.destroyed) return;
  w.group.reset();
  for (auto& weak : w.all) {
    if (ProcessGroupPtr g = weak.lock()) g->shutdown();  // no thread may call MPI after finalize
  }
  w.all.clear();
  if (w.store) {  // init_from_env's, or a Gloo group's beside MPI
    exit_rendezvous(w);
    w.store.reset();
  }
  if (w.mode == World::Mode::Mpi) mpi("destroy_process_group").finish(detail::g_any_broken.load());
  w.destroyed = true;
}

}  // namespace brisk::dist
