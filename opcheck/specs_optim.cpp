// opcheck/specs_optim.cpp: specs of the fused optimizer steps and the gradient unscale
// (engine/ops/optim.cpp). A step's spec runs the op on copies of its lists (two parameters at
// different step counts, one fresh SGD momentum buffer) and returns the updated parameters and
// state buffers, flattened; its reference is the optimizer's own tensor-op reference step
// (fused = false) from the same state, loaded through load_state_dict. The unscale's returns
// the scaled gradients and the flags, against a plain loop. F32 against F64; no gradients (the
// ops are not differentiable), no integer dtypes.
// Not here: every option combination, skipped steps over many steps and the CUDA comparisons
// (tests/test_optim.cpp, tests/test_cuda_optim.cpp), the scaler's policy (tests/test_amp.cpp).
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "engine/op_params.h"
#include "opcheck/spec.h"
#include "optim/optim.h"

namespace brisk::opcheck {
namespace {

using V = std::vector<double>;
using Lists = std::vector<std::vector<Tensor>>;  // params, grads, then each state buffer

// The sizes of the two parameters of every case.
const Shape kShapes[] = {{3, 4}, {5}};

// One fused step as a spec: the op through its public function, and the optimizer whose
// reference step it must equal.
struct StepSpec {
  std::string name{};
  OpId op = OpId::FusedSgd;
  std::vector<std::string> buffers{};               // state buffer names, in the op's order
  std::vector<std::pair<double, double>> ranges{};  // value range of each buffer
  std::vector<int64_t> per_param{};                 // attrs.per_param of the two parameters
  bool counts = true;                               // per_param are step counts (else SGD's fresh flags)
  std::function<void(const Lists&, const std::vector<int64_t>&)> run{};
  std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)> make{};
};

// Inputs (params, grads, buffers; two tensors each) -> lists of copies.
Lists lists_of(const std::vector<Tensor>& in, size_t roles) {
  NoGradGuard ng;
  Lists l(roles);
  for (size_t r = 0; r < roles; ++r) {
    for (size_t i = 0; i < 2; ++i) l[r].push_back(in[r * 2 + i].detach().clone());
  }
  return l;
}

// The parameters, then the state buffers, flattened into one F64 vector.
Tensor flattened(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flat;
  for (const Tensor& t : parts) flat.push_back(cast(t.reshape({t.numel()}), DType::F64));
  return cat(flat);
}

TensorFn step_fn(const StepSpec& s) {
  return [s](const std::vector<Tensor>& in) {
    const Lists l = lists_of(in, 2 + s.buffers.size());
    s.run(l, s.per_param);
    std::vector<Tensor> out = l[0];
    for (size_t b = 0; b < s.buffers.size(); ++b) out.insert(out.end(), l[2 + b].begin(), l[2 + b].end());
    return flattened(out);
  };
}

// The optimizer's reference step (fused = false) from the state the inputs give: each
// parameter's buffers and step count (this step makes it per_param), or, for SGD's fresh
// parameters, no momentum buffer yet.
TensorFn reference_fn(const StepSpec& s) {
  return [s](const std::vector<Tensor>& in) {
    Lists l = lists_of(in, 2 + s.buffers.size());
    optim::NamedTensors named;
    for (size_t i = 0; i < 2; ++i) {
      Tensor p = l[0][i].requires_grad_(true);
      p.set_grad(l[1][i]);
      named.emplace_back(std::to_string(i), p);
    }
    std::unique_ptr<optim::Optimizer> opt = s.make(named);
    optim::OptimizerState state = opt->state_dict();
    for (size_t i = 0; i < 2; ++i) {
      const std::string key = "state." + std::to_string(i) + ".";
      const bool counted = s.counts && !s.per_param.empty();  // RMSprop's step count does not matter
      const bool fresh = !s.counts && s.per_param[i] != 0;
      state.scalars[key + "step"] = counted ? double(s.per_param[i] - 1) : 3.0;
      for (size_t b = 0; b < s.buffers.size() && !fresh; ++b)
        state.tensors.emplace_back(key + s.buffers[b], l[2 + b][i]);
    }
    opt->load_state_dict(state);
    opt->step();
    std::vector<Tensor> out;
    for (size_t i = 0; i < 2; ++i) out.push_back(named[i].second.detach());
    for (const std::string& b : s.buffers) {
      for (size_t i = 0; i < 2; ++i) {
        const optim::ParamState* st = opt->state(std::to_string(i));
        BRISK_CHECK(st && st->buffers.count(b), s.name, ": the reference step left no state '", b, "' for parameter ",
                    i);
        out.push_back(st->buffers.at(b));
      }
    }
    return flattened(out);
  };
}

OpSpec spec_of(const StepSpec& s) {
  OpSpec spec;
  spec.name = s.name;
  spec.covers = {s.op};
  spec.fn = step_fn(s);
  spec.reference = reference_fn(s);
  spec.cases = [s] {
    std::vector<Tensor> in;
    uint64_t seed = 11;
    auto add = [&](double lo, double hi) {
      for (const Shape& shape : kShapes) in.push_back(uniform_values(shape, lo, hi, seed++));
    };
    add(-1, 1);  // params
    add(-1, 1);  // grads
    for (const auto& [lo, hi] : s.ranges) add(lo, hi);
    return std::vector<OpCase>{{"(3, 4) and (5)", in}};
  };
  spec.grad = false;
  spec.integers = false;
  return spec;
}

std::vector<int64_t> steps(int64_t a, int64_t b) { return {a, b}; }

void add_step_specs(std::vector<OpSpec>& specs) {
  using optim::NamedTensors;
  specs.push_back(spec_of({
      .name = "fused_sgd (momentum, dampening, weight decay; one buffer fresh)",
      .op = OpId::FusedSgd,
      .buffers = {"momentum_buffer"},
      .ranges = {{-1, 1}},
      .per_param = steps(1, 0),
      .counts = false,
      .run =
          [](const Lists& l, const std::vector<int64_t>& fresh) {
            fused_sgd_(l[0], l[1], l[2], fresh, SgdParams{0.1, 0.9, 0.1, 0.01});
          },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::SGD>(
                p,
                optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .fused = false});
          },
  }));
  specs.push_back(spec_of({
      .name = "fused_sgd (nesterov, maximize, no buffers fresh)",
      .op = OpId::FusedSgd,
      .buffers = {"momentum_buffer"},
      .ranges = {{-1, 1}},
      .per_param = steps(0, 0),
      .counts = false,
      .run =
          [](const Lists& l, const std::vector<int64_t>& fresh) {
            fused_sgd_(l[0], l[1], l[2], fresh,
                       SgdParams{.lr = 0.1, .momentum = 0.9, .nesterov = true, .maximize = true});
          },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::SGD>(
                p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .maximize = true, .fused = false});
          },
  }));
  specs.push_back(spec_of({
      .name = "fused_sgd (plain)",
      .op = OpId::FusedSgd,
      .per_param = steps(0, 0),
      .counts = false,
      .run = [](const Lists& l, const std::vector<int64_t>&) { fused_sgd_(l[0], l[1], {}, {}, SgdParams{.lr = 0.1}); },
      .make =
          [](NamedTensors p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .fused = false}); },
  }));
  const AdamParams adam{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
  specs.push_back(spec_of({
      .name = "fused_adam (L2 weight decay; steps 3 and 1)",
      .op = OpId::FusedAdam,
      .buffers = {"exp_avg", "exp_avg_sq"},
      .ranges = {{-1, 1}, {0, 1}},
      .per_param = steps(3, 1),
      .run = [adam](const Lists& l,
                    const std::vector<int64_t>& t) { fused_adam_(l[0], l[1], l[2], l[3], {}, t, adam); },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::Adam>(p,
                                                 optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01, .fused = false});
          },
  }));
  AdamParams amsgrad = adam;
  amsgrad.amsgrad = true;
  amsgrad.maximize = true;
  specs.push_back(spec_of({
      .name = "fused_adam (amsgrad, maximize; steps 2 and 7)",
      .op = OpId::FusedAdam,
      .buffers = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
      .ranges = {{-1, 1}, {0, 1}, {0, 1}},
      .per_param = steps(2, 7),
      .run = [amsgrad](const Lists& l,
                       const std::vector<int64_t>& t) { fused_adam_(l[0], l[1], l[2], l[3], l[4], t, amsgrad); },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::Adam>(
                p, optim::AdamOptions{
                       .lr = 0.01, .weight_decay = 0.01, .amsgrad = true, .maximize = true, .fused = false});
          },
  }));
  AdamParams adamw = adam;
  adamw.decoupled = true;
  specs.push_back(spec_of({
      .name = "fused_adamw (decoupled weight decay; steps 4 and 1)",
      .op = OpId::FusedAdamw,
      .buffers = {"exp_avg", "exp_avg_sq"},
      .ranges = {{-1, 1}, {0, 1}},
      .per_param = steps(4, 1),
      .run = [adamw](const Lists& l,
                     const std::vector<int64_t>& t) { fused_adam_(l[0], l[1], l[2], l[3], {}, t, adamw); },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::AdamW>(
                p, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.01, .fused = false});
          },
  }));
  specs.push_back(spec_of({
      .name = "fused_rmsprop (centered, momentum, weight decay)",
      .op = OpId::FusedRmsprop,
      .buffers = {"square_avg", "grad_avg", "momentum_buffer"},
      .ranges = {{1, 2}, {-0.5, 0.5}, {-1, 1}},  // square_avg - grad_avg^2 > 0
      .per_param = {},
      .run =
          [](const Lists& l, const std::vector<int64_t>&) {
            fused_rmsprop_(
                l[0], l[1], l[2], l[3], l[4],
                RmspropParams{
                    .lr = 0.01, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0.01, .momentum = 0.9, .centered = true});
          },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::RMSprop>(
                p, optim::RMSpropOptions{
                       .lr = 0.01, .weight_decay = 0.01, .momentum = 0.9, .centered = true, .fused = false});
          },
  }));
  specs.push_back(spec_of({
      .name = "fused_rmsprop (plain, maximize)",
      .op = OpId::FusedRmsprop,
      .buffers = {"square_avg"},
      .ranges = {{0, 1}},
      .per_param = {},
      .run =
          [](const Lists& l, const std::vector<int64_t>&) {
            fused_rmsprop_(l[0], l[1], l[2], {}, {},
                           RmspropParams{.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .maximize = true});
          },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::RMSprop>(
                p, optim::RMSpropOptions{.lr = 0.01, .maximize = true, .fused = false});
          },
  }));
  specs.push_back(spec_of({
      .name = "fused_adagrad (lr decay, weight decay; steps 5 and 1)",
      .op = OpId::FusedAdagrad,
      .buffers = {"sum"},
      .ranges = {{0, 1}},
      .per_param = steps(5, 1),
      .run =
          [](const Lists& l, const std::vector<int64_t>& t) {
            fused_adagrad_(l[0], l[1], l[2], t,
                           AdagradParams{.lr = 0.1, .lr_decay = 0.01, .eps = 1e-10, .weight_decay = 0.01});
          },
      .make =
          [](NamedTensors p) {
            return std::make_unique<optim::Adagrad>(
                p, optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.01, .weight_decay = 0.01, .fused = false});
          },
  }));
}

