// opcheck/specs_quantized.cpp: specs of the int8 ops (engine/ops/quantized.cpp): quantize_affine
// and dequantize_affine (per tensor, per channel), int8_linear (fixed and dynamic input
// qparams, bias, ReLU) and int8_conv2d (padding, stride,
// ReLU, the 2x2 pool), with int8_pack_weight inside each, against plain loops that quantize
// the input as torch.quantize_per_tensor does (F32, half to even), accumulate exactly and apply
// the epilogue fma(acc, a_scale * w_scale, bias) in F32, so the two agree bit for bit.
// The inputs the checker varies are x (any floating dtype, cast to F32 inside) and the I8
// weight; scales and bias are fixed. CPU only, no gradients.
// Not here: agreement with PyTorch's quantized modules (tests/test_quantize.cpp).
#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/op_params.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using V = std::vector<double>;

constexpr float kScale = 0.02f;
constexpr int32_t kZeroPoint = 128;

std::vector<float> w_scales(int64_t n) {
  std::vector<float> s;
  for (int64_t j = 0; j < n; ++j) s.push_back(0.01f + 0.005f * float(j));
  return s;
}
std::vector<float> biases(int64_t n) {
  std::vector<float> b;
  for (int64_t j = 0; j < n; ++j) b.push_back(0.25f * float(j) - 0.5f);
  return b;
}

// torch.quantize_per_tensor of one F32 value to quint8.
int32_t quantized(float x, float scale, int32_t zp) {
  const float inv = 1.0f / scale;
  const float v = std::min(std::max(x * inv, float(-zp - 1)), float(255 - zp + 1));
  return std::clamp<int32_t>(zp + int32_t(std::nearbyint(v)), 0, 255);
}

float epilogue(int64_t acc, float a_scale, float w_scale, float bias, bool relu) {
  const float y = std::fma(float(acc), a_scale * w_scale, bias);
  return relu ? std::max(y, 0.0f) : y;
}

// The op's F32 input: the checker's x in whatever dtype, as F32.
Tensor f32(const Tensor& x) { return cast(x.detach(), DType::F32); }

// ---- int8_linear: x (*, K), w I8 (N, K)
OpSpec linear_spec(const std::string& name, bool dynamic, bool relu) {
  OpSpec spec;
  spec.name = name;
  spec.covers = {OpId::Int8Linear, OpId::Int8PackWeight};
  spec.fn = [dynamic, relu](const std::vector<Tensor>& in) {
    const Tensor& w = in[1];
    const int64_t n = w.size(0);
    const auto [packed, col_sum] = int8_pack_weight(w);
    const Int8Params p{
        .input_scale = kScale, .input_zero_point = kZeroPoint, .dynamic = dynamic, .reduce_range = true, .relu = relu};
    const std::vector<float> sv = w_scales(n), bv = biases(n);
    const Tensor s = from_data(sv.data(), {n}), b = from_data(bv.data(), {n});
    return cast(int8_linear(f32(in[0]), w, s, packed, col_sum, b, p), DType::F64);
  };
  spec.reference = [dynamic, relu](const std::vector<Tensor>& in) {
    const std::vector<float> x = f32(in[0]).to_vector<float>();
    const std::vector<int64_t> w = in[1].to_vector<int64_t>();
    const int64_t n = in[1].size(0), k = in[1].size(1), m = int64_t(x.size()) / k;
    float scale = kScale;
    int32_t zp = kZeroPoint;
    if (dynamic) {
      const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
      std::tie(scale, zp) = choose_int8_qparams(*lo, *hi, 0, 255, true);
    }
    const std::vector<float> ws = w_scales(n), bs = biases(n);
    V y;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t t = 0; t < k; ++t) acc += (quantized(x[size_t(i * k + t)], scale, zp) - zp) * w[size_t(j * k + t)];
        y.push_back(epilogue(acc, scale, ws[size_t(j)], bs[size_t(j)], relu));
      }
    }
    Shape s = in[0].sizes();
    s[s.size() - 1] = n;
    return from_vector(y, s, DType::F64);
  };
  spec.cases = [] {
    const Tensor w = cast(uniform_values({5, 7}, -127, 127, 41), DType::I8);
    return std::vector<OpCase>{{"x (2, 3, 7), w (5, 7)", {uniform_values({2, 3, 7}, -2, 2, 42), w}},
                               {"x (4, 7), w (5, 7)", {uniform_values({4, 7}, -1, 3, 43), w}}};
  };
  spec.grad = false;
  spec.integers = false;
  spec.cuda = false;
  return spec;
}

