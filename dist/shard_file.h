// dist/shard_file.h: what the sharded checkpoints of ZeRO (dist/zero.cpp) and FSDP
// (dist/fsdp.cpp) share: a double written so that it reads back bit for bit, and an integer
// read from a shard file's metadata with an error that names the file and the caller.
// Internal to dist/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/error.h"
#include "engine/serialize.h"

namespace brisk::dist::detail {

inline std::string exact(double v) {  // "%.17g": reads back bit for bit
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The integer stored under `key` in f's metadata; `who` names the loader in the error.
inline int64_t meta_int(const SafetensorsFile& f, const std::string& key, const std::string& path, const char* who) {
  auto it = f.metadata.find(key);
  BRISK_CHECK(it != f.metadata.end(), who, ": ", path, " has no '", key, "' (not a file save_sharded wrote)");
  return std::stoll(it->second);
}

}  // namespace brisk::dist::detail
