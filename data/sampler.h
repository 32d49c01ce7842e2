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

// One rank's shard of 0..n-1, as torch.utils.data.DistributedSampler: every rank computes the
// same order (a permutation from (seed, epoch) when shuffling, else 0..n-1), pads it by
// repeating its head to a multiple of num_replicas (or drops the tail with drop_last), and takes
// every num_replicas-th index from `rank`. The loader passes its epoch, so each epoch reshuffles
// by itself; set_epoch(e) pins the epoch instead (PyTorch's call; a loader that resumes passes
// its own epoch, which is the same number). Knows nothing of processes: pass dist's rank/size.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices(int64_t epoch) const override;
  void set_epoch(int64_t epoch) { pinned_epoch_ = epoch; }
  int64_t num_samples() const;  // this rank's count per epoch (the same on every rank)

 private:
  int64_t n_, replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t pinned_epoch_ = -1;
};

// Splits an epoch's indices into batches of batch_size (the last one smaller unless drop_last).
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& indices, int64_t batch_size, bool drop_last);

// A permutation of 0..n-1 from (seed, stream): Fisher-Yates on Philox draws.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream);

}  // namespace brisk::data
