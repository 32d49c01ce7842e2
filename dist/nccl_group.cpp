// dist/nccl_group.cpp: the NCCL backend of dist::ProcessGroup (CUDA tensors), the library
// brisk_dist_nccl (brisk::dist_nccl) of CUDA builds that found NCCL; it installs itself as
// dist's NCCL factory when linked (Note [Backend libraries] in engine/backend.cpp). The start-up (rank 0's NCCL unique
// id sent over the MPI bootstrap group, then one communicator per process on its device), every call issued on the
// group's own communication stream and ordered with the compute stream by events, the Work that polls a call's
// completion against the group's timeout and aborts the communicator past it (Note [NCCL streams]), and the debug check
// over the bootstrap group. Point-to-point: NCCL has no tags (`tag` is ignored; calls between two ranks match in call
// order) and a send holds its stream until the peer posts the recv, so two ranks that both
// send before they receive deadlock here (the MPI backend allows it).
// Not here: MPI and the process start-up (dist/mpi_group.cpp), what the backends share
// (dist/process_group.cpp), DDP (dist/ddp.cpp).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/backend.h"
#include "engine/functions.h"
#include "kernels/cuda/runtime.h"

// BRISK_NCCL_CHECK(ncclCommInitRank(...), "init_process_group: ", ...): throws brisk::Error
// starting with the context, then the call and NCCL's message.
#define BRISK_NCCL_CHECK(call, ...)                                            \
  do {                                                                         \
    ncclResult_t brisk_nccl_ = (call);                                         \
    BRISK_CHECK(brisk_nccl_ == ncclSuccess, __VA_ARGS__, ": ", #call,          \
                " failed: ", ::brisk::dist::nccl_error(brisk_nccl_, nullptr)); \
  } while (0)

