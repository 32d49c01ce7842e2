// data/readers.h: datasets read from files: IDX files (the MNIST format, gzip through zlib)
// and FashionMNIST on top of them, CSV files (numeric and categorical columns, missing
// values), and image folders (PNG/JPEG decoded by stb_image, one class per subfolder). Errors
// name the file, what was wrong (for CSV: the line, row and column, and the columns the file
// has), and for Fashion-MNIST how to install the data package.
#pragma once

#include <concepts>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace brisk::data {

// Images whose header claims more pixels than this are refused before decoding (read_image,
// ImageFolder).
inline constexpr int64_t kImageMaxPixels = int64_t(1) << 27;

// Reads an IDX file (optionally gzip'd): magic 0x00 0x00 type ndims, big-endian dims, data.
// Supports type 0x08 (U8). Returns a U8 tensor with the file's dims. The data is inflated
// straight into the tensor, so memory is bounded by what the header promises; a promise of
// more than `max_bytes`, a stream longer or shorter than the promise, and a truncated or
// corrupt gzip stream are errors naming the file.
inline constexpr uint64_t kIdxMaxBytes = uint64_t(1) << 32;
Tensor read_idx(const std::string& path, uint64_t max_bytes = kIdxMaxBytes);

// Fashion-MNIST (or MNIST) from `root`: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
// Samples: input U8 (1, 28, 28), target I64 scalar.
class FashionMNIST : public Dataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  explicit FashionMNIST(const std::string& root = kDefaultRoot, bool train = true);
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;
  const Tensor& images() const { return images_; }  // (N, 1, 28, 28) U8
  const Tensor& labels() const { return labels_; }  // (N) I64
  bool has_tensors() const override { return true; }
  Tensor inputs() const override { return images_; }
  Tensor targets() const override { return labels_; }
  static const std::vector<std::string>& class_names();

 private:
  Tensor images_, labels_;
};

// A column of a CSV file, by name ("price") or by 0-based index (3). Files without a header
// name their columns "0", "1", ...
struct CsvColumn {
  CsvColumn(std::string column_name) : name(std::move(column_name)) {}
  CsvColumn(const char* column_name) : name(column_name) {}
  template <std::integral I>
  CsvColumn(I column_index) : index(int64_t(column_index)) {}
  std::string name{};  // empty when chosen by index
  int64_t index = -1;  // -1 when chosen by name
};

// What a CSV reader does with a missing cell (one of CsvOptions::na_values) in a feature
// column. A missing TARGET is an error, except under Keep (NaN; needs a float target) and
// Drop.
enum class CsvMissing {
  Error,  // a brisk::Error naming the line, row and column (the default)
  Fill,   // CsvOptions::fill_value
  Mean,   // the mean of the column's other cells (computed over the whole file: to keep
          // validation rows out of it, use Keep and data::fill_missing with train statistics)
  Keep,   // NaN, to be filled later (data::fill_missing in the loader's transform)
  Drop,   // the row is skipped (as pandas' dropna)
};

struct CsvOptions {
  std::optional<CsvColumn> target = {};     // the target column; none: samples have no target
  std::vector<CsvColumn> features = {};     // input columns, in this order; empty: every other column
  std::vector<CsvColumn> categorical = {};  // string-valued columns, mapped to codes 0, 1, ...
  // Fixed code lists by column name (code i = categories[i]); a value outside the list is an
  // error. Unlisted categorical columns get their distinct values sorted (as pandas/sklearn).
  std::map<std::string, std::vector<std::string>> categories = {};
  bool header = true;
  char delimiter = ',';
  // The target's dtype: I64 (class indices, what cross_entropy takes), I32, F32 or F64
  // (regression, what mse_loss takes). nullopt: I64 when every target is an integer (or the
  // target is categorical), else F32. A non-integer target with an integer dtype is an error.
  std::optional<DType> target_dtype = {};
  DType input_dtype = DType::F32;  // F32 or F64
  CsvMissing missing = CsvMissing::Error;
  double fill_value = 0;  // for CsvMissing::Fill
  // Cells that mean "missing" (compared after trimming spaces), as pandas' defaults.
  std::vector<std::string> na_values = {"", "NA", "N/A", "n/a", "NaN", "nan", "null", "NULL", "None"};
};

// A CSV file as a dataset: input row (F) of the chosen feature columns (input_dtype), target
// scalar (target_dtype). Fields may be quoted ("a, b", "" inside is a quote) and are trimmed of
// spaces. Categorical columns hold codes: the value categories(column)[code]; a missing cell of
// one is the category "" under Fill and Mean (it sorts first), NaN under Keep. inputs() and
// targets() are the whole file as tensors (N, F) and (N).
class CsvDataset : public Dataset {
 public:
  CsvDataset(const std::string& path, const CsvOptions& options);
  // The numeric reader of old: `label_column` (a column name, "" for none) is the target with
  // the automatic dtype, every other column an F32 input, no cell is missing ("nan" is NaN).
  CsvDataset(const std::string& path, const std::string& label_column = "", bool header = true, char delimiter = ',');
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  bool has_tensors() const override { return true; }
  Tensor inputs() const override { return inputs_; }                                // (N, F)
  Tensor targets() const override { return targets_; }                              // (N), undefined without a target
  const std::vector<std::string>& columns() const { return columns_; }              // every column of the file
  const std::vector<std::string>& feature_names() const { return feature_names_; }  // inputs' columns
  const std::string& target_name() const { return target_name_; }                   // "" without a target
  bool is_categorical(const std::string& column) const { return categories_.count(column) > 0; }
  // The code -> value list of a categorical column (an error for other columns).
  const std::vector<std::string>& categories(const std::string& column) const;
  // The code of `value` in a categorical column (an error when it has no such value).
  int64_t code(const std::string& column, const std::string& value) const;

 private:
  Tensor inputs_, targets_;
  std::vector<std::string> columns_, feature_names_;
  std::string target_name_;
  std::map<std::string, std::vector<std::string>> categories_;
};

// root/<class>/<image>: classes sorted by name (as torchvision's ImageFolder); images decoded
// lazily in get() to U8 (C, H, W) with C = 1 or 3 (`channels`), target the class index.
class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(const std::string& root, int channels = 3, int64_t max_pixels = kImageMaxPixels);
  int64_t size() const override { return int64_t(files_.size()); }
  Example get(int64_t index) const override;
  const std::vector<std::string>& classes() const { return classes_; }

 private:
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, int64_t>> files_;
  int channels_;
  int64_t max_pixels_;
};

// Decodes a PNG/JPEG/BMP file to U8 (C, H, W). An image whose header claims more than
// `max_pixels` pixels is refused before it is decoded. image_support() is false when brisk
// was built without stb_image (read_image then throws).
Tensor read_image(const std::string& path, int channels = 3, int64_t max_pixels = kImageMaxPixels);
bool image_support();

}  // namespace brisk::data
