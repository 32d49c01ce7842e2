// tests/test_mha_parity.cpp: nn::MultiheadAttention against PyTorch's nn.MultiheadAttention
// with PyTorch's weights loaded (tests/data/item8/mha.json, made by
// tests/make_item8_reference.py): outputs, attention weights (averaged and per head) and the
// gradients of parameters and inputs, batch_first both ways, self- and cross-attention,
// key_padding_mask and attn_mask ((T, S) and PyTorch's (B * H, T, S)), with and without bias;
// F64 and F32 (relative error <= 1e-5 outputs, 1e-4 gradients). Also the three-input forward
// without weights and the mask errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "tests/paths.h"

using namespace brisk;
using json = nlohmann::json;

namespace {

json load_mha_reference() {
  std::filesystem::path path = ::brisk::test::data_dir() / "item8" / "mha.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in);
}

// Largest |x - ref| / max(|ref|, floor, 1e-6 max |ref|): relative, except for values far below
// the tensor's scale (the key projection's bias has a zero gradient, softmax being blind to a
// shift shared by all keys: both sides hold rounding noise of 1e-17 there).
double mha_dev(const Tensor& x, const json& ref, double floor) {
  std::vector<double> a = x.to_vector<double>();
  std::vector<double> b = ref.get<std::vector<double>>();
  REQUIRE(a.size() == b.size());
  for (double v : b) floor = std::max(floor, 1e-6 * std::abs(v));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
    if (!std::isfinite(a[i])) worst = INFINITY;
  }
  return worst;
}

Tensor bool_tensor(const json& values, const Shape& shape) {
  return from_vector(values.get<std::vector<double>>(), shape, DType::Bool);
}

void check_mha_case(const json& c, DType dtype, double out_tol, double grad_tol) {
  const std::string name = c["name"].get<std::string>() + (dtype == DType::F64 ? " F64" : " F32");
  const int64_t E = c["E"], H = c["H"], B = c["B"], T = c["T"], S = c["S"];
  const bool bf = c["batch_first"];
  nn::MultiheadAttention mha(E, H, 0.0, c["bias"].get<bool>(), bf);
  mha.to(dtype);
  {
    NoGradGuard no_grad;
    for (auto& np : mha.named_parameters()) {
      const std::string& pname = np.first;
      Tensor& p = np.second;
      REQUIRE_MESSAGE(c["params"].contains(pname), name, ": PyTorch has no parameter ", pname);
      p.copy_(from_vector(c["params"][pname].get<std::vector<double>>(), p.sizes(), dtype));
    }
  }
  REQUIRE(mha.named_parameters().size() == c["params"].size());
  auto seq = [&](const json& values, int64_t n) {
    Tensor x = from_vector(values.get<std::vector<double>>(), bf ? Shape{B, n, E} : Shape{n, B, E}, dtype);
    x.requires_grad_(true);
    return x;
  };
  const bool self = c["self_attention"];
  Tensor q = seq(c["query"], T);
  Tensor k = self ? q : seq(c["key"], S);
  Tensor v = self ? q : seq(c["value"], S);
  Tensor kpm = c["key_padding_mask"].is_null() ? Tensor() : bool_tensor(c["key_padding_mask"], {B, S});
  Tensor mask;
  if (!c["attn_mask"].is_null()) {
    Shape ms;
    for (const json& d : c["attn_mask_shape"]) ms.push_back(d.get<int64_t>());
    mask = bool_tensor(c["attn_mask"], ms);
  }
  auto r = mha.forward_with_weights(q, k, v, kpm, mask, c["average_attn_weights"].get<bool>());
  CHECK(r.output.sizes() == Shape(c["out_shape"].get<std::vector<int64_t>>()));
  CHECK(r.weights.sizes() == Shape(c["weights_shape"].get<std::vector<int64_t>>()));
  const double floor = dtype == DType::F64 ? 1e-12 : 1e-2;
  CHECK_MESSAGE(mha_dev(r.output, c["out"], floor) <= out_tol, name, ": output ", mha_dev(r.output, c["out"], floor));
  CHECK_MESSAGE(mha_dev(r.weights, c["weights"], floor) <= out_tol, name, ": weights ",
                mha_dev(r.weights, c["weights"], floor));
  Tensor r_out = from_vector(c["r_out"].get<std::vector<double>>(), r.output.sizes(), dtype);
  Tensor r_w = from_vector(c["r_weights"].get<std::vector<double>>(), r.weights.sizes(), dtype);
  (sum(r.output * r_out) + sum(r.weights * r_w)).backward();
  for (auto& np : mha.named_parameters()) {
    const std::string& pname = np.first;
    const Tensor& p = np.second;
    REQUIRE(p.grad().defined());
    double dev = mha_dev(p.grad(), c["grad_params"][pname], floor);
    CHECK_MESSAGE(dev <= grad_tol, name, ": grad of ", pname, " ", dev);
  }
  CHECK_MESSAGE(mha_dev(q.grad(), c["grad_query"], floor) <= grad_tol, name, ": grad of query");
  if (!self) {
    CHECK_MESSAGE(mha_dev(k.grad(), c["grad_key"], floor) <= grad_tol, name, ": grad of key");
    CHECK_MESSAGE(mha_dev(v.grad(), c["grad_value"], floor) <= grad_tol, name, ": grad of value");
  }
  // The plain forward (no weights, no key padding) gives the same output.
  if (kpm.defined() || (mask.defined() && mask.dim() == 3)) return;
  NoGradGuard no_grad;
  Tensor plain = mha.forward(q, k, v, mask);
  CHECK_MESSAGE(mha_dev(plain, c["out"], floor) <= out_tol, name, ": plain forward");
}

}  // namespace

