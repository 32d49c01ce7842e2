// engine/ops/quantized.cpp: OpDefs and public functions of the int8 ops compress/quantize.h runs:
// int8_pack_weight, int8_linear, int8_conv2d, quantize_affine, dequantize_affine. Inference
// checks every input's dtype and shape, naming the op; no backward (inference only).
// Parameters: Int8Params (engine/op_params.h).
// Not here: the kernels (kernels/cpu/quantized.cpp, over the GEMM of kernels/cpu/gemm_i8.h),
// qparams and observers (compress/quantize.cpp), ONNX export of these ops (interop/onnx_export.cpp).
#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

// Note [Int8 ops]
// The quantized Linear and Conv2d run the int8 GEMM on a weight packed once, at convert or
// load time, into the layout the VNNI kernel reads. Both steps are ops: int8_pack_weight
// returns the packed bytes and column sums as tensors the module keeps (not state: they are
// remade from the int8 weight), and int8_linear / int8_conv2d take the int8 weight and its
// per-channel scales beside the packed form. The kernels read only the packed form; the
// weight and scales are inputs so that everything a reader of the op needs is in its record:
// the ONNX exporter writes them as DequantizeLinear initializers (Note [Int8 export] in
// interop/onnx_export.cpp), the profiler shows the op with its shapes. The input's
// quantization (fixed qparams, or dynamic ones from its min and max) is inside the op, as
// PyTorch's quantized::linear_dynamic does.

namespace {

using detail::define;

void check_weight_inputs(std::span<const Tensor> in, int64_t n, int64_t k, const char* op) {
  BRISK_CHECK(in.size() == 5 || in.size() == 6, op, ": expects (x, w, w_scale, packed, col_sum[, bias]), got ",
              in.size(), " inputs");
  const Tensor& scale = in[2];
  const Tensor& packed = in[3];
  const Tensor& col_sum = in[4];
  const int64_t kp = (std::max<int64_t>(k, 1) + 3) / 4 * 4, np = (std::max<int64_t>(n, 1) + 15) / 16 * 16;
  BRISK_CHECK(scale.dtype() == DType::F32 && scale.sizes() == Shape{n}, op, ": w_scale must be F32 (", n, "), got ",
              scale.str());
  BRISK_CHECK(packed.dtype() == DType::I8 && packed.sizes() == Shape{kp * np}, op, ": packed must be I8 (", kp * np,
              ") (int8_pack_weight of the weight), got ", packed.str());
  BRISK_CHECK(col_sum.dtype() == DType::I32 && col_sum.sizes() == Shape{np}, op, ": col_sum must be I32 (", np,
              "), got ", col_sum.str());
  if (in.size() == 6) {
    BRISK_CHECK(in[5].dtype() == DType::F32 && in[5].sizes() == Shape{n}, op, ": bias must be F32 (", n, "), got ",
                in[5].str());
  }
}

// ---- int8_pack_weight: w I8 (N, K...) -> packed I8 (kp * np), col_sum I32 (np)
void pack_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Tensor& w = in[0];
  BRISK_CHECK(w.dtype() == DType::I8 && w.dim() >= 1, "int8_pack_weight: expects an I8 weight (N, K...), got ",
              w.str());
  const int64_t n = w.size(0), k = n ? w.numel() / n : 0;
  const int64_t kp = (std::max<int64_t>(k, 1) + 3) / 4 * 4, np = (std::max<int64_t>(n, 1) + 15) / 16 * 16;
  out[0] = {Shape{kp * np}, DType::I8};
  out[1] = {Shape{np}, DType::I32};
}

// ---- int8_linear: (x F32 (*, K), w I8 (N, K), w_scale, packed, col_sum[, bias]) -> F32 (*, N)
void linear_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() >= 2, "int8_linear: expects (x, w, w_scale, packed, col_sum[, bias]), got ", in.size(),
              " inputs");
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  BRISK_CHECK(w.dtype() == DType::I8 && w.dim() == 2, "int8_linear: w must be I8 (N, K), got ", w.str());
  BRISK_CHECK(x.dtype() == DType::F32 && x.dim() >= 1 && x.size(-1) == w.size(1), "int8_linear: x must be F32 (*, ",
              w.size(1), "), got ", x.str());
  check_weight_inputs(in, w.size(0), w.size(1), "int8_linear");
  Shape s = x.sizes();
  s[s.size() - 1] = w.size(0);
  out[0] = {s, DType::F32};
}

