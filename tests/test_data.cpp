// tests/test_data.cpp: datasets, readers (and their errors on bad files), samplers, the fused
// transforms, and the DataLoader: order and content identical for any number of workers,
// worker errors re-thrown with the sample, timeouts, and resuming mid-epoch.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "engine/allocator.h"
#include "test_util.h"
#include "tests/paths.h"

using namespace brisk;
using namespace brisk::data;
namespace fs = std::filesystem;

namespace {

// N samples: input U8 (1, 4, 4) filled with i % 256, target i.
std::shared_ptr<TensorDataset> toy(int64_t n) {
  std::vector<double> x, y;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 16; ++k) x.push_back(double((i * 7 + k) % 256));
    y.push_back(double(i));
  }
  return std::make_shared<TensorDataset>(from_vector(x, {n, 1, 4, 4}, DType::U8), from_vector(y, {n}, DType::I64));
}

std::vector<std::vector<double>> drain(DataLoader& loader) {
  std::vector<std::vector<double>> out;
  for (Batch& b : loader) {
    std::vector<double> v = b.input.to_vector<double>();
    std::vector<double> t = b.target.to_vector<double>();
    v.insert(v.end(), t.begin(), t.end());
    out.push_back(v);
  }
  return out;
}

fs::path temp_dir() {
  fs::path p = fs::temp_directory_path() / ("brisk_data_test_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.string().c_str(), "wb");
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// An IDX header of U8 data with these dims (big-endian).
std::vector<uint8_t> idx_header(std::initializer_list<uint32_t> dims) {
  std::vector<uint8_t> h{0, 0, 8, uint8_t(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) h.push_back(uint8_t(d >> shift));
  }
  return h;
}

// Fails on one sample; sleeps on another when asked.
class Faulty : public Dataset {
 public:
  Faulty(int64_t bad, int64_t slow) : bad_(bad), slow_(slow) {}
  int64_t size() const override { return 20; }
  Example get(int64_t i) const override {
    if (i == bad_) throw Error("sample is broken");
    if (i == slow_) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return {full({2}, double(i)), full({}, double(i), DType::I64)};
  }

 private:
  int64_t bad_, slow_;
};

}  // namespace

TEST_CASE("data: datasets, subsets, concatenation and random splits") {
  auto ds = toy(10);
  CHECK(ds->size() == 10);
  CHECK(ds->get(3).target.item<int64_t>() == 3);
  CHECK_THROWS_WITH_AS(ds->get(10), doctest::Contains("index 10 is out of range"), Error);
  auto parts = random_split(ds, {7, 3}, 42);
  CHECK(parts[0]->size() == 7);
  std::set<int64_t> all;
  for (auto& p : parts) all.insert(p->indices().begin(), p->indices().end());
  CHECK(all.size() == 10);
  CHECK(random_split(ds, {7, 3}, 42)[1]->indices() == parts[1]->indices());
  CHECK_THROWS_AS(random_split(ds, {5, 3}, 1), Error);
  ConcatDataset cat({ds, parts[1]});
  CHECK(cat.size() == 13);
  CHECK(cat.get(10).target.item<int64_t>() == parts[1]->get(0).target.item<int64_t>());
}

TEST_CASE("data: samplers are reproducible per (seed, epoch)") {
  RandomSampler r(100, 7);
  CHECK(r.indices(0) == r.indices(0));
  CHECK(r.indices(0) != r.indices(1));
  std::vector<int64_t> sorted = r.indices(3);
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == SequentialSampler(100).indices(0));
  WeightedRandomSampler w({0, 1, 0, 3}, 1000, true, 1);
  std::vector<int64_t> draws = w.indices(0);
  int64_t threes = std::count(draws.begin(), draws.end(), 3);
  CHECK(std::count(draws.begin(), draws.end(), 0) == 0);
  CHECK(threes > 680);
  CHECK(threes < 820);
  CHECK(make_batches({1, 2, 3, 4, 5}, 2, false).size() == 3);
  CHECK(make_batches({1, 2, 3, 4, 5}, 2, true).size() == 2);
}

