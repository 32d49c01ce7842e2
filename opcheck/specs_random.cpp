// opcheck/specs_random.cpp: specs of arange, rand, randn, dropout, bernoulli and multinomial
// (engine/ops/random.cpp).
// Each random spec draws from its own Generator with a fixed seed, so every call of `fn` gives
// the same values; the references recompute them with the Philox functions of engine/random.h
// in plain loops (the definition in Note [Random streams]). Case inputs only carry shape and
// dtype for the factories; arange's input holds (start, end, step).
// Not here: the sampling ops' statistics, thread-count independence and errors
// (tests/test_sampling.cpp); those of the others (tests/test_random.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "opcheck/spec.h"

namespace brisk::opcheck {
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

// Draw d of a multinomial row: 53 bits of lanes 0 and 1 of counter `counter`, as the kernel.
double uniform_double(uint64_t seed, uint64_t counter) {
  const Philox4 r = philox(seed, counter);
  return double((uint64_t(r.v[0]) << 21) | (uint64_t(r.v[1]) >> 11)) * 0x1p-53;
}

// torch.multinomial's law by the definition in Note [Random streams] (engine/ops/random.cpp).
Tensor multinomial_ref(const Tensor& probs, int64_t samples, bool replacement) {
  const int64_t c = probs.size(-1), rows = probs.numel() / c;
  const uint64_t per_row = uint64_t(replacement ? samples : c);
  std::vector<double> w = probs.to_vector<double>(), out;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = w.data() + r * c;
    const uint64_t first = uint64_t(r) * per_row;
    if (replacement) {
      const double total = std::accumulate(row, row + c, 0.0);
      for (int64_t d = 0; d < samples; ++d) {
        double x = uniform_double(kSeed, first + uint64_t(d)) * total, acc = 0;
        int64_t j = 0;
        while (j + 1 < c && !(acc + row[j] > x && row[j] > 0)) acc += row[j++];
        out.push_back(double(j));
      }
      continue;
    }
    std::vector<std::pair<double, int64_t>> keys;
    for (int64_t j = 0; j < c; ++j) {
      if (row[j] > 0) keys.push_back({-std::log1p(-uniform_double(kSeed, first + uint64_t(j))) / row[j], j});
    }
    std::sort(keys.begin(), keys.end());
    for (int64_t d = 0; d < samples; ++d) out.push_back(double(keys[size_t(d)].second));
  }
  Shape shape = probs.dim() == 1 ? Shape{samples} : Shape{rows, samples};
  return from_vector(out, shape, DType::F64);
}

void add_sampling_specs(std::vector<OpSpec>& specs) {
  {
    OpSpec s;
    s.name = "bernoulli";
    s.covers = {OpId::Bernoulli};
    s.fn = [](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return bernoulli(in[0], &gen);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      return map_reference(in, [i = uint64_t(0)](const std::vector<double>& p) mutable {
        return double(philox_uniform(kSeed, 0, i++)) < p[0] ? 1.0 : 0.0;
      });
    };
    s.cases = [] {
      return std::vector<OpCase>{
          {"(3, 4)", {uniform_values({3, 4}, 0, 1, 1)}},
          {"(7): a partial Philox counter", {uniform_values({7}, 0, 1, 2)}},
          {"0-dim", {uniform_values({}, 0, 1, 3)}},
          {"size 0", {uniform_values({0, 3}, 0, 1, 4)}},
          {"p 0 and 1", {from_vector({0, 1, 0, 1}, {4}, DType::F64)}},
      };
    };
    s.grad = false;
    s.cuda = false;  // CPU only: no kernel for device cuda
    specs.push_back(s);
  }
  struct Variant {
    const char* name;
    int64_t samples;
    bool replacement;
  };
  for (Variant v :
       {Variant{"multinomial with replacement", 9, true}, Variant{"multinomial without replacement", 3, false}}) {
    OpSpec s;
    s.name = v.name;
    s.covers = {OpId::Multinomial};
    s.fn = [v](const std::vector<Tensor>& in) {
      Generator gen(kSeed);
      return multinomial(in[0], v.samples, v.replacement, &gen);
    };
    s.reference = [v](const std::vector<Tensor>& in) { return multinomial_ref(in[0], v.samples, v.replacement); };
    s.cases = [] {
      return std::vector<OpCase>{
          {"1-D (5)", {uniform_values({5}, 0, 1, 5)}},
          {"2-D (4, 6) with zeros",
           {from_vector({0, 1, 2, 0, 3, 1, 1, 1, 1, 1, 1, 1, 5, 0, 0, 0.5, 0, 2, 0, 0, 1, 2, 3, 0}, {4, 6},
                        DType::F64)}},
      };
    };
    s.grad = false;
    s.dtypes = {};   // rounding the weights to F32 may move a draw across a category boundary
    s.cuda = false;  // CPU only: no kernel for device cuda
    specs.push_back(s);
  }
}

void add_specs(std::vector<OpSpec>& specs) {
  add_sampling_specs(specs);
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

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_random_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
