// train/tensorboard.cpp: SummaryWriter and the hand-written protocol-buffer encoding of the
// few TensorBoard messages it writes (Note [TensorBoard encoding] in train/tensorboard.h).
#include "train/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/error.h"

namespace brisk::training {

namespace {

// ---- CRC-32C: the reflected polynomial 0x82F63B78, one table of 256 entries.
struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

// ---- protocol-buffer encoding: wire types 0 (varint), 1 (64-bit), 2 (length-delimited), 5 (32-bit).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_double(std::string& out, int field, double v) {
  put_key(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian on every platform brisk builds for
  out.append(b, 8);
}
void put_float(std::string& out, int field, float v) {
  put_key(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void put_int(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, uint64_t(v));
}
void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  std::string body(v.size() * 8, '\0');
  if (!v.empty()) std::memcpy(body.data(), v.data(), body.size());
  put_bytes(out, field, body);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Event { wall_time = 1; step = 2; file_version = 3; summary = 5 }
std::string event(double wall_time, int64_t step, const std::string* summary, const char* file_version = nullptr) {
  std::string e;
  put_double(e, 1, wall_time < 0 ? now_seconds() : wall_time);
  if (step != 0) put_int(e, 2, step);
  if (file_version) put_bytes(e, 3, file_version);
  if (summary) put_bytes(e, 5, *summary);
  return e;
}

// Summary { repeated Value value = 1 }; Value { tag = 1; simple_value = 2; histo = 5;
// tensor = 8; metadata = 9 }
std::string summary_of(std::string_view tag, const std::string& value_fields) {
  std::string value;
  put_bytes(value, 1, tag);
  value += value_fields;
  std::string summary;
  put_bytes(summary, 1, value);
  return summary;
}

void check_tag(std::string_view tag, const char* what) {
  BRISK_CHECK(!tag.empty(), "SummaryWriter::", what, ": empty tag");
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const Crc32cTable table;
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

SummaryWriter::SummaryWriter(const std::string& log_dir, const std::string& filename_suffix) {
  BRISK_CHECK(!log_dir.empty(), "SummaryWriter: empty log_dir");
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  BRISK_CHECK(!ec, "SummaryWriter: cannot create the directory '", log_dir, "': ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  static std::atomic<int> counter{0};
  path_ = log_dir + "/events.out.tfevents." + std::to_string(int64_t(now_seconds())) + "." + host + "." +
          std::to_string(getpid()) + "." + std::to_string(counter++) + filename_suffix;
  file_ = std::fopen(path_.c_str(), "wb");
  BRISK_CHECK(file_, "SummaryWriter: cannot create '", path_, "': ", std::strerror(errno));
  write_event(event(-1, 0, nullptr, "brain.Event:2"));
}

SummaryWriter::~SummaryWriter() {
  if (file_) std::fclose(file_);
}

void SummaryWriter::write_event(const std::string& e) {
  BRISK_CHECK(file_, "SummaryWriter: '", path_, "' is closed");
  // Record: uint64 length, uint32 masked CRC of the length's 8 bytes, data, uint32 masked CRC of the data.
  std::string rec(12, '\0');
  uint64_t len = e.size();
  std::memcpy(rec.data(), &len, 8);
  uint32_t len_crc = masked_crc32c(rec.data(), 8);
  std::memcpy(rec.data() + 8, &len_crc, 4);
  rec += e;
  uint32_t data_crc = masked_crc32c(e.data(), e.size());
  rec.append(reinterpret_cast<const char*>(&data_crc), 4);
  bool ok = std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size() && std::fflush(file_) == 0;
  BRISK_CHECK(ok, "SummaryWriter: writing '", path_, "' failed: ", std::strerror(errno));
}

void SummaryWriter::add_scalar(std::string_view tag, double value, int64_t step, double wall_time) {
  check_tag(tag, "add_scalar");
  std::string fields;
  put_float(fields, 2, float(value));
  std::string s = summary_of(tag, fields);
  write_event(event(wall_time, step, &s));
}

void SummaryWriter::add_histogram(std::string_view tag, const Tensor& values, int64_t step, int bins,
                                  double wall_time) {
  BRISK_CHECK(values.defined(), "SummaryWriter::add_histogram: undefined tensor for tag '", tag, "'");
  add_histogram(tag, values.detach().to_vector<double>(), step, bins, wall_time);
}

void SummaryWriter::add_histogram(std::string_view tag, const std::vector<double>& values, int64_t step, int bins,
                                  double wall_time) {
  check_tag(tag, "add_histogram");
  BRISK_CHECK(bins >= 1 && bins <= 1 << 20, "SummaryWriter::add_histogram: bins must be in [1, 2^20], got ", bins);
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += v * v;
  }
  std::vector<double> limits, counts;
  if (lo <= hi) {
    if (hi == lo) bins = 1;
    double width = (hi - lo) / bins;
    limits.resize(size_t(bins));
    counts.assign(size_t(bins), 0.0);
    for (int i = 0; i < bins; ++i) limits[size_t(i)] = i + 1 == bins ? hi : lo + width * (i + 1);
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      int i = width > 0 ? int((v - lo) / width) : 0;
      counts[size_t(std::clamp(i, 0, bins - 1))] += 1;
    }
  } else {
    lo = hi = 0;
  }
  // HistogramProto { min = 1; max = 2; num = 3; sum = 4; sum_squares = 5; bucket_limit = 6; bucket = 7 }
  std::string h;
  put_double(h, 1, lo);
  put_double(h, 2, hi);
  put_double(h, 3, double(values.size()));
  put_double(h, 4, sum);
  put_double(h, 5, sum_sq);
  put_packed_doubles(h, 6, limits);
  put_packed_doubles(h, 7, counts);
  std::string fields;
  put_bytes(fields, 5, h);
  std::string s = summary_of(tag, fields);
  write_event(event(wall_time, step, &s));
}

void SummaryWriter::add_text(std::string_view tag, std::string_view text, int64_t step, double wall_time) {
  check_tag(tag, "add_text");
  // metadata = 9: SummaryMetadata { plugin_data = 1: PluginData { plugin_name = 1: "text" } }
  std::string plugin, metadata;
  put_bytes(plugin, 1, "text");
  put_bytes(metadata, 1, plugin);
  // tensor = 8: TensorProto { dtype = 1: DT_STRING (7); tensor_shape = 2: {} (a scalar);
  // string_val = 8 }
  std::string tensor;
  put_int(tensor, 1, 7);
  put_bytes(tensor, 2, "");
  put_bytes(tensor, 8, text);
  std::string fields;
  put_bytes(fields, 9, metadata);
  put_bytes(fields, 8, tensor);
  std::string s = summary_of(tag, fields);
  write_event(event(wall_time, step, &s));
}

void SummaryWriter::flush() {
  if (file_) std::fflush(file_);
}

void SummaryWriter::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace brisk::training