TEST_CASE("data: batches are identical for 0, 1 and 3 workers, with shuffling and augmentation") {
  auto ds = toy(37);
  auto run = [&](int workers) {
    LoaderOptions o;
    o.batch_size = 8;
    o.shuffle = true;
    o.seed = 5;
    o.num_workers = workers;
    o.transform = Compose(
        {random_crop(4, 4, 1), random_horizontal_flip(), to_tensor(), normalize({0.5}, {0.25}), random_erasing(0.5)});
    DataLoader loader(ds, o);
    auto e0 = drain(loader);
    auto e1 = drain(loader);
    return std::make_pair(e0, e1);
  };
  auto a = run(0), b = run(1), c = run(3);
  CHECK(a.first.size() == 5);
  CHECK(a == b);
  CHECK(a == c);
  CHECK(a.first != a.second);  // a new epoch: new order and augmentation
}

TEST_CASE("data: a worker's exception is re-thrown in the caller with the sample") {
  for (int workers : {0, 2}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    DataLoader loader(std::make_shared<Faulty>(9, -1), o);
    REQUIRE(loader.next().has_value());
    REQUIRE(loader.next().has_value());
    if (workers == 0) {
      CHECK_THROWS_WITH_AS(loader.next(), doctest::Contains("sample is broken"), Error);
    } else {
      CHECK_THROWS_WITH_AS(loader.next(), doctest::Contains("samples 8..11"), Error);
    }
  }
}

TEST_CASE("data: a stuck worker becomes a timeout error, not a hang") {
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 1;
  o.timeout_s = 0.2;
  DataLoader loader(std::make_shared<Faulty>(-1, 1), o);
  CHECK_THROWS_WITH_AS(loader.next(), doctest::Contains("timed out"), Error);
}

TEST_CASE("data: a loader resumed from its state continues with the same batches") {
  auto ds = toy(40);
  LoaderOptions o;
  o.batch_size = 6;
  o.shuffle = true;
  o.seed = 11;
  o.num_workers = 2;
  o.transform = Compose({random_crop(4, 4, 2), to_tensor()});
  DataLoader a(ds, o);
  std::vector<std::vector<double>> full_run;
  for (int e = 0; e < 2; ++e) {
    auto ep = drain(a);
    full_run.insert(full_run.end(), ep.begin(), ep.end());
  }
  DataLoader b(ds, o);
  for (int k = 0; k < 3; ++k) b.next();  // three batches into epoch 0...
  LoaderState saved = b.state();
  CHECK(saved.epoch == 0);
  CHECK(saved.batch == 3);
  DataLoader c(ds, o);  // ...a new process resumes from the saved state
  c.load_state(saved);
  std::vector<std::vector<double>> resumed;
  for (int e = 0; e < 2; ++e) {
    auto ep = drain(c);
    resumed.insert(resumed.end(), ep.begin(), ep.end());
  }
  CHECK(resumed == std::vector<std::vector<double>>(full_run.begin() + 3, full_run.end()));
}

TEST_CASE("data: the fused transform equals the step-by-step computation") {
  Tensor img = from_vector({0, 10, 20, 30, 40, 50, 60, 70, 80}, {1, 3, 3}, DType::U8);
  Compose plain({to_tensor(), normalize({0.5}, {0.5})});
  std::vector<float> out(9);
  plain.apply(img, out.data(), 0, 0, 0);
  for (int i = 0; i < 9; ++i) CHECK(out[size_t(i)] == doctest::Approx((i * 10 / 255.0 - 0.5) / 0.5));
  Compose flip({random_horizontal_flip(1.0), to_tensor()});
  flip.apply(img, out.data(), 0, 0, 0);
  CHECK(out[0] == doctest::Approx(20 / 255.0));
  Compose crop({center_crop(1, 1), to_tensor()});
  CHECK(crop.output_shape(img.sizes()) == Shape{1, 1, 1});
  crop.apply(img, out.data(), 0, 0, 0);
  CHECK(out[0] == doctest::Approx(40 / 255.0));
  CHECK_THROWS_AS(Compose({to_tensor(), random_crop(2, 2)}), Error);  // out of fusable order
}

