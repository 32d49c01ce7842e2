// data/readers.h: datasets read from files: IDX files (the MNIST format, gzip through zlib)
// and FashionMNIST on top of them, numeric CSV files, and image folders (PNG/JPEG decoded by
// stb_image, one class per subfolder). Errors name the file, what was wrong, and for
// Fashion-MNIST how to install the data package.
#pragma once

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
  static const std::vector<std::string>& class_names();

 private:
  Tensor images_, labels_;
};

// A CSV file of numbers with an optional header row; `label_column` (name or index as text,
// empty for none) becomes the target (I64 when every value is an integer, else F32); the other
// columns become an F32 input row.
class CsvDataset : public Dataset {
 public:
  CsvDataset(const std::string& path, const std::string& label_column = "", bool header = true, char delimiter = ',');
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  Tensor inputs_, targets_;
  std::vector<std::string> columns_;
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
