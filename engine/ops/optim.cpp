// engine/ops/optim.cpp: OpDefs and public functions of the fused optimizer steps (fused_sgd,
// fused_adam, fused_adamw, fused_rmsprop, fused_adagrad) and of the gradient scaler's unscale
// (amp_unscale): inference that checks every tensor of the lists (dtype, density, sizes,
// naming the list and the parameter), no backward. Parameters: SgdParams, AdamParams,
// RmspropParams, AdagradParams (engine/op_params.h).
// Not here: the update rules' tensor-op references and the choice of which parameters take a
// fused step (optim/*.cpp), the kernels (kernels/cpu/optim.cpp, kernels/cpu/amp.cpp,
// kernels/cuda/optim.cu, kernels/cuda/amp.cu).
#include <string>
#include <vector>

#include "engine/op_params.h"
#include "engine/ops/families.h"

namespace brisk {

// Note [Fused steps are ops]
// A fused step updates many tensors in place in one pass (one OpenMP loop on the CPU, one
// multi-tensor launch on CUDA), which no elementwise op can express, so each optimizer's step
// is one variadic op with no outputs: its inputs are the lists PyTorch's _fused_adam_ takes
// (params, grads, then each state buffer), role after role, and its attributes the
// hyperparameters plus one integer per parameter, attrs.per_param (its step count t, or SGD's
// fresh momentum buffer), so that parameters that missed steps still take one call. Being
// ops, they reach their kernels through dispatch like every other computation: the profiler
// times them, replace_kernel can swap them, the conformance table checks them against the
// optimizers' tensor-op references (opcheck/specs_optim.cpp), and a backend adds a fused step
// by registering a kernel (the side registries, the optim_step and amp headers of kernels/,
// are gone). An optimizer makes one call per group, device and dtype. The per-parameter
// scalars (Adam's bias corrections, Adagrad's decayed lr) are computed by the kernels from the
// step counts with the functions of engine/op_params.h that the references call too, in
// double, so both paths use the same values. The unscale is the same kind of op with one
// output, the per-tensor non-finite flags (Note [Fused unscale] in kernels/cpu/amp.cpp). The
// public functions bump the version counters of what the kernels wrote, as in-place ops do.

namespace {

using detail::define;

// The lists of one call: role r's tensor of parameter i is in[r * n + i].
struct Lists {
  std::span<const Tensor> in;
  int roles = 0;
  int64_t n = 0;
  const Tensor& at(int role, int64_t i) const { return in[size_t(role * n + i)]; }
};

Lists lists_of(std::span<const Tensor> in, int roles, const char* op) {
  BRISK_CHECK(in.size() % size_t(roles) == 0, op, ": ", in.size(), " inputs do not split into ", roles,
              " lists of equal length (params, grads and the state buffers these options need)");
  return {in, roles, int64_t(in.size() / size_t(roles))};
}

// Every tensor dense, of the parameters' dtype (F32 or F64), and of its parameter's sizes.
void check_lists(const Lists& l, const std::vector<const char*>& names, const char* op) {
  if (l.n == 0) return;
  const Tensor& first = l.at(0, 0);
  const DType dt = first.dtype();
  BRISK_CHECK(dt == DType::F32 || dt == DType::F64, op, ": params[0] is ", first.str(),
              " (fused steps take F32 and F64; F16/BF16 parameters take the reference step)");
  for (int r = 0; r < l.roles; ++r) {
    for (int64_t i = 0; i < l.n; ++i) {
      const Tensor& t = l.at(r, i);
      const Tensor& p = l.at(0, i);
      if (t.dtype() == dt && t.is_contiguous() && t.sizes() == p.sizes()) continue;
      BRISK_FAIL(op, ": ", names[size_t(r)], "[", i, "] is ", t.str(), t.is_contiguous() ? "" : " (not dense)",
                 " but the step takes dense ", dt, " tensors on ", first.device(), " of the parameter's sizes ",
                 p.sizes());
    }
  }
}

// attrs.per_param: n values of at least `min` (SGD's flags: 0 or 1).
void check_per_param(const Attrs& attrs, int64_t n, int64_t min, const char* op, const char* what) {
  BRISK_CHECK(int64_t(attrs.per_param.size()) == n, op, ": attrs.per_param holds ", attrs.per_param.size(), " ", what,
              ", the call has ", n, n == 0 ? " (these options take none)" : " parameters");
  for (size_t i = 0; i < attrs.per_param.size(); ++i) {
    const int64_t v = attrs.per_param[i];
    BRISK_CHECK(v >= min && (min == 1 || v <= 1), op, ": ", what, "[", i, "] is ", v,
                min == 1 ? " (step counts start at 1)" : " (0 or 1)");
  }
}

// ---- fused_sgd: (params, grads[, momentum_buffers])
void sgd_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec>) {
  const SgdParams p = SgdParams::from(attrs);
  std::vector<const char*> names = {"params", "grads"};
  if (p.num_buffers() == 1) names.push_back("momentum_buffers");
  const Lists l = lists_of(in, int(names.size()), "fused_sgd");
  check_lists(l, names, "fused_sgd");
  check_per_param(attrs, p.num_buffers() == 1 ? l.n : 0, 0, "fused_sgd", "fresh flags");
}

// ---- fused_adam, fused_adamw: (params, grads, exp_avgs, exp_avg_sqs[, max_exp_avg_sqs])
template <bool kDecoupled>
void adam_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec>) {
  const char* op = kDecoupled ? "fused_adamw" : "fused_adam";
  const AdamParams p = AdamParams::from(attrs);
  BRISK_CHECK(p.decoupled == kDecoupled, op, ": the parameters say decoupled = ", p.decoupled, " (",
              kDecoupled ? "fused_adamw" : "fused_adam", " is the one for that)");
  std::vector<const char*> names = {"params", "grads", "exp_avgs", "exp_avg_sqs"};
  if (p.amsgrad) names.push_back("max_exp_avg_sqs");
  const Lists l = lists_of(in, int(names.size()), op);
  check_lists(l, names, op);
  check_per_param(attrs, l.n, 1, op, "step counts");
}