TEST_CASE("data: random crop with padding and flip read each output from one consistent source pixel") {
  // Distinct input values (index + 1) so each output names the pixel it came from: over many
  // samples, every output is the pixel at one (row, column) offset, flipped or not, per sample,
  // where that pixel exists, and the padding elsewhere; U8 input gives the same picture scaled
  // by 1 / 255. Crops narrower and wider than the input (padding 3 on a 7-wide plane).
  const int64_t C = 2, H = 5, W = 7;
  std::vector<double> vals(size_t(C * H * W));
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = double(i + 1);
  const Tensor f32 = from_vector(vals, {C, H, W}, DType::F32), u8 = from_vector(vals, {C, H, W}, DType::U8);
  for (const auto& geometry : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 2}, {3, 4, 3}, {9, 11, 3}}) {
    const int64_t oh = std::get<0>(geometry), ow = std::get<1>(geometry), pad = std::get<2>(geometry);
    Compose t({random_crop(oh, ow, pad), random_horizontal_flip(0.5), to_tensor()});
    int flips = 0, unpinned = 0;
    for (uint64_t index = 0; index < 40; ++index) {
      std::vector<float> out(size_t(C * oh * ow)), out8(out.size());
      t.apply(f32, out.data(), 7, 1, index);
      t.apply(u8, out8.data(), 7, 1, index);
      // the sample's offsets from the first two horizontally adjacent real pixels
      int64_t dy = 0, dx = 0;
      int flip = -1;
      for (int64_t y = 0; y < oh && flip < 0; ++y) {
        for (int64_t x = 0; x + 1 < ow && flip < 0; ++x) {
          const float a = out[size_t(y * ow + x)], b = out[size_t(y * ow + x + 1)];
          if (a == 0 || b == 0) continue;
          const int64_t k = int64_t(a) - 1;
          flip = int64_t(b) - 1 == k + 1 ? 0 : 1;
          dy = k / W - y;
          dx = flip ? k % W + x : k % W - x;
        }
      }
      if (flip < 0) {  // the crop met at most one input column (all padding, or one column): nothing to pin
        ++unpinned;
        continue;
      }
      flips += flip;
      int64_t wrong = 0;
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t y = 0; y < oh; ++y) {
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t sy = y + dy, sx = flip ? dx - x : x + dx, i = (c * oh + y) * ow + x;
            const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
            const float want = inside ? float((c * H + sy) * W + sx + 1) : 0.0f;
            wrong += out[size_t(i)] != want;
            wrong += out8[size_t(i)] != want * float(1.0 / 255.0);
          }
        }
      }
      CHECK_MESSAGE(wrong == 0, "crop ", oh, "x", ow, " padding ", pad, " index ", index);
    }
    CHECK(unpinned <= 25);  // at least 15 samples pinned
    CHECK(flips > 2);       // both directions were drawn
    CHECK(flips < 38 - unpinned);
  }
}

