// optim/adam.h: Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay,
// p *= 1 - lr * wd before the Adam step), with amsgrad and maximize, exactly as PyTorch's
// torch.optim.Adam / AdamW (foreach=False):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  (amsgrad: vmax = max(vmax, v))
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Two paths give the same numbers: a reference written with tensor ops, and (options.fused, the
// default) one fused pass per group and dtype over dense F32/F64 parameters: a loop over raw
// memory on the CPU, a multi-tensor kernel on CUDA (kernels/cuda/optim.cu). F16/BF16
// parameters take the reference.
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct AdamOptions {
  Option<double> lr = by_default(1e-3);
  Option<double> beta1 = by_default(0.9);  // schedulers that cycle momentum (CyclicLR, OneCycleLR) drive this one
  Option<double> beta2 = by_default(0.999);
  Option<double> eps = by_default(1e-8);
  Option<double> weight_decay = by_default(0.0);  // Adam: L2 added to the gradient; AdamW: decoupled
  Option<bool> amsgrad = by_default(false);
  Option<bool> maximize = by_default(false);
  Option<bool> fused =
      by_default(true);  // one multi-tensor pass per group and dtype (dense F32/F64 parameters, CPU or CUDA)

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("amsgrad", amsgrad);
    f("maximize", maximize);
    f("fused", fused);
  }
};

// AdamW's options: Adam's, with weight_decay defaulting to 0.01 (decoupled), as in PyTorch.
struct AdamWOptions {
  Option<double> lr = by_default(1e-3);
  Option<double> beta1 = by_default(0.9);
  Option<double> beta2 = by_default(0.999);
  Option<double> eps = by_default(1e-8);
  Option<double> weight_decay = by_default(1e-2);
  Option<bool> amsgrad = by_default(false);
  Option<bool> maximize = by_default(false);
  Option<bool> fused = by_default(true);

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("amsgrad", amsgrad);
    f("maximize", maximize);
    f("fused", fused);
  }
};

class Adam : public OptimizerWith<AdamOptions> {
 public:
  explicit Adam(NamedTensors params, const AdamOptions& options = {});
  explicit Adam(const std::vector<Tensor>& params, const AdamOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "Adam"; }

 protected:
  void check_options(size_t g) const override;
};

class AdamW : public OptimizerWith<AdamWOptions> {
 public:
  explicit AdamW(NamedTensors params, const AdamWOptions& options = {});
  explicit AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "AdamW"; }

 protected:
  void check_options(size_t g) const override;
};

}  // namespace brisk::optim
