// tests/test_linalg.cpp: brisk::linalg beyond its specs (opcheck/specs_linalg_decomp.cpp): the
// defining identities (A X = B, Q R = A, A V = V diag(w), L L^T = A) on threaded batches; parity
// with PyTorch 1.13 on the fixed cases of tests/data/linalg/linalg.json
// (tests/make_linalg_reference.py), outputs and gradients; the errors; second derivatives.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "opcheck/spec.h"
#include "tests/paths.h"

using namespace brisk;
using opcheck::mT;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  std::vector<double> x = cast(a, DType::F64).to_vector<double>(), y = cast(b, DType::F64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

Tensor strictly_upper(int64_t n) {
  std::vector<double> v(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) v[size_t(i * n + j)] = 1.0;
  }
  return from_vector(v, {n, n}, DType::F64);
}

}  // namespace

TEST_CASE("linalg: the decompositions satisfy their defining identities on a threaded batch") {
  // 16 matrices of 24 x 24: enough work that the batch loop runs on several threads.
  Tensor a = opcheck::well_conditioned({16, 24, 24}, 31);
  Tensor b = opcheck::uniform_values({16, 24, 5}, -1, 1, 32);
  CHECK(max_abs_diff(matmul(a, linalg::solve(a, b)), b) < 1e-12);
  CHECK(max_abs_diff(matmul(a, linalg::inv(a)), expand(opcheck::eye_like(24), {16, 24, 24})) < 1e-12);
  Tensor s = opcheck::spd({16, 24, 24}, 33);
  Tensor l = linalg::cholesky(s);
  CHECK(max_abs_diff(matmul(l, mT(l)), s) < 1e-11);
  CHECK(max_abs_diff(l * strictly_upper(24), zeros_like(l)) == 0);
  Tensor t = opcheck::uniform_values({16, 30, 24}, -1, 1, 34);
  auto [q, r] = linalg::qr(t);
  CHECK(max_abs_diff(matmul(q, r), t) < 1e-12);
  CHECK(max_abs_diff(matmul(mT(q), q), expand(opcheck::eye_like(24), {16, 24, 24})) < 1e-12);
  Tensor h = opcheck::sym(opcheck::uniform_values({16, 24, 24}, -1, 1, 35));
  auto [w, v] = linalg::eigh(h);
  CHECK(max_abs_diff(matmul(h, v), v * unsqueeze(w, -2)) < 1e-12);
  std::vector<double> ws = w.to_vector<double>();
  for (size_t i = 0; i + 1 < ws.size(); ++i) {
    if ((i + 1) % 24) CHECK(ws[i] <= ws[i + 1]);  // ascending within each matrix
  }
  auto [sign, logabsdet] = linalg::slogdet(a);
  CHECK(max_abs_diff(linalg::det(a), sign * exp(logabsdet)) == 0);
}

namespace {

using json = nlohmann::json;

double number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    return s == "inf" ? HUGE_VAL : -HUGE_VAL;
  }
  return v.get<double>();
}

Tensor tensor_of(const json& rec) {
  std::vector<double> values;
  for (const json& v : rec["values"]) values.push_back(number(v));
  return from_vector(values, Shape(rec["shape"].get<std::vector<int64_t>>()), DType::F64);
}

// The outputs brisk gives for a case of tests/make_linalg_reference.py (same order).
std::vector<Tensor> run_case(const std::string& op, const std::vector<Tensor>& in, const json& params) {
  if (op == "solve") return {linalg::solve(in[0], in[1])};
  if (op == "inv") return {linalg::inv(in[0])};
  if (op == "det") return {linalg::det(in[0])};
  if (op == "slogdet") {
    auto [sign, logabsdet] = linalg::slogdet(in[0]);
    return {sign, logabsdet};
  }
  if (op == "cholesky") return {linalg::cholesky(in[0], params.value("upper", false))};
  if (op == "qr") {
    auto [q, r] = linalg::qr(in[0]);
    return {q, r};
  }
  if (op == "eigh") {
    auto [w, v] = linalg::eigh(in[0]);
    return {w, v * v};
  }
  if (op == "lstsq") return {linalg::lstsq(in[0], in[1])};
  FAIL("unknown op in linalg.json: " << op);
  return {};
}

