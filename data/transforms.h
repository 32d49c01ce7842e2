// data/transforms.h: per-sample augmentation and conversion, executed as ONE fused pass that
// writes straight into the batch buffer: random crop with padding, horizontal flip, U8 to
// float scaling, per-channel normalization and random erasing happen in a single loop over
// the output pixels, with no intermediate tensor. Random choices come from Philox keyed by
// (seed, epoch, sample index), so they do not depend on which worker thread runs them.
// Batch-level versions for batches already on a device are at the end (ops, any device).
#pragma once

#include <optional>
#include <vector>

#include "engine/tensor.h"

namespace brisk::data {

// One step of a pipeline; build with the functions below and combine with Compose.
struct Transform {
  enum class Kind { ToTensor, Normalize, RandomCrop, CenterCrop, RandomHorizontalFlip, RandomErasing };
  Kind kind;
  std::vector<double> mean = {}, std = {};                                             // Normalize
  int64_t height = 0, width = 0;                                                       // crops
  int64_t padding = 0;                                                                 // RandomCrop
  double p = 0.5;                                                                      // flip / erasing probability
  double scale_lo = 0.02, scale_hi = 0.33, ratio_lo = 0.3, ratio_hi = 3.3, value = 0;  // RandomErasing
};

Transform to_tensor();  // U8 [0, 255] -> F32 [0, 1]
Transform normalize(std::vector<double> mean, std::vector<double> std);
Transform random_crop(int64_t height, int64_t width, int64_t padding = 0);
Transform center_crop(int64_t height, int64_t width);
Transform random_horizontal_flip(double p = 0.5);
Transform random_erasing(double p = 0.5, double scale_lo = 0.02, double scale_hi = 0.33, double ratio_lo = 0.3,
                         double ratio_hi = 3.3, double value = 0);

// A pipeline in torchvision's usual order: geometry (crop, flip), then to_tensor, normalize,
// then erasing. Steps out of that order are an error (they could not be fused).
class Compose {
 public:
  Compose() = default;
  explicit Compose(std::vector<Transform> steps);
  bool empty() const { return steps_.empty(); }
  // (C, H, W) of the output for an input sample of `in` sizes ((H, W) or (C, H, W)).
  Shape output_shape(const Shape& in) const;
  // Writes the transformed sample (U8 or F32 input on the CPU) as F32 at dst.
  void apply(const Tensor& input, float* dst, uint64_t seed, uint64_t epoch, uint64_t index) const;

 private:
  std::vector<Transform> steps_;
  std::optional<Transform> crop_, flip_, erasing_;
  std::vector<double> mean_, std_;
  bool scale_ = false;
};

// ---- on whole batches (B, C, H, W), any device; built from ops
Tensor normalize_batch(const Tensor& batch, const std::vector<double>& mean, const std::vector<double>& std);
// Flips each sample with probability p; the choices come from the default generator.
Tensor random_horizontal_flip_batch(const Tensor& batch, double p = 0.5);

}  // namespace brisk::data
