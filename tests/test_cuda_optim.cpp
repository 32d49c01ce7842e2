// tests/test_cuda_optim.cpp: the fused multi-tensor optimizer steps, the ops fused_sgd,
// fused_adam, fused_adamw, fused_rmsprop and fused_adagrad (engine/ops/optim.cpp).
// Always run: the ops' checks (mixed dtypes, sizes, strides and list lengths refused with clear
// errors naming the list and the parameter), their kernels (CPU, and CUDA in a CUDA build,
// harmless without a GPU), and F16/BF16 parameters taking the reference step when fused. With a GPU: every optimizer
// and option combination, CUDA fused step against the CUDA reference step and the CPU reference over 20 steps in F32
// and F64 (many small tensors, one over a chunk, parameters that skip steps), groups over one launch's table, and mixed
// dtypes, steps on a side stream. GPU tests return early (with a message) when cuda::device_count() is 0. Speed:
// examples/bench/bench_optim.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/kernel_override.h"
#include "engine/op_params.h"
#include "optim/optim.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#include "tests/cuda_test.h"
#endif

using namespace brisk;

namespace {

// One optimizer configuration: its kind and options set by name (booleans as 0/1).
struct Case {
  const char* kind;
  std::vector<std::pair<const char*, double>> options;
};

std::string case_name(const Case& c) {
  std::string s = c.kind;
  for (const auto& [k, v] : c.options) s += " " + std::string(k) + "=" + std::to_string(v);
  return s;
}

// Every optimizer with each option that changes its update rule, alone and combined.
const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = {
      {"SGD", {{"lr", 0.05}}},
      {"SGD", {{"lr", 0.05}, {"weight_decay", 0.01}}},
      {"SGD", {{"lr", 0.05}, {"momentum", 0.9}}},
      {"SGD", {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}}},
      {"SGD", {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", 1}}},
      {"SGD", {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", 1}, {"weight_decay", 0.01}, {"maximize", 1}}},
      {"Adam", {{"lr", 0.01}}},
      {"Adam", {{"lr", 0.01}, {"weight_decay", 0.01}}},
      {"Adam", {{"lr", 0.01}, {"amsgrad", 1}}},
      {"Adam",
       {{"lr", 0.01},
        {"beta1", 0.8},
        {"beta2", 0.99},
        {"eps", 1e-6},
        {"amsgrad", 1},
        {"maximize", 1},
        {"weight_decay", 0.1}}},
      {"AdamW", {{"lr", 0.01}}},
      {"AdamW", {{"lr", 0.01}, {"weight_decay", 0.1}, {"amsgrad", 1}, {"maximize", 1}}},
      {"RMSprop", {{"lr", 0.01}}},
      {"RMSprop", {{"lr", 0.01}, {"centered", 1}}},
      {"RMSprop", {{"lr", 0.01}, {"momentum", 0.9}}},
      {"RMSprop",
       {{"lr", 0.01}, {"alpha", 0.9}, {"centered", 1}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"maximize", 1}}},
      {"Adagrad", {{"lr", 0.05}}},
      {"Adagrad", {{"lr", 0.05}, {"lr_decay", 0.01}, {"weight_decay", 0.01}}},
      {"Adagrad", {{"lr", 0.05}, {"initial_accumulator_value", 0.1}, {"eps", 1e-8}, {"maximize", 1}}},
  };
  return cases;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Case& c, const optim::NamedTensors& params, bool fused) {
  std::unique_ptr<optim::Optimizer> opt;
  const std::string kind = c.kind;
  if (kind == "SGD") opt = std::make_unique<optim::SGD>(params);
  if (kind == "Adam") opt = std::make_unique<optim::Adam>(params);
  if (kind == "AdamW") opt = std::make_unique<optim::AdamW>(params);
  if (kind == "RMSprop") opt = std::make_unique<optim::RMSprop>(params);
  if (kind == "Adagrad") opt = std::make_unique<optim::Adagrad>(params);
  REQUIRE_MESSAGE(opt, "unknown optimizer ", kind);
  for (size_t g = 0; g < opt->num_groups(); ++g) {
    for (const auto& [key, value] : c.options) opt->set(g, key, value);
    opt->set(g, "fused", fused);
  }
  return opt;
}

// Deterministic values of tensor k at step t (t < 0: the initial parameter).
std::vector<double> values(int64_t n, int k, int t) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[size_t(i)] = t < 0 ? std::cos(0.37 * double(i) + double(k)) * 0.5
                         : std::sin(double(t) + 0.11 * double(i) + double(k)) * (1 + 0.01 * double(i % 13));
  }
  return v;
}

