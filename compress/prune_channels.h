// compress/prune_channels.h: structured pruning that removes channels physically. A dependency walk
// finds each Conv2d whose output channels can go (through its BatchNorm2d, activations and
// pools, into the next Conv2d or, flattened, a Linear), picks the filters to keep by their Ln
// norm (as nn::prune::ln_structured on dim 0), and rebuilds those modules smaller and dense,
// weights copied, so the new model computes what the masked one computes.
// Not here: masks on parameters (compress/prune.h).
//
//   auto plan = nn::prune::plan_channels(*model, {.amount = 0.5, .norm = 1});
//   nn::prune::remove_channels(*model, plan, example_batch);  // checked against the masked model
//   optim::Adam opt(model->named_parameters());               // new parameters: a new optimizer
//
// Note [Channel dependency walk]
// The walk is structural (over known module types), not a trace: it lists the model's leaf
// modules in registration order, descending into the root, Sequential, ModuleList and the
// zoo's sequential models (SmallCNN, MLP, VGG, ResNet), whose forwards run their children in
// that order (flattening before a Linear is implied: a Linear whose in_features is k times the
// channels reads channel c as inputs [c k, (c + 1) k), PyTorch's NCHW flatten). Any other module
// with children is opaque: no channel is pruned across it. After a Conv2d (groups 1) the walk
// passes BatchNorm2d (one, affine), ReLU, ReLU6, GELU, SiLU, Tanh, Identity, Dropout, Flatten and
// the pools (all map a zero channel to zero, which is what makes removal equal to masking) and
// must end in a Conv2d (groups 1) or a Linear; anything else leaves the conv alone (listed in
// ChannelPlan::skipped with the reason). Residual adds: ResNet's BasicBlock and Bottleneck are
// walked inside (conv1 -> bn1 -> conv2, and conv2 -> bn2 -> conv3 in a Bottleneck); channels
// that feed a residual add (a block's last conv, its downsample, and whatever feeds a block)
// are left alone, so both sides of every add keep their channels. remove_channels can check the
// walk's assumption on an example input: the smaller model's output must equal the masked
// model's, else the model is restored and the call fails.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace brisk::nn::prune {

struct ChannelOptions {
  double amount = 0.5;  // fraction of each prunable conv's output channels to remove, [0, 1)
  double norm = 1.0;    // rank filters by their Ln norm: 1 (L1), 2 (L2), ... or infinity
};

// One conv's output channels, the modules they pass, and which of them stay.
struct ChannelGroup {
  std::string conv{};           // the Conv2d whose output channels go ("features.0")
  std::string norm{};           // its BatchNorm2d ("" when none)
  std::string consumer{};       // the Conv2d or Linear that reads them
  int64_t per_channel = 1;      // consumer inputs per channel: 1 for a conv, H*W for a Linear
  int64_t channels = 0;         // before pruning
  std::vector<int64_t> keep{};  // kept channels, ascending
};

struct ChannelPlan {
  std::vector<ChannelGroup> groups{};
  std::vector<std::string> skipped{};  // "layer1.0.conv2: feeds a residual add"
  std::string str() const;
};

// Walks the model (Note [Channel dependency walk]) and picks, for each prunable conv, the
// channels to keep: the (1 - amount) share with the largest Ln norm of the effective filter
// (weight_orig * weight_mask when pruned), ties pruning the lower index first, at least one kept.
ChannelPlan plan_channels(Module& model, const ChannelOptions& options = {});

// The masked model: masks (compress/prune.h, custom_from_mask) on each group's conv weight (dim 0)
// and bias and on its batch norm's weight and bias, so a removed channel is exactly zero.
void mask_channels(Module& model, const ChannelPlan& plan);

// The smaller dense model: rebuilds each group's conv, batch norm and consumer with fewer
// channels (replace_module), copying weights, biases, running statistics and masks (a module
// whose remaining mask is all ones gets a plain parameter). The old parameters are gone, so
// make a new optimizer. With example_input, runs it in eval mode through the masked and the
// rebuilt model and fails (model restored) if they differ.
void remove_channels(Module& model, const ChannelPlan& plan, const Tensor& example_input = {});

// plan_channels then remove_channels; returns the plan.
ChannelPlan prune_channels(Module& model, const ChannelOptions& options = {}, const Tensor& example_input = {});

}  // namespace brisk::nn::prune
