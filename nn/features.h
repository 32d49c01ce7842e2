// nn/features.h: named intermediate outputs of any model, for a backbone that feeds several
// heads, feature-pyramid necks, perceptual losses and probing. The counterpart of torchvision's
// create_feature_extractor, built on forward hooks (nn/module.h) instead of a traced graph, so
// its nodes are modules ("layer2", "layer3.1.conv1"), not functional ops.
//
//   nn::FeatureExtractor fx(resnet, {{"layer2", "c3"}, {"layer4", "c5"}});
//   nn::TensorDict f = fx(images);   // f["c3"], f["c5"]; the layers after layer4 do not run
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace brisk::nn {

// Every node a FeatureExtractor can return: the dotted path of each module below `model`, in
// registration order (torchvision's get_graph_node_names, modules only).
std::vector<std::string> feature_node_names(Module& model);

struct FeatureOptions {
  // Stop the forward once every requested node has run (torchvision drops the graph after the
  // last node; here the rest of the forward is skipped by unwinding out of it). Off: the whole
  // forward runs, and the model's output is returned as "output" too.
  bool stop_early = true;
};

// A requested node: a module's dotted path, and the name to return its output under (the path
// itself unless given): "layer2", or {"layer4", "c5"}.
struct FeatureNode {
  FeatureNode(const char* p) : path(p), name(p) {}             // NOLINT: implicit, for {"a", "b"} lists
  FeatureNode(std::string p) : path(p), name(std::move(p)) {}  // NOLINT
  FeatureNode(std::string p, std::string n) : path(std::move(p)), name(std::move(n)) {}
  std::string path{}, name{};
};

// Calls `model` and returns the outputs of the requested modules by name. A node that returns
// several tensors (forward_dict) gives one entry per tensor, "<name>.<key>". A module that runs
// more than once in one forward gives its first output. The model is shared, not copied: its
// state_dict, to(), train()/eval() and parameters are the extractor's. Not for concurrent calls
// of one extractor; plain calls of the model while it exists are unaffected.
class FeatureExtractor {
 public:
  FeatureExtractor(ModulePtr model, std::vector<FeatureNode> nodes, FeatureOptions options = {});
  ~FeatureExtractor();  // removes its hooks
  FeatureExtractor(const FeatureExtractor&) = delete;
  FeatureExtractor& operator=(const FeatureExtractor&) = delete;

  TensorDict operator()(const Tensor& x);
  TensorDict operator()(const TensorDict& inputs);
  Module& model() { return *model_; }
  const std::vector<FeatureNode>& nodes() const { return nodes_; }

 private:
  template <class In>
  TensorDict run(const In& inputs);

  ModulePtr model_;
  std::vector<FeatureNode> nodes_;
  FeatureOptions options_;
  std::vector<std::pair<Module*, int>> hooks_;
  std::vector<TensorDict> captured_;  // per node, during a call
  size_t remaining_ = 0;              // nodes not yet captured in this call
  bool active_ = false;
};

}  // namespace brisk::nn