// Largest |x - ref| / max(|ref|, 1) (relative above 1, absolute below); NaN on one side only
// counts as infinite.
double mixed_dev(const Tensor& x, const Tensor& ref) {
  std::vector<double> a = x.to(Device::cpu()).to_vector<double>();
  std::vector<double> b = ref.to(Device::cpu()).to_vector<double>();
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1.0));
  }
  return worst;
}

// Largest deviation between two optimizers' parameters and state buffers (matched by name).
double state_dev(const std::vector<Tensor>& pa, const optim::Optimizer& a, const std::vector<Tensor>& pb,
                 const optim::Optimizer& b) {
  double worst = 0;
  for (size_t k = 0; k < pa.size(); ++k) worst = std::max(worst, mixed_dev(pa[k], pb[k]));
  optim::OptimizerState sa = a.state_dict();
  optim::OptimizerState sb = b.state_dict();
  std::map<std::string, Tensor> by_name(sb.tensors.begin(), sb.tensors.end());
  CHECK(sa.tensors.size() == sb.tensors.size());
  for (const auto& named : sa.tensors) {
    const std::string& key = named.first;
    const Tensor& t = named.second;
    auto it = by_name.find(key);
    REQUIRE_MESSAGE(it != by_name.end(), "state buffer ", key, " exists on one side only");
    worst = std::max(worst, mixed_dev(t, it->second));
  }
  auto without_fused = [](optim::Scalars s) {  // the one option the two sides differ in
    std::erase_if(s, [](const auto& kv) { return kv.first.ends_with(".fused"); });
    return s;
  };
  CHECK(without_fused(sa.scalars) == without_fused(sb.scalars));  // step counts and hyperparameters
  return worst;
}

}  // namespace

// ---- the interface (every build, no GPU needed)

