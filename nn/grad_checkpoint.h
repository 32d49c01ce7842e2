// nn/grad_checkpoint.h: gradient checkpointing (activation recomputation, the guide's section
// on memory): brisk::checkpoint(fn, inputs) runs fn without recording its graph and keeps only
// the inputs; backward runs fn again, with the random generator and autocast state it saw the
// first time (so dropout repeats), and back-propagates through the recomputed graph. The
// activations inside fn are freed after the forward pass, at the cost of one extra forward
// of fn. nn::checkpoint_sequential checkpoints a Sequential every k modules. Gradients are
// bit-identical to running fn normally (Note [Gradient checkpointing]). Not here: training
// checkpoints on disk (train/checkpoint.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/tensor.h"
#include "nn/module.h"

namespace brisk {

// Note [Gradient checkpointing]
// The forward runs fn under NoGradGuard and records one node, CheckpointBackward, as the
// producer of fn's outputs, with edges to the inputs that require grad. Its backward restores
// the default generator's (seed, offset) and the autocast state of the forward, detaches the
// inputs (keeping requires_grad), runs fn again with grad mode on, calls backward on the
// recomputed outputs with the incoming gradients (a nested backward: parameters used inside
// fn receive their .grad there), returns the detached inputs' gradients to the outer pass and
// puts the generator back where it was. Because the recomputed ops are the same ops on the
// same values in the same order, the gradients are bit-identical to the plain run (a test
// checks it, dropout included). Limits, as PyTorch's reentrant checkpoint: gradients reach
// parameters inside fn through .grad only (brisk::grad() with those parameters as inputs does
// not see them), create_graph (double backward) through a checkpoint is an error, and fn must
// be deterministic given its inputs and the generator (kernels that are not, such as CUDA
// atomics-based reductions, recompute slightly different values).
using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace brisk

namespace brisk::nn {

// Runs seq's modules in order, each group of `every` consecutive modules as one checkpoint,
// except the last group, which runs normally (its activations are needed at once, as in
// PyTorch's checkpoint_sequential). every >= 1; every >= seq.size() is a plain forward.
Tensor checkpoint_sequential(const Sequential& seq, int64_t every, const Tensor& input);

}  // namespace brisk::nn
