// opcheck/specs_linalg.cpp: specs of linear and matmul (engine/ops/linalg.cpp, kernels/cpu/gemm.cpp) against
// a plain triple loop: every torch.matmul shape rule (1-D operands, broadcast batch dims, size
// 0), transposed views read in place, products large enough to be blocked and threaded, and
// integer dtypes. Not here: the errors, gemm() and layouts read in place
// (tests/test_matmul.cpp); speed (examples/bench/bench_matmul.cpp).
#include <cmath>

#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

// torch.matmul by plain loops over to_vector values, in F64.
Tensor matmul_reference(const Tensor& a, const Tensor& b) {
  const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
  const Shape as = a_vector ? Shape{1, a.size(0)} : a.sizes();
  const Shape bs = b_vector ? Shape{b.size(0), 1} : b.sizes();
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  // Batch dims, aligned from the right; a size-1 dim repeats its single matrix.
  const int nd = std::max(as.size(), bs.size()) - 2;
  Shape batch = Shape::filled(nd, 1);
  auto batch_size = [nd](const Shape& s, int d) {
    int sd = d - (nd - (s.size() - 2));
    return sd >= 0 ? s[sd] : int64_t(1);
  };
  for (int d = 0; d < nd; ++d) batch[d] = batch_size(as, d) == 1 ? batch_size(bs, d) : batch_size(as, d);
  std::vector<double> out;
  for (int64_t e = 0; e < batch.numel(); ++e) {
    int64_t ea = 0, eb = 0, rest = e, stride_a = 1, stride_b = 1;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = rest % batch[d];
      rest /= batch[d];
      const int64_t sa = batch_size(as, d), sb = batch_size(bs, d);
      ea += (sa == 1 ? 0 : idx) * stride_a;
      eb += (sb == 1 ? 0 : idx) * stride_b;
      stride_a *= sa;
      stride_b *= sb;
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += va[size_t((ea * m + i) * k + p)] * vb[size_t((eb * k + p) * n + j)];
        out.push_back(acc);
      }
    }
  }
  Shape shape = batch;
  if (!a_vector) shape.push_back(m);
  if (!b_vector) shape.push_back(n);
  return from_vector(out, shape, DType::F64);
}

// torch.nn.functional.linear by plain loops: x (*, K) @ w (N, K)^T + bias (N), in F64.
Tensor linear_reference(const std::vector<Tensor>& in) {
  const Tensor &x = in[0], &w = in[1];
  const int64_t n = w.size(0), k = w.size(1);
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  const std::vector<double> vx = x.to_vector<double>(), vw = w.to_vector<double>();
  const std::vector<double> vb = in.size() == 3 ? in[2].to_vector<double>() : std::vector<double>(size_t(n), 0.0);
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = vb[size_t(j)];
      for (int64_t p = 0; p < k; ++p) acc += vx[size_t(i * k + p)] * vw[size_t(j * k + p)];
      out.push_back(acc);
    }
  }
  Shape shape = x.sizes();
  shape[shape.size() - 1] = n;
  return from_vector(out, shape, DType::F64);
}

OpCase two(const std::string& label, const Shape& a, const Shape& b, uint64_t seed) {
  return {label, {uniform_values(a, -1, 1, seed), uniform_values(b, -1, 1, seed + 100)}};
}

Tensor mT(const Tensor& x) { return transpose(x, -2, -1); }

// GELU in F64: the tanh form or the exact (erf) one.
double gelu_reference(double x, bool tanh_form) {
  return tanh_form ? 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
                   : 0.5 * x * (1 + std::erf(x * 0.7071067811865476));
}

// (64, 300) inputs where the GEMMs block and thread, against a weight of `w` (out, in) or
// (in, out) with a bias; seeds from `seed`.
OpCase blocked_linear_case(const std::string& label, const Shape& w, uint64_t seed) {
  OpCase c = two(label, {64, 300}, w, seed);
  c.inputs.push_back(uniform_values({w[0] == 300 ? w[1] : w[0]}, -1, 1, seed + 200));
  return c;
}

