// examples/bench/bench_common.h: timing helpers shared by the benchmarks: a steady clock,
// median-of-repeats, and a guard against the optimizer deleting measured work.
#pragma once

#include <algorithm>
#include <chrono>
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

}  // namespace bench
