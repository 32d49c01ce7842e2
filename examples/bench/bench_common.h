// examples/bench/bench_common.h: timing helpers shared by the benchmarks: a steady clock,
// median-of-repeats, a guard against the optimizer deleting measured work, and PyTorch's
// timings of the same cases from a Python child process.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace bench {

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

// PyTorch's timings for a benchmark that compares with it. `body` is Python run after a prelude
// that imports torch (and torch.nn.functional as F), sets torch's threads to `threads` and
// defines per_call_ms(fn, iters, repeats=7) (a warm-up, then the median, as seconds_per_call);
// it prints "index what ms" lines, returned as {"index what": ms}. `which` names the Python:
// the venv's PyTorch 2.x when present, else Debian's 1.13, else "none" (and nothing is timed).
// OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for it (they slow OpenBLAS-based builds).
inline std::map<std::string, double> torch_times(const std::string& body, int threads, std::string& which) {
  std::map<std::string, double> out;
  which = "none";
  for (const char* py : {"/work/venv-torch/bin/python", "/usr/bin/python3"}) {
    if (std::system((std::string(py) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) {
      which = py;
      break;
    }
  }
  if (which == "none") return out;
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
                          " 2>/dev/null <<'BRISK_PY'\n" + prelude + body + "\nBRISK_PY\n";
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
