// data/dataloader.cpp: DataLoader (see Note [Loader threads]).
#include "data/dataloader.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/macros.h"
#include "engine/profiler.h"

namespace brisk::data {

// Note [Loader threads]
// The consumer (the training loop) hands out batches in order. Workers take the next batch
// number to make under a mutex, make it without the lock, and post it into `ready` keyed by
// number. At most num_workers * prefetch_factor batches are scheduled and not yet consumed,
// which bounds memory. A generation counter, bumped at every epoch start or state load,
// makes workers drop results of an abandoned epoch. Workers block on `work_cv`; the
// consumer blocks on `ready_cv` (with the timeout, if any). A worker's exception is posted
// as that batch's result and re-thrown by the consumer with the sample index.
struct DataLoader::Shared {
  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  bool stop = false;
  uint64_t generation = 0;
  int64_t epoch = 0;
  const std::vector<std::vector<int64_t>>* batches = nullptr;
  int64_t next_to_make = 0;  // next batch number a worker takes
  int64_t next_to_take = 0;  // next batch number the consumer takes
  int64_t max_in_flight = 1;
  struct Result {
    std::optional<Batch> batch;
    std::string error;
  };
  std::map<int64_t, Result> ready;
  std::vector<std::thread> threads;
};

namespace {

bool cuda_available() {
  Backend* b = find_backend(DeviceType::CUDA);
  return b && b->device_count() > 0;
}

}  // namespace

DataLoader::DataLoader(DatasetPtr dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  BRISK_CHECK(dataset_, "DataLoader: null dataset");
  BRISK_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  BRISK_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  BRISK_CHECK(options_.prefetch_factor >= 1, "DataLoader: prefetch_factor must be >= 1");
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  if (options_.pin_memory && !cuda_available()) options_.pin_memory = false;  // nothing to pin for
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::num_batches() const {
  int64_t n = int64_t(sampler_->indices(0).size());
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::check_state(const LoaderState& state) const {
  BRISK_CHECK(state.epoch >= 0 && state.batch >= 0, "DataLoader: invalid state (epoch ", state.epoch, ", batch ",
              state.batch, ")");
  if (state.batch == 0) return;  // set_epoch: no need to count the batches
  const int64_t n = num_batches();
  BRISK_CHECK(state.batch <= n, "DataLoader: invalid state (epoch ", state.epoch, ", batch ", state.batch,
              ") for a loader of ", n, " batches per epoch");
}

void DataLoader::load_state(const LoaderState& state) {
  check_state(state);
  state_ = state;
  epoch_started_ = false;
  if (shared_) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    ++shared_->generation;
    shared_->ready.clear();
    shared_->batches = nullptr;
  }
}

Batch DataLoader::make_batch(int64_t epoch, const std::vector<int64_t>& indices) const {
  return collate_batch(*dataset_, options_, epoch, indices);
}

namespace {

// batch[k] = sample: one memcpy for a dense CPU sample of the batch's dtype (a label, an
// untransformed image), else copy_ (strides, dtype conversion, devices). Per-sample copy_ calls
// were 128 ops per batch, a tenth of a 1-thread MLP epoch.
void copy_sample(const Tensor& batch, int64_t k, const Tensor& sample) {
  if (sample.dtype() == batch.dtype() && sample.device().is_cpu() && batch.device().is_cpu() &&
      sample.is_contiguous() && sample.numel() * batch.size(0) == batch.numel()) {
    const size_t bytes = size_t(sample.numel()) * dtype_size(sample.dtype());
    std::memcpy(static_cast<char*>(batch.data_ptr()) + size_t(k) * bytes, sample.data_ptr(), bytes);
    return;
  }
  batch.select(0, k).copy_(sample);
}

}  // namespace

Batch collate_batch(const Dataset& dataset, const LoaderOptions& options, int64_t epoch,
                    const std::vector<int64_t>& indices) {
  NoGradGuard ng;
  std::vector<Example> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(dataset.get(i));
  if (options.collate) {
    Batch b = options.collate(samples);
    b.indices = indices;
    return b;
  }
  const int64_t n = int64_t(samples.size());
  const Example& first = samples[0];
  Batch batch;
  batch.indices = indices;
  bool fused = !options.transform.empty();
  Shape in_shape = fused ? options.transform.output_shape(first.input.sizes()) : first.input.sizes();
  Shape batch_shape = in_shape;
  batch_shape.insert(0, n);
  batch.input = make_empty(batch_shape, fused ? DType::F32 : first.input.dtype(), Device::cpu(), options.pin_memory);
  if (first.target.defined()) {
    Shape ts = first.target.sizes();
    ts.insert(0, n);
    batch.target = make_empty(ts, first.target.dtype(), Device::cpu(), options.pin_memory);
  }
  const int64_t per_sample = in_shape.numel();
  for (int64_t k = 0; k < n; ++k) {
    const Example& ex = samples[size_t(k)];
    BRISK_CHECK(ex.input.sizes() == first.input.sizes() && ex.input.dtype() == first.input.dtype(),
                "DataLoader: sample ", indices[size_t(k)], " has input ", ex.input.str(), " but sample ", indices[0],
                " has ", first.input.str(), " (use a collate function for ragged samples)");
    if (fused) {
      float* dst = static_cast<float*>(batch.input.data_ptr()) + k * per_sample;
      options.transform.apply(ex.input, dst, options.seed, uint64_t(epoch), uint64_t(indices[size_t(k)]));
    } else {
      copy_sample(batch.input, k, ex.input);
    }
    if (batch.target.defined()) {
      BRISK_CHECK(ex.target.defined() && ex.target.sizes() == first.target.sizes(), "DataLoader: sample ",
                  indices[size_t(k)], " has a target that does not match sample ", indices[0]);
      copy_sample(batch.target, k, ex.target);
    }
  }
  return batch;
}

void DataLoader::start_epoch() {
  batches_ = make_batches(sampler_->indices(state_.epoch), options_.batch_size, options_.drop_last);
  epoch_started_ = true;
  if (options_.num_workers == 0) return;
  if (!shared_) shared_ = std::make_shared<Shared>();
  Shared& s = *shared_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.generation;
    s.ready.clear();
    s.epoch = state_.epoch;
    s.batches = &batches_;
    s.next_to_make = state_.batch;
    s.next_to_take = state_.batch;
    s.max_in_flight = int64_t(options_.num_workers) * options_.prefetch_factor;
  }
  s.work_cv.notify_all();
  if (!s.threads.empty()) return;  // persistent workers
  for (int w = 0; w < options_.num_workers; ++w) {
    // Workers hold their own references (not `this`): a worker detached after a timeout may
    // outlive the loader.
    s.threads.emplace_back([shared = shared_, dataset = dataset_, options = options_, w] {
      Shared& st = *shared;
      std::unique_lock<std::mutex> lock(st.mu);
      for (;;) {
        st.work_cv.wait(lock, [&] {
          return st.stop || (st.batches && st.next_to_make < int64_t(st.batches->size()) &&
                             st.next_to_make - st.next_to_take < st.max_in_flight);
        });
        if (st.stop) return;
        int64_t b = st.next_to_make++;
        uint64_t gen = st.generation;
        int64_t epoch = st.epoch;
        std::vector<int64_t> indices = (*st.batches)[size_t(b)];
        lock.unlock();
        Shared::Result result;
        try {
          result.batch = collate_batch(*dataset, options, epoch, indices);
        } catch (const std::exception& e) {
          result.error = detail::cat("DataLoader: worker ", w, " failed on batch ", b, " (samples ", indices.front(),
                                     "..", indices.back(), "): ", e.what());
        }
        lock.lock();
        if (gen == st.generation) {
          st.ready[b] = std::move(result);
          st.ready_cv.notify_all();
        }
      }
    });
  }
}

void DataLoader::stop_workers() {
  if (!shared_) return;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->work_cv.notify_all();
  for (std::thread& t : shared_->threads) {
    if (t.joinable()) t.join();
  }
  shared_.reset();
}

std::optional<Batch> DataLoader::next() {
  if (!epoch_started_) start_epoch();
  if (state_.batch >= int64_t(batches_.size())) {
    // Epoch over: the next call starts the following one.
    state_ = {state_.epoch + 1, 0};
    epoch_started_ = false;
    if (shared_) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->batches = nullptr;
      ++shared_->generation;
    }
    if (!options_.persistent_workers) stop_workers();
    return std::nullopt;
  }
  int64_t b = state_.batch;
  std::optional<Batch> out;
  // While profiling, the time the training loop spends getting this batch (engine/profiler.h).
  std::optional<profiler::RecordFunction> wait_range;
  if (BRISK_UNLIKELY(profiler::is_active())) wait_range.emplace("data: next batch", profiler::EventKind::LoaderWait);
  if (options_.num_workers == 0) {
    out = make_batch(state_.epoch, batches_[size_t(b)]);
  } else {
    Shared& s = *shared_;
    std::unique_lock<std::mutex> lock(s.mu);
    auto has = [&] { return s.ready.count(b) > 0; };
    if (options_.timeout_s > 0) {
      bool ok = s.ready_cv.wait_for(lock, std::chrono::duration<double>(options_.timeout_s), has);
      if (!ok) {
        // A stuck worker cannot be interrupted: detach the threads (they keep the shared
        // state alive) so that destroying the loader does not hang too.
        s.stop = true;
        s.work_cv.notify_all();
        for (std::thread& t : s.threads) t.detach();
        s.threads.clear();
        lock.unlock();
        shared_.reset();
        BRISK_FAIL("DataLoader: timed out after ", options_.timeout_s, " s waiting for batch ", b, " of epoch ",
                   state_.epoch, " (a worker is stuck or too slow)");
      }
    } else {
      s.ready_cv.wait(lock, has);
    }
    Shared::Result r = std::move(s.ready[b]);
    s.ready.erase(b);
    s.next_to_take = b + 1;
    lock.unlock();
    s.work_cv.notify_all();
    if (!r.error.empty()) throw Error(r.error);
    out = std::move(r.batch);
  }
  wait_range.reset();
  ++state_.batch;
  if (options_.device && !(*options_.device == Device::cpu())) {
    out->input = out->input.to(*options_.device, options_.pin_memory);
    if (out->target.defined()) out->target = out->target.to(*options_.device, options_.pin_memory);
  }
  return out;
}

DataLoader::Iterator::Iterator(DataLoader* loader, bool end) : loader_(loader) {
  if (!end) current_ = loader_->next();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_ = loader_->next();
  return *this;
}

}  // namespace brisk::data
