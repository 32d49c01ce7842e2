// dist/gloo_group.cpp: the Gloo backend of dist::ProcessGroup (CPU tensors over TCP, no MPI):
// Facebook's Gloo (Debian's libgloo-dev) does the collectives; its ranks find each other
// through the rendezvous store (dist/store.h). As the MPI backend, one thread per group runs
// the calls in call order while the caller computes; point-to-point calls are posted there and
// waited for by a thread each, so a receive never holds up the collectives behind it. Gloo's
// own per-call timeout (the group's) and its error on a closed connection end a call with a
// brisk::Error and break the group (Note [Faults] in dist/mpi_group.cpp). A build without
// Gloo keeps only the stubs at the end, which say so. Not here: the environment rendezvous
// (dist::init_from_env, dist/process_group.cpp), MPI, NCCL.
#include "dist/backend.h"
#include "dist/store.h"

#ifdef BRISK_WITH_GLOO

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/functions.h"
#include "engine/half.h"

namespace brisk::dist {

namespace {

using Clock = std::chrono::steady_clock;

// ---- the store as Gloo's rendezvous store, under a key prefix per group
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<TcpStore> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_->set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override { return store_->get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_->timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    store_->wait(full, timeout);
  }

 private:
  std::shared_ptr<TcpStore> store_;
  std::string prefix_;
};

// ---- reductions: element functions for Gloo, computing in float for 16-bit types and rounding
// once (as the MPI backend's user ops), NaN-propagating min and max.
struct Add {
  template <class A>
  A operator()(A a, A b) const {
    return a + b;
  }
};
struct Mul {
  template <class A>
  A operator()(A a, A b) const {
    return a * b;
  }
};
struct Min {
  template <class A>
  A operator()(A a, A b) const {
    return a != a ? a : (b < a ? b : a);
  }
};
struct Max {
  template <class A>
  A operator()(A a, A b) const {
    return a != a ? a : (b > a ? b : a);
  }
};

template <class T, class A, class F>
void reduce_elements(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = T(F()(A(x[i]), A(y[i])));
}

template <class T, class A>
gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return &reduce_elements<T, A, Add>;
    case ReduceOp::Product: return &reduce_elements<T, A, Mul>;
    case ReduceOp::Min: return &reduce_elements<T, A, Min>;
    case ReduceOp::Max: return &reduce_elements<T, A, Max>;
  }
  return &reduce_elements<T, A, Add>;
}

bool has_dtype(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16 || t == DType::I32 ||
         t == DType::I64;
}

// In-place allreduce of x's elements on `ctx`.
void run_allreduce(const std::shared_ptr<gloo::Context>& ctx, const Tensor& x, ReduceOp op, Duration timeout) {
  gloo::AllreduceOptions o(ctx);
  o.setTimeout(timeout);
  const size_t n = size_t(x.numel());
  switch (x.dtype()) {
    case DType::F32:
      o.setOutput(static_cast<float*>(x.data_ptr()), n);
      o.setReduceFunction(reduce_fn<float, float>(op));
      break;
    case DType::F64:
      o.setOutput(static_cast<double*>(x.data_ptr()), n);
      o.setReduceFunction(reduce_fn<double, double>(op));
      break;
    case DType::F16:
      o.setOutput(static_cast<Half*>(x.data_ptr()), n);
      o.setReduceFunction(reduce_fn<Half, float>(op));
      break;
    case DType::BF16:
      o.setOutput(static_cast<BFloat16*>(x.data_ptr()), n);
      o.setReduceFunction(reduce_fn<BFloat16, float>(op));
      break;
    case DType::I32:
      o.setOutput(static_cast<int32_t*>(x.data_ptr()), n);
      o.setReduceFunction(reduce_fn<int32_t, int32_t>(op));
      break;
    case DType::I64:
      o.setOutput(static_cast<int64_t*>(x.data_ptr()), n);
      o.setReduceFunction(reduce_fn<int64_t, int64_t>(op));
      break;
    default: BRISK_FAIL("allreduce: the Gloo backend has no dtype ", x.dtype());
  }
  gloo::allreduce(o);
}

void run_allgather(const std::shared_ptr<gloo::Context>& ctx, const void* in, void* out, size_t bytes,
                   Duration timeout) {
  gloo::AllgatherOptions o(ctx);
  o.setTimeout(timeout);
  o.setInput(static_cast<char*>(const_cast<void*>(in)), bytes);
  o.setOutput(static_cast<char*>(out), bytes * size_t(ctx->size));
  gloo::allgather(o);
}

// A group's health, shared with its Works (see the MPI backend's): once broken, every call
// fails with the first error.
using Health = detail::GroupHealth;  // dist/backend.h

