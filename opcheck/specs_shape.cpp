// opcheck/specs_shape.cpp: specs of the view ops and device copies (engine/ops/shape.cpp).
// References rebuild the expected values by index arithmetic on the host.
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

// Row-major multi-index of flat k in `sizes`.
std::vector<int64_t> unravel(int64_t k, const Shape& sizes) {
  std::vector<int64_t> idx(size_t(sizes.size()));
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

// out[i] = in[map(i)]: a reference for any view, given how an output index reads the input.
Tensor gather_reference(const Tensor& in, const Shape& out_sizes,
                        const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& map) {
  std::vector<double> v = in.to_vector<double>(), out(size_t(out_sizes.numel()));
  for (int64_t k = 0; k < out_sizes.numel(); ++k)
    out[size_t(k)] = v[size_t(ravel(map(unravel(k, out_sizes)), in.sizes()))];
  return from_vector(out, out_sizes, DType::F64);
}

std::function<std::vector<OpCase>()> cases_3d() {
  return [] {
    return std::vector<OpCase>{{"(2, 3, 4)", {uniform_values({2, 3, 4}, -1, 1, 1)}},
                               {"(1, 3, 1)", {uniform_values({1, 3, 1}, -1, 1, 2)}}};
  };
}

void add_specs(std::vector<OpSpec>& specs) {
  {
    OpSpec s;
    s.name = "view / reshape / flatten / squeeze / unsqueeze";
    s.covers = {OpId::View};
    // A chain of reshapes whose values keep row-major order; times a weight so the gradient
    // of each element differs.
    s.fn = [](const std::vector<Tensor>& in) {
      Tensor x = in[0];
      Tensor y = x.view({-1}).unsqueeze(0).reshape({x.size(0), -1}).flatten().unsqueeze(1).squeeze(1);
      return y * arange(0.5, 0.5 + double(y.numel()), 1.0, DType::F64);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> v = in[0].to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) v[i] *= 0.5 + double(i);
      return from_vector(v, {int64_t(v.size())}, DType::F64);
    };
    s.cases = cases_3d();
    s.dtypes = {DType::F32, DType::BF16};
    s.rejects_layouts = true;  // view of a transposed tensor is an error, as in PyTorch
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "permute / transpose";
    s.covers = {OpId::Permute};
    s.fn = [](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}).transpose(0, 2).contiguous(); };
    s.reference = [](const std::vector<Tensor>& in) {
      const Shape& sz = in[0].sizes();
      // permute {2, 0, 1} then swap dims 0 and 2: result dims (sz1, sz0, sz2).
      return gather_reference(in[0], {sz[1], sz[0], sz[2]}, [](const std::vector<int64_t>& o) {
        return std::vector<int64_t>{o[1], o[0], o[2]};
      });
    };
    s.cases = cases_3d();
    s.dtypes = {DType::F32, DType::F16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "expand";
    s.covers = {OpId::Expand};
    s.fn = [](const std::vector<Tensor>& in) { return in[0].expand({2, 3, 4}) * 1.0; };
    s.reference = [](const std::vector<Tensor>& in) {
      const Shape& sz = in[0].sizes();
      int lead = 3 - sz.size();
      return gather_reference(in[0], {2, 3, 4}, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> i;
        for (int d = 0; d < sz.size(); ++d) i.push_back(sz[d] == 1 ? 0 : o[size_t(d + lead)]);
        return i;
      });
    };
    s.cases = [] {
      return std::vector<OpCase>{{"(3, 1) -> (2, 3, 4)", {uniform_values({3, 1}, -1, 1, 1)}},
                                 {"(4) -> (2, 3, 4)", {uniform_values({4}, -1, 1, 2)}},
                                 {"0-dim -> (2, 3, 4)", {uniform_values({}, -1, 1, 3)}}};
    };
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "slice / narrow / select";
    s.covers = {OpId::Slice, OpId::SliceBackward};
    s.fn = [](const std::vector<Tensor>& in) { return in[0].slice(2, 1, 4, 2).narrow(1, 1, 2).select(0, -1) * 1.0; };
    s.reference = [](const std::vector<Tensor>& in) {
      const Shape& sz = in[0].sizes();
      int64_t w = (std::min<int64_t>(4, sz[2]) - 1 + 1) / 2;
      return gather_reference(in[0], {2, w}, [&](const std::vector<int64_t>& o) {
        return std::vector<int64_t>{sz[0] - 1, o[0] + 1, 1 + 2 * o[1]};
      });
    };
    s.cases = [] {
      return std::vector<OpCase>{{"(2, 3, 5)", {uniform_values({2, 3, 5}, -1, 1, 1)}},
                                 {"(3, 4, 4)", {uniform_values({3, 4, 4}, -1, 1, 2)}}};
    };
    s.dtypes = {DType::F32, DType::BF16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "to_device (to the same backend and back)";
    s.covers = {OpId::ToDevice};
    // On a CPU-only build the copy goes through the op only when the devices differ; the
    // CUDA tests run this spec across devices. Here: clone via to(cpu) of a CPU tensor is the
    // identity, and the op itself is exercised below through call().
    s.fn = [](const std::vector<Tensor>& in) {
      Attrs a;
      a.device = Device::cpu();
      Tensor x = in[0].contiguous();
      return call1(OpId::ToDevice, {x}, a) * 2.0;
    };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [](const std::vector<double>& v) { return v[0] * 2.0; });
    };
    s.cases = cases_3d();
    specs.push_back(s);
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_shape_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
