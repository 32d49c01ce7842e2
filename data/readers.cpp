// data/readers.cpp: IDX, Fashion-MNIST, CSV (numeric and categorical columns, missing values)
// and image-folder readers.
#include "data/readers.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "engine/functions.h"

#ifdef BRISK_WITH_STB
#include <stb/stb_image.h>
#endif
#ifdef BRISK_WITH_JPEG
#include <jpeglib.h>

#include <csetjmp>
#endif

namespace brisk::data {

namespace fs = std::filesystem;

namespace {

uint32_t big_endian(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

// Note [Bounded decompression]: an IDX file is read as a stream of bytes, inflated on the fly
// when it starts with the gzip magic, and never held whole: the header is read first, the
// tensor its dims promise is allocated (after checking that promise against the limit, the
// file's size, and for gzip the most that deflate can expand that many bytes to), and the
// data is inflated straight into it. A stream that yields more or fewer bytes than promised,
// ends without its trailer, or fails its CRC is an error: memory never exceeds the promise.
class ByteStream {
 public:
  explicit ByteStream(const std::string& path) : path_(path) {
    std::error_code ec;
    BRISK_CHECK(fs::exists(path, ec), path, ": file not found");
    BRISK_CHECK(fs::is_regular_file(path, ec), path, ": not a regular file");
    file_size_ = uint64_t(fs::file_size(path, ec));
    BRISK_CHECK(!ec, path, ": cannot read its size (", ec.message(), ")");
    f_ = std::fopen(path.c_str(), "rb");
    BRISK_CHECK(f_, path, ": cannot open (", std::strerror(errno), ")");
    fill();
    gzip_ = z_.avail_in >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_ && inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) {  // 16: gzip wrapper only, trailer checked
      std::fclose(f_);
      BRISK_FAIL(path, ": cannot start zlib (", z_.msg ? z_.msg : "out of memory", ")");
    }
  }
  ~ByteStream() {
    if (gzip_) inflateEnd(&z_);
    std::fclose(f_);
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  bool gzip() const { return gzip_; }
  uint64_t file_size() const { return file_size_; }

  // Up to n bytes into dst; fewer only at the end of the data. Corrupt or truncated
  // compressed data is an error naming the file.
  size_t read(uint8_t* dst, size_t n) {
    if (!gzip_) return read_plain(dst, n);
    size_t got = 0;
    while (got < n) {
      if (z_.avail_in == 0) fill();
      if (member_ended_) {
        if (z_.avail_in == 0) break;  // the end of the last member is the end of the data
        BRISK_CHECK(inflateReset(&z_) == Z_OK, path_, ": zlib reset failed");  // gzip allows members back to back
        member_ended_ = false;
      }
      z_.next_out = dst + got;
      z_.avail_out = uInt(std::min<size_t>(n - got, size_t(1) << 30));
      const uInt before_in = z_.avail_in, before_out = z_.avail_out;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      got += before_out - z_.avail_out;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc == Z_BUF_ERROR || (rc == Z_OK && before_in == z_.avail_in && before_out == z_.avail_out)) {
        BRISK_CHECK(!(eof_ && z_.avail_in == 0), path_,
                    ": truncated gzip stream (the data ends before the end of the compressed stream and its trailer)");
      } else if (rc != Z_OK) {
        BRISK_FAIL(path_, ": corrupt compressed data (zlib: ", z_.msg ? z_.msg : "error " + std::to_string(rc), ")");
      }
    }
    return got;
  }

 private:
  void fill() {
    if (eof_) return;
    size_t n = std::fread(in_.data(), 1, in_.size(), f_);
    BRISK_CHECK(!std::ferror(f_), path_, ": read error (", std::strerror(errno), ")");
    if (n < in_.size()) eof_ = true;
    z_.next_in = in_.data();
    z_.avail_in = uInt(n);
  }
  size_t read_plain(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (z_.avail_in == 0) fill();
      if (z_.avail_in == 0) break;
      size_t k = std::min<size_t>(n - got, z_.avail_in);
      std::memcpy(dst + got, z_.next_in, k);
      z_.next_in += k;
      z_.avail_in -= uInt(k);
      got += k;
    }
    return got;
  }

  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t file_size_ = 0;
  z_stream z_{};  // for plain files only next_in/avail_in are used, as a window on in_
  std::vector<uint8_t> in_ = std::vector<uint8_t>(size_t(1) << 16);
  bool gzip_ = false, eof_ = false, member_ended_ = false;
};

// Deflate expands a byte to at most ~1032 bytes; a promise beyond this cannot be honest.
constexpr uint64_t kMaxDeflateRatio = 1032;

}  // namespace

