// kernels/cpu/quantized.cpp: the CPU kernels of the int8 inference ops (Note [Int8 ops] in
// engine/ops/quantized.cpp): int8_pack_weight (pack_i8 into the op's tensors), int8_linear
// (quantize the input per tensor, the u8 x s8 GEMM, the F32 epilogue) and int8_conv2d (per
// sample: quantize channels-last inside a border of zero points, im2col, GEMM, optional ReLU
// and 2x2 max pool while writing NCHW), quantize_affine and dequantize_affine (per tensor or
// per channel).
// Not here: the GEMM itself (kernels/cpu/gemm_i8.cpp), qparams and observers (compress/quantize.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/gemm_i8.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

thread_local std::vector<uint8_t> t_qx;     // quantized activations
thread_local std::vector<uint8_t> t_cols;   // im2col rows
thread_local std::vector<float> t_out;      // conv results (pixel, channel)
thread_local std::vector<uint8_t> t_plane;  // a quantized NCHW sample before channels-last

// The input's quantization: quint8's whole [0, 255], as torch.quantize_per_tensor does in
// PyTorch's converted modules (reduce_range only narrows a dynamic scale).
struct InputQ {
  float scale;
  int32_t zp, qmin, qmax;
};

// The packed weight of inputs (x, w, w_scale, packed, col_sum[, bias]): k and n as the op's
// inference checked them.
PackedI8Ref packed_of(std::span<const Tensor> in, int64_t k, int64_t n) {
  return PackedI8Ref(k, n, in[3].data<int8_t>(), in[4].data<int32_t>());
}

const float* bias_of(std::span<const Tensor> in) { return in.size() == 6 ? in[5].data<float>() : nullptr; }

// ---- int8_pack_weight: w (N, K...) viewed as b (K, N): the weight's rows are b's columns.
void pack_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor w = in[0].contiguous();
  const int64_t n = w.size(0), k = n ? w.numel() / n : 0;
  pack_i8_into({w.data<int8_t>(), k, n, 1, k}, out[0].data<int8_t>(), out[1].data<int32_t>());
}

// ---- int8_linear: y (M, N) = epilogue((xq - zp) @ W^T) for x (*, K).
void linear_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Int8Params p = Int8Params::from(attrs);
  const Tensor x = in[0].contiguous();
  const int64_t n = in[1].size(0), k = in[1].size(1), m = x.numel() / std::max<int64_t>(k, 1);
  if (m == 0) return;
  const float* px = x.data<float>();
  InputQ q{float(p.input_scale), int32_t(p.input_zero_point), 0, 255};
  if (p.dynamic) {
    float lo, hi;
    min_max(px, x.numel(), lo, hi);
    BRISK_CHECK(std::isfinite(lo) && std::isfinite(hi), "int8_linear: input has non-finite values");
    const auto [s, z] = choose_int8_qparams(lo, hi, 0, 255, p.reduce_range);
    q = {s, z, 0, 255};
  }
  t_qx.resize(size_t(x.numel()));
  quantize_u8(px, x.numel(), q.scale, q.zp, q.qmin, q.qmax, t_qx.data());
  I8Epilogue e{.a_scale = q.scale, .col_scale = in[2].data<float>(), .bias = bias_of(in), .relu = p.relu};
  e.out = {out[0].data<float>(), m, n, n, 1};
  gemm_u8s8({t_qx.data(), m, k, k, 1}, q.zp, packed_of(in, k, n), e);
}

