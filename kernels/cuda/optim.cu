// kernels/cuda/optim.cu: the CUDA kernels of the fused optimizer steps (fused_sgd, fused_adam,
// fused_adamw, fused_rmsprop, fused_adagrad; Note [Fused steps are ops] in engine/ops/optim.cpp):
// one call's parameters of one dtype (F32 or F64) updated by one kernel launch (a few for very
// large calls), as apex's and PyTorch's multi_tensor_apply do: the tensors' addresses and a
// table of chunks travel in the kernel's arguments, and each block updates one chunk of one
// tensor.
// Not here: the checks of the lists (engine/ops/optim.cpp), the references these kernels must
// equal (optim/*.cpp), the choice of which parameters take the fused path (optim/), F16/BF16
// (they take the reference step).
#include <cstdint>
#include <vector>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cuda/register.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

namespace {

// Most state buffers any optimizer keeps per parameter (Adam with amsgrad, RMSprop centered
// with momentum: 3).
constexpr int kMaxFusedBuffers = 3;

// One parameter of a fused step: raw addresses on the call's device, all of `numel` dense
// elements of the call's dtype, and the two scalars the update rule takes.
struct FusedTensor {
  int64_t numel = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* buffers[kMaxFusedBuffers] = {};
  double scalars[2] = {};
};

// One op call's parameters (the lists were checked by the op's inference: dense, one dtype and
// device, the parameters' sizes); role r's tensor of parameter i is in[r * n + i]. scalars(i,
// s) fills parameter i's two scalars.
class FusedGroup {
 public:
  template <class Scalars>
  FusedGroup(const char* op, std::span<const Tensor> in, int num_buffers, Scalars&& scalars)
      : op_(op), num_buffers_(num_buffers) {
    const size_t roles = size_t(2 + num_buffers);
    const size_t n = in.size() / roles;
    if (n == 0) return;
    dtype_ = in[0].dtype();
    device_ = in[0].device();
    tensors_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      FusedTensor& t = tensors_[i];
      t.numel = in[i].numel();
      t.param = in[i].data_ptr();
      t.grad = in[n + i].data_ptr();
      for (int k = 0; k < num_buffers; ++k) t.buffers[k] = in[(2 + size_t(k)) * n + i].data_ptr();
      scalars(i, t.scalars);
    }
  }
  const char* op() const { return op_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int num_buffers() const { return num_buffers_; }
  const std::vector<FusedTensor>& tensors() const { return tensors_; }
  bool empty() const { return tensors_.empty(); }

 private:
  const char* op_;
  int num_buffers_;
  DType dtype_ = DType::F32;
  Device device_{};
  std::vector<FusedTensor> tensors_;
};

// Note [Fused CUDA steps round like the reference]
// The CUDA reference step is a chain of elementwise kernels, each rounding its result once;
// nvcc, left alone, would contract a * b + c in one kernel into a fused multiply-add (one
// rounding), so the fused step would differ in the last bit. Every operation below is
// therefore an explicit round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn,
// __fsqrt_rn and the __d*_rn of double), which nvcc never contracts, in the reference's order,
// with scalars converted to the tensor's dtype on the host as scalar tensors are. The
// reference's division and square root are IEEE round-to-nearest as well (nvcc's defaults
// -prec-div=true, -prec-sqrt=true), so the two steps agree bit for bit (the tests allow 1e-7
// relative). A build with --use_fast_math would change the reference, not these kernels.
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

// maximum(a, b) as the elementwise op computes it (kernels/functors.h): NaN propagates.
template <class T>
__device__ __forceinline__ T maximum(T a, T b) {
  if (a != a || b != b) return a + b;
  return a > b ? a : b;
}

// ---- multi-tensor apply
// Elements per chunk (one block each), threads per block and chunks per launch, as PyTorch's
// multi_tensor_apply. A launch covers up to kMaxChunks * kChunk = 21M elements.
constexpr int64_t kChunk = 1 << 16;
constexpr int kThreads = 512;
constexpr int kMaxChunks = 320;
constexpr int kMaxDepth = 2 + kMaxFusedBuffers;  // param, grad, state buffers
// Kernel arguments are limited to 4 KiB on every CUDA version brisk supports; the table keeps
// below this, leaving room for an update rule's scalars.
constexpr size_t kTableBytes = 3840;

// One launch's work: Depth address lists (param, grad, buffers...) of up to kMaxTensors
// tensors, and for each block (chunk) the tensor it works on and which of its chunks.
template <int Depth>
struct ChunkTable {
  static constexpr int kMaxTensors = int((kTableBytes - kMaxChunks * (sizeof(int32_t) + sizeof(uint8_t))) /
                                         (Depth * sizeof(void*) + sizeof(int64_t) + 2 * sizeof(double)));
  void* ptr[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  double scalars[2][kMaxTensors];
  int32_t chunk_index[kMaxChunks];
  uint8_t chunk_tensor[kMaxChunks];
};

// Block c: elements [chunk_index * kChunk, + kChunk) of tensor chunk_tensor[c]. The update
// rule `op` gets the addresses of that chunk (ptr[0]: param, ptr[1]: grad, then the buffers;
// null past Depth), its length and the tensor's two scalars in the tensor's dtype.
template <class T, int Depth, class Op>
__global__ void __launch_bounds__(kThreads) multi_tensor_kernel(ChunkTable<Depth> table, Op op) {
  const int t = table.chunk_tensor[blockIdx.x];
  const int64_t begin = int64_t(table.chunk_index[blockIdx.x]) * kChunk;
  const int n = int(min(kChunk, table.numel[t] - begin));
  T* ptr[kMaxDepth] = {};
#pragma unroll
  for (int k = 0; k < Depth; ++k) ptr[k] = static_cast<T*>(table.ptr[k][t]) + begin;
  op(ptr, n, T(table.scalars[0][t]), T(table.scalars[1][t]));
}

// Runs `op` over every element of the group's tensors: one launch per kMaxChunks chunks or
// kMaxTensors tensors, on the device's current stream.
template <class T, int Depth, class Op>
void multi_tensor_apply(const FusedGroup& group, const Op& op) {
  using Table = ChunkTable<Depth>;
  static_assert(Table::kMaxTensors >= 1 && Table::kMaxTensors <= 256, "chunk_tensor is a uint8_t");
  static_assert(sizeof(Table) <= kTableBytes && sizeof(Table) + sizeof(Op) <= 4096, "kernel arguments over 4 KiB");
  const int device = group.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  Table table{};
  int tensors = 0;
  int chunks = 0;
  auto launch = [&] {
    // The arguments are copied at launch: the table may be refilled right after.
    multi_tensor_kernel<T, Depth, Op><<<chunks, kThreads, 0, stream>>>(table, op);
    BRISK_CUDA_CHECK_LAUNCH();
    chunks = 0;
  };
  auto place = [&](int slot, const FusedTensor& t) {
    table.ptr[0][slot] = t.param;
    table.ptr[1][slot] = const_cast<void*>(t.grad);  // read only by every update rule
    for (int k = 2; k < Depth; ++k) table.ptr[k][slot] = t.buffers[k - 2];
    table.numel[slot] = t.numel;
    table.scalars[0][slot] = t.scalars[0];
    table.scalars[1][slot] = t.scalars[1];
  };
  for (const FusedTensor& t : group.tensors()) {
    if (t.numel == 0) continue;
    if (tensors == Table::kMaxTensors) {  // every listed tensor has chunks queued
      launch();
      tensors = 0;
    }
    place(tensors, t);
    const int64_t num_chunks = (t.numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < num_chunks; ++c) {
      if (chunks == kMaxChunks) {
        launch();
        if (tensors != 0) {  // the rest of this tensor's chunks go on in a table of its own
          place(0, t);
          tensors = 0;
        }
      }
      table.chunk_tensor[chunks] = uint8_t(tensors);
      table.chunk_index[chunks] = int32_t(c);
      ++chunks;
    }
    ++tensors;
  }
  if (chunks > 0) launch();
}

// Instantiates the kernel only for the buffer counts the update rule can have
// (Op::kMinBuffers..Op::kMaxBuffers; the op's inference checked the lists against the options).
template <class T, class Op>
void apply_by_depth(const FusedGroup& group, const Op& op) {
  const int buffers = group.num_buffers();
  BRISK_CHECK(buffers >= Op::kMinBuffers && buffers <= Op::kMaxBuffers, group.op(), ": fused CUDA step: ", buffers,
              " state buffers per parameter (", Op::kMinBuffers, " to ", Op::kMaxBuffers, " expected)");
  if constexpr (Op::kMinBuffers <= 0) {
    if (buffers == 0) return multi_tensor_apply<T, 2>(group, op);
  }
  if constexpr (Op::kMinBuffers <= 1 && Op::kMaxBuffers >= 1) {
    if (buffers == 1) return multi_tensor_apply<T, 3>(group, op);
  }
  if constexpr (Op::kMinBuffers <= 2 && Op::kMaxBuffers >= 2) {
    if (buffers == 2) return multi_tensor_apply<T, 4>(group, op);
  }
  if constexpr (Op::kMaxBuffers >= 3) {
    if (buffers == 3) return multi_tensor_apply<T, 5>(group, op);
  }
}

// Calls f(T{}) for the group's dtype (F32 or F64; FusedGroup admits no other).
template <class F>
void dispatch_fused(const FusedGroup& group, F&& f) {
  switch (group.dtype()) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    default: BRISK_FAIL(group.op(), ": fused CUDA step: no kernel for dtype ", group.dtype());
  }
}

// ---- the update rules: optim/*.cpp's references, element by element, in the same order.
// ptr: param, grad, buffers (engine/op_params.h gives each optimizer's order).

// d = grad (+ wd p);  buf = fresh ? d : momentum buf + (1 - dampening) d;
// d = nesterov ? d + momentum buf : buf;  p += -lr d
template <class T>
struct SgdOp {
  static constexpr int kMinBuffers = 0;  // momentum_buffer when momentum != 0
  static constexpr int kMaxBuffers = 1;
  T wd, momentum, one_minus_dampening, neg_lr;
  bool has_wd, has_momentum, nesterov, maximize;