TEST_CASE("fused optim ops: the lists are checked, naming the op, the list and the parameter") {
  const AdamParams h{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  auto adam = [&](std::vector<Tensor> p, std::vector<Tensor> g, std::vector<Tensor> m, std::vector<Tensor> v) {
    const std::vector<int64_t> steps(p.size(), 1);
    fused_adam_(p, g, m, v, {}, steps, h);
  };
  Tensor p = zeros({4, 3});
  CHECK_NOTHROW(adam({p}, {ones({4, 3})}, {zeros({4, 3})}, {zeros({4, 3})}));
  CHECK(p.to_vector<float>()[0] < 0);  // stepped against the gradient
  CHECK_THROWS_WITH_AS(adam({p}, {zeros({4, 3}, DType::F64)}, {zeros({4, 3})}, {zeros({4, 3})}),
                       doctest::Contains("fused_adam: grads[0] is Tensor(F64"), Error);
  CHECK_THROWS_WITH_AS(adam({p}, {zeros({3, 4})}, {zeros({4, 3})}, {zeros({4, 3})}),
                       doctest::Contains("of the parameter's sizes (4, 3)"), Error);
  CHECK_THROWS_WITH_AS(
      adam({p, p}, {zeros({4, 3}), zeros({4, 3})}, {zeros({4, 3}), zeros({4, 3})}, {zeros({4, 3}), zeros({3, 4}).t()}),
      doctest::Contains("exp_avg_sqs[1] is"), Error);
  CHECK_THROWS_WITH_AS(adam({p}, {zeros({4, 3})}, {zeros({4, 3})}, {zeros({3, 4}).t()}), doctest::Contains("not dense"),
                       Error);
  CHECK_THROWS_WITH_AS(adam({p}, {zeros({4, 3})}, {zeros({4, 3})}, {}),
                       doctest::Contains("fused_adam: exp_avg_sqs holds 0 tensors, these options need 1"), Error);
  CHECK_THROWS_WITH_AS(adam({p}, {Tensor()}, {zeros({4, 3})}, {zeros({4, 3})}), doctest::Contains("undefined"), Error);
  const Tensor h16 = zeros({4}, DType::BF16);
  CHECK_THROWS_WITH_AS(fused_sgd_({&h16, 1}, {&h16, 1}, {}, {}, SgdParams{.lr = 0.1}),
                       doctest::Contains("F16/BF16 parameters take the reference step"), Error);
  const Tensor i64 = zeros({4}, DType::I64);
  CHECK_THROWS_WITH_AS(fused_sgd_({&i64, 1}, {&i64, 1}, {}, {}, SgdParams{.lr = 0.1}),
                       doctest::Contains("params[0] is Tensor(I64"), Error);
}

TEST_CASE("fused optim ops: lists that do not fit the options are an error, an empty call does nothing") {
  const Tensor p = zeros({5}), g = ones({5}), m = zeros({5}), v = zeros({5});
  const AdamParams amsgrad{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .amsgrad = true};
  const int64_t step = 1, step0 = 0;
  CHECK_THROWS_WITH_AS(fused_adam_({&p, 1}, {&g, 1}, {&m, 1}, {&v, 1}, {}, {&step, 1}, amsgrad),
                       doctest::Contains("max_exp_avg_sqs holds 0 tensors, these options need 1"), Error);
  const AdamParams adam{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  CHECK_THROWS_WITH_AS(fused_adam_({&p, 1}, {&g, 1}, {&m, 1}, {&v, 1}, {}, {}, adam),
                       doctest::Contains("fused_adam: attrs.per_param holds 0 step counts, the call has 1 parameters"),
                       Error);
  CHECK_THROWS_WITH_AS(fused_adam_({&p, 1}, {&g, 1}, {&m, 1}, {&v, 1}, {}, {&step0, 1}, adam),
                       doctest::Contains("step counts[0] is 0 (step counts start at 1)"), Error);
  // Through the op itself: 4 inputs do not split into the 5 lists amsgrad needs.
  Attrs attrs;
  amsgrad.store(attrs);
  const Tensor in[] = {p, g, m, v};
  CHECK_THROWS_WITH_AS(call(OpId::FusedAdam, in, attrs, {}), doctest::Contains("do not split into 5 lists"), Error);
  CHECK_THROWS_WITH_AS(call(OpId::FusedAdamw, in, Attrs{}, {}), doctest::Contains("attrs.geometry must hold"), Error);
  CHECK(SgdParams{}.num_buffers() == 0);
  CHECK(SgdParams{.momentum = 0.9}.num_buffers() == 1);
  CHECK(RmspropParams{.momentum = 0.9, .centered = true}.num_buffers() == 3);
  CHECK(AdagradParams{}.num_buffers() == 1);
  CHECK_NOTHROW(fused_adam_({}, {}, {}, {}, {}, {}, AdamParams{}));
  CHECK_NOTHROW(fused_sgd_({}, {}, {}, {}, SgdParams{}));
}

TEST_CASE("fused optim ops: every fused step has a CPU kernel and, in a CUDA build, a CUDA one") {
  ensure_init();
  for (OpId id : {OpId::FusedSgd, OpId::FusedAdam, OpId::FusedAdamw, OpId::FusedRmsprop, OpId::FusedAdagrad}) {
    CHECK_MESSAGE((op_def(id).kernels[int(DeviceType::CPU)] != nullptr), op_name(id));
#ifdef BRISK_WITH_CUDA
    CHECK_MESSAGE((op_def(id).kernels[int(DeviceType::CUDA)] != nullptr), op_name(id));
#endif
  }
#ifdef BRISK_WITH_CUDA
  // An empty call on cuda:0 does nothing; tensors there are a clear "no such device" error
  // without a GPU.
  CHECK_NOTHROW(fused_adam_({}, {}, {}, {}, {}, {}, AdamParams{}));
  if (cuda::device_count() == 0) {
    CHECK_THROWS_WITH_AS(zeros({3}, DType::F32, Device::cuda(0)), doctest::Contains("no such device"), Error);
  }
#else
  CHECK((op_def(OpId::FusedAdam).kernels[int(DeviceType::CUDA)] == nullptr));
  MESSAGE("built without CUDA: no CUDA fused steps registered");
#endif
}

TEST_CASE("fused optim ops: the optimizers' fused path runs through dispatch (a replaced kernel sees every call)") {
  int calls = 0;
  Kernel builtin = builtin_kernel(OpId::FusedAdam, DeviceType::CPU);
  KernelOverride counting(OpId::FusedAdam, DeviceType::CPU,
                          [&](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
                            ++calls;
                            builtin(in, out, attrs);
                          });
  Tensor a = zeros({3}).requires_grad_(true), b = zeros({2, 2}).requires_grad_(true);
  optim::Adam opt(std::vector<Tensor>{a, b}, optim::AdamOptions{.lr = 0.1, .fused = true});
  a.set_grad(ones({3}));
  b.set_grad(ones({2, 2}));
  opt.step();
  CHECK(calls == 1);  // one call for both parameters (one device, dtype and step count)
  b.set_grad(Tensor());
  opt.step();  // only a steps: its step count is 2
  a.set_grad(ones({3}));
  b.set_grad(ones({2, 2}));
  opt.step();  // a at step 3, b at step 2: still one call (attrs.per_param holds each one's step)
  CHECK(calls == 3);
}

TEST_CASE("fused optim: F16 and BF16 parameters take the reference step even when fused") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    for (const Case& c : all_cases()) {
      std::vector<Tensor> pf, pr;
      optim::NamedTensors nf, nr;
      for (int k = 0; k < 3; ++k) {
        Shape shape = {int64_t(5 + 3 * k)};
        pf.push_back(from_vector(values(shape.numel(), k, -1), shape, dtype).requires_grad_(true));
        pr.push_back(from_vector(values(shape.numel(), k, -1), shape, dtype).requires_grad_(true));
        nf.emplace_back("p" + std::to_string(k), pf.back());
        nr.emplace_back("p" + std::to_string(k), pr.back());
      }
      auto fused = make_optimizer(c, nf, true);
      auto reference = make_optimizer(c, nr, false);
      for (int t = 0; t < 5; ++t) {
        for (size_t k = 0; k < pf.size(); ++k) {
          Tensor g = from_vector(values(pf[k].numel(), int(k), t), pf[k].sizes(), dtype);
          pf[k].set_grad(g.clone());
          pr[k].set_grad(g.clone());
        }
        fused->step();
        reference->step();
      }
      CHECK_MESSAGE(state_dev(pf, *fused, pr, *reference) == 0, case_name(c), " ", dtype);
    }
  }
}

