// tests/test_torch_file.cpp: torch.save files read without Python (interop/torch_file.h):
// the committed files of tests/data/torch_file (made by tests/make_torch_file_reference.py)
// against their tensors saved as safetensors, bit for bit: every dtype, views on one storage,
// containers in protocols 2, 4 and 5, an optimizer state_dict, a big-endian archive, a small
// CNN's logits; refusals (int16, the legacy format); hostile pickles and zips built here byte
// by byte; and ResNet-18 through torch.save against the safetensors path when a Python with
// torch is present. Not here: the fuzz target (tests/fuzz/fuzz_torch_file.cpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/random.h"
#include "engine/serialize.h"
#include "interop/torch_file.h"
#include "nn/layers.h"
#include "nn/models/vision.h"
#include "nn/serialize_module.h"
#include "tests/paths.h"

using namespace brisk;
using interop::TorchValue;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return (test::data_dir() / "torch_file" / name).string(); }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Same dtype, shape and bytes (so -0.0, NaN payloads and every bit of BF16 count).
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !(a.sizes() == b.sizes())) return false;
  if (a.numel() == 0) return true;  // no bytes (and memcmp takes no null pointers)
  const Tensor ca = a.contiguous();
  const Tensor cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(a.numel()) * a.element_size()) == 0;
}

// The tensors of <name>.pth (flattened) equal those of <name>.expected.safetensors: names in
// order, dtypes, shapes, bytes.
void check_against_expected(const NamedTensors& got, const std::string& name) {
  const SafetensorsFile want = load_safetensors(fixture(name + ".expected.safetensors"));
  REQUIRE(got.size() == want.tensors.size());
  std::map<std::string, Tensor> by_name(want.tensors.begin(), want.tensors.end());
  for (const auto& entry : got) {
    const std::string& key = entry.first;
    CAPTURE(key);
    REQUIRE(by_name.count(key) == 1);
    CHECK(same_bytes(entry.second, by_name.at(key)));
  }
}

// ---- a stored zip archive, written by hand (so a test can lie in it)

uint32_t crc32(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put(std::string& out, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(char((v >> (8 * k)) & 0xff));
}

struct ZipEntry {
  std::string name;
  std::string bytes;
  uint64_t claimed_size = UINT64_MAX;  // the size the headers state (default: the true one)
};

std::string make_zip(const std::vector<ZipEntry>& entries) {
  std::string out;
  std::string central;
  for (const ZipEntry& e : entries) {
    const uint64_t size = e.claimed_size == UINT64_MAX ? e.bytes.size() : e.claimed_size;
    const uint32_t crc = crc32(e.bytes);
    const uint64_t offset = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0x21, 2);
    put(out, crc, 4), put(out, size, 4), put(out, size, 4);
    put(out, e.name.size(), 2), put(out, 0, 2);
    out += e.name + e.bytes;
    put(central, 0x02014b50, 4);
    put(central, 20, 2), put(central, 20, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0x21, 2), put(central, crc, 4), put(central, size, 4), put(central, size, 4);
    put(central, e.name.size(), 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 2), put(central, 0, 4), put(central, offset, 4);
    central += e.name;
  }
  const uint64_t cd_offset = out.size();
  out += central;
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2);
  put(out, entries.size(), 2), put(out, entries.size(), 2);
  put(out, central.size(), 4), put(out, cd_offset, 4), put(out, 0, 2);
  return out;
}

// ---- pickle programs, written by hand

std::string str(const std::string& s) {  // BINUNICODE
  std::string out = "X";
  put(out, s.size(), 4);
  return out + s;
}
std::string i64(int64_t v) {  // LONG1 of 8 bytes: any int64
  std::string out = "\x8a\x08";
  put(out, uint64_t(v), 8);
  return out;
}
std::string ints(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (int64_t x : v) out += i64(x);
  return out + "t";
}

