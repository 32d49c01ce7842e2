// engine/serialize.cpp: the safetensors reader and writer (POSIX file calls, nlohmann-json for
// the header). The reader validates the whole header against the file size before it
// allocates or reads any tensor data, so the memory it takes is bounded by the file's size
// (plus the header's JSON tree, itself bounded by kSafetensorsMaxHeader). Not here: mmap.
#include "engine/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "engine/functions.h"
#include "engine/grad_mode.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; brisk reads and writes it in place");

namespace brisk {
namespace {

// Ordered: tensors come back in the header's order, which for brisk's files is the saved order.
using Json = nlohmann::ordered_json;

std::string errno_text(int e) { return std::strerror(e); }

// Errors read "load_safetensors(<path>): <field>: <what>".
struct Fail {
  std::string prefix;
  template <class... A>
  [[noreturn]] void operator()(const A&... a) const {
    BRISK_FAIL(prefix, a...);
  }
};

// A JSON value as it appears in an error, cut short: a hostile header can be 100 MB.
std::string brief(const Json& j) {
  std::string s = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

std::string quoted(const std::string& name) {
  std::string q = Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
  if (q.size() > 80) q = q.substr(0, 76) + "...\"";
  return q;
}

const char* supported_dtypes() { return "F32 F64 F16 BF16 I8 U8 I32 I64 BOOL"; }

std::optional<DType> dtype_from_safetensors(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (s == kDTypeInfo[i].safetensors) return DType(i);
  }
  return std::nullopt;
}

// A non-negative JSON integer (nlohmann stores those as unsigned; negatives as signed).
std::optional<uint64_t> as_count(const Json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return uint64_t(j.get<int64_t>());
  return std::nullopt;
}

// ---------------------------------------------------------------------------------- reading

// An open file read with bounded pread calls: nothing is read past the size it had when opened.
class Reader {
 public:
  Reader(const std::string& path, const Fail& fail) : fail_(fail) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail_("cannot open: ", errno_text(errno));
    struct stat st {};
    const int rc = ::fstat(fd_, &st);
    const int err = errno;
    if (rc != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);  // the destructor does not run for a constructor that throws
      if (rc != 0) fail_("cannot stat: ", errno_text(err));
      fail_("not a regular file");
    }
    size_ = uint64_t(st.st_size);
  }
  ~Reader() { ::close(fd_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  uint64_t size() const { return size_; }

  // Exactly n bytes at `offset` into dst; `what` names them in the error.
  void read(void* dst, uint64_t n, uint64_t offset, const std::string& what) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
      ssize_t r = ::pread(fd_, p, chunk, off_t(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail_("reading ", what, ": ", errno_text(errno));
      if (r == 0) fail_("unexpected end of file while reading ", what, " (did the file shrink?)");
      p += r;
      n -= uint64_t(r);
      offset += uint64_t(r);
    }
  }

 private:
  const Fail& fail_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Parses the header, refusing duplicate keys (nlohmann would keep the last one silently) and
// nesting deeper than any safetensors header has.
Json parse_header(const std::string& text, const Fail& fail) {
  constexpr int kMaxDepth = 16;
  struct OpenObject {
    std::set<std::string> keys;  // seen so far in this object
    std::string last;            // the latest of them
  };
  std::vector<OpenObject> open;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxDepth) fail("header nests deeper than ", kMaxDepth, " levels");
    switch (event) {
      case Json::parse_event_t::object_start: open.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (open.empty()) break;
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open.back().keys.insert(key).second) {
          if (open.size() == 1) fail("duplicate tensor name ", quoted(key), " in the header");
          fail("duplicate key ", quoted(key), " in the entry of ", quoted(open.front().last));
        }
        open.back().last = key;
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text, callback);
  } catch (const Json::exception& e) {
    fail("header is not valid JSON: ", e.what());
  }
}