Tensor read_idx(const std::string& path, uint64_t max_bytes) {
  ByteStream in(path);
  uint8_t head[4 + 4 * 4];
  const size_t got = in.read(head, 4);
  BRISK_CHECK(got == 4, path, ": too short for an IDX header (", got, " bytes)");
  BRISK_CHECK(head[0] == 0 && head[1] == 0, path, ": bad IDX magic (first two bytes must be 0)");
  BRISK_CHECK(head[2] == 0x08, path, ": IDX element type 0x", std::hex, int(head[2]), std::dec,
              " is not supported (only unsigned bytes, 0x08)");
  const int ndims = head[3];
  BRISK_CHECK(ndims >= 1 && ndims <= 4, path, ": IDX header says ", ndims, " dims (1 to 4 expected)");
  const size_t header = 4 + 4 * size_t(ndims);
  BRISK_CHECK(in.read(head + 4, header - 4) == header - 4, path, ": truncated IDX header (", ndims, " dims need ",
              header, " bytes)");
  Shape shape;
  uint64_t extent = 1;  // see Note [Checked sizes] in engine/shape.h
  for (int d = 0; d < ndims; ++d) shape.push_back(int64_t(big_endian(&head[4 + 4 * size_t(d)])));
  for (int d = 0; d < ndims; ++d) {
    const bool fits = !__builtin_mul_overflow(extent, uint64_t(std::max<int64_t>(shape[d], 1)), &extent);
    BRISK_CHECK(fits, path, ": IDX dims ", shape, " have more elements than fit in 64 bits");
  }
  BRISK_CHECK(extent <= max_bytes, path, ": IDX dims ", shape, " describe ", extent, " bytes, more than the limit of ",
              max_bytes, " (read_idx's max_bytes)");
  const uint64_t numel = uint64_t(shape.numel());
  if (in.gzip()) {
    BRISK_CHECK(numel <= kMaxDeflateRatio * in.file_size() + 65536, path, ": IDX dims ", shape, " promise ", numel,
                " bytes, more than ", in.file_size(), " bytes of gzip data can inflate to");
  } else {
    BRISK_CHECK(in.file_size() == header + numel, path, ": IDX data has ", in.file_size() - header, " bytes, dims ",
                shape, " need ", numel);
  }
  Tensor t = empty(shape, DType::U8);
  const size_t data = numel ? in.read(static_cast<uint8_t*>(t.data_ptr()), size_t(numel)) : 0;
  BRISK_CHECK(data == numel, path, ": IDX data has ", data, " bytes, dims ", shape, " need ", numel);
  uint8_t extra = 0;
  BRISK_CHECK(in.read(&extra, 1) == 0, path, ": IDX data is longer than dims ", shape, " promise (", numel, " bytes)");
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
               "(files go to ",
               kDefaultRoot, ") or pass the folder that holds the IDX files");
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
namespace {

bool is_blank(char ch, char delimiter) { return (ch == ' ' || ch == '\t') && ch != delimiter; }

// Splits one line into fields: RFC 4180 quoting ("a, b" is one field, "" inside quotes is a
// quote), spaces around a field trimmed. `where` ("file:line") names an unclosed quote.
std::vector<std::string> split_csv(const std::string& line, char delimiter, const std::string& where) {
  std::vector<std::string> cells;
  size_t i = 0, n = line.size();
  while (true) {
    while (i < n && is_blank(line[i], delimiter)) ++i;
    std::string cell;
    if (i < n && line[i] == '"') {
      for (++i;; ++i) {
        BRISK_CHECK(i < n, where, ": a quoted field is not closed");
        if (line[i] == '"' && i + 1 < n && line[i + 1] == '"') {
          cell += '"';
          ++i;
        } else if (line[i] == '"') {
          break;
        } else {
          cell += line[i];
        }
      }
      ++i;
      while (i < n && is_blank(line[i], delimiter)) ++i;
      BRISK_CHECK(i == n || line[i] == delimiter, where, ": text after a closing quote");
    } else {
      while (i < n && line[i] != delimiter) cell += line[i++];
      while (!cell.empty() && is_blank(cell.back(), delimiter)) cell.pop_back();
    }
    cells.push_back(std::move(cell));
    if (i >= n) break;
    ++i;  // the delimiter; a line ending in one has an empty last field
  }
  return cells;
}

// "a, b, c" (the first 40 names, then how many more).
std::string column_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 40; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 40) out += ", ... (" + std::to_string(names.size() - 40) + " more)";
  return out;
}