namespace brisk::dist {

// Note [NCCL streams]
// Kernels run on the calling thread's current stream of the device (the compute stream). Each
// call records an event there and makes the group's communication stream (non-blocking, owned
// by the group) wait on it, so NCCL reads its inputs only after the kernels that wrote them;
// then it queues the NCCL call on the communication stream and records a completion event
// after it. The host does not block, and the compute queued after the call runs beside the
// communication (DDP's buckets overlap backward this way). Work::wait() polls the completion
// event, then makes the waiting thread's compute stream wait on it, so kernels queued after
// wait() see the result; a tensor read before wait() races with NCCL.
// Memory: the caching allocator hands a freed block to the next request on the stream it was
// made on, knowing nothing of the communication stream (Note [Caching allocator] in
// engine/allocator.h). Every tensor of a call is therefore held by its Work and by the group's
// list of calls in flight (pruned at each call) until its completion event has passed.
// Timeout: a collective whose peer died never completes; its kernel spins on the GPU. The
// waiter (wait(), or shutdown() for calls nobody waited on) polls against the group's timeout,
// counted from the moment the call was issued, and NCCL's asynchronous error (a network
// failure) while it polls. Either way the communicator is aborted (ncclCommAbort stops its
// kernels), the group is marked broken, the calls in flight fail, and every later call fails at
// once with the first error, as in Note [Faults] (dist/mpi_group.cpp). ncclCommInitRank itself
// has no timeout: the id's broadcast before it (over MPI, with one) catches a rank that is gone.

namespace {

using Clock = std::chrono::steady_clock;
namespace cu = kernels::cuda;

bool nccl_type(DType t, ncclDataType_t& out) {
  switch (t) {
    case DType::F32: out = ncclFloat32; return true;
    case DType::F64: out = ncclFloat64; return true;
    case DType::F16: out = ncclFloat16; return true;
    case DType::BF16: out = ncclBfloat16; return true;
    case DType::I32: out = ncclInt32; return true;
    case DType::I64: out = ncclInt64; return true;
    default: return false;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Product: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

std::string nccl_error(ncclResult_t rc, ncclComm_t comm) {
  std::string s = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

std::string timeout_message(const std::string& what, Duration timeout) {
  std::ostringstream s;
  s << what << ": timed out after " << std::chrono::duration_cast<std::chrono::duration<double>>(timeout).count()
    << " s (a peer died, hangs or called a different collective; set BRISK_DIST_DEBUG=1 to compare calls)";
  return s.str();
}

// The fingerprint's bytes with its padding zeroed: compare_fingerprints compares bytes, and a
// struct's padding holds whatever was there before.
void put_fingerprint(const detail::Fingerprint& f, char* dst) {
  using F = detail::Fingerprint;
  std::memset(dst, 0, sizeof(F));
  std::memcpy(dst + offsetof(F, call), f.call, sizeof f.call);
  std::memcpy(dst + offsetof(F, op), &f.op, sizeof f.op);
  std::memcpy(dst + offsetof(F, dtype), &f.dtype, sizeof f.dtype);
  std::memcpy(dst + offsetof(F, peer), &f.peer, sizeof f.peer);
  std::memcpy(dst + offsetof(F, dims), &f.dims, sizeof f.dims);
  std::memcpy(dst + offsetof(F, sizes), f.sizes, sizeof f.sizes);
  std::memcpy(dst + offsetof(F, collective), &f.collective, sizeof f.collective);
}

class NcclWork;

// What a group shares with its Works (which may outlive it). One mutex guards it all.
struct CommState {
  std::mutex mu;
  ncclComm_t comm = nullptr;  // null once destroyed or aborted
  int device = 0;
  bool broken = false;
  std::string first_error;
  std::vector<std::shared_ptr<NcclWork>> in_flight;  // see Note [NCCL streams]

  void break_locked(const std::string& error);
  // NCCL's asynchronous error as a message naming `what` ("" when none).
  std::string async_error_locked(const std::string& what) const {
    if (!comm) return "";
    ncclResult_t async = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &async);
    if (rc != ncclSuccess) async = rc;
    if (async == ncclSuccess || async == ncclInProgress) return "";
    return what + ": NCCL error: " + nccl_error(async, comm);
  }
};

// ---- Work
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<CommState> state, std::string what, Duration timeout, std::vector<Tensor> keep)
      : Work(timeout), state_(std::move(state)), what_(std::move(what)), timeout_(timeout), keep_(std::move(keep)) {
    BRISK_CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
  }
  ~NcclWork() override {
    if (done_event_) (void)cudaEventDestroy(done_event_);  // destructors do not throw
  }
  cudaEvent_t event() const { return done_event_; }
  void start_clock() { deadline_ = Clock::now() + timeout_; }

  bool wait(Duration timeout) override {
    const Clock::time_point give_up = Clock::now() + timeout;
    cu::DeviceGuard guard(state_->device);
    while (true) {
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        std::string error;
        if (poll_locked(error)) break;
        if (state_->broken) BRISK_FAIL(detail::broken_group_error(what_, state_->first_error));
        if (error.empty()) error = state_->async_error_locked(what_);
        if (error.empty() && Clock::now() > deadline_) error = timeout_message(what_, timeout_);
        if (!error.empty()) {
          state_->break_locked(error);
          BRISK_FAIL(error);
        }
      }
      if (Clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Kernels queued after wait() on this thread's compute stream come after the call.
    BRISK_CUDA_CHECK(cudaStreamWaitEvent(cu::stream_handle(state_->device), done_event_, 0));
    return true;
  }

  // A failed call (broken group, CUDA error) is completed too: its wait() throws.
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    std::string error;
    return poll_locked(error) || state_->broken || !error.empty();
  }
  std::string describe() const override { return what_; }

  // Under the state's lock: true once the completion event has passed, and the call's tensors
  // are then let go. A CUDA error (a kernel fault queued before the event) goes to `error`.
  bool poll_locked(std::string& error) const {
    if (done_) return true;
    if (state_->broken) return false;  // aborted: whatever the event says, the result is void
    const cudaError_t rc = cudaEventQuery(done_event_);
    if (rc == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      error = what_ + ": CUDA error: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
      return false;
    }
    done_ = true;
    keep_.clear();
    return true;
  }

 private:
  std::shared_ptr<CommState> state_;
  std::string what_;
  Duration timeout_;
  Clock::time_point deadline_ = Clock::time_point::max();
  cudaEvent_t done_event_ = nullptr;
  mutable std::vector<Tensor> keep_;  // the call's tensors, until done_ (Note [NCCL streams])
  mutable bool done_ = false;         // guarded by state_->mu
};

void CommState::break_locked(const std::string& error) {
  if (broken) return;
  std::string ignored;
  for (auto& w : in_flight) w->poll_locked(ignored);  // calls already complete keep their result
  broken = true;
  first_error = error;
  detail::mark_broken(error);
  if (comm) (void)ncclCommAbort(comm);  // stops the kernels that wait for a dead peer
  comm = nullptr;
}

// ---- the group
class NcclGroup : public ProcessGroup {
 public:
  using Issue = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