struct Entry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Checks one tensor's entry against the data section's size; every field named in errors.
Entry parse_entry(const std::string& name, const Json& v, uint64_t data_size, const Fail& fail) {
  const std::string where = "tensor " + quoted(name) + ": ";
  if (!v.is_object()) fail(where, "entry is not a JSON object but ", brief(v));
  auto field = [&](const char* key) -> const Json& {
    auto it = v.find(key);
    if (it == v.end()) fail(where, "missing \"", key, "\"");
    return *it;
  };
  Entry e;
  e.name = name;

  const Json& dtype = field("dtype");
  if (!dtype.is_string()) fail(where, "\"dtype\" is not a string but ", brief(dtype));
  auto dt = dtype_from_safetensors(dtype.get_ref<const std::string&>());
  if (!dt) fail(where, "unsupported dtype ", brief(dtype), " in \"dtype\" (supported: ", supported_dtypes(), ")");
  e.dtype = *dt;

  const Json& shape = field("shape");
  if (!shape.is_array()) fail(where, "\"shape\" is not an array but ", brief(shape));
  if (shape.size() > size_t(kMaxDims)) {
    fail(where, "\"shape\" has ", shape.size(), " dims, at most ", kMaxDims, " are supported");
  }
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    auto d = as_count(shape[i]);
    if (!d || *d > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(where, "\"shape\"[", i, "] is ", brief(shape[i]), ", not a non-negative integer");
    }
    e.shape.push_back(int64_t(*d));
    has_zero = has_zero || *d == 0;
  }
  // The extent bounds the element count and every stride (Note [Checked sizes] in
  // engine/shape.h), so a zero dim does not excuse the others.
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t extent = 1, extent_bytes = 0;
  for (int64_t d : e.shape) {
    if (__builtin_mul_overflow(extent, uint64_t(std::max<int64_t>(d, 1)), &extent) || extent > kMax) {
      fail(where, "\"shape\" ", brief(shape), " has more elements than fit in 64 bits");
    }
  }
  if (__builtin_mul_overflow(extent, uint64_t(dtype_size(e.dtype)), &extent_bytes) || extent_bytes > kMax) {
    fail(where, "\"shape\" ", brief(shape), " of ", dtype_name(e.dtype), " has more bytes than fit in 64 bits");
  }
  const uint64_t nbytes = has_zero ? 0 : extent_bytes;

  const Json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    fail(where, "\"data_offsets\" is not an array of two integers but ", brief(offsets));
  }
  auto begin = as_count(offsets[0]);
  auto end = as_count(offsets[1]);
  if (!begin || !end) fail(where, "\"data_offsets\" ", brief(offsets), " are not two non-negative integers");
  if (*end < *begin) fail(where, "\"data_offsets\" ", brief(offsets), ": end is before begin");
  if (*end > data_size) {
    fail(where, "\"data_offsets\" ", brief(offsets), ": end is past the data section (", data_size, " bytes)");
  }
  if (*end - *begin != nbytes) {
    fail(where, "\"data_offsets\" ", brief(offsets), " span ", *end - *begin, " bytes, but \"shape\" ", brief(shape),
         " of ", dtype_name(e.dtype), " needs ", nbytes);
  }
  // A begin that is not a multiple of the element size (MLX's writer, some published models)
  // is fine: the bytes are read into a fresh, aligned tensor, as the reference library does.
  e.begin = *begin;
  e.end = *end;
  return e;
}

// The data section as the format defines it: the tensors' byte ranges, in offset order, tile
// it exactly (no overlap, no hole, nothing after the last), so no byte is unaccounted for.
// An empty tensor's range [k, k] must sit where the tiling has reached.
void check_layout(const std::vector<Entry>& entries, uint64_t data_size, const Fail& fail) {
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t reached = 0;
  const Entry* last = nullptr;  // the entry that ends at `reached`
  for (const Entry* e : order) {
    if (e->begin < reached) {
      fail("tensors ", quoted(last->name), " and ", quoted(e->name), " overlap: \"data_offsets\" [", last->begin, ",",
           last->end, "] and [", e->begin, ",", e->end, "]");
    }
    if (e->begin > reached) {
      fail("the data section has a hole: bytes [", reached, ",", e->begin, ") before tensor ", quoted(e->name),
           " belong to no tensor");
    }
    reached = e->end;
    last = e;
  }
  if (reached != data_size) {
    fail("the data section has ", data_size - reached, " bytes after the last tensor's data (", reached, " of ",
         data_size, " bytes are indexed)");
  }
}

void parse_metadata(const Json& v, std::map<std::string, std::string>& out, const Fail& fail) {
  if (!v.is_object()) fail("\"__metadata__\" is not a JSON object but ", brief(v));
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) fail("\"__metadata__\"[", quoted(key), "] is not a string but ", brief(value));
    out[key] = value.get<std::string>();
  }
}

