// examples/kernel_swap/main.cpp: swap a kernel, check it, time it. A hand-written AVX-512 ReLU
// replaces the built-in CPU kernel for F32 (other dtypes keep the built-in one); it takes
// contiguous tensors and hands any other layout back to the kernel it replaced. brisk::opcheck
// runs relu's specs: every case in every dtype and input layout, against the F64 reference and
// bit for bit against the built-in kernel; then times both over a thread sweep. A naive
// triple-loop matmul (2-D operands, any strides) goes through the same steps, checked against
// the reference only (its sums round differently from the blocked GEMM). The contract a kernel
// keeps is docs/KERNELS.md; `kernel_swap N` times relu on N x N inputs (default 2048) and
// matmul on 256 x 256. Exit status 1 when a check fails.
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>

#include "brisk.h"
#include "opcheck/check.h"

using namespace brisk;

// ---- the user's kernels (what a researcher writes)
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

Kernel builtin_matmul;
void matmul_naive(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor &a = in[0], &b = in[1], &c = out[0];
  if (a.dim() != 2 || b.dim() != 2) return builtin_matmul(in, out, attrs);  // vectors, batches
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* pc = c.data<float>();
  for (int64_t i = 0; i < a.size(0); ++i)
    for (int64_t j = 0; j < b.size(1); ++j) {
      float acc = 0;
      for (int64_t p = 0; p < a.size(1); ++p)
        acc += pa[i * a.stride(0) + p * a.stride(1)] * pb[p * b.stride(0) + j * b.stride(1)];
      pc[i * c.stride(0) + j * c.stride(1)] = acc;
    }
}
// ---- end of the user's kernels

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

  KernelOverride mm_guard(op_id("matmul"), DeviceType::CPU, matmul_naive, {DType::F32});
  builtin_matmul = mm_guard.previous();
  opcheck::CheckReport mm_report = opcheck::check_op("matmul");
  std::printf("%s", mm_report.str().c_str());
  Tensor a = randn({256, 256}), b = randn({256, 256});
  std::printf("matmul 256 x 256 F32, best of 5:\n");
  rows = opcheck::time_against_builtin(op_id("matmul"), [&] { matmul(a, b); },
                                       {.reps = 5, .threads = {1, get_num_threads()}});
  std::printf("%s", opcheck::timing_table(rows, "built-in", "naive").c_str());
  return report.ok() && mm_report.ok() ? 0 : 1;
}
