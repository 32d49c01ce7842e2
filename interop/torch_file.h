// interop/torch_file.h: PyTorch checkpoints without Python. load_torch reads what torch.save
// writes (the zip format of torch >= 1.6: <folder>/data.pkl plus one record per storage)
// into a TorchValue tree; load_torch_state_dict flattens a state_dict out of it for
// Module::load_state_dict. The pickle runs on a bounded machine that knows only the globals
// torch.save writes for tensors and containers and calls nothing (Note [A bounded unpickler]
// in interop/pickle.cpp). Not here: writing .pth files, the legacy (pre-1.6) format,
// TorchScript archives (torch.jit.save), tensor subclasses and arbitrary Python objects, all
// refused with an error that says so.
#pragma once

#include <string>
#include <string_view>

#include "engine/device.h"
#include "engine/serialize.h"
#include "interop/torch_value.h"

namespace brisk::interop {

// Reads a torch.save file. Tensors sharing a storage in the file (views: slices with an
// offset, transposes, ...) come out as views on one shared CPU Storage with the saved
// offsets and strides, as torch.load gives them, whatever device they were saved from; with
// another map_location each is then copied there (dense; the sharing is lost). F32, F64,
// F16, BF16, I64, I32, I8, U8 and Bool storages are read (big-endian files are
// byte-swapped); other dtypes (int16, complex, ...) are errors naming the storage type.
// Parameters come back as plain tensors (no requires_grad); a state_dict's _metadata
// (module versions) is dropped.
TorchValue load_torch(const std::string& path, Device map_location = Device::cpu());

// The same from a file's bytes in memory; `name` stands for the path in errors.
TorchValue load_torch_bytes(std::string_view bytes, const std::string& name = "<memory>",
                            Device map_location = Device::cpu());

// The tensors of a torch.save file as a state_dict: dicts (nested ones too, as in
// {"model": {...}, "optimizer": {...}}), lists and tuples are walked in order, their keys or
// indices joined with '.' ("model.fc.weight", "optimizer.state.0.exp_avg"); leaves other than
// tensors (ints, strings, None, ...) are skipped. key (not empty): only the top-level dict's
// entry `key` is walked, and names start below it ("model" gives "fc.weight"). Then
// module.load_state_dict(load_torch_state_dict(path)) loads a model saved by PyTorch.
NamedTensors load_torch_state_dict(const std::string& path, const std::string& key = "",
                                   Device map_location = Device::cpu());

// The same walk over a value already read.
NamedTensors flatten_tensors(const TorchValue& value);

}  // namespace brisk::interop

// The public entry points, as brisk::load_torch(path) and brisk::load_torch_state_dict(path).
namespace brisk {
using interop::load_torch;
using interop::load_torch_state_dict;
using interop::TorchValue;
}  // namespace brisk
