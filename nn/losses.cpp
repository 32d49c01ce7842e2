// nn/losses.cpp: the loss modules of nn/losses.h, each a call of its function.
#include "nn/losses.h"

#include "engine/error.h"

namespace brisk::nn {

BCELoss::BCELoss(Tensor weight, Reduction r) : Module("BCELoss"), reduction(r) {
  if (weight.defined()) register_buffer("weight", weight);
}
Tensor BCELoss::operator()(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy(input, target, maybe_buffer("weight"), reduction);
}

HuberLoss::HuberLoss(Reduction r, double d) : Module("HuberLoss"), reduction(r), delta(d) {
  BRISK_CHECK(d > 0, "HuberLoss: delta must be positive, got ", d);
}
Tensor HuberLoss::operator()(const Tensor& input, const Tensor& target) {
  return functional::huber_loss(input, target, reduction, delta);
}

CosineEmbeddingLoss::CosineEmbeddingLoss(double m, Reduction r)
    : Module("CosineEmbeddingLoss"), margin(m), reduction(r) {}
Tensor CosineEmbeddingLoss::operator()(const Tensor& x1, const Tensor& x2, const Tensor& y) {
  return functional::cosine_embedding_loss(x1, x2, y, margin, reduction);
}

TripletMarginLoss::TripletMarginLoss(double m, double p_, double e, bool s, Reduction r)
    : Module("TripletMarginLoss"), margin(m), p(p_), eps(e), swap(s), reduction(r) {}
Tensor TripletMarginLoss::operator()(const Tensor& a, const Tensor& pos, const Tensor& neg) {
  return functional::triplet_margin_loss(a, pos, neg, margin, p, eps, swap, reduction);
}

}  // namespace brisk::nn
