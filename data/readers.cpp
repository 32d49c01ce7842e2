// data/readers.cpp: IDX, Fashion-MNIST, CSV and image-folder readers.
#include "data/readers.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/functions.h"

#ifdef BRISK_WITH_STB
#include <stb/stb_image.h>
#endif

namespace brisk::data {

namespace fs = std::filesystem;

namespace {

// Whole file through zlib (which reads plain files too).
std::vector<uint8_t> read_gz(const std::string& path) {
  BRISK_CHECK(fs::exists(path), path, ": file not found");
  gzFile f = gzopen(path.c_str(), "rb");
  BRISK_CHECK(f, path, ": cannot open (", std::strerror(errno), ")");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      BRISK_FAIL(path, ": corrupt compressed data (", msg, ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return out;
}

uint32_t big_endian(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

}  // namespace

Tensor read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_gz(path);
  BRISK_CHECK(bytes.size() >= 4, path, ": too short for an IDX header (", bytes.size(), " bytes)");
  BRISK_CHECK(bytes[0] == 0 && bytes[1] == 0, path, ": bad IDX magic (first two bytes must be 0)");
  BRISK_CHECK(bytes[2] == 0x08, path, ": IDX element type 0x", std::hex, int(bytes[2]), std::dec,
              " is not supported (only unsigned bytes, 0x08)");
  int ndims = bytes[3];
  BRISK_CHECK(ndims >= 1 && ndims <= 4, path, ": IDX header says ", ndims, " dims (1 to 4 expected)");
  size_t header = 4 + 4 * size_t(ndims);
  BRISK_CHECK(bytes.size() >= header, path, ": truncated IDX header");
  Shape shape;
  uint64_t numel = 1;
  for (int d = 0; d < ndims; ++d) {
    uint32_t n = big_endian(&bytes[4 + 4 * size_t(d)]);
    shape.push_back(int64_t(n));
    numel *= n;
    BRISK_CHECK(numel <= (uint64_t(1) << 34), path, ": IDX dims ", shape, " are implausibly large");
  }
  BRISK_CHECK(bytes.size() - header == numel, path, ": IDX data has ", bytes.size() - header, " bytes, dims ", shape,
              " need ", numel);
  Tensor t = empty(shape, DType::U8);
  if (numel) std::memcpy(t.data_ptr(), bytes.data() + header, numel);
  return t;
}

FashionMNIST::FashionMNIST(const std::string& root, bool train) {
  std::string split = train ? "train" : "t10k";
  auto locate = [&](const std::string& stem) {
    for (const std::string& name : {stem + ".gz", stem}) {
      if (fs::exists(fs::path(root) / name)) return (fs::path(root) / name).string();
    }
    BRISK_FAIL("FashionMNIST: ", (fs::path(root) / (stem + ".gz")).string(),
               " not found. Install the data with `apt-get install --no-install-recommends dataset-fashion-mnist` "
               "(files go to ", kDefaultRoot, ") or pass the folder that holds the IDX files");
  };
  std::string images_path = locate(split + "-images-idx3-ubyte");
  std::string labels_path = locate(split + "-labels-idx1-ubyte");
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  BRISK_CHECK(images.dim() == 3, images_path, ": expected images (N, H, W), got dims ", images.sizes());
  BRISK_CHECK(labels.dim() == 1, labels_path, ": expected labels (N), got dims ", labels.sizes());
  BRISK_CHECK(images.size(0) == labels.size(0), images_path, " has ", images.size(0), " images but ", labels_path,
              " has ", labels.size(0), " labels");
  for (uint8_t l : labels.to_vector<uint8_t>()) BRISK_CHECK(l < 10, labels_path, ": label ", int(l), " is not in 0..9");
  images_ = images.unsqueeze(1).contiguous();
  labels_ = cast(labels, DType::I64);
}

Example FashionMNIST::get(int64_t index) const {
  check_index(index, size(), "FashionMNIST");
  return {images_.select(0, index), labels_.select(0, index)};
}

const std::vector<std::string>& FashionMNIST::class_names() {
  static const std::vector<std::string> names{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

// ---- CSV
CsvDataset::CsvDataset(const std::string& path, const std::string& label_column, bool header, char delimiter) {
  std::ifstream in(path);
  BRISK_CHECK(in, path, ": cannot open (", std::strerror(errno), ")");
  auto split = [&](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    std::string cell;
    while (std::getline(s, cell, delimiter)) cells.push_back(cell);
    if (!line.empty() && line.back() == delimiter) cells.emplace_back();
    return cells;
  };
  std::string line;
  size_t ncols = 0;
  if (header) {
    BRISK_CHECK(std::getline(in, line), path, ": empty file, expected a header row");
    if (!line.empty() && line.back() == '\r') line.pop_back();
    columns_ = split(line);
    ncols = columns_.size();
  }
  std::vector<std::vector<double>> rows;
  int64_t lineno = header ? 1 : 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cells = split(line);
    if (ncols == 0) {
      ncols = cells.size();
      for (size_t i = 0; i < ncols; ++i) columns_.push_back(std::to_string(i));
    }
    BRISK_CHECK(cells.size() == ncols, path, ":", lineno, ": ", cells.size(), " fields, expected ", ncols);
    std::vector<double> row;
    for (size_t c = 0; c < cells.size(); ++c) {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(cells[c], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      BRISK_CHECK(used > 0 && used == cells[c].size(), path, ":", lineno, ": field '", columns_[c], "' = '", cells[c],
                  "' is not a number");
      row.push_back(v);
    }
    rows.push_back(std::move(row));
  }
  int64_t label = -1;
  if (!label_column.empty()) {
    auto it = std::find(columns_.begin(), columns_.end(), label_column);
    BRISK_CHECK(it != columns_.end(), path, ": no column '", label_column, "' (columns: ", columns_.size(), ")");
    label = it - columns_.begin();
  }
  int64_t n = int64_t(rows.size()), features = int64_t(ncols) - (label >= 0 ? 1 : 0);
  std::vector<double> x, y;
  bool integral = true;
  for (const auto& row : rows) {
    for (int64_t c = 0; c < int64_t(ncols); ++c) {
      if (c == label) {
        y.push_back(row[size_t(c)]);
        integral = integral && row[size_t(c)] == double(int64_t(row[size_t(c)]));
      } else {
        x.push_back(row[size_t(c)]);
      }
    }
  }
  inputs_ = from_vector(x, {n, features}, DType::F32);
  if (label >= 0) targets_ = from_vector(y, {n}, integral ? DType::I64 : DType::F32);
}

Example CsvDataset::get(int64_t index) const {
  check_index(index, size(), "CsvDataset");
  return {inputs_.select(0, index), targets_.defined() ? targets_.select(0, index) : Tensor()};
}

// ---- images
bool image_support() {
#ifdef BRISK_WITH_STB
  return true;
#else
  return false;
#endif
}

Tensor read_image(const std::string& path, int channels) {
  BRISK_CHECK(channels == 1 || channels == 3, "read_image: channels must be 1 or 3, got ", channels);
#ifdef BRISK_WITH_STB
  int w = 0, h = 0, c = 0;
  uint8_t* pixels = stbi_load(path.c_str(), &w, &h, &c, channels);
  BRISK_CHECK(pixels, path, ": cannot decode image (", stbi_failure_reason(), ")");
  Tensor hwc = from_blob(pixels, {h, w, channels}, DType::U8, [](void* p) { stbi_image_free(p); });
  return hwc.permute({2, 0, 1}).contiguous();  // (C, H, W)
#else
  BRISK_FAIL(path, ": brisk was built without image decoding (install libstb-dev and reconfigure)");
#endif
}

ImageFolder::ImageFolder(const std::string& root, int channels) : channels_(channels) {
  BRISK_CHECK(fs::is_directory(root), "ImageFolder: ", root, " is not a directory");
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  BRISK_CHECK(!classes_.empty(), "ImageFolder: ", root, " has no class subfolders");
  const std::vector<std::string> exts{".png", ".jpg", ".jpeg", ".bmp", ".PNG", ".JPG", ".JPEG"};
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / classes_[c])) {
      std::string ext = entry.path().extension().string();
      if (entry.is_regular_file() && std::find(exts.begin(), exts.end(), ext) != exts.end()) {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) files_.emplace_back(f, int64_t(c));
  }
}

Example ImageFolder::get(int64_t index) const {
  check_index(index, size(), "ImageFolder");
  const auto& [path, label] = files_[size_t(index)];
  return {read_image(path, channels_), full({}, double(label), DType::I64)};
}

}  // namespace brisk::data
