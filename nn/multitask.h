// nn/multitask.h: combining the losses of several tasks trained on a shared trunk.
// UncertaintyWeighting follows Kendall, Gal and Cipolla, "Multi-Task Learning Using Uncertainty
// to Weigh Losses for Scene Geometry and Semantics" (CVPR 2018). Each task i has a learned
// log-variance s_i = log(sigma_i^2); the combined loss is
//   L = sum_i exp(-s_i) * L_i + s_i.
// The paper's regression form is 1/(2 sigma^2) L + log sigma = 0.5 * (exp(-s) L + s), and its
// classification form (softmax with temperature sigma^2, eq. 10 approximation) is
// 1/sigma^2 L + log sigma = exp(-s) L + 0.5 s. We drop the 0.5 factors and use the same form for
// every task (as most implementations do). The factors only shift where the weight settles:
// minimizing exp(-s) L + s over s gives exp(-s*) = 1 / L, so a task with a larger loss gets a
// smaller weight.
#pragma once

#include <vector>

#include "engine/tensor.h"
#include "nn/module.h"

namespace brisk::nn {

// A Module holding one parameter "log_vars" of shape (num_tasks,), initialized to 0 (weights 1),
// so it appears in state_dict and in optimizers (optimize it together with the model).
class UncertaintyWeighting : public Module {
 public:
  explicit UncertaintyWeighting(int64_t num_tasks, DType dtype = DType::F32);
  // sum_i exp(-s_i) * losses[i] + s_i. Throws brisk::Error for a wrong number of losses or a
  // loss that is not a one-element tensor.
  Tensor combine(const std::vector<Tensor>& losses);
  // The current task weights exp(-s_i), without a graph.
  std::vector<double> weights() const;
  int64_t num_tasks() const { return num_tasks_; }

 private:
  int64_t num_tasks_ = 0;
};

// sum_i weights[i] * losses[i] for fixed weights; same checks as UncertaintyWeighting::combine.
Tensor weighted_sum_losses(const std::vector<Tensor>& losses, const std::vector<double>& weights);

}  // namespace brisk::nn
