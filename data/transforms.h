// data/transforms.h: per-sample augmentation and conversion, executed as ONE fused pass that
// writes straight into the batch buffer: random crop with padding, horizontal flip, U8 to
// float scaling, per-channel normalization and random erasing happen in a single loop over
// the output pixels, with no intermediate tensor. Random choices come from Philox keyed by
// (seed, epoch, sample index), so they do not depend on which worker thread runs them.
// Feature vectors (tabular samples (F), as CsvDataset gives) have their own fused steps:
// missing-value filling, standardization, min-max scaling and one-hot expansion, with the
// per-feature statistics computed from a dataset or a tensor (feature_stats).
// Batch-level versions for batches already on a device are at the end (ops, any device).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "engine/tensor.h"

namespace brisk::data {

// One step of a pipeline; build with the functions below and combine with Compose.
struct Transform {
  enum class Kind {
    ToTensor,
    Normalize,
    RandomCrop,
    CenterCrop,
    RandomHorizontalFlip,
    RandomErasing,
    FillMissing,
    Standardize,
    MinMax,
    OneHot
  };
  Kind kind;
  std::vector<double> mean = {}, std = {};                                             // Normalize
  int64_t height = 0, width = 0;                                                       // crops
  int64_t padding = 0;                                                                 // RandomCrop
  double p = 0.5;                                                                      // flip / erasing probability
  double scale_lo = 0.02, scale_hi = 0.33, ratio_lo = 0.3, ratio_hi = 3.3, value = 0;  // RandomErasing
  std::vector<double> values = {};                                                     // FillMissing
  std::vector<double> low = {}, high = {};                                             // MinMax
  int64_t column = 0, num_classes = 0;                                                 // OneHot
};

Transform to_tensor();  // U8 [0, 255] -> F32 [0, 1]
Transform normalize(std::vector<double> mean, std::vector<double> std);
Transform random_crop(int64_t height, int64_t width, int64_t padding = 0);
Transform center_crop(int64_t height, int64_t width);
Transform random_horizontal_flip(double p = 0.5);
Transform random_erasing(double p = 0.5, double scale_lo = 0.02, double scale_hi = 0.33, double ratio_lo = 0.3,
                         double ratio_hi = 3.3, double value = 0);

// ---- feature vectors: samples (F) of any real or integer dtype, output F32. Per-feature lists
// have F entries (the sample's input features, before any one_hot) or 1 for all features.
// A pipeline runs them in this order, as one pass per feature: fill_missing, standardize,
// min_max, one_hot (repeatable, one column each). Columns that a one_hot expands keep their
// codes through standardize and min_max (their entries there are ignored).
// NaN -> values[f]; a NaN in `values` leaves that feature missing.
Transform fill_missing(std::vector<double> values);
// (x - mean) / std, as sklearn's StandardScaler; std must be positive.
Transform standardize(std::vector<double> mean, std::vector<double> std);
// (x - min) / (max - min): [min, max] -> [0, 1], as sklearn's MinMaxScaler; a feature with
// max == min becomes x - min (0 on the data it was computed from).
Transform min_max(std::vector<double> min, std::vector<double> max);
// Replaces feature `column` (holding class codes 0..num_classes-1, as CsvDataset's categorical
// columns) by num_classes indicator features, 1 at the code and 0 elsewhere, IN PLACE: the
// output is the features before it, its indicators (class 0 first), the features after it.
// A missing (NaN) code gives all zeros; any other non-class value is an error.
Transform one_hot(int64_t column, int64_t num_classes);

// Per-feature statistics over samples, ignoring missing (NaN) values, as sklearn's scalers.
// std is the population standard deviation (divides by the count, as StandardScaler), with
// 1 where it is 0 (a constant feature), so standardize(mean, std) always accepts it.
struct FeatureStats {
  std::vector<double> mean{}, std{}, min{}, max{};
  std::vector<int64_t> count{};  // non-missing values per feature
};
// x: (N, F) (or (N, ...), flattened per sample), any device and real dtype.
FeatureStats feature_stats(const Tensor& x);
// Over a dataset's inputs (use the TRAIN split: a Subset from random_split works), through
// inputs() when it has tensors, else sample by sample.
FeatureStats feature_stats(const Dataset& dataset);
Transform standardize(const FeatureStats& stats);
Transform min_max(const FeatureStats& stats);

// A pipeline in torchvision's usual order: geometry (crop, flip), then to_tensor, normalize,
// then erasing; or of feature-vector steps in the order above (the two kinds do not mix).
// Steps out of order are an error (they could not be fused).
class Compose {
 public:
  Compose() = default;
  explicit Compose(std::vector<Transform> steps);
  bool empty() const { return steps_.empty(); }
  bool for_features() const { return features_; }
  // The output's sizes for an input sample of `in` sizes: images (H, W) or (C, H, W) ->
  // (C, H', W'); feature vectors (F) -> (F') (one_hot adds num_classes - 1 features).
  Shape output_shape(const Shape& in) const;
  // Writes the transformed sample (on the CPU; images U8 or F32) as F32 at dst.
  void apply(const Tensor& input, float* dst, uint64_t seed, uint64_t epoch, uint64_t index) const;
  // Every row of `samples` (N, ...) through the pipeline, row i as sample index i: the F32
  // (N, ...) tensor that a DataLoader over these rows gives for `epoch` (CPU).
  Tensor apply_rows(const Tensor& samples, uint64_t seed = 0, uint64_t epoch = 0) const;

 private:
  void add_image_step(const Transform& t, int& last);
  void add_feature_step(const Transform& t, int& last);
  void apply_features(const Tensor& input, float* dst, uint64_t index) const;

  std::vector<Transform> steps_;
  std::optional<Transform> crop_, flip_, erasing_;
  std::vector<double> mean_, std_;
  bool scale_ = false;
  bool features_ = false;
  std::optional<Transform> fill_, standardize_, min_max_;
  std::vector<std::pair<int64_t, int64_t>> one_hot_;  // (column, num_classes), by column
};

// ---- on whole batches (B, C, H, W), any device; built from ops
Tensor normalize_batch(const Tensor& batch, const std::vector<double>& mean, const std::vector<double>& std);
// Flips each sample with probability p; the choices come from the default generator.
Tensor random_horizontal_flip_batch(const Tensor& batch, double p = 0.5);

}  // namespace brisk::data