TEST_CASE("optimx: MultiheadAttention with PyTorch's weights matches nn.MultiheadAttention in F64") {
  json ref = load_mha_reference();
  REQUIRE(ref["cases"].size() == 6);
  for (const json& c : ref["cases"]) check_mha_case(c, DType::F64, 1e-10, 1e-9);
}

TEST_CASE("optimx: MultiheadAttention in F32 is within 1e-5 (outputs) and 1e-4 (gradients) of PyTorch") {
  json ref = load_mha_reference();
  for (const json& c : ref["cases"]) check_mha_case(c, DType::F32, 1e-5, 1e-4);
}

TEST_CASE("optimx: MultiheadAttention refuses bad masks with clear errors") {
  nn::MultiheadAttention mha(8, 2, 0.0, true, /*batch_first=*/true);
  Tensor x = randn({2, 3, 8});
  auto text = [&](const Tensor& kpm, const Tensor& mask) {
    try {
      mha.forward_with_weights(x, x, x, kpm, mask);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(text(zeros({2, 4}, DType::Bool), {}).find("key_padding_mask has shape (2, 4), expected (B, S) = (2, 3)") !=
        std::string::npos);
  CHECK(text(zeros({2, 3}, DType::I64), {}).find("key_padding_mask must be Bool (true = padding) or floating") !=
        std::string::npos);
  CHECK(text({}, zeros({3, 3}, DType::I32)).find("attn_mask must be Bool (true = not allowed) or floating") !=
        std::string::npos);
  CHECK(text({}, zeros({2, 3, 3}, DType::Bool)).find("attn_mask has shape (2, 3, 3), expected (T, S) = (3, 3) or") !=
        std::string::npos);
  CHECK(text(zeros({2, 3}), zeros({3, 3})) == "no error");  // floating masks are added to the scores
  CHECK_THROWS_AS(mha.forward_with_weights(x, randn({2, 3, 8}), randn({2, 5, 8})), Error);
  // causal: the weights are lower-triangular and the output is the plain forward's.
  auto r = mha.forward_with_weights(x, x, x, {}, {}, /*average_attn_weights=*/true, /*causal=*/true);
  std::vector<double> w = r.weights.to_vector<double>();  // (2, 3, 3)
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 3; ++i) {
      for (int j = i + 1; j < 3; ++j) CHECK(w[size_t(b * 9 + i * 3 + j)] == 0.0);
    }
  }
  Tensor plain = mha.forward(x, x, x, {}, /*causal=*/true);
  CHECK(max(abs(plain - r.output)).item<double>() <= 1e-6);
}