#ifdef BRISK_WITH_CUDA

namespace {

using test::kGpu;

// Counts the calls into the CUDA fused steps while alive (wrapping the built-in kernels through
// dispatch's kernel overrides), so a test knows the fused path ran instead of silently falling
// to the reference.
class CountFusedCalls {
 public:
  CountFusedCalls() {
    calls() = 0;
    for (OpId id : {OpId::FusedSgd, OpId::FusedAdam, OpId::FusedAdamw, OpId::FusedRmsprop, OpId::FusedAdagrad}) {
      Kernel builtin = builtin_kernel(id, DeviceType::CUDA);
      guards_.push_back(std::make_unique<KernelOverride>(
          id, DeviceType::CUDA, [builtin](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
            ++calls();
            builtin(in, out, attrs);
          }));
    }
  }
  ~CountFusedCalls() {
    while (!guards_.empty()) guards_.pop_back();  // reverse order of creation
  }
  CountFusedCalls(const CountFusedCalls&) = delete;
  CountFusedCalls& operator=(const CountFusedCalls&) = delete;

  static int& calls() {
    static int n = 0;
    return n;
  }

 private:
  std::vector<std::unique_ptr<KernelOverride>> guards_;
};

// The parameter shapes of the comparison: `small` tiny tensors (more than one launch's table
// holds for the deeper update rules), one tensor over one chunk (70000 > 65536, with a partial
// last chunk), a single element, an empty tensor, and a transposed view (not dense: the fused
// step hands it to the reference).
std::vector<Shape> comparison_shapes(int small) {
  std::vector<Shape> shapes;
  for (int i = 0; i < small; ++i) shapes.push_back({int64_t(1 + (i * 37) % 300)});
  shapes.push_back({70000});
  shapes.push_back({1});
  shapes.push_back({0});
  shapes.push_back({5, 3});  // made a transposed (3, 5) view below
  return shapes;
}

// Parameters of `shapes` on `device` with the same values everywhere.
std::vector<Tensor> make_params(const std::vector<Shape>& shapes, DType dtype, Device device) {
  std::vector<Tensor> params;
  for (size_t k = 0; k < shapes.size(); ++k) {
    Tensor p = from_vector(values(shapes[k].numel(), int(k), -1), shapes[k], dtype).to(device);
    if (k + 1 == shapes.size()) p = p.t();
    p.requires_grad_(true);
    params.push_back(p);
  }
  return params;
}

optim::NamedTensors named(const std::vector<Tensor>& params) { return optim::number_params(params); }

// Step t's gradients (CPU) for parameters of `shapes`: parameter 1 skips every third step and
// parameter 2 starts at step 5 (so step counts, and Adam's bias corrections, differ per
// parameter inside one fused launch, and some state starts late). Undefined: no gradient.
std::vector<Tensor> make_grads(const std::vector<Tensor>& params, int t) {
  std::vector<Tensor> grads;
  for (size_t k = 0; k < params.size(); ++k) {
    const bool skip = (k == 1 && t % 3 == 1) || (k == 2 && t < 5);
    grads.push_back(
        skip ? Tensor()
             : from_vector(values(params[k].numel(), int(k) + 100, t), params[k].sizes(), params[k].dtype()));
  }
  return grads;
}

void set_grads(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  for (size_t k = 0; k < params.size(); ++k) {
    params[k].set_grad(grads[k].defined() ? grads[k].to(params[k].device()).clone() : Tensor());
  }
}

}  // namespace