// ---- fused_rmsprop: (params, grads, square_avgs[, grad_avgs][, momentum_buffers])
void rmsprop_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec>) {
  const RmspropParams p = RmspropParams::from(attrs);
  std::vector<const char*> names = {"params", "grads", "square_avgs"};
  if (p.centered) names.push_back("grad_avgs");
  if (p.momentum > 0) names.push_back("momentum_buffers");
  check_lists(lists_of(in, int(names.size()), "fused_rmsprop"), names, "fused_rmsprop");
  check_per_param(attrs, 0, 0, "fused_rmsprop", "values");
}

// ---- fused_adagrad: (params, grads, sums)
void adagrad_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec>) {
  (void)AdagradParams::from(attrs);  // checks the hyperparameters are there
  const std::vector<const char*> names = {"params", "grads", "sums"};
  const Lists l = lists_of(in, 3, "fused_adagrad");
  check_lists(l, names, "fused_adagrad");
  check_per_param(attrs, l.n, 1, "fused_adagrad", "step counts");
}

// ---- amp_unscale: (grads) -> found (n) Bool
void unscale_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& g = in[i];
    BRISK_CHECK(is_floating(g.dtype()) && g.dtype() == in[0].dtype() && g.is_contiguous(), "amp_unscale: grads[", i,
                "] is ", g.str(), g.is_contiguous() ? "" : " (not dense)", " but the unscale takes dense tensors of ",
                in[0].dtype(), ", a floating dtype");
  }
  out[0] = {Shape{int64_t(in.size())}, DType::Bool};
}

// What every input list must hold: n tensors, or none when `present` is false.
void check_length(std::span<const Tensor> list, size_t n, bool present, const char* op, const char* name) {
  BRISK_CHECK(list.size() == (present ? n : 0), op, ": ", name, " holds ", list.size(), " tensors, these options need ",
              present ? n : 0, " (one per parameter", present ? "" : ": none", ")");
}

