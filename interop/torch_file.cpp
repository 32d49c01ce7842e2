// interop/torch_file.cpp: load_torch, the zip side: find <folder>/data.pkl, check byteorder,
// read each storage record the pickle names into a fresh CPU storage, and flatten
// state_dicts. The zip container is libzip's work; every size it reports is checked against
// the archive's before anything of that size is allocated.
#include "interop/torch_file.h"

#include <zip.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "engine/error.h"
#include "interop/pickle.h"

namespace brisk::interop {

namespace {

// data.pkl larger than this is refused: a state_dict of 100k tensors pickles to ~20 MB, and
// the unpickler's memory is a small multiple of this size.
constexpr uint64_t kMaxPickleBytes = uint64_t(256) << 20;
// Deflate expands at most ~1032:1; a record claiming more is corrupt (a zip bomb's header).
constexpr uint64_t kMaxDeflateRatio = 1032;

struct ZipDiscard {
  void operator()(zip_t* z) const { zip_discard(z); }  // read only: nothing to write back
};
using ZipHandle = std::unique_ptr<zip_t, ZipDiscard>;

std::string zip_message(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string s = zip_error_strerror(&e);
  zip_error_fini(&e);
  return s;
}

// What a file that is not a zip archive probably is, for the error.
std::string not_zip_hint(std::string_view head) {
  if (!head.empty() && uint8_t(head[0]) == 0x80)
    return "a pickle, not a zip archive: the legacy torch.save format (torch < 1.6, or "
           "_use_new_zipfile_serialization=False), which brisk does not read; load it in PyTorch and save it "
           "again with torch >= 1.6";
  return "not a zip archive (torch.save writes zip archives since torch 1.6)";
}

class Archive {
 public:
  Archive(ZipHandle zip, uint64_t archive_bytes, std::string name)
      : zip_(std::move(zip)), archive_bytes_(archive_bytes), name_(std::move(name)) {
    find_folder();
  }

  TorchValue load() {
    const std::string order = read_small("byteorder", 16).value_or("little");
    BRISK_CHECK(order == "little" || order == "big", "load_torch: ", name_, ": ", folder_, "byteorder holds '", order,
                "' (little or big)");
    swap_bytes_ = order == "big";
    const zip_int64_t pkl = locate("data.pkl");
    const std::string program = read_record(pkl, "data.pkl", kMaxPickleBytes);
    StorageLoader loader = [this](const StorageRef& ref) { return load_storage(ref); };
    return unpickle_torch(program, loader, "load_torch: " + name_ + ": " + folder_ + "data.pkl");
  }

 private:
  // The one <folder>/data.pkl names the folder every other record lives in (torch.save uses
  // the file's stem; "archive/" is common).
  void find_folder() {
    const zip_int64_t n = zip_get_num_entries(zip_.get(), 0);
    bool torchscript = false;
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* entry = zip_get_name(zip_.get(), zip_uint64_t(i), ZIP_FL_ENC_RAW);
      if (!entry) continue;
      const std::string_view s(entry);
      const size_t slash = s.find('/');
      if (slash == std::string_view::npos || slash == 0) continue;
      const std::string_view rest = s.substr(slash + 1);
      if (rest == "constants.pkl" || rest.starts_with("code/")) torchscript = true;
      if (rest != "data.pkl") continue;
      BRISK_CHECK(folder_.empty(), "load_torch: ", name_, ": two data.pkl records (", folder_, "data.pkl and ", s, ")");
      folder_ = std::string(s.substr(0, slash + 1));
    }
    BRISK_CHECK(
        !folder_.empty(), "load_torch: ", name_, ": no <folder>/data.pkl record: ",
        torchscript ? "a TorchScript archive (torch.jit.save), not a torch.save file" : "not a torch.save file");
  }

  zip_int64_t locate(const std::string& record) const {
    const zip_int64_t i = zip_name_locate(zip_.get(), (folder_ + record).c_str(), ZIP_FL_ENC_RAW);
    BRISK_CHECK(i >= 0, "load_torch: ", name_, ": no record ", folder_, record);
    return i;
  }

