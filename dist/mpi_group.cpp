// dist/mpi_group.cpp: the MPI backend of dist::ProcessGroup (CPU tensors) and MPI's start-up
// and shutdown, the library brisk_dist (brisk::dist) above brisk_dist_core, registered from a
// static initializer (dist/backend.h, MpiBackend). One communication thread per group owns every MPI call after
// start-up (MPI_THREAD_SERIALIZED): it runs the calls in the order they were made (collectives as blocking MPI calls,
// point-to-point as polled requests) and finishes them (Avg's division, allgather's copies) while the caller computes.
// Not here: NCCL (dist/nccl_group.cpp), DDP, init_process_group itself (dist/process_group.cpp).
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>

#include "dist/backend.h"
#include "engine/functions.h"
#include "engine/half.h"

namespace brisk::dist {

// Note [Faults]
// A collective whose peers never arrive would block forever. The group's thread runs each
// collective as a blocking MPI call (MPI's tuned algorithms: its non-blocking collectives were
// 2-3x slower here), so the deadline is enforced by the waiter: Work::wait past the group's
// timeout (counted from the call) fails with a brisk::Error naming the collective, the group,
// the rank and the timeout, and marks the group broken: MPI cannot cancel a collective, so every
// later call fails at once with the first error, the thread (possibly stuck in MPI) is left
// behind, and MPI is not finalized at exit (MPI_Finalize would wait for the dead peer).
// Point-to-point calls are non-blocking requests the thread polls (a blocking send would stall
// an exchange in which both ranks send first), against the same deadline. mpirun must leave the
// survivors running for them to report: Open MPI 4 kills the whole job when one rank dies
// unless started with `--mca orte_abort_on_non_zero_status 0` (tests/dist/run.sh does;
// `--enable-recovery` also lets them report, but then mpirun exits 0 whatever the ranks return).
// A process whose group broke exits with kBrokenGroupExitStatus (an atexit handler registered at
// the first break, then MPI_Abort), so mpirun's status shows the failure. MPI errors come back
// as error codes (MPI_ERRORS_RETURN) and end the call the same way.

namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

// ---- 16-bit floats: MPI has no such types; they travel as 2-byte words with user ops that
// compute in float and round once, as a 16-bit add does.
template <class H, class F>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = H(F()(float(a[i]), float(b[i])));
}
struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  float operator()(float a, float b) const { return a * b; }
};
struct Min {
  float operator()(float a, float b) const { return a != a ? a : (b < a ? b : a); }
};
struct Max {
  float operator()(float a, float b) const { return a != a ? a : (b > a ? b : a); }
};

struct HalfOps {
  MPI_Op op[2][4];  // [F16, BF16][Sum, Product, Min, Max]
};

HalfOps& half_ops() {
  static HalfOps ops = [] {
    HalfOps h{};
    MPI_Op_create(&half_op<Half, Add>, 1, &h.op[0][0]);
    MPI_Op_create(&half_op<Half, Mul>, 1, &h.op[0][1]);
    MPI_Op_create(&half_op<Half, Min>, 1, &h.op[0][2]);
    MPI_Op_create(&half_op<Half, Max>, 1, &h.op[0][3]);
    MPI_Op_create(&half_op<BFloat16, Add>, 1, &h.op[1][0]);
    MPI_Op_create(&half_op<BFloat16, Mul>, 1, &h.op[1][1]);
    MPI_Op_create(&half_op<BFloat16, Min>, 1, &h.op[1][2]);
    MPI_Op_create(&half_op<BFloat16, Max>, 1, &h.op[1][3]);
    return h;
  }();
  return ops;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::F16 || t == DType::BF16) {
    const int k = op == ReduceOp::Product ? 1 : op == ReduceOp::Min ? 2 : op == ReduceOp::Max ? 3 : 0;
    return half_ops().op[t == DType::BF16][k];
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Product: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
  }
  return MPI_SUM;
}

// A group's health, shared with its Works (which may outlive it): once broken, every call
// fails with the first error.
using Health = detail::GroupHealth;  // dist/backend.h

// ---- Work: dist/backend.h's QueuedWork, the group's timeout from the moment of the call.
using MpiWork = detail::QueuedWork;

