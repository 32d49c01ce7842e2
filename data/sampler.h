// data/sampler.h: the order in which a DataLoader visits samples. A sampler gives the whole
// epoch's index list up front from (seed, epoch), so the order does not depend on threads
// and a resumed run sees the same order. BatchSampler groups it into batches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace brisk::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

using SamplerPtr = std::shared_ptr<const Sampler>;

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A fresh permutation each epoch, from (seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// num_samples draws with probability proportional to weights (with or without replacement).
class WeightedRandomSampler : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  std::vector<double> weights_;
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// Splits an epoch's indices into batches of batch_size (the last one smaller unless drop_last).
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& indices, int64_t batch_size, bool drop_last);

// A permutation of 0..n-1 from (seed, stream): Fisher-Yates on Philox draws.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream);

}  // namespace brisk::data
