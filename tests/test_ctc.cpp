// tests/test_ctc.cpp: ctc_loss and CTCLoss against PyTorch (tests/data/ctc/ctc.json, made by
// tests/make_ctc_reference.py): losses and gradients with respect to the logits in F64 and F32
// over padded, concatenated and unbatched targets, repeated labels, input lengths below T,
// empty targets, a non-zero blank, impossible alignments (inf, or 0 with zero_infinity), every
// reduction; and the errors for bad shapes, lengths, labels and blank.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "nn/ctc.h"
#include "tests/paths.h"

using namespace brisk;
using json = nlohmann::json;
namespace F = brisk::nn::functional;

namespace {

json load_ctc_reference() {
  std::filesystem::path path = ::brisk::test::data_dir() / "ctc" / "ctc.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing reference file ", path.string());
  return json::parse(in);
}

Reduction reduction_of(const std::string& r) {
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

std::vector<double> flat_targets(const json& t) {
  std::vector<double> out;
  for (const json& v : t) {
    if (v.is_array()) {
      for (const json& w : v) out.push_back(w.get<double>());
    } else {
      out.push_back(v.get<double>());
    }
  }
  return out;
}

// Largest |x - ref| / max(|ref|, 1); inf where one is infinite and the other is not.
double ctc_dev(const std::vector<double>& x, const std::vector<double>& ref) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(x[i])) {
      if (x[i] != ref[i]) worst = INFINITY;
      continue;
    }
    worst = std::max(worst, std::abs(x[i] - ref[i]) / std::max(std::abs(ref[i]), 1.0));
    if (std::isnan(x[i])) worst = INFINITY;
  }
  return worst;
}

void check_case(const json& c, DType dtype, double loss_tol, double grad_tol) {
  const std::string name = c["name"].get<std::string>() + (dtype == DType::F64 ? " F64" : " F32");
  Shape shape;
  for (const json& s : c["shape"]) shape.push_back(s.get<int64_t>());
  Shape tshape;
  for (const json& s : c["targets_shape"]) tshape.push_back(s.get<int64_t>());
  Tensor logits = from_vector(c["logits"].get<std::vector<double>>(), shape, dtype);
  logits.requires_grad_(true);
  Tensor targets = from_vector(flat_targets(c["targets"]), tshape, DType::I64);
  Tensor loss = F::ctc_loss(log_softmax(logits, -1), targets, c["input_lengths"].get<std::vector<int64_t>>(),
                            c["target_lengths"].get<std::vector<int64_t>>(), c["blank"].get<int64_t>(),
                            reduction_of(c["reduction"]), c["zero_infinity"].get<bool>());
  std::vector<double> want;
  for (const json& v : c["loss"])
    want.push_back(v.is_string() ? std::numeric_limits<double>::infinity() : v.get<double>());
  double dev = ctc_dev(loss.to_vector<double>(), want);
  CHECK_MESSAGE(dev <= loss_tol, name, ": loss deviation ", dev);
  if (c["grad_logits"].is_null()) return;
  sum(loss).backward();
  REQUIRE(logits.grad().defined());
  double gdev = ctc_dev(logits.grad().to_vector<double>(), c["grad_logits"].get<std::vector<double>>());
  CHECK_MESSAGE(gdev <= grad_tol, name, ": gradient deviation ", gdev);
}

}  // namespace

TEST_CASE("optimx: ctc_loss matches PyTorch's losses and gradients in F64") {
  json ref = load_ctc_reference();
  REQUIRE(ref["cases"].size() >= 14);
  for (const json& c : ref["cases"]) check_case(c, DType::F64, 1e-12, 1e-10);
}

TEST_CASE("optimx: ctc_loss matches PyTorch's losses and gradients in F32") {
  json ref = load_ctc_reference();
  for (const json& c : ref["cases"]) check_case(c, DType::F32, 1e-5, 1e-5);
}

