// engine/threads.cpp: set_num_threads / get_num_threads (engine/threads.h) over OpenMP.
#include "engine/threads.h"

#include <omp.h>

#include "engine/error.h"

namespace brisk {

void set_num_threads(int n) {
  BRISK_CHECK(n >= 1, "set_num_threads: needs at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace brisk
