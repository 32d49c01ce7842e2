// tests/test_data.cpp: datasets, readers (and their errors on bad files), samplers, the fused
// transforms, and the DataLoader: order and content identical for any number of workers,
// worker errors re-thrown with the sample, timeouts, and resuming mid-epoch.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"

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
    o.transform = Compose({random_crop(4, 4, 1), random_horizontal_flip(), to_tensor(), normalize({0.5}, {0.25}),
                           random_erasing(0.5)});
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
  CHECK_THROWS_WITH_AS(read_idx((dir / "short.gz").string()), doctest::Contains("short.gz: IDX data has 2 bytes"), Error);
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

TEST_CASE("data: Fashion-MNIST loads from the installed package") {
  if (!fs::exists(std::string(FashionMNIST::kDefaultRoot) + "/t10k-images-idx3-ubyte.gz")) {
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
