// tests/test_util.h: small helpers the test files share: the message of the brisk::Error a
// call throws, and whole-file reads and writes for tests that build hostile files byte by
// byte, and a temporary directory. Not here: the op conformance table (opcheck/spec.h) or CUDA helpers
// (tests/cuda_test.h).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "engine/error.h"

namespace brisk::test {

// The message of the brisk::Error that f throws; "" when it throws none.
template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The whole file as bytes ("" when it cannot be read).
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Replaces the file with `bytes`.
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A fresh directory under the system temp dir (mkdtemp: unique per test process), removed with
// everything in it.
struct TempDir {
  std::filesystem::path path{};
  explicit TempDir(const std::string& prefix = "brisk-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("TempDir: mkdtemp failed for " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `bytes` to `name` in the directory; returns its path.
  std::string file(const std::string& name, const std::string& bytes) const {
    write_bytes(path / name, bytes);
    return file(name);
  }
};

}  // namespace brisk::test
