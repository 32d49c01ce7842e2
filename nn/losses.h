// nn/losses.h: the loss modules of the losses added for porting (their functions are in
// nn/functional.h): BCELoss, HuberLoss, CosineEmbeddingLoss, TripletMarginLoss, with PyTorch's
// constructor arguments and defaults; BCELoss's class weight is a buffer named "weight", as in
// PyTorch's state_dict. Not here: the older loss modules (nn/layers.h), CTCLoss (nn/ctc.h).
#pragma once

#include "nn/functional.h"
#include "nn/module.h"

namespace brisk::nn {

class BCELoss : public Module {
 public:
  explicit BCELoss(Tensor weight = {}, Reduction reduction = Reduction::Mean);
  Tensor operator()(const Tensor& input, const Tensor& target);
  Reduction reduction;
};

class HuberLoss : public Module {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0);
  Tensor operator()(const Tensor& input, const Tensor& target);
  Reduction reduction;
  double delta;
};

class CosineEmbeddingLoss : public Module {
 public:
  explicit CosineEmbeddingLoss(double margin = 0.0, Reduction reduction = Reduction::Mean);
  Tensor operator()(const Tensor& x1, const Tensor& x2, const Tensor& y);
  double margin;
  Reduction reduction;
};

class TripletMarginLoss : public Module {
 public:
  explicit TripletMarginLoss(double margin = 1.0, double p = 2.0, double eps = 1e-6, bool swap = false,
                             Reduction reduction = Reduction::Mean);
  Tensor operator()(const Tensor& anchor, const Tensor& positive, const Tensor& negative);
  double margin, p, eps;
  bool swap;
  Reduction reduction;
};

}  // namespace brisk::nn
