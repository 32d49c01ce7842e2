// data/dataset.h: the Dataset interface (size, get(i)) and the generic datasets: tensors in
// memory, subsets, random splits and concatenation. Readers of files (IDX/Fashion-MNIST,
// CSV, image folders) are in data/readers.h; batching is the DataLoader's (data/dataloader.h).
// get() must be safe to call from several loader threads at once (it is const). Datasets that
// hold their samples in memory also give them whole as tensors (inputs(), targets()).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace brisk::data {

// One sample: an input (image, features, tokens) and its target (class index, values).
struct Example {
  Tensor input{};
  Tensor target{};
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;

  // The whole dataset as tensors, row i being sample i: inputs (N, ...) and targets (N, ...)
  // (undefined when the samples have none). Datasets that hold tensors in memory give them:
  // TensorDataset, CsvDataset and FashionMNIST return their tensors (no copy); Subset and
  // ConcatDataset gather (a copy) from parts that can. has_tensors() says whether a dataset
  // can; the others (ImageFolder, which decodes lazily) throw a brisk::Error.
  virtual bool has_tensors() const { return false; }
  virtual Tensor inputs() const;
  virtual Tensor targets() const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// Rows of `inputs` and `targets` (same first dim); samples are views, no copies.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  bool has_tensors() const override { return true; }
  Tensor inputs() const override { return inputs_; }
  Tensor targets() const override { return targets_; }

 private:
  Tensor inputs_, targets_;
};

// The samples of `base` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(DatasetPtr base, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t index) const override;
  const std::vector<int64_t>& indices() const { return indices_; }
  bool has_tensors() const override { return base_->has_tensors(); }
  Tensor inputs() const override;  // the base's rows at indices() (a copy)
  Tensor targets() const override;

 private:
  DatasetPtr base_;
  std::vector<int64_t> indices_;
};

// Datasets one after another.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<DatasetPtr> parts);
  int64_t size() const override { return offsets_.back(); }
  Example get(int64_t index) const override;
  bool has_tensors() const override;
  Tensor inputs() const override;  // the parts' tensors concatenated (a copy)
  Tensor targets() const override;

 private:
  std::vector<DatasetPtr> parts_;
  std::vector<int64_t> offsets_;  // offsets_[i]: first index of part i; back(): total
};

// Splits `base` into disjoint random subsets of the given lengths (which must add up to its
// size), reproducibly from `seed`.
std::vector<std::shared_ptr<Subset>> random_split(DatasetPtr base, const std::vector<int64_t>& lengths, uint64_t seed);

// Checks an index against a size; `who` names the dataset in the error.
void check_index(int64_t index, int64_t size, const char* who);

}  // namespace brisk::data
