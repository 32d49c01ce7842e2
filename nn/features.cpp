// nn/features.cpp: FeatureExtractor (nn/features.h): one dict forward hook per requested module
// captures its outputs during the extractor's own calls; with stop_early, the hook of the last
// node to run unwinds out of the forward with a private exception the extractor catches.
#include "nn/features.h"

#include <algorithm>

#include "engine/error.h"

namespace brisk::nn {
namespace {

// Thrown by the last node's hook to skip the rest of the forward (stop_early); never escapes.
struct StopForward {};

}  // namespace

std::vector<std::string> feature_node_names(Module& model) {
  std::vector<std::string> names;
  for (const auto& [path, m] : model.named_modules()) {
    if (!path.empty()) names.push_back(path);
  }
  return names;
}

FeatureExtractor::FeatureExtractor(ModulePtr model, std::vector<FeatureNode> nodes, FeatureOptions options)
    : model_(std::move(model)), nodes_(std::move(nodes)), options_(options) {
  BRISK_CHECK(model_ != nullptr, "FeatureExtractor: the model is null");
  BRISK_CHECK(!nodes_.empty(), "FeatureExtractor: no nodes requested (feature_node_names lists them)");
  std::vector<std::string> paths, names;
  for (const auto& [path, name] : nodes_) {
    BRISK_CHECK(!name.empty(), "FeatureExtractor: node '", path, "' has an empty name");
    BRISK_CHECK(std::find(paths.begin(), paths.end(), path) == paths.end(), "FeatureExtractor: node '", path,
                "' requested twice");
    BRISK_CHECK(std::find(names.begin(), names.end(), name) == names.end(), "FeatureExtractor: the name '", name,
                "' is given to two nodes");
    BRISK_CHECK(options_.stop_early || name != "output",
                "FeatureExtractor: the name 'output' is the model's output when stop_early is off");
    paths.push_back(path);
    names.push_back(name);
  }
  const std::vector<std::string> known = feature_node_names(*model_);
  for (const std::string& path : paths) {
    if (std::find(known.begin(), known.end(), path) != known.end()) continue;
    std::string list;
    for (size_t i = 0; i < known.size() && i < 40; ++i) list += (i ? ", " : "") + known[i];
    if (known.size() > 40) list += ", ... (" + std::to_string(known.size()) + " in all)";
    BRISK_FAIL("FeatureExtractor: ", model_->type_name(), " has no module '", path,
               "'; its nodes are: ", list.empty() ? "none" : list);
  }
  captured_.resize(nodes_.size());
  try {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      Module& m = model_->submodule(nodes_[i].path);
      const int h = m.register_dict_forward_hook([this, i](Module&, const TensorDict&, TensorDict& out) {
        if (!active_ || !captured_[i].empty()) return;  // not our call, or ran before: keep the first
        captured_[i] = out;
        if (--remaining_ == 0 && options_.stop_early) throw StopForward{};
      });
      hooks_.emplace_back(&m, h);
    }
  } catch (...) {
    for (auto& [m, h] : hooks_) m->remove_hook(h);
    throw;
  }
}

FeatureExtractor::~FeatureExtractor() {
  for (auto& [m, h] : hooks_) m->remove_hook(h);
}

TensorDict FeatureExtractor::operator()(const Tensor& x) { return run(x); }
TensorDict FeatureExtractor::operator()(const TensorDict& inputs) { return run(inputs); }

template <class In>
TensorDict FeatureExtractor::run(const In& inputs) {
  BRISK_CHECK(!active_, "FeatureExtractor: called again from inside its own forward");
  for (TensorDict& c : captured_) c = TensorDict();
  remaining_ = nodes_.size();
  active_ = true;
  TensorDict result;
  try {
    if constexpr (std::is_same_v<In, Tensor>) {
      Tensor y = (*model_)(inputs);
      if (!options_.stop_early) result.set("output", y);
    } else {
      TensorDict y = (*model_)(inputs);
      if (!options_.stop_early) {
        for (const auto& [k, t] : y) result.set(y.size() == 1 ? "output" : "output." + k, t);
      }
    }
  } catch (const StopForward&) {
  } catch (...) {
    active_ = false;
    throw;
  }
  active_ = false;
  TensorDict out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto& [path, name] = nodes_[i];
    BRISK_CHECK(!captured_[i].empty(), "FeatureExtractor: module '", path, "' (", model_->submodule(path).type_name(),
                ") did not run in ", model_->type_name(), "'s forward");
    if (captured_[i].size() == 1) {
      out.set(name, captured_[i].begin()->second);
    } else {
      for (const auto& [k, t] : captured_[i]) out.set(name + "." + k, t);
    }
    captured_[i] = TensorDict();
  }
  for (const auto& [k, t] : result) out.set(k, t);
  return out;
}

}  // namespace brisk::nn