TEST_CASE("data: batch transforms on tensors (any device)") {
  Tensor b = ones({2, 3, 2, 2});
  Tensor n = normalize_batch(b, {0.5, 0.5, 0.5}, {0.5, 0.5, 0.5});
  CHECK(n.to_vector<float>() == std::vector<float>(24, 1.0f));
  Tensor x = from_vector({1, 2, 3, 4}, {1, 1, 1, 4});
  CHECK(random_horizontal_flip_batch(x, 1.0).to_vector<float>() == std::vector<float>{4, 3, 2, 1});
  CHECK(random_horizontal_flip_batch(x, 0.0).to_vector<float>() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("data: IDX reader rejects bad files with the file name and the problem") {
  fs::path dir = temp_dir();
  std::vector<uint8_t> good{0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
  write_gz(dir / "good.gz", good);
  CHECK(read_idx((dir / "good.gz").string()).to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9});
  std::vector<uint8_t> short_data = good;
  short_data.pop_back();
  write_gz(dir / "short.gz", short_data);
  CHECK_THROWS_WITH_AS(read_idx((dir / "short.gz").string()), doctest::Contains("short.gz: IDX data has 2 bytes"),
                       Error);
  write_gz(dir / "magic.gz", {1, 0, 8, 1, 0, 0, 0, 1, 5});
  CHECK_THROWS_WITH_AS(read_idx((dir / "magic.gz").string()), doctest::Contains("bad IDX magic"), Error);
  write_gz(dir / "type.gz", {0, 0, 0x0d, 1, 0, 0, 0, 1, 5, 5, 5, 5});
  CHECK_THROWS_WITH_AS(read_idx((dir / "type.gz").string()), doctest::Contains("not supported"), Error);
  {
    std::ofstream f(dir / "corrupt.gz", std::ios::binary);
    f << "\x1f\x8b\x08\x00garbage-not-deflate";
  }
  CHECK_THROWS_WITH_AS(read_idx((dir / "corrupt.gz").string()), doctest::Contains("corrupt.gz"), Error);
  CHECK_THROWS_WITH_AS(read_idx((dir / "missing.gz").string()), doctest::Contains("not found"), Error);
  CHECK_THROWS_WITH_AS(FashionMNIST(dir.string()), doctest::Contains("apt-get install"), Error);
  fs::remove_all(dir);
}

TEST_CASE("data: IDX dims whose product overflows or passes the limit are refused before any allocation") {
  fs::path dir = temp_dir();
  struct Case {
    std::initializer_list<uint32_t> dims;
    const char* expected;
  };
  const Case cases[] = {
      // 2^17 * 2^17 * 2^30 = 2^64: wrapped to 0 in 64 bits, which once passed as "0 bytes of data".
      {{1u << 17, 1u << 17, 1u << 30}, "IDX dims (131072, 131072, 1073741824) have more elements than fit in 64 bits"},
      {{0xffffffffu, 0xffffffffu, 2}, "have more elements than fit in 64 bits"},                    // ~2^65
      {{0, 0xffffffffu, 0xffffffffu, 0xffffffffu}, "have more elements than fit in 64 bits"},       // a zero dim too
      {{1u << 21, 1u << 21, 1u << 21}, "describe 9223372036854775808 bytes, more than the limit"},  // 2^63
      {{1u << 31, 1u << 31, 1}, "describe 4611686018427387904 bytes, more than the limit"},         // 2^62
      {{1u << 16, 1u << 16, 2}, "describe 8589934592 bytes, more than the limit of 4294967296"},
  };
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      const fs::path f = dir / (gz ? "big.gz" : "big.idx");
      std::vector<uint8_t> bytes = idx_header(c.dims);
      bytes.resize(bytes.size() + 4, 0);  // a few data bytes, nowhere near the promise
      gz ? write_gz(f, bytes) : write_file(f, bytes);
      std::string msg = test::error_text([&] { read_idx(f.string()); });
      CAPTURE(msg);
      CHECK(msg.find(f.string() + ": ") == 0);
      CHECK(msg.find(c.expected) != std::string::npos);
    }
  }
  // The same files as a Fashion-MNIST pair: refused, not "131072 samples" over no data.
  std::vector<uint8_t> images = idx_header({1u << 17, 1u << 17, 1u << 30});
  images.resize(images.size() + 4, 0);
  write_gz(dir / "train-images-idx3-ubyte.gz", images);
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_header({1u << 17}));
  CHECK_THROWS_WITH_AS(FashionMNIST(dir.string()), doctest::Contains("more elements than fit in 64 bits"), Error);
  fs::remove_all(dir);
}