  static SgdOp make(const SgdParams& h) {
    return {T(h.weight_decay),   T(h.momentum),   T(1 - h.dampening), T(-h.lr),
            h.weight_decay != 0, h.momentum != 0, h.nesterov,         h.maximize};
  }

  __device__ void operator()(T* const* ptr, int n, T fresh, T) const {
    T* __restrict__ p = ptr[0];
    const T* __restrict__ g = ptr[1];
    T* __restrict__ buf = ptr[2];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      T d = maximize ? -g[i] : g[i];
      if (has_wd) d = add_rn(d, mul_rn(p[i], wd));
      if (has_momentum) {
        const T b = fresh != T(0) ? d : add_rn(mul_rn(buf[i], momentum), mul_rn(d, one_minus_dampening));
        buf[i] = b;
        d = nesterov ? add_rn(d, mul_rn(b, momentum)) : b;
      }
      p[i] = add_rn(p[i], mul_rn(d, neg_lr));
    }
  }
};

// AdamW: p *= 1 - lr wd; Adam: g += wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
// (amsgrad: vmax = max(vmax, v));  p += m / (sqrt(v) / sqrt(1 - b2^t) + eps) * -step_size
template <class T>
struct AdamOp {
  static constexpr int kMinBuffers = 2;  // exp_avg, exp_avg_sq (+ max_exp_avg_sq)
  static constexpr int kMaxBuffers = 3;
  T wd, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  bool l2, decoupled, amsgrad, maximize;