// Done when the group's threads finish it. The backend's timeout is Gloo's (the group's, per
// call); the waiter's own deadline, 2 s later, only guards against a call Gloo never ends.
class GlooWork : public detail::QueuedWork {
 public:
  GlooWork(std::string what, Duration timeout, std::shared_ptr<Health> health)
      : QueuedWork(what, timeout, std::move(health), std::chrono::seconds(2)), what_(std::move(what)) {}
  // Gloo's exception as the call's error: a timeout reads as the MPI backend's.
  std::string gloo_error(const std::string& what) const {
    if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
      return timeout_message() + " [gloo: " + what + "]";
    }
    return what_ + ": failed, a peer closed its connection or the network failed (did a rank die?) [gloo: " + what +
           "]";
  }

 private:
  std::string what_;
};

struct Task {
  std::shared_ptr<GlooWork> work;
  detail::Fingerprint fingerprint;
  std::function<void()> run;  // the Gloo call (throws gloo::Exception)
  // Point-to-point: the group's thread posts `buffer` over `tensor` (kept alive until the
  // transfer completes); a waiter thread of its own waits for it.
  Tensor tensor;
  int peer = -1, tag = 0;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool is_send = false;
  Clock::time_point posted;
};

// Slots of point-to-point messages: their own top byte, apart from Gloo's collectives'.
uint64_t p2p_slot(int tag) { return (uint64_t(0xB7) << 56) | uint64_t(uint32_t(tag)); }

class GlooGroup : public ProcessGroup {
 public:
  GlooGroup(GroupOptions options, std::shared_ptr<gloo::Context> ctx, std::shared_ptr<TcpStore> store)
      : ProcessGroup(std::move(options)), ctx_(std::move(ctx)), store_(std::move(store)) {
    if (const char* e = std::getenv("BRISK_DIST_DEBUG")) options_.debug |= std::string(e) == "1";
    thread_ = std::thread([this] { loop(); });
  }
  ~GlooGroup() override { shutdown(); }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  const char* backend() const override { return "gloo"; }

