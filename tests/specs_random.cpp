// tests/specs_random.cpp: specs of arange, rand, randn and dropout (engine/ops/random.cpp).
// Each random spec draws from its own Generator with a fixed seed, so every call of `fn` gives
// the same values; the references recompute them with the Philox functions of engine/random.h
// in plain loops (the definition in Note [Random streams]). Case inputs only carry shape and
// dtype for the factories; arange's input holds (start, end, step).
// Not here: statistics, seeding and threading (tests/test_random.cpp).
#include <cmath>

#include "tests/op_spec.h"

namespace brisk::test {
namespace {

constexpr uint64_t kSeed = 42;

// Shapes the factories draw; the values of the input are unused.
std::vector<OpCase> shape_cases() {
  return {
      {"(3, 4)", {uniform_values({3, 4}, -1, 1, 1)}},
      {"(7): a partial Philox counter", {uniform_values({7}, -1, 1, 2)}},
      {"0-dim", {uniform_values({}, -1, 1, 3)}},
      {"size 0", {uniform_values({0, 3}, -1, 1, 4)}},
      {"(2, 3, 5)", {uniform_values({2, 3, 5}, -1, 1, 5)}},
  };
}

Tensor arange_ref(const std::vector<Tensor>& in) {
  std::vector<double> v = in[0].to_vector<double>();
  const int64_t n = int64_t(std::ceil((v[1] - v[0]) / v[2]));
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(v[0] + double(i) * v[2]);
  return from_vector(out, {n}, DType::F64);
}

void add_specs(std::vector<OpSpec>& specs) {
  {
    OpSpec s;
    s.name = "arange";
    s.covers = {OpId::Arange};
    s.fn = [](const std::vector<Tensor>& in) {
      std::vector<double> v = in[0].to_vector<double>();
      return arange(v[0], v[1], v[2], in[0].dtype());
    };
    s.reference = arange_ref;
    s.cases = [] {
      auto range = [](double start, double end, double step) {
        return from_vector({start, end, step}, {3}, DType::F64);
      };
      return std::vector<OpCase>{
          {"0 to 5 step 1", {range(0, 5, 1)}},       {"1 to 2 step 0.3 (length rounds up)", {range(1, 2, 0.3)}},
          {"5 to 0 step -1.5", {range(5, 0, -1.5)}}, {"-3 to 3 step 0.5", {range(-3, 3, 0.5)}},
          {"empty: 2 to 2", {range(2, 2, 1)}},
      };
    };
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "uniform [-2, 3)";
    s.covers = {OpId::Rand};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return uniform(in[0].sizes(), -2, 3, in[0].dtype(), Device::cpu(), &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> out(size_t(in[0].numel()));
      for (size_t i = 0; i < out.size(); ++i) out[i] = -2 + 5 * double(philox_uniform(kSeed, 0, i));
      return from_vector(out, in[0].sizes(), DType::F64);
    };
    s.cases = shape_cases;
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
  {
    OpSpec s;
    s.name = "normal (0.5, 2)";
    s.covers = {OpId::Randn};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return normal(in[0].sizes(), 0.5, 2, in[0].dtype(), Device::cpu(), &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> out(size_t(in[0].numel()));
      for (size_t i = 0; i < out.size(); ++i) out[i] = 0.5 + 2 * double(philox_normal(kSeed, 0, i));
      return from_vector(out, in[0].sizes(), DType::F64);
    };
    s.cases = shape_cases;
    s.grad = false;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    s.tol_half = 2e-2;  // values up to ~8 in magnitude
    specs.push_back(s);
  }
  {
    // The mask is fixed by the seed, so gradcheck sees one smooth function.
    OpSpec s;
    s.name = "dropout p = 0.4";
    s.covers = {OpId::Dropout};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return dropout(in[0], 0.4, true, &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> x = in[0].to_vector<double>();
      for (size_t i = 0; i < x.size(); ++i) x[i] = philox_uniform(kSeed, 0, i) >= 0.4 ? x[i] / 0.6 : 0.0;
      return from_vector(x, in[0].sizes(), DType::F64);
    };
    s.cases = shape_cases;
    s.dtypes = {DType::F32, DType::F16, DType::BF16};
    specs.push_back(s);
  }
}

REGISTER_SPECS(add_specs);

}  // namespace
}  // namespace brisk::test
