// data/dataset.cpp: TensorDataset, Subset, ConcatDataset, random_split, and the datasets'
// tensors as a whole (inputs(), targets()).
#include "data/dataset.h"

#include <algorithm>
#include <numeric>

#include "engine/functions.h"
#include "engine/random.h"

namespace brisk::data {

void check_index(int64_t index, int64_t size, const char* who) {
  BRISK_CHECK(index >= 0 && index < size, who, ": index ", index, " is out of range for ", size, " samples");
}

namespace {

[[noreturn]] void no_tensors(const char* what, int64_t size) {
  BRISK_FAIL("Dataset::", what, ": this dataset (", size,
             " samples) does not hold its samples as tensors (has_tensors() is false); "
             "read them with get(i) or a DataLoader");
}

}  // namespace

Tensor Dataset::inputs() const { no_tensors("inputs", size()); }
Tensor Dataset::targets() const { no_tensors("targets", size()); }

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  BRISK_CHECK(inputs_.defined() && inputs_.dim() >= 1, "TensorDataset: inputs need a first (sample) dim");
  BRISK_CHECK(!targets_.defined() || (targets_.dim() >= 1 && targets_.size(0) == inputs_.size(0)),
              "TensorDataset: inputs ", inputs_.sizes(), " and targets ", targets_.sizes(),
              " differ in the number of samples");
}

Example TensorDataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset");
  return {inputs_.select(0, index), targets_.defined() ? targets_.select(0, index) : Tensor()};
}

Subset::Subset(DatasetPtr base, std::vector<int64_t> indices) : base_(std::move(base)), indices_(std::move(indices)) {
  for (int64_t i : indices_) check_index(i, base_->size(), "Subset");
}

Example Subset::get(int64_t index) const {
  check_index(index, size(), "Subset");
  return base_->get(indices_[size_t(index)]);
}

namespace {

// Rows `indices` of t (undefined stays undefined).
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& indices) {
  if (!t.defined()) return t;
  std::vector<double> idx(indices.begin(), indices.end());
  return index_select(t, 0, from_vector(idx, {int64_t(idx.size())}, DType::I64, t.device()));
}

}  // namespace

Tensor Subset::inputs() const {
  BRISK_CHECK(base_->has_tensors(), "Subset: its base dataset does not hold its samples as tensors");
  return take_rows(base_->inputs(), indices_);
}

Tensor Subset::targets() const {
  BRISK_CHECK(base_->has_tensors(), "Subset: its base dataset does not hold its samples as tensors");
  return take_rows(base_->targets(), indices_);
}

ConcatDataset::ConcatDataset(std::vector<DatasetPtr> parts) : parts_(std::move(parts)) {
  offsets_.push_back(0);
  for (const auto& p : parts_) offsets_.push_back(offsets_.back() + p->size());
}

Example ConcatDataset::get(int64_t index) const {
  check_index(index, size(), "ConcatDataset");
  size_t part = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin() - 1);
  return parts_[part]->get(index - offsets_[part]);
}

bool ConcatDataset::has_tensors() const {
  return !parts_.empty() &&
         std::all_of(parts_.begin(), parts_.end(), [](const DatasetPtr& p) { return p->has_tensors(); });
}

Tensor ConcatDataset::inputs() const {
  BRISK_CHECK(has_tensors(), "ConcatDataset: some part does not hold its samples as tensors (or there are none)");
  std::vector<Tensor> all;
  for (const auto& p : parts_) all.push_back(p->inputs());
  return cat(all, 0);
}

Tensor ConcatDataset::targets() const {
  BRISK_CHECK(has_tensors(), "ConcatDataset: some part does not hold its samples as tensors (or there are none)");
  std::vector<Tensor> all;
  for (const auto& p : parts_) all.push_back(p->targets());
  bool none = std::all_of(all.begin(), all.end(), [](const Tensor& t) { return !t.defined(); });
  if (none) return Tensor();
  for (const Tensor& t : all) BRISK_CHECK(t.defined(), "ConcatDataset: some parts have targets and some do not");
  return cat(all, 0);
}

std::vector<std::shared_ptr<Subset>> random_split(DatasetPtr base, const std::vector<int64_t>& lengths, uint64_t seed) {
  int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  BRISK_CHECK(total == base->size(), "random_split: lengths add up to ", total, " but the dataset has ", base->size(),
              " samples");
  // Fisher-Yates with Philox draws: reproducible from the seed alone.
  std::vector<int64_t> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = total - 1; i > 0; --i) {
    Philox4 r = philox(seed, uint64_t(i), /*subsequence=*/0x5b117);
    int64_t j = int64_t(((uint64_t(r.v[0]) << 32) | r.v[1]) % uint64_t(i + 1));
    std::swap(perm[size_t(i)], perm[size_t(j)]);
  }
  std::vector<std::shared_ptr<Subset>> out;
  int64_t start = 0;
  for (int64_t len : lengths) {
    out.push_back(
        std::make_shared<Subset>(base, std::vector<int64_t>(perm.begin() + start, perm.begin() + start + len)));
    start += len;
  }
  return out;
}

}  // namespace brisk::data
