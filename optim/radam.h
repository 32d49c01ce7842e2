// optim/radam.h: RAdam (rectified Adam, Liu et al. 2019) with L2 or decoupled weight decay and
// maximize, exactly as PyTorch 2.x's torch.optim.RAdam (foreach=False):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  rho_inf = 2 / (1 - b2) - 1;
//   rho_t = rho_inf - 2 t b2^t / (1 - b2^t);  m_hat = m / (1 - b1^t)
//   rho_t > 5: p -= lr m_hat r_t sqrt(1 - b2^t) / (sqrt(v) + eps),
//              r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
//   else:      p -= lr m_hat (SGD with momentum while the variance estimate is unreliable)
// One path, written with tensor ops, so it runs on every device and dtype (no fused loop).
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct RAdamOptions {
  Option<double> lr = by_default(1e-3);
  Option<double> beta1 = by_default(0.9);
  Option<double> beta2 = by_default(0.999);
  Option<double> eps = by_default(1e-8);
  Option<double> weight_decay = by_default(0.0);
  Option<bool> decoupled_weight_decay = by_default(false);  // p *= 1 - lr wd (RAdamW) instead of L2
  Option<bool> maximize = by_default(false);

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("decoupled_weight_decay", decoupled_weight_decay);
    f("maximize", maximize);
  }
};

class RAdam : public OptimizerWith<RAdamOptions> {
 public:
  explicit RAdam(NamedTensors params, const RAdamOptions& options = {});
  explicit RAdam(const std::vector<Tensor>& params, const RAdamOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "RAdam"; }

 protected:
  void check_options(size_t g) const override;
};

}  // namespace brisk::optim
