// compress/distill.h: knowledge distillation (Hinton et al. 2015): a student learns from a teacher's
// temperature-softened outputs, loss = alpha * T^2 * KL(softmax(t / T) || softmax(s / T))
// [batchmean] + (1 - alpha) * CE(s, y); and feature matching (FitNets): a student layer's
// output, mapped by a learned adapter (a 1x1 Conv2d or a Linear to the teacher's width), is
// pulled towards a teacher layer's output by MSE, both captured by forward hooks. Distiller runs
// the teacher in eval mode under no_grad and restores its modes. Not here: cross_entropy with
// probability targets (nn/functional.h), pruning (compress/prune.h), quantization (compress/quantize.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "nn/module.h"

namespace brisk::nn::distill {

struct DistillOptions {
  double temperature = 4.0;      // T > 0; softens both distributions
  double alpha = 0.9;            // weight of the soft term, in [0, 1]; 1 - alpha on the hard labels
  double label_smoothing = 0.0;  // of the hard-label cross-entropy
};

// T^2 * KL(softmax(teacher / T) || softmax(student / T)), summed over classes and averaged over
// the batch (PyTorch's kl_div 'batchmean'). Logits (N, C) or (N, C, d1, ...), classes on dim 1,
// of equal shapes. The T^2 keeps the soft gradients' scale independent of T. The teacher's
// logits are used as given: detach them (Distiller does) when the teacher is fixed.
Tensor soft_target_loss(const Tensor& student_logits, const Tensor& teacher_logits, double temperature);

// alpha * soft_target_loss + (1 - alpha) * cross_entropy(student, target). target: I64 class
// indices or class probabilities (as nn::functional::cross_entropy); it may be undefined when
// alpha == 1.
Tensor distillation_loss(const Tensor& student_logits, const Tensor& teacher_logits, const Tensor& target,
                         const DistillOptions& options = {});

// The parts of one Distiller step: total = soft/hard mix + sum of weight * feature MSE.
struct DistillLosses {
  Tensor total{};           // what to call backward() on
  Tensor soft{};            // T^2 * KL term (undefined when alpha == 0)
  Tensor hard{};            // cross-entropy with the labels (undefined when alpha == 1)
  Tensor features{};        // weighted sum of the feature MSEs (undefined without matches)
  Tensor student_logits{};  // for accuracy bookkeeping
  Tensor teacher_logits{};  // computed without a graph
};

// Distills `teacher` into `student` (both single-tensor modules producing logits).
//   distill::Distiller d(teacher, student, {.temperature = 4, .alpha = 0.9});
//   d.match_features("features.3", "features.3", std::make_shared<Conv2d>(16, 64, 1));
//   optim::Adam opt(d.named_parameters());  // the student's and the adapters'
//   auto l = d(x, y); opt.zero_grad(); l.total.backward(); opt.step();
// The teacher's parameters never get gradients, and each of its modules gets back the train /
// eval mode it had. The hooks capture only while the Distiller runs a step; they are removed
// by remove_hooks() or the destructor, after which the modules hold nothing of the Distiller.
class Distiller {
 public:
  Distiller(ModulePtr teacher, ModulePtr student, DistillOptions options = {});
  ~Distiller();
  Distiller(const Distiller&) = delete;
  Distiller& operator=(const Distiller&) = delete;

  // Matches the output of `student_path` (a dotted submodule path), mapped by `adapter`, to the
  // output of the teacher's `teacher_path` with MSE (mean over elements), times `weight`.
  // The adapter becomes adapters()'s child "<i>"; train its parameters with the student's.
  void match_features(const std::string& student_path, const std::string& teacher_path, ModulePtr adapter,
                      double weight = 1.0);

  // The teacher's logits for x: eval mode, no_grad, modes restored (also on an exception).
  Tensor teacher_forward(const Tensor& x);

  // One step's losses on a batch: the teacher first (no graph), then the student.
  DistillLosses operator()(const Tensor& x, const Tensor& target);

  // The adapters of match_features, as one module (move it with the student: adapters().to(d)).
  Module& adapters() { return *adapters_; }
  // What the optimizer trains: the student's parameters, then the adapters' ("adapters.0.weight").
  NamedTensors named_parameters() const;
  void remove_hooks();
  size_t num_hooks() const { return handles_.size(); }
  DistillOptions& options() { return options_; }  // e.g. to anneal T or alpha between epochs
  const DistillOptions& options() const { return options_; }

  struct Match;  // one feature pair: paths, adapter, weight, captured outputs (distill.cpp)

 private:
  ModulePtr teacher_, student_;
  DistillOptions options_;
  std::shared_ptr<ModuleList> adapters_;
  std::vector<std::shared_ptr<Match>> matches_;
  std::vector<std::pair<std::weak_ptr<Module>, int>> handles_;  // (module, hook handle) to remove
  bool hooks_removed_ = false;
};

}  // namespace brisk::nn::distill