// ---- int8_conv2d: x (B, C, H, W), w I8 (O, C, 3, 3), padding 1, stride `stride`
OpSpec conv_spec(const std::string& name, int64_t stride, bool relu, bool pool) {
  OpSpec spec;
  spec.name = name;
  spec.covers = {OpId::Int8Conv2d, OpId::Int8PackWeight};
  auto params = [=] {
    Int8Params p{.input_scale = kScale, .input_zero_point = kZeroPoint, .relu = relu, .pool = pool};
    p.stride = {stride, stride};
    p.padding = {1, 1};
    return p;
  };
  spec.fn = [params](const std::vector<Tensor>& in) {
    const Tensor& w = in[1];
    const int64_t o = w.size(0);
    const auto [packed, col_sum] = int8_pack_weight(w.permute(Shape{0, 2, 3, 1}).contiguous());
    const std::vector<float> sv = w_scales(o), bv = biases(o);
    const Tensor s = from_data(sv.data(), {o}), b = from_data(bv.data(), {o});
    return cast(int8_conv2d(f32(in[0]), w, s, packed, col_sum, b, params()), DType::F64);
  };
  spec.reference = [stride, relu, pool](const std::vector<Tensor>& in) {
    const std::vector<float> x = f32(in[0]).to_vector<float>();
    const std::vector<int64_t> w = in[1].to_vector<int64_t>();
    const int64_t B = in[0].size(0), C = in[0].size(1), H = in[0].size(2), W = in[0].size(3), O = in[1].size(0);
    const int64_t Ho = (H + 2 - 3) / stride + 1, Wo = (W + 2 - 3) / stride + 1;
    const std::vector<float> ws = w_scales(O), bs = biases(O);
    std::vector<float> y(size_t(B * O * Ho * Wo));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t oh = 0; oh < Ho; ++oh) {
          for (int64_t ow = 0; ow < Wo; ++ow) {
            int64_t acc = 0;  // padding reads the zero point: it adds nothing
            for (int64_t c = 0; c < C; ++c) {
              for (int64_t i = 0; i < 3; ++i) {
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t h = oh * stride + i - 1, v = ow * stride + j - 1;
                  if (h < 0 || h >= H || v < 0 || v >= W) continue;
                  const int32_t q = quantized(x[size_t(((b * C + c) * H + h) * W + v)], kScale, kZeroPoint);
                  acc += (q - kZeroPoint) * w[size_t(((o * C + c) * 3 + i) * 3 + j)];
                }
              }
            }
            y[size_t(((b * O + o) * Ho + oh) * Wo + ow)] = epilogue(acc, kScale, ws[size_t(o)], bs[size_t(o)], relu);
          }
        }
      }
    }
    if (!pool) {
      return from_vector(V(y.begin(), y.end()), {B, O, Ho, Wo}, DType::F64);
    }
    V pooled;
    for (int64_t bo = 0; bo < B * O; ++bo) {
      for (int64_t oh = 0; oh < Ho / 2; ++oh) {
        for (int64_t ow = 0; ow < Wo / 2; ++ow) {
          auto at = [&](int64_t h, int64_t v) { return y[size_t((bo * Ho + h) * Wo + v)]; };
          pooled.push_back(std::max(std::max(at(2 * oh, 2 * ow), at(2 * oh, 2 * ow + 1)),
                                    std::max(at(2 * oh + 1, 2 * ow), at(2 * oh + 1, 2 * ow + 1))));
        }
      }
    }
    return from_vector(pooled, {B, O, Ho / 2, Wo / 2}, DType::F64);
  };
  spec.cases = [] {
    const Tensor w = cast(uniform_values({4, 3, 3, 3}, -127, 127, 51), DType::I8);
    return std::vector<OpCase>{{"x (2, 3, 6, 5), w (4, 3, 3, 3)", {uniform_values({2, 3, 6, 5}, -2, 2, 52), w}}};
  };
  spec.grad = false;
  spec.integers = false;
  spec.cuda = false;
  return spec;
}

