// kernels/cpu/conv.h: what the CPU conv2d files share (internal to kernels/cpu): the conv2d
// problem (ConvGeometry, engine/op_params.h) under its CPU name, where a kernel tap reads, the
// per-thread workspace, the threading rule, and the depthwise entry points. See Note [CPU conv] in
// kernels/cpu/conv.cpp.
// Not here: the GEMM path (kernels/cpu/conv.cpp), the depthwise loops
// (kernels/cpu/conv_depthwise.cpp), the direct and Winograd kernels (kernels/cpu/conv_direct.cpp,
// kernels/cpu/conv_winograd.cpp), shapes and checks (engine/ops/conv.cpp).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/allocator.h"
#include "engine/op_params.h"
#include "engine/tensor.h"
#include "kernels/cpu/scratch.h"

namespace brisk::kernels::cpu::conv {

// im2col / col2im columns of one sample and group; the depthwise loops' saved borders
// (Workspace: kernels/cpu/scratch.h).
inline thread_local Workspace t_cols;

// Multiply-adds below which a conv runs on one thread (as in gemm.cpp).
inline constexpr double kParallelMacs = 2.0 * 64 * 64 * 64;

// Ceiling of n / d for d > 0 and any sign of n.
inline int64_t ceil_div(int64_t n, int64_t d) { return n >= 0 ? (n + d - 1) / d : -((-n) / d); }

// Conv computes F64 in F64 and everything else in F32.
inline DType work_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// Runs run(T{}) with T the work type of `t` (double for F64, else float).
template <class F>
void dispatch_work(DType t, F&& run) {
  if (t == DType::F64) {
    run(double{});
  } else {
    run(float{});
  }
}

// One conv2d problem (Note [One conv geometry] in engine/op_params.h), read from the sizes of
// x, w, y and the ConvParams as both backends read it.
using Conv = ConvGeometry;

// Where kernel tap (i, j) reads: output (oh, ow) meets input (oh * sh + off_h, ow * sw + off_w);
// output rows [oh_lo, oh_hi) and columns [lo, hi) meet the input, the rest meets padding.
struct Tap {
  int64_t off_h, off_w, oh_lo, oh_hi, lo, hi;
  Tap(const Conv& p, int64_t i, int64_t j)
      : off_h(i * p.dh - p.ph),
        off_w(j * p.dw - p.pw),
        oh_lo(std::clamp<int64_t>(ceil_div(-off_h, p.sh), 0, p.Ho)),
        oh_hi(std::clamp<int64_t>(ceil_div(p.H - off_h, p.sh), oh_lo, p.Ho)),
        lo(std::clamp<int64_t>(ceil_div(-off_w, p.sw), 0, p.Wo)),
        hi(std::clamp<int64_t>(ceil_div(p.W - off_w, p.sw), lo, p.Wo)) {}
};

// Whether a run of output pixels across rows meets one run of input pixels (stride 1 and
// "same" width: 3x3 / padding 1 and the like), so a tap's rows copy as one flat run.
inline bool flat_rows(const Conv& p) { return p.sh == 1 && p.sw == 1 && p.Wo == p.W; }

// Threads for a conv over the batch: >1 only outside a parallel region and for enough work.
inline int conv_threads(double macs) {
  if (omp_in_parallel() || macs < kParallelMacs) return 1;
  return omp_get_max_threads();
}

// The input of a conv as the kernels read it: any strides (a strided x is read in place).
template <class T>
struct Input {
  const T* data;
  int64_t sB, sC, sH, sW;
  explicit Input(const Tensor& x)
      : data(static_cast<const T*>(x.data_ptr())), sB(x.stride(0)), sC(x.stride(1)), sH(x.stride(2)), sW(x.stride(3)) {
    // An input without elements (no channels) has no data: zero strides keep every offset off
    // the null pointer (offsetting it is undefined behaviour; UBSan found it). Nothing is read.
    if (x.numel() == 0) sB = sC = sH = sW = 0;
  }
  // Whether the (pointwise) col matrix of a sample is the input itself: each plane dense.
  bool planes_dense(const Conv& p) const { return sW == 1 && (sH == p.W || p.H == 1); }
};

// ---- depthwise convolution (kernels/cpu/conv_depthwise.cpp), for p.depthwise() problems in
// the work dtype: x any strides, everything else dense; bias undefined or (O).
void depthwise_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv& p);
void depthwise_backward_input(const Tensor& g, const Tensor& w, const Tensor& gx, const Conv& p);
void depthwise_backward_weight(const Tensor& g, const Tensor& x, const Tensor& gw, const Conv& p);

// ---- direct convolution (kernels/cpu/conv_direct.cpp, Note [Direct conv]): one stride-1,
// undilated, ungrouped, "same"-padded F32 conv per sample, in (Ci, H, W) -> out (Co, H, W), on
// the AVX-512 path. conv2d's forward runs it with the weights as they are; its input gradient
// with the output gradient as input and the weights flipped and transposed.

// The fast kernels BRISK_CONV allows at start-up: "im2col" neither, "direct" the direct
// kernel only, anything else (or unset) both. Read by the two switches below.
enum class ConvKernels { All, Direct, Im2col };
ConvKernels conv_kernels_from_env();

