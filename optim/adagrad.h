// optim/adagrad.h: Adagrad with learning-rate decay, L2 weight decay, initial accumulator value,
// eps and maximize, exactly as PyTorch's torch.optim.Adagrad (foreach=False):
//   clr = lr / (1 + (t - 1) lr_decay);  sum += g^2;  p -= clr g / (sqrt(sum) + eps)
// Two paths give the same numbers: a reference written with tensor ops, and (options.fused, the
// default) one fused pass per group and dtype over dense F32/F64 parameters: a loop over raw
// memory on the CPU, a multi-tensor kernel on CUDA (kernels/cuda/optim.cu). F16/BF16
// parameters take the reference.
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct AdagradOptions {
  Option<double> lr = by_default(1e-2);
  Option<double> lr_decay = by_default(0.0);
  Option<double> weight_decay = by_default(0.0);
  Option<double> initial_accumulator_value = by_default(0.0);
  Option<double> eps = by_default(1e-10);
  Option<bool> maximize = by_default(false);
  Option<bool> fused =
      by_default(true);  // one multi-tensor pass per group and dtype (dense F32/F64 parameters, CPU or CUDA)

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("lr_decay", lr_decay);
    f("weight_decay", weight_decay);
    f("initial_accumulator_value", initial_accumulator_value);
    f("eps", eps);
    f("maximize", maximize);
    f("fused", fused);
  }
};

class Adagrad : public OptimizerWith<AdagradOptions> {
 public:
  explicit Adagrad(NamedTensors params, const AdagradOptions& options = {});
  explicit Adagrad(const std::vector<Tensor>& params, const AdagradOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "Adagrad"; }

 protected:
  void check_options(size_t g) const override;
};

}  // namespace brisk::optim