  // Joins the communicator of `id` (init_process_group), or, with `parent`, is this rank's part
  // of ncclCommSplit(parent) (new_group; `bootstrap` is the CPU sub-group of the same ranks).
  NcclGroup(GroupOptions options, Device device, ProcessGroupPtr bootstrap, const ncclUniqueId& id,
            ncclComm_t parent = nullptr)
      : ProcessGroup(std::move(options)),
        device_(device),
        bootstrap_(std::move(bootstrap)),
        rank_(bootstrap_->rank()),
        size_(bootstrap_->size()),
        state_(std::make_shared<CommState>()) {
    if (const char* e = std::getenv("BRISK_DIST_DEBUG")) options_.debug |= std::string(e) == "1";
    state_->device = device.index;
    cu::DeviceGuard guard(device.index);
    try {
      // Non-blocking: the communication stream must not serialize with the legacy stream 0.
      BRISK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      BRISK_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      if (parent) {
        BRISK_NCCL_CHECK(ncclCommSplit(parent, 0, rank_, &state_->comm, nullptr),
                         "new_group: ncclCommSplit for group '", options_.name, "' on ", device, " (rank ", rank_,
                         " of ", size_, ")");
      } else {
        BRISK_NCCL_CHECK(ncclCommInitRank(&state_->comm, size_, id, rank_), "init_process_group: group '",
                         options_.name, "' on ", device, " (rank ", rank_, " of ", size_, ")");
      }
    } catch (...) {
      state_->comm = nullptr;
      release_cuda();
      throw;
    }
  }
  ~NcclGroup() override { shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  Device device() const { return device_; }
  // The communicator to split (new_group), after the calls issued so far: nothing else may be
  // in flight on it meanwhile (new_group waits for a barrier on the world first).
  ncclComm_t comm_for_split(const char* call) {
    std::lock_guard<std::mutex> lock(state_->mu);
    BRISK_CHECK(state_->comm && !state_->broken, call, ": group '", options_.name,
                "' is broken or shut down; no group can be split from it");
    return state_->comm;
  }

  // Waits for the calls in flight (each against its timeout), destroys the communicator
  // unless the group broke (aborted then), and stops the bootstrap group's thread.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> order(issue_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    std::vector<std::shared_ptr<NcclWork>> pending;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      pending = state_->in_flight;
    }
    for (auto& w : pending) {
      try {
        w->wait(options_.timeout + std::chrono::seconds(5));
      } catch (const std::exception&) {
        // The group is broken now; the call's own wait() reports it.
      }
    }
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->comm && !state_->broken) (void)ncclCommDestroy(state_->comm);
      state_->comm = nullptr;
      state_->in_flight.clear();
    }
    release_cuda();
    bootstrap_->shutdown();  // MPI is finalized after this (destroy_process_group)
  }

  WorkPtr allreduce(Tensor& t, ReduceOp op) override {
    const ncclDataType_t type = check(t, "allreduce", op);
    const ncclRedOp_t rop = nccl_op(op);
    Tensor x = t;
    return issue("allreduce", op, -1, x, {x}, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(x.data_ptr(), x.data_ptr(), size_t(x.numel()), type, rop, c, s);
    });
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    const ncclDataType_t type = check(t, "broadcast");
    check_rank(root, "broadcast", "root");
    Tensor x = t;
    return issue("broadcast", ReduceOp::Sum, root, x, {x}, [=](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(x.data_ptr(), x.data_ptr(), size_t(x.numel()), type, root, c, s);
    });
  }

  WorkPtr allgather(std::vector<Tensor>& out, const Tensor& in) override {
    const ncclDataType_t type = check(in, "allgather");
    BRISK_CHECK(int(out.size()) == size_, "allgather: ", out.size(), " output tensors for a group of ", size_);
    for (const Tensor& o : out) {
      check(o, "allgather");
      BRISK_CHECK(o.sizes() == in.sizes() && o.dtype() == in.dtype(), "allgather: output ", o.str(),
                  " does not match the input ", in.str());
    }
    // Gathered into one flat buffer, then copied out on the communication stream.
    Tensor flat = empty({int64_t(size_) * in.numel()}, in.dtype(), device_);
    std::vector<Tensor> keep = out;
    keep.push_back(in);
    keep.push_back(flat);
    std::vector<Tensor> outs = out;
    Tensor x = in;
    return issue("allgather", ReduceOp::Sum, -1, x, std::move(keep), [=](ncclComm_t c, cudaStream_t s) {
      const ncclResult_t rc = ncclAllGather(x.data_ptr(), flat.data_ptr(), size_t(x.numel()), type, c, s);
      const size_t bytes = size_t(x.numel()) * x.element_size();
      for (size_t i = 0; i < outs.size() && rc == ncclSuccess; ++i) {
        const char* src = static_cast<const char*>(flat.data_ptr()) + i * bytes;
        if (cudaMemcpyAsync(outs[i].data_ptr(), src, bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess) {
          (void)cudaGetLastError();
          return ncclUnhandledCudaError;
        }
      }
      return rc;
    });
  }

  WorkPtr allgather_into_tensor(Tensor& out, const Tensor& in) override {
    const ncclDataType_t type = check(in, "allgather_into_tensor");
    check(out, "allgather_into_tensor");
    BRISK_CHECK(out.dtype() == in.dtype() && out.numel() == int64_t(size_) * in.numel(),
                "allgather_into_tensor: output ", out.str(), " needs ", size_, " x ", in.numel(), " elements of ",
                in.dtype(), " (input ", in.str(), ")");
    Tensor x = in, y = out;
    return issue("allgather_into_tensor", ReduceOp::Sum, -1, x, {x, y}, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(x.data_ptr(), y.data_ptr(), size_t(x.numel()), type, c, s);
    });
  }

  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    const ncclDataType_t type = check(in, "reduce_scatter", op);
    check(out, "reduce_scatter", op);
    BRISK_CHECK(out.dtype() == in.dtype() && in.numel() == int64_t(size_) * out.numel(), "reduce_scatter: input ",
                in.str(), " needs ", size_, " x ", out.numel(), " elements (output ", out.str(), ")");
    const ncclRedOp_t rop = nccl_op(op);
    Tensor x = in, y = out;
    return issue("reduce_scatter", op, -1, x, {x, y}, [=](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(x.data_ptr(), y.data_ptr(), size_t(y.numel()), type, rop, c, s);
    });
  }

  // NCCL has no barrier: an allreduce of one device int stands in for it.
  WorkPtr barrier() override {
    Tensor one = zeros({1}, DType::I32, device_);
    return issue("barrier", ReduceOp::Sum, -1, Tensor(), {one}, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclInt32, ncclSum, c, s);
    });
  }

  // Point-to-point calls are not collectives: the debug check does not apply to them.
  WorkPtr send(const Tensor& t, int dst, int /*tag: NCCL has none*/) override {
    const ncclDataType_t type = check(t, "send");
    check_rank(dst, "send", "destination");
    BRISK_CHECK(dst != rank_, "send: rank ", rank_, " cannot send to itself on the NCCL backend (group '",
                options_.name, "')");
    Tensor x = t;
    return issue(
        "send", ReduceOp::Sum, dst, x, {x},
        [=](ncclComm_t c, cudaStream_t s) {
          return grouped([&] { return ncclSend(x.data_ptr(), size_t(x.numel()), type, dst, c, s); });
        },
        /*collective=*/false);
  }

  WorkPtr recv(Tensor& t, int src, int /*tag: NCCL has none*/) override {
    const ncclDataType_t type = check(t, "recv");
    check_rank(src, "recv", "source");
    BRISK_CHECK(src != rank_, "recv: rank ", rank_, " cannot receive from itself on the NCCL backend (group '",
                options_.name, "')");
    Tensor x = t;
    return issue(
        "recv", ReduceOp::Sum, src, x, {x},
        [=](ncclComm_t c, cudaStream_t s) {
          return grouped([&] { return ncclRecv(x.data_ptr(), size_t(x.numel()), type, src, c, s); });
        },
        /*collective=*/false);
  }

 private:
  template <class F>
  static ncclResult_t grouped(F call) {
    const ncclResult_t start = ncclGroupStart();
    if (start != ncclSuccess) return start;
    const ncclResult_t rc = call();
    const ncclResult_t end = ncclGroupEnd();
    return rc != ncclSuccess ? rc : end;
  }

  ncclDataType_t check(const Tensor& t, const char* call, ReduceOp op = ReduceOp::Sum) const {
    detail::check_tensor(t, call, *this, DeviceType::CUDA);
    BRISK_CHECK(t.device() == device_, call, ": ", t.str(), " is on ", t.device(), " but group '", options_.name,
                "' communicates on ", device_);
    ncclDataType_t type = ncclFloat32;
    BRISK_CHECK(nccl_type(t.dtype(), type), call, ": the NCCL backend has no dtype ", t.dtype(), " (", t.str(),
                "; F32, F64, F16, BF16, I32, I64)");
    BRISK_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), call, ": avg needs a floating dtype, got ", t.str());
    return type;
  }
  void check_rank(int r, const char* call, const char* what) const {
    BRISK_CHECK(r >= 0 && r < size_, call, ": ", what, " rank ", r, " is outside the group '", options_.name, "' of ",
                size_, " ranks");
  }
  WorkPtr issue(const char* call, ReduceOp op, int peer, const Tensor& t, std::vector<Tensor> keep, const Issue& run,
                bool collective = true) {
    detail::Fingerprint f = detail::fingerprint(call, op, peer, t);
    f.collective = collective;
    std::lock_guard<std::mutex> order(issue_mu_);  // every rank must reach NCCL in call order
    BRISK_CHECK(!stopped_, call, ": the group '", options_.name, "' was destroyed");
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->broken) BRISK_FAIL(detail::broken_group_error(detail::describe(f, *this), state_->first_error));
    }
    if (options_.debug && collective) debug_check(f);
    cu::DeviceGuard guard(device_.index);
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->broken)  // another thread's wait() broke it
      BRISK_FAIL(detail::broken_group_error(detail::describe(f, *this), state_->first_error));
    prune_locked();
    auto work = std::make_shared<NcclWork>(state_, detail::describe(f, *this), options_.timeout, std::move(keep));
    BRISK_CUDA_CHECK(cudaEventRecord(ready_, cu::stream_handle(device_.index)));  // See Note [NCCL streams]
    BRISK_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    // A call of zero elements has nothing to send on any rank: it only orders the streams.
    const ncclResult_t rc = t.defined() && t.numel() == 0 ? ncclSuccess : run(state_->comm, stream_);
    if (rc != ncclSuccess) {
      const std::string error = work->describe() + ": NCCL error: " + nccl_error(rc, state_->comm);
      state_->break_locked(error);
      BRISK_FAIL(error);
    }
    BRISK_CUDA_CHECK(cudaEventRecord(work->event(), stream_));
    work->start_clock();
    state_->in_flight.push_back(work);
    return work;
  }

  // Lets go of the calls whose completion event has passed (and so of their tensors).
  void prune_locked() {
    std::vector<std::shared_ptr<NcclWork>>& v = state_->in_flight;
    std::string ignored;  // a CUDA error surfaces in the call's wait()
    size_t kept = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i]->poll_locked(ignored)) v[kept++] = std::move(v[i]);
    }
    v.resize(kept);
  }

  // Every rank allgathers what it is about to call over the bootstrap group (blocking, with
  // its timeout); a mismatch (or a failed check) breaks the group, as in the MPI backend.
  void debug_check(const detail::Fingerprint& f) {
    constexpr int64_t kWords = int64_t((sizeof(detail::Fingerprint) + 7) / 8);
    Tensor mine = zeros({kWords}, DType::I64);
    Tensor all = zeros({int64_t(size_) * kWords}, DType::I64);
    put_fingerprint(f, static_cast<char*>(mine.data_ptr()));
    std::string error;
    try {
      bootstrap_->allgather_into_tensor(all, mine)->wait();
    } catch (const std::exception& e) {
      error = detail::describe(f, *this) + ": the debug check failed: " + e.what();
    }
    if (error.empty()) {
      std::vector<detail::Fingerprint> calls(static_cast<size_t>(size_));
      const char* bytes = static_cast<const char*>(all.data_ptr());
      for (size_t r = 0; r < calls.size(); ++r) {
        std::memcpy(&calls[r], bytes + r * size_t(kWords) * 8, sizeof(detail::Fingerprint));
      }
      error = detail::compare_fingerprints(calls, rank_, *this);
    }
    if (error.empty()) return;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->break_locked(error);
    }
    BRISK_FAIL(error);
  }

  void release_cuda() {
    if (ready_) (void)cudaEventDestroy(ready_);
    if (stream_) (void)cudaStreamDestroy(stream_);  // queued work still finishes
    ready_ = nullptr;
    stream_ = nullptr;
  }

  Device device_;
  ProcessGroupPtr bootstrap_;  // the MPI group over the same ranks: the id, the debug check
  int rank_ = 0, size_ = 1;
  std::shared_ptr<CommState> state_;
  cudaStream_t stream_ = nullptr;  // the communication stream
  cudaEvent_t ready_ = nullptr;    // recorded on the compute stream before each call
  std::mutex issue_mu_;
  bool stopped_ = false;  // guarded by issue_mu_
};

}  // namespace

