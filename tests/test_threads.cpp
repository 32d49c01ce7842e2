// tests/test_threads.cpp: brisk used from several threads at once, the cases tests/tsan.sh
// runs under ThreadSanitizer: the caching allocator and small ops from many threads (the
// statistics add up afterwards), and a loader with persistent workers that is moved to
// another position mid-epoch while its workers are busy. Not the loader's order and
// content guarantees (tests/test_data.cpp) or OpenMP parallel regions (the op specs).
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "brisk.h"
#include "data/dataloader.h"
#include "engine/allocator.h"

using namespace brisk;

TEST_CASE("threads: allocator and ops from four threads at once; the statistics add up") {
  const AllocatorStats before = cpu_allocator().stats();
  std::vector<std::thread> threads;
  std::vector<double> sums(4, 0.0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &sums] {
      double total = 0;
      for (int i = 0; i < 200; ++i) {
        const int64_t n = 1 + (i * 37 + t * 11) % 300;  // many size classes, shared with other threads
        Tensor a = full({n}, 1.0);
        Tensor b = arange(n, DType::F32);
        total += (a + b).sum().item<double>() - double(n) * double(n + 1) / 2;
        (void)cpu_allocator().stats();
      }
      sums[size_t(t)] = total;
    });
  }
  for (std::thread& th : threads) th.join();
  for (double s : sums) CHECK(s == 0.0);
  const AllocatorStats after = cpu_allocator().stats();
  CHECK(after.allocated == before.allocated);
  CHECK(after.cache_hits > before.cache_hits);
}

TEST_CASE("threads: persistent loader workers survive state loads mid-epoch and epoch ends") {
  std::vector<double> xs(50 * 3), ys(50);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = double(i);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = double(i);
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {50, 3}), from_vector(ys, {50}, DType::I64));
  data::LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.seed = 2;
  o.num_workers = 3;
  o.prefetch_factor = 1;
  o.persistent_workers = true;
  data::DataLoader loader(ds, o);
  data::LoaderOptions single = o;
  single.num_workers = 0;
  data::DataLoader reference(ds, single);
  auto targets = [](const data::Batch& b) { return b.target.to_vector<int64_t>(); };
  for (int round = 0; round < 6; ++round) {
    const data::LoaderState at{round % 3, round % 5};
    loader.load_state(at);
    reference.load_state(at);
    for (int k = 0; k < 4 + round; ++k) {
      auto a = loader.next(), b = reference.next();
      REQUIRE(a.has_value() == b.has_value());
      if (a) CHECK(targets(*a) == targets(*b));
    }
  }
}