// ---- quantize_affine / dequantize_affine: per tensor (axis -1) or along axis 0 of (3, 4)
struct Affine {
  int64_t axis;
  DType dtype;
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
};

Tensor scale_of(const Affine& a) { return from_data(a.scale.data(), {int64_t(a.scale.size())}); }
Tensor zero_point_of(const Affine& a) { return from_data(a.zero_point.data(), {int64_t(a.zero_point.size())}); }
size_t channel_of(const Affine& a, int64_t i, const Tensor& x) {
  return a.axis < 0 ? 0 : size_t(i / (x.numel() / x.size(0)));  // axis 0
}

OpSpec quantize_spec(const std::string& name, Affine a) {
  OpSpec spec;
  spec.name = name;
  spec.covers = {OpId::QuantizeAffine};
  spec.fn = [a](const std::vector<Tensor>& in) {
    return cast(quantize_affine(f32(in[0]), scale_of(a), zero_point_of(a), a.axis, a.dtype), DType::F64);
  };
  spec.reference = [a](const std::vector<Tensor>& in) {
    const std::vector<float> x = f32(in[0]).to_vector<float>();
    const int64_t qmin = a.dtype == DType::I8 ? -128 : 0, qmax = a.dtype == DType::I8 ? 127 : 255;
    V y;
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t c = channel_of(a, int64_t(i), in[0]);
      const float r = std::nearbyint(x[i] * (1.0f / a.scale[c]));
      y.push_back(double(std::clamp<int64_t>(int64_t(float(a.zero_point[c]) + r), qmin, qmax)));
    }
    return from_vector(y, in[0].sizes(), DType::F64);
  };
  spec.cases = [] { return std::vector<OpCase>{{"(3, 4) over [-8, 8)", {uniform_values({3, 4}, -8, 8, 61)}}}; };
  spec.grad = false;
  spec.integers = false;
  spec.cuda = false;
  return spec;
}

OpSpec dequantize_spec(const std::string& name, Affine a) {
  OpSpec spec;
  spec.name = name;
  spec.covers = {OpId::DequantizeAffine};
  spec.fn = [a](const std::vector<Tensor>& in) {
    return cast(dequantize_affine(in[0], scale_of(a), zero_point_of(a), a.axis), DType::F64);
  };
  spec.reference = [a](const std::vector<Tensor>& in) {
    const std::vector<int64_t> q = in[0].to_vector<int64_t>();
    V y;
    for (size_t i = 0; i < q.size(); ++i) {
      const size_t c = channel_of(a, int64_t(i), in[0]);
      y.push_back((float(q[i]) - float(a.zero_point[c])) * a.scale[c]);
    }
    return from_vector(y, in[0].sizes(), DType::F64);
  };
  spec.cases = [a] {
    const double lo = a.dtype == DType::I8 ? -128 : 0, hi = a.dtype == DType::I8 ? 127 : 255;
    return std::vector<OpCase>{{"(3, 4)", {cast(uniform_values({3, 4}, lo, hi, 62), a.dtype)}}};
  };
  spec.grad = false;
  spec.integers = false;
  spec.cuda = false;
  return spec;
}

}  // namespace

void add_quantized_specs(std::vector<OpSpec>& specs) {
  const Affine per_tensor{-1, DType::I8, {0.05f}, {3}};
  const Affine per_channel{0, DType::U8, {0.05f, 0.02f, 0.1f}, {128, 0, 255}};
  specs.push_back(quantize_spec("quantize_affine (per tensor, I8)", per_tensor));
  specs.push_back(quantize_spec("quantize_affine (per channel, U8)", per_channel));
  specs.push_back(dequantize_spec("dequantize_affine (per tensor, I8)", per_tensor));
  specs.push_back(dequantize_spec("dequantize_affine (per channel, U8)", per_channel));
  specs.push_back(linear_spec("int8_linear (static qparams)", false, false));
  specs.push_back(linear_spec("int8_linear (dynamic qparams, ReLU)", true, true));
  specs.push_back(conv_spec("int8_conv2d (padding 1, ReLU)", 1, true, false));
  specs.push_back(conv_spec("int8_conv2d (stride 2)", 2, false, false));
  specs.push_back(conv_spec("int8_conv2d (ReLU, 2x2 pool)", 1, true, true));
}

}  // namespace brisk::opcheck