namespace detail {

// Rank 0 makes NCCL's unique id (128 bytes) and broadcasts it over the bootstrap group as 16
// I64 words; every rank then joins the communicator on `device`. A rank 0 that cannot make the
// id sends zeros, so the others fail at once instead of waiting out ncclCommInitRank.
ProcessGroupPtr make_nccl_group(GroupOptions options, Device device, const ProcessGroupPtr& bootstrap) {
  BRISK_CHECK(device.is_cuda(), "init_process_group: the NCCL backend takes a CUDA device, not ", device);
  BRISK_CHECK(bootstrap, "init_process_group: the NCCL backend needs an MPI bootstrap group");
  const int count = cu::device_count();
  BRISK_CHECK(device.index >= 0 && device.index < count, "init_process_group: NCCL group '", options.name, "' on ",
              device, ": no such device (", count, " CUDA device", count == 1 ? "" : "s", " present)");
  static_assert(sizeof(ncclUniqueId) == 16 * sizeof(int64_t), "NCCL's unique id travels as 16 I64 words");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::string id_error;
  if (bootstrap->rank() == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      std::memset(&id, 0, sizeof id);
      id_error = "init_process_group: ncclGetUniqueId failed: " + nccl_error(rc, nullptr);
    }
  }
  Tensor words = zeros({16}, DType::I64);
  std::memcpy(words.data_ptr(), &id, sizeof id);
  bootstrap->broadcast(words, 0)->wait();
  std::memcpy(&id, words.data_ptr(), sizeof id);
  if (!id_error.empty()) BRISK_FAIL(id_error);
  const ncclUniqueId zero{};
  BRISK_CHECK(std::memcmp(&id, &zero, sizeof id) != 0, "init_process_group: rank 0 could not make NCCL's unique id",
              " for group '", options.name, "'");
  return std::make_shared<NcclGroup>(std::move(options), device, bootstrap, id);
}