// The file column a CsvColumn names.
int64_t resolve_column(const CsvColumn& c, const std::vector<std::string>& names, const std::string& path) {
  if (c.name.empty() && c.index >= 0) {
    BRISK_CHECK(c.index < int64_t(names.size()), path, ": column index ", c.index, " is out of range; the file has ",
                names.size(), " columns: ", column_list(names));
    return c.index;
  }
  auto it = std::find(names.begin(), names.end(), c.name);
  BRISK_CHECK(it != names.end(), path, ": no column '", c.name, "'; the file has columns: ", column_list(names));
  BRISK_CHECK(std::find(it + 1, names.end(), c.name) == names.end(), path, ": column '", c.name,
              "' appears more than once in the header; choose it by index");
  return it - names.begin();
}

// Parses a whole field as a double (locale-independent; spaces around it and a leading '+'
// are allowed, as a quoted field keeps its spaces).
bool parse_number(const std::string& cell, double& v) {
  const char* b = cell.data();
  const char* e = b + cell.size();
  while (b != e && (*b == ' ' || *b == '\t')) ++b;
  while (e != b && (e[-1] == ' ' || e[-1] == '\t')) --e;
  if (b != e && *b == '+') ++b;
  if (b == e) return false;
  auto [ptr, ec] = std::from_chars(b, e, v);
  return ec == std::errc() && ptr == e;
}

// One CSV file being read into columns: which file columns to read (the features, then the
// target), each as numbers or as categories, and what to do with missing cells.
class CsvReader {
 public:
  CsvReader(std::string path, const CsvOptions& o) : path_(std::move(path)), o_(o) {}
  void read();
  void finish();  // categories sorted into codes, means filled in
  Tensor inputs() const;
  Tensor targets() const;

  std::vector<std::string> names;  // every column of the file
  std::vector<int64_t> cols;       // file column of each column read: features..., target
  bool has_target = false;
  std::vector<std::vector<std::string>> categories;  // per column read; empty when numeric
  std::vector<bool> categorical;

 private:
  void plan();
  void add_row(const std::vector<std::string>& cells, int64_t line, int64_t row);
  double categorical_value(size_t k, const std::string& cell, int64_t line);
  std::string where(int64_t line) const { return path_ + ":" + std::to_string(line); }
  std::string field(size_t k, int64_t row) const {
    return "data row " + std::to_string(row) + ", column " + std::to_string(cols[k]) + " '" + names[size_t(cols[k])] +
           "'";
  }

  std::string path_;
  const CsvOptions& o_;
  std::vector<std::vector<double>> values_;             // per column read, per kept row
  std::vector<std::map<std::string, int64_t>> ids_;     // per column read: value -> id
  std::vector<const std::vector<std::string>*> fixed_;  // per column read: a fixed code list
  std::vector<std::vector<int64_t>> missing_rows_;      // per column read (Mean)
  std::vector<int64_t> lines_;                          // per kept row: its line in the file
};

