// opcheck/specs_index.cpp: specs of cat, stack, index_select, index_add, gather, scatter_add and
// embedding (engine/ops/index.cpp). References are plain loops over row-major positions.
// Cases cover negative dims, repeated indices, size-0 and 0-dim tensors; gradcheck covers
// every backward (cat -> slices, gather <-> scatter_add, index_select <-> index_add).
// Not here: error messages and threading (tests/test_index.cpp).
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using Cases = std::function<std::vector<OpCase>()>;

// ---- row-major positions for the references
Shape at_least_1d(const Shape& s) { return s.empty() ? Shape{1} : s; }

std::vector<int64_t> unravel(int64_t k, const Shape& sizes) {
  std::vector<int64_t> idx(size_t(sizes.size()), 0);
  for (int d = sizes.size() - 1; d >= 0; --d) {
    idx[size_t(d)] = k % sizes[d];
    k /= sizes[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& sizes) {
  int64_t k = 0;
  for (int d = 0; d < sizes.size(); ++d) k = k * sizes[d] + idx[size_t(d)];
  return k;
}

int wrap(int64_t dim, int ndim) { return int(dim < 0 ? dim + std::max(ndim, 1) : dim); }

std::vector<int64_t> values_i64(const Tensor& t) { return t.to_vector<int64_t>(); }

// ---- references
Tensor cat_ref(const std::vector<Tensor>& in, int64_t dim) {
  std::vector<const Tensor*> parts;
  for (const Tensor& t : in) {
    bool legacy_empty = t.dim() == 1 && t.numel() == 0;
    if (!legacy_empty) parts.push_back(&t);
  }
  if (parts.empty()) return from_vector({}, {0}, DType::F64);
  const Shape& ref = parts[0]->sizes();
  const int d = wrap(dim, ref.size());
  Shape sizes = ref;
  sizes[d] = 0;
  for (const Tensor* t : parts) sizes[d] += t->sizes()[d];
  int64_t outer = 1;
  for (int k = 0; k < d; ++k) outer *= ref[k];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor* t : parts) {
      std::vector<double> v = t->to_vector<double>();
      int64_t chunk = outer == 0 ? 0 : t->numel() / outer;
      out.insert(out.end(), v.begin() + o * chunk, v.begin() + (o + 1) * chunk);
    }
  }
  return from_vector(out, sizes, DType::F64);
}

Tensor index_select_ref(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> xv = x.to_vector<double>();
  std::vector<int64_t> iv = values_i64(index);
  if (x.dim() == 0) return from_vector({xv[0]}, {}, DType::F64);
  const int d = wrap(dim, x.dim());
  Shape sizes = x.sizes();
  sizes[d] = int64_t(iv.size());
  std::vector<double> out(size_t(sizes.numel()));
  for (int64_t k = 0; k < sizes.numel(); ++k) {
    std::vector<int64_t> pos = unravel(k, sizes);
    pos[size_t(d)] = iv[size_t(pos[size_t(d)])];
    out[size_t(k)] = xv[size_t(ravel(pos, x.sizes()))];
  }
  return from_vector(out, sizes, DType::F64);
}

Tensor index_add_ref(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<double> out = x.to_vector<double>();
  std::vector<double> sv = src.to_vector<double>();
  std::vector<int64_t> iv = values_i64(index);
  const int d = wrap(dim, x.dim());
  const Shape xs = at_least_1d(x.sizes());
  const Shape ss = at_least_1d(src.sizes());
  for (int64_t k = 0; k < ss.numel(); ++k) {
    std::vector<int64_t> pos = unravel(k, ss);
    pos[size_t(d)] = iv[size_t(pos[size_t(d)])];
    out[size_t(ravel(pos, xs))] += sv[size_t(k)];
  }
  return from_vector(out, x.sizes(), DType::F64);
}

