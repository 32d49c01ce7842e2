// tests/fuzz/fuzz_idx.cpp: libFuzzer target for data::read_idx (data/readers.h) on the bytes as
// given: read_idx goes through zlib, which passes plain files through and inflates gzip ones,
// so the seeds hold both raw IDX files and .gz files (mutated gzip streams: bad CRCs, cut
// members, trailing garbage). Not the IDX-inside-gzip target: that is fuzz_idx_gz.cpp.
#include <cstddef>
#include <cstdint>

#include "data/readers.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::ScratchFile file("idx", ".idx");
  brisk::fuzz::write_file(file.path, data, size);
  brisk::fuzz::expect_brisk_errors_only([&] {
    brisk::Tensor t = brisk::data::read_idx(file.path);
    (void)t.sum().item<double>();
  });
  return 0;
}