void CsvReader::plan() {
  std::set<int64_t> cat;
  for (const CsvColumn& c : o_.categorical) cat.insert(resolve_column(c, names, path_));
  for (const auto& [name, list] : o_.categories) cat.insert(resolve_column(CsvColumn(name), names, path_));
  int64_t target = o_.target ? resolve_column(*o_.target, names, path_) : -1;
  if (o_.features.empty()) {
    for (int64_t c = 0; c < int64_t(names.size()); ++c)
      if (c != target) cols.push_back(c);
  } else {
    for (const CsvColumn& f : o_.features) {
      int64_t c = resolve_column(f, names, path_);
      BRISK_CHECK(c != target, path_, ": column '", names[size_t(c)], "' is both the target and a feature");
      BRISK_CHECK(std::find(cols.begin(), cols.end(), c) == cols.end(), path_, ": column '", names[size_t(c)],
                  "' is chosen twice as a feature");
      cols.push_back(c);
    }
  }
  has_target = target >= 0;
  if (has_target) cols.push_back(target);
  for (int64_t c : cat)
    BRISK_CHECK(std::find(cols.begin(), cols.end(), c) != cols.end(), path_, ": categorical column '", names[size_t(c)],
                "' is neither a feature nor the target");
  for (int64_t c : cols) {
    categorical.push_back(cat.count(c) > 0);
    auto it = o_.categories.find(names[size_t(c)]);
    fixed_.push_back(it == o_.categories.end() ? nullptr : &it->second);
  }
  values_.resize(cols.size());
  ids_.resize(cols.size());
  missing_rows_.resize(cols.size());
  categories.resize(cols.size());
}

void CsvReader::read() {
  std::ifstream in(path_);
  BRISK_CHECK(in, path_, ": cannot open (", std::strerror(errno), ")");
  std::string line;
  int64_t lineno = 0, row = 0;
  if (o_.header) {
    BRISK_CHECK(std::getline(in, line), path_, ": empty file, expected a header row");
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names = split_csv(line, o_.delimiter, where(lineno));
    plan();
  }
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cells = split_csv(line, o_.delimiter, where(lineno));
    if (names.empty()) {
      for (size_t i = 0; i < cells.size(); ++i) names.push_back(std::to_string(i));
      plan();
    }
    BRISK_CHECK(cells.size() == names.size(), where(lineno), ": ", cells.size(), " fields, expected ", names.size());
    add_row(cells, lineno, row++);
  }
  if (names.empty()) plan();  // an empty file without a header: no columns
}

void CsvReader::add_row(const std::vector<std::string>& cells, int64_t line, int64_t row) {
  auto is_na = [&](const std::string& cell) {
    return std::find(o_.na_values.begin(), o_.na_values.end(), cell) != o_.na_values.end();
  };
  if (o_.missing == CsvMissing::Drop) {
    for (int64_t c : cols)
      if (is_na(cells[size_t(c)])) return;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t k = 0; k < cols.size(); ++k) {
    const std::string& cell = cells[size_t(cols[k])];
    const bool target = has_target && k + 1 == cols.size();
    double v = 0;
    if (is_na(cell)) {
      const bool fill = o_.missing == CsvMissing::Fill || o_.missing == CsvMissing::Mean;
      BRISK_CHECK(o_.missing != CsvMissing::Error && !(target && fill), where(line), ": missing value ('", cell,
                  "') in ", field(k, row),
                  target ? "; a missing target needs CsvOptions::missing = Keep or Drop"
                         : "; set CsvOptions::missing to Fill, Mean, Keep or Drop");
      if (o_.missing == CsvMissing::Keep) {
        v = nan;
      } else if (categorical[k]) {
        v = categorical_value(k, "", line);  // missing is a category of its own
      } else if (o_.missing == CsvMissing::Fill) {
        v = o_.fill_value;
      } else {
        v = nan;
        missing_rows_[k].push_back(int64_t(values_[k].size()));
      }
    } else if (categorical[k]) {
      v = categorical_value(k, cell, line);
    } else {
      BRISK_CHECK(parse_number(cell, v), where(line), ": field '", names[size_t(cols[k])], "' = '", cell,
                  "' is not a number (", field(k, row),
                  "); if it holds categories, list it in CsvOptions::categorical");
    }
    values_[k].push_back(v);
  }
  lines_.push_back(line);
}

double CsvReader::categorical_value(size_t k, const std::string& cell, int64_t line) {
  if (fixed_[k]) {
    auto it = std::find(fixed_[k]->begin(), fixed_[k]->end(), cell);
    BRISK_CHECK(it != fixed_[k]->end(), where(line), ": value '", cell, "' of column '", names[size_t(cols[k])],
                "' is not one of its categories (", column_list(*fixed_[k]), ")");
    return double(it - fixed_[k]->begin());
  }
  auto [it, added] = ids_[k].emplace(cell, int64_t(ids_[k].size()));
  return double(it->second);
}