// ---- amp_unscale: the gradients * 1/1024, then the flags (as 0 / 1), flattened.
constexpr double kInvScale = 1.0 / 1024;

std::vector<Tensor> unscale_inputs() {
  Tensor a = uniform_values({3, 4}, -1000, 1000, 31);
  Tensor b = uniform_values({6}, -1000, 1000, 32);
  V bv = b.to_vector<double>();
  bv[2] = INFINITY;
  bv[4] = NAN;
  return {a, from_vector(bv, {6}, DType::F64), uniform_values({2, 2}, -1, 1, 33)};
}

OpSpec unscale_spec() {
  OpSpec spec;
  spec.name = "amp_unscale";
  spec.covers = {OpId::AmpUnscale};
  spec.fn = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> grads;
    for (const Tensor& g : in) grads.push_back(g.detach().clone());
    const Tensor found = amp_unscale_(grads, kInvScale);
    grads.push_back(found);
    return flattened(grads);
  };
  spec.reference = [](const std::vector<Tensor>& in) {
    V out, flags;
    for (const Tensor& g : in) {
      bool bad = false;
      for (double v : g.to_vector<double>()) {
        bad = bad || !std::isfinite(v);
        out.push_back(v * kInvScale);
      }
      flags.push_back(bad ? 1 : 0);
    }
    out.insert(out.end(), flags.begin(), flags.end());
    return from_vector(out, {int64_t(out.size())}, DType::F64);
  };
  spec.cases = [] { return std::vector<OpCase>{{"(3, 4), (6) with inf and NaN, (2, 2)", unscale_inputs()}}; };
  spec.grad = false;
  spec.integers = false;
  spec.dtypes = {DType::F32, DType::F16, DType::BF16};
  return spec;
}

}  // namespace

void add_optim_specs(std::vector<OpSpec>& specs) {
  add_step_specs(specs);
  specs.push_back(unscale_spec());
}

}  // namespace brisk::opcheck
