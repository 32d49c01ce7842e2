// train/tensorboard.h: TensorBoard event files. SummaryWriter writes scalars (loss, accuracy,
// learning rate, loss scale, ...), histograms (weights, gradients) and text into
// <log_dir>/events.out.tfevents.<time>.<host>.<pid>.<n>, which `tensorboard --logdir` and its
// Python readers open. The format is TFRecord framing (length, masked CRC-32C of the length,
// data, masked CRC-32C of the data) around Event protocol buffers (Note [TensorBoard
// encoding]). Not here: JSONL/SVG reports (examples/fashion_mnist/report.h), images, graphs,
// embeddings.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace brisk::training {

// Note [TensorBoard encoding]
// The few messages written here (Event, Summary, Summary.Value, HistogramProto,
// SummaryMetadata.PluginData, TensorProto, TensorShapeProto) are encoded by hand: about 60
// lines of varint and length-delimited fields, with field numbers from TensorBoard's
// tensorboard/compat/proto/*.proto. Depending on libprotobuf for them would put protoc, its
// generated sources and a 3 MB runtime into every build of brisk for those 60 lines; the
// round trip through TensorBoard's own Python reader (tests/tensorboard_check.py) is what
// keeps the encoding honest. Each record is written with one fwrite and flushed at once, so
// a crash loses at most the record being written; TensorBoard's reader stops cleanly at a
// truncated last record. A run that resumes writes a new file beside the old ones, as
// PyTorch's SummaryWriter does; TensorBoard merges the files of a directory by step.

// CRC-32C (Castagnoli), and TFRecord's masked form of it: rotate right by 15, add 0xa282ead8.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t size);

class SummaryWriter {
 public:
  // Creates log_dir (and its parents) when missing and opens a new event file in it.
  explicit SummaryWriter(const std::string& log_dir, const std::string& filename_suffix = "");
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // wall_time: seconds since the epoch; < 0 means now.
  void add_scalar(std::string_view tag, double value, int64_t step, double wall_time = -1);
  // Histogram of the tensor's values (any dtype and device) in `bins` equal-width buckets
  // between their min and max. Non-finite values count in `num` but in no bucket; an empty
  // tensor writes an empty histogram.
  void add_histogram(std::string_view tag, const Tensor& values, int64_t step, int bins = 64, double wall_time = -1);
  void add_histogram(std::string_view tag, const std::vector<double>& values, int64_t step, int bins = 64,
                     double wall_time = -1);
  // Markdown text (TensorBoard's text plugin).
  void add_text(std::string_view tag, std::string_view text, int64_t step, double wall_time = -1);

  void flush();
  void close();  // further adds throw
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace brisk::training
