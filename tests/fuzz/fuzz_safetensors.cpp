// tests/fuzz/fuzz_safetensors.cpp: libFuzzer target for brisk::load_safetensors
// (engine/serialize.h): the input is the whole file. A file that loads is loaded a second time
// with conversion to F32, and every byte of every tensor is read (a plain XOR, not an op: an
// I64 sum could overflow), so a wrong size or offset that slipped through shows up as an ASan
// report. Not a test of the writer (tests/test_serialize.cpp).
#include <cstddef>
#include <cstdint>

#include "engine/serialize.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

// XOR of every byte of every tensor: reads all of them, whatever the dtype.
uint8_t touch(const brisk::SafetensorsFile& st) {
  uint8_t x = 0;
  for (const auto& [name, t] : st.tensors) {
    brisk::Tensor c = t.contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    const size_t n = size_t(c.numel()) * brisk::dtype_size(c.dtype());
    for (size_t i = 0; i < n; ++i) x ^= p[i];
  }
  return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::ScratchFile file("safetensors", ".safetensors");
  brisk::fuzz::write_file(file.path, data, size);
  brisk::fuzz::expect_brisk_errors_only([&] {
    brisk::SafetensorsFile st = brisk::load_safetensors(file.path);
    volatile uint8_t sink = touch(st);
    st = brisk::load_safetensors(file.path, brisk::Device::cpu(), brisk::DType::F32);
    sink = touch(st);
    (void)sink;
  });
  return 0;
}
