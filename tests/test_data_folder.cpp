// tests/test_data_folder.cpp: data::ImageFolder over a class-folder tree of small BMP images
// written into a temp dir (classes sorted by folder name as torchvision's ImageFolder, byte
// order, so "Cat" before "ant"; files sorted within a class; other files skipped; exact pixels;
// bad trees and bad files are clear errors naming them), and DataLoader's persistent_workers
// (the same worker threads serve every epoch, the same batches as without, clean shutdown).
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/dataloader.h"
#include "data/readers.h"
#include "engine/functions.h"
#include "tests/paths.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

// A 24-bit uncompressed BMP (bottom-up rows, BGR, rows padded to 4 bytes) of w x h pixels,
// pixel (y, x) = rgb(y, x).
template <class Rgb>
void write_bmp(const fs::path& path, int w, int h, Rgb rgb) {
  const int row = (3 * w + 3) / 4 * 4;
  const uint32_t data_size = uint32_t(row * h);
  std::vector<uint8_t> b(54 + data_size, 0);
  auto u32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  b[0] = 'B';
  b[1] = 'M';
  u32(2, 54 + data_size);
  u32(10, 54);
  u32(14, 40);
  u32(18, uint32_t(w));
  u32(22, uint32_t(h));
  b[26] = 1;   // planes
  b[28] = 24;  // bits per pixel
  u32(34, data_size);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::array<uint8_t, 3> c = rgb(y, x);
      size_t at = 54 + size_t(h - 1 - y) * size_t(row) + size_t(3 * x);
      b[at] = c[2];
      b[at + 1] = c[1];
      b[at + 2] = c[0];
    }
  }
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / name) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

bool image_decoding_built() {
  fs::path jpg = ::brisk::test::data_dir() / "images" / "red_blue_8x4.jpg";
  try {
    data::read_image(jpg.string(), 3);
  } catch (const Error& e) {
    return std::string(e.what()).find("built without image decoding") == std::string::npos;
  }
  return true;
}

std::string folder_error(const std::string& root) {
  try {
    data::ImageFolder f(root);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("optimx: ImageFolder labels images by class folder, sorted as torchvision, with exact pixels") {
  TempDir tmp("brisk_optimx_image_folder");
  // Class folders made out of order; python's sorted() (byte order) gives Cat, ant, bird, dog.
  const std::vector<std::string> made = {"dog", "bird", "Cat", "ant"};
  int code = 0;
  std::vector<std::pair<std::string, int>> expected;  // (class, image code) in sample order
  for (const std::string& cls : made) fs::create_directories(tmp.path / cls);
  auto add = [&](const std::string& cls, const std::string& file) {
    int c = code++;
    write_bmp(tmp.path / cls / file, 3, 2, [c](int y, int x) {
      return std::array<uint8_t, 3>{uint8_t(10 * c + y), uint8_t(100 + x), uint8_t(200 + c)};
    });
  };
  add("dog", "b.bmp");
  add("dog", "a.bmp");
  add("bird", "z.bmp");
  add("Cat", "img10.bmp");
  add("Cat", "img2.bmp");
  add("ant", "only.bmp");
  std::ofstream(tmp.path / "dog" / "notes.txt") << "not an image";
  std::ofstream(tmp.path / "README") << "a file beside the class folders";
  // Sample order: classes sorted, then file names sorted (img10 before img2, a before b).
  expected = {{"Cat", 3}, {"Cat", 4}, {"ant", 5}, {"bird", 2}, {"dog", 1}, {"dog", 0}};

  data::ImageFolder folder(tmp.path.string());
  CHECK(folder.classes() == std::vector<std::string>{"Cat", "ant", "bird", "dog"});
  REQUIRE(folder.size() == 6);
  if (!image_decoding_built()) {
    MESSAGE("brisk built without image decoding: pixel checks skipped");
    return;
  }
  for (int64_t i = 0; i < folder.size(); ++i) {
    data::Example e = folder.get(i);
    const auto& [cls, c] = expected[size_t(i)];
    const int64_t label = std::find(folder.classes().begin(), folder.classes().end(), cls) - folder.classes().begin();
    CHECK(e.target.item<int64_t>() == label);
    REQUIRE(e.input.sizes() == Shape{3, 2, 3});
    CHECK(e.input.dtype() == DType::U8);
    std::vector<double> px = e.input.to_vector<double>();
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        CHECK(px[size_t(0 * 6 + y * 3 + x)] == 10 * c + y);
        CHECK(px[size_t(1 * 6 + y * 3 + x)] == 100 + x);
        CHECK(px[size_t(2 * 6 + y * 3 + x)] == 200 + c);
      }
    }
  }
  data::ImageFolder gray(tmp.path.string(), /*channels=*/1);
  CHECK(gray.get(0).input.sizes() == Shape{1, 2, 3});
  // A loader batches them.
  data::DataLoader loader(std::make_shared<data::ImageFolder>(tmp.path.string()), {.batch_size = 4});
  auto batch = loader.next();
  REQUIRE(batch);
  CHECK(batch->input.sizes() == Shape{4, 3, 2, 3});
  CHECK(batch->target.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 2});
}