// ---- int8_conv2d: x (B, C, H, W) F32 -> y (B, O, Ho, Wo) F32. Per sample: quantize, im2col
// rows (pixel, (i, j, c)) with the zero point in the padding, GEMM with the epilogue writing
// (pixel, o), then into NCHW (pooled when asked).
void conv_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Int8Params p = Int8Params::from(attrs);
  const Tensor x = in[0].contiguous();
  const Tensor& w = in[1];
  const ConvGeometry g = ConvGeometry::infer(x.sizes(), w.sizes(), p.conv(), "int8_conv2d");
  const int64_t B = g.B, C = g.C, H = g.H, W = g.W, O = g.O, kh = g.kh, kw = g.kw, Ho = g.Ho, Wo = g.Wo;
  const int64_t sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw, dh = g.dh, dw = g.dw;
  const bool pool = p.pool, relu = p.relu;
  const int64_t Hq = pool ? Ho / 2 : Ho, Wq = pool ? Wo / 2 : Wo;
  const InputQ q{float(p.input_scale), int32_t(p.input_zero_point), 0, 255};
  const float* pbias = bias_of(in);
  const float* w_scale = in[2].data<float>();
  const int64_t K = C * kh * kw, P = Ho * Wo;
  const PackedI8Ref packed = packed_of(in, K, O);
  const float* px = x.data<float>();
  float* py = out[0].data<float>();
  const int64_t Hp = H + 2 * ph, Wp = W + 2 * pw;
  const int nt = (B > 1 && double(B) * P * K * O > 2.0 * 64 * 64 * 64) ? omp_get_max_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t b = 0; b < B; ++b) {
    // The quantized sample channels-last (Hp, Wp, C) inside a border of zero points (real 0):
    // im2col then copies runs of kw * C bytes without a branch.
    t_qx.resize(size_t(C * Hp * Wp));
    uint8_t* qx = t_qx.data();
    if (ph != 0 || pw != 0) std::memset(qx, q.zp, t_qx.size());
    const float* xb = px + b * C * H * W;
    if (C == 1) {
      for (int64_t h = 0; h < H; ++h) {
        quantize_u8(xb + h * W, W, q.scale, q.zp, q.qmin, q.qmax, qx + (h + ph) * Wp + pw);
      }
    } else {
      t_plane.resize(size_t(C * H * W));
      uint8_t* plane = t_plane.data();
      quantize_u8(xb, C * H * W, q.scale, q.zp, q.qmin, q.qmax, plane);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w0 = 0; w0 < W; ++w0) {
          uint8_t* dst = qx + ((h + ph) * Wp + w0 + pw) * C;
          for (int64_t c = 0; c < C; ++c) dst[c] = plane[(c * H + h) * W + w0];
        }
      }
    }
    // Rows (pixel, (i, j, c)), the packed weight's order.
    t_cols.resize(size_t(P * K));
    uint8_t* cols = t_cols.data();
    const int64_t run = kw * C;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      for (int64_t ow = 0; ow < Wo; ++ow) {
        uint8_t* row = cols + (oh * Wo + ow) * K;
        for (int64_t i = 0; i < kh; ++i) {
          const uint8_t* src = qx + ((oh * sh + i * dh) * Wp + ow * sw) * C;
          if (dw == 1) {
            std::memcpy(row, src, size_t(run));
          } else {
            for (int64_t j = 0; j < kw; ++j) std::memcpy(row + j * C, src + j * dw * C, size_t(C));
          }
          row += run;
        }
      }
    }
    // (pixel, o) rows into a dense buffer, then transposed into the NCHW plane (contiguous
    // writes; the epilogue's strided stores were slower).
    t_out.resize(size_t(P * O));
    float* tmp = t_out.data();
    I8Epilogue e{.a_scale = q.scale, .col_scale = w_scale, .bias = pbias, .relu = relu};
    e.out = {tmp, P, O, O, 1};
    gemm_u8s8({cols, P, K, K, 1}, q.zp, packed, e, nt > 1 ? 1 : 0);
    float* dst = py + b * O * Hq * Wq;
    if (pool) {  // max over each 2x2 window of (pixel, o) rows, written as planes
      for (int64_t oh = 0; oh < Hq; ++oh) {
        for (int64_t o = 0; o < O; ++o) {
          const float* r0 = tmp + (2 * oh) * Wo * O + o;
          const float* r1 = r0 + Wo * O;
          float* row_out = dst + (o * Hq + oh) * Wq;
          for (int64_t ow = 0; ow < Wq; ++ow) {
            const int64_t c0 = 2 * ow * O, c1 = c0 + O;
            row_out[ow] = std::max(std::max(r0[c0], r0[c1]), std::max(r1[c0], r1[c1]));
          }
        }
      }
      continue;
    }
    constexpr int64_t kBlock = 32;
    for (int64_t p0 = 0; p0 < P; p0 += kBlock) {
      const int64_t p1 = std::min(P, p0 + kBlock);
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t pp = p0; pp < p1; ++pp) dst[o * P + pp] = tmp[pp * O + o];
      }
    }
  }
}

// ---- quantize_affine / dequantize_affine: element i of x belongs to channel (i / inner) % C.
struct Channels {
  int64_t count = 1, inner = 1;
  Channels(const Tensor& x, int64_t axis) {
    if (axis < 0) return;
    count = x.size(axis);
    for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  }
  int64_t of(int64_t i) const { return count == 1 ? 0 : (i / inner) % count; }
};

void quantize_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = in[0].contiguous();
  const std::vector<float> scale = in[1].to_vector<float>();
  const std::vector<int64_t> zp = in[2].to_vector<int64_t>();
  std::vector<float> inv(scale.size());
  for (size_t c = 0; c < scale.size(); ++c) inv[c] = 1.0f / scale[c];
  const Channels ch(x, attrs.dim);
  const float* p = x.data<float>();
  const int64_t n = x.numel();
  auto write = [&](auto* dst, int64_t qmin, int64_t qmax) {
    using T = std::remove_pointer_t<decltype(dst)>;
    for (int64_t i = 0; i < n; ++i) {
      const size_t c = size_t(ch.of(i));
      dst[i] = T(quantize_value(p[i], inv[c], zp[c], qmin, qmax));
    }
  };
  if (attrs.dtype == DType::I8) {
    write(out[0].data<int8_t>(), -128, 127);
  } else {
    write(out[0].data<uint8_t>(), 0, 255);
  }
}

void dequantize_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor q = in[0].contiguous();
  const std::vector<float> scale = in[1].to_vector<float>();
  const std::vector<int64_t> zp = in[2].to_vector<int64_t>();
  const Channels ch(q, attrs.dim);
  float* o = out[0].data<float>();
  const int64_t n = q.numel();
  auto read = [&](const auto* src) {
    for (int64_t i = 0; i < n; ++i) {
      const size_t c = size_t(ch.of(i));
      o[i] = (float(src[i]) - float(zp[c])) * scale[c];
    }
  };
  if (q.dtype() == DType::I8) {
    read(q.data<int8_t>());
  } else {
    read(q.data<uint8_t>());
  }
}

}  // namespace

void register_quantized() {
  register_kernel(OpId::QuantizeAffine, DeviceType::CPU, quantize_kernel);
  register_kernel(OpId::DequantizeAffine, DeviceType::CPU, dequantize_kernel);
  const DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Int8PackWeight, cpu, pack_kernel);
  register_kernel(OpId::Int8Linear, cpu, linear_kernel);
  register_kernel(OpId::Int8Conv2d, cpu, conv_kernel);
}

}  // namespace brisk::kernels::cpu
