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
  Option<double> lr = by_default(1e-3);
  Option<double> momentum = by_default(0.0);
  Option<double> dampening = by_default(0.0);
  Option<double> weight_decay = by_default(0.0);
  Option<bool> nesterov = by_default(false);
  Option<bool> maximize = by_default(false);
  Option<bool> fused =
      by_default(true);  // one multi-tensor pass per group and dtype (dense F32/F64 parameters, CPU or CUDA)

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
