// dist/backend.h: what the backends of dist::ProcessGroup share (internal): the fingerprint of
// a call (what the debug mode compares across ranks, and what Work::describe() prints), the
// tensor checks, and the start-up hooks process_group.cpp calls. Not public: users include
// dist/process_group.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "engine/env.h"

namespace brisk::dist {
class TcpStore;
}

namespace brisk::dist::detail {

// A call as every rank must make it (plain bytes: it travels in an allgather).
struct Fingerprint {
  char call[24] = {};
  int32_t op = 0;
  int32_t dtype = 0;
  int32_t peer = -1;  // root, destination or source; -1 when none
  int32_t dims = 0;
  int64_t sizes[8] = {};
  bool collective = true;
};

Fingerprint fingerprint(const char* call, ReduceOp op, int peer, const Tensor& t);
// "allreduce(sum) of F32 (2, 3) on group 'world' (rank 0 of 2)"
std::string describe(const Fingerprint& f, const ProcessGroup& g);
// "" when every rank's fingerprint equals rank 0's, else a message naming the first rank that
// differs and both calls.
std::string compare_fingerprints(const std::vector<Fingerprint>& all, int my_rank, const ProcessGroup& g);

// Dense, defined, on device type `device`; errors name the call, the tensor and the group.
void check_tensor(const Tensor& t, const char* call, const ProcessGroup& g, DeviceType device);

// A fresh id for a Work, never reused in the process (a group's broken-by record keeps the
// id, not the address: a later call's Work may be allocated where the failed one was).
uint64_t next_work_id();

// A group timed out or met an MPI / NCCL error (`error`, the first one): MPI is not finalized
// at exit, and the process exits with kBrokenGroupExitStatus (Note [Faults]).
void mark_broken(const std::string& error);
// What a call on a broken group throws: the call, then the error that broke the group.
std::string broken_group_error(const std::string& call, const std::string& first_error);

// A group's health, shared by its Works and its thread (the MPI and Gloo backends): whether it
// broke, by which call and with what error.
struct GroupHealth {
  std::mutex mu{};
  std::atomic<bool> broken{false};
  std::string first_error{};
  uint64_t culprit = 0;  // the id of the call whose failure broke the group (ids are never reused)
  // Marks the group broken by call `id` (described as `what`); returns the error that call reports.
  std::string fail(const std::string& error, uint64_t id, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (!broken.exchange(true)) {
      first_error = error;
      culprit = id;
    }
    mark_broken(first_error);
    return id == culprit ? first_error : broken_group_error(what, first_error);
  }
  // What call `id` reports when the group broke before or while it ran: its own error if it
  // broke the group, else that it did not run and why.
  std::string error_for(uint64_t id, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    return id == culprit ? first_error : broken_group_error(what, first_error);
  }
};

// A call queued on a group's thread (the MPI and Gloo backends): done when the thread finishes
// it; past its deadline (the group's timeout from the moment of the call, plus `slack` where
// the backend enforces the timeout itself and the deadline only guards against a call that
// never ends) the waiter breaks the group and throws (Note [Faults] in dist/mpi_group.cpp).
class QueuedWork : public Work {
 public:
  using Clock = std::chrono::steady_clock;
  QueuedWork(std::string what, Duration timeout, std::shared_ptr<GroupHealth> health, Duration slack = Duration(0))
      : Work(timeout),
        what_(std::move(what)),
        timeout_(timeout),
        deadline_(Clock::now() + timeout + slack),
        health_(std::move(health)),
        id_(next_work_id()) {}
  bool wait(Duration timeout) override {
    const auto until = std::min(Clock::now() + timeout, deadline_);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, until, [&] { return done_; });
    if (!error_.empty()) BRISK_FAIL(error_);
    if (done_) return true;
    if (Clock::now() < deadline_) return false;  // the caller's own timeout
    lock.unlock();
    BRISK_FAIL(health_->fail(timeout_message(), id_, what_));
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  std::string describe() const override { return what_; }
  uint64_t id() const { return id_; }
  Duration timeout() const { return timeout_; }
  Clock::time_point deadline() const { return deadline_; }
  std::string timeout_message() const {
    std::ostringstream s;
    s << what_ << ": timed out after " << std::chrono::duration<double>(timeout_).count()
      << " s (a peer died, hangs or called a different collective; set BRISK_DIST_DEBUG=1 to compare calls)";
    return s.str();
  }
  void finish(std::string error = "") {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }

