// engine/serialize.h: safetensors files, the weight format PyTorch and Hugging Face exchange:
// an 8-byte little-endian header length N, N bytes of JSON (name -> dtype, shape,
// data_offsets; optional "__metadata__" of strings), then the raw little-endian bytes.
// Writes are atomic (temp file, fsync, rename, fsync of the directory). Reads check every
// header field and size before touching data: a truncated or hostile file is a brisk::Error
// naming the file and the field. Not here: modules (nn/serialize_module.h), training
// checkpoints, memory mapping (loads copy into fresh tensors).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/tensor.h"

namespace brisk {

// The same type as nn::NamedTensors (a module's state_dict): names in a chosen order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Headers longer than this are refused (the limit of the reference implementation).
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Writes `tensors` to `path`, replacing it atomically. Tensors may live on any device and have
// any strides (each is copied to CPU, row-major); the header lists them in the given order,
// their data goes back to back by element size, largest first (so each is aligned, with no
// padding), and the header is padded with spaces to a multiple of 8 bytes. Names must be
// unique and not "__metadata__". Metadata is written only when not empty. On any failure the
// temp file is removed and an existing file at `path` is left as it was.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes `bytes` to `path`, replacing it atomically the same way (temp file in the same
// folder, fsync, rename, fsync of the folder): a crash leaves the old file or the new one.
void write_file_atomic(const std::string& path, std::string_view bytes);

struct SafetensorsFile {
  NamedTensors tensors{};  // in the header's order: brisk's own files keep the saved order
  std::map<std::string, std::string> metadata{};
};

// Reads a whole file into fresh tensors on `device`. The file must be as the format says:
// unique names, a "__metadata__" of strings only, and data ranges that tile the data section
// exactly (no hole, overlap or trailing bytes). A tensor need not start at a multiple of its
// element size (the reference library loads such files too): its bytes are read into fresh,
// aligned memory.
// convert_to (a floating dtype): floating tensors are converted to it; integer and Bool
// tensors keep their dtype. Bool bytes other than 0 read as true.
SafetensorsFile load_safetensors(const std::string& path, Device device = Device::cpu(),
                                 std::optional<DType> convert_to = std::nullopt);

// load_safetensors on the CPU, reading each tensor's bytes straight into into(name) where that
// is a contiguous CPU tensor of the entry's dtype and shape (returned as the entry, its version
// bumped); any other (undefined, or of another dtype, shape, device or layout) gets a fresh
// tensor as load_safetensors gives. nn::load_module reads a model's weights this way, with no
// second copy.
SafetensorsFile load_safetensors_into(const std::string& path,
                                      const std::function<Tensor(const std::string& name)>& into);

// The header alone, checked as load_safetensors checks it (the data is not read): each
// tensor's name, shape and dtype in the header's order.
struct SafetensorsEntry {
  std::string name{};
  Shape shape{};
  DType dtype = DType::F32;
};
std::vector<SafetensorsEntry> safetensors_entries(const std::string& path);

}  // namespace brisk