// new_group on an NCCL world: ncclCommSplit of the parent's communicator, collective over the
// parent (a rank outside the group passes NCCL_SPLIT_NOCOLOR and gets nullptr).
ProcessGroupPtr split_nccl_group(const ProcessGroupPtr& parent, GroupOptions options,
                                 const ProcessGroupPtr& bootstrap) {
  auto* p = dynamic_cast<NcclGroup*>(parent.get());
  BRISK_CHECK(p, "new_group: group '", parent->options().name, "' is not an NCCL group");
  ncclComm_t comm = p->comm_for_split("new_group");
  if (!bootstrap) {  // not a member: takes part in the split, gets no communicator
    cu::DeviceGuard guard(p->device().index);
    ncclComm_t none = nullptr;
    BRISK_NCCL_CHECK(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr), "new_group: ncclCommSplit for group '",
                     options.name, "' (not a member)");
    return nullptr;
  }
  const ncclUniqueId unused{};
  return std::make_shared<NcclGroup>(std::move(options), p->device(), bootstrap, unused, comm);
}

namespace {
EnvSection nccl_env_section(const EnvOptions&) {
  int v = 0;
  EnvSection s{"nccl"};
  if (ncclGetVersion(&v) != ncclSuccess) {
    s.entries.push_back({"version", "unknown (ncclGetVersion failed)"});
  } else {  // NCCL >= 2.9: major * 10000 + minor * 100 + patch
    s.entries.push_back(
        {"version", std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100)});
  }
  return s;
}

[[maybe_unused]] const bool g_added = (set_nccl_factory(&make_nccl_group), set_nccl_splitter(&split_nccl_group),
                                       add_env_section(&nccl_env_section), true);
}  // namespace

}  // namespace detail

}  // namespace brisk::dist

// The symbol brisk::dist_nccl's link interface forces with `-u`, keeping this object in the link.
extern "C" {
int brisk_dist_nccl_linked = 1;
}