  // The record's size after checks that make it safe to allocate: known, at most `max`, and
  // no larger than the archive could hold (stored) or deflate could expand to.
  uint64_t record_size(zip_int64_t index, const std::string& record, uint64_t max) const {
    zip_stat_t st;
    zip_stat_init(&st);
    BRISK_CHECK(zip_stat_index(zip_.get(), zip_uint64_t(index), 0, &st) == 0, "load_torch: ", name_, ": ", folder_,
                record, ": ", zip_strerror(zip_.get()));
    const zip_uint64_t need = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
    BRISK_CHECK((st.valid & need) == need, "load_torch: ", name_, ": ", folder_, record, ": size unknown");
    BRISK_CHECK(st.comp_method == ZIP_CM_STORE || st.comp_method == ZIP_CM_DEFLATE, "load_torch: ", name_, ": ",
                folder_, record, ": compression method ", st.comp_method,
                " (torch.save stores records; brisk reads stored and deflated ones)");
    // comp_size is checked first, so the deflate bound cannot overflow.
    const bool fits =
        st.comp_size <= archive_bytes_ &&
        st.size <= (st.comp_method == ZIP_CM_STORE ? st.comp_size : st.comp_size * kMaxDeflateRatio + 1024);
    BRISK_CHECK(fits, "load_torch: ", name_, ": ", folder_, record, ": claims ", st.size, " bytes, more than the ",
                archive_bytes_, "-byte archive can hold (corrupt)");
    BRISK_CHECK(st.size <= max, "load_torch: ", name_, ": ", folder_, record, ": ", st.size,
                " bytes, more than the limit of ", max);
    return st.size;
  }

  // Reads the whole record (exactly `size` bytes) into `out`.
  void read_into(zip_int64_t index, const std::string& record, void* out, uint64_t size) const {
    zip_file_t* f = zip_fopen_index(zip_.get(), zip_uint64_t(index), 0);
    BRISK_CHECK(f, "load_torch: ", name_, ": ", folder_, record, ": ", zip_strerror(zip_.get()));
    uint64_t got = 0;
    char extra;
    zip_int64_t n = 0;
    while (got < size && (n = zip_fread(f, static_cast<char*>(out) + got, size - got)) > 0) got += uint64_t(n);
    // One more read reaches the end, where libzip checks the CRC; it must return 0.
    if (n >= 0 && got == size) n = zip_fread(f, &extra, 1);
    std::string error = n < 0 ? zip_file_strerror(f) : "";
    zip_fclose(f);
    BRISK_CHECK(n == 0 && got == size, "load_torch: ", name_, ": ", folder_, record, ": ",
                error.empty() ? "size differs from its zip header (truncated or corrupt)" : error);
  }

  std::string read_record(zip_int64_t index, const std::string& record, uint64_t max) const {
    std::string bytes(record_size(index, record, max), '\0');
    read_into(index, record, bytes.data(), bytes.size());
    return bytes;
  }

  // A small text record that may be absent (older torch versions wrote no byteorder).
  std::optional<std::string> read_small(const std::string& record, uint64_t max) const {
    const zip_int64_t i = zip_name_locate(zip_.get(), (folder_ + record).c_str(), ZIP_FL_ENC_RAW);
    if (i < 0) return std::nullopt;
    std::string s = read_record(i, record, max);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }

  // data/<key>: exactly numel elements of dtype, read into a fresh CPU storage.
  Storage load_storage(const StorageRef& ref) const {
    BRISK_CHECK(!ref.key.empty() && ref.key.find('\0') == std::string::npos, "load_torch: ", name_,
                ": data.pkl names a storage with an empty or binary key");
    const std::string record = "data/" + ref.key;
    const zip_int64_t index = locate(record);
    const uint64_t size = record_size(index, record, UINT64_MAX);
    const uint64_t elem = dtype_size(ref.dtype);
    BRISK_CHECK(uint64_t(ref.numel) <= size / elem && uint64_t(ref.numel) * elem == size, "load_torch: ", name_, ": ",
                folder_, record, ": data.pkl claims ", ref.numel, " elements of ", ref.dtype, " but the record holds ",
                size, " bytes");
    Storage s = make_storage(size, Device::cpu());
    read_into(index, record, s->data, size);
    if (swap_bytes_ && elem > 1) {
      auto* p = static_cast<uint8_t*>(s->data);
      for (uint64_t at = 0; at < size; at += elem) std::reverse(p + at, p + at + elem);
    }
    return s;
  }

