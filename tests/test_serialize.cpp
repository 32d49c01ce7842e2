// tests/test_serialize.cpp: safetensors files: round trips of every dtype and layout, the
// writer's exact bytes, a hand-built file as PyTorch writes it, the committed reference files
// (tests/data/safetensors, made by tests/make_safetensors_reference.py), a table of hostile
// headers each refused with a message naming the field, truncation and corruption that never
// crash, atomic saves that leave the old file on failure, and module save/load reports.
// Not here: CUDA loads (device moves are to_device's tests).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "brisk.h"
#include "engine/serialize.h"
#include "nn/module.h"
#include "nn/serialize_module.h"
#include "test_util.h"
#include "tests/paths.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "brisk-st-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Names in the directory other than `keep` (leftover temp files show up here).
  std::vector<std::string> others(const std::string& keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.path().filename() != keep) out.push_back(e.path().filename().string());
    }
    return out;
  }
};

using test::read_bytes;
using test::write_bytes;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

// A safetensors file: length, header (padded with spaces to 8 bytes as writers do), data.
std::string st_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

// Same dtype, shape and bytes (NaN payloads and -0 included).
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !(a.sizes() == b.sizes())) return false;
  Tensor x = a.to(Device::cpu()).contiguous();
  Tensor y = b.to(Device::cpu()).contiguous();
  size_t n = size_t(x.numel()) * x.element_size();
  return n == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), n) == 0;
}

const Tensor& find(const NamedTensors& ts, const std::string& name) {
  for (const auto& [n, t] : ts) {
    if (n == name) return t;
  }
  FAIL("no tensor named ", name);
  static Tensor none;
  return none;
}

std::vector<std::string> names_of(const NamedTensors& ts) {
  std::vector<std::string> out;
  for (const auto& [n, t] : ts) out.push_back(n);
  return out;
}

constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8,
                                DType::U8,  DType::I32, DType::I64, DType::Bool};

// The tensors of the reference files; tests/make_safetensors_reference.py makes the same.
NamedTensors reference_tensors() {
  return {
      {"f32", from_vector({-1.0, -0.5, 0.0, 0.5, 1.0, 1.5}, {2, 3}, DType::F32)},
      {"f64", from_vector({0.1, -2.25, 1e300}, {3}, DType::F64)},
      {"f16", from_vector({0.0, 0.25, 0.5, 0.75}, {2, 2}, DType::F16)},
      {"bf16", from_vector({1.0, -2.0, 3.0, 384.0}, {4}, DType::BF16)},
      {"i8", from_vector({-128, -1, 0, 127}, {4}, DType::I8)},
      {"u8", from_vector({0, 7, 255}, {3}, DType::U8)},
      {"i32", from_vector({-2147483648.0, 0, 2147483647.0}, {3}, DType::I32)},
      {"i64", from_vector({-3, 0, 7, 1099511627776.0}, {2, 2}, DType::I64)},
      {"bool", from_vector({1, 0, 1}, {3}, DType::Bool)},
      {"scalar", from_vector({3.25}, {}, DType::F32)},
      {"empty", zeros({0, 2}, DType::F32)},
  };
}

fs::path data_dir() { return ::brisk::test::data_dir() / "safetensors"; }

}  // namespace

// ------------------------------------------------------------------------------ round trips

TEST_CASE("safetensors: every dtype round trips bit for bit, dense, strided, 0-dim and empty") {
  TempDir dir;
  NamedTensors saved;
  for (DType dt : kAllDTypes) {
    std::string n = dtype_name(dt);
    std::vector<double> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    if (dt == DType::Bool) v = {1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0};
    if (is_floating(dt)) {
      v[1] = -0.0;
      v[2] = std::numeric_limits<double>::infinity();
      v[3] = std::nan("");
      v[4] = -1.5;
    }
    if (dt == DType::I8 || dt == DType::I32 || dt == DType::I64) v[5] = -7;
    Tensor dense = from_vector(v, {3, 4}, dt);
    saved.emplace_back(n + ".dense", dense);
    saved.emplace_back(n + ".transposed", dense.t());                    // strides (1, 4)
    saved.emplace_back(n + ".sliced", dense.slice(1, 1, 4, 2));          // offset and step
    saved.emplace_back(n + ".scalar", dense.select(0, 1).select(0, 2));  // 0-dim, offset 6
    saved.emplace_back(n + ".empty", zeros({0, 5}, dt));
    saved.emplace_back(n + ".expanded", dense.select(0, 0).unsqueeze(0).expand({2, 4}));  // stride 0
  }
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, saved);
  SafetensorsFile file = load_safetensors(path);
  CHECK(names_of(file.tensors) == names_of(saved));  // brisk's files keep the saved order
  CHECK(file.metadata.empty());
  for (size_t i = 0; i < saved.size(); ++i) {
    CAPTURE(saved[i].first);
    CHECK(same_bytes(file.tensors[i].second, saved[i].second));
    CHECK(file.tensors[i].second.is_contiguous());
  }
  CHECK(find(file.tensors, "F32.scalar").dim() == 0);
  CHECK(find(file.tensors, "F32.scalar").item<double>() == 6.0);
}