 private:
  std::string what_{};
  Duration timeout_{};
  Clock::time_point deadline_{};
  std::shared_ptr<GroupHealth> health_{};
  uint64_t id_ = 0;
  mutable std::mutex mu_{};
  std::condition_variable cv_{};
  bool done_ = false;
  std::string error_{};
};

// t /= n in place (Avg after the sum), rounding once per element (F32, F64, F16, BF16).
void divide(const Tensor& t, int n);

// ---- MPI: dist/mpi_group.cpp is the library brisk_dist (brisk::dist) above brisk_dist_core;
// it registers its backend from a static initializer (its link interface keeps the object with
// `-u brisk_dist_mpi_linked`), as NCCL's does. A program linked to brisk::dist_core alone (jobs
// started by brisk-run over Gloo) has no MPI in it at all; asking it for MPI is an error.
struct MpiBackend {
  void (*start)();                  // MPI_Init_thread, once per process
  void (*finish)(bool any_broken);  // MPI_Finalize unless a group broke (Note [Faults])
  // MPI_Abort(MPI_COMM_WORLD, status) when MPI is initialized and not finalized, so that mpirun
  // ends the job with that status and stops peers that hang; returns otherwise. An alarm ends
  // the process should the abort itself hang.
  void (*abort)(int status);
  void (*world)(int& rank, int& size);
  ProcessGroupPtr (*make_group)(GroupOptions options);  // over a duplicate of MPI_COMM_WORLD
  // MPI_Comm_split of MPI_COMM_WORLD, collective over the world: the ranks with index >= 0
  // make a group in which they have that rank; the others (index -1) get nullptr.
  ProcessGroupPtr (*make_subgroup)(GroupOptions options, int index);
};
void set_mpi_backend(const MpiBackend* backend);
const MpiBackend* mpi_backend();  // null where brisk::dist (MPI) is not linked

// ---- Gloo (dist/gloo_group.cpp; without libgloo-dev, stubs that fail naming the cause): a
// group of `size` ranks that rendezvous under `prefix` in `store`; its TCP device is bound to
// this host's address towards `master_addr` (or BRISK_GLOO_IFNAME / GLOO_SOCKET_IFNAME).
bool gloo_available();
ProcessGroupPtr make_gloo_group(GroupOptions options, const std::shared_ptr<TcpStore>& store, const std::string& prefix,
                                int rank, int size, const std::string& master_addr);

// ---- NCCL: dist/nccl_group.cpp, the library brisk_dist_nccl (brisk::dist_nccl) of CUDA builds
// with NCCL, sets the factory from a static initializer (Note [Backend libraries] in engine/backend.cpp);
// without that library linked, asking for NCCL is an error. `bootstrap` is a CPU (MPI) group
// over the same ranks, used to share NCCL's unique id.
using NcclFactory = ProcessGroupPtr (*)(GroupOptions options, Device device, const ProcessGroupPtr& bootstrap);
void set_nccl_factory(NcclFactory factory);
// new_group on an NCCL world: ncclCommSplit of `parent` (the world), collective over it;
// `bootstrap` is the CPU sub-group of the members, null on a rank outside (which gets nullptr).
using NcclSplitter = ProcessGroupPtr (*)(const ProcessGroupPtr& parent, GroupOptions options,
                                         const ProcessGroupPtr& bootstrap);
void set_nccl_splitter(NcclSplitter splitter);

}  // namespace brisk::dist::detail
