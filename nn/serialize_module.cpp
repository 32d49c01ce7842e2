// nn/serialize_module.cpp: save_module / load_module, a state_dict through a safetensors file.
#include "nn/serialize_module.h"

namespace brisk::nn {

void save_module(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

// The header is checked against the module first (a strict load that would fail changes
// nothing); then the file's bytes go straight into the module's parameters and buffers where
// their dtype and layout allow, and load_state_dict copies the rest (a tensor read in place is
// its own source: that copy is skipped).
LoadReport load_module(Module& module, const std::string& path, bool strict) {
  const NamedTensors state = module.state_dict();
  std::map<std::string, Tensor> mine(state.begin(), state.end());
  if (strict) {  // the same report, in the same order, as load_state_dict's
    std::map<std::string, Shape> given;
    for (const SafetensorsEntry& e : safetensors_entries(path)) given.emplace(e.name, e.shape);
    LoadReport report;
    for (const auto& [name, t] : state) {
      auto it = given.find(name);
      if (it == given.end()) {
        report.missing.push_back(name);
        continue;
      }
      if (!(it->second == t.sizes()))
        report.shape_mismatch.push_back(detail::cat(name, ": file ", it->second, " vs module ", t.sizes()));
      given.erase(it);
    }
    for (const auto& [name, shape] : given) report.unexpected.push_back(name);
    BRISK_CHECK(report.ok(), "load_module(", path, "): load_state_dict (", module.type_name(), "): ", report.str());
  }
  SafetensorsFile file = load_safetensors_into(path, [&](const std::string& name) {
    auto it = mine.find(name);
    return it == mine.end() ? Tensor() : it->second;
  });
  try {
    return module.load_state_dict(file.tensors, strict);
  } catch (const Error& e) {
    BRISK_FAIL("load_module(", path, "): ", e.what());
  }
}

}  // namespace brisk::nn
