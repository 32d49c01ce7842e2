// opcheck/specs_linalg_decomp.cpp: specs of brisk::linalg's decompositions and the composites
// on them (engine/ops/linalg.cpp, kernels/cpu/linalg_decomp.cpp): every op gradchecked in F64
// and run in F32, with non-contiguous and batched inputs. Not here: the identities on threaded
// batches, parity with PyTorch and the errors (tests/test_linalg.cpp); matmul
// (opcheck/specs_linalg.cpp).
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

OpSpec linalg_spec(const std::string& name, std::vector<OpId> covers, TensorFn fn,
                   std::function<std::vector<OpCase>()> cases) {
  OpSpec s;
  s.name = name;
  s.covers = std::move(covers);
  s.fn = std::move(fn);
  s.cases = std::move(cases);
  s.dtypes = {DType::F32};  // F16/BF16 have no kernel (F32 and F64 only)
  s.tol_f32 = 1e-4;         // an LU or QR in F32 loses a few ulps per step
  s.cuda = false;           // CPU only: no kernel for device cuda
  return s;
}

std::vector<OpCase> square_cases() {
  return {{"(3, 3)", {well_conditioned({3, 3}, 1)}},
          {"(1, 1)", {well_conditioned({1, 1}, 2)}},
          {"batched (2, 4, 4)", {well_conditioned({2, 4, 4}, 3)}},
          {"batch of batches (2, 1, 3, 3)", {well_conditioned({2, 1, 3, 3}, 4)}}};
}

std::vector<OpCase> spd_cases() {
  return {{"(3, 3)", {spd({3, 3}, 5)}}, {"(1, 1)", {spd({1, 1}, 6)}}, {"batched (2, 4, 4)", {spd({2, 4, 4}, 7)}}};
}

std::vector<OpCase> tall_cases() {
  return {{"tall (4, 3)", {uniform_values({4, 3}, -1, 1, 8)}},
          {"square (3, 3)", {uniform_values({3, 3}, -1, 1, 9)}},
          {"batched (2, 5, 3)", {uniform_values({2, 5, 3}, -1, 1, 10)}},
          {"column (3, 1)", {uniform_values({3, 1}, -1, 1, 11)}}};
}

std::vector<OpCase> sym_cases() {
  return {{"(3, 3)", {uniform_values({3, 3}, -1, 1, 21)}},
          {"(1, 1)", {uniform_values({1, 1}, -1, 1, 22)}},
          {"batched (2, 4, 4)", {uniform_values({2, 4, 4}, -1, 1, 23)}}};
}

void add_solve_specs(std::vector<OpSpec>& specs) {
  specs.push_back(linalg_spec(
      "linalg::solve", {OpId::LinalgSolve}, [](const std::vector<Tensor>& in) { return linalg::solve(in[0], in[1]); },
      [] {
        return std::vector<OpCase>{
            {"(3, 3) with (3, 2)", {well_conditioned({3, 3}, 1), uniform_values({3, 2}, -1, 1, 2)}},
            {"vector B (3)", {well_conditioned({3, 3}, 3), uniform_values({3}, -1, 1, 4)}},
            {"batched (2, 3, 3) with (2, 3, 1)", {well_conditioned({2, 3, 3}, 5), uniform_values({2, 3, 1}, -1, 1, 6)}},
            {"batch of vectors (2, 3, 3) with (2, 3)",
             {well_conditioned({2, 3, 3}, 7), uniform_values({2, 3}, -1, 1, 8)}},
            {"A broadcast (3, 3) with (2, 3, 2)", {well_conditioned({3, 3}, 9), uniform_values({2, 3, 2}, -1, 1, 10)}},
            {"B broadcast (2, 3, 3) with (3, 2)", {well_conditioned({2, 3, 3}, 11), uniform_values({3, 2}, -1, 1, 12)}},
        };
      }));
  specs.push_back(linalg_spec(
      "linalg::inv (composite: solve(A, I))", {}, [](const std::vector<Tensor>& in) { return linalg::inv(in[0]); },
      square_cases));
  specs.push_back(linalg_spec(
      "linalg::det (composite: sign * exp(logabsdet))", {},
      [](const std::vector<Tensor>& in) { return linalg::det(in[0]); },
      [] {
        std::vector<OpCase> c = square_cases();
        c.push_back({"negative determinant likely (3, 3) uniform", {uniform_values({3, 3}, -1, 1, 12)}});
        return c;
      }));
  specs.push_back(linalg_spec(
      "linalg::slogdet logabsdet", {OpId::LinalgSlogdet},
      [](const std::vector<Tensor>& in) { return linalg::slogdet(in[0]).logabsdet; }, square_cases));
  OpSpec sign = linalg_spec(
      "linalg::slogdet sign", {OpId::LinalgSlogdet},
      [](const std::vector<Tensor>& in) { return linalg::slogdet(in[0]).sign; },
      [] {
        return std::vector<OpCase>{{"(3, 3) uniform", {uniform_values({3, 3}, -1, 1, 12)}},
                                   {"(2, 4, 4) uniform", {uniform_values({2, 4, 4}, -1, 1, 13)}}};
      });
  sign.grad = false;  // piecewise constant
  specs.push_back(sign);
}

