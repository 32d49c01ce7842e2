// tests/fuzz/fuzz_idx_gz.cpp: libFuzzer target for data::read_idx (data/readers.h) on gzip'd
// files: the input is an IDX file's uncompressed bytes, written gzip-compressed (zlib) to a
// file named .gz, so mutations hit the IDX header and sizes behind the decompression path.
// Not a fuzzer of the gzip format itself: fuzz_idx.cpp feeds mutated .gz streams.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "data/readers.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::ScratchFile file("idx", ".idx.gz");
  gzFile gz = gzopen(file.path.c_str(), "wb1");
  if (!gz) std::abort();
  if (size && gzwrite(gz, data, unsigned(size)) != int(size)) std::abort();
  if (gzclose(gz) != Z_OK) std::abort();
  brisk::fuzz::expect_brisk_errors_only([&] {
    brisk::Tensor t = brisk::data::read_idx(file.path);
    (void)t.sum().item<double>();
  });
  return 0;
}
