// engine/indexing.h: tensor indexing the way PyTorch's C++ API writes it,
//   using namespace brisk::indexing;
//   x.index({Slice(0, 2), 3, None, Ellipsis})       // x[0:2, 3, None, ...]
//   x.index({mask})                                  // x[mask], mask Bool
//   x.index({Slice(), idx})                          // x[:, idx], idx I64 of any shape
//   x.index_put_({mask}, 0.0);  y = index_put(x, {idx}, v, /*accumulate=*/true);
// Integers select (the dim goes), slices keep a dim (negative and out-of-range bounds clip as in
// Python), None inserts a dim of size 1, one Ellipsis stands for the dims not named, a Bool mask
// covers as many dims as it has (those dims become one, of the mask's count), an integer tensor
// indexes one dim; several tensor indices broadcast together and pick elements pairwise, their
// result dims in place when the indexed dims are adjacent, else first (x.index({i, Slice(), j})),
// with PyTorch's rules (Note [Advanced indexing] in engine/indexing.cpp). Views where PyTorch
// gives views (integers, slices, None, Ellipsis); copies for tensor indices. Everything is
// differentiable in x (and in the values of index_put). A composite over slice, select,
// unsqueeze, index_select and index_add: no op of its own.
// Not here: the ops it is built from (engine/ops/shape.cpp, engine/ops/index.cpp), nonzero and
// masked_select (engine/functions.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "engine/tensor.h"

namespace brisk::indexing {

struct NoneIndex {};
struct EllipsisIndex {};
inline constexpr NoneIndex None{};
inline constexpr EllipsisIndex Ellipsis{};

// start:stop:step, each bound optional (Slice() is `:`).
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt, int64_t step = 1)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start{};
  std::optional<int64_t> stop{};
  int64_t step = 1;
};

class TensorIndex {
 public:
  enum class Kind { Integer, Slice, None, Ellipsis, Tensor };
  TensorIndex(int64_t i) : kind_(Kind::Integer), integer_(i) {}                 // NOLINT: x.index({3})
  TensorIndex(int i) : kind_(Kind::Integer), integer_(i) {}                     // NOLINT
  TensorIndex(indexing::Slice s) : kind_(Kind::Slice), slice_(s) {}             // NOLINT
  TensorIndex(NoneIndex) : kind_(Kind::None) {}                                 // NOLINT
  TensorIndex(EllipsisIndex) : kind_(Kind::Ellipsis) {}                         // NOLINT
  TensorIndex(brisk::Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT: Bool mask or integers
  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  const indexing::Slice& slice() const { return slice_; }
  const brisk::Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  indexing::Slice slice_{};
  brisk::Tensor tensor_{};
};

}  // namespace brisk::indexing

namespace brisk {

Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
// x with the indexed elements replaced by values (broadcast to the indexed shape), or with
// values added when accumulate (duplicates then add up; without accumulate a duplicate
// position is an error, since which value wins would be arbitrary).
Tensor index_put(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                 bool accumulate = false);

}  // namespace brisk
