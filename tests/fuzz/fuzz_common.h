// tests/fuzz/fuzz_common.h: what every libFuzzer target in tests/fuzz shares: a scratch file
// per process (the readers take paths) and the rule for outcomes: a brisk::Error is the
// expected answer to a bad file and is swallowed; any other exception aborts, so libFuzzer
// records the input as a crash. Not a test framework and not part of the library: only the
// fuzz targets include it (BRISK_FUZZ=ON, tests/fuzz.sh).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <typeinfo>

#include "engine/error.h"

namespace brisk::fuzz {

// A file name of this process: /dev/shm when it exists (no disk traffic), else the temp folder.
inline std::string scratch_path(const std::string& stem, const std::string& ext) {
  namespace fs = std::filesystem;
  fs::path dir = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  return (dir / ("brisk-fuzz-" + stem + "-" + std::to_string(::getpid()) + ext)).string();
}

// One scratch file, removed when the process ends normally (a crash leaves it in /dev/shm).
struct ScratchFile {
  std::string path;
  ScratchFile(const std::string& stem, const std::string& ext) : path(scratch_path(stem, ext)) {}
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
};

// Replaces `path` with exactly `size` bytes of `data`.
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    std::abort();
  }
  if (size && std::fwrite(data, 1, size, f) != size) {
    std::perror(path.c_str());
    std::abort();
  }
  std::fclose(f);
}

// Runs `f`: brisk::Error is fine, any other exception is a finding (printed, then abort()).
template <class F>
void expect_brisk_errors_only(F&& f) {
  try {
    f();
  } catch (const brisk::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FUZZ FINDING: exception %s (not brisk::Error): %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "FUZZ FINDING: exception of a non-std type\n");
    std::abort();
  }
}

}  // namespace brisk::fuzz
