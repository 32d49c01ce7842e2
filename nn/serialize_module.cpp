// nn/serialize_module.cpp: save_module / load_module, a state_dict through a safetensors file.
#include "nn/serialize_module.h"

namespace brisk::nn {

void save_module(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

LoadReport load_module(Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = load_safetensors(path);
  try {
    return module.load_state_dict(file.tensors, strict);
  } catch (const Error& e) {
    BRISK_FAIL("load_module(", path, "): ", e.what());
  }
}

}  // namespace brisk::nn