  ZipHandle zip_;
  uint64_t archive_bytes_;
  std::string name_;
  std::string folder_;
  bool swap_bytes_ = false;
};

// The tree with every tensor copied to `device`.
TorchValue to_device(const TorchValue& v, Device device) {
  using Kind = TorchValue::Kind;
  switch (v.kind()) {
    case Kind::Tensor: return TorchValue::tensor(v.as_tensor().to(device));
    case Kind::List:
    case Kind::Tuple: {
      TorchValue::Items items;
      for (const TorchValue& item : v.items()) items.push_back(to_device(item, device));
      return v.kind() == Kind::List ? TorchValue::list(std::move(items)) : TorchValue::tuple(std::move(items));
    }
    case Kind::Dict: {
      TorchValue::Entries entries;
      for (const auto& entry : v.entries()) entries.emplace_back(entry.first, to_device(entry.second, device));
      return TorchValue::dict(std::move(entries));
    }
    default: return v;
  }
}

TorchValue finish(TorchValue v, Device device) { return device.is_cpu() ? v : to_device(v, device); }

// "an int", "a list", "None": for messages.
std::string article(const TorchValue& v) {
  const std::string name = v.kind_name();
  if (v.is_none()) return name;
  return (name[0] == 'i' ? "an " : "a ") + name;
}

void flatten(const TorchValue& v, const std::string& prefix, NamedTensors& out, std::set<std::string>& seen) {
  using Kind = TorchValue::Kind;
  const auto name = [&](const std::string& part) { return prefix.empty() ? part : prefix + "." + part; };
  switch (v.kind()) {
    case Kind::Tensor:
      BRISK_CHECK(seen.insert(prefix).second, "load_torch_state_dict: the name '", prefix, "' comes twice");
      out.emplace_back(prefix, v.as_tensor());
      return;
    case Kind::List:
    case Kind::Tuple:
      for (size_t i = 0; i < v.size(); ++i) flatten(v[i], name(std::to_string(i)), out, seen);
      return;
    case Kind::Dict:
      for (const auto& entry : v.entries()) {
        const TorchValue& k = entry.first;
        flatten(entry.second, name(k.kind() == Kind::Int ? std::to_string(k.as_int()) : k.as_string()), out, seen);
      }
      return;
    default: return;  // numbers, strings, None: not tensors
  }
}

}  // namespace

TorchValue load_torch(const std::string& path, Device map_location) {
  std::error_code ec;
  const uint64_t bytes = std::filesystem::file_size(path, ec);
  BRISK_CHECK(!ec, "load_torch: ", path, ": ", ec.message());
  int code = 0;
  zip_t* zip = zip_open(path.c_str(), ZIP_RDONLY, &code);
  if (!zip) {
    std::string head;
    if (code == ZIP_ER_NOZIP) {
      if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
        head.resize(1);
        head.resize(std::fread(head.data(), 1, 1, f));
        std::fclose(f);
      }
      BRISK_FAIL("load_torch: ", path, ": ", not_zip_hint(head));
    }
    BRISK_FAIL("load_torch: ", path, ": ", zip_message(code));
  }
  return finish(Archive(ZipHandle(zip), bytes, path).load(), map_location);
}

TorchValue load_torch_bytes(std::string_view bytes, const std::string& name, Device map_location) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  zip_t* zip = source ? zip_open_from_source(source, ZIP_RDONLY, &error) : nullptr;
  if (!zip) {
    if (source) zip_source_free(source);
    const bool no_zip = zip_error_code_zip(&error) == ZIP_ER_NOZIP;
    std::string message = no_zip ? not_zip_hint(bytes) : zip_error_strerror(&error);
    zip_error_fini(&error);
    BRISK_FAIL("load_torch: ", name, ": ", message);
  }
  zip_error_fini(&error);
  return finish(Archive(ZipHandle(zip), bytes.size(), name).load(), map_location);
}

NamedTensors flatten_tensors(const TorchValue& value) {
  NamedTensors out;
  std::set<std::string> seen;
  flatten(value, "", out, seen);
  return out;
}

NamedTensors load_torch_state_dict(const std::string& path, const std::string& key, Device map_location) {
  const TorchValue root = load_torch(path, map_location);
  BRISK_CHECK(root.is_dict(), "load_torch_state_dict: ", path, " holds ", article(root), ", not a dict");
  if (key.empty()) return flatten_tensors(root);
  const TorchValue* sub = root.find(key);
  if (!sub) {
    std::string keys;
    for (const auto& entry : root.entries()) {
      if (keys.size() > 200) {
        keys += ", ...";
        break;
      }
      const TorchValue& k = entry.first;
      keys += (keys.empty() ? "'" : ", '") +
              (k.kind() == TorchValue::Kind::Int ? std::to_string(k.as_int()) : k.as_string()) + "'";
    }
    BRISK_FAIL("load_torch_state_dict: ", path, ": no key '", key, "' in the top-level dict (keys: ", keys, ")");
  }
  BRISK_CHECK(sub->is_dict(), "load_torch_state_dict: ", path, ": '", key, "' holds ", article(*sub), ", not a dict");
  return flatten_tensors(*sub);
}

}  // namespace brisk::interop
