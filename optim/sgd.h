// optim/sgd.h: stochastic gradient descent with momentum, dampening, Nesterov momentum,
// L2 weight decay and maximize, exactly as PyTorch's torch.optim.SGD (foreach=False):
//   d = grad (+ wd * p);  buf = momentum * buf + (1 - dampening) * d  (buf = d at first)
//   d = nesterov ? d + momentum * buf : buf;  p -= lr * d
// Two paths give the same numbers: a reference written with tensor ops, and (options.fused, the
// default) one fused pass per group and dtype over dense F32/F64 parameters: a loop over raw
// memory on the CPU, a multi-tensor kernel on CUDA (kernels/cuda/optim.cu). F16/BF16
// parameters take the reference.
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool fused = true;  // one multi-tensor pass per group and dtype (dense F32/F64 parameters, CPU or CUDA)

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("momentum", momentum);
    f("dampening", dampening);
    f("weight_decay", weight_decay);
    f("nesterov", nesterov);
    f("maximize", maximize);
    f("fused", fused);
  }
};

class SGD : public OptimizerWith<SGDOptions> {
 public:
  explicit SGD(NamedTensors params, const SGDOptions& options = {});
  explicit SGD(const std::vector<Tensor>& params, const SGDOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "SGD"; }

 protected:
  void check_options(size_t g) const override;
};

}  // namespace brisk::optim