// Runs a step op on the concatenated lists and bumps the versions of what it wrote.
void run_step(OpId id, std::initializer_list<std::span<const Tensor>> lists, const Attrs& attrs) {
  std::vector<Tensor> in;
  for (std::span<const Tensor> l : lists) in.insert(in.end(), l.begin(), l.end());
  if (in.empty()) return;
  call(id, in, attrs, {});
  const size_t n = lists.begin()->size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (i < n || i >= 2 * n) in[i].bump_version();  // params and state buffers; grads are read
  }
}

}  // namespace

void fused_sgd_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> momentum_buffers,
                std::span<const int64_t> fresh, const SgdParams& p) {
  const size_t n = params.size();
  check_length(grads, n, true, "fused_sgd", "grads");
  check_length(momentum_buffers, n, p.num_buffers() == 1, "fused_sgd", "momentum_buffers");
  Attrs attrs;
  p.store(attrs);
  attrs.per_param.assign(fresh.begin(), fresh.end());
  run_step(OpId::FusedSgd, {params, grads, momentum_buffers}, attrs);
}

void fused_adam_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                 std::span<const Tensor> exp_avg_sqs, std::span<const Tensor> max_exp_avg_sqs,
                 std::span<const int64_t> steps, const AdamParams& p) {
  const char* op = p.decoupled ? "fused_adamw" : "fused_adam";
  const size_t n = params.size();
  check_length(grads, n, true, op, "grads");
  check_length(exp_avgs, n, true, op, "exp_avgs");
  check_length(exp_avg_sqs, n, true, op, "exp_avg_sqs");
  check_length(max_exp_avg_sqs, n, p.amsgrad, op, "max_exp_avg_sqs");
  Attrs attrs;
  p.store(attrs);
  attrs.per_param.assign(steps.begin(), steps.end());
  run_step(p.decoupled ? OpId::FusedAdamw : OpId::FusedAdam, {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs},
           attrs);
}

void fused_rmsprop_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> square_avgs,
                    std::span<const Tensor> grad_avgs, std::span<const Tensor> momentum_buffers,
                    const RmspropParams& p) {
  const size_t n = params.size();
  check_length(grads, n, true, "fused_rmsprop", "grads");
  check_length(square_avgs, n, true, "fused_rmsprop", "square_avgs");
  check_length(grad_avgs, n, p.centered, "fused_rmsprop", "grad_avgs");
  check_length(momentum_buffers, n, p.momentum > 0, "fused_rmsprop", "momentum_buffers");
  Attrs attrs;
  p.store(attrs);
  run_step(OpId::FusedRmsprop, {params, grads, square_avgs, grad_avgs, momentum_buffers}, attrs);
}

void fused_adagrad_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> sums,
                    std::span<const int64_t> steps, const AdagradParams& p) {
  const size_t n = params.size();
  check_length(grads, n, true, "fused_adagrad", "grads");
  check_length(sums, n, true, "fused_adagrad", "sums");
  Attrs attrs;
  p.store(attrs);
  attrs.per_param.assign(steps.begin(), steps.end());
  run_step(OpId::FusedAdagrad, {params, grads, sums}, attrs);
}

Tensor amp_unscale_(std::span<const Tensor> grads, double inv_scale, Device device) {
  Attrs attrs;
  attrs.a = inv_scale;
  attrs.device = device;  // where the flags of an empty list live
  Tensor found[1];
  call(OpId::AmpUnscale, grads, attrs, found);
  for (const Tensor& g : grads) g.bump_version();
  return found[0];
}

namespace detail {

void define_optim_ops() {
  define(OpId::FusedSgd, {.infer = sgd_infer});
  define(OpId::FusedAdam, {.infer = adam_infer<false>});
  define(OpId::FusedAdamw, {.infer = adam_infer<true>});
  define(OpId::FusedRmsprop, {.infer = rmsprop_infer});
  define(OpId::FusedAdagrad, {.infer = adagrad_infer});
  define(OpId::AmpUnscale, {.infer = unscale_infer});
}

}  // namespace detail

}  // namespace brisk
