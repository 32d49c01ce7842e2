// engine/indexing.cpp: Tensor::index and index_put (engine/indexing.h): a walk over the index
// list that maps each entry to slice / select / unsqueeze / index_select, and index_put as the
// same walk over a tensor of flat positions (arange), written back with index_add.
// Not here: the ops themselves (engine/ops/shape.cpp, engine/ops/index.cpp).
#include "engine/indexing.h"

#include <limits>

#include "engine/functions.h"

namespace brisk {

using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

namespace {

// How many dims of x an index entry consumes.
int64_t dims_used(const TensorIndex& i) {
  switch (i.kind()) {
    case Kind::Integer:
    case Kind::Slice: return 1;
    case Kind::Tensor: return i.tensor().dtype() == DType::Bool ? std::max<int64_t>(i.tensor().dim(), 1) : 1;
    default: return 0;
  }
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  BRISK_CHECK(x.defined(), "index: undefined tensor");
  int64_t used = 0, ellipses = 0, tensors = 0;
  for (const TensorIndex& i : indices) {
    used += dims_used(i);
    ellipses += i.kind() == Kind::Ellipsis;
    if (i.kind() == Kind::Tensor) {
      BRISK_CHECK(i.tensor().defined(), "index: an undefined tensor index");
      ++tensors;
    }
  }
  BRISK_CHECK(ellipses <= 1, "index: at most one Ellipsis, got ", ellipses);
  BRISK_CHECK(tensors <= 1,
              "index: more than one tensor index in one call is not supported (PyTorch pairs them); "
              "got ",
              tensors, " for ", x.str());
  BRISK_CHECK(used <= x.dim(), "index: too many indices (", used, " dims) for ", x.str());
  // The Ellipsis stands for full slices of the dims no other entry names.
  std::vector<TensorIndex> expanded;
  for (const TensorIndex& i : indices) {
    if (i.kind() == Kind::Ellipsis) {
      for (int64_t k = 0; k < x.dim() - used; ++k) expanded.emplace_back(indexing::Slice());
    } else {
      expanded.push_back(i);
    }
  }
  Tensor y = x;
  int64_t d = 0;  // the dim of y the next entry applies to
  for (const TensorIndex& i : expanded) {
    switch (i.kind()) {
      case Kind::Integer: {
        const int64_t n = y.sizes()[size_t(d)];
        BRISK_CHECK(i.integer() >= -n && i.integer() < n, "index: index ", i.integer(), " is out of range for dim ", d,
                    " of size ", n, " (", x.str(), ")");
        y = select(y, d, i.integer());
        break;
      }
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        BRISK_CHECK(s.step > 0, "index: slice step must be positive, got ", s.step);
        const int64_t n = y.sizes()[size_t(d)];
        y = slice(y, d, s.start.value_or(0), s.stop.value_or(n), s.step);
        ++d;
        break;
      }
      case Kind::None:
        y = unsqueeze(y, d);
        ++d;
        break;
      case Kind::Ellipsis: break;  // expanded above
      case Kind::Tensor: {
        const Tensor& t = i.tensor();
        if (t.dtype() == DType::Bool) {
          const int64_t k = std::max<int64_t>(t.dim(), 1);
          for (int64_t j = 0; j < t.dim(); ++j)
            BRISK_CHECK(t.sizes()[size_t(j)] == y.sizes()[size_t(d + j)], "index: the mask ", t.str(),
                        " does not match dims ", d, "..", d + k - 1, " of ", y.str());
          // Merge the mask's dims into one, keep the positions where it is true.
          Shape merged;
          for (int64_t j = 0; j < d; ++j) merged.push_back(y.sizes()[size_t(j)]);
          merged.push_back(-1);
          for (int64_t j = d + t.dim(); j < y.dim(); ++j) merged.push_back(y.sizes()[size_t(j)]);
          Tensor flat = t.dim() == 0 ? unsqueeze(y, d) : reshape(y, merged);
          Tensor pos = reshape(nonzero(reshape(t, {-1})), {-1});
          y = index_select(flat, d, pos.device() == y.device() ? pos : pos.to(y.device()));
        } else {
          BRISK_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32, "index: a tensor index must be Bool or ",
                      "integer, got ", t.str());
          Tensor idx = cast(t, DType::I64);
          const int64_t n = y.sizes()[size_t(d)];
          if (idx.numel() > 0) {
            const int64_t lo = min(idx).item<int64_t>(), hi = max(idx).item<int64_t>();
            BRISK_CHECK(lo >= -n && hi < n, "index: tensor index values [", lo, ", ", hi, "] are out of range for dim ",
                        d, " of size ", n, " (", x.str(), ")");
            idx = where(lt(idx, zeros({}, DType::I64, idx.device())), idx + n, idx);  // negative from the end
          }
          Tensor picked = index_select(y, d, reshape(idx, {-1}));
          Shape s;
          for (int64_t j = 0; j < d; ++j) s.push_back(y.sizes()[size_t(j)]);
          for (int64_t j = 0; j < idx.dim(); ++j) s.push_back(idx.sizes()[size_t(j)]);
          for (int64_t j = d + 1; j < y.dim(); ++j) s.push_back(y.sizes()[size_t(j)]);
          y = reshape(picked, s);
          d += idx.dim() - 1;
        }
        ++d;
        break;
      }
    }
  }
  return y;
}

Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  BRISK_CHECK(x.defined() && values.defined(), "index_put: undefined input");
  // The flat positions the same index selects, then one scatter of the values into them.
  Tensor positions = index(reshape(arange(x.numel(), DType::I64, x.device()), x.sizes()), indices);
  Tensor pos = reshape(contiguous(positions), {-1});
  Tensor v = values.dtype() == x.dtype() ? values : cast(values, x.dtype());
  v = reshape(contiguous(expand(v, positions.sizes())), {-1});
  Tensor flat = reshape(x, {-1});
  if (accumulate) return reshape(index_add(flat, 0, pos, v), x.sizes());
  Tensor hits =
      index_add(zeros({x.numel()}, DType::I64, x.device()), 0, pos, ones({pos.numel()}, DType::I64, x.device()));
  BRISK_CHECK(pos.numel() == 0 || max(hits).item<int64_t>() <= 1,
              "index_put: an element is indexed more than once without accumulate (which value wins is undefined)");
  Tensor cleared = masked_fill(flat, gt(hits, zeros({}, DType::I64, x.device())), 0.0);
  return reshape(index_add(cleared, 0, pos, v), x.sizes());
}

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return brisk::index(*this, std::vector<TensorIndex>(indices));
}

Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values, bool accumulate) {
  return copy_(brisk::index_put(*this, std::vector<TensorIndex>(indices), values, accumulate));
}

Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, double value) {
  return index_put_(indices, scalar_tensor(value, dtype(), device()), false);
}

}  // namespace brisk
