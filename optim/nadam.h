// optim/nadam.h: NAdam (Adam with Nesterov momentum, Dozat 2016) with momentum decay, L2 or
// decoupled weight decay and maximize, exactly as PyTorch 2.x's torch.optim.NAdam
// (foreach=False):
//   mu_t = b1 (1 - 0.5 * 0.96^(t psi));  prod *= mu_t;  m = b1 m + (1 - b1) g;
//   v = b2 v + (1 - b2) g^2;  d = sqrt(v / (1 - b2^t)) + eps;
//   p -= lr (1 - mu_t) / (1 - prod) g / d + lr mu_{t+1} / (1 - prod mu_{t+1}) m / d
// One path, written with tensor ops, so it runs on every device and dtype (no fused loop).
// The running product of the momentum coefficients is a per-parameter number kept in the state
// ("mu_product", as PyTorch keeps it), so a beta1 that a scheduler changes enters it as it did.
#pragma once

#include "optim/optimizer.h"

namespace brisk::optim {

struct NAdamOptions {
  Option<double> lr = by_default(2e-3);
  Option<double> beta1 = by_default(0.9);
  Option<double> beta2 = by_default(0.999);
  Option<double> eps = by_default(1e-8);
  Option<double> weight_decay = by_default(0.0);
  Option<double> momentum_decay = by_default(4e-3);         // psi above
  Option<bool> decoupled_weight_decay = by_default(false);  // p *= 1 - lr wd (NAdamW) instead of L2
  Option<bool> maximize = by_default(false);

  template <class F>
  void visit(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("momentum_decay", momentum_decay);
    f("decoupled_weight_decay", decoupled_weight_decay);
    f("maximize", maximize);
  }
};

class NAdam : public OptimizerWith<NAdamOptions> {
 public:
  explicit NAdam(NamedTensors params, const NAdamOptions& options = {});
  explicit NAdam(const std::vector<Tensor>& params, const NAdamOptions& options = {});

  void step_group(size_t g, std::vector<Slot>& slots) override;
  const char* name() const override { return "NAdam"; }

 protected:
  void check_options(size_t g) const override;
  std::vector<std::string> param_number_keys() const override { return {"mu_product"}; }
};

}  // namespace brisk::optim