OpSpec matmul_spec(const std::string& name) {
  OpSpec s;
  s.name = name;
  s.covers = {OpId::Matmul};
  s.fn = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  s.reference = [](const std::vector<Tensor>& in) { return matmul_reference(in[0], in[1]); };
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

void add_specs(std::vector<OpSpec>& specs) {
  {
    // linear: one op (Note [Linear is an op]); the kernels start each row at the bias.
    OpSpec s;
    s.name = "linear";
    s.covers = {OpId::Linear};
    s.fn = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in.size() == 3 ? in[2] : Tensor()); };
    s.reference = linear_reference;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    s.integers = false;  // a floating op, as torch's
    s.cases = [] {
      auto three = [](const std::string& label, const Shape& x, int64_t n, uint64_t seed) {
        OpCase c = two(label, x, {n, x.back()}, seed);
        c.inputs.push_back(uniform_values({n}, -1, 1, seed + 200));
        return c;
      };
      return std::vector<OpCase>{
          two("(3, 4) with weight (5, 4), no bias", {3, 4}, {5, 4}, 41),
          three("(3, 4) with weight (5, 4) and bias", {3, 4}, 5, 42),
          three("one sample (4)", {4}, 6, 43),
          three("batched (2, 3, 4)", {2, 3, 4}, 5, 44),
          three("K = 0: the bias alone", {3, 0}, 4, 45),
          two("K = 0 without bias: zeros", {3, 0}, {4, 0}, 46),
          three("no rows (0, 4)", {0, 4}, 3, 47),
      };
    };
    s.tol_half = 3e-2;
    specs.push_back(s);
  }
  {
    // linear_in_out: the same op with the weight stored (in, out) (attrs.flag).
    OpSpec s;
    s.name = "linear_in_out";
    s.covers = {OpId::Linear};
    s.fn = [](const std::vector<Tensor>& in) { return linear_in_out(in[0], in[1], in.size() == 3 ? in[2] : Tensor()); };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<Tensor> t = in;
      t[1] = contiguous(transpose(in[1], 0, 1));
      return linear_reference(t);
    };
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    s.integers = false;
    s.cases = [] {
      auto with_bias = [](const std::string& label, const Shape& x, int64_t n, uint64_t seed) {
        OpCase c = two(label, x, {x.back(), n}, seed);
        c.inputs.push_back(uniform_values({n}, -1, 1, seed + 200));
        return c;
      };
      return std::vector<OpCase>{
          two("(3, 4) with weight (4, 5), no bias", {3, 4}, {4, 5}, 51),
          with_bias("batched (2, 3, 4) with weight (4, 5) and bias", {2, 3, 4}, 5, 52),
          with_bias("K = 0: the bias alone", {3, 0}, 4, 53),
      };
    };
    s.tol_half = 3e-2;
    specs.push_back(s);
  }
  {
    // Both weight layouts at a size the GEMM blocks and threads; no gradcheck (two products
    // per input element: the small cases above cover the gradients).
    OpSpec s;
    s.name = "linear (blocked, threaded)";
    s.covers = {OpId::Linear};
    s.fn = [](const std::vector<Tensor>& in) {
      return in[1].size(0) == in[0].size(-1) ? linear_in_out(in[0], in[1], in[2]) : linear(in[0], in[1], in[2]);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<Tensor> t = in;
      if (in[1].size(0) == in[0].size(-1)) t[1] = contiguous(transpose(in[1], 0, 1));
      return linear_reference(t);
    };
    s.grad = false;
    s.dtypes = {DType::F32};  // BF16's rounding over K = 300 terms is the small cases' business
    s.integers = false;
    s.cases = [] {
      return std::vector<OpCase>{blocked_linear_case("(64, 300) @ w (120, 300)^T + bias", {120, 300}, 55),
                                 blocked_linear_case("in_out: (64, 300) @ w (300, 120) + bias", {300, 120}, 56)};
    };
    s.tol_half = 3e-2;
    specs.push_back(s);
  }
  // linear_gelu: gelu(linear(x, w, bias)) as one op (Note [Linear with GELU]), both GELU
  // forms; its backward is gelu_backward then linear's.
  for (const bool tanh_form : {true, false}) {
    OpSpec s;
    s.name = tanh_form ? "linear_gelu (tanh)" : "linear_gelu (erf)";
    s.covers = {OpId::LinearGelu};
    s.fn = [tanh_form](const std::vector<Tensor>& in) {
      const bool in_out = in[1].size(0) == in[0].size(-1) && in[1].size(1) != in[0].size(-1);
      return linear_gelu(in[0], in[1], in.size() == 3 ? in[2] : Tensor(), tanh_form, in_out);
    };
    s.reference = [tanh_form](const std::vector<Tensor>& in) {
      std::vector<Tensor> t = in;
      if (in[1].size(0) == in[0].size(-1) && in[1].size(1) != in[0].size(-1)) t[1] = contiguous(transpose(in[1], 0, 1));
      return map_reference({linear_reference(t)},
                           [tanh_form](const std::vector<double>& v) { return gelu_reference(v[0], tanh_form); });
    };
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    s.integers = false;
    const uint64_t seed = tanh_form ? 60 : 70;
    s.cases = [seed] {
      auto three = [](const std::string& label, const Shape& x, const Shape& w, uint64_t sd) {
        OpCase c = two(label, x, w, sd);
        c.inputs.push_back(uniform_values({w[0] == x.back() && w[1] != x.back() ? w[1] : w[0]}, -1, 1, sd + 200));
        return c;
      };
      return std::vector<OpCase>{
          two("(3, 4) with weight (5, 4), no bias", {3, 4}, {5, 4}, seed + 1),
          three("(3, 4) with weight (5, 4) and bias", {3, 4}, {5, 4}, seed + 2),
          three("one sample (4)", {4}, {6, 4}, seed + 3),
          three("batched (2, 3, 4)", {2, 3, 4}, {5, 4}, seed + 4),
          three("in_out: (3, 4) with weight (4, 5) and bias", {3, 4}, {4, 5}, seed + 5),
          three("K = 0: gelu of the bias", {3, 0}, {4, 0}, seed + 6),
          three("no rows (0, 4)", {0, 4}, {3, 4}, seed + 7),
      };
    };
    s.tol_half = 3e-2;
    specs.push_back(s);
  }
  {
    // At a size where the GEMM blocks and threads, both weight layouts; gradients are the small
    // cases' business.
    OpSpec s;
    s.name = "linear_gelu (blocked, threaded)";
    s.covers = {OpId::LinearGelu};
    s.fn = [](const std::vector<Tensor>& in) {
      return linear_gelu(in[0], in[1], in[2], /*tanh=*/true, in[1].size(0) == in[0].size(-1));
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<Tensor> t = in;
      if (in[1].size(0) == in[0].size(-1)) t[1] = contiguous(transpose(in[1], 0, 1));
      return map_reference({linear_reference(t)},
                           [](const std::vector<double>& v) { return gelu_reference(v[0], /*tanh_form=*/true); });
    };
    s.grad = false;
    s.dtypes = {DType::F32};
    s.integers = false;
    s.cases = [] {
      return std::vector<OpCase>{blocked_linear_case("(64, 300) @ w (120, 300)^T + bias", {120, 300}, 81),
                                 blocked_linear_case("in_out: (64, 300) @ w (300, 130) + bias", {300, 130}, 82)};
    };
    s.tol_half = 3e-2;
    specs.push_back(s);
  }
  {
    OpSpec s = matmul_spec("matmul");
    s.cases = [] {
      return std::vector<OpCase>{
          two("dot (5) @ (5), 0-dim result", {5}, {5}, 1),
          two("(3, 4) @ (4, 5)", {3, 4}, {4, 5}, 2),
          two("(4) @ (4, 5)", {4}, {4, 5}, 3),
          two("(3, 4) @ (4)", {3, 4}, {4}, 4),
          two("M = 1: (1, 6) @ (6, 7)", {1, 6}, {6, 7}, 5),
          two("N = 1: (6, 7) @ (7, 1)", {6, 7}, {7, 1}, 6),
          two("(1, 1) @ (1, 1)", {1, 1}, {1, 1}, 7),
          two("batched (2, 3, 4) @ (2, 4, 5)", {2, 3, 4}, {2, 4, 5}, 8),
          two("batched @ matrix (2, 3, 4) @ (4, 5)", {2, 3, 4}, {4, 5}, 9),
          two("matrix @ batched (3, 4) @ (2, 4, 5)", {3, 4}, {2, 4, 5}, 10),
          two("broadcast batch (2, 1, 3, 4) @ (3, 4, 5)", {2, 1, 3, 4}, {3, 4, 5}, 11),
          two("broadcast batch (2, 1, 3, 4) @ (1, 5, 4, 2)", {2, 1, 3, 4}, {1, 5, 4, 2}, 12),
          two("(4) @ (2, 4, 5)", {4}, {2, 4, 5}, 13),
          two("(2, 3, 4) @ (4)", {2, 3, 4}, {4}, 14),
          two("K = 0 gives zeros: (3, 0) @ (0, 4)", {3, 0}, {0, 4}, 15),
          two("K = 0 batched: (2, 3, 0) @ (0, 4)", {2, 3, 0}, {0, 4}, 16),
          two("M = 0: (0, 4) @ (4, 5)", {0, 4}, {4, 5}, 17),
          two("N = 0: (3, 4) @ (4, 0)", {3, 4}, {4, 0}, 18),
          two("batch 0: (0, 3, 4) @ (4, 5)", {0, 3, 4}, {4, 5}, 19),
          two("dot of empty vectors (0) @ (0)", {0}, {0}, 20),
      };
    };
    specs.push_back(s);
  }
  // Transposed operands: the kernel reads them in place (unit stride in the other dim).
  struct Variant {
    const char* name;
    bool ta, tb;
  };
  for (Variant v : {Variant{"matmul a^T @ b", true, false}, Variant{"matmul a @ b^T", false, true},
                    Variant{"matmul a^T @ b^T", true, true}}) {
    OpSpec s = matmul_spec(v.name);
    const bool ta = v.ta, tb = v.tb;
    auto apply = [ta, tb](const std::vector<Tensor>& in) {
      return std::pair<Tensor, Tensor>{ta ? mT(in[0]) : in[0], tb ? mT(in[1]) : in[1]};
    };
    s.fn = [apply](const std::vector<Tensor>& in) {
      auto [a, b] = apply(in);
      return matmul(a, b);
    };
    s.reference = [apply](const std::vector<Tensor>& in) {
      auto [a, b] = apply(in);
      return matmul_reference(a, b);
    };
    // Stored shapes; the product sees (3, 4) @ (4, 5) and batched (2, 3, 4) @ (2, 4, 5).
    const Shape a2 = ta ? Shape{4, 3} : Shape{3, 4}, b2 = tb ? Shape{5, 4} : Shape{4, 5};
    const Shape a3 = ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, b3 = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
    const Shape a_big = ta ? Shape{90, 40} : Shape{40, 90}, b_big = tb ? Shape{50, 90} : Shape{90, 50};
    s.cases = [=] {
      return std::vector<OpCase>{two("matrices", a2, b2, 21), two("batched", a3, b3, 22),
                                 two("large enough to thread", a_big, b_big, 23)};
    };
    s.tol_half = 3e-2;  // BF16 inputs are off by up to 2^-9 each; over K = 90 terms that adds up
    specs.push_back(s);
  }
  {
    // Sizes past Eigen's cache blocks (K > kc) and past the threading threshold: one product
    // split across threads, a batch shared out across threads, a batch folded into rows.
    OpSpec s = matmul_spec("matmul (blocked, threaded)");
    s.cases = [] {
      return std::vector<OpCase>{
          two("(70, 700) @ (700, 130)", {70, 700}, {700, 130}, 31),
          two("batch shared out (6, 40, 300) @ (6, 300, 50)", {6, 40, 300}, {6, 300, 50}, 32),
          two("batch of 3, each split (3, 100, 200) @ (3, 200, 120)", {3, 100, 200}, {3, 200, 120}, 33),
          two("batch folded into rows (4, 50, 300) @ (300, 64)", {4, 50, 300}, {300, 64}, 34),
          two("matrix @ vector (300, 700) @ (700)", {300, 700}, {700}, 35),
      };
    };
    s.grad = false;  // gradcheck costs two products per input element; the small specs cover it
    // Rounding the inputs (2^-9 relative in BF16, 2^-24 in F32) moves each output by about
    // sqrt(K) * |a b| * that; the worst of ~10^4 outputs at K = 700 needs these.
    s.tol_f32 = 3e-5;
    s.tol_half = 8e-2;
    specs.push_back(s);
  }
  {
    OpSpec s = matmul_spec("matmul (integers)");
    s.cases = [] {
      return std::vector<OpCase>{
          {"I64 (2, 3) @ (3, 4)",
           {ints({1, -2, 3, 4, 5, -6}, {2, 3}), ints({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4})}},
          {"I64 broadcast (2, 1, 1, 2) @ (3, 2, 1)",
           {ints({1, 2, 3, 4}, {2, 1, 1, 2}), ints({1, -1, 2, 0, 5, 7}, {3, 2, 1})}},
          {"I64 dot (3) @ (3)", {ints({1, 2, 3}, {3}), ints({4, -5, 6}, {3})}},
      };
    };
    s.dtypes = {};
    s.grad = false;
    specs.push_back(s);
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_linalg_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