TEST_CASE("safetensors: a tensor that requires grad saves its values") {
  TempDir dir;
  Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor y = w * 2.0;  // a non-leaf with history
  save_safetensors(dir.file("g.safetensors"), {{"w", w}, {"y", y}});
  SafetensorsFile f = load_safetensors(dir.file("g.safetensors"));
  CHECK(equal(find(f.tensors, "y"), from_vector({2, 4, 6}, {3})));
  CHECK_FALSE(find(f.tensors, "w").requires_grad());
}

TEST_CASE("safetensors: metadata round trips; an empty map writes no __metadata__") {
  TempDir dir;
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" and \xc3\xa9 and \\n"}, {"", ""}};
  save_safetensors(dir.file("m.safetensors"), {{"x", ones({2})}}, meta);
  CHECK(load_safetensors(dir.file("m.safetensors")).metadata == meta);
  save_safetensors(dir.file("n.safetensors"), {{"x", ones({2})}});
  CHECK(read_bytes(dir.file("n.safetensors")).find("__metadata__") == std::string::npos);
  save_safetensors(dir.file("none.safetensors"), {});
  SafetensorsFile none = load_safetensors(dir.file("none.safetensors"));
  CHECK(none.tensors.empty());
  CHECK(none.metadata.empty());
}

TEST_CASE("safetensors: convert_to converts floating tensors and keeps integer and Bool ones") {
  TempDir dir;
  const std::string path = dir.file("c.safetensors");
  save_safetensors(path, {{"h", from_vector({0.5, 1.5}, {2}, DType::F16)},
                          {"d", from_vector({0.25, -3}, {2}, DType::F64)},
                          {"i", from_vector({1, 2}, {2}, DType::I64)},
                          {"b", from_vector({1, 0}, {2}, DType::Bool)}});
  SafetensorsFile f = load_safetensors(path, Device::cpu(), DType::F32);
  CHECK(equal(find(f.tensors, "h"), from_vector({0.5, 1.5}, {2}, DType::F32)));
  CHECK(equal(find(f.tensors, "d"), from_vector({0.25, -3}, {2}, DType::F32)));
  CHECK(find(f.tensors, "i").dtype() == DType::I64);
  CHECK(find(f.tensors, "b").dtype() == DType::Bool);
  CHECK(find(load_safetensors(path, Device::cpu(), DType::BF16).tensors, "d").dtype() == DType::BF16);
  std::string msg = test::error_text([&] { load_safetensors(path, Device::cpu(), DType::I32); });
  CHECK(msg.find("convert_to must be a floating dtype") != std::string::npos);
}

TEST_CASE("safetensors: names must be unique, defined and not __metadata__ to save") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  std::string msg = test::error_text([&] { save_safetensors(path, {{"a", ones({1})}, {"a", ones({1})}}); });
  CHECK(msg.find("duplicate tensor name \"a\"") != std::string::npos);
  CHECK(msg.find(path) != std::string::npos);
  msg = test::error_text([&] { save_safetensors(path, {{"__metadata__", ones({1})}}); });
  CHECK(msg.find("reserved") != std::string::npos);
  msg = test::error_text([&] { save_safetensors(path, {{"u", Tensor()}}); });
  CHECK(msg.find("\"u\" is undefined") != std::string::npos);
  msg = test::error_text([&] { save_safetensors(path, {{"bad\xff", ones({1})}}); });
  CHECK(msg.find("not valid UTF-8") != std::string::npos);
  CHECK_FALSE(fs::exists(path));
  CHECK(dir.others("").empty());  // no temp file left behind
}