void CsvReader::finish() {
  for (size_t k = 0; k < cols.size(); ++k) {
    if (categorical[k] && fixed_[k]) {
      categories[k] = *fixed_[k];
    } else if (categorical[k]) {
      // ids_ is a map, so its order is the sorted order: code = position, id = first seen.
      std::vector<double> code_of_id(ids_[k].size());
      for (const auto& [value, id] : ids_[k]) {
        code_of_id[size_t(id)] = double(categories[k].size());
        categories[k].push_back(value);
      }
      for (double& v : values_[k])
        if (!std::isnan(v)) v = code_of_id[size_t(v)];
    } else if (!missing_rows_[k].empty()) {  // CsvMissing::Mean
      double sum = 0;
      int64_t n = 0;
      for (double v : values_[k]) {
        if (std::isnan(v)) continue;
        sum += v;
        ++n;
      }
      BRISK_CHECK(n > 0, path_, ": column '", names[size_t(cols[k])], "' has no values to take the mean of");
      for (int64_t r : missing_rows_[k]) values_[k][size_t(r)] = sum / double(n);
    }
  }
}

Tensor CsvReader::inputs() const {
  BRISK_CHECK(o_.input_dtype == DType::F32 || o_.input_dtype == DType::F64,
              "CsvDataset: input_dtype must be F32 or F64, got ", o_.input_dtype);
  const size_t features = cols.size() - (has_target ? 1 : 0), n = lines_.size();
  std::vector<double> x(n * features);
  for (size_t k = 0; k < features; ++k)
    for (size_t r = 0; r < n; ++r) x[r * features + k] = values_[k][r];
  return from_vector(x, {int64_t(n), int64_t(features)}, o_.input_dtype);
}

Tensor CsvReader::targets() const {
  if (!has_target) return Tensor();
  const std::vector<double>& y = values_.back();
  // Range first: converting NaN, inf or |v| >= 2^63 to int64_t is undefined.
  auto integral = [](double v, double limit) { return v >= -limit && v < limit && v == std::trunc(v); };
  DType dtype = o_.target_dtype.value_or(DType::I64);
  if (!o_.target_dtype && !std::all_of(y.begin(), y.end(), [&](double v) { return integral(v, 0x1p63); }))
    dtype = DType::F32;
  BRISK_CHECK(dtype == DType::I64 || dtype == DType::I32 || dtype == DType::F32 || dtype == DType::F64,
              "CsvDataset: target_dtype must be I64, I32, F32 or F64, got ", dtype);
  if (dtype == DType::I64 || dtype == DType::I32) {
    const double limit = dtype == DType::I64 ? 0x1p63 : 0x1p31;
    for (size_t r = 0; r < y.size(); ++r)
      BRISK_CHECK(integral(y[r], limit), where(lines_[r]), ": target '", names[size_t(cols.back())], "' = ", y[r],
                  " is not an integer that fits ", dtype, " (use target_dtype F32 or F64 for regression)");
  }
  return from_vector(y, {int64_t(y.size())}, dtype);
}

}  // namespace

CsvDataset::CsvDataset(const std::string& path, const CsvOptions& options) {
  CsvReader reader(path, options);
  reader.read();
  reader.finish();
  inputs_ = reader.inputs();
  targets_ = reader.targets();
  columns_ = reader.names;
  for (size_t k = 0; k < reader.cols.size(); ++k) {
    const std::string& name = columns_[size_t(reader.cols[k])];
    const bool target = reader.has_target && k + 1 == reader.cols.size();
    if (target) {
      target_name_ = name;
    } else {
      feature_names_.push_back(name);
    }
    if (reader.categorical[k]) categories_[name] = reader.categories[k];
  }
}

namespace {

CsvOptions legacy_options(const std::string& label_column, bool header, char delimiter) {
  CsvOptions o;
  if (!label_column.empty()) o.target = CsvColumn(label_column);
  o.header = header;
  o.delimiter = delimiter;
  o.na_values = {};
  return o;
}

}  // namespace

CsvDataset::CsvDataset(const std::string& path, const std::string& label_column, bool header, char delimiter)
    : CsvDataset(path, legacy_options(label_column, header, delimiter)) {}

