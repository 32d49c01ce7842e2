// optim/rmsprop.h: RMSprop with smoothing constant alpha, eps, L2 weight decay, momentum,
// centered variant and maximize, exactly as PyTorch's torch.optim.RMSprop (foreach=False):
//   v = alpha v + (1 - alpha) g^2;  (centered: m = alpha m + (1 - alpha) g, v - m^2 below)
//   avg = sqrt(v) + eps;  momentum: buf = momentum buf + g / avg, p -= lr buf;  else p -= lr g / avg
// Two paths give the same numbers: a reference written with tensor ops, and (options.fused, the
// default) one fused pass per group and dtype over dense F32/F64 parameters: a loop over raw
// memory on the CPU, a multi-tensor kernel on CUDA (kernels/cuda/optim.cu). F16/BF16
// parameters take the reference.
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct RMSpropOptions {
  Option<double> lr = by_default(1e-2);
  Option<double> alpha = by_default(0.99);
  Option<double> eps = by_default(1e-8);
  Option<double> weight_decay = by_default(0.0);
  Option<double> momentum = by_default(0.0);
  Option<bool> centered = by_default(false);
  Option<bool> maximize = by_default(false);
  Option<bool> fused =
      by_default(true);  // one multi-tensor pass per group and dtype (dense F32/F64 parameters, CPU or CUDA)

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("alpha", alpha);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("momentum", momentum);
    f("centered", centered);
    f("maximize", maximize);
    f("fused", fused);
  }
};

class RMSprop : public OptimizerWith<RMSpropOptions> {
 public:
  explicit RMSprop(NamedTensors params, const RMSpropOptions& options = {});
  explicit RMSprop(const std::vector<Tensor>& params, const RMSpropOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "RMSprop"; }

 protected:
  void check_options(size_t g) const override;
};

}  // namespace brisk::optim