// ------------------------------------------------------------------------------ exact bytes

TEST_CASE("safetensors: the writer's bytes are exactly the format's (8-byte padded header, packed aligned data)") {
  // The header keeps the given order; the data goes largest element first, so each tensor is
  // aligned without padding (Note [safetensors layout]).
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path,
                   {{"b", from_vector({1.5, -2}, {2}, DType::F32)},
                    {"u", from_vector({3, 4, 5}, {3}, DType::U8)},
                    {"a", from_vector({7}, {1}, DType::I64)}},
                   {{"k", "v"}});
  const std::string header = R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("u":{"dtype":"U8","shape":[3],"data_offsets":[16,19]},)"
                             R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  const std::string expected = st_file(header, raw<int64_t>({7}) + raw<float>({1.5f, -2.0f}) + raw<uint8_t>({3, 4, 5}));
  const std::string got = read_bytes(path);
  CHECK(got == expected);
  SafetensorsFile back = load_safetensors(path);
  CHECK(names_of(back.tensors) == std::vector<std::string>{"b", "u", "a"});  // the saved order
}

TEST_CASE("safetensors: a hand-built file laid out as PyTorch writes it loads") {
  // safetensors.torch.save_file({"weight": f16 (2, 2), "bias": f32 (2)}, metadata={"format": "pt"})
  // writes the larger-alignment dtype first and pads the header with spaces.
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("weight":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]}})";
  const std::string data = raw<float>({0.5f, -4.0f}) + raw<uint16_t>({0x3C00, 0x4000, 0x4200, 0xC400});
  write_bytes(dir.file("pt.safetensors"), st_file(header, data));
  SafetensorsFile f = load_safetensors(dir.file("pt.safetensors"));
  CHECK(names_of(f.tensors) == std::vector<std::string>{"bias", "weight"});
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(equal(find(f.tensors, "bias"), from_vector({0.5, -4}, {2}, DType::F32)));
  CHECK(equal(find(f.tensors, "weight"), from_vector({1, 2, 3, -4}, {2, 2}, DType::F16)));
}

TEST_CASE(
    "safetensors: tensors at offsets that are not a multiple of their element size load (as the reference library)") {
  // As MLX writes them, and as one published model.safetensors has every tensor: U8 (3 bytes)
  // first, then F32 at offset 3, F64 at 11 and I64 at 27, all odd-aligned.
  TempDir dir;
  const std::string header = R"({"u":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("f":{"dtype":"F32","shape":[2],"data_offsets":[3,11]},)"
                             R"("d":{"dtype":"F64","shape":[2],"data_offsets":[11,27]},)"
                             R"("i":{"dtype":"I64","shape":[1],"data_offsets":[27,35]}})";
  const std::string data =
      raw<uint8_t>({1, 2, 3}) + raw<float>({1.5f, -2.25f}) + raw<double>({3.125, -1e300}) + raw<int64_t>({-7});
  write_bytes(dir.file("unaligned.safetensors"), le64(header.size()) + header + data);
  SafetensorsFile f = load_safetensors(dir.file("unaligned.safetensors"));
  CHECK(find(f.tensors, "u").to_vector<int>() == std::vector<int>{1, 2, 3});
  CHECK(find(f.tensors, "f").to_vector<float>() == std::vector<float>{1.5f, -2.25f});
  CHECK(find(f.tensors, "d").to_vector<double>() == std::vector<double>{3.125, -1e300});
  CHECK(find(f.tensors, "i").item<int64_t>() == -7);
  for (const auto& [name, t] : f.tensors) {
    CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % t.element_size() == 0);  // read into aligned memory
  }
  // Into a module too (load_module reads straight into the parameters).
  nn::Linear lin(2, 1);
  const std::string lin_header = R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                 R"("weight":{"dtype":"F32","shape":[1,2],"data_offsets":[1,9]},)"
                                 R"("bias":{"dtype":"F32","shape":[1],"data_offsets":[9,13]}})";
  write_bytes(dir.file("lin.safetensors"),
              le64(lin_header.size()) + lin_header + raw<uint8_t>({0}) + raw<float>({0.5f, -1.0f, 2.0f}));
  const nn::LoadReport report = nn::load_module(lin, dir.file("lin.safetensors"), /*strict=*/false);
  CHECK(report.unexpected == std::vector<std::string>{"x"});
  CHECK(lin.weight().to_vector<float>() == std::vector<float>{0.5f, -1.0f});
  CHECK(lin.bias().item<float>() == 2.0f);
}

