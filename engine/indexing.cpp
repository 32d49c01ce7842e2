// engine/indexing.cpp: Tensor::index and index_put (engine/indexing.h): a walk over the index
// list that maps each basic entry to slice / select / unsqueeze, then every tensor index to one
// index_select over the merged indexed dims (Note [Advanced indexing]), and index_put as the
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

// Note [Advanced indexing]
// As PyTorch (which differs from NumPy here): integers, slices and None apply first as views
// (select, slice, unsqueeze); then every tensor index (a Bool mask of k dims counts as k integer
// tensors, its nonzero() columns) broadcasts with the others to one shape B. When the dims they
// index are next to each other, B takes their place in the result; otherwise B comes first.
// The indexed dims are moved together (permute), merged into one (reshape) and read with one
// index_select of the combined flat index, so the gradient is index_select's.
Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  BRISK_CHECK(x.defined(), "index: undefined tensor");
  int64_t used = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    used += dims_used(i);
    ellipses += i.kind() == Kind::Ellipsis;
    if (i.kind() == Kind::Tensor) BRISK_CHECK(i.tensor().defined(), "index: an undefined tensor index");
  }
  BRISK_CHECK(ellipses <= 1, "index: at most one Ellipsis, got ", ellipses);
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
  // Pass 1: the basic entries as views; each tensor entry noted as (dim of y, I64 index).
  Tensor y = x;
  std::vector<std::pair<int64_t, Tensor>> adv;
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
          if (t.dim() == 0) {  // x[True] adds a dim of 1, x[False] one of 0
            y = unsqueeze(y, d);
            adv.emplace_back(d,
                             t.item<bool>() ? zeros({1}, DType::I64, y.device()) : zeros({0}, DType::I64, y.device()));
            ++d;
            break;
          }
          for (int64_t j = 0; j < t.dim(); ++j)
            BRISK_CHECK(d + j < y.dim() && t.sizes()[j] == y.sizes()[d + j], "index: the mask ", t.str(),
                        " does not match dims ", d, "..", d + t.dim() - 1, " of ", y.str());
          Tensor nz = nonzero(t);  // (count, k)
          if (!(nz.device() == y.device())) nz = nz.to(y.device());
          for (int64_t j = 0; j < t.dim(); ++j) adv.emplace_back(d + j, select(nz, 1, j));
          d += t.dim();
        } else {
          BRISK_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32, "index: a tensor index must be Bool or ",
                      "integer, got ", t.str());
          BRISK_CHECK(t.device() == y.device(), "index: the index ", t.str(), " is not on the device of ", x.str());
          Tensor idx = cast(t, DType::I64);
          const int64_t n = y.sizes()[size_t(d)];
          if (idx.numel() > 0) {
            const int64_t lo = min(idx).item<int64_t>(), hi = max(idx).item<int64_t>();
            BRISK_CHECK(lo >= -n && hi < n, "index: tensor index values [", lo, ", ", hi, "] are out of range for dim ",
                        d, " of size ", n, " (", x.str(), ")");
            idx = where(lt(idx, zeros({}, DType::I64, idx.device())), idx + n, idx);  // negative from the end
          }
          adv.emplace_back(d, idx);
          ++d;
        }
        break;
      }
    }
  }
  if (adv.empty()) return y;

  // Pass 2: broadcast the index tensors together.
  Shape b;
  for (const auto& [dim, t] : adv) {
    const Shape& s = t.sizes();
    Shape out;
    const int n = std::max(b.size(), s.size());
    for (int k = 0; k < n; ++k) {
      const int64_t p = k - (n - b.size()) >= 0 ? b[k - (n - b.size())] : 1;
      const int64_t q = k - (n - s.size()) >= 0 ? s[k - (n - s.size())] : 1;
      BRISK_CHECK(p == q || p == 1 || q == 1, "index: the tensor indices' shapes ", b, " and ", s,
                  " cannot be broadcast together");
      out.push_back(p == 1 ? q : p);
    }
    b = out;
  }
  bool adjacent = true;
  for (size_t k = 1; k < adv.size(); ++k) adjacent &= adv[k].first == adv[k - 1].first + 1;
  const int64_t first = adjacent ? adv.front().first : 0;
  // Move the indexed dims to `first`, in order, the others keeping theirs.
  std::vector<int64_t> order, rest;
  for (int64_t k = 0; k < y.dim(); ++k) {
    bool indexed = false;
    for (const auto& a : adv) indexed |= a.first == k;
    if (!indexed) rest.push_back(k);
  }
  order.assign(rest.begin(), rest.begin() + first);
  for (const auto& a : adv) order.push_back(a.first);
  order.insert(order.end(), rest.begin() + first, rest.end());
  Tensor moved = permute(y, Shape(order));
  // Merge the indexed dims; the combined index is sum_j idx_j * (product of later indexed sizes).
  Shape merged;
  for (int64_t k = 0; k < first; ++k) merged.push_back(moved.sizes()[k]);
  merged.push_back(-1);
  for (int64_t k = first + int64_t(adv.size()); k < moved.dim(); ++k) merged.push_back(moved.sizes()[k]);
  Tensor flat = reshape(moved, merged);
  Tensor combined;
  int64_t stride = 1;
  for (size_t k = adv.size(); k-- > 0;) {
    Tensor term = expand(adv[k].second, b);
    if (stride != 1) term = term * scalar_tensor(double(stride), DType::I64, term.device());
    combined = combined.defined() ? combined + term : term;
    stride *= y.sizes()[adv[k].first];
  }
  Tensor picked = index_select(flat, first, reshape(contiguous(combined), {-1}));
  Shape out;
  for (int64_t k = 0; k < first; ++k) out.push_back(moved.sizes()[k]);
  for (int64_t k = 0; k < b.size(); ++k) out.push_back(b[k]);
  for (int64_t k = first + int64_t(adv.size()); k < moved.dim(); ++k) out.push_back(moved.sizes()[k]);
  return reshape(picked, out);
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
