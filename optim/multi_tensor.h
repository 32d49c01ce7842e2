// optim/multi_tensor.h: the machinery shared by the fused optimizer steps: which tensors a
// fused loop may take (dense CPU tensors of one floating dtype), and one parallel walk over
// all elements of many tensors in fixed-size chunks (a single OpenMP loop per group and
// dtype, however many parameters the group holds).
// Not here: the update formulas (each optimizer's .cpp holds its loop beside its reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace brisk::optim::detail {

// Note [Fused steps match the reference]
// Every fused loop performs its reference's arithmetic in the same order, rounding where a
// tensor op would round: scalars become the tensor's dtype as the ops convert them (T(beta1)),
// and the loops are compiled with fp-contract=off so that no a * b + c turns into one fused
// multiply-add (the reference rounds between the multiply and the add: they are two ops).
// On the CPU the two paths then agree bit for bit; the tests allow 1e-7 relative. (The
// pragma is GCC's, the project's compiler; clang needs -ffp-contract=off for the same.)

// Note [Square roots in fused loops]
// std::sqrt may set errno (GCC's default -fmath-errno), which keeps the compiler from
// vectorizing any loop that calls it, and no pragma turns that off for one function. So the
// loops that need a square root run in blocks of kBlock elements: a vectorized loop computes
// the arguments into a stack buffer, sqrt_in_place takes their roots (scalar sqrtss, as
// correctly rounded as the vector instruction, so results do not change), and a second
// vectorized loop finishes the update.
inline constexpr int64_t kBlock = 256;

template <class T>
void sqrt_in_place(T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// maximum(a, b) as the elementwise op computes it: NaN propagates.
template <class T>
T maximum(T a, T b) {
  if (a != a || b != b) return a + b;
  return a > b ? a : b;
}

// Elements per chunk: big enough to amortize the loop setup, small enough to balance threads.
inline constexpr int64_t kChunk = 1 << 15;
// Below this many elements in all, one thread runs (threads cost more than they save).
inline constexpr int64_t kParallelMin = 1 << 16;

// A fused loop reads and writes raw memory: dense, on the CPU, of the given dtype.
inline bool fusable(const Tensor& t, DType dtype) {
  return t.defined() && t.device().is_cpu() && t.dtype() == dtype && t.is_contiguous();
}

// Calls f(tensor_index, begin, end) for every chunk of every tensor; chunks run in parallel
// when the total is large. numels[i] is the element count of tensor i.
template <class F>
void for_each_chunk(const std::vector<int64_t>& numels, F&& f) {
  struct Chunk {
    int64_t tensor;
    int64_t begin;
    int64_t end;
  };
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    for (int64_t b = 0; b < numels[i]; b += kChunk) {
      chunks.push_back({int64_t(i), b, std::min(b + kChunk, numels[i])});
    }
    total += numels[i];
  }
  int64_t n = int64_t(chunks.size());
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t c = 0; c < n; ++c) {
    f(chunks[c].tensor, chunks[c].begin, chunks[c].end);
  }
}

}  // namespace brisk::optim::detail
