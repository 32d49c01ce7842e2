// kernels/cuda/graph.cpp: CUDA graphs (cuda::Graph in kernels/cuda/cuda.h): stream capture on a
// stream of the graph's own, the memory the captured work uses kept out of everything else's
// way, and replay ordered with the current stream. Host code only.
// Not here: the checks that refuse host copies and synchronizations while capturing
// (kernels/cuda/backend.cpp calls check_not_capturing), Adam's refusal (optim/adam.cpp).
#include <cuda_runtime.h>

#include "engine/error.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

// Note [CUDA graphs]
// Capture records what brisk queues on a stream between cudaStreamBeginCapture and
// cudaStreamEndCapture; nothing runs then. Each Graph has a stream of its own, made current for
// the warm-up runs and the capture, so every op queues there and every allocation is keyed to it
// (the caching allocator keys its free lists by stream).
// - Capture mode ThreadLocal: only the capturing thread is checked for calls that cannot be
//   recorded; other threads (data-loader workers, say) carry on.
// - What cannot be recorded is refused before CUDA sees it, with a brisk::Error that says what
//   to move out of the captured code: host<->device and cross-GPU copies (item(),
//   to_vector(), to(cpu), a non_blocking copy), synchronizations, freeing device memory. The
//   thread-local flag t_capturing makes that check free outside capture. A failure abandons the
//   capture (the stream is usable again) and the exception propagates.
// - Scalars are recorded by value: a learning rate, a step count, a random seed and offset. A
//   replay uses the values of the captured run. SGD at a fixed learning rate replays right;
//   Adam's bias corrections change every step, so Adam refuses to be captured (a capturable
//   Adam keeps its step count on the device: the missing piece). Random ops repeat their draws.
//
// Note [Graph memory pool]
// The captured kernels address the blocks they were given during capture, so those blocks must
// not move or go to other work while the graph lives.
// - Blocks allocated on the graph's stream are only ever reused by requests on that stream, and
//   only the graph's own warm-up and capture queue there: that is its private pool. Freed
//   blocks go back to the pool and are reused within the capture in stream order, which the
//   graph preserves.
// - Allocator::retain_stream keeps the pool out of empty_cache() until reset(); cudaFree during
//   capture is refused (it would synchronize the device), so running out of memory while
//   capturing is an error, not a retry.
// - cudaMalloc during capture is done in relaxed mode (backend.cpp, device_malloc): it is not
//   recorded, and the block it returns is what the graph addresses on every replay.
// - Tensors made before capture and used by the captured code (parameters, the static inputs,
//   optimizer state) must stay alive while the graph does; the caller owns them.

namespace {
constexpr int kMaxGraphDevices = 64;
thread_local bool t_capturing[kMaxGraphDevices] = {};
}  // namespace

bool is_capturing(int device) { return device >= 0 && device < kMaxGraphDevices && t_capturing[device]; }

void check_not_capturing(int device, const char* what) {
  if (!is_capturing(device)) return;
  BRISK_FAIL(what, " on cuda:", device,
             " while a CUDA graph is being captured: it cannot be recorded (host copies such as item(), "
             "to_vector() and to(cpu), synchronizations and freeing device memory must happen outside the "
             "captured code; see Note [CUDA graphs] in kernels/cuda/graph.cpp)");
}

Graph::Graph(int device) : device_(device), stream_(Stream::create(device)) {}

Graph::~Graph() {
  try {
    reset();
  } catch (const Error&) {  // a destructor must not throw; the driver frees the rest at exit
  }
}

void Graph::capture(const std::function<void()>& fn, int warmup) {
  BRISK_CHECK(bool(fn), "Graph::capture: no function");
  BRISK_CHECK(warmup >= 0, "Graph::capture: warmup must be >= 0, got ", warmup);
  BRISK_CHECK(!capturing_, "Graph::capture: already capturing");
  reset();
  retain();
  if (warmup > 0) {
    const Stream cur = current_stream(device_);
    before_.record(cur);
    before_.block(stream_);
    {
      StreamGuard guard(stream_);
      for (int i = 0; i < warmup; ++i) fn();
    }
    after_.record(stream_);
    after_.block(cur);
  }
  capture_begin();
  try {
    fn();
  } catch (...) {
    abandon();
    throw;
  }
  capture_end();
}

// The warm-up runs already allocate from the graph's stream, so the pool is kept from then on.
void Graph::retain() {
  if (retained_) return;
  device_allocator(device_).retain_stream(stream_.id());
  retained_ = true;
}

void Graph::capture_begin() {
  BRISK_CHECK(!capturing_, "Graph::capture_begin: already capturing");
  BRISK_CHECK(!is_capturing(device_), "Graph::capture_begin: another graph is capturing on cuda:", device_,
              " in this thread");
  if (exec_ || graph_) reset();
  retain();
  DeviceGuard guard(device_);
  prev_ = current_stream(device_);
  before_.record(prev_);  // the captured work follows what is already queued
  before_.block(stream_);
  set_current_stream(stream_);
  const cudaError_t err =
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream_.handle()), cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    set_current_stream(prev_);
    BRISK_CUDA_CHECK(err);
  }
  capturing_ = true;
  t_capturing[device_] = true;
}

void Graph::capture_end() {
  BRISK_CHECK(capturing_, "Graph::capture_end: capture_begin was not called");
  DeviceGuard guard(device_);
  capturing_ = false;
  t_capturing[device_] = false;
  set_current_stream(prev_);
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &graph);
  if (err != cudaSuccess || !graph) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    BRISK_FAIL("Graph::capture_end: the capture on cuda:", device_, " failed with ", cudaGetErrorName(err), " (",
               cudaGetErrorString(err),
               "): a call that cannot be recorded ran while capturing, or work from another stream joined it");
  }
  graph_ = graph;
  size_t nodes = 0;
  BRISK_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  nodes_ = nodes;
  cudaGraphExec_t exec = nullptr;
  BRISK_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void Graph::abandon() {
  if (!capturing_) return;
  DeviceGuard guard(device_);
  capturing_ = false;
  t_capturing[device_] = false;
  set_current_stream(prev_);
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &graph);
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void Graph::replay() {
  BRISK_CHECK(exec_, "Graph::replay: nothing captured on cuda:", device_, " (call capture first)");
  BRISK_CHECK(!capturing_ && !is_capturing(device_), "Graph::replay: cannot replay while capturing");
  DeviceGuard guard(device_);
  const Stream cur = current_stream(device_);
  before_.record(cur);
  before_.block(stream_);
  BRISK_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_.handle())));
  after_.record(stream_);
  after_.block(cur);
}

void Graph::reset() {
  abandon();
  DeviceGuard guard(device_);
  if (exec_) BRISK_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  exec_ = nullptr;
  if (graph_) BRISK_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
  graph_ = nullptr;
  nodes_ = 0;
  if (retained_) {
    // A replay may still be running: its blocks go back to the pool now, but nothing else takes
    // them before empty_cache(), whose cudaFree waits for the device.
    device_allocator(device_).release_stream(stream_.id());
    retained_ = false;
  }
}

}  // namespace brisk::kernels::cuda
