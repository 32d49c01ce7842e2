// text/token_file.h: token ids on disk for language-model training, and the dataset of
// (T + 1)-token windows over them.
//
// The file format is llm.c's (dev/data/data_common.py), so that files made by either tool
// train in the other: a header of 256 little-endian int32 (magic, version, token count, then
// zeros), then the ids: magic 20240520 / version 1 for uint16 ids (GPT-2's 50257-token vocab
// fits), magic 20240801 / version 7 for uint32. Headerless files of raw ids (nanoGPT's
// train.bin, uint16) open too when the caller names the dtype.
//
//   text::write_token_file("train.bin", ids);                 // uint16 when every id fits
//   auto ds = std::make_shared<text::TokenDataset>(text::TokenFile::open("train.bin"), 256);
//   data::DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .num_workers = 2, .seed = 1});
//   for (auto& b : loader) ...  // b.input (16, 256) I64, b.target (16, 256): the next tokens
// Not here: turning text into ids (text/tokenize_files.h, text/bpe.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "data/dataset.h"

namespace brisk::text {

enum class TokenDType { U16, U32 };

// Writes ids in llm.c's format, atomically (a crash leaves the old file or the whole new one).
// dtype: U16 when every id < 65536 unless given; a negative id, or one that does not fit the
// given dtype, is an error.
void write_token_file(const std::string& path, std::span<const int64_t> ids,
                      std::optional<TokenDType> dtype = std::nullopt);

// A token file mapped read-only into memory (the pages are read as windows touch them).
class TokenFile {
 public:
  // An llm.c file: the header is checked (magic, version, a count that the file's size
  // matches exactly). raw: a headerless file of ids of that dtype.
  static std::shared_ptr<const TokenFile> open(const std::string& path, std::optional<TokenDType> raw = std::nullopt);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  TokenDType dtype() const { return dtype_; }
  int64_t at(int64_t i) const;  // checked
  // ids [start, start + n) as I64, (n).
  Tensor slice(int64_t start, int64_t n) const;
  const std::string& path() const { return path_; }

 private:
  TokenFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* ids_ = nullptr;
  int64_t count_ = 0;
  TokenDType dtype_ = TokenDType::U16;
};

// Windows of block_size + 1 tokens: sample i starts at i * stride and gives input = tokens
// [s, s + T) and target = tokens [s + 1, s + T + 1), both (T) I64. The loader's shuffle makes
// the order random, seeded and resumable (its LoaderState); stride < T overlaps the windows.
class TokenDataset : public data::Dataset {
 public:
  TokenDataset(std::shared_ptr<const TokenFile> file, int64_t block_size, int64_t stride = 0);  // stride 0: T
  int64_t size() const override { return windows_; }
  data::Example get(int64_t index) const override;
  int64_t block_size() const { return block_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t block_, stride_, windows_;
};

}  // namespace brisk::text