  static AdamOp make(const AdamParams& h) {
    return {T(h.weight_decay),
            T(1 - h.lr * h.weight_decay),
            T(h.beta1),
            T(1 - h.beta1),
            T(h.beta2),
            T(1 - h.beta2),
            T(h.eps),
            h.weight_decay != 0 && !h.decoupled,
            h.weight_decay != 0 && h.decoupled,
            h.amsgrad,
            h.maximize};
  }

  __device__ void operator()(T* const* ptr, int n, T step_size, T bias_correction2_sqrt) const {
    T* __restrict__ p = ptr[0];
    const T* __restrict__ g = ptr[1];
    T* __restrict__ m = ptr[2];
    T* __restrict__ v = ptr[3];
    T* __restrict__ vmax = ptr[4];
    const T neg_step_size = -step_size;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      T param = p[i];
      T grad = maximize ? -g[i] : g[i];
      if (decoupled) param = mul_rn(param, decay);
      if (l2) grad = add_rn(grad, mul_rn(param, wd));
      const T exp_avg = add_rn(mul_rn(m[i], beta1), mul_rn(grad, one_minus_beta1));
      const T exp_avg_sq = add_rn(mul_rn(v[i], beta2), mul_rn(mul_rn(grad, grad), one_minus_beta2));
      m[i] = exp_avg;
      v[i] = exp_avg_sq;
      T second_moment = exp_avg_sq;
      if (amsgrad) {
        second_moment = maximum(vmax[i], exp_avg_sq);
        vmax[i] = second_moment;
      }
      const T denom = add_rn(div_rn(sqrt_rn(second_moment), bias_correction2_sqrt), eps);
      p[i] = add_rn(param, mul_rn(div_rn(exp_avg, denom), neg_step_size));
    }
  }
};

