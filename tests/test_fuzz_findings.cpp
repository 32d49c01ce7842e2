// tests/test_fuzz_findings.cpp: what the fuzz targets (tests/fuzz/) found, replayed as plain
// cases so the ASan/UBSan pass of tests/run.sh keeps them fixed: a CSV label column whose
// values do not fit int64_t (1e300, inf, nan). Not the fuzzers themselves (tests/fuzz.sh) or
// the readers' ordinary behaviour (tests/test_data.cpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "brisk.h"
#include "data/readers.h"

using namespace brisk;
namespace fs = std::filesystem;

TEST_CASE("fuzz findings: CSV labels out of int64_t's range make an F32 target, not an overflow") {
  const fs::path path = fs::temp_directory_path() / ("brisk-fuzz-finding-" + std::to_string(::getpid()) + ".csv");
  for (const char* big : {"1e300", "-9.3e18", "9223372036854775808", "inf", "nan"}) {
    {
      std::ofstream out(path);
      out << "x,label\n1,2\n3," << big << "\n";
    }
    data::CsvDataset csv(path.string(), "label");
    REQUIRE(csv.size() == 2);
    CHECK(csv.get(1).target.dtype() == DType::F32);
    const double v = csv.get(1).target.item<double>();
    CHECK((std::isnan(v) || std::fabs(v) > 9e18));
  }
  {
    std::ofstream out(path);
    out << "x,label\n1,-9223372036854775808\n";  // exactly -2^63: still an integer
  }
  CHECK(data::CsvDataset(path.string(), "label").get(0).target.dtype() == DType::I64);
  fs::remove(path);
}
