// tests/test_util.h: small helpers the test files share: the message of the brisk::Error a
// call throws, and whole-file reads and writes for tests that build hostile files byte by
// byte. Not here: the op conformance table (opcheck/spec.h) or CUDA helpers
// (tests/cuda_test.h).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
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

}  // namespace brisk::test