Tensor gather_ref(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> xv = x.to_vector<double>();
  std::vector<int64_t> iv = values_i64(index);
  const int d = wrap(dim, x.dim());
  const Shape xs = at_least_1d(x.sizes());
  const Shape is = at_least_1d(index.sizes());
  std::vector<double> out(iv.size());
  for (int64_t k = 0; k < is.numel(); ++k) {
    std::vector<int64_t> pos = unravel(k, is);
    pos[size_t(d)] = iv[size_t(k)];
    out[size_t(k)] = xv[size_t(ravel(pos, xs))];
  }
  return from_vector(out, index.sizes(), DType::F64);
}

Tensor scatter_add_ref(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<double> out = x.to_vector<double>();
  std::vector<double> sv = src.to_vector<double>();
  std::vector<int64_t> iv = values_i64(index);
  const int d = wrap(dim, x.dim());
  const Shape xs = at_least_1d(x.sizes());
  const Shape is = at_least_1d(index.sizes());
  const Shape ss = at_least_1d(src.sizes());
  for (int64_t k = 0; k < is.numel(); ++k) {
    std::vector<int64_t> pos = unravel(k, is);
    double v = sv[size_t(ravel(pos, ss))];
    pos[size_t(d)] = iv[size_t(k)];
    out[size_t(ravel(pos, xs))] += v;
  }
  return from_vector(out, x.sizes(), DType::F64);
}

Tensor embedding_ref(const Tensor& weight, const Tensor& indices) {
  std::vector<double> wv = weight.to_vector<double>();
  std::vector<int64_t> iv = values_i64(indices);
  const int64_t D = weight.sizes()[1];
  std::vector<double> out;
  for (int64_t i : iv) out.insert(out.end(), wv.begin() + i * D, wv.begin() + (i + 1) * D);
  Shape sizes = indices.sizes();
  sizes.push_back(D);
  return from_vector(out, sizes, DType::F64);
}

Tensor u(const Shape& s, uint64_t seed) { return uniform_values(s, -1, 1, seed); }

// ---- specs
OpSpec cat_spec(int64_t dim, Cases cases) {
  OpSpec s;
  s.name = "cat dim " + std::to_string(dim);
  s.covers = {OpId::Cat};
  s.fn = [dim](const std::vector<Tensor>& in) { return cat(in, dim); };
  s.reference = [dim](const std::vector<Tensor>& in) { return cat_ref(in, dim); };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

OpSpec stack_spec(int64_t dim, Cases cases) {
  OpSpec s;
  s.name = "stack dim " + std::to_string(dim);
  s.covers = {OpId::Cat};
  s.fn = [dim](const std::vector<Tensor>& in) { return stack(in, dim); };
  s.reference = [dim](const std::vector<Tensor>& in) {
    std::vector<Tensor> parts;
    for (const Tensor& t : in) parts.push_back(unsqueeze(t.detach(), wrap(dim, t.dim() + 1)));
    return cat_ref(parts, dim);
  };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::BF16};
  return s;
}

OpSpec index_select_spec(int64_t dim, Cases cases) {
  OpSpec s;
  s.name = "index_select dim " + std::to_string(dim);
  s.covers = {OpId::IndexSelect, OpId::IndexAdd};  // index_add is its backward
  s.fn = [dim](const std::vector<Tensor>& in) { return index_select(in[0], dim, in[1]); };
  s.reference = [dim](const std::vector<Tensor>& in) { return index_select_ref(in[0], dim, in[1]); };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

OpSpec index_add_spec(int64_t dim, Cases cases) {
  OpSpec s;
  s.name = "index_add dim " + std::to_string(dim);
  s.covers = {OpId::IndexAdd};
  s.fn = [dim](const std::vector<Tensor>& in) { return index_add(in[0], dim, in[1], in[2]); };
  s.reference = [dim](const std::vector<Tensor>& in) { return index_add_ref(in[0], dim, in[1], in[2]); };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::BF16};
  return s;
}

