// kernels/cpu/vmath.h: exp, GELU and GELU's derivative over dense F32 rows, 16 lanes at a time:
// glibc's libmvec AVX-512 functions (expf, erff, tanhf: 4 ulp at most) where the library was
// found at configure time and the CPU has AVX-512, the scalar C library otherwise. For the
// kernels whose time is these functions: softmax, cross-entropy (forward and backward), GELU,
// the fused attention, and the Exp, Tanh and Sigmoid ops. Internal to kernels/cpu.
// Not here: the functors every device shares (kernels/functors.h), which remain the definitions
// (the scalar fallback computes exactly them).
#pragma once

#include <cstdint>

namespace brisk::kernels::cpu::vmath {

// y[i] = exp(x[i] - shift) for i < n (y may be x; null: not stored); returns their sum, added
// in 16 lanes then across them (the scalar fallback adds in order).
float exp_sum(const float* x, float shift, float* y, int64_t n);
// y[i] = exp(x[i] - shift) * scale (y may be x).
void exp_affine(const float* x, float shift, float scale, float* y, int64_t n);
// The largest of x[0 .. n) (-inf for n = 0); NaN elements may or may not win.
float max(const float* x, int64_t n);
// y = exp(x), tanh(x), sigmoid(x) (the Exp, Tanh and Sigmoid ops' dense F32 kernels).
void exp(const float* x, float* y, int64_t n);
void tanh(const float* x, float* y, int64_t n);
void sigmoid(const float* x, float* y, int64_t n);
// y = gelu(x), dx = g * gelu'(x): functors::Gelu / GeluBackward, the tanh or the erf form.
void gelu(const float* x, float* y, int64_t n, bool tanh_form);
void gelu_backward(const float* g, const float* x, float* dx, int64_t n, bool tanh_form);

}  // namespace brisk::kernels::cpu::vmath