TEST_CASE("safetensors: a header without padding and Bool bytes above 1 still load, in the header's order") {
  TempDir dir;
  const std::string header =
      R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[1,4]},"x":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})";
  write_bytes(dir.file("odd.safetensors"), le64(header.size()) + header + std::string("\x09\x02\x00\x01", 4));
  SafetensorsFile f = load_safetensors(dir.file("odd.safetensors"));
  CHECK(names_of(f.tensors) == std::vector<std::string>{"b", "x"});  // the header's order
  CHECK(find(f.tensors, "x").item<int64_t>() == 9);
  CHECK(find(f.tensors, "b").to_vector<int>() == std::vector<int>{1, 0, 1});
}

TEST_CASE("safetensors: brisk writes the committed golden file byte for byte") {
  // tests/data/safetensors/brisk_written.safetensors is what PyTorch is checked to read (by
  // tests/make_safetensors_reference.py); brisk must keep writing exactly it.
  TempDir dir;
  const fs::path golden = data_dir() / "brisk_written.safetensors";
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"writer", "brisk"}};
  if (std::getenv("BRISK_REGENERATE_SAFETENSORS")) save_safetensors(golden.string(), reference_tensors(), meta);
  if (!fs::exists(golden)) {
    MESSAGE("no ", golden.string(), ": skipped");
    return;
  }
  save_safetensors(dir.file("now.safetensors"), reference_tensors(), meta);
  CHECK(read_bytes(dir.file("now.safetensors")) == read_bytes(golden.string()));
}

TEST_CASE("safetensors: the file written by PyTorch's safetensors loads with the same values") {
  const fs::path ref = data_dir() / "torch_written.safetensors";
  if (!fs::exists(ref)) {
    MESSAGE("no ", ref.string(), ": skipped (tests/make_safetensors_reference.py makes it)");
    return;
  }
  SafetensorsFile f = load_safetensors(ref.string());
  CHECK(f.metadata.at("writer") == "torch");
  NamedTensors expected = reference_tensors();
  CHECK(f.tensors.size() == expected.size());
  for (const auto& named : expected) {
    const std::string& name = named.first;
    const Tensor& t = named.second;
    CAPTURE(name);
    CHECK(same_bytes(find(f.tensors, name), t));
  }
}

// ------------------------------------------------------------------------------ hostile files