OpSpec gather_spec(int64_t dim, Cases cases) {
  OpSpec s;
  s.name = "gather dim " + std::to_string(dim);
  s.covers = {OpId::Gather, OpId::ScatterAdd};  // scatter_add is its backward
  s.fn = [dim](const std::vector<Tensor>& in) { return gather(in[0], dim, in[1]); };
  s.reference = [dim](const std::vector<Tensor>& in) { return gather_ref(in[0], dim, in[1]); };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

OpSpec scatter_add_spec(int64_t dim, Cases cases) {
  OpSpec s;
  s.name = "scatter_add dim " + std::to_string(dim);
  s.covers = {OpId::ScatterAdd};
  s.fn = [dim](const std::vector<Tensor>& in) { return scatter_add(in[0], dim, in[1], in[2]); };
  s.reference = [dim](const std::vector<Tensor>& in) { return scatter_add_ref(in[0], dim, in[1], in[2]); };
  s.cases = std::move(cases);
  s.dtypes = {DType::F32, DType::BF16};
  return s;
}

void add_specs(std::vector<OpSpec>& specs) {
  specs.push_back(cat_spec(0, [] {
    return std::vector<OpCase>{
        {"(2, 3), (4, 3), (1, 3)", {u({2, 3}, 1), u({4, 3}, 2), u({1, 3}, 3)}},
        {"with a size-0 part (0, 3)", {u({2, 3}, 4), u({0, 3}, 5), u({1, 3}, 6)}},
        {"legacy empty (0) is skipped", {u({2, 3}, 7), u({0}, 8), u({2, 3}, 9)}},
        {"all empty (0, 3), (0, 3)", {u({0, 3}, 10), u({0, 3}, 11)}},
        {"one tensor (4)", {u({4}, 12)}},
        {"1-D (3), (2)", {u({3}, 13), u({2}, 14)}},
    };
  }));
  specs.push_back(cat_spec(-1, [] {
    return std::vector<OpCase>{
        {"(2, 3), (2, 1), (2, 0)", {u({2, 3}, 1), u({2, 1}, 2), u({2, 0}, 3)}},
        {"(2, 2, 3), (2, 2, 2)", {u({2, 2, 3}, 4), u({2, 2, 2}, 5)}},
    };
  }));
  specs.push_back(cat_spec(1, [] {
    return std::vector<OpCase>{
        {"(2, 3, 2), (2, 1, 2)", {u({2, 3, 2}, 1), u({2, 1, 2}, 2)}},
        {"(0, 2), (0, 3): empty rows", {u({0, 2}, 3), u({0, 3}, 4)}},
    };
  }));
  specs.push_back(stack_spec(0, [] {
    return std::vector<OpCase>{
        {"three (2, 3)", {u({2, 3}, 1), u({2, 3}, 2), u({2, 3}, 3)}},
        {"0-dim tensors", {u({}, 4), u({}, 5)}},
        {"size 0 (0, 2)", {u({0, 2}, 6), u({0, 2}, 7)}},
    };
  }));
  specs.push_back(stack_spec(-1, [] {
    return std::vector<OpCase>{
        {"two (2, 3)", {u({2, 3}, 1), u({2, 3}, 2)}},
    };
  }));

  specs.push_back(index_select_spec(0, [] {
    return std::vector<OpCase>{
        {"(5, 3) repeated indices", {u({5, 3}, 1), ints({4, 0, 4, 2}, {4})}},
        {"(4) empty index", {u({4}, 2), ints({}, {0})}},
        {"(0, 3) empty input and index", {u({0, 3}, 3), ints({}, {0})}},
        {"0-dim input", {u({}, 4), ints({0}, {1})}},
        {"0-dim index", {u({3, 2}, 5), ints({2}, {})}},
    };
  }));
  specs.push_back(index_select_spec(-1, [] {
    return std::vector<OpCase>{
        {"(3, 5)", {u({3, 5}, 1), ints({1, 1, 4}, {3})}},
        {"(2, 3, 4)", {u({2, 3, 4}, 2), ints({3, 0}, {2})}},
    };
  }));
  specs.push_back(index_select_spec(1, [] {
    return std::vector<OpCase>{
        {"(2, 3, 4)", {u({2, 3, 4}, 1), ints({2, 2, 0, 1, 2}, {5})}},
    };
  }));

  specs.push_back(index_add_spec(0, [] {
    return std::vector<OpCase>{
        {"(5, 3) repeated indices", {u({5, 3}, 1), ints({1, 3, 1, 1}, {4}), u({4, 3}, 2)}},
        {"empty index", {u({4, 2}, 3), ints({}, {0}), u({0, 2}, 4)}},
        {"0-dim input", {u({}, 5), ints({0}, {1}), u({}, 6)}},
        {"(0, 3) input", {u({0, 3}, 7), ints({}, {0}), u({0, 3}, 8)}},
    };
  }));
  specs.push_back(index_add_spec(-1, [] {
    return std::vector<OpCase>{
        {"(3, 4) repeated", {u({3, 4}, 1), ints({0, 3, 0}, {3}), u({3, 3}, 2)}},
        {"(2, 3, 4)", {u({2, 3, 4}, 3), ints({1, 1}, {2}), u({2, 3, 2}, 4)}},
    };
  }));

  specs.push_back(gather_spec(1, [] {
    return std::vector<OpCase>{
        {"(3, 4) repeated", {u({3, 4}, 1), ints({0, 3, 3, 3, 1, 1}, {3, 2})}},
        {"index smaller than input in dim 0", {u({3, 4}, 2), ints({2, 0, 1, 1}, {2, 2})}},
        {"size-0 index (3, 0)", {u({3, 4}, 3), ints({}, {3, 0})}},
    };
  }));
  specs.push_back(gather_spec(-2, [] {
    return std::vector<OpCase>{
        {"(3, 4) index (5, 2)", {u({3, 4}, 1), ints({0, 2, 2, 1, 0, 0, 1, 1, 2, 2}, {5, 2})}},
        {"(2, 3, 4)", {u({2, 3, 4}, 2), ints({2, 0, 1, 1, 0, 2, 2, 2}, {2, 2, 2})}},
    };
  }));
  specs.push_back(gather_spec(0, [] {
    return std::vector<OpCase>{
        {"0-dim", {u({}, 1), ints({0}, {})}},
        {"(4) index (6)", {u({4}, 2), ints({3, 3, 0, 1, 3, 2}, {6})}},
    };
  }));

  specs.push_back(scatter_add_spec(1, [] {
    return std::vector<OpCase>{
        {"(3, 4) repeated", {u({3, 4}, 1), ints({0, 3, 3, 3, 1, 1}, {3, 2}), u({3, 2}, 2)}},
        {"source larger than index", {u({3, 4}, 3), ints({2, 2, 0, 1}, {2, 2}), u({3, 3}, 4)}},
        {"size-0 index", {u({3, 4}, 5), ints({}, {3, 0}), u({3, 0}, 6)}},
    };
  }));
  specs.push_back(scatter_add_spec(0, [] {
    return std::vector<OpCase>{
        {"(3, 4) index (4, 4) repeated",
         {u({3, 4}, 1), ints({0, 1, 2, 0, 0, 0, 1, 2, 2, 2, 1, 0, 1, 1, 1, 1}, {4, 4}), u({4, 4}, 2)}},
        {"0-dim", {u({}, 3), ints({0}, {}), u({}, 4)}},
    };
  }));
  specs.push_back(scatter_add_spec(-1, [] {
    std::vector<int64_t> idx;
    for (int k = 0; k < 30; ++k) idx.push_back((k * 7) % 4);
    return std::vector<OpCase>{
        {"(2, 3, 4) index (2, 3, 5)", {u({2, 3, 4}, 1), ints(idx, {2, 3, 5}), u({2, 3, 5}, 2)}},
    };
  }));

  {
    OpSpec s;
    s.name = "embedding";
    s.covers = {OpId::IndexSelect, OpId::IndexAdd};
    s.fn = [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); };
    s.reference = [](const std::vector<Tensor>& in) { return embedding_ref(in[0], in[1]); };
    s.cases = [] {
      return std::vector<OpCase>{
          {"(5, 3) indices (2, 3) repeated", {u({5, 3}, 1), ints({4, 1, 1, 0, 4, 4}, {2, 3})}},
          {"0-dim indices", {u({5, 3}, 2), ints({3}, {})}},
          {"empty indices (2, 0)", {u({5, 3}, 3), ints({}, {2, 0})}},
      };
    };
    s.dtypes = {DType::F32, DType::BF16};
    specs.push_back(s);
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_index_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