// torch._utils._rebuild_tensor_v2(('storage', torch.<type>, key, 'cpu', numel), offset, sizes,
// strides, False, OrderedDict()), as torch.save writes it.
std::string tensor_program(const std::string& key, int64_t numel, const std::vector<int64_t>& sizes,
                           const std::vector<int64_t>& strides, int64_t offset = 0,
                           const std::string& type = "FloatStorage") {
  return std::string("\x80\x02") + "ctorch._utils\n_rebuild_tensor_v2\n(" + "(" + str("storage") + "ctorch\n" + type +
         "\n" + str(key) + str("cpu") + i64(numel) + "tQ" + i64(offset) + ints(sizes) + ints(strides) + "\x89" +
         "ccollections\nOrderedDict\n)R" + "tR.";
}

// A torch.save-shaped archive: archive/data.pkl, archive/byteorder, archive/data/<key>...
std::string archive(const std::string& program, const std::vector<ZipEntry>& records = {}) {
  std::vector<ZipEntry> entries = {{"archive/data.pkl", program}, {"archive/byteorder", "little"}};
  for (const ZipEntry& r : records) entries.push_back({"archive/data/" + r.name, r.bytes, r.claimed_size});
  return make_zip(entries);
}

// The error load_torch_bytes gives, or "" when it loads.
std::string error_of(const std::string& bytes) {
  try {
    interop::load_torch_bytes(bytes, "hostile.pth");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("torch_file: every dtype brisk has loads bit for bit, parameters as plain tensors") {
  const NamedTensors sd = load_torch_state_dict(fixture("dtypes.pth"));
  check_against_expected(sd, "dtypes");
  std::vector<std::string> names;
  for (const auto& entry : sd) names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"f32", "f64", "f16", "bf16", "i64", "i32", "i8", "u8", "bool", "scalar",
                                          "empty", "param"});
  CHECK(sd[4].second.to_vector<int64_t>() == std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1,
                                                                  int64_t(1) << 40,
                                                                  std::numeric_limits<int64_t>::max()});
  CHECK(sd[9].second.dim() == 0);
  CHECK(sd[10].second.sizes() == Shape{0, 3});
  CHECK_FALSE(sd[11].second.requires_grad());
}

TEST_CASE("torch_file: views keep one shared storage with the saved offsets and strides") {
  const TorchValue v = interop::load_torch(fixture("views.pth"));
  check_against_expected(interop::flatten_tensors(v), "views");
  const Tensor& base = v["base"].as_tensor();
  const Tensor& slice = v["slice"].as_tensor();
  const Tensor& transposed = v["transposed"].as_tensor();
  const Tensor& columns = v["columns"].as_tensor();
  const Tensor& expanded = v["expanded"].as_tensor();
  CHECK(slice.storage() == base.storage());
  CHECK(transposed.storage() == base.storage());
  CHECK(slice.offset() == 5);
  CHECK(transposed.strides() == Shape{1, 6});
  CHECK_FALSE(transposed.is_contiguous());
  CHECK(columns.offset() == 6);
  CHECK(columns.strides() == Shape{6, 2});
  CHECK(expanded.strides() == Shape{1, 0});
  CHECK(v["other"].as_tensor().dtype() == DType::I64);
  // A write through one view shows in the others, as in torch.load.
  Tensor(base).fill_(1.0);
  CHECK(transposed.to_vector<float>() == std::vector<float>(24, 1.0f));
}

