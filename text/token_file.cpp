// text/token_file.cpp: llm.c-format token files, mapped read-only, and the window dataset.
#include "text/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/functions.h"
#include "engine/serialize.h"

namespace brisk::text {

namespace {

constexpr int32_t kMagic16 = 20240520, kVersion16 = 1;  // llm.c: GPT-2 tokens, uint16
constexpr int32_t kMagic32 = 20240801, kVersion32 = 7;  // llm.c: LLaMA-3 tokens, uint32
constexpr size_t kHeaderInts = 256, kHeaderBytes = kHeaderInts * 4;

size_t width(TokenDType d) { return d == TokenDType::U16 ? 2 : 4; }

void put_le32(std::string& out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + size_t(i)] = char((v >> (8 * i)) & 0xff);
}

uint32_t get_le32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

void write_token_file(const std::string& path, std::span<const int64_t> ids, std::optional<TokenDType> dtype) {
  int64_t largest = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    BRISK_CHECK(ids[i] >= 0, "write_token_file(", path, "): id ", ids[i], " at ", i, " is negative");
    largest = std::max(largest, ids[i]);
  }
  BRISK_CHECK(ids.size() <= size_t(INT32_MAX), "write_token_file(", path, "): ", ids.size(),
              " ids exceed the format's int32 count");
  const TokenDType d = dtype ? *dtype : (largest < 65536 ? TokenDType::U16 : TokenDType::U32);
  const int64_t limit = d == TokenDType::U16 ? 65535 : int64_t(UINT32_MAX);
  BRISK_CHECK(largest <= limit, "write_token_file(", path, "): id ", largest, " does not fit ",
              d == TokenDType::U16 ? "uint16" : "uint32");
  std::string bytes(kHeaderBytes + ids.size() * width(d), '\0');
  put_le32(bytes, 0, uint32_t(d == TokenDType::U16 ? kMagic16 : kMagic32));
  put_le32(bytes, 4, uint32_t(d == TokenDType::U16 ? kVersion16 : kVersion32));
  put_le32(bytes, 8, uint32_t(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto v = uint32_t(ids[i]);
    const size_t at = kHeaderBytes + i * width(d);
    bytes[at] = char(v & 0xff);
    bytes[at + 1] = char((v >> 8) & 0xff);
    if (d == TokenDType::U32) {
      bytes[at + 2] = char((v >> 16) & 0xff);
      bytes[at + 3] = char((v >> 24) & 0xff);
    }
  }
  write_file_atomic(path, bytes);
}

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path, std::optional<TokenDType> raw) {
  const std::string who = "TokenFile::open(" + path + "): ";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BRISK_CHECK(fd >= 0, who, "cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    BRISK_FAIL(who, "not a regular file");
  }
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->path_ = path;
  const auto bytes = size_t(st.st_size);
  if (bytes > 0) {
    void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    BRISK_CHECK(m != MAP_FAILED, who, "cannot map ", bytes, " bytes: ", std::strerror(err));
    f->map_ = m;
    f->map_bytes_ = bytes;
  } else {
    ::close(fd);
  }
  const auto* p = static_cast<const unsigned char*>(f->map_);
  if (raw) {
    f->dtype_ = *raw;
    BRISK_CHECK(bytes % width(*raw) == 0, who, "a raw file of ", *raw == TokenDType::U16 ? "uint16" : "uint32",
                " ids has a size that is a multiple of ", width(*raw), " bytes, not ", bytes);
    f->ids_ = p;
    f->count_ = int64_t(bytes / width(*raw));
    return f;
  }
  BRISK_CHECK(bytes >= kHeaderBytes, who, "too short for llm.c's 1024-byte header (", bytes,
              " bytes; a headerless file of ids opens with the raw dtype given)");
  const auto magic = int32_t(get_le32(p)), version = int32_t(get_le32(p + 4)), count = int32_t(get_le32(p + 8));
  if (magic == kMagic16) {
    BRISK_CHECK(version == kVersion16, who, "version ", version, " with magic ", magic, " (expected ", kVersion16, ")");
    f->dtype_ = TokenDType::U16;
  } else if (magic == kMagic32) {
    BRISK_CHECK(version == kVersion32, who, "version ", version, " with magic ", magic, " (expected ", kVersion32, ")");
    f->dtype_ = TokenDType::U32;
  } else {
    BRISK_FAIL(who, "magic ", magic, " is not a token file's (", kMagic16, " for uint16 ids, ", kMagic32,
               " for uint32)");
  }
  BRISK_CHECK(count >= 0 && uint64_t(count) * width(f->dtype_) == bytes - kHeaderBytes, who, "the header says ", count,
              " ids, but ", bytes - kHeaderBytes, " bytes follow it");
  f->ids_ = p + kHeaderBytes;
  f->count_ = count;
  return f;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

int64_t TokenFile::at(int64_t i) const {
  BRISK_CHECK(i >= 0 && i < count_, "TokenFile(", path_, "): index ", i, " out of range for ", count_, " ids");
  const unsigned char* q = ids_ + size_t(i) * width(dtype_);
  return dtype_ == TokenDType::U16 ? int64_t(q[0] | q[1] << 8) : int64_t(get_le32(q));
}

Tensor TokenFile::slice(int64_t start, int64_t n) const {
  BRISK_CHECK(start >= 0 && n >= 0 && start + n <= count_, "TokenFile(", path_, "): ids [", start, ", ", start + n,
              ") out of range for ", count_, " ids");
  Tensor out = empty({n}, DType::I64);
  int64_t* o = out.data<int64_t>();
  const unsigned char* q = ids_ + size_t(start) * width(dtype_);
  if (dtype_ == TokenDType::U16) {
    for (int64_t i = 0; i < n; ++i) o[i] = int64_t(q[2 * i] | q[2 * i + 1] << 8);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = int64_t(get_le32(q + 4 * i));
  }
  return out;
}

TokenDataset::TokenDataset(std::shared_ptr<const TokenFile> file, int64_t block_size, int64_t stride)
    : file_(std::move(file)), block_(block_size), stride_(stride > 0 ? stride : block_size) {
  BRISK_CHECK(file_, "TokenDataset: no token file");
  BRISK_CHECK(block_ > 0 && stride >= 0, "TokenDataset(", file_->path(),
              "): block_size must be > 0 and stride >= 0, got ", block_, " and ", stride);
  BRISK_CHECK(file_->size() >= block_ + 1, "TokenDataset(", file_->path(), "): ", file_->size(),
              " ids are fewer than one window of block_size + 1 = ", block_ + 1);
  windows_ = (file_->size() - block_ - 1) / stride_ + 1;
}

data::Example TokenDataset::get(int64_t index) const {
  BRISK_CHECK(index >= 0 && index < windows_, "TokenDataset(", file_->path(), "): index ", index, " out of range for ",
              windows_, " windows");
  Tensor w = file_->slice(index * stride_, block_ + 1);
  return {w.narrow(0, 0, block_), w.narrow(0, 1, block_)};
}

}  // namespace brisk::text