// g += wd p;  sq = alpha sq + (1 - alpha) g g;  (centered: ga = alpha ga + (1 - alpha) g)
// avg = sqrt(sq (- ga ga)) + eps;  momentum: buf = momentum buf + g / avg, p += -lr buf;
// else p += g / avg * -lr
template <class T>
struct RmspropOp {
  static constexpr int kMinBuffers = 1;  // square_avg (+ grad_avg) (+ momentum_buffer)
  static constexpr int kMaxBuffers = 3;
  T wd, alpha, one_minus_alpha, eps, momentum, neg_lr;
  bool has_wd, centered, has_momentum, maximize;

  static RmspropOp make(const RmspropParams& h) {
    return {T(h.weight_decay), T(h.alpha),          T(1 - h.alpha), T(h.eps),       T(h.momentum),
            T(-h.lr),          h.weight_decay != 0, h.centered,     h.momentum > 0, h.maximize};
  }

  __device__ void operator()(T* const* ptr, int n, T, T) const {
    T* __restrict__ p = ptr[0];
    const T* __restrict__ g = ptr[1];
    T* __restrict__ square_avg = ptr[2];
    T* __restrict__ grad_avg = centered ? ptr[3] : nullptr;
    T* __restrict__ buf = centered ? ptr[4] : ptr[3];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      T grad = maximize ? -g[i] : g[i];
      if (has_wd) grad = add_rn(grad, mul_rn(p[i], wd));
      const T sq = add_rn(mul_rn(square_avg[i], alpha), mul_rn(mul_rn(grad, grad), one_minus_alpha));
      square_avg[i] = sq;
      T avg;
      if (centered) {
        const T ga = add_rn(mul_rn(grad_avg[i], alpha), mul_rn(grad, one_minus_alpha));
        grad_avg[i] = ga;
        avg = add_rn(sqrt_rn(sub_rn(sq, mul_rn(ga, ga))), eps);
      } else {
        avg = add_rn(sqrt_rn(sq), eps);
      }
      if (has_momentum) {
        const T b = add_rn(mul_rn(buf[i], momentum), div_rn(grad, avg));
        buf[i] = b;
        p[i] = add_rn(p[i], mul_rn(b, neg_lr));
      } else {
        p[i] = add_rn(p[i], mul_rn(div_rn(grad, avg), neg_lr));
      }
    }
  }
};

