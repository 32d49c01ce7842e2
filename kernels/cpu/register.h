// kernels/cpu/register.h: what init() calls to install the CPU backend and its kernels.
// One registrar per kernel family file; register_all() calls them all.
#pragma once

namespace brisk::kernels::cpu {

void register_backend();             // kernels/cpu/cpu_backend.cpp
void register_elementwise();         // kernels/cpu/elementwise.cpp (cast, fill)
void register_elementwise_unary();   // kernels/cpu/elementwise_unary.cpp
void register_elementwise_binary();  // kernels/cpu/elementwise_binary.cpp
void register_compare();             // kernels/cpu/compare.cpp (comparisons, where, masked_fill)
void register_reduce();              // kernels/cpu/reduce.cpp
void register_scan();                // kernels/cpu/scan.cpp (cumsum, cumprod, argsort)
void register_linalg();              // kernels/cpu/gemm.cpp
void register_shape();               // kernels/cpu/shape.cpp
void register_index();               // kernels/cpu/index.cpp
void register_random();              // kernels/cpu/random.cpp
void register_conv();       // kernels/cpu/conv.cpp (conv2d and its backward ops; depthwise in conv_depthwise.cpp)
void register_pool();       // kernels/cpu/pool.cpp (max, average, adaptive pooling)
void register_norm();       // kernels/cpu/norm.cpp
void register_recurrent();  // kernels/cpu/recurrent.cpp (lstm_sequence, gru_sequence, their backward ops)
void register_amp();        // kernels/cpu/amp.cpp (amp_unscale, the gradient scaler's fused unscale)
void register_optim();      // kernels/cpu/optim.cpp (the fused optimizer steps)
void register_quantized();  // kernels/cpu/quantized.cpp (int8 inference: pack, linear, conv)
void register_attention();  // kernels/cpu/attention.cpp (fused attention and its backward)
void register_vmath();      // kernels/cpu/vmath.cpp (dense-F32 gelu kernels; after the elementwise ones)

// kernels/cpu/linalg_decomp.cpp: solve, cholesky, slogdet, qr, eigh
void register_linalg_decomp();

// kernels/cpu/linear_cross_entropy.cpp: linear_cross_entropy and its backward op
void register_linear_cross_entropy();

inline void register_all() {
  register_backend();
  register_elementwise();
  register_elementwise_unary();
  register_elementwise_binary();
  register_compare();
  register_reduce();
  register_linear_cross_entropy();
  register_scan();
  register_linalg();
  register_linalg_decomp();
  register_shape();
  register_index();
  register_random();
  register_conv();
  register_pool();
  register_norm();
  register_recurrent();
  register_amp();
  register_optim();
  register_quantized();
  register_attention();
  register_vmath();
}

}  // namespace brisk::kernels::cpu