Example CsvDataset::get(int64_t index) const {
  check_index(index, size(), "CsvDataset");
  return {inputs_.select(0, index), targets_.defined() ? targets_.select(0, index) : Tensor()};
}

const std::vector<std::string>& CsvDataset::categories(const std::string& column) const {
  auto it = categories_.find(column);
  if (it != categories_.end()) return it->second;
  std::vector<std::string> cat;
  for (const auto& [name, list] : categories_) cat.push_back(name);
  BRISK_FAIL("CsvDataset: column '", column,
             "' is not categorical (categorical columns: ", cat.empty() ? "none" : column_list(cat), ")");
}

int64_t CsvDataset::code(const std::string& column, const std::string& value) const {
  const std::vector<std::string>& list = categories(column);
  auto it = std::find(list.begin(), list.end(), value);
  BRISK_CHECK(it != list.end(), "CsvDataset: column '", column, "' has no category '", value, "' (it has ",
              column_list(list), ")");
  return it - list.begin();
}

// ---- images
bool image_support() {
#ifdef BRISK_WITH_STB
  return true;
#else
  return false;
#endif
}

#ifdef BRISK_WITH_STB
namespace {

// Note [Image containers]: stb_image decodes whatever format it recognises in the bytes, and
// Debian's stb (2.27) has memory-safety bugs on hostile input, found by tests/fuzz: JPEG
// Huffman tables whose 16 code counts add up to more than 256 (heap writes past the table),
// 16-bit PNM (a heap over-read), a PNG chunk length that makes it allocate 2 GiB, and
// TGA-like files that decode for a minute. So read_image accepts only the formats it promises
// (PNG, JPEG, BMP, by their magic bytes), walks the container (PNG chunks; JPEG marker
// segments and the entropy-coded data between them), checks every length against the file
// and every Huffman table against the format's limits, and only then hands the bytes to stb.
// Each check names the file and what was wrong. JPEGs go to libjpeg-turbo where brisk was
// built with it (stb's JPEG decoder still shifts by negative amounts on corrupt entropy-coded
// data); stb decodes PNG and BMP.

uint32_t be16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }

void check_png(const std::vector<uint8_t>& b, const std::string& path) {
  size_t pos = 8;  // after the signature
  bool first = true;
  for (;;) {
    BRISK_CHECK(b.size() - pos >= 12, path, ": PNG is truncated (no IEND chunk)");
    const uint64_t len = big_endian(&b[pos]);
    const std::string type(reinterpret_cast<const char*>(&b[pos + 4]), 4);
    BRISK_CHECK(len <= 0x7fffffffu && len <= b.size() - pos - 12, path, ": PNG chunk \"", type, "\" of ", len,
                " bytes runs past the end of the file");
    BRISK_CHECK(!first || type == "IHDR", path, ": PNG does not start with an IHDR chunk");
    BRISK_CHECK(type != "IDAT" || len > 0, path, ": PNG has an empty IDAT chunk");
    first = false;
    pos += 12 + size_t(len);
    if (type == "IEND") return;
  }
}

// A DHT segment's tables: class/id byte, 16 code counts, then that many symbols (at most 256).
void check_jpeg_dht(const uint8_t* p, size_t n, const std::string& path) {
  size_t pos = 0;
  while (pos < n) {
    BRISK_CHECK(n - pos >= 17, path, ": JPEG Huffman table is truncated");
    BRISK_CHECK((p[pos] >> 4) <= 1 && (p[pos] & 15) <= 3, path, ": JPEG Huffman table class/id 0x", std::hex,
                int(p[pos]), std::dec, " is invalid");
    size_t symbols = 0;
    for (int i = 1; i <= 16; ++i) symbols += p[pos + size_t(i)];
    BRISK_CHECK(symbols <= 256, path, ": JPEG Huffman table has ", symbols, " codes (at most 256)");
    BRISK_CHECK(n - pos - 17 >= symbols, path, ": JPEG Huffman table is truncated");
    pos += 17 + symbols;
  }
}

