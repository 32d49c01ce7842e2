// tests/fuzz/fuzz_torch_file.cpp: libFuzzer target for brisk's torch.save reader
// (interop/torch_file.h). An input that starts as a pickle does (0x80, PROTO) is a data.pkl
// run straight through the unpickler (interop/pickle.h), with storages of any size up to 4 KiB
// made up on request: mutating a whole .pth file almost always breaks data.pkl's CRC, so this
// is how the unpickler gets fuzzed. Any other input is a whole .pth file read from memory by
// load_torch_bytes (the zip side). Every byte every tensor can reach through its sizes,
// strides and offset is read (a plain XOR over a contiguous copy), so a view that slipped past
// the bounds checks shows up as an ASan report; the flattened state_dict is made too.
// Seeds: tests/fuzz/corpus/torch_file (files torch.save wrote and their data.pkl programs).
// Not a test of the values (tests/test_torch_file.cpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/storage.h"
#include "interop/pickle.h"
#include "interop/torch_file.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

uint8_t touch(const brisk::interop::TorchValue& v) {
  using Kind = brisk::interop::TorchValue::Kind;
  uint8_t x = 0;
  if (v.kind() == Kind::Tensor) {
    brisk::Tensor c = v.as_tensor().contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    const size_t n = size_t(c.numel()) * c.element_size();
    for (size_t i = 0; i < n; ++i) x ^= p[i];
  } else if (v.is_sequence()) {
    for (const auto& item : v.items()) x ^= touch(item);
  } else if (v.is_dict()) {
    for (const auto& entry : v.entries()) x ^= touch(entry.second);
  }
  return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  brisk::fuzz::expect_brisk_errors_only([&] {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    brisk::interop::TorchValue v;
    if (size > 0 && data[0] == 0x80) {
      const brisk::interop::StorageLoader loader = [](const brisk::interop::StorageRef& ref) {
        const uint64_t n = uint64_t(ref.numel) * brisk::dtype_size(ref.dtype);
        BRISK_CHECK(ref.numel <= 4096 && n <= 4096, "fuzz: storage '", ref.key, "' larger than 4 KiB");
        brisk::Storage s = brisk::make_storage(n, brisk::Device::cpu());
        if (n) std::memset(s->data, 0x3c, n);
        return s;
      };
      v = brisk::interop::unpickle_torch(bytes, loader, "fuzz: data.pkl");
    } else {
      v = brisk::interop::load_torch_bytes(bytes, "fuzz.pth");
    }
    volatile uint8_t sink = touch(v);
    (void)sink;
    (void)brisk::interop::flatten_tensors(v);
  });
  return 0;
}
