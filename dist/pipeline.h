// dist/pipeline.h: pipeline parallelism across ranks, as GPipe and PipeDream-Flush (1F1B): an
// nn::Sequential split into contiguous stages, one per rank of a ProcessGroup; a batch is cut
// into micro-batches that flow through the stages, activations forward and their gradients
// backward by the group's send/recv, each behind a small header (shape, dtype, micro-batch).
// Gradients accumulate over the micro-batches; the user's optimizer, built over parameters()
// (this stage's), steps them. Design, schedules and measured numbers: docs/PIPELINE.md. Not
// here: data parallelism (dist/ddp.h), model parallelism in one process (module.to(device)
// per part; docs/PIPELINE.md shows it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"

namespace brisk::dist {

// GPipe: every micro-batch's forward, then every backward; each stage holds the activations of
// all m micro-batches. OneFOneB (PipeDream-Flush): stage s runs min(m, p - s - 1) forwards, then
// alternates one forward and one backward, then drains; it holds at most min(m, p - s).
// Both give the same gradients; the bubble is (p - 1) / (m + p - 1) of the step either way.
enum class Schedule { GPipe, OneFOneB };
const char* schedule_name(Schedule s);  // "gpipe", "1f1b"

struct PipelineOptions {
  Schedule schedule = Schedule::OneFOneB;
  int64_t micro_batches = 4;  // the batch (dim 0) must divide into this many equal parts
  // The index of the first layer of stages 1 .. p-1 (p = the group's size), increasing: {3}
  // splits a 6-layer model into layers [0, 3) and [3, 6). Empty: balance_by_parameters.
  std::vector<int64_t> split_points{};
  // Where this rank's stage runs: inputs and received tensors are put there (the stage's layers
  // must already be; CUDA needs an NCCL group).
  Device device = Device::cpu();
};

// What the last train_step did on this rank (steady clock, seconds).
struct PipelineStats {
  double step_s = 0;          // the whole call
  double compute_s = 0;       // forward, loss and backward of this stage's layers
  double wait_s = 0;          // blocked in receives, the final wait for sends and the loss broadcast
  int64_t max_in_flight = 0;  // micro-batches whose activations were alive at the same time
  // The idle part of the step on this stage: 1 - compute / step.
  double bubble() const { return step_s > 0 ? 1 - compute_s / step_s : 0; }
};

// (p - 1) / (m + p - 1): the idle fraction of each stage when stages take equal time and
// communication is free.
double bubble_theory(int stages, int64_t micro_batches);

// Contiguous split of `costs` (one per layer) into `stages` non-empty parts minimizing the most
// expensive part (ties: the earliest split). Returns the split points (stages - 1 of them).
std::vector<int64_t> balance(const std::vector<double>& costs, int stages);
// Balanced by each layer's parameter count (+1, so that layers without parameters spread too).
std::vector<int64_t> balance_by_parameters(const nn::Sequential& model, int stages);
// Balanced by each layer's measured forward + backward time on `sample` (one micro-batch of
// input; the layers run one after another in this process, so every rank needs the whole model
// here), the best of `repeats`. Every rank of `group` must call it: the slowest rank's time per
// layer (an allreduce max) is the cost, so all ranks get the same split.
std::vector<int64_t> balance_by_time(nn::Sequential& model, const Tensor& sample, int stages, ProcessGroup& group,
                                     int repeats = 3);

// (output, target) -> a scalar loss, mean over the micro-batch (the step's loss and gradients
// are the mean over micro-batches, as one process computes them on the whole batch).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// Every rank builds the same model (same seed) and makes a Pipeline over it; the rank of stage
// s is the group's rank s and runs only its layers (the others' are never touched: a rank may
// hold placeholders such as nn::Identity for them when split_points is given). Construction is
// collective: every rank checks its options against rank 0's.
class Pipeline {
 public:
  Pipeline(std::shared_ptr<nn::Sequential> model, ProcessGroupPtr group, PipelineOptions options = {});

  // One training step on a batch: the micro-batches through the schedule, gradients
  // accumulated into this stage's parameters (each micro-batch's loss scaled by 1 / m); zeroing
  // and stepping are the optimizer's. `input` is read on the first stage and `target` on the
  // last (others may pass undefined tensors). Returns the mean loss over the micro-batches, an
  // F64 scalar, on every rank. A failure in the first micro-batch's forward on any stage (a
  // stage that cannot take its input's shape, a bad batch or target) is a brisk::Error on
  // every rank at once, naming the stage, and leaves the group usable; a dead or stuck peer is
  // an error after the group's timeout.
  Tensor train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn);

  int stage() const { return stage_; }
  int num_stages() const { return stages_; }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  const std::vector<int64_t>& split_points() const { return points_; }
  // This stage's layers: [first_layer(), end_layer()) of the model.
  int64_t first_layer() const { return begin_; }
  int64_t end_layer() const { return end_; }
  // This stage's parameters, named as in the whole model ("3.weight").
  nn::NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  const PipelineStats& last_stats() const { return stats_; }
  const PipelineOptions& options() const { return options_; }

 private:
  struct Step;  // one call's state (dist/pipeline.cpp)
  Tensor run_layers(const Tensor& x);

  std::shared_ptr<nn::Sequential> model_;
  ProcessGroupPtr group_;
  PipelineOptions options_;
  std::vector<int64_t> points_;
  int stage_ = 0, stages_ = 1;
  int64_t begin_ = 0, end_ = 0;
  int64_t steps_ = 0;  // train_step calls so far; a step's number is in its headers
  PipelineStats stats_;
};

}  // namespace brisk::dist
