// kernels/cuda/backend.cpp: the CUDA Backend and runtime: device discovery (no driver or no
// GPU means 0 devices, never an error), per-device state made on first use (default stream,
// caching allocator over cudaMalloc, error slot), thread-local current streams, Stream /
// Event / DeviceGuard, the pinned host allocator, copies, and the error-reporting helpers.
// Host code only (no kernels), compiled by the C++ compiler.
// Not here: kernels (kernels/cuda/*.cu), cuBLAS handles (kernels/cuda/matmul.cu), opening the
// cuBLAS and cuDNN libraries (kernels/cuda/dynload.cpp).
#include "engine/backend.h"

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "engine/op.h"
#include "kernels/cuda/dynload.h"
#include "kernels/cuda/register.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

// ---- errors
namespace detail {

void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  BRISK_FAIL("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (", int(err),
             "): ", cudaGetErrorString(err), " [", file, ":", line, "]");
}

void cublas_fail(int status, const char* call, const char* file, int line) {
  // cuBLAS and cuBLASLt share the status codes, and a status came from one of them, so
  // cuBLASLt (which libcublas itself needs) is loadable; should it not be, the code stands alone.
  const char* name = "unknown status";
  const char* text = "";
  try {
    const CublasLtApi& lt = cublas_lt();
    name = lt.cublasLtGetStatusName(static_cast<cublasStatus_t>(status));
    text = lt.cublasLtGetStatusString(static_cast<cublasStatus_t>(status));
  } catch (const Error&) {
  }
  BRISK_FAIL("cuBLAS error: ", call, " failed with ", name, " (", status, "): ", text, " [", file, ":", line, "]");
}

}  // namespace detail

// ---- devices
namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaStream_t default_stream = nullptr;
  int sm_count = 0;
  DeviceErrorSlot* slot_host = nullptr;  // mapped pinned memory, see Note [Device errors]
  DeviceErrorSlot* slot_device = nullptr;
  CachingAllocator* allocator = nullptr;  // leaked on purpose: tensors may outlive statics
};

DeviceState g_devices[kMaxDevices];
std::atomic<bool> g_allow_tf32{false};
thread_local cudaStream_t t_current[kMaxDevices] = {};

void check_device(int device) {
  int n = device_count();
  BRISK_CHECK(device >= 0 && device < n, "cuda:", device, ": no such device (", n, " CUDA device", n == 1 ? "" : "s",
              " present)");
}

void* device_malloc(size_t bytes, void* ctx) {
  DeviceGuard guard(int(reinterpret_cast<intptr_t>(ctx)));
  void* p = nullptr;
  // Relaxed while a graph is being captured: cudaMalloc is not recorded, and the block it gives
  // is what the graph addresses (Note [Graph memory pool] in kernels/cuda/graph.cpp).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t err = cudaMalloc(&p, bytes);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;  // the caching allocator empties its cache and retries once
  }
  BRISK_CUDA_CHECK(err);
  return p;
}

void device_free(void* p, size_t, void* ctx) {
  check_not_capturing(int(reinterpret_cast<intptr_t>(ctx)), "freeing device memory (out of memory?)");
  DeviceGuard guard(int(reinterpret_cast<intptr_t>(ctx)));
  cudaError_t err = cudaFree(p);
  if (err == cudaErrorCudartUnloading) return;  // process exit: the driver frees everything
  BRISK_CUDA_CHECK(err);
}

void init_device(int device, DeviceState& s) {
  DeviceGuard guard(device);
  // Default flags: the stream stays ordered with the legacy default stream, so raw CUDA code
  // that uses stream 0 interoperates without surprises.
  BRISK_CUDA_CHECK(cudaStreamCreateWithFlags(&s.default_stream, cudaStreamDefault));
  BRISK_CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, device));
  void* slot = nullptr;
  BRISK_CUDA_CHECK(cudaHostAlloc(&slot, sizeof(DeviceErrorSlot), cudaHostAllocMapped | cudaHostAllocPortable));
  s.slot_host = static_cast<DeviceErrorSlot*>(slot);
  *s.slot_host = DeviceErrorSlot{0, 0, 0, 0};
  void* dev_ptr = nullptr;
  BRISK_CUDA_CHECK(cudaHostGetDevicePointer(&dev_ptr, slot, 0));
  s.slot_device = static_cast<DeviceErrorSlot*>(dev_ptr);
  s.allocator = new CachingAllocator(RawMemory{device_malloc, device_free, reinterpret_cast<void*>(intptr_t(device))});
}