// ---------------------------------------------------------------------------------- writing

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  uint64_t r = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  r ^= (counter.fetch_add(1) + 1) * 0x9E3779B97F4A7C15ull;
  try {
    std::random_device rd;
    r ^= (uint64_t(rd()) << 32) | rd();
  } catch (...) {
    // The clock and counter suffice: O_EXCL refuses a name that is taken.
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return buf;
}

// Note [Atomic saves]: the bytes go to "<path>.tmp-<pid>-<random>" in the target's directory
// (rename is atomic only within one file system); the temp file is fsynced before it is
// renamed over the target, and the directory is fsynced after, so a crash leaves either the
// old file or the complete new one. Until commit() succeeds the destructor removes the temp
// file, so a failed save leaves the old file untouched.
class AtomicWriter {
 public:
  AtomicWriter(const std::string& path, const Fail& fail) : path_(path), fail_(fail) {
    tmp_ = path + ".tmp-" + std::to_string(::getpid()) + "-" + random_suffix();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) fail_("cannot create temp file ", tmp_, ": ", errno_text(errno));
  }
  ~AtomicWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
      ssize_t w = ::write(fd_, p, chunk);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail_("writing ", tmp_, ": ", errno_text(errno));
      p += w;
      n -= uint64_t(w);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail_("fsync of ", tmp_, ": ", errno_text(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_("closing ", tmp_, ": ", errno_text(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      fail_("cannot rename ", tmp_, " over the target: ", errno_text(errno));
    }
    committed_ = true;
    std::string dir = parent_dir(path_);
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail_("saved, but cannot open directory ", dir, " to fsync it: ", errno_text(errno));
    int rc = ::fsync(dfd);
    int err = errno;
    ::close(dfd);
    // EINVAL: this file system does not sync directories; the rename is as durable as it gets.
    if (rc != 0 && err != EINVAL) fail_("saved, but fsync of directory ", dir, " failed: ", errno_text(err));
  }

 private:
  std::string path_;
  std::string tmp_;
  const Fail& fail_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const Fail fail{"write_file_atomic(" + path + "): "};
  AtomicWriter w(path, fail);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const Fail fail{"save_safetensors(" + path + "): "};
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail("\"__metadata__\" is reserved and cannot name a tensor");
    if (!names.insert(name).second) fail("duplicate tensor name ", quoted(name));
    if (!t.defined()) fail("tensor ", quoted(name), " is undefined");
  }

  // Row-major CPU copies (no copy when a tensor already is one).
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  {
    NoGradGuard no_grad;
    for (const auto& [name, t] : tensors) {
      Tensor h = t.detach();
      if (!h.device().is_cpu()) h = h.to(Device::cpu());
      host.push_back(h.contiguous());
    }
  }

  // Note [safetensors layout]: the header lists the tensors in the given order; their data
  // is laid out by element size, largest first (stable), so every tensor starts aligned to
  // its element size with no padding, as PyTorch's writer does and the reader requires.
  std::vector<size_t> layout(tensors.size());
  for (size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(),
                   [&](size_t a, size_t b) { return host[a].element_size() > host[b].element_size(); });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t offset = 0;
  for (size_t i : layout) {
    begin[i] = offset;
    offset += uint64_t(host[i].numel()) * host[i].element_size();
  }

  std::string header = "{";
  try {
    if (!metadata.empty()) header += "\"__metadata__\":" + Json(metadata).dump();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& h = host[i];
      const uint64_t nbytes = uint64_t(h.numel()) * h.element_size();
      if (header.size() > 1) header += ",";
      header += Json(tensors[i].first).dump();
      header += ":{\"dtype\":\"";
      header += info(h.dtype()).safetensors;
      header += "\",\"shape\":[";
      for (int d = 0; d < h.dim(); ++d) {
        if (d > 0) header += ',';
        header += std::to_string(h.size(d));
      }
      header += "],\"data_offsets\":[";
      header += std::to_string(begin[i]);
      header += ',';
      header += std::to_string(begin[i] + nbytes);
      header += "]}";
    }
  } catch (const Json::exception& e) {
    fail("a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  header += "}";
  // Pads so the data starts 8-byte aligned (the reference writer does the same).
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kSafetensorsMaxHeader) {
    fail("header of ", header.size(), " bytes exceeds the limit of ", kSafetensorsMaxHeader, " bytes");
  }

  AtomicWriter out(path, fail);
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());
  for (size_t i : layout) {
    const uint64_t nbytes = uint64_t(host[i].numel()) * host[i].element_size();
    if (nbytes > 0) out.write(host[i].data_ptr(), nbytes);
  }
  out.commit();
}

