// nn/ctc.cpp: ctc_loss as a composite of differentiable ops. See Note [CTC as a composite].
#include "nn/ctc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/error.h"

namespace brisk::nn::functional {

// Note [CTC as a composite]
// The loss is -log sum over alignments, computed by the forward recursion over the extended
// labels l' = (blank, l1, blank, l2, ..., blank) of length L = 2S + 1:
//   alpha_0(0) = lp_0(blank), alpha_0(1) = lp_0(l1), alpha_0(s > 1) = -inf
//   alpha_t(s) = logsumexp(alpha_{t-1}(s), alpha_{t-1}(s-1), [alpha_{t-1}(s-2) if l'_s is a
//                label unlike l'_{s-2}]) + lp_t(l'_s)
//   loss = -logsumexp(alpha_{T-1}(L-1), alpha_{T-1}(L-2))
// Each step is a handful of ops over (N, L); autograd walks them back (that is the beta
// recursion), so there is no hand-written backward and every device runs it. "-inf" is a
// large finite negative number (-1e30): with a true -inf, logsumexp over unreachable states
// (all -inf) back-propagates exp(-inf - -inf) = NaN into the gradient. A loss that still holds
// the -1e30 (> 1e29) had no alignment and becomes +inf (or 0 under zero_infinity); its
// gradient is 0 either way (PyTorch's is 0 with zero_infinity and not meaningful without).
// The gradient is the exact derivative of the loss in log_probs. PyTorch's native backward
// returns that derivative plus exp(log_probs) * upstream (it assumes log_probs come from
// log_softmax, through whose backward the extra term cancels), so the two agree on the
// gradient with respect to the logits, which is what training sees.
namespace {

constexpr double kNegBig = -1e30;
constexpr double kImpossible = 1e29;

std::vector<int64_t> lengths_of(const Tensor& t, const char* what) {
  BRISK_CHECK(t.defined() && !is_floating(t.dtype()) && t.dtype() != DType::Bool && t.dim() <= 1, "ctc_loss: ", what,
              " must be a 0-dim or 1-D integer tensor, got ", t.defined() ? t.str() : "undefined");
  return t.to_vector<int64_t>();
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  return ctc_loss(log_probs, targets, lengths_of(input_lengths, "input_lengths"),
                  lengths_of(target_lengths, "target_lengths"), blank, reduction, zero_infinity);
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  BRISK_CHECK(log_probs.defined() && (log_probs.dim() == 2 || log_probs.dim() == 3), "ctc_loss: log_probs must be ",
              "(T, N, C) or (T, C), got ", log_probs.defined() ? log_probs.sizes() : Shape{});
  BRISK_CHECK(log_probs.dtype() == DType::F32 || log_probs.dtype() == DType::F64,
              "ctc_loss: log_probs must be F32 or F64, got ", log_probs.dtype());
  BRISK_CHECK(targets.defined() && !is_floating(targets.dtype()) && targets.dtype() != DType::Bool,
              "ctc_loss: targets must be an integer tensor, got ", targets.defined() ? targets.str() : "undefined");
  const bool batched = log_probs.dim() == 3;
  const Tensor lp = batched ? log_probs : unsqueeze(log_probs, 1);  // (T, N, C)
  const int64_t T = lp.size(0);
  const int64_t N = lp.size(1);
  const int64_t C = lp.size(2);
  BRISK_CHECK(blank >= 0 && blank < C, "ctc_loss: blank ", blank, " is not a class index in [0, ", C, ")");
  BRISK_CHECK(int64_t(input_lengths.size()) == N, "ctc_loss: ", input_lengths.size(), " input_lengths for a batch of ",
              N, " (log_probs ", log_probs.sizes(), ")");
  BRISK_CHECK(int64_t(target_lengths.size()) == N, "ctc_loss: ", target_lengths.size(),
              " target_lengths for a batch of ", N, " (log_probs ", log_probs.sizes(), ")");
  for (int64_t n = 0; n < N; ++n) {
    BRISK_CHECK(input_lengths[n] >= 1 && input_lengths[n] <= T, "ctc_loss: input_lengths[", n, "] = ", input_lengths[n],
                " is outside [1, T = ", T, "]");
    BRISK_CHECK(target_lengths[n] >= 0, "ctc_loss: target_lengths[", n, "] = ", target_lengths[n], " is negative");
  }

  // The label sequences on the host (they shape the lattice).
  const std::vector<int64_t> flat = targets.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> labels(static_cast<size_t>(N));
  const bool padded = batched && targets.dim() == 2;
  if (padded) {
    BRISK_CHECK(targets.size(0) == N, "ctc_loss: targets ", targets.sizes(), " for a batch of ", N);
  } else {
    BRISK_CHECK(targets.dim() == 1, "ctc_loss: targets must be ", batched ? "(N, S) or 1-D concatenated" : "1-D (S)",
                ", got ", targets.sizes());
  }
  const int64_t total = std::accumulate(target_lengths.begin(), target_lengths.end(), int64_t(0));
  if (batched && !padded) {
    BRISK_CHECK(targets.numel() >= total, "ctc_loss: concatenated targets hold ", targets.numel(),
                " labels but target_lengths add up to ", total);
  }
  int64_t offset = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t S = target_lengths[n];
    const int64_t row = padded ? targets.size(1) : targets.numel();
    BRISK_CHECK(S <= row, "ctc_loss: target_lengths[", n, "] = ", S, " but targets ", targets.sizes(), " hold only ",
                row, " labels per sequence");
    const int64_t start = padded ? n * row : (batched ? offset : 0);
    for (int64_t k = 0; k < S; ++k) {
      const int64_t label = flat[size_t(start + k)];
      BRISK_CHECK(label >= 0 && label < C && label != blank, "ctc_loss: target ", label, " (sequence ", n,
                  ", position ", k, ") is not a class index in [0, ", C, ") other than blank ", blank);
      labels[size_t(n)].push_back(label);
    }
    offset += S;
  }

