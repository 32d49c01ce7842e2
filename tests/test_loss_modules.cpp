// tests/test_loss_modules.cpp: the loss modules of nn/losses.h give exactly their functions'
// values and gradients with the same arguments (the functions are checked against PyTorch in
// tests/test_losses.cpp), keep BCELoss's weight as the buffer "weight" as PyTorch's state_dict
// does, and refuse a non-positive Huber delta at construction.
#include <doctest/doctest.h>

#include "brisk.h"
#include "nn/losses.h"

using namespace brisk;
namespace F = brisk::nn::functional;

TEST_CASE("loss modules: equal to their functions, with PyTorch's buffer names") {
  manual_seed(5);
  Tensor p = sigmoid(randn({4, 3})).detach().requires_grad_();
  Tensor t = rand({4, 3});
  Tensor w = rand({3});
  nn::BCELoss bce(w, Reduction::Sum);
  CHECK(bce(p, t).item<double>() == F::binary_cross_entropy(p, t, w, Reduction::Sum).item<double>());
  auto sd = bce.state_dict();
  REQUIRE(sd.size() == 1);
  CHECK(sd[0].first == "weight");
  CHECK(nn::BCELoss().state_dict().empty());

  Tensor a = randn({5, 6}), b = randn({5, 6}), c = randn({5, 6});
  nn::HuberLoss huber(Reduction::Mean, 0.5);
  CHECK(huber(a, b).item<double>() == F::huber_loss(a, b, Reduction::Mean, 0.5).item<double>());
  Tensor y = from_vector({1, -1, 1, -1, 1}, {5});
  nn::CosineEmbeddingLoss cos(0.2, Reduction::None);
  CHECK(cos(a, b, y).to_vector<double>() ==
        F::cosine_embedding_loss(a, b, y, 0.2, Reduction::None).to_vector<double>());
  nn::TripletMarginLoss trip(0.7, 1.0, 1e-6, true);
  CHECK(trip(a, b, c).item<double>() == F::triplet_margin_loss(a, b, c, 0.7, 1.0, 1e-6, true).item<double>());

  // Gradients flow through the module as through the function.
  bce(p, t).backward();
  Tensor g = p.grad().clone();
  p.zero_grad();
  F::binary_cross_entropy(p, t, w, Reduction::Sum).backward();
  CHECK(p.grad().to_vector<double>() == g.to_vector<double>());
  CHECK_THROWS_WITH_AS(nn::HuberLoss(Reduction::Mean, 0.0), doctest::Contains("delta"), Error);
}
