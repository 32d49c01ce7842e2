// compress/quantize.h: int8 quantization with PyTorch's numerics: observers (min-max, moving-average
// min-max, histogram with PyTorch's L2 search or a percentile), per-tensor and per-channel,
// affine and symmetric qparams; QTensor (int values with scales and zero points); fake
// quantization with the straight-through estimator; and the three flows on CPU models:
// dynamic (quantize_dynamic: Linear), static post-training (fuse, prepare, calibrate, convert:
// Linear, Conv2d, ReLU, conv+bn(+relu) folded) and quantization-aware training (prepare_qat,
// train, convert); quantized models saved and loaded as safetensors. Note [Quantization] in
// compress/quantize.cpp. The quantized modules run the int8 ops int8_linear and int8_conv2d
// (engine/ops/quantized.cpp) on a weight packed by int8_pack_weight.
// Not here: int8 kernels themselves (kernels/cpu/quantized.cpp, kernels/cpu/gemm_i8.h), CUDA
// inference (kernels/cuda/gemm_i8.cu has the GEMM only).
#pragma once

#include <cfloat>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/module.h"

namespace brisk::nn::quantize {

// ---- quantization parameters

enum class QDType { QInt8, QUInt8 };  // torch.qint8 [-128, 127] (I8), torch.quint8 [0, 255] (U8)
enum class QScheme { PerTensorAffine, PerTensorSymmetric, PerChannelAffine, PerChannelSymmetric };

inline bool per_channel(QScheme s) { return s == QScheme::PerChannelAffine || s == QScheme::PerChannelSymmetric; }
inline bool symmetric(QScheme s) { return s == QScheme::PerTensorSymmetric || s == QScheme::PerChannelSymmetric; }

// What an observer (or a fake quantizer) is set up with; PyTorch's observer arguments, in
// PerChannelMinMaxObserver's order (MinMaxObserver's is the same without ch_axis).
struct ObserverOptions {
  int64_t ch_axis = 0;  // per-channel schemes only
  QDType dtype = QDType::QUInt8;
  QScheme qscheme = QScheme::PerTensorAffine;
  bool reduce_range = false;                        // one bit less: [0, 127] / [-64, 63]
  std::optional<int64_t> quant_min{}, quant_max{};  // a custom range (within the dtype's)
  float eps = FLT_EPSILON;                          // smallest scale
};

// Scales (F32) and zero points (I64), each (1) per tensor or (C) per channel along `axis`.
struct QParams {
  Tensor scale{}, zero_point{};
  int64_t axis = -1;  // -1: per tensor
  QDType dtype = QDType::QUInt8;
  int64_t quant_min = 0, quant_max = 255;
  bool per_channel() const { return axis >= 0; }
};

// The [quant_min, quant_max] an observer with these options uses (torch's calculate_qmin_qmax).
std::pair<int64_t, int64_t> quant_range(const ObserverOptions& o);

// PyTorch's _calculate_qparams for per-tensor (one min/max) or per-channel values (F32 math).
QParams calculate_qparams(const std::vector<float>& min_val, const std::vector<float>& max_val,
                          const ObserverOptions& o);

// fbgemm's ChooseQuantizationParams (the dynamic Linear's activation qparams): scale from
// min(min, 0) and max(max, 0) in double, zero point nudged into [qmin, qmax].
std::pair<float, int32_t> choose_qparams(float min, float max, int32_t qmin, int32_t qmax, bool reduce_range);

// ---- observers

class Observer {
 public:
  explicit Observer(ObserverOptions options);
  virtual ~Observer() = default;
  virtual void observe(const Tensor& x) = 0;  // F32, CPU; inf values are ignored
  virtual QParams calculate_qparams() const;
  bool observed() const { return !min_val.empty(); }
  const ObserverOptions options;
  std::vector<float> min_val, max_val;  // one per tensor or per channel
 protected:
  // Min and max of x (per channel along ch_axis when per channel), finite values only.
  void current_min_max(const Tensor& x, std::vector<float>& lo, std::vector<float>& hi) const;
};

// torch.ao.quantization.MinMaxObserver (PerChannelMinMaxObserver with a per-channel scheme).
class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(ObserverOptions options = {}) : Observer(options) {}
  void observe(const Tensor& x) override;
};

