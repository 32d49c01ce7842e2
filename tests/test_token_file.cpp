// tests/test_token_file.cpp: token files (text/token_file.h): files written by llm.c's own
// writer (tests/data/tokens: dev/data/data_common.py's write_datafile, GPT-2's uint16 and
// LLaMA-3's uint32 formats, ids (i * 7919) % 50257 and (i * 104729) % 128256 for i < 300) read
// back; brisk's writer gives those bytes; raw files; the window dataset through the loader
// (workers, seed, resume); malformed files and ids.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "tests/paths.h"
#include "tests/test_util.h"
#include "text/token_file.h"

using namespace brisk;
using text::TokenDType;
using text::TokenFile;

namespace {

std::filesystem::path tokens_dir() { return ::brisk::test::data_dir() / "tokens"; }

std::string tmp(const std::string& name) { return (std::filesystem::temp_directory_path() / name).string(); }

std::vector<int64_t> llmc_ids(int64_t mult, int64_t mod) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 300; ++i) v.push_back((i * mult) % mod);
  return v;
}

}  // namespace

TEST_CASE("token file: llm.c's files read back, and brisk writes the same bytes") {
  struct Case {
    const char* file;
    int64_t mult, mod;
    TokenDType dtype;
  };
  for (const Case& c : {Case{"llmc_gpt2.bin", 7919, 50257, TokenDType::U16},
                        Case{"llmc_llama3.bin", 104729, 128256, TokenDType::U32}}) {
    CAPTURE(c.file);
    auto f = TokenFile::open((tokens_dir() / c.file).string());
    const auto want = llmc_ids(c.mult, c.mod);
    CHECK(f->size() == 300);
    CHECK(f->dtype() == c.dtype);
    CHECK(f->slice(0, 300).to_vector<int64_t>() == want);
    CHECK(f->at(299) == want[299]);
    const std::string out = tmp(std::string("brisk_") + c.file);
    text::write_token_file(out, want);  // the dtype follows from the largest id
    CHECK(test::read_bytes(out) == test::read_bytes(tokens_dir() / c.file));
    std::filesystem::remove(out);
  }
}

TEST_CASE("token file: raw files, explicit dtypes and the edges") {
  const std::string path = tmp("brisk_tokens_raw.bin");
  {
    std::ofstream f(path, std::ios::binary);
    const unsigned char bytes[] = {1, 0, 0xff, 0xff, 0x34, 0x12};
    f.write(reinterpret_cast<const char*>(bytes), sizeof bytes);
  }
  auto raw = TokenFile::open(path, TokenDType::U16);
  CHECK(raw->slice(0, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 65535, 0x1234});
  CHECK_THROWS_WITH_AS(TokenFile::open(path, TokenDType::U32), doctest::Contains("multiple of 4 bytes"), Error);
  CHECK_THROWS_WITH_AS(TokenFile::open(path), doctest::Contains("too short for llm.c's 1024-byte header"), Error);
  // Small ids forced to uint32; an empty file of ids.
  text::write_token_file(path, std::vector<int64_t>{1, 2, 3}, TokenDType::U32);
  auto u32 = TokenFile::open(path);
  CHECK(u32->dtype() == TokenDType::U32);
  CHECK(u32->slice(1, 2).to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  text::write_token_file(path, std::vector<int64_t>{});
  CHECK(TokenFile::open(path)->size() == 0);
  CHECK_THROWS_WITH_AS(text::write_token_file(path, std::vector<int64_t>{70000}, TokenDType::U16),
                       doctest::Contains("does not fit uint16"), Error);
  CHECK_THROWS_WITH_AS(text::write_token_file(path, std::vector<int64_t>{3, -1}), doctest::Contains("is negative"),
                       Error);
  CHECK(TokenFile::open(path)->size() == 0);  // a failed write left the file as it was
  std::filesystem::remove(path);
}

TEST_CASE("token file: malformed headers are refused with what is wrong") {
  std::string good = test::read_bytes(tokens_dir() / "llmc_gpt2.bin");
  const std::string path = tmp("brisk_tokens_bad.bin");
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  std::string bad = good;
  bad[0] = 7;
  write(bad);
  CHECK_THROWS_WITH_AS(TokenFile::open(path), doctest::Contains("is not a token file's"), Error);
  bad = good;
  bad[4] = 2;  // version 2 with the uint16 magic
  write(bad);
  CHECK_THROWS_WITH_AS(TokenFile::open(path), doctest::Contains("version 2"), Error);
  write(good.substr(0, good.size() - 1));  // truncated
  CHECK_THROWS_WITH_AS(TokenFile::open(path), doctest::Contains("the header says 300 ids, but 599 bytes follow"),
                       Error);
  bad = good;
  bad[11] = char(0x80);  // a negative count
  write(bad);
  CHECK_THROWS_AS(TokenFile::open(path), Error);
  CHECK_THROWS_WITH_AS(TokenFile::open(path + ".missing"), doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(TokenFile::open(std::filesystem::temp_directory_path().string()),
                       doctest::Contains("not a regular file"), Error);
  std::filesystem::remove(path);
}

TEST_CASE("token dataset: windows of T + 1 through the loader, seeded and resumable") {
  const std::string path = tmp("brisk_tokens_ds.bin");
  std::vector<int64_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  text::write_token_file(path, ids);
  auto file = TokenFile::open(path);
  auto ds = std::make_shared<text::TokenDataset>(file, 16);
  CHECK(ds->size() == (1000 - 17) / 16 + 1);
  data::Example e = ds->get(3);
  CHECK(e.input.to_vector<int64_t>().front() == 48);
  CHECK(e.target.to_vector<int64_t>().back() == 48 + 16);
  CHECK(text::TokenDataset(file, 16, 4).size() == (1000 - 17) / 4 + 1);
  CHECK_THROWS_WITH_AS(ds->get(ds->size()), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(text::TokenDataset(file, 1000), doctest::Contains("fewer than one window"), Error);

  auto batches = [&](int workers, std::optional<data::LoaderState> from) {
    data::DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .num_workers = workers, .seed = 9});
    if (from) loader.load_state(*from);
    std::vector<std::vector<int64_t>> out;
    for (auto& b : loader) {
      CHECK(b.input.shape() == Shape{b.input.size(0), 16});
      const auto in = b.input.to_vector<int64_t>(), tg = b.target.to_vector<int64_t>();
      for (size_t i = 0; i < in.size(); ++i) CHECK(tg[i] == in[i] + 1);  // targets are the next tokens
      out.push_back(in);
    }
    return out;
  };
  const auto serial = batches(0, std::nullopt);
  CHECK(serial.size() == size_t((ds->size() + 3) / 4));
  CHECK(batches(2, std::nullopt) == serial);
  const auto resumed = batches(2, data::LoaderState{0, 5});
  REQUIRE(resumed.size() == serial.size() - 5);
  CHECK(std::equal(resumed.begin(), resumed.end(), serial.begin() + 5));
  std::filesystem::remove(path);
}