DeviceState& state(int device) {
  check_device(device);
  DeviceState& s = g_devices[device];
  std::call_once(s.once, [&] { init_device(device, s); });
  return s;
}

}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // no driver (error 35) or no GPU: zero devices, not an error
      return 0;
    }
    return std::min(n, kMaxDevices);
  }();
  return count;
}

int sm_count(int device) { return state(device).sm_count; }

Allocator& device_allocator(int device) { return *state(device).allocator; }

cudaStream_t stream_handle(int device) {
  cudaStream_t s = device >= 0 && device < kMaxDevices ? t_current[device] : nullptr;
  return s ? s : state(device).default_stream;
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

DeviceErrorSlot* device_error_slot(int device) { return state(device).slot_device; }

void check_device_errors(int device) {
  volatile DeviceErrorSlot* slot = state(device).slot_host;
  if (!slot->flag) return;
  int op = slot->op;
  int64_t index = slot->index, bound = slot->bound;
  slot->flag = 0;
  const char* name = op >= 0 && op < kNumOps ? op_name(OpId(op)) : "cuda kernel";
  BRISK_FAIL(name, ": index ", index, " is out of range for a dimension of size ", bound, " (found on cuda:", device,
             " at the next synchronization; see Note [Device errors] in kernels/cuda/runtime.h)");
}

void synchronize(int device) {
  if (device < 0) {
    for (int d = 0; d < device_count(); ++d) synchronize(d);
    return;
  }
  check_not_capturing(device, "synchronize");
  DeviceGuard guard(device);
  BRISK_CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors(device);
}

// ---- DeviceGuard, streams, events
DeviceGuard::DeviceGuard(int device) {
  check_device(device);
  int current = 0;
  BRISK_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    BRISK_CUDA_CHECK(cudaSetDevice(device));
    prev_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);  // destructors do not throw
}

Stream Stream::create(int device, bool high_priority) {
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  BRISK_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  BRISK_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? greatest : least));
  return Stream(s, device);
}

Stream Stream::default_stream(int device) { return Stream(state(device).default_stream, device); }

void Stream::synchronize() const {
  BRISK_CHECK(handle_, "Stream::synchronize: null stream");
  check_not_capturing(device_, "Stream::synchronize");
  BRISK_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
  check_device_errors(device_);
}

bool Stream::query() const {
  BRISK_CHECK(handle_, "Stream::query: null stream");
  cudaError_t err = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  BRISK_CUDA_CHECK(err);
  return true;
}

Stream current_stream(int device) { return Stream(stream_handle(device), device); }

void set_current_stream(Stream stream) {
  BRISK_CHECK(stream.handle(), "set_current_stream: null stream");
  check_device(stream.device());
  t_current[stream.device()] = static_cast<cudaStream_t>(stream.handle());
}

StreamGuard::StreamGuard(Stream stream) : prev_(current_stream(stream.device())) { set_current_stream(stream); }
StreamGuard::~StreamGuard() { t_current[prev_.device()] = static_cast<cudaStream_t>(prev_.handle()); }

Event::Event(bool timing) : timing_(timing) {}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Event::Event(Event&& other) noexcept : event_(other.event_), device_(other.device_), timing_(other.timing_) {
  other.event_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = other.event_;
    device_ = other.device_;
    timing_ = other.timing_;
    other.event_ = nullptr;
  }
  return *this;
}

