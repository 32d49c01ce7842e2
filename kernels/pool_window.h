// kernels/pool_window.h: the pooling windows both backends walk, host and device (BRISK_HD):
// one pooling problem over dense planes (sizes and PoolParams, flat enough to pass to a CUDA
// kernel), the clipped window and divisor of an average-pool output, and PyTorch's adaptive
// windows. Forward and backward kernels of both backends read a window from here only, so the
// CPU kernels (the reference) and the CUDA ones cannot disagree on one.
// Not here: output sizes and checks (engine/ops/pool.cpp); the kernels (kernels/cpu/pool.cpp,
// kernels/cuda/pool.cu).
#pragma once

#include <cstdint>

#include "engine/macros.h"
#include "engine/op_params.h"

namespace brisk::kernels {

// x (planes, H, W) pooled to y (planes, Ho, Wo); planes = B * C.
struct PoolProblem {
  int64_t planes, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
};

// The problem of pooling x (B, C, H, W) to y (B, C, Ho, Wo) with `p`.
inline PoolProblem pool_problem(const Shape& x, const Shape& y, const PoolParams& p) {
  return {x[0] * x[1], x[2],       x[3],        y[2],        y[3],         p.kernel.h,   p.kernel.w,
          p.stride.h,  p.stride.w, p.padding.h, p.padding.w, p.dilation.h, p.dilation.w, p.count_include_pad};
}

// Adaptive pooling reads only the sizes.
inline PoolProblem adaptive_problem(const Shape& x, const Shape& y) {
  return {x[0] * x[1], x[2], x[3], y[2], y[3], 0, 0, 0, 0, 0, 0, 0, 0, false};
}

// Input rows [hs, he) and columns [ws, we) of one output, and what its sum is divided by.
struct PoolWindow {
  int64_t hs, he, ws, we, divisor;
  BRISK_HD bool empty() const { return he <= hs || we <= ws; }
  BRISK_HD bool contains(int64_t ih, int64_t iw) const { return ih >= hs && ih < he && iw >= ws && iw < we; }
};

// The window of average-pool output (oh, ow), clipped to the input, and its divisor:
// PyTorch's rule clips the window to input + padding first, and count_include_pad counts that
// clipped size; otherwise the divisor is the number of input elements in the window.
BRISK_HD inline PoolWindow avg_window(const PoolProblem& p, int64_t oh, int64_t ow) {
  int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
  int64_t he = hs + p.kh < p.H + p.ph ? hs + p.kh : p.H + p.ph;
  int64_t we = ws + p.kw < p.W + p.pw ? ws + p.kw : p.W + p.pw;
  const int64_t padded = (he - hs) * (we - ws);
  hs = hs > 0 ? hs : 0;
  ws = ws > 0 ? ws : 0;
  he = he < p.H ? he : p.H;
  we = we < p.W ? we : p.W;
  return {hs, he, ws, we, p.count_include_pad ? padded : (he - hs) * (we - ws)};
}

// PyTorch's adaptive windows along one axis: output i of n_out reads inputs
// [floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out)). With n_in and n_out swapped, the
// same formulas bound the outputs whose windows can hold input i.
BRISK_HD inline int64_t adaptive_start(int64_t i, int64_t n_in, int64_t n_out) { return i * n_in / n_out; }
BRISK_HD inline int64_t adaptive_end(int64_t i, int64_t n_in, int64_t n_out) {
  return ((i + 1) * n_in + n_out - 1) / n_out;
}

// The window of adaptive-pool output (oh, ow); its divisor is its size.
BRISK_HD inline PoolWindow adaptive_window(const PoolProblem& p, int64_t oh, int64_t ow) {
  const int64_t hs = adaptive_start(oh, p.H, p.Ho), he = adaptive_end(oh, p.H, p.Ho);
  const int64_t ws = adaptive_start(ow, p.W, p.Wo), we = adaptive_end(ow, p.W, p.Wo);
  return {hs, he, ws, we, (he - hs) * (we - ws)};
}

}  // namespace brisk::kernels
