// nn/ctc.h: the connectionist temporal classification loss (Graves et al. 2006), PyTorch's
// F.ctc_loss and nn.CTCLoss: the negative log-likelihood of a target label sequence summed
// over every alignment of it to the T frames of log_probs (blanks between labels, repeats
// merged). Written as a composite of differentiable ops (the forward recursion over T on the
// extended-label lattice with logsumexp), so autograd gives the gradient and it runs on every
// device. Not here: the other losses (nn/functional.h), a fused CUDA kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/functions.h"
#include "nn/module.h"

namespace brisk::nn::functional {

// log_probs (T, N, C) or unbatched (T, C), F32 or F64, the log-softmax of the network's output
// over C classes; targets integer, (N, S) padded (row n uses its first target_lengths[n]
// values), or 1-D: the N sequences concatenated (sum of target_lengths values) when batched,
// the one sequence (S) when unbatched; input_lengths / target_lengths one per batch entry,
// 1 <= input_length <= T, 0 <= target_length. Labels must lie in [0, C) and differ from blank.
// Reduction::Mean divides each loss by its target length (at least 1), then averages over the
// batch, as PyTorch. An impossible alignment (a target longer than its input allows) gives an
// infinite loss; zero_infinity turns it, and its gradient, into 0.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);
// Lengths as integer tensors (1-D of N values, or 0-dim when unbatched), as PyTorch accepts them.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);

}  // namespace brisk::nn::functional

namespace brisk::nn {

class CTCLoss : public Module {
 public:
  explicit CTCLoss(int64_t blank = 0, Reduction reduction = Reduction::Mean, bool zero_infinity = false)
      : Module("CTCLoss"), blank(blank), reduction(reduction), zero_infinity(zero_infinity) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                    const std::vector<int64_t>& target_lengths) {
    return functional::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity);
  }
  Tensor operator()(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                    const Tensor& target_lengths) {
    return functional::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity);
  }
  int64_t blank;
  Reduction reduction;
  bool zero_infinity;
};

}  // namespace brisk::nn
