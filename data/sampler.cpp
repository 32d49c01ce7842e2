// data/sampler.cpp: samplers and batching.
#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/error.h"
#include "engine/random.h"

namespace brisk::data {

namespace {
// Uniform double in [0, 1) from draw k of stream (seed, stream).
double uniform01(uint64_t seed, uint64_t stream, uint64_t k) {
  Philox4 r = philox(seed, k, stream);
  return double((uint64_t(r.v[0]) << 21) ^ (r.v[1] >> 11)) * (1.0 / 9007199254740992.0);
}
}  // namespace

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox(seed, uint64_t(i), stream);
    int64_t j = int64_t(((uint64_t(r.v[0]) << 32) | r.v[1]) % uint64_t(i + 1));
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return random_permutation(n_, seed_, 0x5a3100000000ULL + uint64_t(epoch));
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement,
                                             uint64_t seed)
    : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement), seed_(seed) {
  BRISK_CHECK(!weights_.empty(), "WeightedRandomSampler: no weights");
  for (double w : weights_) BRISK_CHECK(w >= 0, "WeightedRandomSampler: negative weight ", w);
  BRISK_CHECK(replacement_ || num_samples_ <= int64_t(weights_.size()), "WeightedRandomSampler: ", num_samples_,
              " samples without replacement from ", weights_.size(), " weights");
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  BRISK_CHECK(n >= 0 && n <= (int64_t(1) << 40), "DistributedSampler: dataset size ", n,
              " is negative or beyond 2^40 (the index list is built in memory)");
  BRISK_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be positive, got ", num_replicas);
  BRISK_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is outside [0, ", num_replicas,
              ")");
  BRISK_CHECK(!drop_last || n >= num_replicas || n == 0, "DistributedSampler: drop_last with ", n, " samples for ",
              num_replicas, " replicas leaves every rank empty");
}

int64_t DistributedSampler::num_samples() const {
  return drop_last_ ? n_ / replicas_ : (n_ + replicas_ - 1) / replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const int64_t e = pinned_epoch_ >= 0 ? pinned_epoch_ : epoch;
  std::vector<int64_t> order =
      shuffle_ ? random_permutation(n_, seed_, 0xd15700000000ULL + uint64_t(e)) : SequentialSampler(n_).indices(e);
  const int64_t total = num_samples() * replicas_;
  if (order.empty()) return {};
  for (size_t i = 0; int64_t(order.size()) < total; ++i) order.push_back(order[i % size_t(n_)]);  // pad
  order.resize(size_t(total));                                                                    // drop_last
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples()));
  for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(order[size_t(i)]);
  return mine;
}

std::vector<int64_t> WeightedRandomSampler::indices(int64_t epoch) const {
  uint64_t stream = 0x3e1900000000ULL + uint64_t(epoch);
  std::vector<int64_t> out;
  if (replacement_) {
    std::vector<double> cdf(weights_.size());
    std::partial_sum(weights_.begin(), weights_.end(), cdf.begin());
    BRISK_CHECK(cdf.back() > 0, "WeightedRandomSampler: weights sum to zero");
    for (int64_t k = 0; k < num_samples_; ++k) {
      double u = uniform01(seed_, stream, uint64_t(k)) * cdf.back();
      out.push_back(int64_t(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()));
      out.back() = std::min<int64_t>(out.back(), int64_t(weights_.size()) - 1);
    }
    return out;
  }
  // Without replacement: keys u^(1/w) (Efraimidis-Spirakis), take the largest.
  std::vector<std::pair<double, int64_t>> keys;
  for (size_t i = 0; i < weights_.size(); ++i) {
    double u = uniform01(seed_, stream, i);
    keys.emplace_back(weights_[i] > 0 ? std::log(std::max(u, 1e-300)) / weights_[i] : -1e300, int64_t(i));
  }
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t k = 0; k < num_samples_; ++k) out.push_back(keys[size_t(k)].second);
  return out;
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& indices, int64_t batch_size,
                                               bool drop_last) {
  BRISK_CHECK(batch_size > 0, "DataLoader: batch_size must be positive, got ", batch_size);
  std::vector<std::vector<int64_t>> batches;
  for (size_t start = 0; start < indices.size(); start += size_t(batch_size)) {
    size_t end = std::min(indices.size(), start + size_t(batch_size));
    if (drop_last && end - start < size_t(batch_size)) break;
    batches.emplace_back(indices.begin() + long(start), indices.begin() + long(end));
  }
  return batches;
}

}  // namespace brisk::data