TEST_CASE("optimx: ImageFolder errors name the bad root, the empty tree, the bad file and the index") {
  TempDir tmp("brisk_optimx_image_folder_bad");
  CHECK(folder_error((tmp.path / "missing").string()).find("is not a directory") != std::string::npos);
  CHECK(folder_error(tmp.path.string()).find("has no class subfolders") != std::string::npos);
  fs::create_directories(tmp.path / "a");
  fs::create_directories(tmp.path / "b");
  write_bmp(tmp.path / "a" / "good.bmp", 2, 2, [](int, int) { return std::array<uint8_t, 3>{1, 2, 3}; });
  std::ofstream(tmp.path / "b" / "broken.png") << "this is not a PNG file";
  write_bmp(tmp.path / "b" / "cut.bmp", 8, 8, [](int, int) { return std::array<uint8_t, 3>{9, 9, 9}; });
  fs::resize_file(tmp.path / "b" / "cut.bmp", 70);  // header intact, pixels missing
  data::ImageFolder folder(tmp.path.string());
  REQUIRE(folder.size() == 3);
  if (image_decoding_built()) {
    CHECK(folder.get(0).target.item<int64_t>() == 0);
    auto get_error = [&](int64_t i) {
      try {
        folder.get(i);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK(get_error(1).find("broken.png: not a PNG, JPEG or BMP file") != std::string::npos);
    CHECK(get_error(2).find("cut.bmp: truncated BMP: 8 rows of 24 bytes from offset 54") != std::string::npos);
    // The loader's worker names the batch and the file.
    data::DataLoader loader(std::make_shared<data::ImageFolder>(tmp.path.string()),
                            {.batch_size = 2, .num_workers = 1});
    CHECK_THROWS_WITH_AS(loader.next(), doctest::Contains("broken.png"), Error);
  }
  CHECK_THROWS_WITH_AS(folder.get(3), doctest::Contains("ImageFolder: index 3 is out of range for 3 samples"), Error);
  CHECK_THROWS_WITH_AS(data::ImageFolder(tmp.path.string(), 2), doctest::Contains("channels must be 1 or 3"), Error);
}

namespace {

// Counts the worker threads that touched the dataset and have exited since.
std::atomic<int> g_exited{0};
struct ExitTracker {
  bool used = false;
  ~ExitTracker() {
    if (used) g_exited.fetch_add(1);
  }
};
thread_local ExitTracker t_tracker;

// Sample i is the number i; records which threads served it.
class TrackedRange : public data::Dataset {
 public:
  explicit TrackedRange(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t i) const override {
    t_tracker.used = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads_.insert(std::this_thread::get_id());
    }
    return {full({1}, double(i)), full({}, double(i % 3), DType::I64)};
  }
  size_t num_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.size();
  }

 private:
  int64_t n_;
  mutable std::mutex mu_;
  mutable std::set<std::thread::id> threads_;
};

std::vector<std::vector<double>> epoch_batches(data::DataLoader& loader) {
  std::vector<std::vector<double>> out;
  while (auto b = loader.next()) out.push_back(b->input.to_vector<double>());
  return out;
}

}  // namespace

TEST_CASE("optimx: persistent_workers keeps the same worker threads across epochs, with the same batches") {
  auto reference_data = std::make_shared<TrackedRange>(37);
  data::DataLoader reference(reference_data, {.batch_size = 4, .shuffle = true, .seed = 11});
  std::vector<std::vector<std::vector<double>>> want;
  for (int e = 0; e < 3; ++e) want.push_back(epoch_batches(reference));

  g_exited = 0;
  {
    auto dataset = std::make_shared<TrackedRange>(37);
    data::DataLoader loader(
        dataset, {.batch_size = 4, .shuffle = true, .num_workers = 2, .seed = 11, .persistent_workers = true});
    for (int e = 0; e < 3; ++e) {
      CHECK(epoch_batches(loader) == want[size_t(e)]);
      CHECK_MESSAGE(g_exited.load() == 0, "a persistent worker exited after epoch ", e);
    }
    CHECK(dataset->num_threads() <= 2);  // the same two threads served all three epochs
    // Jumping to another epoch mid-epoch keeps the workers and gives that epoch's batches.
    CHECK(loader.next());
    loader.set_epoch(1);
    CHECK(epoch_batches(loader) == want[1]);
    CHECK(g_exited.load() == 0);
    CHECK(loader.next());  // destroyed mid-epoch, with batches in flight
  }
  CHECK(g_exited.load() >= 1);  // joined on destruction
  CHECK(g_exited.load() <= 2);

  // Without persistent_workers the workers end with each epoch, batches unchanged.
  g_exited = 0;
  {
    data::DataLoader loader(std::make_shared<TrackedRange>(37),
                            {.batch_size = 4, .shuffle = true, .num_workers = 2, .seed = 11});
    CHECK(epoch_batches(loader) == want[0]);
    CHECK(g_exited.load() >= 1);
    CHECK(epoch_batches(loader) == want[1]);
  }
}
