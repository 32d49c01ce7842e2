// engine/env.h: the environment report (brisk::env_report(), the `brisk_env` program in
// examples/env, like torch.utils.collect_env): CPU model and vector features, cores, memory,
// threads, compiler and flags, library versions, what brisk was built with, and from each
// linked library a section of its own (CUDA driver, runtime, cuBLAS, cuDNN and every GPU from
// brisk_cuda; MPI and NCCL from dist), plus checks of whether each device runs a requested
// 16-bit dtype natively (the guide's section 5). Sections come from the libraries that are in
// the program (add_env_section, Note [Backend libraries] in engine/backend.cpp), so the engine never
// calls CUDA or MPI itself. Not here: the profiler, the allocator's statistics.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/dtype.h"

namespace brisk {

struct EnvOptions {
  // Check that every device present runs this dtype natively (F16 or BF16); none by default.
  std::optional<DType> check_dtype = std::nullopt;
  // Open cuBLASLt and cuDNN to report their versions (they are otherwise loaded on first use;
  // cuBLASLt alone adds ~150 MB of resident memory, Note [Lazy CUDA libraries]).
  bool libraries = true;
};

struct EnvEntry {
  std::string key{};
  std::string value{};
};

struct EnvCheck {
  bool ok = false;
  std::string message{};  // "bf16 on cuda:0 (NVIDIA H200, sm_90): native", or why not
};

struct EnvSection {
  std::string name{};  // "brisk", "cpu", "cuda", "mpi", ...
  std::vector<EnvEntry> entries{};
  std::vector<EnvCheck> checks{};
};

struct EnvReport {
  std::vector<EnvSection> sections{};
  // The value of `key` in section `section`; nullptr when absent.
  const std::string* find(const std::string& section, const std::string& key) const;
  bool all_checks_ok() const;
  std::string to_string() const;  // the full report, one "key: value" line per entry
  std::string summary() const;    // one line for the start of a training run
};

EnvReport env_report(const EnvOptions& options = {});

// Adds a section maker; libraries call it from a static initializer or their backend's
// registrar. Sections appear in the order added, after the engine's own ("brisk", "cpu").
using EnvSectionFn = EnvSection (*)(const EnvOptions& options);
void add_env_section(EnvSectionFn fn);

}  // namespace brisk