namespace {

// A checked header: its entries in the header's order, the metadata and where the data starts.
struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

Header read_header(Reader& file, const Fail& fail) {
  const uint64_t size = file.size();
  if (size < 8) fail("file is ", size, " bytes, shorter than the 8-byte header length");
  unsigned char len[8];
  file.read(len, 8, 0, "the header length");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(len[i]) << (8 * i);
  if (header_len > kSafetensorsMaxHeader) {
    fail("header length ", header_len, " exceeds the limit of ", kSafetensorsMaxHeader, " bytes");
  }
  if (header_len > size - 8) {
    fail("header length ", header_len, " runs past the end of the file (", size, " bytes)");
  }
  std::string text(header_len, '\0');
  file.read(text.data(), header_len, 8, "the header");
  const Json header = parse_header(text, fail);
  if (!header.is_object()) fail("header is not a JSON object but ", brief(header));

  Header out;
  out.data_start = 8 + header_len;
  const uint64_t data_size = size - out.data_start;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      parse_metadata(v, out.metadata, fail);
    } else {
      out.entries.push_back(parse_entry(name, v, data_size, fail));
    }
  }
  check_layout(out.entries, data_size, fail);
  return out;
}

SafetensorsFile load_impl(const std::string& path, Device device, std::optional<DType> convert_to,
                          const std::function<Tensor(const std::string&)>& into, const Fail& fail) {
  if (convert_to && !is_floating(*convert_to)) {
    fail("convert_to must be a floating dtype, got ", *convert_to);
  }
  Reader file(path, fail);
  Header header = read_header(file, fail);
  SafetensorsFile result;
  result.metadata = std::move(header.metadata);

  // Every size is now checked against the file: allocations are bounded by its size.
  NoGradGuard no_grad;
  result.tensors.reserve(header.entries.size());
  for (const Entry& e : header.entries) {
    Tensor t = into ? into(e.name) : Tensor();
    const bool in_place = t.defined() && t.device().is_cpu() && t.dtype() == e.dtype && t.sizes() == e.shape &&
                          t.is_contiguous() && e.dtype != DType::Bool;
    if (!in_place) t = make_empty(e.shape, e.dtype, Device::cpu());
    const uint64_t nbytes = e.end - e.begin;
    if (nbytes > 0)
      file.read(t.data_ptr(), nbytes, header.data_start + e.begin, "the data of tensor " + quoted(e.name));
    if (in_place) {
      t.bump_version();
      result.tensors.emplace_back(e.name, t);
      continue;
    }
    if (e.dtype == DType::Bool) {
      auto* p = static_cast<uint8_t*>(t.data_ptr());
      for (uint64_t i = 0; i < nbytes; ++i) p[i] = p[i] != 0;
    }
    if (convert_to && is_floating(e.dtype) && e.dtype != *convert_to) t = cast(t, *convert_to);
    if (!(device == Device::cpu())) t = t.to(device);
    result.tensors.emplace_back(e.name, t);
  }
  return result;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path, Device device, std::optional<DType> convert_to) {
  return load_impl(path, device, convert_to, {}, Fail{"load_safetensors(" + path + "): "});
}

SafetensorsFile load_safetensors_into(const std::string& path, const std::function<Tensor(const std::string&)>& into) {
  return load_impl(path, Device::cpu(), std::nullopt, into, Fail{"load_safetensors(" + path + "): "});
}

std::vector<SafetensorsEntry> safetensors_entries(const std::string& path) {
  const Fail fail{"load_safetensors(" + path + "): "};
  Reader file(path, fail);
  std::vector<SafetensorsEntry> out;
  for (const Entry& e : read_header(file, fail).entries) out.push_back({e.name, e.shape, e.dtype});
  return out;
}

}  // namespace brisk
