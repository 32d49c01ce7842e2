// engine/threads.cpp: set_num_threads / get_num_threads and set_flush_denormal
// (engine/threads.h) over OpenMP.
#include "engine/threads.h"

#include <omp.h>

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define BRISK_HAS_MXCSR 1
#endif

#include "engine/error.h"

namespace brisk {

namespace {

std::atomic<bool> g_flush_denormal{false};

#ifdef BRISK_HAS_MXCSR
constexpr unsigned kFlushToZero = 0x8000u;     // MXCSR.FTZ: denormal results become 0
constexpr unsigned kDenormalsAreZero = 0x40u;  // MXCSR.DAZ: denormal inputs read as 0

void apply_here(bool on) {
  const unsigned csr = _mm_getcsr();
  const unsigned bits = kFlushToZero | kDenormalsAreZero;
  _mm_setcsr(on ? (csr | bits) : (csr & ~bits));
}

// The calling thread and every thread of its OpenMP pool.
void apply_everywhere(bool on) {
  apply_here(on);
  const int n = omp_get_max_threads();
#pragma omp parallel num_threads(n)
  apply_here(on);
}
#endif

}  // namespace

void set_num_threads(int n) {
  BRISK_CHECK(n >= 1, "set_num_threads: needs at least 1 thread, got ", n);
  omp_set_num_threads(n);
#ifdef BRISK_HAS_MXCSR
  if (g_flush_denormal.load()) apply_everywhere(true);
#endif
}

int get_num_threads() { return omp_get_max_threads(); }

bool set_flush_denormal(bool on) {
#ifdef BRISK_HAS_MXCSR
  g_flush_denormal.store(on);
  apply_everywhere(on);
  return true;
#else
  (void)on;
  return false;
#endif
}

}  // namespace brisk