TEST_CASE("cuda fused optim: every optimizer and option equals the CUDA reference and the CPU over 20 steps") {
  BRISK_REQUIRE_GPU();
  const std::vector<Shape> shapes = comparison_shapes(60);
  for (DType dtype : {DType::F32, DType::F64}) {
    // Fused against the CUDA reference: the same operations, rounded alike (expected equal; 1
    // ulp allowed). Against the CPU reference: the same operations on another device (also
    // expected equal; the bound leaves room for a CPU math library that rounds differently).
    const double tol_same = dtype == DType::F32 ? 1e-7 : 1e-15;
    const double tol_cpu = dtype == DType::F32 ? 1e-6 : 1e-12;
    double worst_same = 0;
    double worst_cpu = 0;
    for (const Case& c : all_cases()) {
      std::vector<Tensor> pf = make_params(shapes, dtype, kGpu);
      std::vector<Tensor> pr = make_params(shapes, dtype, kGpu);
      std::vector<Tensor> pc = make_params(shapes, dtype, Device::cpu());
      auto fused = make_optimizer(c, named(pf), true);
      auto reference = make_optimizer(c, named(pr), false);
      auto cpu = make_optimizer(c, named(pc), false);
      CountFusedCalls counter;
      for (int t = 0; t < 20; ++t) {
        std::vector<Tensor> grads = make_grads(pc, t);
        set_grads(pf, grads);
        set_grads(pr, grads);
        set_grads(pc, grads);
        const int before = CountFusedCalls::calls();
        fused->step();
        const int fused_calls = CountFusedCalls::calls() - before;
        reference->step();
        cpu->step();
        REQUIRE_MESSAGE(fused_calls == 1, case_name(c), ": step ", t, " made ", fused_calls, " fused calls");
      }
      const int fused_total = CountFusedCalls::calls();
      double same = state_dev(pf, *fused, pr, *reference);
      double vs_cpu = state_dev(pf, *fused, pc, *cpu);
      CHECK_MESSAGE(fused_total == 20, case_name(c), ": the reference optimizers made fused calls");
      CHECK_MESSAGE(same <= tol_same, case_name(c), " ", dtype, ": CUDA fused vs CUDA reference ", same);
      CHECK_MESSAGE(vs_cpu <= tol_cpu, case_name(c), " ", dtype, ": CUDA fused vs CPU reference ", vs_cpu);
      worst_same = std::max(worst_same, same);
      worst_cpu = std::max(worst_cpu, vs_cpu);
    }
    MESSAGE(dtype, ": largest deviation of the CUDA fused step from the CUDA reference ", worst_same,
            ", from the CPU reference ", worst_cpu);
  }
}