  // Gloo ends every call within its timeout, a broken group's calls at once: the threads are
  // joined, not left behind as the MPI backend's must be.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    join_waiters(true);
  }

  WorkPtr allreduce(Tensor& t, ReduceOp op) override {
    check(t, "allreduce", op);
    Tensor x = t;
    const int n = size();
    return submit("allreduce", op, -1, x, [this, x, op, n] {
      run_allreduce(ctx_, x, op, options_.timeout);
      if (op == ReduceOp::Avg) detail::divide(x, n);
    });
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    check(t, "broadcast");
    check_rank(root, "broadcast", "root");
    Tensor x = t;
    return submit("broadcast", ReduceOp::Sum, root, x, [this, x, root] {
      gloo::BroadcastOptions o(ctx_);
      o.setTimeout(options_.timeout);
      o.setRoot(root);
      o.setOutput(static_cast<char*>(x.data_ptr()), size_t(x.numel()) * x.element_size());
      gloo::broadcast(o);
    });
  }

  WorkPtr allgather(std::vector<Tensor>& out, const Tensor& in) override {
    check(in, "allgather");
    BRISK_CHECK(int(out.size()) == size(), "allgather: ", out.size(), " output tensors for a group of ", size());
    for (const Tensor& o : out) {
      check(o, "allgather");
      BRISK_CHECK(o.sizes() == in.sizes() && o.dtype() == in.dtype(), "allgather: output ", o.str(),
                  " does not match the input ", in.str());
    }
    Tensor flat = empty({int64_t(size()) * in.numel()}, in.dtype());
    std::vector<Tensor> outs = out;
    Tensor x = in;
    return submit("allgather", ReduceOp::Sum, -1, x, [this, x, flat, outs] {
      const size_t bytes = size_t(x.numel()) * x.element_size();
      run_allgather(ctx_, x.data_ptr(), flat.data_ptr(), bytes, options_.timeout);
      for (size_t i = 0; i < outs.size(); ++i) {
        std::memcpy(outs[i].data_ptr(), static_cast<const char*>(flat.data_ptr()) + i * bytes, bytes);
      }
    });
  }

  WorkPtr allgather_into_tensor(Tensor& out, const Tensor& in) override {
    check(in, "allgather_into_tensor");
    check(out, "allgather_into_tensor");
    BRISK_CHECK(out.dtype() == in.dtype() && out.numel() == int64_t(size()) * in.numel(),
                "allgather_into_tensor: output ", out.str(), " needs ", size(), " x ", in.numel(), " elements of ",
                in.dtype(), " (input ", in.str(), ")");
    Tensor x = in, o = out;
    return submit("allgather_into_tensor", ReduceOp::Sum, -1, x, [this, x, o] {
      run_allgather(ctx_, x.data_ptr(), o.data_ptr(), size_t(x.numel()) * x.element_size(), options_.timeout);
    });
  }

  // Gloo 0.5 has no reduce-scatter in its options API: an allreduce of a copy, then this rank's
  // chunk (twice the traffic of a ring reduce-scatter; Note [Gloo reduce-scatter] in docs/DECISIONS.md).
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check(in, "reduce_scatter", op);
    check(out, "reduce_scatter", op);
    BRISK_CHECK(out.dtype() == in.dtype() && in.numel() == int64_t(size()) * out.numel(), "reduce_scatter: input ",
                in.str(), " needs ", size(), " x ", out.numel(), " elements (output ", out.str(), ")");
    Tensor x = in, y = out;
    const int me = rank(), n = size();
    return submit("reduce_scatter", op, -1, x, [this, x, y, op, me, n] {
      Tensor all = x.clone();
      run_allreduce(ctx_, all, op, options_.timeout);
      const size_t bytes = size_t(y.numel()) * y.element_size();
      std::memcpy(y.data_ptr(), static_cast<const char*>(all.data_ptr()) + size_t(me) * bytes, bytes);
      if (op == ReduceOp::Avg) detail::divide(y, n);
    });
  }

  WorkPtr barrier() override {
    return submit("barrier", ReduceOp::Sum, -1, Tensor(), [this] {
      gloo::BarrierOptions o(ctx_);
      o.setTimeout(options_.timeout);
      gloo::barrier(o);
    });
  }

  WorkPtr send(const Tensor& t, int dst, int tag) override { return p2p(t, dst, tag, true); }
  WorkPtr recv(Tensor& t, int src, int tag) override { return p2p(t, src, tag, false); }

 private:
  WorkPtr p2p(const Tensor& t, int peer, int tag, bool is_send) {
    const char* call = is_send ? "send" : "recv";
    check(t, call);
    check_rank(peer, call, is_send ? "destination" : "source");
    BRISK_CHECK(peer != rank(), call, ": rank ", peer, " is this rank (group '", options_.name, "')");
    Task task = make_task(call, ReduceOp::Sum, peer, t, {});
    task.fingerprint.collective = false;
    task.is_send = is_send;
    task.tensor = t;
    task.peer = peer;
    task.tag = tag;
    return enqueue(std::move(task), call);
  }

  void check(const Tensor& t, const char* call, ReduceOp op = ReduceOp::Sum) const {
    detail::check_tensor(t, call, *this, DeviceType::CPU);
    BRISK_CHECK(has_dtype(t.dtype()), call, ": the Gloo backend has no dtype ", t.dtype(), " (", t.str(),
                "; F32, F64, F16, BF16, I32, I64)");
    BRISK_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), call, ": avg needs a floating dtype, got ", t.str());
  }
  void check_rank(int r, const char* call, const char* what) const {
    BRISK_CHECK(r >= 0 && r < size(), call, ": ", what, " rank ", r, " is outside the group '", options_.name, "' of ",
                size(), " ranks");
  }

  Task make_task(const char* call, ReduceOp op, int peer, const Tensor& t, std::function<void()> run) {
    Task task;
    task.fingerprint = detail::fingerprint(call, op, peer, t);
    task.work = std::make_shared<GlooWork>(detail::describe(task.fingerprint, *this), options_.timeout, health_);
    task.run = std::move(run);
    return task;
  }

  WorkPtr submit(const char* call, ReduceOp op, int peer, const Tensor& t, std::function<void()> run) {
    return enqueue(make_task(call, op, peer, t, std::move(run)), call);
  }

  WorkPtr enqueue(Task task, const char* call) {
    WorkPtr w = task.work;
    if (health_->broken) {
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

  // The debug check: every rank's fingerprint, compared with rank 0's.
  std::string debug_check(const Task& t) {
    std::vector<detail::Fingerprint> all(static_cast<size_t>(size()));
    run_allgather(ctx_, &t.fingerprint, all.data(), sizeof(detail::Fingerprint), options_.timeout);
    return detail::compare_fingerprints(all, rank(), *this);
  }

  void loop() {
    while (true) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      if (health_->broken) {
        t.work->finish(health_->error_for(t.work->id(), t.work->describe()));
        continue;
      }
      std::string err;
      try {
        if (options_.debug && t.fingerprint.collective) err = debug_check(t);
        if (err.empty() && !t.fingerprint.collective) {
          post(t);
          continue;
        }
        if (err.empty()) t.run();
      } catch (const gloo::Exception& e) {
        err = t.work->gloo_error(e.what());
      } catch (const std::exception& e) {
        err = t.work->describe() + ": " + e.what();
      }
      if (err.empty()) {
        t.work->finish();
      } else {
        t.work->finish(health_->fail(err, t.work->id(), t.work->describe()));
      }
    }
  }

  // Posts a send or receive (Gloo does not block on it) and starts its waiter thread.
  void post(Task& t) {
    t.buffer = ctx_->createUnboundBuffer(t.tensor.data_ptr(), size_t(t.tensor.numel()) * t.tensor.element_size());
    if (t.is_send) {
      t.buffer->send(t.peer, p2p_slot(t.tag));
    } else {
      t.buffer->recv(t.peer, p2p_slot(t.tag));
    }
    t.posted = Clock::now();
    join_waiters(false);
    auto task = std::make_shared<Task>(std::move(t));
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread waiter([this, task, done] {
      wait_p2p(task);
      *done = true;
    });
    std::lock_guard<std::mutex> lock(mu_);
    waiters_.push_back({std::move(waiter), done});
  }

  // One waiter thread per point-to-point call: Gloo's waits cannot be polled (a wait that
  // times out breaks the context), and waiting in call order could hold a finished receive
  // behind a send whose receiver first needs that receive's result.
  void wait_p2p(std::shared_ptr<Task> t) {
    std::string err;
    try {
      const auto left =
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(t->posted + t->work->timeout() - Clock::now()),
                   std::chrono::milliseconds(1));
      const bool ok = t->is_send ? t->buffer->waitSend(left) : t->buffer->waitRecv(left);
      if (!ok) err = t->work->describe() + ": aborted";
    } catch (const gloo::Exception& e) {
      err = t->work->gloo_error(e.what());
    }
    if (err.empty()) {
      t->work->finish();
    } else {
      t->work->finish(health_->fail(err, t->work->id(), t->work->describe()));
    }
  }

  void join_waiters(bool all) {
    std::vector<Waiter> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (all || *it->done) {
          done.push_back(std::move(*it));
          it = waiters_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Waiter& w : done) w.thread.join();
  }

  struct Waiter {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<TcpStore> store_;  // kept alive with the group (rank 0's serves the job)
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::list<Waiter> waiters_;
  bool stopping_ = false;
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
};