// MovingAverage(PerChannel)MinMaxObserver: min = min + c * (batch min - min) after the first.
class MovingAverageMinMaxObserver : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(ObserverOptions options = {}, float averaging_constant = 0.01f)
      : Observer(options), averaging_constant(averaging_constant) {}
  void observe(const Tensor& x) override;
  const float averaging_constant;
};

// HistogramObserver (per tensor only): a histogram over the running [min, max]; qparams from
// the range PyTorch's L2-norm search (_non_linear_param_search) keeps, or from the
// [percentile, 1 - percentile] quantiles of the histogram (bins interpolated linearly).
// Several batches: a batch inside the current range adds to the histogram; one that widens it
// rebins the old counts uniformly into the new range (PyTorch upsamples and resamples, so
// multi-batch histograms match PyTorch only when later batches stay inside the first's range).
enum class HistogramMethod { L2, Percentile };
class HistogramObserver : public Observer {
 public:
  explicit HistogramObserver(ObserverOptions options = {}, int64_t bins = 2048,
                             HistogramMethod method = HistogramMethod::L2, double percentile = 0.9999);
  void observe(const Tensor& x) override;
  QParams calculate_qparams() const override;
  std::pair<float, float> search_range() const;  // the clipped [min, max] qparams come from
  const int64_t bins;
  const HistogramMethod method;
  const double percentile;
  std::vector<float> histogram;
};

// ---- quantized tensors

// int_repr: I8 (qint8) or U8 (quint8) values; the real value is (q - zero_point) * scale.
struct QTensor {
  Tensor int_repr{};
  QParams qparams{};
  Tensor dequantize() const;  // F32
};

// torch.quantize_per_tensor / quantize_per_channel: q = clamp(zp + nearbyint(x * (1 / scale))).
QTensor quantize_per_tensor(const Tensor& x, float scale, int64_t zero_point, QDType dtype);
QTensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                             QDType dtype);
QTensor quantize(const Tensor& x, const QParams& qparams);
Tensor dequantize(const QTensor& q);

// torch.fake_quantize_per_tensor_affine / per_channel_affine: the quantize-dequantize round
// trip in F32; backward is the straight-through estimator (gradient 1 where x quantizes inside
// [quant_min, quant_max], 0 where it was clamped). Differentiable in x (scales are constants).
Tensor fake_quantize_per_tensor_affine(const Tensor& x, float scale, int64_t zero_point, int64_t quant_min,
                                       int64_t quant_max);
Tensor fake_quantize_per_channel_affine(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                                        int64_t quant_min, int64_t quant_max);
Tensor fake_quantize(const Tensor& x, const QParams& qparams);

// A FakeQuantize module: in training, observe then fake quantize; in eval, fake quantize with
// the last qparams. Defaults as PyTorch's default QAT qconfig for fbgemm.
class FakeQuantize : public Module {
 public:
  FakeQuantize(std::shared_ptr<Observer> observer);
  Tensor forward(const Tensor& x) override;
  QParams qparams() const;
  std::shared_ptr<Observer> observer;
  bool observer_enabled = true, fake_quant_enabled = true;
};

// ---- the qconfig: which observers make activation and weight qparams
//
// The factories below that carry PyTorch's names make exactly PyTorch's observers (the same
// qparams, bit for bit; tests/test_quantize.cpp). Where brisk's default differs from PyTorch's,
// the function that uses it says so.