TEST_CASE("cuda fused optim: a group over one launch's table (many tensors, 21M elements) splits into launches") {
  BRISK_REQUIRE_GPU();
  // 70 small tensors (over the 56 of the shallowest table) and one tensor over 320 chunks of
  // 65536 (one launch's limit), placed after other tensors so its chunks straddle launches.
  std::vector<Shape> shapes = comparison_shapes(70);
  shapes.insert(shapes.begin() + 40, Shape{320 * 65536 + 12345});
  const std::vector<Case> cases = {{"SGD", {{"lr", 0.05}}},
                                   {"Adam", {{"lr", 0.01}, {"amsgrad", 1}, {"weight_decay", 0.01}}},
                                   {"RMSprop", {{"lr", 0.01}, {"centered", 1}}}};
  for (const Case& c : cases) {
    std::vector<Tensor> pf = make_params(shapes, DType::F32, kGpu);
    std::vector<Tensor> pr = make_params(shapes, DType::F32, kGpu);
    auto fused = make_optimizer(c, named(pf), true);
    auto reference = make_optimizer(c, named(pr), false);
    CountFusedCalls counter;
    for (int t = 0; t < 3; ++t) {
      std::vector<Tensor> grads = make_grads(pf, t);
      set_grads(pf, grads);
      set_grads(pr, grads);
      fused->step();
      reference->step();
    }
    CHECK(CountFusedCalls::calls() == 3);
    double dev = state_dev(pf, *fused, pr, *reference);
    CHECK_MESSAGE(dev <= 1e-7, case_name(c), ": CUDA fused vs CUDA reference ", dev);
  }
}

TEST_CASE("cuda fused optim: a group mixing F32, F64 and BF16 fuses per dtype and leaves BF16 to the reference") {
  BRISK_REQUIRE_GPU();
  const std::vector<DType> dtypes = {DType::F32, DType::F64, DType::BF16, DType::F32, DType::F64};
  auto make = [&] {
    std::vector<Tensor> params;
    for (size_t k = 0; k < dtypes.size(); ++k) {
      Shape shape = {int64_t(100 + 1000 * k)};
      params.push_back(from_vector(values(shape.numel(), int(k), -1), shape, dtypes[k]).to(kGpu).requires_grad_(true));
    }
    return params;
  };
  for (const Case& c : all_cases()) {
    std::vector<Tensor> pf = make();
    std::vector<Tensor> pr = make();
    auto fused = make_optimizer(c, named(pf), true);
    auto reference = make_optimizer(c, named(pr), false);
    CountFusedCalls counter;
    for (int t = 0; t < 8; ++t) {
      std::vector<Tensor> grads = make_grads(pf, t);
      set_grads(pf, grads);
      set_grads(pr, grads);
      fused->step();
      reference->step();
    }
    CHECK_MESSAGE(CountFusedCalls::calls() == 16, case_name(c), ": one fused call per step for F32 and one for F64");
    double dev = state_dev(pf, *fused, pr, *reference);
    CHECK_MESSAGE(dev <= 1e-7, case_name(c), ": mixed dtypes, CUDA fused vs CUDA reference ", dev);
  }
}

TEST_CASE("cuda fused optim: fused steps queued on a side stream (StreamGuard) equal the reference there") {
  BRISK_REQUIRE_GPU();
  cuda::Stream side = cuda::Stream::create(0);
  std::vector<Tensor> pf = make_params(comparison_shapes(4), DType::F32, kGpu);
  std::vector<Tensor> pr = make_params(comparison_shapes(4), DType::F32, kGpu);
  const Case c = {"Adam", {{"lr", 0.01}}};
  auto fused = make_optimizer(c, named(pf), true);
  auto reference = make_optimizer(c, named(pr), false);
  for (int t = 0; t < 3; ++t) {
    std::vector<Tensor> grads = make_grads(pf, t);
    set_grads(pf, grads);
    set_grads(pr, grads);
    cuda::synchronize();
    {
      cuda::StreamGuard guard(side);
      fused->step();
      reference->step();
      side.synchronize();
    }
  }
  CHECK(state_dev(pf, *fused, pr, *reference) <= 1e-7);
}

#endif  // BRISK_WITH_CUDA