  // The lattice: extended labels (N, L), the s-2 transitions allowed, the end positions.
  const int64_t S_max = std::max<int64_t>(1, *std::max_element(target_lengths.begin(), target_lengths.end()));
  const int64_t L = 2 * S_max + 1;
  std::vector<double> ext(size_t(N * L), double(blank));
  std::vector<double> skip(size_t(N * L), 0.0);
  std::vector<double> ends(size_t(N * 2), 0.0);
  std::vector<double> end_ok(size_t(N * 2), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const auto& l = labels[size_t(n)];
    for (size_t k = 0; k < l.size(); ++k) ext[size_t(n * L) + 2 * k + 1] = double(l[k]);
    for (int64_t s = 2; s < L; ++s) {
      const double e = ext[size_t(n * L + s)];
      skip[size_t(n * L + s)] = e != double(blank) && e != ext[size_t(n * L + s - 2)];
    }
    const int64_t S = int64_t(l.size());
    ends[size_t(2 * n)] = double(2 * S);
    ends[size_t(2 * n + 1)] = double(std::max<int64_t>(2 * S - 1, 0));
    end_ok[size_t(2 * n)] = 1;
    end_ok[size_t(2 * n + 1)] = S > 0;
  }
  const Device dev = lp.device();
  const DType dt = lp.dtype();
  const Tensor ext_index = expand(unsqueeze(from_vector(ext, {N, L}, DType::I64, dev), 0), {T, N, L}).contiguous();
  const Tensor lp_ext = clamp_min(gather(lp, 2, ext_index), kNegBig);  // (T, N, L)
  const Tensor skip_ok = from_vector(skip, {N, L}, DType::Bool, dev);
  const Tensor neg_all = full({N, L}, kNegBig, dt, dev);
  const Tensor neg1 = full({N, 1}, kNegBig, dt, dev);
  const Tensor neg2 = full({N, 2}, kNegBig, dt, dev);

  std::vector<double> first(size_t(L), 0.0);
  first[0] = 1;
  if (L > 1) first[1] = 1;
  const Tensor first_ok = expand(from_vector(first, {1, L}, DType::Bool, dev), {N, L});
  Tensor alpha = where(first_ok, select(lp_ext, 0, 0), neg_all);  // (N, L)
  const int64_t T_max = *std::max_element(input_lengths.begin(), input_lengths.end());
  for (int64_t t = 1; t < T_max; ++t) {
    Tensor from1 = cat({neg1, narrow(alpha, 1, 0, L - 1)}, 1);
    Tensor from2 = where(skip_ok, cat({neg2, narrow(alpha, 1, 0, L - 2)}, 1), neg_all);
    Tensor next = logsumexp(stack({alpha, from1, from2}, 0), {0}) + select(lp_ext, 0, t);
    bool all_active = true;
    std::vector<double> active(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
      active[size_t(n)] = t < input_lengths[n];
      all_active = all_active && active[size_t(n)] != 0;
    }
    alpha = all_active ? next : where(expand(from_vector(active, {N, 1}, DType::Bool, dev), {N, L}), next, alpha);
  }
  const Tensor end_values = where(from_vector(end_ok, {N, 2}, DType::Bool, dev),
                                  gather(alpha, 1, from_vector(ends, {N, 2}, DType::I64, dev)), neg2);
  Tensor loss = neg(logsumexp(end_values, {1}));  // (N)
  const Tensor impossible = gt(loss, full({N}, kImpossible, dt, dev));
  loss = where(impossible, full({N}, zero_infinity ? 0.0 : std::numeric_limits<double>::infinity(), dt, dev), loss);
  if (!batched && reduction == Reduction::None) return squeeze(loss, 0);
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(loss);
    case Reduction::Mean: {
      std::vector<double> divisors(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; ++n) divisors[size_t(n)] = double(std::max<int64_t>(target_lengths[n], 1));
      return mean(loss / from_vector(divisors, {N}, dt, dev));
    }
  }
  BRISK_FAIL("ctc_loss: unknown reduction");
}

}  // namespace brisk::nn::functional
