// interop/pickle.h: the bounded unpickler behind load_torch. It runs a data.pkl program with
// only the opcodes and globals torch.save writes for tensors and containers (protocols 2 to
// 5), calls nothing, and turns the result into a TorchValue tree. Storages come from the
// caller (the zip records); tensors are views on them with the saved offset and strides.
// Not here: the zip container (interop/torch_file.cpp); Python objects of other classes,
// sets, and the legacy (pre-1.6) format are refused, not read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "engine/dtype.h"
#include "engine/storage.h"
#include "interop/torch_value.h"

namespace brisk::interop {

// What one persistent id of data.pkl, ('storage', torch.FloatStorage, key, location, numel),
// asks for: record data/<key>, numel elements of dtype.
struct StorageRef {
  std::string key{};
  DType dtype = DType::F32;
  int64_t numel = 0;
  std::string location{};  // where it lived when saved ("cpu", "cuda:0"); informative only
};

// Returns that storage on the CPU (at least numel elements of dtype, in host byte order),
// or throws brisk::Error. Called once per key.
using StorageLoader = std::function<Storage(const StorageRef&)>;

// The limits that keep a hostile pickle from costing more than its size suggests.
inline constexpr int kPickleMaxDepth = 200;  // nesting of lists, tuples and dicts in the result

// Runs `program` (a whole data.pkl) and returns the object it builds. `what` starts every
// error message ("load_torch: model.pth: data.pkl"); errors also give the opcode's offset.
TorchValue unpickle_torch(std::string_view program, const StorageLoader& load_storage, const std::string& what);

}  // namespace brisk::interop
