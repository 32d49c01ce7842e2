// engine/env.cpp: env_report() and the engine's own sections: "brisk" (version, build) and
// "cpu" (model, features, cores, memory, threads), read from /proc on Linux.
#include "engine/env.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/backend.h"
#include "engine/dispatch.h"
#include "engine/threads.h"

#ifndef BRISK_BUILD_TYPE
#define BRISK_BUILD_TYPE "unknown"
#endif
#ifndef BRISK_BUILD_FLAGS
#define BRISK_BUILD_FLAGS ""
#endif
#ifndef BRISK_VERSION
#define BRISK_VERSION "unknown"
#endif

namespace brisk {

namespace {

std::mutex g_mu;
std::vector<EnvSectionFn>& section_fns() {
  static std::vector<EnvSectionFn> fns;
  return fns;
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown";
#endif
}

// The first line of /proc/cpuinfo starting with `key`, after its colon.
std::string cpuinfo(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + (colon + 1 < line.size() ? 2 : 1));
    }
  }
  return "";
}

std::string meminfo_gib(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string name;
  long long kib = 0;
  std::string unit;
  while (f >> name >> kib >> unit) {
    if (name == key + ":") {
      std::ostringstream os;
      os.precision(3);
      os << double(kib) / (1 << 20) << " GiB";
      return os.str();
    }
  }
  return "unknown";
}

EnvSection brisk_section() {
  EnvSection s{"brisk"};
  s.entries.push_back({"version", BRISK_VERSION});
  s.entries.push_back({"build type", BRISK_BUILD_TYPE});
  s.entries.push_back({"compiler", compiler()});
  s.entries.push_back({"C++ standard", std::to_string(__cplusplus)});
  s.entries.push_back({"flags", BRISK_BUILD_FLAGS});
  std::string backends = "cpu";
  if (find_backend(DeviceType::CUDA)) backends += ", cuda";
  s.entries.push_back({"backends linked", backends});
#ifdef _OPENMP
  s.entries.push_back({"OpenMP", std::to_string(_OPENMP)});
#endif
  return s;
}

EnvSection cpu_section() {
  EnvSection s{"cpu"};
  std::string model = cpuinfo("model name");
  s.entries.push_back({"model", model.empty() ? "unknown" : model});
  std::string flags = " ";
  flags += cpuinfo("flags");
  flags += ' ';
  std::string features;
  // Names as /proc/cpuinfo spells them; the ones brisk's kernels choose paths by.
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"}) {
    std::string word = std::string(" ") + f + " ";
    if (flags.find(word) == std::string::npos) continue;
    if (!features.empty()) features += ' ';
    features += f;
  }
  s.entries.push_back({"features", features.empty() ? "none found" : features});
  s.entries.push_back({"logical cores", std::to_string(std::thread::hardware_concurrency())});
  s.entries.push_back({"memory", meminfo_gib("MemTotal") + " total, " + meminfo_gib("MemAvailable") + " available"});
  s.entries.push_back({"OpenMP max threads", std::to_string(omp_get_max_threads())});
  s.entries.push_back({"brisk threads", std::to_string(get_num_threads())});
  return s;
}

}  // namespace

void add_env_section(EnvSectionFn fn) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (EnvSectionFn f : section_fns()) {
    if (f == fn) return;  // a registrar run twice adds its section once
  }
  section_fns().push_back(fn);
}

EnvReport env_report(const EnvOptions& options) {
  if (options.check_dtype) {
    DType d = *options.check_dtype;
    BRISK_CHECK(d == DType::F16 || d == DType::BF16, "env_report: check_dtype must be F16 or BF16, got ", d);
  }
  ensure_init();  // the backends' registrars add their sections
  EnvReport r;
  r.sections.push_back(brisk_section());
  r.sections.push_back(cpu_section());
  std::vector<EnvSectionFn> fns;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    fns = section_fns();
  }
  size_t first = r.sections.size();
  for (EnvSectionFn fn : fns) r.sections.push_back(fn(options));
  // Devices first (the CPU kernels, then CUDA), then libraries (mpi, nccl), whatever order
  // the libraries' initializers ran in.
  auto rank = [](const EnvSection& s) { return s.name == "cpu kernels" ? 0 : s.name == "cuda" ? 1 : 2; };
  std::stable_sort(r.sections.begin() + std::ptrdiff_t(first), r.sections.end(),
                   [&](const EnvSection& a, const EnvSection& b) { return rank(a) < rank(b); });
  return r;
}

const std::string* EnvReport::find(const std::string& section, const std::string& key) const {
  for (const EnvSection& s : sections) {
    if (s.name != section) continue;
    for (const EnvEntry& e : s.entries) {
      if (e.key == key) return &e.value;
    }
  }
  return nullptr;
}

bool EnvReport::all_checks_ok() const {
  for (const EnvSection& s : sections) {
    for (const EnvCheck& c : s.checks) {
      if (!c.ok) return false;
    }
  }
  return true;
}

std::string EnvReport::to_string() const {
  std::ostringstream os;
  for (const EnvSection& s : sections) {
    os << s.name << "\n";
    for (const EnvEntry& e : s.entries) os << "  " << e.key << ": " << e.value << "\n";
    for (const EnvCheck& c : s.checks) os << "  " << (c.ok ? "ok: " : "WARNING: ") << c.message << "\n";
  }
  return os.str();
}

std::string EnvReport::summary() const {
  auto get = [&](const char* section, const char* key) {
    const std::string* v = find(section, key);
    return v ? *v : std::string("?");
  };
  std::ostringstream os;
  os << "brisk " << get("brisk", "version") << " (" << get("brisk", "build type") << ") | " << get("cpu", "model")
     << " | " << get("cpu", "brisk threads") << " threads | backends: " << get("brisk", "backends linked");
  if (const std::string* gpus = find("cuda", "devices")) os << " | GPUs: " << *gpus;
  for (const EnvSection& s : sections) {
    for (const EnvCheck& c : s.checks) {
      if (!c.ok) os << "\nWARNING: " << c.message;
    }
  }
  return os.str();
}

}  // namespace brisk
