// kernels/optim_step.h: the device-agnostic interface between the optimizers (optim/) and the
// backends' fused multi-tensor steps: each optimizer's hyperparameters as a plain struct, one
// group's tensors of one dtype on one device as a list of raw addresses (FusedGroup, checked
// when built), and a registry holding per device type one function pointer per optimizer,
// set by the backend at init and null where it has no fused step.
// Not here: the update rules and their references (optim/*.cpp), the CPU fused loops (also in
// optim/*.cpp, called directly: the CPU entries stay null), the CUDA kernels (kernels/cuda/optim.cu).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"

namespace brisk::kernels {

// Note [Fused optimizer steps on devices]
// Dependencies point one way (engine <- kernels <- optim), so a backend cannot see an
// optimizer's options or its ParamState. The optimizer therefore translates one group's
// parameters of one dtype on one device into plain data: a hyperparameter struct below, and a
// FusedGroup listing, per parameter, its element count, the addresses of its value, gradient
// and state buffers (in the order each struct names), and up to two per-parameter scalars. The
// per-parameter scalars carry what depends on the parameter's own step count (Adam's bias
// corrections, Adagrad's decayed lr, SGD's "momentum buffer is fresh"), computed on the host
// in double exactly as the reference computes them, so parameters that missed steps are
// updated correctly within one launch. The optimizer creates missing state buffers before it
// builds the group; a backend only reads and writes memory, on the device's current stream.
// Arithmetic: a backend repeats the reference step's operations in the same order, rounding
// after each as a separate tensor op would (no fused multiply-add), with scalars converted to
// the tensor's dtype as the ops convert them. See Note [Fused steps match the reference] in
// optim/multi_tensor.h.
// Dtypes: F32 and F64. F16/BF16 parameters take the reference step on every device: their
// reference rounds to 16 bits after every op, which a fused F32-math kernel (PyTorch's choice)
// would not reproduce, and brisk keeps parameters and optimizer state in F32 under mixed
// precision anyway (master weights), so the case is rare.

// Most state buffers any optimizer keeps per parameter (Adam with amsgrad, RMSprop centered
// with momentum: 3).
inline constexpr int kMaxFusedBuffers = 3;

// SGD. Buffers: [momentum_buffer] when momentum != 0, else none. scalars[0]: 1 when the
// momentum buffer is fresh (this step writes d into it instead of reading it), else 0.
struct SgdHyper {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

// Adam and AdamW (decoupled). Buffers: [exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad only)].
// scalars[0]: step_size = lr / (1 - beta1^t); scalars[1]: sqrt(1 - beta2^t) (t: the
// parameter's step count, this step included).
struct AdamHyper {
  double lr = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
  bool decoupled = false;  // AdamW: p *= 1 - lr * wd instead of adding wd * p to the gradient
};

// RMSprop. Buffers: [square_avg, grad_avg (centered only), momentum_buffer (momentum > 0
// only)]. No per-parameter scalars.
struct RmspropHyper {
  double lr = 0;
  double alpha = 0;
  double eps = 0;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

// Adagrad. Buffers: [sum]. scalars[0]: the decayed lr of the parameter, lr / (1 + (t - 1) lr_decay).
struct AdagradHyper {
  double eps = 0;
  double weight_decay = 0;
  bool maximize = false;
};

inline int num_buffers(const SgdHyper& h) { return h.momentum != 0 ? 1 : 0; }
inline int num_buffers(const AdamHyper& h) { return h.amsgrad ? 3 : 2; }
inline int num_buffers(const RmspropHyper& h) { return 1 + (h.centered ? 1 : 0) + (h.momentum > 0 ? 1 : 0); }
inline int num_buffers(const AdagradHyper&) { return 1; }

// One parameter of a fused step: raw addresses on the group's device, all of `numel` dense
// elements of the group's dtype.
struct FusedTensor {
  int64_t numel = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* buffers[kMaxFusedBuffers] = {};
  double scalars[2] = {};
};

// One group's parameters of one dtype on one device, as a fused step takes them.
class FusedGroup {
 public:
  // `op` names the optimizer in error messages ("Adam").
  FusedGroup(const char* op, DType dtype, Device device, int num_buffers)
      : op_(op), dtype_(dtype), device_(device), num_buffers_(num_buffers) {
    BRISK_CHECK(dtype == DType::F32 || dtype == DType::F64, op, ": fused step: dtype ", dtype,
                " (fused steps take F32 and F64; F16/BF16 parameters take the reference step)");
    BRISK_CHECK(num_buffers >= 0 && num_buffers <= kMaxFusedBuffers, op, ": fused step: ", num_buffers,
                " state buffers per parameter (at most ", kMaxFusedBuffers, ")");
  }