struct QConfig {
  std::function<std::shared_ptr<Observer>()> activation{}, weight{};
};
// torch.ao.quantization.default_qconfig: activations MinMax quint8 reduce_range ([0, 127]),
// weights MinMax per-tensor symmetric qint8.
QConfig default_qconfig();
// torch.ao.quantization.get_default_qconfig(backend): "fbgemm" and "x86" give activations
// HistogramObserver quint8 reduce_range, weights per-channel symmetric qint8 min-max on axis 0;
// "qnnpack" gives HistogramObserver quint8 (full range) and per-tensor symmetric weights. Any
// other backend is an error. brisk's prepare() uses get_default_qconfig("fbgemm").
QConfig get_default_qconfig(const std::string& backend = "fbgemm");
// torch.ao.quantization.default_dynamic_qconfig: weights MinMax per-tensor symmetric qint8
// (what torch's quantize_dynamic uses when given no qconfig). No activation observer: dynamic
// flows choose the input's qparams per call.
QConfig default_dynamic_qconfig();
// torch.ao.quantization.per_channel_dynamic_qconfig: weights per-channel symmetric qint8 on
// axis 0. brisk's quantize_dynamic default.
QConfig per_channel_dynamic_qconfig();
// brisk's: activations MinMax quint8 reduce_range, weights per-channel symmetric qint8 (the
// fbgemm qconfig with a faster calibration than the histogram's).
QConfig minmax_qconfig();
// QAT: moving-average min-max for both (per channel for weights), as get_default_qat_qconfig.
QConfig default_qat_qconfig();

// ---- quantized modules (CPU, F32 in and out; int8 inside)

// y = x @ W^T + b with W int8 per channel (symmetric) packed for the int8 GEMM, x
// quantized per tensor to quint8 on the fly (fbgemm's qparams of its min and max, reduce_range
// as PyTorch's default), int32 accumulation, F32 output. As torch.ao.nn.quantized.dynamic.Linear.
// State: weight (I8 (out, in)), weight_scale (F32 (out)), weight_zero_point (I64 (out)), bias.
class DynamicQuantLinear : public Module {
 public:
  DynamicQuantLinear(const Linear& linear, const QParams& weight_qparams, bool reduce_range = true);
  Tensor forward(const Tensor& x) override;
  void repack();  // after loading new int values or scales
  int64_t in_features, out_features;
  bool reduce_range;

 private:
  Tensor packed_, col_sum_;  // int8_pack_weight of the weight (remade by repack, not state)
  Tensor w_scale_;           // F32 (out): the weight's scale per output channel
};

// Static: the input's qparams fixed at convert time (from calibration or QAT), optional fused
// ReLU. State as DynamicQuantLinear plus input_scale (F32 (1)), input_zero_point (I64 (1)).
class QuantizedLinear : public Module {
 public:
  QuantizedLinear(const Tensor& weight, const Tensor& bias, const QParams& weight_qparams, const QParams& input,
                  bool relu);
  Tensor forward(const Tensor& x) override;
  void repack();
  int64_t in_features, out_features;
  bool relu;

 private:
  Tensor packed_, col_sum_;  // int8_pack_weight of the weight (remade by repack, not state)
  Tensor w_scale_;           // F32 (out): the weight's scale per output channel
};

// Conv2d (groups 1) as im2col of the quantized input (padding reads the zero point) times the
// packed int8 weight (O, C * kh * kw), per sample, F32 NCHW output; optional fused ReLU and
// 2x2 max pooling (stride 2, floor), applied to the F32 results as the separate layers would.
class QuantizedConv2d : public Module {
 public:
  QuantizedConv2d(const Conv2d& conv, const Tensor& weight, const Tensor& bias, const QParams& weight_qparams,
                  const QParams& input, bool relu, bool pool = false);
  Tensor forward(const Tensor& x) override;
  void repack();
  int64_t in_channels, out_channels;
  Pair kernel_size;
  ConvOptions options;
  bool relu, pool;

 private:
  Tensor packed_, col_sum_;  // int8_pack_weight of the weight (remade by repack, not state)
  Tensor w_scale_;           // F32 (out): the weight's scale per output channel
};

// ---- flows

