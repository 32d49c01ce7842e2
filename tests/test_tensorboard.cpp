// tests/test_tensorboard.cpp: TensorBoard event files (train/tensorboard.h): CRC-32C against
// its published check values, the TFRecord framing read back record by record with both CRCs
// verified, the protocol-buffer fields of a scalar found in the bytes, clear errors. The
// round trip through TensorBoard's own Python reader is tests/tensorboard_check.sh (a ctest of
// its own): it runs the case "tensorboard: sample run" below with BRISK_TB_SAMPLE_DIR set and
// checks every value with tests/tensorboard_check.py.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "brisk.h"
#include "tests/test_util.h"
#include "train/tensorboard.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Splits a TFRecord file into its records, checking both masked CRCs of each.
std::vector<std::string> records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    REQUIRE(pos + 12 <= bytes.size());
    uint64_t len = 0;
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&len, bytes.data() + pos, 8);
    std::memcpy(&len_crc, bytes.data() + pos + 8, 4);
    CHECK(len_crc == training::masked_crc32c(bytes.data() + pos, 8));
    REQUIRE(pos + 12 + len + 4 <= bytes.size());
    std::string data = bytes.substr(pos + 12, len);
    std::memcpy(&data_crc, bytes.data() + pos + 12 + len, 4);
    CHECK(data_crc == training::masked_crc32c(data.data(), data.size()));
    out.push_back(data);
    pos += 12 + len + 4;
  }
  return out;
}

// The sample that tests/tensorboard_check.py expects, value for value.
void write_sample(const std::string& dir) {
  training::SummaryWriter w(dir);
  for (int64_t step = 0; step < 5; ++step) {
    w.add_scalar("loss/train", 1.0 / double(step + 1), step, 1000.0 + double(step));
    w.add_scalar("lr", 0.001 * double(step), step, 1000.0 + double(step));
  }
  std::vector<double> v;
  for (int i = 0; i < 1000; ++i) v.push_back(double(i) / 10.0);
  w.add_histogram("weights/fc1", v, 3, 10, 2000.0);
  Tensor t = from_vector({-1.0, 0.0, 0.5, 2.0, NAN}, {5});
  w.add_histogram("weights/tensor", t, 4, 3, 2001.0);
  w.add_text("notes", "hello **brisk**", 7, 3000.0);
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C check values") {
  const char* nine = "123456789";
  CHECK(training::crc32c(nine, 9) == 0xE3069283u);  // the CRC-32C catalogue's check value
  std::string zeros(32, '\0'), ones(32, '\xff');
  CHECK(training::crc32c(zeros.data(), 32) == 0x8A9136AAu);  // RFC 3720, B.4
  CHECK(training::crc32c(ones.data(), 32) == 0x62A8AB43u);
  // Incremental equals one pass.
  CHECK(training::crc32c(nine + 4, 5, training::crc32c(nine, 4)) == 0xE3069283u);
  // The mask: rotate right by 15 and add 0xa282ead8 (mod 2^32).
  uint32_t c = 0xE3069283u;
  CHECK(training::masked_crc32c(nine, 9) == uint32_t(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST_CASE("tensorboard: records are framed and checksummed; a scalar's fields are in the bytes") {
  test::TempDir dir{"brisk-tb"};
  std::string path;
  {
    training::SummaryWriter w(dir.path.string());
    path = w.path();
    w.add_scalar("acc", 0.5, 42, 12.0);
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  std::vector<std::string> recs = records(read_all(path));
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].find("brain.Event:2") != std::string::npos);  // the file-version event
  const std::string& e = recs[1];
  // wall_time: field 1, wire type 1 (key 0x09), then 12.0 as a little-endian double.
  REQUIRE(e.size() > 9);
  CHECK(uint8_t(e[0]) == 0x09);
  double wall = 0;
  std::memcpy(&wall, e.data() + 1, 8);
  CHECK(wall == 12.0);
  CHECK(uint8_t(e[9]) == 0x10);  // step: field 2, varint
  CHECK(uint8_t(e[10]) == 42);
  CHECK(e.find("acc") != std::string::npos);
  float half = 0.5f;
  std::string half_bytes(reinterpret_cast<const char*>(&half), 4);
  CHECK(e.find(std::string("\x15", 1) + half_bytes) != std::string::npos);  // simple_value: field 2, fixed32
}

TEST_CASE("tensorboard: errors") {
  test::TempDir dir{"brisk-tb"};
  training::SummaryWriter w(dir.path.string());
  CHECK_THROWS_WITH_AS(w.add_scalar("", 1.0, 0), doctest::Contains("empty tag"), Error);
  CHECK_THROWS_WITH_AS(w.add_histogram("h", std::vector<double>{1.0}, 0, 0), doctest::Contains("bins"), Error);
  CHECK_THROWS_WITH_AS(w.add_histogram("h", Tensor(), 0), doctest::Contains("undefined"), Error);
  w.close();
  CHECK_THROWS_WITH_AS(w.add_scalar("x", 1.0, 0), doctest::Contains("closed"), Error);
  // A log_dir under a regular file cannot be created.
  std::ofstream(dir.path / "file") << "x";
  CHECK_THROWS_WITH_AS(training::SummaryWriter((dir.path / "file" / "sub").string()),
                       doctest::Contains("cannot create"), Error);
  // Histograms of nothing and of one value repeated are well-formed.
  training::SummaryWriter w2(dir.path.string());
  CHECK_NOTHROW(w2.add_histogram("empty", std::vector<double>{}, 0));
  CHECK_NOTHROW(w2.add_histogram("same", std::vector<double>(10, 3.0), 0));
  CHECK(records(read_all(w2.path())).size() == 3);
}

TEST_CASE("tensorboard: sample run") {
  // With BRISK_TB_SAMPLE_DIR set (tests/tensorboard_check.sh) the sample goes there for
  // TensorBoard's reader; otherwise it is written to a temporary folder and its framing checked.
  if (const char* out = std::getenv("BRISK_TB_SAMPLE_DIR")) {
    write_sample(out);
    return;
  }
  test::TempDir dir{"brisk-tb"};
  write_sample(dir.path.string());
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    ++files;
    CHECK(records(read_all(entry.path().string())).size() == 14);  // version + 10 + 2 + 1
  }
  CHECK(files == 1);
}
