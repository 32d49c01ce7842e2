// kernels/cuda/register.h: what init() calls to install the CUDA backend and its kernels.
// One registrar per kernel family file; register_all() calls them all. The backend registers
// even without a GPU, so that using cuda:0 there fails with a clear "no such device" error.
#pragma once

namespace brisk::kernels::cuda {

void register_backend();      // kernels/cuda/backend.cpp
void register_elementwise();  // kernels/cuda/elementwise.cu (arithmetic, math, cast, fill)
void register_compare();      // kernels/cuda/compare.cu (comparisons, where, masked_fill)
void register_reduce();       // kernels/cuda/reduce.cu (reductions, softmax, cross-entropy)
void register_linalg();       // kernels/cuda/matmul.cu
void register_index();        // kernels/cuda/index.cu (cat, slice_backward, index ops)
void register_random();       // kernels/cuda/random.cu (arange, rand, randn, dropout)
void register_conv();         // kernels/cuda/conv.cu (cuDNN conv)
void register_pool();         // kernels/cuda/pool.cu (max/avg/adaptive pooling, hand-written)
void register_norm();         // kernels/cuda/norm.cu (layer norm; batch norm through cuDNN)
void register_optim();        // kernels/cuda/optim.cu (fused multi-tensor optimizer steps)
void register_amp();          // kernels/cuda/amp.cu (the gradient scaler's fused unscale)
void register_scan();         // kernels/cuda/scan.cu (cumsum, cumprod; argsort through the host)
void register_attention();    // kernels/cuda/attention.cu (the fused attention and its backward)

// kernels/cuda/linear_cross_entropy.cpp: linear_cross_entropy and its backward op (composed of ops)
void register_linear_cross_entropy();

inline void register_all() {
  register_backend();
  register_elementwise();
  register_compare();
  register_reduce();
  register_linear_cross_entropy();
  register_linalg();
  register_index();
  register_random();
  register_conv();
  register_pool();
  register_norm();
  register_optim();
  register_amp();
  register_scan();
  register_attention();
}

}  // namespace brisk::kernels::cuda