// Whether DirectConv may run at all (on at start-up unless BRISK_CONV=im2col); off, every conv
// takes im2col + GEMM. Process-wide and thread-safe; benchmarks set it to time both paths.
void set_direct_conv(bool enabled);
bool direct_conv_enabled();

class DirectConv {
 public:
  struct Geometry {
    int64_t Ci = 0, H = 0, W = 0, Co = 0, kh = 0, kw = 0, ph = 0, pw = 0, Ho = 0, Wo = 0;
  };
  // Whether the direct kernel takes this problem: enabled, the AVX-512 GEMM path active, at
  // least 8 output channels, an odd kernel of 2+ taps with padding (kh - 1) / 2, (kw - 1) / 2.
  static bool fits(const Geometry& g);
  // Packs w: (Co, Ci, kh, kw) dense, or with `flipped` (Ci, Co, kh, kw) dense used as
  // w'(o, c, i, j) = w(c, o, kh - 1 - i, kw - 1 - j); null for weight_grad alone.
  DirectConv(const Geometry& g, const float* w, bool flipped);
  // out (Co, H, W) dense = conv(in (Ci, H, W) with strides (sC, sH, sW)) + bias (Co, or
  // null). threads: 1 runs on the calling thread; 0 splits the sample's strips across
  // OpenMP's team.
  void run(const float* in, int64_t sC, int64_t sH, int64_t sW, const float* bias, float* out, int threads) const;
  // gw (Co, Ci, kh, kw) dense += the weight gradient of samples [b0, b1): in (B, Ci, H, W) with
  // strides (sB, sC, sH, sW), g (B, Co, H, W) dense. On the calling thread. (w may be null.)
  void weight_grad(const float* in, int64_t sB, int64_t sC, int64_t sH, int64_t sW, const float* g, int64_t b0,
                   int64_t b1, float* gw) const;

 private:
  Geometry g_;
  int64_t plane_ = 0;          // elements per row-padded channel
  int64_t lead_ = 0;           // zeros before a copy's first plane (its first wrapped reads)
  int64_t copy_ = 0;           // elements per copy of the input (one copy per kernel column)
  std::vector<float> packed_;  // [Co / 8][Ci * kh * kw][8]
  std::vector<int64_t> off_;   // tap (c, i, j) -> where output 0 reads it, from the first copy

  // The kw copies of one sample's input (Note [Direct conv]) into copies (kw * copy_ floats).
  void make_copies(const float* in, int64_t sC, int64_t sH, int64_t sW, float* copies) const;
};

// ---- Winograd F(2x2, 3x3) convolution (kernels/cpu/conv_winograd.cpp, Note [Winograd conv]):
// one 3x3, padding 1, stride 1, ungrouped F32 conv per sample, in (Ci, H, W) -> out (Co, H, W),
// on the AVX-512 path, in 2.25x fewer multiply-adds than the direct kernel. Forward with the
// weights as they are, input gradient with them flipped and transposed (as DirectConv), weight
// gradient through the transformed domain.

// Whether WinogradConv may run at all (on at start-up unless BRISK_CONV=direct or im2col);
// off, its convs take the direct kernel. Process-wide and thread-safe.
void set_winograd_conv(bool enabled);
bool winograd_conv_enabled();

class WinogradConv {
 public:
  struct Geometry {
    int64_t Ci = 0, Co = 0, H = 0, W = 0;
  };
  // Whether it takes this problem: enabled, the AVX-512 GEMM path active, at least 16 input
  // and output channels, planes of at least 4 x 4 (and buffers of a sane size).
  static bool fits(const Geometry& g);
  // Transforms w: (Co, Ci, 3, 3) dense, or with `flipped` (Ci, Co, 3, 3) dense used as
  // w'(o, c, i, j) = w(c, o, 2 - i, 2 - j); null for the weight gradient alone.
  WinogradConv(const Geometry& g, const float* w, bool flipped);
  // out (Co, H, W) dense = conv(in (Ci, H, W) with strides (sC, sH, sW)) + bias (Co, or null).
  // On the calling thread.
  void run(const float* in, int64_t sC, int64_t sH, int64_t sW, const float* bias, float* out) const;
  // Floats of the transformed weight gradient (dU, [16][Ci rounded up to 16][Co rounded up]).
  int64_t transformed_size() const { return 16 * cp_ * op_; }
  // du (transformed_size(), zeroed by the caller) += the transformed weight gradient of samples
  // [b0, b1): in (B, Ci, H, W) with strides (sB, sC, sH, sW), g (B, Co, H, W) dense. On the
  // calling thread; sum the threads' du and call weight_grad_finish once.
  void weight_grad(const float* in, int64_t sB, int64_t sC, int64_t sH, int64_t sW, const float* g, int64_t b0,
                   int64_t b1, float* du) const;
  // gw (Co, Ci, 3, 3) dense = the weight gradient of the transformed one du.
  void weight_grad_finish(const float* du, float* gw) const;

 private:
  Geometry g_;
  int64_t cp_ = 0, op_ = 0;     // channels rounded up to vectors of 16
  int64_t th_ = 0, tw_ = 0;     // 2 x 2 output tiles per column and row
  int64_t rows_per_block_ = 0;  // tile rows transformed at once
  std::vector<float> u_;        // [16][cp_][op_]: G g G^T
  int64_t grid_floats() const;  // the padded channels-last input of one sample
};

}  // namespace brisk::kernels::cpu::conv
