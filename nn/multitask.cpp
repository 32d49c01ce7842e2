// nn/multitask.cpp: see nn/multitask.h.
#include "nn/multitask.h"

#include <cmath>

#include "engine/error.h"
#include "engine/functions.h"

namespace brisk::nn {

namespace {
void check_losses(const char* fn, const std::vector<Tensor>& losses, size_t expected) {
  BRISK_CHECK(losses.size() == expected, fn, ": expected ", expected, " losses, got ", losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    BRISK_CHECK(losses[i].defined(), fn, ": loss ", i, " is undefined");
    BRISK_CHECK(losses[i].numel() == 1, fn, ": loss ", i, " must be a scalar, got shape ", losses[i].shape());
  }
}
}  // namespace

UncertaintyWeighting::UncertaintyWeighting(int64_t num_tasks, DType dtype)
    : Module("UncertaintyWeighting"), num_tasks_(num_tasks) {
  BRISK_CHECK(num_tasks > 0, "UncertaintyWeighting: num_tasks must be positive, got ", num_tasks);
  register_parameter("log_vars", zeros(Shape{num_tasks}, dtype));
}

Tensor UncertaintyWeighting::combine(const std::vector<Tensor>& losses) {
  check_losses("UncertaintyWeighting::combine", losses, static_cast<size_t>(num_tasks_));
  Tensor& s = parameter("log_vars");
  Tensor total;
  for (int64_t i = 0; i < num_tasks_; ++i) {
    Tensor si = s.select(0, i);
    Tensor term = exp(-1.0 * si) * losses[i].reshape(Shape{}) + si;
    total = total.defined() ? total + term : term;
  }
  return total;
}

std::vector<double> UncertaintyWeighting::weights() const {
  Tensor s = maybe_parameter("log_vars");
  std::vector<double> w;
  for (int64_t i = 0; i < num_tasks_; ++i) w.push_back(std::exp(-s.select(0, i).item<double>()));
  return w;
}

Tensor weighted_sum_losses(const std::vector<Tensor>& losses, const std::vector<double>& weights) {
  check_losses("weighted_sum_losses", losses, weights.size());
  BRISK_CHECK(!losses.empty(), "weighted_sum_losses: no losses");
  for (size_t i = 0; i < weights.size(); ++i)
    BRISK_CHECK(std::isfinite(weights[i]), "weighted_sum_losses: weight ", i, " must be finite, got ", weights[i]);
  Tensor total;
  for (size_t i = 0; i < losses.size(); ++i) {
    Tensor term = losses[i].reshape(Shape{}) * weights[i];
    total = total.defined() ? total + term : term;
  }
  return total;
}

}  // namespace brisk::nn