TEST_CASE("safetensors: every malformed header is refused with an error naming the file and the field") {
  TempDir dir;
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string data8(8, '\0');
  struct Case {
    const char* what;
    std::string bytes;
    const char* expected;
  };
  auto one = [&](const std::string& entry, const std::string& data = std::string(8, '\0')) {
    return st_file("{\"a\":{" + entry + "}}", data);
  };
  std::string deep = "{\"__metadata__\":";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  deep += "}";
  const std::vector<Case> cases = {
      {"empty file", "", "file is 0 bytes, shorter than the 8-byte header length"},
      {"5 bytes", "abcde", "file is 5 bytes, shorter than the 8-byte header length"},
      {"header length past the file", le64(1000) + "{}", "header length 1000 runs past the end of the file (10 bytes)"},
      {"header length above 100 MB", le64(200'000'000) + "{}", "header length 200000000 exceeds the limit"},
      {"header length 2^64-1", le64(~uint64_t(0)) + "{}", "exceeds the limit of 100000000 bytes"},
      {"not JSON", st_file("{nope", ""), "header is not valid JSON"},
      {"invalid UTF-8", st_file("{\"\xff\":1}", ""), "header is not valid JSON"},
      {"trailing garbage", st_file("{} x", ""), "header is not valid JSON"},
      {"not an object", st_file("[1,2]", ""), "header is not a JSON object but [1,2]"},
      {"entry not an object", st_file(R"({"a":5})", ""), "tensor \"a\": entry is not a JSON object but 5"},
      {"missing dtype", one(R"("shape":[2],"data_offsets":[0,8])"), "tensor \"a\": missing \"dtype\""},
      {"dtype not a string", one(R"("dtype":4,"shape":[2],"data_offsets":[0,8])"), "\"dtype\" is not a string but 4"},
      {"dtype I16", one(R"("dtype":"I16","shape":[4],"data_offsets":[0,8])"), "unsupported dtype \"I16\" in \"dtype\""},
      {"dtype U16", one(R"("dtype":"U16","shape":[4],"data_offsets":[0,8])"), "unsupported dtype \"U16\""},
      {"dtype F8_E4M3", one(R"("dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8])"), "unsupported dtype \"F8_E4M3\""},
      {"dtype lower case", one(R"("dtype":"f32","shape":[2],"data_offsets":[0,8])"), "unsupported dtype \"f32\""},
      {"missing shape", one(R"("dtype":"F32","data_offsets":[0,8])"), "tensor \"a\": missing \"shape\""},
      {"shape not an array", one(R"("dtype":"F32","shape":2,"data_offsets":[0,8])"), "\"shape\" is not an array but 2"},
      {"negative shape", one(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"),
       "\"shape\"[0] is -2, not a non-negative integer"},
      {"fractional shape", one(R"("dtype":"F32","shape":[1,2.0],"data_offsets":[0,8])"),
       "\"shape\"[1] is 2.0, not a non-negative integer"},
      {"string shape", one(R"("dtype":"F32","shape":["2"],"data_offsets":[0,8])"), "\"shape\"[0] is \"2\""},
      {"shape above int64", one(R"("dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8])"),
       "\"shape\"[0] is 9223372036854775808"},
      {"9 dims", one(R"("dtype":"U8","shape":[1,1,1,1,1,1,1,1,8],"data_offsets":[0,8])"),
       "\"shape\" has 9 dims, at most 8"},
      {"element count overflow", one(R"("dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8])"),
       "\"shape\" [4294967296,4294967296] has more elements than fit in 64 bits"},
      {"byte count overflow", one(R"("dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8])"),
       "has more bytes than fit in 64 bits"},
      {"missing data_offsets", one(R"("dtype":"F32","shape":[2])"), "tensor \"a\": missing \"data_offsets\""},
      {"one offset", one(R"("dtype":"F32","shape":[2],"data_offsets":[0])"),
       "\"data_offsets\" is not an array of two integers but [0]"},
      {"three offsets", one(R"("dtype":"F32","shape":[2],"data_offsets":[0,4,8])"),
       "\"data_offsets\" is not an array of two integers"},
      {"offsets an object", one(R"("dtype":"F32","shape":[2],"data_offsets":{"0":8})"),
       "\"data_offsets\" is not an array of two integers"},
      {"negative offset", one(R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])"),
       "\"data_offsets\" [-8,0] are not two non-negative integers"},
      {"fractional offset", one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8.5])"),
       "are not two non-negative integers"},
      {"end before begin", one(R"("dtype":"F32","shape":[0],"data_offsets":[8,0])"),
       "\"data_offsets\" [8,0]: end is before begin"},
      {"end past the data", one(R"("dtype":"F32","shape":[4],"data_offsets":[0,16])"),
       "\"data_offsets\" [0,16]: end is past the data section (8 bytes)"},
      {"huge end", one(R"("dtype":"U8","shape":[8],"data_offsets":[0,18446744073709551615])"),
       "end is past the data section"},
      {"span too short", one(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])"),
       "\"data_offsets\" [0,4] span 4 bytes, but \"shape\" [2] of F32 needs 8"},
      {"span too long", one(R"("dtype":"F16","shape":[2],"data_offsets":[0,8])"), "span 8 bytes, but"},
      {"overlap",
       st_file("{\"a\":{" + f32x2 + R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(16, '\0')),
       "tensors \"a\" and \"b\" overlap: \"data_offsets\" [0,8] and [4,12]"},
      {"contained overlap",
       st_file(R"({"big":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
               R"("in":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
               std::string(16, '\0')),
       "tensors \"big\" and \"in\" overlap"},
      {"hole between tensors",
       st_file("{\"a\":{" + f32x2 + R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
               std::string(20, '\0')),
       "the data section has a hole: bytes [8,12) before tensor \"b\" belong to no tensor"},
      {"hole at the start", one(R"("dtype":"F32","shape":[2],"data_offsets":[8,16])", std::string(16, '\0')),
       "the data section has a hole: bytes [0,8) before tensor \"a\""},
      {"bytes after the last tensor", one(f32x2, std::string(12, '\0')),
       "the data section has 4 bytes after the last tensor's data (8 of 12 bytes are indexed)"},
      {"no tensors but data", st_file("{}", std::string(8, '\0')), "8 bytes after the last tensor's data"},
      {"empty tensor inside another's data",
       st_file("{\"a\":{" + f32x2 + R"(},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", data8),
       "tensors \"a\" and \"e\" overlap"},
      {"strides overflow beside a zero dim",
       one(R"("dtype":"U8","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0])", ""),
       "\"shape\" [0,1099511627776,1099511627776] has more elements than fit in 64 bits"},
      {"extent near 2^63 of F64", one(R"("dtype":"F64","shape":[0,2147483648,2147483648],"data_offsets":[0,0])", ""),
       "of F64 has more bytes than fit in 64 bits"},
      {"duplicate tensor name", st_file("{\"a\":{" + f32x2 + "},\"a\":{" + f32x2 + "}}", data8),
       "duplicate tensor name \"a\" in the header"},
      {"duplicate field", one(R"("dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8])"),
       "duplicate key \"dtype\" in the entry of \"a\""},
      {"metadata not an object", st_file(R"({"__metadata__":3})", ""), "\"__metadata__\" is not a JSON object but 3"},
      {"metadata value not a string", st_file(R"({"__metadata__":{"k":1}})", ""),
       "\"__metadata__\"[\"k\"] is not a string but 1"},
      {"metadata value null", st_file(R"({"__metadata__":{"k":null}})", ""), "\"__metadata__\"[\"k\"] is not a string"},
      {"deep nesting", st_file(deep, ""), "header nests deeper than 16 levels"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string path = dir.file("hostile.safetensors");
    write_bytes(path, c.bytes);
    std::string msg = test::error_text([&] { load_safetensors(path); });
    CAPTURE(msg);
    CHECK(msg.find("load_safetensors(" + path + "): ") == 0);
    CHECK(msg.find(c.expected) != std::string::npos);
  }
}