void check_jpeg(const std::vector<uint8_t>& b, const std::string& path) {
  size_t pos = 2;  // after SOI
  for (;;) {
    BRISK_CHECK(pos + 2 <= b.size(), path, ": JPEG is truncated (no end-of-image marker)");
    BRISK_CHECK(b[pos] == 0xff, path, ": JPEG has no marker where one must be (byte ", pos, ")");
    while (pos + 1 < b.size() && b[pos + 1] == 0xff) ++pos;  // fill bytes
    BRISK_CHECK(pos + 2 <= b.size(), path, ": JPEG is truncated");
    const uint8_t m = b[pos + 1];
    pos += 2;
    if (m == 0xd9) return;                                // EOI
    if ((m >= 0xd0 && m <= 0xd7) || m == 0x01) continue;  // standalone markers
    BRISK_CHECK(pos + 2 <= b.size(), path, ": JPEG segment 0x", std::hex, int(m), std::dec, " is truncated");
    const size_t len = be16(&b[pos]);
    BRISK_CHECK(len >= 2 && len <= b.size() - pos, path, ": JPEG segment 0x", std::hex, int(m), std::dec, " of ", len,
                " bytes runs past the end of the file");
    if (m == 0xc4) check_jpeg_dht(&b[pos + 2], len - 2, path);
    pos += len;
    if (m != 0xda) continue;
    // Entropy-coded data after a start of scan: up to the next marker that is not a stuffed
    // 0xff 0x00 or a restart marker.
    while (pos + 1 < b.size() && !(b[pos] == 0xff && b[pos + 1] != 0 && !(b[pos + 1] >= 0xd0 && b[pos + 1] <= 0xd7)))
      ++pos;
  }
}

#ifdef BRISK_WITH_JPEG
// libjpeg reports a fatal error through error_exit, which must not return: it jumps back into
// decode_jpeg, whose frame holds only plain C objects, so no destructor is skipped.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_quiet(j_common_ptr, int) {}  // warnings (recoverable corrupt data) are not printed

struct JpegImage {
  uint8_t* pixels = nullptr;  // malloc'd (H, W, channels); null on error
  int w = 0, h = 0;
  char error[JMSG_LENGTH_MAX + 96] = {};
};

void decode_jpeg(const std::vector<uint8_t>& b, int channels, int64_t max_pixels, JpegImage& out) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_quiet;
  if (setjmp(err.jump)) {
    std::snprintf(out.error, sizeof out.error, "cannot decode JPEG (libjpeg: %s)", err.message);
    jpeg_destroy_decompress(&cinfo);
    std::free(out.pixels);
    out.pixels = nullptr;
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, b.data(), static_cast<unsigned long>(b.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (int64_t(cinfo.image_width) * int64_t(cinfo.image_height) > max_pixels) {
    std::snprintf(out.error, sizeof out.error,
                  "image of %u x %u pixels is larger than the limit of %lld pixels (read_image's max_pixels)",
                  cinfo.image_width, cinfo.image_height, static_cast<long long>(max_pixels));
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t row_bytes = size_t(cinfo.output_width) * size_t(channels);
  out.w = int(cinfo.output_width);
  out.h = int(cinfo.output_height);
  out.pixels = static_cast<uint8_t*>(std::malloc(std::max<size_t>(row_bytes * size_t(out.h), 1)));
  if (out.pixels == nullptr) {
    std::snprintf(out.error, sizeof out.error, "out of memory for a %d x %d image", out.w, out.h);
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.pixels + size_t(cinfo.output_scanline) * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
}
#endif

bool is_jpeg(const std::vector<uint8_t>& b) { return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff; }

// An uncompressed BMP must hold every pixel row its header promises: stb_image decodes a
// truncated one without complaint, filling the missing rows with zeros. (Checked after the
// pixel limit, so a header claiming a huge image reports that first.)
void check_bmp(const std::vector<uint8_t>& b, const std::string& path) {
  auto le32 = [&](size_t at) {
    return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24;
  };
  if (b.size() < 54 || le32(14) < 40) return;  // older headers: stb's own checks
  const uint32_t compression = le32(30);
  if (compression != 0 && compression != 3) return;  // RLE: rows have no fixed size
  const uint64_t offset = le32(10);
  const uint64_t w = uint64_t(std::abs(int64_t(int32_t(le32(18)))));
  const uint64_t h = uint64_t(std::abs(int64_t(int32_t(le32(22)))));
  const uint64_t bpp = uint64_t(b[28]) | uint64_t(b[29]) << 8;
  const uint64_t row = (w * bpp + 31) / 32 * 4;
  const bool complete = offset <= b.size() && (row == 0 || (b.size() - offset) / row >= h);
  BRISK_CHECK(complete, path, ": truncated BMP: ", h, " rows of ", row, " bytes from offset ", offset,
              " do not fit in its ", b.size(), " bytes");
}

// The file's bytes, if they are a PNG, JPEG or BMP whose structure passes the checks above.
std::vector<uint8_t> read_image_file(const std::string& path) {
  std::error_code ec;
  BRISK_CHECK(fs::is_regular_file(path, ec), path, ": not found or not a regular file");
  const uint64_t size = uint64_t(fs::file_size(path, ec));
  BRISK_CHECK(!ec && size <= (uint64_t(1) << 30), path, ": image file of ", size, " bytes is too large (1 GiB limit)");
  std::vector<uint8_t> b(size);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(b.data()), std::streamsize(size));
  BRISK_CHECK(in.gcount() == std::streamsize(size), path, ": cannot read (", std::strerror(errno), ")");
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(b.data(), kPng, 8) == 0) {
    check_png(b, path);
  } else if (is_jpeg(b)) {
    check_jpeg(b, path);
  } else {
    BRISK_CHECK(size >= 2 && b[0] == 'B' && b[1] == 'M', path,
                ": not a PNG, JPEG or BMP file (the formats read_image decodes)");
  }
  return b;
}

}  // namespace
#endif