// An event belongs to the device it was made on; recording on another device's stream makes a
// new one there.
void Event::ensure(int device) {
  if (event_ && device_ == device) return;
  if (event_) BRISK_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
  event_ = nullptr;
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  BRISK_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
  event_ = e;
  device_ = device;
}

void Event::record(Stream stream) {
  BRISK_CHECK(stream.handle(), "Event::record: null stream");
  ensure(stream.device());
  DeviceGuard guard(stream.device());
  BRISK_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream.handle())));
}

void Event::record() {
  int device = 0;
  BRISK_CUDA_CHECK(cudaGetDevice(&device));
  record(current_stream(device));
}

void Event::synchronize() const {
  if (!event_) return;  // never recorded: nothing to wait for
  check_not_capturing(device_, "Event::synchronize");
  BRISK_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  check_device_errors(device_);
}

bool Event::query() const {
  if (!event_) return true;
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  BRISK_CUDA_CHECK(err);
  return true;
}

void Event::block(Stream stream) const {
  if (!event_) return;
  BRISK_CHECK(stream.handle(), "Event::block: null stream");
  DeviceGuard guard(stream.device());
  BRISK_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(event_), 0));
}

float Event::elapsed_ms(const Event& end) const {
  BRISK_CHECK(timing_ && end.timing_, "Event::elapsed_ms: both events must be made with timing = true");
  BRISK_CHECK(event_ && end.event_, "Event::elapsed_ms: both events must be recorded");
  float ms = 0;
  BRISK_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_), static_cast<cudaEvent_t>(end.event_)));
  return ms;
}

// ---- pinned host memory
namespace {

void* pinned_malloc(size_t bytes, void*) {
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  BRISK_CUDA_CHECK(err);
  return p;
}

void pinned_free(void* p, size_t, void*) {
  cudaError_t err = cudaFreeHost(p);
  if (err == cudaErrorCudartUnloading) return;
  BRISK_CUDA_CHECK(err);
}

// Note [Pinned memory reuse]
// A non-blocking copy reads (or writes) pinned host memory after the call returns. If the
// tensor is dropped meanwhile, its block must not be handed out again until the copy is done.
// Each asynchronous copy records an event on its stream against the block it touches;
// deallocate() parks a block whose events are still pending, and later calls return it to
// the cache once they have completed (as PyTorch's CachingHostAllocator does).
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, uint64_t) override {
    collect();
    void* p = cache_.allocate(bytes);
    if (p) {
      std::lock_guard<std::mutex> lock(mu_);
      live_[reinterpret_cast<uintptr_t>(p)] = bytes;
    }
    return p;
  }

  void deallocate(void* p, size_t bytes, uint64_t) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(reinterpret_cast<uintptr_t>(p));
      auto it = uses_.find(p);
      if (it != uses_.end()) {
        parked_.push_back(Parked{p, bytes, std::move(it->second)});
        uses_.erase(it);
        return;
      }
    }
    cache_.deallocate(p, bytes);
  }

  AllocatorStats stats() const override { return cache_.stats(); }
  void reset_peak() override { cache_.reset_peak(); }
  void empty_cache() override {
    collect();
    cache_.empty_cache();
  }

  // Records that an asynchronous copy on `stream` uses the block holding `ptr`. False when
  // `ptr` is not memory of this allocator.
  bool record_use(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto addr = reinterpret_cast<uintptr_t>(ptr);
    auto it = live_.upper_bound(addr);
    if (it == live_.begin()) return false;
    --it;
    if (addr >= it->first + it->second) return false;
    std::vector<cudaEvent_t>& events = uses_[reinterpret_cast<void*>(it->first)];
    drop_completed(events);
    cudaEvent_t e = nullptr;
    BRISK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    BRISK_CUDA_CHECK(cudaEventRecord(e, stream));
    events.push_back(e);
    return true;
  }

 private:
  struct Parked {
    void* ptr;
    size_t bytes;
    std::vector<cudaEvent_t> events;
  };

  static void drop_completed(std::vector<cudaEvent_t>& events) {
    std::erase_if(events, [](cudaEvent_t e) {
      cudaError_t err = cudaEventQuery(e);
      if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
      (void)cudaEventDestroy(e);  // done (or failed: the failure surfaces at the next sync)
      return true;
    });
  }

  // Returns parked blocks whose copies have finished to the cache.
  void collect() {
    std::vector<Parked> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = parked_.begin(); it != parked_.end();) {
        drop_completed(it->events);
        if (it->events.empty()) {
          ready.push_back(*it);
          it = parked_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const Parked& b : ready) cache_.deallocate(b.ptr, b.bytes);
  }

  CachingAllocator cache_{RawMemory{pinned_malloc, pinned_free, nullptr}};
  std::mutex mu_;
  std::map<uintptr_t, size_t> live_;  // blocks handed out: address -> requested bytes
  std::map<void*, std::vector<cudaEvent_t>> uses_;
  std::vector<Parked> parked_;
};