TEST_CASE("safetensors: a missing file or a directory is an error naming the path") {
  TempDir dir;
  std::string msg = test::error_text([&] { load_safetensors(dir.file("absent.safetensors")); });
  CHECK(msg.find(dir.file("absent.safetensors")) != std::string::npos);
  CHECK(msg.find("cannot open: No such file or directory") != std::string::npos);
  msg = test::error_text([&] { load_safetensors(dir.path.string()); });
  CHECK(msg.find("not a regular file") != std::string::npos);
}

TEST_CASE("safetensors: every truncation of a valid file is an error, never a crash") {
  TempDir dir;
  const std::string full = dir.file("full.safetensors");
  save_safetensors(full,
                   {{"a", from_vector({1, 2, 3}, {3}, DType::F64)}, {"e", zeros({0})}, {"b", ones({2}, DType::I32)}},
                   {{"format", "pt"}});
  const std::string bytes = read_bytes(full);
  const std::string cut = dir.file("cut.safetensors");
  write_bytes(cut, bytes);
  CHECK(load_safetensors(cut).tensors.size() == 3);
  for (size_t n = bytes.size(); n-- > 0;) {  // shorter and shorter, in place
    CAPTURE(n);
    REQUIRE(::truncate(cut.c_str(), off_t(n)) == 0);
    CHECK_THROWS_AS(load_safetensors(cut), Error);
  }
}