bool same(const Tensor& got, const Tensor& want, double tol) {
  if (!(got.sizes() == want.sizes())) return false;
  std::vector<double> x = got.to_vector<double>(), y = want.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(y[i]) ? x[i] != y[i] : !(std::abs(x[i] - y[i]) <= tol * (1 + std::abs(y[i])))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("linalg: outputs and gradients match PyTorch 1.13 on the committed cases") {
  const std::filesystem::path path = ::brisk::test::data_dir() / "linalg" / "linalg.json";
  std::ifstream file(path);
  REQUIRE_MESSAGE(file.good(), "missing reference file ", path.string());
  const json data = json::parse(file);
  int checked = 0;
  for (const json& c : data["cases"]) {
    const std::string op = c["op"].get<std::string>();
    std::vector<Tensor> in;
    for (const json& r : c["inputs"]) in.push_back(tensor_of(r).requires_grad_());
    INFO(op << " of " << in[0].sizes());
    std::vector<Tensor> out = run_case(op, in, c["params"]);
    REQUIRE(out.size() == c["outputs"].size());
    // LAPACK and Eigen take different rounding paths: agreement to ~1e-13 is all there is.
    for (size_t i = 0; i < out.size(); ++i) {
      const Tensor want = tensor_of(c["outputs"][i]);
      CHECK_MESSAGE(same(out[i].detach(), want, 1e-10), "output ", i, ": brisk ", out[i], "\ntorch ", want);
    }
    if (c.contains("grads")) {
      Tensor loss = zeros({}, DType::F64);
      for (size_t i = 0; i < out.size(); ++i) loss = loss + sum(out[i] * tensor_of(c["upstream"][i]));
      loss.backward();
      for (size_t i = 0; i < in.size(); ++i) {
        const Tensor want = tensor_of(c["grads"][i]);
        CHECK_MESSAGE(same(in[i].grad(), want, 1e-9), "grad ", i, ": brisk ", in[i].grad(), "\ntorch ", want);
      }
    }
    ++checked;
  }
  CHECK(checked == 23);
}

TEST_CASE("linalg: wrong shapes, dtypes and batch dims are errors naming the op and the shapes") {
  CHECK_THROWS_WITH_AS(linalg::solve(ones({2, 3}), ones({2, 1})),
                       "linalg_solve: expects square matrices (..., n, n), got (2, 3)", Error);
  CHECK_THROWS_WITH_AS(linalg::solve(ones({3, 3}), ones({2, 1})),
                       "linalg_solve: shape mismatch A (3, 3), B (2, 1) (B must be (..., n, k) with A's batch dims)",
                       Error);
  CHECK_THROWS_WITH_AS(linalg::solve(ones({2, 3, 3}), ones({4, 3, 1})),
                       "linalg_solve: batch dims do not broadcast A (2, 3, 3), B (4, 3, 1)", Error);
  CHECK_THROWS_WITH_AS(linalg::inv(ones({3})),
                       "linalg_inv: expects a matrix or a batch of matrices (..., m, n), got (3)", Error);
  CHECK_THROWS_WITH_AS(linalg::det(ones({2, 2}, DType::I64)),
                       "linalg_det: expects F32 or F64 matrices, got Tensor(I64, cpu, (2, 2))", Error);
  CHECK_THROWS_WITH_AS(linalg::cholesky(ones({2, 2}, DType::F16)),
                       "linalg_cholesky: expects F32 or F64 matrices, got Tensor(F16, cpu, (2, 2))", Error);
  CHECK_THROWS_WITH_AS(linalg::eigh(ones({2, 3})), "linalg_eigh: expects square matrices (..., n, n), got (2, 3)",
                       Error);
  CHECK_THROWS_WITH_AS(linalg::slogdet(ones({2, 3})), "linalg_slogdet: expects square matrices (..., n, n), got (2, 3)",
                       Error);
  CHECK_THROWS_WITH_AS(linalg::qr(ones({4}, DType::I32)),
                       "linalg_qr: expects F32 or F64 matrices, got Tensor(I32, cpu, (4))", Error);
  CHECK_THROWS_WITH_AS(linalg::lstsq(ones({2, 3}), ones({2, 1})),
                       "linalg_lstsq: A must be tall or square (..., m, n) with m >= n, got (2, 3) (wide systems are "
                       "not supported)",
                       Error);
  CHECK_THROWS_WITH_AS(linalg::solve(ones({2, 2}), ones({2, 1}, DType::F64)),
                       "linalg_solve: dtypes differ (A Tensor(F32, cpu, (2, 2)), B Tensor(F64, cpu, (2, 1)))", Error);
}

TEST_CASE("linalg: a singular matrix or one not positive-definite is an error naming the batch element") {
  // Batch element 1 is exactly singular: its LU has a zero in U's second diagonal element.
  Tensor a = from_vector({2, 0, 0, 2, 1, 2, 2, 4}, {2, 2, 2}, DType::F64);
  const std::string singular =
      "(batch element 1) the diagonal element 2 of the LU factor is zero: A (2, 2, 2) is singular";
  const std::string solve_message = "linalg_solve: " + singular, inv_message = "linalg_inv: " + singular;
  CHECK_THROWS_WITH_AS(linalg::solve(a, ones({2, 2, 1}, DType::F64)), doctest::Contains(solve_message.c_str()), Error);
  CHECK_THROWS_WITH_AS(linalg::inv(a), doctest::Contains(inv_message.c_str()), Error);
  // det and slogdet of a singular matrix are values, as in PyTorch: 0, and (0, -inf).
  auto [sign, logabsdet] = linalg::slogdet(a);
  CHECK(sign.to_vector<double>() == std::vector<double>{1, 0});
  CHECK(logabsdet.to_vector<double>()[1] == -HUGE_VAL);
  CHECK(linalg::det(a).to_vector<double>() == std::vector<double>{4, 0});
  // Not positive-definite: the second leading minor, 1 * 1 - 2 * 2, is negative.
  Tensor b = from_vector({4, 0, 0, 4, 1, 2, 2, 1}, {2, 2, 2}, DType::F32);
  CHECK_THROWS_WITH_AS(linalg::cholesky(b),
                       "linalg_cholesky: (batch element 1) A (2, 2, 2) is not positive-definite (the leading minor "
                       "of order 2 is not positive-definite)",
                       Error);
  CHECK_THROWS_WITH_AS(linalg::cholesky(-ones({1, 1})), doctest::Contains("leading minor of order 1"), Error);
}

TEST_CASE("linalg: gradients where they are undefined or unsupported are clear errors") {
  // qr's gradient is implemented for m >= n only.
  Tensor wide = opcheck::uniform_values({2, 4}).requires_grad_();
  CHECK_THROWS_WITH_AS(sum(linalg::qr(wide).r).backward(), doctest::Contains("linalg_qr: the gradient needs m >= n"),
                       Error);
  // slogdet's gradient at a singular matrix goes through inv (PyTorch returns the adjugate).
  Tensor singular = from_vector({1, 2, 2, 4}, {2, 2}, DType::F64).requires_grad_();
  CHECK_THROWS_WITH_AS(linalg::det(singular).backward(), doctest::Contains("linalg_inv: (batch element 0)"), Error);
}

TEST_CASE("linalg: second derivatives of solve and cholesky match finite differences") {
  // The backward formulas are made of differentiable ops, so they differentiate again.
  Tensor a = opcheck::leaf(opcheck::well_conditioned({3, 3}, 41));
  Tensor b = opcheck::leaf(opcheck::uniform_values({3, 2}, -1, 1, 42));
  auto grad_of_solve = [](const std::vector<Tensor>& in) {
    GradModeGuard on(true);  // gradcheck evaluates f without grad mode
    Tensor x = linalg::solve(in[0], in[1]);
    const Tensor y[1] = {sum(x * x)};
    return brisk::grad(y, std::span<const Tensor>(in.data(), 1), {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  CHECK(gradcheck(grad_of_solve, {a, b}));
  Tensor s = opcheck::leaf(opcheck::spd({3, 3}, 43));
  auto grad_of_cholesky = [](const std::vector<Tensor>& in) {
    GradModeGuard on(true);
    Tensor l = linalg::cholesky(opcheck::sym(in[0]));
    const Tensor y[1] = {sum(l * l * l)};
    return brisk::grad(y, in, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  CHECK(gradcheck(grad_of_cholesky, {s}));
}