  // Appends a parameter with its gradient and state buffers (num_buffers of them, in the
  // order the optimizer's hyperparameter struct names). Every tensor must be dense, of the
  // group's dtype and device, and of the parameter's sizes.
  void add(const Tensor& param, const Tensor& grad, std::initializer_list<Tensor> buffers, double scalar0 = 0,
           double scalar1 = 0) {
    const size_t index = tensors_.size();
    check_tensor(param, param, nullptr, index);
    check_tensor(grad, param, "gradient", index);
    BRISK_CHECK(int(buffers.size()) == num_buffers_, op_, ": fused step: parameter ", index, " comes with ",
                buffers.size(), " state buffers, the group takes ", num_buffers_);
    FusedTensor t;
    t.numel = param.numel();
    t.param = param.data_ptr();
    t.grad = grad.data_ptr();
    int k = 0;
    for (const Tensor& b : buffers) {
      check_tensor(b, param, "state buffer", index);
      t.buffers[k++] = b.data_ptr();
    }
    t.scalars[0] = scalar0;
    t.scalars[1] = scalar1;
    tensors_.push_back(t);
  }

  const char* op() const { return op_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int num_buffers() const { return num_buffers_; }
  const std::vector<FusedTensor>& tensors() const { return tensors_; }
  bool empty() const { return tensors_.empty(); }

 private:
  // `what`: "gradient", "state buffer" or null for the parameter itself.
  void check_tensor(const Tensor& t, const Tensor& param, const char* what, size_t index) const {
    const bool ok =
        t.defined() && t.dtype() == dtype_ && t.device() == device_ && t.is_contiguous() && t.sizes() == param.sizes();
    if (ok) return;  // the message below is built only on failure (this runs per tensor and step)
    const std::string name = what ? std::string("the ") + what + " of parameter " + std::to_string(index)
                                  : "parameter " + std::to_string(index);
    BRISK_CHECK(t.defined(), op_, ": fused step: ", name, " is undefined");
    BRISK_FAIL(op_, ": fused step: ", name, " is ", t.str(), t.is_contiguous() ? "" : " (not dense)",
               " but the group takes dense ", dtype_, " tensors on ", device_, " of sizes ", param.sizes());
  }

  const char* op_;
  DType dtype_;
  Device device_;
  int num_buffers_;
  std::vector<FusedTensor> tensors_;
};

// ---- the registry: one entry per optimizer and device type
using SgdStepFn = void (*)(const SgdHyper&, const FusedGroup&);
using AdamStepFn = void (*)(const AdamHyper&, const FusedGroup&);
using RmspropStepFn = void (*)(const RmspropHyper&, const FusedGroup&);
using AdagradStepFn = void (*)(const AdagradHyper&, const FusedGroup&);

struct FusedOptimSteps {
  SgdStepFn sgd = nullptr;
  AdamStepFn adam = nullptr;
  RmspropStepFn rmsprop = nullptr;
  AdagradStepFn adagrad = nullptr;
};

// The fused steps of device type t. Backends fill their entries in their register_*() call
// (made by init()); optimizers read them.
inline FusedOptimSteps& fused_optim_steps(DeviceType t) {
  static FusedOptimSteps table[kNumDeviceTypes];
  return table[int(t)];
}

inline SgdStepFn fused_step_fn(DeviceType t, const SgdHyper&) { return fused_optim_steps(t).sgd; }
inline AdamStepFn fused_step_fn(DeviceType t, const AdamHyper&) { return fused_optim_steps(t).adam; }
inline RmspropStepFn fused_step_fn(DeviceType t, const RmspropHyper&) { return fused_optim_steps(t).rmsprop; }
inline AdagradStepFn fused_step_fn(DeviceType t, const AdagradHyper&) { return fused_optim_steps(t).adagrad; }

// Whether device type t has a fused step for the optimizer of hyperparameters `Hyper`.
template <class Hyper>
bool has_fused_step(DeviceType t, const Hyper& h) {
  return fused_step_fn(t, h) != nullptr;
}

// Runs the fused step of the group's device type: one pass over all of the group's tensors.
// A device type without one, or buffers that do not match the options, is a clear error.
template <class Hyper>
void fused_step(const Hyper& h, const FusedGroup& group) {
  BRISK_CHECK(group.num_buffers() == num_buffers(h), group.op(), ": fused step: the group holds ", group.num_buffers(),
              " state buffers per parameter, these options need ", num_buffers(h));
  auto fn = fused_step_fn(group.device().type, h);
  BRISK_CHECK(fn != nullptr, group.op(), ": no fused step for tensors on ", group.device(),
              " (this build has no such kernel; use fused=false)");
  if (group.empty()) return;
  fn(h, group);
}

}  // namespace brisk::kernels
