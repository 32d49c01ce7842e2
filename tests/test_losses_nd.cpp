// tests/test_losses_nd.cpp: cross_entropy with class weights and on N-d inputs (N, C, d1, ...),
// with ignore_index and label_smoothing, class-index and probability targets, every
// reduction, against PyTorch (tests/data/item8/cross_entropy.json, made by
// tests/make_item8_reference.py): loss and gradient in F64 and F32; and the N-d errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "tests/paths.h"

using namespace brisk;
using json = nlohmann::json;
namespace F = brisk::nn::functional;

namespace {

json load_ce_reference() {
  std::filesystem::path path = ::brisk::test::data_dir() / "item8" / "cross_entropy.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in);
}

Shape shape_of(const json& j) {
  Shape s;
  for (const json& d : j) s.push_back(d.get<int64_t>());
  return s;
}

// Largest |x - ref| / max(|ref|, floor).
double ce_dev(const Tensor& x, const json& ref, double floor) {
  std::vector<double> a = x.to_vector<double>();
  std::vector<double> b = ref.get<std::vector<double>>();
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
    if (!std::isfinite(a[i])) worst = INFINITY;
  }
  return worst;
}

Reduction ce_reduction(const std::string& r) {
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

void check_ce_case(const json& c, DType dtype, double tol) {
  const std::string name = c["name"].get<std::string>() + (dtype == DType::F64 ? " F64" : " F32");
  Tensor logits = from_vector(c["logits"].get<std::vector<double>>(), shape_of(c["shape"]), dtype);
  logits.requires_grad_(true);
  const bool soft = c["soft"];
  Tensor target =
      from_vector(c["target"].get<std::vector<double>>(), shape_of(c["target_shape"]), soft ? dtype : DType::I64);
  Tensor weight;
  if (!c["weight"].is_null()) {
    std::vector<double> w = c["weight"].get<std::vector<double>>();
    weight = from_vector(w, {int64_t(w.size())}, dtype);
  }
  const Reduction r = ce_reduction(c["reduction"]);
  Tensor loss =
      F::cross_entropy(logits, target, weight, r, c["ignore_index"].get<int64_t>(), c["label_smoothing"].get<double>());
  const double floor = dtype == DType::F64 ? 1e-12 : 1e-3;
  CHECK_MESSAGE(ce_dev(loss, c["loss"], floor) <= tol, name, ": loss ", ce_dev(loss, c["loss"], floor));
  if (r == Reduction::None) CHECK(loss.sizes() == shape_of(c["target_shape"]));
  Tensor upstream = from_vector(c["upstream"].get<std::vector<double>>(), loss.sizes(), dtype);
  sum(loss * upstream).backward();
  CHECK_MESSAGE(ce_dev(logits.grad(), c["grad_logits"], floor) <= tol, name, ": gradient ",
                ce_dev(logits.grad(), c["grad_logits"], floor));
  // The module gives the functional's loss.
  nn::CrossEntropyLoss module(weight, r, c["ignore_index"].get<int64_t>(), c["label_smoothing"].get<double>());
  CHECK(ce_dev(module(logits.detach(), target), c["loss"], floor) <= tol);
}

}  // namespace

TEST_CASE("optimx: class-weighted and N-d cross_entropy match PyTorch in F64") {
  json ref = load_ce_reference();
  REQUIRE(ref["cases"].size() == 11);
  for (const json& c : ref["cases"]) check_ce_case(c, DType::F64, 1e-12);
}

TEST_CASE("optimx: class-weighted and N-d cross_entropy match PyTorch in F32") {
  json ref = load_ce_reference();
  for (const json& c : ref["cases"]) check_ce_case(c, DType::F32, 1e-5);
}

TEST_CASE("optimx: N-d cross_entropy refuses targets and weights that do not fit") {
  Tensor logits = randn({2, 4, 3, 2});
  auto text = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(text([&] { F::cross_entropy(logits, zeros({2, 3}, DType::I64)); }).find("cross_entropy") != std::string::npos);
  CHECK(text([&] {
          F::cross_entropy(logits, zeros({2, 3, 3}, DType::I64));
        }).find("cross_entropy") != std::string::npos);
  CHECK(text([&] { F::cross_entropy(logits, full({2, 3, 2}, 4.0, DType::I64)); }).find("4") != std::string::npos);
  CHECK(text([&] {
          F::cross_entropy(logits, zeros({2, 3, 2}, DType::I64), ones({3}));
        }).find("cross_entropy") != std::string::npos);
}