struct QuantizeOptions {
  // Modules with parameters that a flow cannot quantize (LayerNorm, Embedding, a batch norm
  // not after a conv, ...) are an error naming them; true keeps them in F32 instead.
  bool keep_unsupported_float = false;
  // convert(): observers that never ran are an error; true gives them PyTorch's defaults
  // (scale 1, zero point 0), to build a skeleton that load_quantized then fills.
  bool allow_uncalibrated = false;
  bool reduce_range = true;  // quantize_dynamic's activations
};

// Replaces every Linear (at any depth) by a DynamicQuantLinear whose int8 weights take their
// qparams from qconfig.weight (qint8, symmetric, per tensor or per channel on axis 0; its
// activation observer is not used). Returns the model (modified in place). Its other modules
// stay as they are (dynamic quantization is Linear only).
//
// The default differs from PyTorch's: brisk quantizes weights per channel
// (per_channel_dynamic_qconfig), torch.ao.quantization.quantize_dynamic with no qconfig per
// tensor (default_dynamic_qconfig). Per channel keeps each output row's own range, so a row of
// small weights beside one of large weights loses no precision, and it costs nothing here: the
// int8 GEMM applies a scale per output column in its epilogue either way. Pass
// default_dynamic_qconfig() for PyTorch's results.
ModulePtr quantize_dynamic(ModulePtr model, const QConfig& qconfig = per_channel_dynamic_qconfig(),
                           const QuantizeOptions& options = {});

// Folds (Conv2d, BatchNorm2d[, ReLU][, MaxPool2d 2x2]) and merges (Conv2d | Linear, ReLU) runs
// inside every Sequential into one Fused module (batch norm folded with its running statistics,
// so the model must be in eval mode); the absorbed modules become Identity, as torch.ao's
// fuse_modules. A 2x2 / stride 2 max pool after a conv is absorbed too (the quantized conv
// pools its F32 results while writing them).
ModulePtr fuse(ModulePtr model);

// Conv2d or Linear with a batch norm already folded into its weights and an optional ReLU.
class Fused : public Module {
 public:
  Fused(ModulePtr layer, bool relu, bool pool = false);
  Tensor forward(const Tensor& x) override;
  ModulePtr layer;  // Linear or Conv2d (child "0", as torch's ConvReLU2d)
  bool relu, pool;  // pool: 2x2 max pooling, stride 2 (convs only)
};

// Static PTQ: fuse (eval mode) and wrap each Linear / Conv2d with observers of its input and
// weight. Run calibration batches through the result, then convert(). The default qconfig is
// PyTorch's recommended one for x86 (get_default_qconfig("fbgemm"): histogram activations,
// per-channel weights), not torch.ao.quantization.default_qconfig (min-max activations,
// per-tensor weights): pass default_qconfig() for that.
ModulePtr prepare(ModulePtr model, const QConfig& qconfig = get_default_qconfig(), const QuantizeOptions& options = {});
// QAT: fuse (folding batch norm with its current statistics), then fake quantization of the
// weights and inputs of each Linear / Conv2d; train it (train mode), then convert().
ModulePtr prepare_qat(ModulePtr model, const QConfig& qconfig = default_qat_qconfig(),
                      const QuantizeOptions& options = {});
// Observed or QAT modules -> QuantizedLinear / QuantizedConv2d (eval mode).
ModulePtr convert(ModulePtr model, const QuantizeOptions& options = {});

// ---- files

// The state_dict of a quantized model (int values, scales, zero points as named in the modules
// above; everything else as usual) as safetensors, with metadata "brisk.quantized" = "1".
void save_quantized(const Module& model, const std::string& path);
// Loads such a file into a quantized model of the same architecture (converted, or a
// skeleton: convert with allow_uncalibrated) and repacks its weights. A file tensor whose dtype
// differs from the module's (int8 weights into an F32 model) is an error naming the key.
void load_quantized(Module& model, const std::string& path);

}  // namespace brisk::nn::quantize
