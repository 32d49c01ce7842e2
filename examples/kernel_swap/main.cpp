// examples/kernel_swap/main.cpp: swap one kernel, check it, time it. A hand-written AVX-512
// ReLU replaces the built-in CPU kernel for F32 (other dtypes keep the built-in one); it takes
// contiguous tensors and hands any other layout back to the kernel it replaced. It is compared
// bit for bit with the built-in kernel on contiguous, transposed, sliced and expanded inputs
// with NaN, +-0 and infinities, then both are timed. The contract a kernel keeps is
// docs/KERNELS.md; `kernel_swap N` uses N x N inputs (default 2048). Exit status 1 on a mismatch.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "brisk.h"

using namespace brisk;

// ---- the user's kernel (what a researcher writes)
Kernel builtin;  // the kernel replaced, for the layouts this one does not take

void relu_avx512(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  if (!in[0].is_contiguous() || !out[0].is_contiguous()) return builtin(in, out, attrs);
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  const int64_t n = in[0].numel();
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512 zero = _mm512_setzero_ps();
  // max(x, 0) with x second: a NaN in x comes out as NaN, as the built-in kernel gives.
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_max_ps(zero, _mm512_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = x[i] > 0 || x[i] != x[i] ? x[i] : 0.0f;
}
// ---- end of the user's kernel

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.sizes() == cb.sizes() && ca.dtype() == cb.dtype() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * ca.element_size()) == 0;
}

double best_us(const Tensor& x, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor y = relu(x);
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 2048;
  Tensor x = randn({n, n});
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f, -INFINITY, INFINITY, -1e-45f};
  for (int i = 0; i < 6; ++i) x.data<float>()[i * 7] = special[i];
  struct Layout {
    const char* name;
    Tensor t;
  } layouts[] = {{"contiguous", x},
                 {"transposed", x.t()},
                 {"every other column", slice(x, 1, 0, n, 2)},
                 {"expanded row", expand(slice(x, 0, 0, 1), {n, n})},
                 {"F64 (not replaced)", cast(x, DType::F64)}};

  std::vector<Tensor> want;
  for (const Layout& l : layouts) want.push_back(relu(l.t));
  const double builtin_us = best_us(x, 20);

  KernelOverride guard(op_id("relu"), DeviceType::CPU, relu_avx512, {DType::F32});
  builtin = guard.previous();
  bool ok = true;
  std::printf("%-22s %s\n", "layout", "replacement vs built-in");
  for (size_t i = 0; i < std::size(layouts); ++i) {
    Tensor got = relu(layouts[i].t);
    const bool same = same_bits(got, want[i]);
    ok = ok && same;
    std::printf("%-22s %s\n", layouts[i].name, same ? "bitwise equal" : "DIFFERENT");
  }
  const double mine_us = best_us(x, 20);
  std::printf("relu on %lld x %lld F32, best of 20: built-in %.1f us, AVX-512 %.1f us (%.2fx)\n", (long long)n,
              (long long)n, builtin_us, mine_us, builtin_us / mine_us);
  return ok ? 0 : 1;
}
