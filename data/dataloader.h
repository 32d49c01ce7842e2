// data/dataloader.h: DataLoader, batches from a Dataset with worker THREADS filling a bounded
// prefetch queue. Batch b of epoch e is fully determined by (seed, e, b): the sampler's order
// comes from (seed, e) and each sample's random transform from (seed, e, index), so content
// and order are identical for any number of workers, and a run resumed from a saved state
// continues with exactly the batches it would have seen. Workers only prepare data and block on
// condition variables (never spin); compute threads stay OpenMP's (see shared DESIGN.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace brisk::data {

struct Batch {
  Tensor input{};                  // (B, ...)
  Tensor target{};                 // (B, ...) or undefined
  std::vector<int64_t> indices{};  // dataset indices of the samples
};

// Fields in torch.utils.data.DataLoader's keyword order (Note [Option field order] in
// docs/DESIGN.md): seed stands for its `generator`, device for `pin_memory_device`; brisk's
// own `transform` comes last.
struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;  // RandomSampler(seed) unless `sampler` is given
  SamplerPtr sampler{};  // custom order (WeightedRandomSampler, ...)
  int num_workers = 0;   // 0: batches are made in the calling thread
  // Custom collate: samples -> batch (replaces stacking and `transform`).
  std::function<Batch(std::vector<Example>& samples)> collate{};
  bool pin_memory = false;  // page-locked batch buffers (needs CUDA; ignored without a GPU)
  bool drop_last = false;
  double timeout_s = 0;             // > 0: waiting longer for a batch is an error
  uint64_t seed = 0;                // of the shuffle and the per-sample random transforms
  int prefetch_factor = 2;          // batches in flight per worker
  bool persistent_workers = false;  // keep worker threads across epochs
  std::optional<Device> device{};   // move each batch there (non-blocking from pinned memory)
  Compose transform{};              // fused per-sample transform of the inputs (F32 output)
};

// Where a loader is: the epoch and how many of its batches were handed out.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
};

// Loads `indices` from `dataset` and stacks them (or runs options.collate), applying the fused
// transform with the per-sample random stream of `epoch`.
Batch collate_batch(const Dataset& dataset, const LoaderOptions& options, int64_t epoch,
                    const std::vector<int64_t>& indices);

class DataLoader {
 public:
  DataLoader(DatasetPtr dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;  // per epoch
  int64_t dataset_size() const { return dataset_->size(); }
  const LoaderOptions& options() const { return options_; }

  // The next batch of the current epoch, or nullopt when it is over (the next call then
  // starts the following epoch).
  std::optional<Batch> next();

  LoaderState state() const { return state_; }
  // Throws a brisk::Error unless `state` is a position of this loader (epoch >= 0, 0 <= batch
  // <= num_batches()); changes nothing.
  void check_state(const LoaderState& state) const;
  // Continue from a saved state (say, from a training checkpoint); check_state runs first.
  void load_state(const LoaderState& state);
  // Start epoch `epoch` from its first batch.
  void set_epoch(int64_t epoch) { load_state({epoch, 0}); }

  // Range-for over the rest of the current epoch.
  class Iterator {
   public:
    Iterator(DataLoader* loader, bool end);
    Batch& operator*() { return *current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return current_.has_value() != other.current_.has_value(); }

   private:
    DataLoader* loader_;
    std::optional<Batch> current_;
  };
  Iterator begin() { return Iterator(this, false); }
  Iterator end() { return Iterator(this, true); }

  // Makes the batch of `indices` for `epoch` in the calling thread (what workers run).
  Batch make_batch(int64_t epoch, const std::vector<int64_t>& indices) const;

 private:
  struct Shared;
  void start_epoch();
  void stop_workers();

  DatasetPtr dataset_;
  LoaderOptions options_;
  SamplerPtr sampler_;
  LoaderState state_;
  bool epoch_started_ = false;
  std::vector<std::vector<int64_t>> batches_;  // of the current epoch
  std::shared_ptr<Shared> shared_;             // worker state (shared with the threads)
};

}  // namespace brisk::data