// One call as the thread runs it: post() issues the MPI requests, finish() runs once they are
// complete. Both run on the group's thread.
struct Task {
  std::shared_ptr<MpiWork> work;
  detail::Fingerprint fingerprint;
  std::function<int(std::vector<MPI_Request>&)> post;  // returns an MPI error code
  std::function<void()> finish;
  std::vector<MPI_Request> requests;
};

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup(GroupOptions options, MPI_Comm comm) : ProcessGroup(std::move(options)), comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    half_ops();  // created before the thread owns MPI
    if (const char* e = std::getenv("BRISK_DIST_DEBUG")) options_.debug |= std::string(e) == "1";
    thread_ = std::thread([this, alive = alive_] { loop(*alive); });
  }
  ~MpiGroup() override { shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  bool broken() const { return health_->broken.load(); }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (health_->broken) {
      // The thread may be blocked for good inside a collective with a dead peer; should MPI
      // ever return, it leaves without touching this group.
      *alive_ = false;
      if (thread_.joinable()) thread_.detach();
      return;
    }
    if (thread_.joinable()) thread_.join();
    MPI_Comm_free(&comm_);
  }

  WorkPtr allreduce(Tensor& t, ReduceOp op) override {
    check(t, "allreduce", op);
    Tensor x = t;
    const MPI_Datatype type = mpi_type(t.dtype());
    const MPI_Op mop = mpi_op(op, t.dtype());
    return submit(
        "allreduce", op, -1, x,
        [=, this](std::vector<MPI_Request>& r) {
          r.clear();
          return MPI_Allreduce(MPI_IN_PLACE, x.data_ptr(), int(x.numel()), type, mop, comm_);
        },
        [=, this] {
          if (op == ReduceOp::Avg) detail::divide(x, size_);
        });
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    check(t, "broadcast");
    check_rank(root, "broadcast", "root");
    Tensor x = t;
    const MPI_Datatype type = mpi_type(t.dtype());
    return submit("broadcast", ReduceOp::Sum, root, x, [=, this](std::vector<MPI_Request>& r) {
      r.clear();
      return MPI_Bcast(x.data_ptr(), int(x.numel()), type, root, comm_);
    });
  }

  WorkPtr allgather(std::vector<Tensor>& out, const Tensor& in) override {
    check(in, "allgather");
    BRISK_CHECK(int(out.size()) == size_, "allgather: ", out.size(), " output tensors for a group of ", size_);
    for (const Tensor& o : out) {
      check(o, "allgather");
      BRISK_CHECK(o.sizes() == in.sizes() && o.dtype() == in.dtype(), "allgather: output ", o.str(),
                  " does not match the input ", in.str());
    }
    Tensor flat = empty({int64_t(size_) * in.numel()}, in.dtype());
    std::vector<Tensor> outs = out;
    Tensor x = in;
    return submit("allgather", ReduceOp::Sum, -1, x, gather_post(flat, x), [=] {
      const size_t bytes = size_t(x.numel()) * x.element_size();
      for (size_t i = 0; i < outs.size(); ++i) {
        std::memcpy(outs[i].data_ptr(), static_cast<const char*>(flat.data_ptr()) + i * bytes, bytes);
      }
    });
  }

  WorkPtr allgather_into_tensor(Tensor& out, const Tensor& in) override {
    check(in, "allgather_into_tensor");
    check(out, "allgather_into_tensor");
    BRISK_CHECK(out.dtype() == in.dtype() && out.numel() == int64_t(size_) * in.numel(),
                "allgather_into_tensor: output ", out.str(), " needs ", size_, " x ", in.numel(), " elements of ",
                in.dtype(), " (input ", in.str(), ")");
    Tensor x = in;
    return submit("allgather_into_tensor", ReduceOp::Sum, -1, x, gather_post(out, x));
  }

  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check(in, "reduce_scatter", op);
    check(out, "reduce_scatter", op);
    BRISK_CHECK(out.dtype() == in.dtype() && in.numel() == int64_t(size_) * out.numel(), "reduce_scatter: input ",
                in.str(), " needs ", size_, " x ", out.numel(), " elements (output ", out.str(), ")");
    Tensor x = in, y = out;
    const MPI_Datatype type = mpi_type(in.dtype());
    const MPI_Op mop = mpi_op(op, in.dtype());
    return submit(
        "reduce_scatter", op, -1, x,
        [=, this](std::vector<MPI_Request>& r) {
          r.clear();
          return MPI_Reduce_scatter_block(x.data_ptr(), y.data_ptr(), int(y.numel()), type, mop, comm_);
        },
        [=, this] {
          if (op == ReduceOp::Avg) detail::divide(y, size_);
        });
  }

  WorkPtr barrier() override {
    return submit("barrier", ReduceOp::Sum, -1, Tensor(), [this](std::vector<MPI_Request>& r) {
      r.clear();
      return MPI_Barrier(comm_);
    });
  }

  // Point-to-point calls are not collectives: the debug check does not apply to them.
  WorkPtr send(const Tensor& t, int dst, int tag) override {
    check(t, "send");
    check_rank(dst, "send", "destination");
    Tensor x = t;
    const MPI_Datatype type = mpi_type(t.dtype());
    return submit(
        "send", ReduceOp::Sum, dst, x,
        [=, this](std::vector<MPI_Request>& r) {
          r.resize(1);
          return MPI_Isend(x.data_ptr(), int(x.numel()), type, dst, tag, comm_, &r[0]);
        },
        {}, /*collective=*/false);
  }

  WorkPtr recv(Tensor& t, int src, int tag) override {
    check(t, "recv");
    check_rank(src, "recv", "source");
    Tensor x = t;
    const MPI_Datatype type = mpi_type(t.dtype());
    return submit(
        "recv", ReduceOp::Sum, src, x,
        [=, this](std::vector<MPI_Request>& r) {
          r.resize(1);
          return MPI_Irecv(x.data_ptr(), int(x.numel()), type, src, tag, comm_, &r[0]);
        },
        {}, /*collective=*/false);
  }

 private:
  std::function<int(std::vector<MPI_Request>&)> gather_post(const Tensor& out, const Tensor& in) {
    const MPI_Datatype type = mpi_type(in.dtype());
    Tensor o = out, x = in;
    return [=, this](std::vector<MPI_Request>& r) {
      r.clear();
      return MPI_Allgather(x.data_ptr(), int(x.numel()), type, o.data_ptr(), int(x.numel()), type, comm_);
    };
  }

  void check(const Tensor& t, const char* call, ReduceOp op = ReduceOp::Sum) const {
    detail::check_tensor(t, call, *this, DeviceType::CPU);
    BRISK_CHECK(mpi_type(t.dtype()) != MPI_DATATYPE_NULL, call, ": the MPI backend has no dtype ", t.dtype(), " (",
                t.str(), "; F32, F64, F16, BF16, I32, I64)");
    BRISK_CHECK(t.numel() <= INT32_MAX, call, ": ", t.str(), " has more than 2^31 - 1 elements (MPI counts are int)");
    BRISK_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), call, ": avg needs a floating dtype, got ", t.str());
  }
  void check_rank(int r, const char* call, const char* what) const {
    BRISK_CHECK(r >= 0 && r < size_, call, ": ", what, " rank ", r, " is outside the group '", options_.name, "' of ",
                size_, " ranks");
  }

  WorkPtr submit(const char* call, ReduceOp op, int peer, const Tensor& t,
                 std::function<int(std::vector<MPI_Request>&)> post, std::function<void()> finish = {},
                 bool collective = true) {
    Task task;
    task.fingerprint = detail::fingerprint(call, op, peer, t);
    task.fingerprint.collective = collective;
    task.work = std::make_shared<MpiWork>(detail::describe(task.fingerprint, *this), options_.timeout, health_);
    task.post = std::move(post);
    task.finish = std::move(finish);
    WorkPtr w = task.work;
    if (health_->broken) {  // fails at once, naming this call and the first error
      task.work->finish(health_->error_for(task.work->id(), task.work->describe()));
      return w;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      BRISK_CHECK(!stopping_, call, ": the group '", options_.name, "' was destroyed");
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
    return w;
  }

  // Runs on the thread: the debug check (a blocking allgather), then the call itself.
  std::string start(Task& t) {
    if (options_.debug && t.fingerprint.collective) {  // a blocking allgather of every rank's call
      std::vector<detail::Fingerprint> all(static_cast<size_t>(size_));
      const int rc = MPI_Allgather(&t.fingerprint, sizeof(detail::Fingerprint), MPI_BYTE, all.data(),
                                   sizeof(detail::Fingerprint), MPI_BYTE, comm_);
      if (rc != MPI_SUCCESS) return t.work->describe() + ": MPI error in the debug check: " + mpi_error(rc);
      const std::string mismatch = detail::compare_fingerprints(all, rank_, *this);
      if (!mismatch.empty()) return mismatch;
    }
    const int rc = t.post(t.requests);
    return rc == MPI_SUCCESS ? "" : t.work->describe() + ": MPI error: " + mpi_error(rc);
  }

  void fail_all(std::list<Task>& active, std::deque<Task>& fresh) {
    for (Task& t : active) t.work->finish(health_->error_for(t.work->id(), t.work->describe()));
    for (Task& t : fresh) t.work->finish(health_->error_for(t.work->id(), t.work->describe()));
    active.clear();
    fresh.clear();
  }

  void loop(const std::atomic<bool>& alive) {
    std::list<Task> active;
    int idle_polls = 0;
    while (true) {
      std::deque<Task> fresh;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (active.empty() && queue_.empty()) {
          if (stopping_) return;
          cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
          if (stopping_ && queue_.empty()) return;
        }
        fresh.swap(queue_);
      }
      if (health_->broken) {
        fail_all(active, fresh);
        continue;
      }
      for (Task& t : fresh) {   // posted in call order: every rank posts the same sequence
        if (health_->broken) {  // an earlier call of this batch broke it
          t.work->finish(health_->error_for(t.work->id(), t.work->describe()));
          continue;
        }
        const std::string err = start(t);
        if (!alive) return;
        if (!err.empty()) {
          t.work->finish(break_group(err, *t.work));
          continue;
        }
        active.push_back(std::move(t));
      }
      if (health_->broken) continue;
      bool progressed = !fresh.empty();
      for (auto it = active.begin(); it != active.end();) {
        int done = 0;
        const int rc = MPI_Testall(int(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
          break_group(it->work->describe() + ": MPI error: " + mpi_error(rc), *it->work);
          break;
        }
        if (done) {
          std::string err;
          try {
            if (it->finish) it->finish();
          } catch (const std::exception& e) {
            err = e.what();
          }
          it->work->finish(err);
          it = active.erase(it);
          progressed = true;
        } else if (Clock::now() > it->work->deadline()) {
          break_group(it->work->timeout_message(), *it->work);
          break;
        } else {
          ++it;
        }
      }
      // Poll: spin while calls complete quickly, then back off so compute keeps the core.
      idle_polls = progressed ? 0 : idle_polls + 1;
      if (idle_polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::string break_group(const std::string& error, const MpiWork& work) {
    return health_->fail(error, work.id(), work.describe());
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
};

}  // namespace

namespace detail {

ProcessGroupPtr make_mpi_group(GroupOptions options) {
  MPI_Comm comm;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  BRISK_CHECK(rc == MPI_SUCCESS, "init_process_group: MPI_Comm_dup failed: ", mpi_error(rc));
  return std::make_shared<MpiGroup>(std::move(options), comm);
}

ProcessGroupPtr make_mpi_subgroup(GroupOptions options, int index) {
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(MPI_COMM_WORLD, index >= 0 ? 0 : MPI_UNDEFINED, index, &comm);
  BRISK_CHECK(rc == MPI_SUCCESS, "new_group: MPI_Comm_split for group '", options.name, "' failed: ", mpi_error(rc));
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiGroup>(std::move(options), comm);
}

void start_mpi() {
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready) return;
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  BRISK_CHECK(rc == MPI_SUCCESS, "init_process_group: MPI_Init_thread failed: ", mpi_error(rc));
  BRISK_CHECK(provided >= MPI_THREAD_SERIALIZED, "init_process_group: this MPI gives thread level ", provided,
              ", brisk needs MPI_THREAD_SERIALIZED");
}

void finish_mpi(bool any_broken) {
  int ready = 0, finalized = 0;
  MPI_Initialized(&ready);
  MPI_Finalized(&finalized);
  if (ready && !finalized && !any_broken) MPI_Finalize();  // see Note [Faults]
}

void abort_mpi(int status) {
  int ready = 0, finalized = 0;
  MPI_Initialized(&ready);
  MPI_Finalized(&finalized);
  if (!ready || finalized) return;
  alarm(10);
  MPI_Abort(MPI_COMM_WORLD, status);
}

void mpi_world(int& rank, int& size) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

EnvSection mpi_env_section(const EnvOptions&) {
  // Both calls are allowed before MPI_Init (MPI 3.0, section 8.1.1).
  EnvSection s{"mpi"};
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string first(lib, size_t(std::max(0, len)));
  first = first.substr(0, first.find_first_of(",\n"));
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  s.entries.push_back({"library", first});
  s.entries.push_back({"standard", std::to_string(major) + "." + std::to_string(minor)});
  return s;
}

namespace {
const MpiBackend kMpiBackend{&start_mpi, &finish_mpi, &abort_mpi, &mpi_world, &make_mpi_group, &make_mpi_subgroup};
// This object is in every program that links brisk::dist: MPI joins dist and the environment report.
[[maybe_unused]] const bool g_added = (set_mpi_backend(&kMpiBackend), add_env_section(&mpi_env_section), true);
}  // namespace

}  // namespace detail

}  // namespace brisk::dist

// The symbol brisk::dist's link interface forces with `-u`, keeping this object in the link.
extern "C" {
int brisk_dist_mpi_linked = 1;
}
