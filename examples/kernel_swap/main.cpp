// examples/kernel_swap/main.cpp: swap one kernel, check it, time it. A hand-written AVX-512
// ReLU replaces the built-in CPU kernel for F32 (other dtypes keep the built-in one); it takes
// contiguous tensors and hands any other layout back to the kernel it replaced. brisk::opcheck
// then runs relu's specs: every case in every dtype and input layout, against the F64 reference
// and bit for bit against the built-in kernel; and times both over a thread sweep. The contract
// a kernel keeps is docs/KERNELS.md; `kernel_swap N` times N x N inputs (default 2048). Exit
// status 1 when a check fails.
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>

#include "brisk.h"
#include "opcheck/check.h"

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
  // The same in the tail: -0 and NaN pass through (x < 0 is false for both).
  for (; i < n; ++i) y[i] = x[i] < 0 ? 0.0f : x[i];
}
// ---- end of the user's kernel

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 2048;
  KernelOverride guard(op_id("relu"), DeviceType::CPU, relu_avx512, {DType::F32});
  builtin = guard.previous();

  opcheck::CheckReport report = opcheck::check_op("relu", {.against_builtin = true});
  std::printf("%s", report.str().c_str());

  Tensor x = randn({n, n});
  std::printf("relu on %lld x %lld F32, best of 20:\n", (long long)n, (long long)n);
  auto rows = opcheck::time_against_builtin(op_id("relu"), [&] { relu(x); }, {.threads = {1, get_num_threads()}});
  std::printf("%s", opcheck::timing_table(rows, "built-in", "AVX-512").c_str());
  return report.ok() ? 0 : 1;
}
