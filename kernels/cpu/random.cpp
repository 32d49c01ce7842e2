// kernels/cpu/random.cpp: CPU kernels of arange, rand, randn and dropout. Element i depends
// only on (seed, offset, i) (see Note [Random streams] in engine/ops/random.cpp), so the
// OpenMP split never changes a value and the CUDA kernels reproduce them.
// Outputs are the fresh dense tensors dispatch allocates.
// Not here: the generator and Philox itself (engine/random.h).
#include "engine/random.h"

#include <cmath>
#include <type_traits>

#include "engine/op.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

template <class F>
void parallel_for(int64_t n, F f) {
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// Calls f(i, u) for i in [0, n) with u = philox_uniform(seed, offset, i): one Philox call
// serves the four elements of a counter.
template <class F>
void for_each_uniform(int64_t n, uint64_t seed, uint64_t offset, F f) {
  const int64_t counters = (n + 3) / 4;
  const int nt = threads_for(n);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t c = 0; c < counters; ++c) {
    const Philox4 r = philox(seed, offset + uint64_t(c));
    const int64_t first = 4 * c;
    const int lanes = int(std::min<int64_t>(4, n - first));
    for (int lane = 0; lane < lanes; ++lane) f(first + lane, uniform_float(r.v[lane]));
  }
}

// v * scale + shift rounded once: in double for F64, in float (then to T) otherwise.
template <class T>
T affine(float v, double scale, double shift) {
  if constexpr (std::is_same_v<T, double>) {
    return std::fma(double(v), scale, shift);
  } else {
    return T(std::fmaf(v, float(scale), float(shift)));
  }
}

void check_dense(const Tensor& t, const char* op) {
  BRISK_CHECK(t.is_contiguous(), op, ": the output must be contiguous, got strides ", t.strides());
}

// out: (n) with out[i] = start + i * step
void arange_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  check_dense(out[0], "arange");
  const double start = attrs.a;
  const double step = attrs.b;
  dispatch_numeric(out[0].dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out[0].data_ptr());
    parallel_for(out[0].numel(), [=](int64_t i) { p[i] = T(compute_t<T>(std::fma(double(i), step, start))); });
  });
}

// out: any shape, uniform in [a, b)
void rand_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  check_dense(out[0], "rand");
  const double low = attrs.a;
  const double scale = attrs.b - attrs.a;
  dispatch_float(out[0].dtype(), "rand", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out[0].data_ptr());
    for_each_uniform(out[0].numel(), attrs.seed, attrs.offset,
                     [=](int64_t i, float u) { p[i] = affine<T>(u, scale, low); });
  });
}

// out: any shape, normal with mean a and std b
void randn_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs& attrs) {
  check_dense(out[0], "randn");
  const double mean = attrs.a;
  const double stddev = attrs.b;
  const uint64_t seed = attrs.seed;
  const uint64_t offset = attrs.offset;
  dispatch_float(out[0].dtype(), "randn", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out[0].data_ptr());
    parallel_for(out[0].numel(), [=](int64_t i) {
      const float z = philox_normal(seed, offset, uint64_t(i));
      p[i] = affine<T>(z, stddev, mean);
    });
  });
}

// x: any shape -> y: x's shape, keep: Bool of x's shape
void dropout_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  const Tensor& keep = out[1];
  check_dense(keep, "dropout");
  const double p = attrs.a;
  bool* k = static_cast<bool*>(keep.data_ptr());
  for_each_uniform(keep.numel(), attrs.seed, attrs.offset, [=](int64_t i, float u) { k[i] = double(u) >= p; });
  dispatch_float(y.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C scale = C(1.0 / (1.0 - p));
    elementwise<T, T, bool>(y, {&x, &keep}, [scale](C v, bool kept) { return kept ? v * scale : C(0); });
  });
}

}  // namespace

void register_random() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Arange, cpu, arange_kernel);
  register_kernel(OpId::Rand, cpu, rand_kernel);
  register_kernel(OpId::Randn, cpu, randn_kernel);
  register_kernel(OpId::Dropout, cpu, dropout_kernel);
}

}  // namespace brisk::kernels::cpu