// g += wd p;  sum += g g;  p += g / (sqrt(sum) + eps) * -clr
template <class T>
struct AdagradOp {
  static constexpr int kMinBuffers = 1;  // sum
  static constexpr int kMaxBuffers = 1;
  T wd, eps;
  bool has_wd, maximize;

  static AdagradOp make(const AdagradParams& h) {
    return {T(h.weight_decay), T(h.eps), h.weight_decay != 0, h.maximize};
  }

  __device__ void operator()(T* const* ptr, int n, T clr, T) const {
    T* __restrict__ p = ptr[0];
    const T* __restrict__ g = ptr[1];
    T* __restrict__ sum = ptr[2];
    const T neg_clr = -clr;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      T grad = maximize ? -g[i] : g[i];
      if (has_wd) grad = add_rn(grad, mul_rn(p[i], wd));
      const T s = add_rn(sum[i], mul_rn(grad, grad));
      sum[i] = s;
      const T denom = add_rn(sqrt_rn(s), eps);
      p[i] = add_rn(p[i], mul_rn(div_rn(grad, denom), neg_clr));
    }
  }
};

// ---- the ops' kernels: per-parameter scalars are the call's (one step count per call)
template <template <class> class Op, class Params>
void run_step(const FusedGroup& group, const Params& h) {
  if (group.empty()) return;
  dispatch_fused(group, [&](auto tag) {
    using T = decltype(tag);
    apply_by_depth<T>(group, Op<T>::make(h));
  });
}

// SGD's scalars[0]: 1 where the momentum buffer is fresh.
void sgd_step(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const SgdParams h = SgdParams::from(attrs);
  run_step<SgdOp>(FusedGroup("fused_sgd", in, h.num_buffers(),
                             [&](size_t i, double* s) { s[0] = h.num_buffers() && attrs.per_param[i] ? 1 : 0; }),
                  h);
}

// Adam's: step_size = lr / (1 - beta1^t) and sqrt(1 - beta2^t) of the parameter's step count.
void adam_step(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const AdamParams h = AdamParams::from(attrs);
  run_step<AdamOp>(FusedGroup(h.decoupled ? "fused_adamw" : "fused_adam", in, h.num_buffers(),
                              [&](size_t i, double* s) {
                                s[0] = h.step_size(attrs.per_param[i]);
                                s[1] = h.bias_correction2_sqrt(attrs.per_param[i]);
                              }),
                   h);
}

void rmsprop_step(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const RmspropParams h = RmspropParams::from(attrs);
  run_step<RmspropOp>(FusedGroup("fused_rmsprop", in, h.num_buffers(), [](size_t, double*) {}), h);
}

// Adagrad's scalars[0]: the decayed lr of the parameter's step count.
void adagrad_step(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const AdagradParams h = AdagradParams::from(attrs);
  run_step<AdagradOp>(FusedGroup("fused_adagrad", in, h.num_buffers(),
                                 [&](size_t i, double* s) { s[0] = h.decayed_lr(attrs.per_param[i]); }),
                      h);
}

}  // namespace

// Registered with or without a GPU: these kernels run only for CUDA tensors.
void register_optim() {
  const DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::FusedSgd, cuda, sgd_step);
  register_kernel(OpId::FusedAdam, cuda, adam_step);
  register_kernel(OpId::FusedAdamw, cuda, adam_step);
  register_kernel(OpId::FusedRmsprop, cuda, rmsprop_step);
  register_kernel(OpId::FusedAdagrad, cuda, adagrad_step);
}

}  // namespace brisk::kernels::cuda
