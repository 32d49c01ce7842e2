// nn/serialize_module.h: a module's state_dict to and from a safetensors file, with the keys
// PyTorch gives the same architecture (so weights move between the two). Thin wrappers over
// engine/serialize.h and Module::state_dict / load_state_dict. Not here: optimizer state or
// whole training checkpoints.
#pragma once

#include <map>
#include <string>

#include "engine/serialize.h"
#include "nn/module.h"

namespace brisk::nn {

// Parameters and persistent buffers, in state_dict order, written atomically.
void save_module(const Module& module, const std::string& path,
                 const std::map<std::string, std::string>& metadata = {});

// Copies the file's tensors into the module in place (its devices and dtypes are kept).
// strict: a missing, unexpected or mis-shaped key is an error naming the file and the keys;
// otherwise the matching keys are loaded and the rest reported.
LoadReport load_module(Module& module, const std::string& path, bool strict = true);

}  // namespace brisk::nn
