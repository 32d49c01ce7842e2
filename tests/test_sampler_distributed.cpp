// tests/test_sampler_distributed.cpp: data::DistributedSampler without processes: the ranks'
// shards are disjoint and cover the dataset (padded by repeating its head, or trimmed with
// drop_last), reshuffle per epoch, agree with set_epoch, and drive a DataLoader whose resumed
// state continues the shard. The 2-process use is in tests/dist/test_dist.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "engine/functions.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;

TEST_CASE("DistributedSampler: shards are disjoint and cover, padded or dropped like PyTorch's") {
  for (bool shuffle : {false, true}) {
    for (int64_t n : {0, 1, 7, 10, 11}) {
      for (int64_t replicas : {1, 2, 3, 4}) {
        CAPTURE(n);
        CAPTURE(replicas);
        std::multiset<int64_t> seen;
        int64_t per_rank = -1;
        for (int64_t r = 0; r < replicas; ++r) {
          data::DistributedSampler s(n, replicas, r, shuffle, /*seed=*/5);
          const auto idx = s.indices(0);
          CHECK(int64_t(idx.size()) == s.num_samples());
          if (per_rank >= 0) CHECK(int64_t(idx.size()) == per_rank);
          per_rank = int64_t(idx.size());
          seen.insert(idx.begin(), idx.end());
        }
        CHECK(int64_t(seen.size()) == (n == 0 ? 0 : (n + replicas - 1) / replicas * replicas));
        for (int64_t i = 0; i < n; ++i) CHECK(seen.count(i) >= 1);  // padding repeats, never skips
        if (n >= replicas) {
          std::set<int64_t> dropped;
          for (int64_t r = 0; r < replicas; ++r) {
            const auto idx = data::DistributedSampler(n, replicas, r, shuffle, 5, /*drop_last=*/true).indices(0);
            CHECK(int64_t(idx.size()) == n / replicas);
            for (int64_t i : idx) CHECK(dropped.insert(i).second);  // no repeats
          }
        }
      }
    }
  }
  // PyTorch's order without shuffling: rank r takes r, r + replicas, ...; padding from the head.
  CHECK(data::DistributedSampler(5, 2, 1, false).indices(0) == std::vector<int64_t>{1, 3, 0});
}

TEST_CASE("DistributedSampler: a new order each epoch, the same on every rank; set_epoch pins it") {
  data::DistributedSampler a(100, 2, 0, true, 9), b(100, 2, 1, true, 9);
  CHECK(a.indices(0) != a.indices(1));
  std::set<int64_t> both;
  for (int64_t i : a.indices(3)) both.insert(i);
  for (int64_t i : b.indices(3)) both.insert(i);
  CHECK(both.size() == 100);  // the ranks used the same permutation
  const auto e7 = a.indices(7);
  a.set_epoch(7);
  CHECK(a.indices(0) == e7);
  CHECK(error_text([] { data::DistributedSampler(10, 2, 2); }).find("rank 2 is outside [0, 2)") != std::string::npos);
  CHECK(error_text([] { data::DistributedSampler(INT64_MAX, 2, 0); }).find("beyond 2^40") != std::string::npos);
  CHECK(error_text([] { data::DistributedSampler(10, 0, 0); }).find("num_replicas must be positive") !=
        std::string::npos);
  CHECK(error_text([] { data::DistributedSampler(1, 2, 0, true, 0, true); }).find("leaves every rank empty") !=
        std::string::npos);
}

TEST_CASE("DistributedSampler: drives a DataLoader and its resumable state") {
  auto ds = std::make_shared<data::TensorDataset>(arange(int64_t(20)), arange(int64_t(20)));
  data::LoaderOptions o;
  o.batch_size = 3;
  o.sampler = std::make_shared<data::DistributedSampler>(20, 2, 1, true, 4);
  data::DataLoader loader(ds, o);
  std::vector<int64_t> all;
  while (auto b = loader.next()) {
    for (int64_t v : b->input.to_vector<int64_t>()) all.push_back(v);
  }
  CHECK(all.size() == 10);
  CHECK(all == std::static_pointer_cast<const data::DistributedSampler>(o.sampler)->indices(0));
}