TEST_CASE("data: IDX over gzip is inflated only as far as its header promises") {
  fs::path dir = temp_dir();
  // A header promising 16 bytes followed by 32 MiB of zeros (a ~32 KB file): refused when the
  // 17th byte arrives, and no allocation ever exceeds the promise.
  std::vector<uint8_t> bomb = idx_header({4, 4});
  bomb.resize(bomb.size() + (size_t(32) << 20), 0);
  write_gz(dir / "bomb.gz", bomb);
  CHECK(fs::file_size(dir / "bomb.gz") < (size_t(1) << 20));
  cpu_allocator().reset_peak();
  const size_t peak_before = cpu_allocator().stats().peak;
  CHECK_THROWS_WITH_AS(read_idx((dir / "bomb.gz").string()),
                       doctest::Contains("IDX data is longer than dims (4, 4) promise (16 bytes)"), Error);
  CHECK(cpu_allocator().stats().peak - peak_before < (size_t(1) << 20));
  // A header promising far more than this many compressed bytes can inflate to.
  std::vector<uint8_t> liar = idx_header({60000, 28, 28});
  liar.resize(liar.size() + 100, 0);
  write_gz(dir / "liar.gz", liar);
  CHECK_THROWS_WITH_AS(read_idx((dir / "liar.gz").string()), doctest::Contains("bytes of gzip data can inflate to"),
                       Error);
  // The limit is the caller's: a 16-byte promise is over a 15-byte limit.
  write_gz(dir / "small.gz", [] {
    std::vector<uint8_t> b = idx_header({4, 4});
    b.resize(b.size() + 16, 1);
    return b;
  }());
  CHECK(read_idx((dir / "small.gz").string()).numel() == 16);
  CHECK_THROWS_WITH_AS(read_idx((dir / "small.gz").string(), 15), doctest::Contains("more than the limit of 15"),
                       Error);
  fs::remove_all(dir);
}

TEST_CASE("data: a truncated, corrupt or padded gzip IDX stream is an error; concatenated members are one stream") {
  fs::path dir = temp_dir();
  std::vector<uint8_t> good = idx_header({2, 3});
  for (int i = 0; i < 6; ++i) good.push_back(uint8_t(10 + i));
  write_gz(dir / "good.gz", good);
  const std::vector<uint8_t> gz = read_file(dir / "good.gz");
  REQUIRE(read_idx((dir / "good.gz").string()).to_vector<int>() == std::vector<int>{10, 11, 12, 13, 14, 15});
  // Without its 8-byte trailer (CRC-32 and size) the data is all there, but the stream is not.
  for (size_t cut : {size_t(8), size_t(4), size_t(1)}) {
    CAPTURE(cut);
    write_file(dir / "cut.gz", {gz.begin(), gz.end() - std::ptrdiff_t(cut)});
    CHECK_THROWS_WITH_AS(read_idx((dir / "cut.gz").string()), doctest::Contains("cut.gz: truncated gzip stream"),
                         Error);
  }
  // A wrong CRC-32 in the trailer.
  std::vector<uint8_t> bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0x5a;
  write_file(dir / "crc.gz", bad_crc);
  CHECK_THROWS_WITH_AS(read_idx((dir / "crc.gz").string()), doctest::Contains("crc.gz: corrupt compressed data"),
                       Error);
  // Garbage after the stream.
  std::vector<uint8_t> trailing = gz;
  trailing.insert(trailing.end(), {'j', 'u', 'n', 'k'});
  write_file(dir / "trailing.gz", trailing);
  CHECK_THROWS_WITH_AS(read_idx((dir / "trailing.gz").string()), doctest::Contains("corrupt compressed data"), Error);
  // Two gzip members back to back (what `cat a.gz b.gz` makes) read as one stream.
  write_gz(dir / "m1.gz", {good.begin(), good.begin() + 13});
  write_gz(dir / "m2.gz", {good.begin() + 13, good.end()});
  std::vector<uint8_t> both = read_file(dir / "m1.gz"), second = read_file(dir / "m2.gz");
  both.insert(both.end(), second.begin(), second.end());
  write_file(dir / "members.gz", both);
  CHECK(read_idx((dir / "members.gz").string()).to_vector<int>() == std::vector<int>{10, 11, 12, 13, 14, 15});
  // Uncompressed files must be exactly header + data.
  write_file(dir / "plain.idx", good);
  CHECK(read_idx((dir / "plain.idx").string()).sizes() == Shape{2, 3});
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  write_file(dir / "long.idx", longer);
  CHECK_THROWS_WITH_AS(read_idx((dir / "long.idx").string()),
                       doctest::Contains("IDX data has 7 bytes, dims (2, 3) need 6"), Error);
  write_file(dir / "head.idx", {0, 0, 8, 3, 0, 0});
  CHECK_THROWS_WITH_AS(read_idx((dir / "head.idx").string()),
                       doctest::Contains("truncated IDX header (3 dims need 16 bytes)"), Error);
  fs::remove_all(dir);
}