void add_decomposition_specs(std::vector<OpSpec>& specs) {
  specs.push_back(linalg_spec(
      "linalg::cholesky", {OpId::LinalgCholesky},
      [](const std::vector<Tensor>& in) { return linalg::cholesky(sym(in[0])); }, spd_cases));
  specs.push_back(linalg_spec(
      "linalg::cholesky upper", {OpId::LinalgCholesky},
      [](const std::vector<Tensor>& in) { return linalg::cholesky(sym(in[0]), true); }, spd_cases));
  specs.push_back(linalg_spec(
      "linalg::qr Q", {OpId::LinalgQr}, [](const std::vector<Tensor>& in) { return linalg::qr(in[0]).q; }, tall_cases));
  specs.push_back(linalg_spec(
      "linalg::qr R", {OpId::LinalgQr}, [](const std::vector<Tensor>& in) { return linalg::qr(in[0]).r; }, tall_cases));
  OpSpec wide = linalg_spec(
      "linalg::qr wide (Q R)", {OpId::LinalgQr},
      [](const std::vector<Tensor>& in) {
        auto [q, r] = linalg::qr(in[0]);
        return cat({flatten(q), flatten(r)});
      },
      [] {
        return std::vector<OpCase>{{"wide (2, 4)", {uniform_values({2, 4}, -1, 1, 14)}}};
      });
  wide.grad = false;  // the gradient needs m >= n
  specs.push_back(wide);
  // Eigenvalues of uniform symmetric matrices are distinct (the gradient divides by gaps);
  // eigenvectors enter squared, so the spec does not depend on their signs.
  specs.push_back(linalg_spec(
      "linalg::eigh eigenvalues", {OpId::LinalgEigh},
      [](const std::vector<Tensor>& in) { return linalg::eigh(sym(in[0])).eigenvalues; }, sym_cases));
  specs.push_back(linalg_spec(
      "linalg::eigh eigenvectors squared", {OpId::LinalgEigh},
      [](const std::vector<Tensor>& in) {
        Tensor v = linalg::eigh(sym(in[0])).eigenvectors;
        return v * v;
      },
      sym_cases));
  specs.push_back(linalg_spec(
      "linalg::lstsq (composite: solve(R, Q^T B))", {},
      [](const std::vector<Tensor>& in) { return linalg::lstsq(in[0], in[1]); },
      [] {
        return std::vector<OpCase>{
            {"(5, 3) with (5, 2)", {uniform_values({5, 3}, -1, 1, 15), uniform_values({5, 2}, -1, 1, 16)}},
            {"batched (2, 6, 3) with (2, 6, 1)",
             {uniform_values({2, 6, 3}, -1, 1, 17), uniform_values({2, 6, 1}, -1, 1, 18)}},
            {"square (3, 3) with (3, 2)", {well_conditioned({3, 3}, 19), uniform_values({3, 2}, -1, 1, 20)}},
        };
      }));
}

void add_specs(std::vector<OpSpec>& specs) {
  add_solve_specs(specs);
  add_decomposition_specs(specs);
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_linalg_decomp_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