TEST_CASE("optimx: an impossible alignment is inf, and 0 with gradient 0 under zero_infinity") {
  // T = 3 frames cannot hold the labels 1 1 (they need a blank between them: 3 frames).
  // The second, 2 2 1, needs 4.
  Tensor logits = randn({3, 2, 3}, DType::F64);
  logits.requires_grad_(true);
  Tensor targets = from_vector({1, 1, 1, 2, 2, 1}, {2, 3}, DType::I64);
  Tensor lp = log_softmax(logits, -1);
  Tensor loss = F::ctc_loss(lp, targets, {3, 3}, {2, 3}, 0, Reduction::None);
  std::vector<double> v = loss.to_vector<double>();
  CHECK(std::isfinite(v[0]));
  CHECK(std::isinf(v[1]));
  Tensor zeroed = F::ctc_loss(lp, targets, {3, 3}, {2, 3}, 0, Reduction::None, /*zero_infinity=*/true);
  CHECK(zeroed.to_vector<double>()[1] == 0.0);
  CHECK(zeroed.to_vector<double>()[0] == doctest::Approx(v[0]).epsilon(1e-15));
  select(zeroed, 0, 1).backward();
  std::vector<double> g = logits.grad().to_vector<double>();
  CHECK(std::all_of(g.begin(), g.end(), [](double x) { return x == 0.0; }));
}

TEST_CASE("optimx: CTCLoss module and tensor lengths give the functional's loss") {
  Tensor lp = log_softmax(randn({6, 2, 4}, DType::F64), -1);
  Tensor targets = from_vector({1, 2, 3, 1}, {2, 2}, DType::I32);
  nn::CTCLoss ctc(/*blank=*/0, Reduction::Sum);
  Tensor a = ctc(lp, targets, {6, 5}, {2, 2});
  Tensor b = ctc(lp, targets, from_vector({6, 5}, {2}, DType::I64), from_vector({2, 2}, {2}, DType::I32));
  CHECK(a.item<double>() == b.item<double>());
  // The loss of a single sequence equals the batched loss of that row.
  Tensor one = F::ctc_loss(select(lp, 1, 0), from_vector({1, 2}, {2}, DType::I64), {6}, {2}, 0, Reduction::None);
  Tensor both = F::ctc_loss(lp, targets, {6, 5}, {2, 2}, 0, Reduction::None);
  CHECK(one.dim() == 0);
  CHECK(one.item<double>() == doctest::Approx(both.to_vector<double>()[0]).epsilon(1e-14));
}

TEST_CASE("optimx: ctc_loss refuses bad shapes, lengths, labels and blank with clear errors") {
  Tensor lp = log_softmax(randn({5, 2, 4}), -1);
  Tensor targets = from_vector({1, 2, 3, 1}, {2, 2}, DType::I64);
  auto msg = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(msg([&] {
          F::ctc_loss(randn({5, 2, 4, 1}), targets, {5, 5}, {2, 2});
        }).find("(T, N, C) or (T, C)") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(cast(lp, DType::BF16), targets, {5, 5}, {2, 2});
        }).find("F32 or F64") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, cast(targets, DType::F32), {5, 5}, {2, 2});
        }).find("integer tensor") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, {5}, {2, 2});
        }).find("1 input_lengths for a batch of 2") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, {5, 5}, {2});
        }).find("1 target_lengths for a batch of 2") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, {6, 5}, {2, 2});
        }).find("input_lengths[0] = 6 is outside [1, T = 5]") != std::string::npos);
  CHECK(msg([&] { F::ctc_loss(lp, targets, {5, 0}, {2, 2}); }).find("input_lengths[1] = 0") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, {5, 5}, {2, -1});
        }).find("target_lengths[1] = -1 is negative") != std::string::npos);
  CHECK(msg([&] { F::ctc_loss(lp, targets, {5, 5}, {3, 2}); }).find("target_lengths[0] = 3") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, {5, 5}, {2, 2}, /*blank=*/4);
        }).find("blank 4 is not a class index") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, {5, 5}, {2, 2}, /*blank=*/1);
        }).find("other than blank 1") != std::string::npos);
  Tensor big = from_vector({1, 7, 3, 1}, {2, 2}, DType::I64);
  CHECK(msg([&] {
          F::ctc_loss(lp, big, {5, 5}, {2, 2});
        }).find("target 7 (sequence 0, position 1)") != std::string::npos);
  Tensor concat = from_vector({1, 2, 3}, {3}, DType::I64);
  CHECK(msg([&] {
          F::ctc_loss(lp, concat, {5, 5}, {2, 2});
        }).find("hold 3 labels but target_lengths add up to 4") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, from_vector({1, 2}, {1, 2}, DType::I64), {5, 5}, {2, 2});
        }).find("targets (1, 2) for a batch of 2") != std::string::npos);
  CHECK(msg([&] {
          F::ctc_loss(lp, targets, from_vector({5.0, 5.0}, {2}), from_vector({2, 2}, {2}, DType::I64));
        }).find("input_lengths must be a 0-dim or 1-D integer tensor") != std::string::npos);
}
