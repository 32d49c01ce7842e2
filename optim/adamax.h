// optim/adamax.h: Adamax (Adam with the infinity norm, Kingma & Ba 2015) with L2 weight decay
// and maximize, exactly as PyTorch 2.x's torch.optim.Adamax (foreach=False):
//   m = b1 m + (1 - b1) g;  u = max(b2 u, |g| + eps);  p -= lr / (1 - b1^t) m / u
// eps enters inside the max (as PyTorch's does), not added to the denominator, so a parameter
// whose gradients are all zero still gets a finite update.
// One path, written with tensor ops, so it runs on every device and dtype (no fused loop).
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct AdamaxOptions {
  Option<double> lr = by_default(2e-3);
  Option<double> beta1 = by_default(0.9);
  Option<double> beta2 = by_default(0.999);
  Option<double> eps = by_default(1e-8);
  Option<double> weight_decay = by_default(0.0);  // L2 added to the gradient
  Option<bool> maximize = by_default(false);

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("maximize", maximize);
  }
};

class Adamax : public OptimizerWith<AdamaxOptions> {
 public:
  explicit Adamax(NamedTensors params, const AdamaxOptions& options = {});
  explicit Adamax(const std::vector<Tensor>& params, const AdamaxOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "Adamax"; }

 protected:
  void check_options(size_t g) const override;
};

}  // namespace brisk::optim