TEST_CASE("torch_file: containers of every kind, in pickle protocols 2, 4 and 5") {
  for (const char* name : {"containers", "containers_p4", "containers_p5"}) {
    const std::string file = name;
    CAPTURE(file);
    const TorchValue v = interop::load_torch(fixture(file + ".pth"));
    REQUIRE(v.is_dict());
    std::vector<int64_t> got;
    for (const TorchValue& x : v["ints"].items()) got.push_back(x.as_int());
    CHECK(got == std::vector<int64_t>{0, 1, -1, 255, 256, 65535, 65536, -(int64_t(1) << 31), int64_t(1) << 31,
                                      int64_t(1) << 40, std::numeric_limits<int64_t>::min(),
                                      std::numeric_limits<int64_t>::max()});
    CHECK(v["ints"].kind() == TorchValue::Kind::List);
    const TorchValue& floats = v["floats"];
    CHECK(floats.kind() == TorchValue::Kind::Tuple);
    CHECK(floats[0].as_double() == 0.5);
    CHECK(floats[1].as_double() == -1e300);
    CHECK(floats[2].as_double() == std::numeric_limits<double>::infinity());
    CHECK(v["text"].as_string() == "h\xc3\xa9llo \xe2\x9c\x93");
    CHECK(v["none"].is_none());
    CHECK(v["flags"][0].as_bool());
    CHECK_FALSE(v["flags"][1].as_bool());
    const TorchValue& nested = v["nested"];
    CHECK(nested.at(3).as_string() == "int key");
    CHECK(nested["empty"].is_dict());
    CHECK(nested["empty"].size() == 0);
    CHECK(nested["list"].size() == 0);
    CHECK(nested["deep"]["t"].as_tensor().to_vector<float>() == std::vector<float>{1, 2});
    CHECK(v["tuple"][1][1][0].as_double() == 2.5);
    CHECK(v["size"].kind() == TorchValue::Kind::Tuple);
    CHECK(v["size"][1].as_int() == 3);
    if (file != "containers")
      CHECK(v["raw"].as_string() == std::string("\x00\x01"
                                                "binary\xff",
                                                9));
    if (file != "containers") CHECK(v["raw"].kind() == TorchValue::Kind::Bytes);
    check_against_expected(interop::flatten_tensors(v), file);
    // Accessors name what they expected and what they met.
    CHECK_THROWS_WITH_AS(v["text"].as_int(), doctest::Contains("expected an int, got a str"), Error);
    CHECK_THROWS_WITH_AS(v["nope"], doctest::Contains("no key 'nope'"), Error);
    CHECK(v.find("nope") == nullptr);
  }
}

TEST_CASE("torch_file: a checkpoint with an Adam state_dict (int keys, param_groups) and a model") {
  const TorchValue v = interop::load_torch(fixture("checkpoint.pth"));
  check_against_expected(interop::flatten_tensors(v), "checkpoint");
  CHECK(v["epoch"].as_int() == 3);
  const TorchValue& opt = v["optimizer"];
  CHECK(opt["state"].size() == 6);  // conv, bn and linear weights and biases
  CHECK(opt["state"].at(0)["exp_avg"].as_tensor().sizes() == Shape{4, 1, 3, 3});
  CHECK(opt["state"].at(5)["step"].as_tensor().item<float>() == 1.0f);
  const TorchValue& group = opt["param_groups"][0];
  CHECK(group["lr"].as_double() == 0.01);
  CHECK(group["betas"][1].as_double() == 0.999);
  CHECK(group["amsgrad"].as_bool() == false);
  CHECK(group["params"].size() == 6);
  CHECK(group["params"][5].as_int() == 5);
  // The names of a nested dict, and a sub-dict by key.
  const NamedTensors all = load_torch_state_dict(fixture("checkpoint.pth"));
  CHECK(all[0].first == "model.0.weight");
  CHECK(all.back().first == "optimizer.state.5.exp_avg_sq");
  const NamedTensors model = load_torch_state_dict(fixture("checkpoint.pth"), "model");
  CHECK(model.size() == 9);
  CHECK(model[0].first == "0.weight");
  CHECK(model[6].first == "1.num_batches_tracked");
  CHECK(model[6].second.item<int64_t>() == 1);
  CHECK_THROWS_WITH_AS(load_torch_state_dict(fixture("checkpoint.pth"), "modle"),
                       doctest::Contains("no key 'modle' in the top-level dict (keys: 'model', 'optimizer', 'epoch')"),
                       Error);
  CHECK_THROWS_WITH_AS(load_torch_state_dict(fixture("checkpoint.pth"), "epoch"),
                       doctest::Contains("'epoch' holds an int, not a dict"), Error);
}

