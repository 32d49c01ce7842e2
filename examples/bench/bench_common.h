// examples/bench/bench_common.h: timing helpers shared by the benchmarks: a steady clock,
// median-of-repeats, a guard against the optimizer deleting measured work, and PyTorch's
// timings of the same cases from a Python child process, and the machine's F32 FMA peak.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

// The non-empty comma-separated items of s ("1,2" -> {"1", "2"}): the benchmarks' list options.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// A Python with PyTorch: $TORCH_PYTHON, else the venv beside the checkout or /work/venv, else
// Debian's python3; "" when none imports torch. Absolute, not canonical (a venv's python is a
// symlink, and resolving it would leave the venv).
inline std::string python_for_torch() {
  namespace fs = std::filesystem;
  if (const char* py = std::getenv("TORCH_PYTHON")) return fs::absolute(py).lexically_normal().string();
  for (const char* py : {"venv/bin/python", "../venv/bin/python", "/work/venv/bin/python", "/usr/bin/python3"}) {
    if (std::system((std::string(py) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0)
      return fs::absolute(py).lexically_normal().string();
  }
  return "";
}

// "key=value" out of the line of `text` that starts with `tag` (a child's "RESULT ms=12.5 ..."
// line); -1 if absent.
inline double tagged_field(const std::string& text, const std::string& tag, const std::string& key) {
  const size_t line = text.find(tag + " ");
  if (line == std::string::npos) return -1;
  const size_t end = text.find('\n', line);
  const size_t at = text.find(" " + key + "=", line);
  if (at == std::string::npos || at > end) return -1;
  return std::atof(text.c_str() + at + key.size() + 2);
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median over `repeats` runs of the seconds per call of fn, each run calling it `iters` times.
template <class F>
double seconds_per_call(F&& fn, int iters, int repeats = 7) {
  for (int i = 0; i < iters / 10 + 1; ++i) fn();  // warm up caches and allocator
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) fn();
    t.push_back((now_s() - t0) / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class T>
inline void keep(T&& value) {
  asm volatile("" : : "g"(&value) : "memory");
}

// GFLOP/s of one thread's FMA loop: 16 independent zmm accumulators (more than FMA latency x
// ports needs), 2 flops x 16 lanes per FMA, timed by `clock` (seconds). Written in assembly so
// that no compiler keeps the accumulators in memory. Only for CPUs with AVX-512 (have_avx512()).
__attribute__((target("avx512f"), noinline)) inline double fma_loop(int64_t iters, double (*clock)()) {
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  const double t0 = clock();
  for (int64_t it = 0; it < iters; ++it) {
    asm volatile(
        "vfmadd231ps %[x], %[y], %%zmm0\n\tvfmadd231ps %[x], %[y], %%zmm1\n\t"
        "vfmadd231ps %[x], %[y], %%zmm2\n\tvfmadd231ps %[x], %[y], %%zmm3\n\t"
        "vfmadd231ps %[x], %[y], %%zmm4\n\tvfmadd231ps %[x], %[y], %%zmm5\n\t"
        "vfmadd231ps %[x], %[y], %%zmm6\n\tvfmadd231ps %[x], %[y], %%zmm7\n\t"
        "vfmadd231ps %[x], %[y], %%zmm8\n\tvfmadd231ps %[x], %[y], %%zmm9\n\t"
        "vfmadd231ps %[x], %[y], %%zmm10\n\tvfmadd231ps %[x], %[y], %%zmm11\n\t"
        "vfmadd231ps %[x], %[y], %%zmm12\n\tvfmadd231ps %[x], %[y], %%zmm13\n\t"
        "vfmadd231ps %[x], %[y], %%zmm14\n\tvfmadd231ps %[x], %[y], %%zmm15\n\t"
        :
        : [x] "v"(x), [y] "v"(y)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
          "xmm13", "xmm14", "xmm15");
  }
  const double t = clock() - t0;
  return double(iters) * 16 * 16 * 2 / t * 1e-9;
}

inline bool have_avx512() { return __builtin_cpu_supports("avx512f"); }

// The F32 FMA peak of `threads` threads together (GFLOP/s): best of 7 runs of ~0.1 s each;
// 0 on a CPU without AVX-512.
inline double fma_peak(int threads, double (*clock)() = now_s) {
  if (!have_avx512()) return 0;
  double best = 0;
  for (int rep = 0; rep < 7; ++rep) {
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += fma_loop(int64_t(4) << 20, clock);
    best = std::max(best, total);
  }
  return best;
}

// PyTorch's timings for a benchmark that compares with it. `body` is Python run after a prelude
// that imports torch (and torch.nn.functional as F), sets torch's threads to `threads` and
// defines per_call_ms(fn, iters, repeats=7) (a warm-up, then the median, as seconds_per_call);
// it prints "index what ms" lines, returned as {"index what": ms}. `which` names the Python:
// the venv's PyTorch 2.x when present, else Debian's 1.13, else "none" (and nothing is timed).
// OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for it (they slow OpenBLAS-based builds).
// `args` (space-separated) follow the thread count on the child's command line: sys.argv[2:].
inline std::map<std::string, double> torch_times(const std::string& body, int threads, std::string& which,
                                                 const std::string& args = "") {
  std::map<std::string, double> out;
  which = python_for_torch();
  if (which.empty()) {
    which = "none";
    return out;
  }
  const std::string prelude = R"PY(
import sys, time, torch
import torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
def per_call_ms(fn, iters, repeats=7):
    for _ in range(iters // 10 + 1):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t0) / iters)
    return sorted(times)[len(times) // 2] * 1e3
)PY";
  const std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " + which + " - " + std::to_string(threads) +
                          " " + args + " 2>/dev/null <<'BRISK_PY'\n" + prelude + body + "\nBRISK_PY\n";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  int index = 0;
  char what[64];
  double ms = 0;
  while (std::fscanf(p, "%d %63s %lf", &index, what, &ms) == 3) out[std::to_string(index) + " " + what] = ms;
  pclose(p);
  return out;
}

}  // namespace bench