PinnedAllocator& pinned() {
  static PinnedAllocator* alloc = new PinnedAllocator();  // leaked: see cpu_allocator()
  return *alloc;
}

// ---- the Backend
class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return cuda::device_count(); }
  Allocator& allocator(int index) override { return *state(index).allocator; }
  uint64_t current_stream(int index) override { return reinterpret_cast<uint64_t>(stream_handle(index)); }
  Allocator* pinned_allocator() override { return &pinned(); }
  bool is_capturing(int index) override { return cuda::is_capturing(index); }

  // Copies are queued on the current stream. Host<->device copies wait for completion unless
  // non_blocking and the host side is pinned (see Note [Pinned memory reuse]); copies within
  // one GPU stay asynchronous (stream order keeps them correct).
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            bool non_blocking) override {
    if (bytes == 0) return;
    if (dst_device.is_cuda() && src_device.is_cuda()) {
      if (dst_device.index == src_device.index) {
        DeviceGuard guard(dst_device.index);
        BRISK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_handle(dst_device.index)));
        return;
      }
      // Between GPUs: wait for the destination's pending work, copy, wait (simple and safe).
      check_not_capturing(dst_device.index, "a copy between GPUs");
      check_not_capturing(src_device.index, "a copy between GPUs");
      {
        DeviceGuard guard(dst_device.index);
        BRISK_CUDA_CHECK(cudaStreamSynchronize(stream_handle(dst_device.index)));
      }
      DeviceGuard guard(src_device.index);
      cudaStream_t s = stream_handle(src_device.index);
      BRISK_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, s));
      BRISK_CUDA_CHECK(cudaStreamSynchronize(s));
      check_device_errors(src_device.index);
      return;
    }
    const bool to_device = dst_device.is_cuda();
    const int device = to_device ? dst_device.index : src_device.index;
    const void* host = to_device ? src : dst;
    check_not_capturing(device, to_device ? "a copy from the CPU" : "a copy to the CPU");
    DeviceGuard guard(device);
    cudaStream_t s = stream_handle(device);
    BRISK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
    if (non_blocking && pinned().record_use(host, s)) return;
    BRISK_CUDA_CHECK(cudaStreamSynchronize(s));
    check_device_errors(device);
  }

  void memset(void* dst, int value, size_t bytes, Device device) override {
    if (bytes == 0) return;
    DeviceGuard guard(device.index);
    BRISK_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_handle(device.index)));
  }

  void synchronize(int index) override { cuda::synchronize(index); }
};

}  // namespace

// ---- memory statistics
AllocatorStats memory_stats(int device) { return state(device).allocator->stats(); }
void reset_peak_memory_stats(int device) { state(device).allocator->reset_peak(); }
void empty_cache(int device) {
  synchronize(device);  // blocks in flight on a stream are not handed back to the driver early
  state(device).allocator->empty_cache();
}
AllocatorStats pinned_memory_stats() { return pinned().stats(); }

void register_backend() {
  static CudaBackend backend;
  brisk::register_backend(&backend);
}

}  // namespace brisk::kernels::cuda