TEST_CASE("torch_file: a small CNN saved by PyTorch loads into brisk and gives PyTorch's logits") {
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 4, 3, nn::ConvOptions{.padding = {1, 1}}),
                       std::make_shared<nn::BatchNorm2d>(4),
                       std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::MaxPool2d>(2),
                       std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::Linear>(64, 3)};
  const nn::LoadReport report = model.load_state_dict(load_torch_state_dict(fixture("checkpoint.pth"), "model"));
  CHECK(report.ok());
  model.eval();
  const SafetensorsFile io = load_safetensors(fixture("small_cnn_io.safetensors"));
  NoGradGuard no_grad;
  const Tensor logits = model(io.tensors[0].second);
  const Tensor want = io.tensors[1].second;
  CHECK(io.tensors[1].first == "logits");
  CHECK(allclose(logits, want, 1e-5, 1e-6));
}

TEST_CASE("torch_file: a big-endian archive is byte-swapped") {
  check_against_expected(load_torch_state_dict(fixture("big_endian.pth")), "big_endian");
  const NamedTensors sd = load_torch_state_dict(fixture("big_endian.pth"));
  CHECK(sd[0].second.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK(sd[1].second.to_vector<int64_t>() == std::vector<int64_t>{1, -2, int64_t(1) << 40});
}

TEST_CASE("torch_file: what brisk does not read is refused with a message that says what it is") {
  CHECK_THROWS_WITH_AS(interop::load_torch(fixture("int16.pth")),
                       doctest::Contains("storage type 'torch.ShortStorage' has no brisk dtype"), Error);
  CHECK_THROWS_WITH_AS(interop::load_torch(fixture("module.pth")),
                       doctest::Contains("global 'torch.nn.modules.linear.Linear' is not allowed (only the globals "
                                         "torch.save writes for tensors and containers): this file holds a whole "
                                         "nn.Module; save its state_dict() instead"),
                       Error);
  CHECK_THROWS_WITH_AS(interop::load_torch(fixture("legacy.pth")), doctest::Contains("legacy torch.save format"),
                       Error);
  CHECK_THROWS_WITH_AS(interop::load_torch(fixture("dtypes.expected.safetensors")),
                       doctest::Contains("not a zip archive"), Error);
  CHECK_THROWS_WITH_AS(interop::load_torch(fixture("no_such_file.pth")), doctest::Contains("no_such_file.pth"), Error);
  CHECK_THROWS_WITH_AS(interop::load_torch_bytes(make_zip({{"model/constants.pkl", "x"}, {"model/code/a.py", ""}})),
                       doctest::Contains("TorchScript archive"), Error);
  CHECK_THROWS_WITH_AS(interop::load_torch_bytes(make_zip({{"a.txt", "x"}})), doctest::Contains("no <folder>/data.pkl"),
                       Error);
}

TEST_CASE("torch_file: a dict key set twice keeps its first place and its last value, as in Python") {
  const std::string program = std::string("\x80\x02}(") + str("a") + "K\x01" + str("b") + "K\x02" + str("a") + "K\x03" +
                              "K\x07" + "K\x04" + "u.";
  const TorchValue v = interop::load_torch_bytes(archive(program));
  REQUIRE(v.size() == 3);
  CHECK(v.entries()[0].first.as_string() == "a");
  CHECK(v["a"].as_int() == 3);
  CHECK(v["b"].as_int() == 2);
  CHECK(v.at(7).as_int() == 4);
}

TEST_CASE("torch_file: a lone tensor at the top loads; as a state_dict it is refused") {
  const std::string bytes = archive(tensor_program("0", 4, {2, 2}, {1, 2}, 0), {{"0", std::string(16, '\0')}});
  const TorchValue v = interop::load_torch_bytes(bytes);
  REQUIRE(v.is_tensor());
  CHECK(v.as_tensor().strides() == Shape{1, 2});
  const fs::path path = fs::temp_directory_path() / ("brisk-torch-file-lone-" + std::to_string(::getpid()) + ".pth");
  std::ofstream(path, std::ios::binary) << bytes;
  CHECK(interop::load_torch(path.string()).is_tensor());
  CHECK_THROWS_WITH_AS(load_torch_state_dict(path.string()), doctest::Contains("holds a Tensor, not a dict"), Error);
  fs::remove(path);
}

TEST_CASE("torch_file: hostile pickles are refused by name, in bounded time and memory") {
  const std::string p2 = "\x80\x02";
  struct Case {
    const char* what;
    std::string program;
    const char* message;
  };
  // A list nested 100000 deep, built without recursion: ] q0 then (] and APPEND into the last).
  std::string deep = p2 + "]";
  for (int i = 0; i < 100000; ++i) deep += "]";
  for (int i = 0; i < 100000; ++i) deep += "a";
  deep += ".";
  // Each list holds the one before it twice: 2^60 elements if expanded.
  std::string laughs = p2 + std::string("]q\x00", 3);
  for (int i = 1; i <= 60; ++i)
    laughs += "]h" + std::string(1, char(i - 1)) + "ah" + std::string(1, char(i - 1)) + "aq" + std::string(1, char(i));
  laughs += ".";
  const std::vector<Case> cases = {
      {"os.system", p2 + "cos\nsystem\n" + str("ls") + "\x85R.", "global 'os.system' is not allowed"},
      {"STACK_GLOBAL builtins.eval", std::string("\x80\x04") + "\x8c\x08" + "builtins" + "\x8c\x04" + "eval" + "\x93.",
       "global 'builtins.eval' is not allowed"},
      {"torch.load itself", p2 + "ctorch\nload\n.", "global 'torch.load' is not allowed"},
      {"unknown opcode", p2 + "\xff", "unknown opcode 0xff"},
      {"INST", p2 + "ios\nsystem\n.", "opcode INST is not one torch.save writes"},
      {"protocol 6", "\x80\x06N.", "pickle protocol 6"},
      {"no STOP", p2 + "N", "truncated"},
      {"STOP on an empty stack", p2 + ".", "empty stack"},
      {"a 4 GiB string", p2 + "X\xff\xff\xff\xff" + "abc", "needs 4294967295 bytes"},
      {"a 2^63-byte string", p2 + "\x8d" + std::string("\x00\x00\x00\x00\x00\x00\x00\x80", 8), "bytes, "},
      {"an int of 2^31 bytes", p2 + "\x8b\xff\xff\xff\x7f", "truncated"},
      {"a 9-byte int", p2 + "\x8a\x09" + std::string(9, '\x01') + ".", "wider than 64 bits"},
      {"a memo index never stored", p2 + "j\xff\xff\xff\xff.", "memo entry 4294967295 was never stored"},
      {"pop past a MARK", p2 + "N(0.", "pops an empty stack"},
      {"SETITEMS on a list", p2 + "](NNu.", "SETITEM on a list"},
      {"a float dict key", p2 + "}G" + std::string(8, '\0') + "Ns.", "a dict key of type float"},
      {"calling a str", p2 + str("f") + ")R.", "REDUCE calls a str"},
      {"BUILD on a list", p2 + "]}b.", "BUILD on a list"},
      {"a persistent id that is no storage", p2 + str("x") + "Q.", "persistent id that is a str"},
      {"deep nesting", deep, "nested deeper than 200"},
      {"a list that holds itself", p2 + std::string("]q\x00h\x00", 5) + "a.", "nested deeper than 200"},
      {"shared lists expanded 2^60 times", laughs, "past its budget"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string message = error_of(archive(c.program));
    CHECK_MESSAGE(message.find(c.message) != std::string::npos, message);
    CHECK(message.find("hostile.pth: archive/data.pkl") != std::string::npos);
  }
}

TEST_CASE("torch_file: storages and tensors whose sizes disagree allocate nothing and are refused") {
  const std::string floats(16, '\0');  // 4 F32 elements
  struct Case {
    const char* what;
    std::string program;
    std::vector<ZipEntry> records;
    const char* message;
  };
  const int64_t big = int64_t(1) << 31;
  const std::vector<Case> cases = {
      {"fine", tensor_program("0", 4, {2, 2}, {2, 1}), {{"0", floats}}, ""},
      {"a storage larger than its record",
       tensor_program("0", 1000, {4}, {1}),
       {{"0", floats}},
       "data.pkl claims 1000 elements of F32 but the record holds 16 bytes"},
      {"a storage of 2^62 elements",
       tensor_program("0", int64_t(1) << 62, {4}, {1}),
       {{"0", floats}},
       "claims 4611686018427387904 elements"},
      {"a 2^62-element tensor",
       tensor_program("0", 4, {big, big}, {1, 1}),
       {{"0", floats}},
       "reaches past its storage of 4 elements"},
      {"strides that overflow",
       tensor_program("0", 4, {3, 3}, {int64_t(1) << 62, int64_t(1) << 62}),
       {{"0", floats}},
       "reaches past its storage"},
      {"a 2^62-element view of one element (stride 0)",
       tensor_program("0", 4, {big, big}, {0, 0}),
       {{"0", floats}},
       "has 4611686018427387904 elements over a storage of 4"},
      {"an empty tensor whose dense strides overflow",
       tensor_program("0", 4, {0, big, big, big}, {1, 1, 1, 1}),
       {{"0", floats}},
       "reaches past its storage"},
      {"an offset past the end", tensor_program("0", 4, {2}, {1}, 3), {{"0", floats}}, "reaches past its storage"},
      {"a negative stride", tensor_program("0", 4, {2}, {-1}, 3), {{"0", floats}}, "stride holds an int < 0"},
      {"9 dims",
       tensor_program("0", 4, std::vector<int64_t>(9, 1), std::vector<int64_t>(9, 1)),
       {{"0", floats}},
       "a tensor of 9 dims"},
      {"a missing record", tensor_program("7", 4, {4}, {1}), {{"0", floats}}, "no record archive/data/7"},
      {"a record claiming 4 GiB",
       tensor_program("0", int64_t(1) << 30, {4}, {1}),
       {{"0", floats, 0xfffffffc}},
       "claims 4294967292 bytes, more than the"},
      {"a storage type brisk lacks",
       tensor_program("0", 4, {4}, {1}, 0, "ComplexFloatStorage"),
       {{"0", floats}},
       "'torch.ComplexFloatStorage' has no brisk dtype"},
      {"a storage class that is no storage",
       tensor_program("0", 4, {4}, {1}, 0, "Tensor"),
       {{"0", floats}},
       "global 'torch.Tensor' is not allowed"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string message = error_of(archive(c.program, c.records));
    if (what == "fine") {
      CHECK(message.empty());
    } else {
      CHECK_MESSAGE(!message.empty(), what);
      CHECK_MESSAGE(message.find(c.message) != std::string::npos, message);
    }
  }
}

TEST_CASE("torch_file: truncated and corrupt archives give errors, never crashes") {
  const std::string good = read_bytes(fixture("dtypes.pth"));
  REQUIRE_FALSE(good.empty());
  CHECK(error_of(good).empty());
  int refused = 0;
  for (size_t n = 0; n < good.size(); n += 97) refused += !error_of(good.substr(0, n)).empty();
  CHECK(refused == int((good.size() + 96) / 97));
  // A flipped byte inside a record fails its CRC (or the pickle); never a crash.
  for (size_t at = 0; at < good.size(); at += 61) {
    std::string bad = good;
    bad[at] = char(bad[at] ^ 0x5a);
    (void)error_of(bad);
  }
  std::string bad = good;
  const size_t f32 = good.find(std::string("\x00\x00\xc0\xbf", 4));  // -1.5f
  REQUIRE(f32 != std::string::npos);
  bad[f32] = 1;
  CHECK(error_of(bad).find("CRC") != std::string::npos);
}

TEST_CASE("torch_file: ResNet-18 through torch.save gives the safetensors path's logits bit for bit") {
  std::string python;
  if (const char* env = std::getenv("TORCH_PYTHON")) {
    python = env;
  } else {
    for (const char* py : {"venv/bin/python", "../venv/bin/python", "/work/venv/bin/python", "python3"}) {
      if (std::system((std::string(py) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) {
        python = py;
        break;
      }
    }
  }
  if (python.empty()) {
    MESSAGE("skipped: no Python with torch (set TORCH_PYTHON; Debian's python3-torch will do)");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("brisk-torch-file-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string st = (dir / "resnet18.safetensors").string();
  const std::string pth = (dir / "resnet18.pth").string();
  manual_seed(0);
  auto source = nn::models::resnet18();
  {
    NoGradGuard no_grad;  // random statistics too, so a mixed-up buffer shows
    for (auto& entry : source->state_dict()) {
      Tensor t = entry.second;
      if (is_floating(t.dtype())) t.copy_(rand(t.sizes()) * 0.5 + 0.75);
    }
  }
  nn::save_module(*source, st);
  const std::string script = (dir / "save.py").string();
  // The safetensors file is read by hand (header JSON, then the bytes), so any torch will do:
  // Debian's 1.13 as well as a venv's 2.x.
  std::ofstream(script) << "import json, struct, sys, torch\n"
                           "from collections import OrderedDict\n"
                           "raw = open(sys.argv[1], 'rb').read()\n"
                           "n = struct.unpack('<Q', raw[:8])[0]\n"
                           "types = {'F32': torch.float32, 'F64': torch.float64, 'I64': torch.int64}\n"
                           "sd = OrderedDict()\n"
                           "for k, v in json.loads(raw[8:8 + n]).items():\n"
                           "    if k == '__metadata__':\n"
                           "        continue\n"
                           "    a, b = v['data_offsets']\n"
                           "    t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=types[v['dtype']])\n"
                           "    sd[k] = t.reshape(v['shape']).clone()\n"
                           "torch.save(sd, sys.argv[2])\n";
  const std::string command = python + " " + script + " " + st + " " + pth;
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, command);

  auto via_safetensors = nn::models::resnet18();
  nn::load_module(*via_safetensors, st);
  auto via_torch = nn::models::resnet18();
  const NamedTensors loaded = load_torch_state_dict(pth);
  CHECK(via_torch->load_state_dict(loaded).ok());
  const NamedTensors a = via_safetensors->state_dict();
  const NamedTensors b = via_torch->state_dict();
  REQUIRE(a.size() == b.size());
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += same_bytes(a[i].second, b[i].second);
  CHECK(same == int(a.size()));
  via_safetensors->eval();
  via_torch->eval();
  NoGradGuard no_grad;
  const Tensor x = randn({2, 3, 64, 64});
  const Tensor la = (*via_safetensors)(x);
  const Tensor lb = (*via_torch)(x);
  CHECK(same_bytes(la, lb));
  MESSAGE("ResNet-18: ", same, " of ", a.size(), " state tensors and the (2, 1000) logits equal bit for bit (",
          fs::file_size(pth) / 1000000, " MB .pth)");
  fs::remove_all(dir);
}