// This host's address as the master sees it: the source address of a route to MASTER_ADDR
// (a UDP socket's connect sends nothing). In a network namespace or on a multi-homed host this
// is the interface the peers can reach, where the host name may resolve to another.
std::string local_address_towards(const std::string& master) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  BRISK_CHECK(::getaddrinfo(master.c_str(), "9", &hints, &res) == 0 && res,
              "init_from_env: cannot resolve MASTER_ADDR '", master, "'");
  std::string out;
  const int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage me{};
    socklen_t len = sizeof me;
    char host[NI_MAXHOST];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&me), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
      out = host;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  BRISK_CHECK(!out.empty(), "init_from_env: no route from this host to MASTER_ADDR '", master,
              "' (set BRISK_GLOO_IFNAME to the interface to use)");
  return out;
}

std::shared_ptr<gloo::transport::Device> device_for(const std::string& master) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<gloo::transport::Device>> devices;
  std::lock_guard<std::mutex> lock(mu);
  auto& d = devices[master];
  if (!d) {
    gloo::transport::tcp::attr attr;
    const char* ifname = std::getenv("BRISK_GLOO_IFNAME");
    if (!ifname || !*ifname) ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) {
      attr.iface = ifname;
    } else {
      attr.hostname = local_address_towards(master);
    }
    try {
      d = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      BRISK_FAIL("init_from_env: Gloo cannot open a TCP device on ",
                 attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface, ": ", e.what());
    }
  }
  return d;
}

}  // namespace

namespace detail {

bool gloo_available() { return true; }

ProcessGroupPtr make_gloo_group(GroupOptions options, const std::shared_ptr<TcpStore>& store, const std::string& prefix,
                                int rank, int size, const std::string& master_addr) {
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died must end the call with
  // an error, not kill this process with SIGPIPE. A handler the program set is left alone.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  auto dev = device_for(master_addr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(options.timeout);
  StoreAdapter adapter(store, prefix);
  try {
    ctx->connectFullMesh(adapter, dev);
  } catch (const gloo::Exception& e) {
    BRISK_FAIL("init_from_env: group '", options.name, "' (rank ", rank, " of ", size,
               ", gloo) could not connect its ranks: ", e.what());
  }
  return std::make_shared<GlooGroup>(std::move(options), ctx, store);
}

}  // namespace detail

}  // namespace brisk::dist

#else  // no Gloo in this build

namespace brisk::dist::detail {

bool gloo_available() { return false; }

ProcessGroupPtr make_gloo_group(GroupOptions options, const std::shared_ptr<TcpStore>&, const std::string&, int, int,
                                const std::string&) {
  BRISK_FAIL("init_from_env: group '", options.name,
             "': this build of brisk has no Gloo backend (install libgloo-dev and reconfigure)");
}

}  // namespace brisk::dist::detail

#endif