// A 24-bit BMP of w x h pixels claimed by the header; `pixels` (BGR rows, bottom-up, each
// padded to 4 bytes) may hold less than the header claims.
std::vector<uint8_t> bmp(uint32_t w, uint32_t h, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> b;
  auto le = [&](uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
  };
  b.push_back('B');
  b.push_back('M');
  le(uint32_t(54 + pixels.size()), 4);
  le(0, 4);
  le(54, 4);  // file header: size, reserved, pixel data offset
  le(40, 4);  // BITMAPINFOHEADER
  le(w, 4);
  le(h, 4);
  le(1, 2);                              // planes
  le(24, 2);                             // bits per pixel
  for (int i = 0; i < 6; ++i) le(0, 4);  // no compression, sizes, resolution, palette
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

TEST_CASE("data: read_image decodes (C, H, W) and refuses a header that claims too many pixels") {
  if (!image_support()) {
    MESSAGE("built without stb_image; skipped");
    return;
  }
  fs::path dir = temp_dir();
  // 2 x 1: bottom-up BGR, blue then red, padded to 8 bytes.
  write_file(dir / "tiny.bmp", bmp(2, 1, {255, 0, 0, 0, 0, 255, 0, 0}));
  Tensor rgb = read_image((dir / "tiny.bmp").string());
  CHECK(rgb.sizes() == Shape{3, 1, 2});
  CHECK(rgb.to_vector<int>() == std::vector<int>{0, 255, 0, 0, 255, 0});  // R plane, G plane, B plane
  write_file(dir / "huge.bmp", bmp(100000, 100000, {1, 2, 3, 4}));
  CHECK_THROWS_WITH_AS(read_image((dir / "huge.bmp").string()),
                       doctest::Contains("image of 100000 x 100000 pixels is larger than the limit"), Error);
  CHECK_THROWS_WITH_AS(read_image((dir / "tiny.bmp").string(), 3, 1), doctest::Contains("limit of 1 pixels"), Error);
  // A top-down BMP (negative height), whose height stb_image's header probe reports negative:
  // found by fuzzing as a 32-byte file that decoded 168M pixels.
  write_file(dir / "topdown.bmp", bmp(1284, uint32_t(-130941), {1, 2, 3, 4}));
  CHECK_THROWS_WITH_AS(read_image((dir / "topdown.bmp").string()),
                       doctest::Contains("image of 1284 x 130941 pixels is larger than the limit"), Error);
  write_file(dir / "junk.png", {0x89, 'P', 'N', 'G', 1, 2, 3});
  CHECK_THROWS_WITH_AS(read_image((dir / "junk.png").string()),
                       doctest::Contains("junk.png: not a PNG, JPEG or BMP file"), Error);
  fs::remove_all(dir);
}

// A PNG of chunks (type, data) after the signature, each with its length and CRC-32.
std::vector<uint8_t> png(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& chunks) {
  std::vector<uint8_t> b{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto be32 = [&](uint32_t v) {
    for (int shift : {24, 16, 8, 0}) b.push_back(uint8_t(v >> shift));
  };
  for (const auto& [type, data] : chunks) {
    be32(uint32_t(data.size()));
    const size_t start = b.size();
    b.insert(b.end(), type.begin(), type.end());
    b.insert(b.end(), data.begin(), data.end());
    be32(uint32_t(crc32(0, b.data() + start, uInt(b.size() - start))));
  }
  return b;
}

// An 8-bit RGB IHDR of w x h and the zlib stream of `rows` (each with its filter byte).
std::vector<std::pair<std::string, std::vector<uint8_t>>> rgb_png_chunks(uint8_t w, uint8_t h,
                                                                         const std::vector<uint8_t>& rows) {
  std::vector<uint8_t> z(compressBound(uLong(rows.size())));
  uLongf zn = uLongf(z.size());
  REQUIRE(compress(z.data(), &zn, rows.data(), uLong(rows.size())) == Z_OK);
  z.resize(zn);
  return {{"IHDR", {0, 0, 0, w, 0, 0, 0, h, 8, 2, 0, 0, 0}}, {"IDAT", z}, {"IEND", {}}};
}

TEST_CASE("data: read_image checks PNG and JPEG structure before stb_image sees the bytes") {
  if (!image_support()) {
    MESSAGE("built without stb_image; skipped");
    return;
  }
  fs::path dir = temp_dir();
  auto error = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    write_file(dir / name, bytes);
    return test::error_text([&] { read_image((dir / name).string()); });
  };
  // A valid 2 x 1 PNG: red, green.
  write_file(dir / "ok.png", png(rgb_png_chunks(2, 1, {0, 255, 0, 0, 0, 255, 0})));
  CHECK(read_image((dir / "ok.png").string()).to_vector<int>() == std::vector<int>{255, 0, 0, 255, 0, 0});
  // A chunk length of 2^31 - 1 in a 100-byte file (stb 2.27 allocates 2 GiB for it).
  std::vector<uint8_t> huge = png(rgb_png_chunks(2, 1, {0, 255, 0, 0, 0, 255, 0}));
  for (int i = 0; i < 4; ++i) huge[33 + i] = i == 0 ? 0x7f : 0xff;  // the IDAT's length field
  CHECK(error("huge.png", huge).find("PNG chunk \"IDAT\" of 2147483647 bytes runs past the end") != std::string::npos);
  auto chunks = rgb_png_chunks(2, 1, {0, 255, 0, 0, 0, 255, 0});
  CHECK(error("noend.png", png({chunks[0], chunks[1]})).find("PNG is truncated (no IEND chunk)") != std::string::npos);
  CHECK(error("empty.png", png({chunks[0], {"IDAT", {}}, chunks[1], chunks[2]})).find("empty IDAT") !=
        std::string::npos);
  CHECK(error("noihdr.png", png({chunks[1], chunks[0], chunks[2]})).find("does not start with an IHDR") !=
        std::string::npos);
  // A JPEG Huffman table whose 16 code counts add up to 16 * 20 = 320 (stb 2.27 writes past its table).
  std::vector<uint8_t> dht{0xff, 0xd8, 0xff, 0xc4, 0, 0, 0x00};
  for (int i = 0; i < 16; ++i) dht.push_back(20);
  dht.resize(dht.size() + 320, 1);
  dht[4] = uint8_t((dht.size() - 4) >> 8);
  dht[5] = uint8_t(dht.size() - 4);
  dht.insert(dht.end(), {0xff, 0xd9});
  CHECK(error("dht.jpg", dht).find("JPEG Huffman table has 320 codes (at most 256)") != std::string::npos);
  CHECK(error("cut.jpg", {0xff, 0xd8, 0xff, 0xdb, 0x00, 0x43, 1, 2}).find("runs past the end of the file") !=
        std::string::npos);
  // Real JPEGs (baseline and progressive, made by cjpeg from an 8 x 4 red | blue image) decode
  // with their colours (JPEG is lossy: within a few levels).
  const fs::path images = ::brisk::test::data_dir() / "images";
  for (const char* name : {"red_blue_8x4.jpg", "red_blue_8x4_progressive.jpg"}) {
    CAPTURE(name);
    Tensor img = read_image((images / name).string());
    REQUIRE(img.sizes() == Shape{3, 4, 8});
    const std::vector<int> v = img.to_vector<int>();
    CHECK(std::abs(v[0] - 255) < 8);       // R at (0, 0)
    CHECK(v[7] < 8);                       // R at (0, 7)
    CHECK(std::abs(v[64 + 7] - 255) < 8);  // B at (0, 7)
    CHECK(read_image((images / name).string(), 1).sizes() == Shape{1, 4, 8});
    CHECK(error("small.jpg", read_file(images / name)).empty());
    std::vector<uint8_t> cut = read_file(images / name);
    cut.resize(cut.size() / 2);
    CHECK(!error("half.jpg", cut).empty());  // truncated: a brisk::Error, never a crash
  }
  // Formats stb knows but read_image does not promise (PNM, TGA) are refused by their bytes.
  CHECK(error("x.png", {'P', '6', ' ', '1', ' ', '1', ' ', '6', '5', '5', '3', '5', '\n', 0, 0, 0, 0, 0, 0})
            .find("not a PNG, JPEG or BMP") != std::string::npos);
  CHECK(error("x.tga", {0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 24, 0, 1, 2, 3}).find("not a PNG") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("data: Fashion-MNIST loads from the installed package") {
  if (!fs::exists(fs::path(FashionMNIST::kDefaultRoot) / "t10k-images-idx3-ubyte.gz")) {
    MESSAGE("dataset-fashion-mnist is not installed; skipped");
    return;
  }
  FashionMNIST test(FashionMNIST::kDefaultRoot, /*train=*/false);
  CHECK(test.size() == 10000);
  CHECK(test.get(0).input.sizes() == Shape{1, 28, 28});
  CHECK(test.get(0).target.item<int64_t>() == 9);  // the first test image is an ankle boot
  double mean = cast(test.images(), DType::F64).mean().item<double>() / 255.0;
  CHECK(mean == doctest::Approx(0.2868).epsilon(0.01));
}

TEST_CASE("data: CSV dataset reads numbers and names the bad field") {
  fs::path dir = temp_dir();
  {
    std::ofstream f(dir / "ok.csv");
    f << "a,b,label\n1,2,0\n3.5,4,1\n";
  }
  CsvDataset csv((dir / "ok.csv").string(), "label");
  CHECK(csv.size() == 2);
  CHECK(csv.get(1).input.to_vector<float>() == std::vector<float>{3.5f, 4});
  CHECK(csv.get(1).target.dtype() == DType::I64);
  {
    std::ofstream f(dir / "bad.csv");
    f << "a,b\n1,x\n";
  }
  CHECK_THROWS_WITH_AS(CsvDataset((dir / "bad.csv").string()), doctest::Contains("bad.csv:2: field 'b' = 'x'"), Error);
  {
    std::ofstream f(dir / "ragged.csv");
    f << "a,b\n1,2,3\n";
  }
  CHECK_THROWS_WITH_AS(CsvDataset((dir / "ragged.csv").string()), doctest::Contains("3 fields, expected 2"), Error);
  fs::remove_all(dir);
}