Tensor read_image(const std::string& path, int channels, int64_t max_pixels) {
  BRISK_CHECK(channels == 1 || channels == 3, "read_image: channels must be 1 or 3, got ", channels);
#ifdef BRISK_WITH_STB
  const std::vector<uint8_t> bytes = read_image_file(path);  // See Note [Image containers]
#ifdef BRISK_WITH_JPEG
  if (is_jpeg(bytes)) {
    JpegImage img;
    decode_jpeg(bytes, channels, max_pixels, img);
    BRISK_CHECK(img.pixels, path, ": ", img.error);
    Tensor hwc = from_blob(img.pixels, {img.h, img.w, channels}, DType::U8, [](void* p) { std::free(p); });
    return hwc.permute({2, 0, 1}).contiguous();  // (C, H, W)
  }
#endif
  const int n = int(bytes.size());
  int w = 0, h = 0, c = 0;
  // The header's size first: a few hundred bytes of PNG can claim a 16384 x 16384 image.
  BRISK_CHECK(stbi_info_from_memory(bytes.data(), n, &w, &h, &c), path, ": cannot decode image (",
              stbi_failure_reason(), ")");
  // |h|: stb_image 2.27's stbi_info reports a top-down BMP's height negative (stbi_load does not).
  BRISK_CHECK(w > 0 && h != 0 && int64_t(w) * std::abs(int64_t(h)) <= max_pixels, path, ": image of ", w, " x ",
              std::abs(int64_t(h)), " pixels is larger than the limit of ", max_pixels,
              " pixels (read_image's max_pixels)");
  if (bytes[0] == 'B') check_bmp(bytes, path);
  uint8_t* pixels = stbi_load_from_memory(bytes.data(), n, &w, &h, &c, channels);
  BRISK_CHECK(pixels, path, ": cannot decode image (", stbi_failure_reason(), ")");
  Tensor hwc = from_blob(pixels, {h, w, channels}, DType::U8, [](void* p) { stbi_image_free(p); });
  return hwc.permute({2, 0, 1}).contiguous();  // (C, H, W)
#else
  BRISK_FAIL(path, ": brisk was built without image decoding (install libstb-dev and reconfigure)");
#endif
}

ImageFolder::ImageFolder(const std::string& root, int channels, int64_t max_pixels)
    : channels_(channels), max_pixels_(max_pixels) {
  BRISK_CHECK(channels == 1 || channels == 3, "ImageFolder: channels must be 1 or 3, got ", channels);
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
  return {read_image(path, channels_, max_pixels_), full({}, double(label), DType::I64)};
}

}  // namespace brisk::data