TEST_CASE("safetensors: corrupting any byte either loads or is a brisk::Error") {
  TempDir dir;
  const std::string full = dir.file("full.safetensors");
  save_safetensors(full, {{"a", from_vector({1, 2, 3}, {3}, DType::F64)}, {"b", ones({2, 1}, DType::Bool)}},
                   {{"k", "v"}});
  const std::string bytes = read_bytes(full);
  const std::string bad = dir.file("bad.safetensors");
  write_bytes(bad, bytes);
  const int fd = ::open(bad.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  auto put = [&](size_t i, char v) { REQUIRE(::pwrite(fd, &v, 1, off_t(i)) == 1); };
  int loaded = 0;
  int refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char v : {0x00, 0x22, 0x5d, 0x7b, 0x80, 0xff}) {
      put(i, char(v));
      try {
        load_safetensors(bad);
        ++loaded;
      } catch (const Error&) {
        ++refused;
      } catch (const std::exception& e) {
        FAIL("byte ", i, " = ", int(v), ": escaped as a non-brisk exception: ", e.what());
      }
    }
    put(i, bytes[i]);
  }
  ::close(fd);
  CHECK(loaded > 0);   // data bytes may be anything
  CHECK(refused > 0);  // header bytes mostly may not
}

// ------------------------------------------------------------------------------ atomic saves

TEST_CASE("safetensors: a save that fails at the rename leaves the target and no temp file") {
  TempDir dir;
  const std::string target = dir.file("target");
  fs::create_directory(target);
  write_bytes(target + "/inside", "keep");
  std::string msg = test::error_text([&] { save_safetensors(target, {{"x", ones({4})}}); });
  CAPTURE(msg);
  CHECK(msg.find("save_safetensors(" + target + "): cannot rename ") == 0);
  CHECK(msg.find("Is a directory") != std::string::npos);
  CHECK(fs::is_directory(target));
  CHECK(read_bytes(target + "/inside") == "keep");
  CHECK(dir.others("target").empty());
}

TEST_CASE("safetensors: a save that fails mid-write (file size limit) leaves the old file intact") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", full({4}, 1.0)}}, {{"version", "1"}});
  const std::string before = read_bytes(path);

  // RLIMIT_FSIZE makes write() fail with EFBIG (also for root) once the temp file reaches 64 KB.
  struct FileSizeLimit {  // restored however the save ends
    struct rlimit old {};
    void (*old_handler)(int) = nullptr;
    explicit FileSizeLimit(rlim_t bytes) {
      REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
      old_handler = ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit small = old;
      small.rlim_cur = std::min(bytes, old.rlim_cur);
      REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    }
    ~FileSizeLimit() {
      ::setrlimit(RLIMIT_FSIZE, &old);
      ::signal(SIGXFSZ, old_handler);
    }
  };
  std::string msg;
  {
    FileSizeLimit limit(64 * 1024);
    msg = test::error_text([&] { save_safetensors(path, {{"w", zeros({1 << 20})}}, {{"version", "2"}}); });
  }

  CAPTURE(msg);
  CHECK(msg.find("save_safetensors(" + path + "): writing " + path + ".tmp-") == 0);
  CHECK(msg.find("File too large") != std::string::npos);
  CHECK(read_bytes(path) == before);
  CHECK(load_safetensors(path).metadata.at("version") == "1");
  CHECK(dir.others("model.safetensors").empty());
}

TEST_CASE("safetensors: saving over an existing file replaces it") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  save_safetensors(path, {{"a", ones({3})}});
  save_safetensors(path, {{"b", zeros({2}, DType::I64)}});
  SafetensorsFile f = load_safetensors(path);
  CHECK(names_of(f.tensors) == std::vector<std::string>{"b"});
  CHECK(dir.others("m.safetensors").empty());
  std::string msg = test::error_text([&] { save_safetensors(dir.file("no/such/dir/x.safetensors"), {}); });
  CHECK(msg.find("cannot create temp file") != std::string::npos);
  CHECK(msg.find("No such file or directory") != std::string::npos);
}

// ------------------------------------------------------------------------------ modules

namespace {

struct TinyHead : nn::Module {
  explicit TinyHead(int64_t n) : Module("TinyHead") {
    register_parameter("weight", randn({n, 2}));
    register_parameter("bias", randn({n}));
  }
};

struct Tiny : nn::Module {
  explicit Tiny(int64_t n = 3) : Module("Tiny") {
    register_parameter("scale", randn({n}));
    register_buffer("steps", full({}, 5, DType::I64));
    register_buffer("scratch", zeros({2}), /*persistent=*/false);
    head = register_module("head", std::make_shared<TinyHead>(n));
  }
  std::shared_ptr<TinyHead> head;
};

}  // namespace

