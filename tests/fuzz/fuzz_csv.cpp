// tests/fuzz/fuzz_csv.cpp: libFuzzer target for data::CsvDataset (data/readers.h). The first
// input byte picks the options (bit 0: header row; bits 1-2: label column none / "label" /
// "0" / "y"; bits 3-4: delimiter , ; tab |), the rest is the file. A file that loads has every
// sample read back. Not a fuzzer of the other readers.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/readers.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static brisk::fuzz::ScratchFile file("csv", ".csv");
  const uint8_t opts = data[0];
  brisk::fuzz::write_file(file.path, data + 1, size - 1);
  const bool header = opts & 1;
  static const char* const labels[] = {"", "label", "0", "y"};
  static const char delimiters[] = {',', ';', '\t', '|'};
  const std::string label = labels[(opts >> 1) & 3];
  const char delimiter = delimiters[(opts >> 3) & 3];
  brisk::fuzz::expect_brisk_errors_only([&] {
    brisk::data::CsvDataset csv(file.path, label, header, delimiter);
    for (int64_t i = 0; i < csv.size(); ++i) {
      brisk::data::Example ex = csv.get(i);
      (void)ex.input.sum().item<double>();
      if (ex.target.defined()) (void)ex.target.item<double>();
    }
  });
  return 0;
}