// ---- int8_conv2d: (x F32 (B, C, H, W), w I8 (O, C, kh, kw), ...) -> F32 (B, O, Ho, Wo)
void conv_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(in.size() >= 2, "int8_conv2d: expects (x, w, w_scale, packed, col_sum[, bias]), got ", in.size(),
              " inputs");
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Int8Params p = Int8Params::from(attrs);
  BRISK_CHECK(w.dtype() == DType::I8 && w.dim() == 4, "int8_conv2d: w must be I8 (O, C, kh, kw), got ", w.str());
  BRISK_CHECK(x.dtype() == DType::F32 && x.dim() == 4 && x.size(1) == w.size(1), "int8_conv2d: x must be F32 (B, ",
              w.size(1), ", H, W), got ", x.str());
  check_weight_inputs(in, w.size(0), w.numel() / std::max<int64_t>(w.size(0), 1), "int8_conv2d");
  BRISK_CHECK(!p.dynamic, "int8_conv2d: dynamic input qparams are for int8_linear only");
  const ConvGeometry g = ConvGeometry::infer(x.sizes(), w.sizes(), p.conv(), "int8_conv2d");
  const int64_t ho = g.Ho, wo = g.Wo;
  BRISK_CHECK(!p.pool || (ho >= 2 && wo >= 2), "int8_conv2d: output (", ho, ", ", wo, ") too small to pool 2x2");
  out[0] = {Shape{x.size(0), w.size(0), p.pool ? ho / 2 : ho, p.pool ? wo / 2 : wo}, DType::F32};
}

// ---- quantize_affine / dequantize_affine: (x, scale (C), zero_point (C)); axis in attrs.dim
void check_affine(std::span<const Tensor> in, int64_t axis, const char* op) {
  const Tensor& x = in[0];
  BRISK_CHECK(axis >= -1 && axis < x.dim(), op, ": channel axis ", axis, " out of range for ", x.str());
  const int64_t c = axis < 0 ? 1 : x.size(axis);
  BRISK_CHECK(in[1].dtype() == DType::F32 && in[1].sizes() == Shape{c}, op, ": scale must be F32 (", c, "), got ",
              in[1].str());
  BRISK_CHECK(in[2].dtype() == DType::I64 && in[2].sizes() == Shape{c}, op, ": zero_point must be I64 (", c, "), got ",
              in[2].str());
}

void quantize_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() == DType::F32, "quantize_affine: x must be F32, got ", in[0].str());
  BRISK_CHECK(attrs.dtype == DType::I8 || attrs.dtype == DType::U8, "quantize_affine: quantizes to I8 or U8, not ",
              attrs.dtype);
  check_affine(in, attrs.dim, "quantize_affine");
  out[0] = {in[0].sizes(), attrs.dtype};
}

void dequantize_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() == DType::I8 || in[0].dtype() == DType::U8, "dequantize_affine: q must be I8 or U8, got ",
              in[0].str());
  check_affine(in, attrs.dim, "dequantize_affine");
  out[0] = {in[0].sizes(), DType::F32};
}

std::vector<Tensor> weight_inputs(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& packed,
                                  const Tensor& col_sum, const Tensor& bias) {
  std::vector<Tensor> in = {x, w, w_scale, packed, col_sum};
  if (bias.defined()) in.push_back(bias);
  return in;
}

}  // namespace

std::pair<Tensor, Tensor> int8_pack_weight(const Tensor& w) {
  Tensor out[2];
  const Tensor in[] = {w};
  call(OpId::Int8PackWeight, in, Attrs{}, out);
  return {out[0], out[1]};
}

Tensor int8_linear(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& packed, const Tensor& col_sum,
                   const Tensor& bias, const Int8Params& p) {
  Attrs attrs;
  p.store(attrs);
  Tensor out[1];
  call(OpId::Int8Linear, weight_inputs(x, w, w_scale, packed, col_sum, bias), attrs, out);
  return out[0];
}

Tensor int8_conv2d(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& packed, const Tensor& col_sum,
                   const Tensor& bias, const Int8Params& p) {
  Attrs attrs;
  p.store(attrs);
  Tensor out[1];
  call(OpId::Int8Conv2d, weight_inputs(x, w, w_scale, packed, col_sum, bias), attrs, out);
  return out[0];
}

Tensor quantize_affine(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis, DType dtype) {
  return call1(OpId::QuantizeAffine, {x, scale, zero_point}, {.dim = axis, .dtype = dtype});
}

Tensor dequantize_affine(const Tensor& q, const Tensor& scale, const Tensor& zero_point, int64_t axis) {
  return call1(OpId::DequantizeAffine, {q, scale, zero_point}, {.dim = axis});
}

namespace detail {

void define_quantized_ops() {
  define(OpId::QuantizeAffine, {.infer = quantize_infer});
  define(OpId::DequantizeAffine, {.infer = dequantize_infer});
  define(OpId::Int8PackWeight, {.infer = pack_infer});
  define(OpId::Int8Linear, {.infer = linear_infer});
  define(OpId::Int8Conv2d, {.infer = conv_infer});
}

}  // namespace detail

}  // namespace brisk