TEST_CASE("safetensors: save_module and load_module move a module's state_dict through a file") {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  Tiny a;
  a.buffer("steps").fill_(42);
  nn::save_module(a, path, {{"arch", "tiny"}});
  SafetensorsFile f = load_safetensors(path);
  CHECK(names_of(f.tensors) == std::vector<std::string>{"scale", "steps", "head.weight", "head.bias"});
  CHECK(f.metadata.at("arch") == "tiny");

  Tiny b;
  Tensor& scale = b.parameter("scale");
  Tensor held = scale;  // an optimizer's reference must see the loaded values
  nn::LoadReport report = nn::load_module(b, path);
  CHECK(report.ok());
  for (const auto& named : a.state_dict()) {
    const std::string& name = named.first;
    const Tensor& t = named.second;
    CAPTURE(name);
    CHECK(equal(find(b.state_dict(), name), t));
  }
  CHECK(equal(held, a.parameter("scale")));
  CHECK(b.parameter("scale").requires_grad());

  Tiny c;  // F64 module: load keeps its dtype
  c.to(DType::F64);
  CHECK(nn::load_module(c, path).ok());
  CHECK(c.parameter("scale").dtype() == DType::F64);
  CHECK(allclose(c.parameter("scale"), a.parameter("scale").to(DType::F64)));
}

TEST_CASE("safetensors: load_module strict refuses, non-strict reports missing, unexpected and mis-shaped keys") {
  TempDir dir;
  const std::string path = dir.file("other.safetensors");
  save_safetensors(path, {{"scale", full({3}, 2.0)}, {"head.weight", zeros({4, 2})}, {"extra", ones({1})}});

  Tiny strict_target;
  Tensor before = strict_target.parameter("scale").clone();
  std::string msg = test::error_text([&] { nn::load_module(strict_target, path); });
  CAPTURE(msg);
  CHECK(msg.find("load_module(" + path + "): ") == 0);
  CHECK(msg.find("missing keys: steps head.bias") != std::string::npos);
  CHECK(msg.find("unexpected keys: extra") != std::string::npos);
  CHECK(msg.find("head.weight: file (4, 2) vs module (3, 2)") != std::string::npos);
  CHECK(equal(strict_target.parameter("scale"), before));  // nothing loaded

  Tiny lenient;
  nn::LoadReport report = nn::load_module(lenient, path, /*strict=*/false);
  CHECK(report.missing == std::vector<std::string>{"steps", "head.bias"});
  CHECK(report.unexpected == std::vector<std::string>{"extra"});
  REQUIRE(report.shape_mismatch.size() == 1);
  CHECK(report.shape_mismatch[0].find("head.weight") == 0);
  CHECK(equal(lenient.parameter("scale"), full({3}, 2.0)));  // the matching key was loaded
}

TEST_CASE("safetensors: load_module reads the weights straight into the module (no second copy of them)") {
  TempDir dir;
  const std::string path = dir.file("big.safetensors");
  manual_seed(4);
  nn::Linear source(512, 1024);  // 2 MB of weights
  nn::save_module(source, path);
  nn::Linear target(512, 1024);
  const void* weight_memory = target.parameter("weight").data_ptr();
  const uint32_t version = target.parameter("weight").version();
  Allocator& a = cpu_allocator();
  const size_t before = a.stats().allocated;
  a.reset_peak();
  CHECK(nn::load_module(target, path).ok());
  CHECK(a.stats().peak - before < 64 * 1024);  // bias-sized temporaries at most, not 2 MB
  CHECK(target.parameter("weight").data_ptr() == weight_memory);
  CHECK(target.parameter("weight").version() > version);  // autograd sees the write
  CHECK(equal(target.parameter("weight"), source.parameter("weight")));
  CHECK(equal(target.parameter("bias"), source.parameter("bias")));
  // A dtype the module does not have is converted by a copy, as before.
  nn::Linear f64(512, 1024);
  f64.to(DType::F64);
  CHECK(nn::load_module(f64, path).ok());
  CHECK(equal(f64.parameter("weight"), source.parameter("weight").to(DType::F64)));
}
