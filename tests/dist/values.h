// tests/dist/values.h: the values the 2-rank collective tests send and the reductions they
// must come back as (tests/dist/test_dist.cpp on MPI, tests/dist/test_dist_nccl.cpp on NCCL).
// Not here: the process start-up (tests/dist/main.cpp).
#pragma once

#include <algorithm>
#include <vector>

#include "dist/process_group.h"
#include "engine/functions.h"

namespace brisk::test {

// Rank r's value at element i: small integers, exact in every dtype and every reduction here.
inline double rank_value(int r, int64_t i) { return double((r + 1) * ((i % 5) + 1)); }

inline Tensor rank_tensor(DType dt, int64_t n, int r, Device device = Device::cpu()) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = rank_value(r, i);
  return from_vector(v, {n}, dt, device);
}

// What `op` over the `size` ranks' element i must give.
inline double reduced_value(dist::ReduceOp op, int64_t i, int size) {
  double acc = rank_value(0, i);
  for (int r = 1; r < size; ++r) {
    const double v = rank_value(r, i);
    switch (op) {
      case dist::ReduceOp::Sum:
      case dist::ReduceOp::Avg: acc += v; break;
      case dist::ReduceOp::Product: acc *= v; break;
      case dist::ReduceOp::Min: acc = std::min(acc, v); break;
      case dist::ReduceOp::Max: acc = std::max(acc, v); break;
    }
  }
  return op == dist::ReduceOp::Avg ? acc / size : acc;
}

}  // namespace brisk::test
