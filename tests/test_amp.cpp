// tests/test_amp.cpp: mixed precision: the autocast policy table and its edits, nested
// disabled guards, the cast cache, conv2d and linear under autocast; F32 master weights;
// GradScaler against PyTorch's golden trace (tests/data/amp/grad_scaler.json, made by
// tests/make_amp_reference.py), its errors, state and checkpoint resume; overflow provenance
// (the scaler's parameter names, NonfiniteWatch and anomaly mode naming the module).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/autocast.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/nonfinite.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tests/paths.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"

using namespace brisk;
using brisk::test::error_text;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Tensor param(const std::vector<double>& v, const Shape& s, DType dt = DType::F32) {
  Tensor t = from_vector(v, s, dt);
  t.requires_grad_(true);
  return t;
}

double num(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return NAN;
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return v.get<double>();
}

std::vector<double> nums(const json& a) {
  std::vector<double> out;
  for (const json& v : a) out.push_back(num(v));
  return out;
}

double max_rel_dev(const std::vector<double>& x, const std::vector<double>& ref) {
  REQUIRE(x.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - ref[i]) / std::max(std::abs(ref[i]), 1e-6));
  return worst;
}

// Restores the default policies when a test ends, whatever it changed.
struct PolicyReset {
  ~PolicyReset() { autocast::reset_policies(); }
};

}  // namespace

// ---- autocast policies

TEST_CASE("autocast: the default policies follow PyTorch's lists") {
  using P = CastPolicy;
  for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA}) {
    CHECK(autocast::policy("matmul", d) == P::Lower);
    CHECK(autocast::policy("linear", d) == P::LowerMixed);  // Note [Mixed linear]
    CHECK(autocast::policy("conv2d", d) == P::Lower);
    for (const char* op : {"softmax", "log_softmax", "cross_entropy", "layer_norm", "batch_norm", "exp", "log", "pow",
                           "sum", "var", "logsumexp"}) {
      CHECK_MESSAGE(autocast::policy(op, d) == P::Fp32, op);
    }
    for (const char* op : {"add", "mul", "cat", "where"}) CHECK_MESSAGE(autocast::policy(op, d) == P::Promote, op);
    for (const char* op : {"view", "permute", "expand", "slice", "relu", "max_pool2d", "amax"}) {
      CHECK_MESSAGE(autocast::policy(op, d) == P::None, op);
    }
  }
  const auto rows = autocast::policies();
  CHECK(rows.size() == size_t(kNumOps));
  bool seen = false;
  for (const auto& r : rows) seen |= r.op == "conv2d" && r.cpu == P::Lower && r.cuda == P::Lower;
  CHECK(seen);
  CHECK(std::string(autocast::policy_name(P::Fp32)) == "fp32");
}

TEST_CASE("autocast: set_policy changes one op on one or every device, and reset restores it") {
  PolicyReset reset;
  Tensor x = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor w = param({1, 0, 0, 1}, {2, 2});
  autocast::set_policy("matmul", DeviceType::CPU, CastPolicy::Fp32);
  CHECK(autocast::policy("matmul", DeviceType::CPU) == CastPolicy::Fp32);
  CHECK(autocast::policy("matmul", DeviceType::CUDA) == CastPolicy::Lower);
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    CHECK(matmul(x, w).dtype() == DType::F32);
  }
  autocast::set_policy("conv2d", CastPolicy::None);
  CHECK(autocast::policy("conv2d", DeviceType::CUDA) == CastPolicy::None);
  autocast::reset_policies();
  CHECK(autocast::policy("matmul", DeviceType::CPU) == CastPolicy::Lower);
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    CHECK(matmul(x, w).dtype() == DType::BF16);
  }
}

TEST_CASE("autocast: bad names, policies and dtypes are clear errors") {
  const std::string e = error_text([] { autocast::set_policy("conv3d", CastPolicy::Fp32); });
  CHECK(e.find("autocast::set_policy: unknown op 'conv3d'") != std::string::npos);
  CHECK(e.find("conv2d") != std::string::npos);  // lists the known ones
  CHECK(error_text([] { autocast::policy("nope", DeviceType::CPU); }).find("unknown op 'nope'") != std::string::npos);
  CHECK(error_text([] { autocast::set_policy("matmul", CastPolicy(7)); }).find("invalid policy 7") !=
        std::string::npos);
  CHECK(error_text([] { AutocastGuard g(DeviceType::CPU, DType::F32); }).find("must be F16 or BF16") !=
        std::string::npos);
  CHECK(!autocast::is_enabled(DeviceType::CPU));
}

TEST_CASE("autocast: a disabled guard nested in an enabled one turns it off for its scope only") {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2});
  AutocastGuard outer(DeviceType::CPU, DType::BF16);
  CHECK(matmul(a, a).dtype() == DType::BF16);
  {
    AutocastGuard inner(DeviceType::CPU, DType::BF16, /*enabled=*/false);
    CHECK(!autocast::is_enabled(DeviceType::CPU));
    CHECK(matmul(a, a).dtype() == DType::F32);
  }
  CHECK(autocast::is_enabled(DeviceType::CPU));
  CHECK(matmul(a, a).dtype() == DType::BF16);
  // F64 inputs are never cast (PyTorch's rule), integers neither.
  Tensor d = from_vector({1, 2, 3, 4}, {2, 2}, DType::F64);
  CHECK(matmul(d, d).dtype() == DType::F64);
  CHECK(sum(d).dtype() == DType::F64);
}

TEST_CASE("autocast: one weight used three times is cast once; the cache empties at the outermost exit") {
  // matmul casts its weight (linear reads it in place: the next test).
  Tensor w = param({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor x = from_vector({1, 0, 1, 0, 1, 0}, {2, 3});
  Tensor loss;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    Tensor h = matmul(x, w);
    {
      AutocastGuard nested(DeviceType::CPU, DType::BF16);  // nesting does not empty the cache
      h = h + matmul(x, w);
    }
    h = h + matmul(x, w);
    const auto stats = autocast::cache_stats();
    CHECK(stats.entries == 1);
    CHECK(stats.misses == 1);
    CHECK(stats.hits == 2);
    loss = sum(h);
  }
  CHECK(autocast::cache_stats().entries == 0);
  loss.backward();
  // d loss / d w[k, j] = 3 * sum_i x[i, k] (three uses, summed through the one cast node).
  const std::vector<double> g = w.grad().to_vector<double>();
  const std::vector<double> want = {3, 3, 3, 3, 3, 3};
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]));
  // A weight changed in place inside the region is cast again (the version counter).
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    matmul(x, w);
    {
      NoGradGuard no_grad;
      w.add_(1.0);
    }
    Tensor y = matmul(x, w);
    CHECK(autocast::cache_stats().misses == 2);
    CHECK(y.to_vector<double>()[0] == doctest::Approx(1 + 1 + 5 + 1));
  }
}

// Note [Mixed linear] in engine/ops/linalg.cpp.
TEST_CASE("autocast: linear reads F32 weights at BF16 precision: no cast, PyTorch's bits, F32 weight gradients") {
  manual_seed(21);
  for (bool in_out : {false, true}) {
    CAPTURE(in_out);
    const int64_t rows = 37, k = 70, n = 45;
    Tensor w = (randn(in_out ? Shape{k, n} : Shape{n, k}) * 0.1).requires_grad_(true);
    Tensor b = (randn({n}) * 0.1).requires_grad_(true);
    Tensor x_leaf = randn({rows, k}).requires_grad_(true);
    const Tensor x = x_leaf * 1.0;  // not a leaf: the cache holds parameters only
    auto lin = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
      return in_out ? linear_in_out(xx, ww, bb) : linear(xx, ww, bb);
    };
    Tensor y;
    {
      AutocastGuard guard(DeviceType::CPU, DType::BF16);
      y = lin(x, w, b);
      CHECK(autocast::cache_stats().entries == 0);  // w and b were not cast
    }
    REQUIRE(y.dtype() == DType::BF16);
    // The forward PyTorch's autocast computes: every operand cast to BF16 first.
    {
      NoGradGuard no_grad;
      const Tensor want = lin(x.to(DType::BF16), w.to(DType::BF16), b.to(DType::BF16));
      CHECK(y.to_vector<double>() == want.to_vector<double>());
    }
    const Tensor g = randn({rows, n}).to(DType::BF16);
    y.backward(g);
    REQUIRE(w.grad().dtype() == DType::F32);
    REQUIRE(b.grad().dtype() == DType::F32);
    REQUIRE(x_leaf.grad().dtype() == DType::F32);
    // The weight gradient is the F32 sum of BF16 products, not rounded to BF16: within F32
    // summation error of the exact sum (a BF16 rounding would be off by up to 2^-9).
    const std::vector<double> gv = g.to_vector<double>(), xv = x.to(DType::BF16).to_vector<double>();
    const std::vector<double> gw = w.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
    double worst = 0, worst_b = 0;
    for (int64_t o = 0; o < n; ++o) {
      for (int64_t i = 0; i < k; ++i) {
        double exact = 0, mag = 0;
        for (int64_t r = 0; r < rows; ++r) {
          exact += gv[size_t(r * n + o)] * xv[size_t(r * k + i)];
          mag += std::abs(gv[size_t(r * n + o)] * xv[size_t(r * k + i)]);
        }
        const double got = gw[size_t(in_out ? i * n + o : o * k + i)];
        worst = std::max(worst, std::abs(got - exact) / mag);
      }
      double exact_b = 0, mag_b = 0;
      for (int64_t r = 0; r < rows; ++r) {
        exact_b += gv[size_t(r * n + o)];
        mag_b += std::abs(gv[size_t(r * n + o)]);
      }
      worst_b = std::max(worst_b, std::abs(gb[size_t(o)] - exact_b) / mag_b);
    }
    CHECK(worst < 1e-6);
    CHECK(worst_b < 1e-6);
    w.zero_grad();
    b.zero_grad();
    x_leaf.zero_grad();
  }
}

TEST_CASE("autocast: conv2d runs in BF16 with F32 weights and matches F32 within BF16 rounding") {
  manual_seed(3);
  nn::Conv2d conv(3, 4, 3, {.padding = {1, 1}});
  Tensor x = randn({2, 3, 6, 6});
  Tensor ref = conv(x);
  sum(ref * ref).backward();
  const std::vector<double> gref = conv.parameter("weight").grad().to_vector<double>();
  conv.zero_grad();
  Tensor y;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BF16);
    y = conv(x);
    CHECK(y.dtype() == DType::BF16);
    Tensor loss = sum(cast(y, DType::F32) * cast(y, DType::F32));
    CHECK(loss.dtype() == DType::F32);
    loss.backward();
  }
  CHECK(conv.parameter("weight").dtype() == DType::F32);
  CHECK(conv.parameter("weight").grad().dtype() == DType::F32);
  const std::vector<double> a = y.to_vector<double>(), b = ref.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  CHECK(worst < 0.02 * scale);
  CHECK(worst > 0);  // it really ran in BF16
  const std::vector<double> g = conv.parameter("weight").grad().to_vector<double>();
  double gworst = 0, gscale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    gworst = std::max(gworst, std::abs(g[i] - gref[i]));
    gscale = std::max(gscale, std::abs(gref[i]));
  }
  CHECK(gworst < 0.03 * gscale);
}

// Note [BF16 through F32 blocks] in kernels/cpu/vmath.cpp: dense BF16 gelu, its backward, exp,
// tanh and sigmoid widen exactly, run the F32 kernels' functions and round once, so they give
// the bits of the F32 kernel's result rounded to BF16.
TEST_CASE("BF16 kernels: dense gelu, gelu_backward, exp, tanh and sigmoid are the F32 kernels rounded once") {
  manual_seed(11);
  // GELU's tails, tanh's flat parts, and the edge values: NaN, +-inf, +-0, a subnormal, exp's
  // overflow and underflow.
  const Tensor specials = from_vector({NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40, 89.0, -104.0, 1e30}, {9});
  const Tensor x = cat({randn({3000 * 7 - 9}) * 3.0, specials}, 0).reshape({3000, 7}).to(DType::BF16);
  const Tensor g = randn({3000, 7}).to(DType::BF16);
  const Tensor x32 = x.to(DType::F32), g32 = g.to(DType::F32);
  auto same_bits = [](const Tensor& fast, const Tensor& f32, const std::string& what) {
    CAPTURE(what);
    REQUIRE(fast.dtype() == DType::BF16);
    const std::vector<double> a = fast.to_vector<double>(), b = f32.to(DType::BF16).to_vector<double>();
    REQUIRE(a.size() == b.size());
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
    CHECK(differ == 0);
  };
  // x's gradient through the gelu_backward op.
  auto gelu_grad = [](const Tensor& at, const Tensor& dy, bool approx) {
    Tensor leaf = at.detach();
    leaf.requires_grad_(true);
    gelu(leaf, approx).backward(dy);
    return leaf.grad();
  };
  for (bool approx : {false, true}) {
    const std::string form = approx ? " (tanh)" : " (erf)";
    same_bits(gelu(x, approx), gelu(x32, approx), "gelu" + form);
    same_bits(gelu_grad(x, g, approx), gelu_grad(x32, g32, approx), "gelu_backward" + form);
  }
  same_bits(exp(x), exp(x32), "exp");
  same_bits(tanh(x), tanh(x32), "tanh");
  same_bits(sigmoid(x), sigmoid(x32), "sigmoid");
  // A strided BF16 operand takes the elementwise list's scalar kernel: still within a BF16 ulp
  // of the dense path where the result is not tiny.
  const std::vector<double> strided = gelu(x.t(), true).t().contiguous().to_vector<double>();
  const std::vector<double> dense = gelu(x, true).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < dense.size(); ++i)
    if (std::abs(dense[i]) > 1e-3) worst = std::max(worst, std::abs(strided[i] - dense[i]) / std::abs(dense[i]));
  CHECK(worst <= 1.0 / 128);
}

// Note [Mixed linear] at edge values: NaN and infinities in the input and the weight, a bias of
// -inf, no rows, and K = 0 give what casting every operand to BF16 first gives, bit for bit.
TEST_CASE("autocast: linear's mixed form at edge values equals casting first (NaN, inf, no rows, K = 0)") {
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    REQUIRE(a.sizes() == b.sizes());
    REQUIRE(a.dtype() == b.dtype());
    const std::vector<double> u = a.to_vector<double>(), v = b.to_vector<double>();
    for (size_t i = 0; i < u.size(); ++i) {
      if (!(u[i] == v[i] || (std::isnan(u[i]) && std::isnan(v[i])))) return false;
    }
    return true;
  };
  auto check = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor got;
    {
      AutocastGuard guard(DeviceType::CPU, DType::BF16);
      got = linear(x, w, b);
    }
    const Tensor want = linear(x.to(DType::BF16), w.to(DType::BF16), b.defined() ? b.to(DType::BF16) : Tensor());
    CHECK(same_bits(got, want));
  };
  manual_seed(8);
  Tensor x = randn({5, 6});
  Tensor w = randn({4, 6});
  Tensor b = randn({4});
  {
    NoGradGuard no_grad;
    x.narrow(0, 1, 1).fill_(NAN);
    x.narrow(0, 2, 1).narrow(1, 3, 1).fill_(INFINITY);
    w.narrow(0, 3, 1).narrow(1, 0, 1).fill_(-INFINITY);
    b.narrow(0, 2, 1).fill_(-INFINITY);
  }
  check(x, w, b);
  check(x, w, Tensor());
  check(randn({0, 6}), w, b);              // no rows
  check(randn({5, 0}), randn({4, 0}), b);  // K = 0: the bias alone
  check(randn({5, 0}), randn({4, 0}), Tensor());
}

// ---- master weights

TEST_CASE("master weights: an update below half a BF16 ulp moves the weight only with an F32 master copy") {
  // w = 1 in BF16 (ulp 2^-7); lr * grad = 1e-3 < 2^-8: SGD without a master rounds it away.
  for (bool master : {false, true}) {
    Tensor w = param({1.0, 1.0}, {2}, DType::BF16);
    optim::SGD opt({w}, {.lr = 1e-3});
    opt.use_master_weights(master);
    for (int step = 0; step < 10; ++step) {
      w.set_grad(full({2}, 1.0, DType::BF16));
      opt.step();
    }
    CHECK(w.dtype() == DType::BF16);
    const double v = w.to_vector<double>()[0];
    if (master) {
      const Tensor m = opt.state("0")->buffers.at("master_weight");
      CHECK(m.dtype() == DType::F32);
      CHECK(m.to_vector<double>()[0] == doctest::Approx(0.99).epsilon(1e-6));
      CHECK(v == doctest::Approx(0.98828125));  // 0.99 rounded to BF16
    } else {
      CHECK(v == 1.0);  // frozen
    }
  }
}

TEST_CASE("master weights: Adam state is F32 and the master travels in state_dict and checkpoints") {
  Tensor w = param({0.5, -0.25, 2.0}, {3}, DType::BF16);
  optim::Adam opt({{"w", w}}, {.lr = 1e-4});
  opt.use_master_weights();
  w.set_grad(from_vector({1, 1, 1}, {3}, DType::BF16));
  opt.step();
  CHECK(opt.state("w")->buffers.at("exp_avg").dtype() == DType::F32);
  const optim::OptimizerState st = opt.state_dict();
  bool has_master = false;
  for (const auto& [k, t] : st.tensors) has_master |= k == "state.w.master_weight" && t.dtype() == DType::F32;
  CHECK(has_master);
  // A second optimizer without master weights refuses that state; one with them restores it in F32.
  Tensor w2 = param({0.5, -0.25, 2.0}, {3}, DType::BF16);
  optim::Adam plain({{"w", w2}}, {.lr = 1e-4});
  CHECK(error_text([&] { plain.load_state_dict(st); }).find("master weight") != std::string::npos);
  optim::Adam with({{"w", w2}}, {.lr = 1e-4});
  with.use_master_weights();
  with.load_state_dict(st);
  const Tensor m = with.state("w")->buffers.at("master_weight");
  CHECK(m.dtype() == DType::F32);
  CHECK(m.to_vector<double>() == opt.state("w")->buffers.at("master_weight").to_vector<double>());
}

// ---- GradScaler

TEST_CASE("GradScaler: PyTorch's golden trace (scales, skipped steps, gradients, parameters)") {
  std::ifstream in(::brisk::test::data_dir() / "amp" / "grad_scaler.json");
  REQUIRE(in.good());
  const json ref = json::parse(in);
  const json& o = ref["options"];
  Tensor w0 = param(ref["init"][0].get<std::vector<double>>(), {4});
  Tensor w1 = param(ref["init"][1].get<std::vector<double>>(), {2, 3});
  optim::SGD opt({{"w0", w0}, {"w1", w1}}, {.lr = ref["lr"].get<double>(), .momentum = ref["momentum"].get<double>()});
  optim::GradScaler scaler({.init_scale = o["init_scale"].get<double>(),
                            .growth_factor = o["growth_factor"].get<double>(),
                            .backoff_factor = o["backoff_factor"].get<double>(),
                            .growth_interval = o["growth_interval"].get<int64_t>()});
  int step = 0, skipped = 0;
  for (const json& s : ref["steps"]) {
    CAPTURE(step);
    opt.zero_grad();
    Tensor c0 = from_vector(nums(s["c"][0]), {4});
    Tensor c1 = from_vector(nums(s["c"][1]), {2, 3});
    Tensor loss = sum(w0 * c0) + sum(w1 * c1);
    CHECK(scaler.get_scale() == s["scale_before"].get<double>());
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    for (int p = 0; p < 2; ++p) {
      const std::vector<double> g = (p == 0 ? w0 : w1).grad().to_vector<double>();
      const std::vector<double> want = nums(s["grads"][p]);
      for (size_t i = 0; i < g.size(); ++i) {
        if (std::isnan(want[i])) {
          CHECK(std::isnan(g[i]));
        } else {
          CHECK(g[i] == want[i]);  // bit for bit: the same F32 products
        }
      }
    }
    const std::vector<double> before0 = w0.to_vector<double>(), before1 = w1.to_vector<double>();
    const bool stepped = scaler.step(opt);
    CHECK(stepped == s["stepped"].get<bool>());
    if (!stepped) {  // a skipped step leaves the parameters bit for bit
      CHECK(w0.to_vector<double>() == before0);
      CHECK(w1.to_vector<double>() == before1);
    }
    skipped += !stepped;
    scaler.update();
    CHECK(scaler.get_scale() == s["scale_after"].get<double>());
    CHECK(scaler.growth_tracker() == s["growth_tracker"].get<int64_t>());
    // SGD's own arithmetic may differ from PyTorch's in the last bit (tests/test_optim.cpp).
    CHECK(max_rel_dev(w0.to_vector<double>(), s["params"][0].get<std::vector<double>>()) < 1e-6);
    CHECK(max_rel_dev(w1.to_vector<double>(), s["params"][1].get<std::vector<double>>()) < 1e-6);
    ++step;
  }
  CHECK(scaler.skipped_steps() == skipped);
  const optim::Scalars sd = scaler.state_dict();
  for (const auto& item : ref["state_dict"].items())
    CHECK_MESSAGE(sd.at(item.key()) == item.value().get<double>(), item.key());
}

TEST_CASE("GradScaler: defaults, misuse errors and a disabled scaler") {
  optim::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.options().growth_interval == 2000);
  Tensor w = param({1, 2}, {2});
  optim::SGD opt({w}, {.lr = 0.1});
  scaler.scale(sum(w * w)).backward();
  scaler.unscale_(opt);
  CHECK(error_text([&] { scaler.unscale_(opt); }).find("unscale_: already called") != std::string::npos);
  CHECK(scaler.step(opt));
  CHECK(error_text([&] { scaler.step(opt); }).find("step: already called") != std::string::npos);
  CHECK(error_text([&] { scaler.unscale_(opt); }).find("after step()") != std::string::npos);
  scaler.update();
  CHECK(error_text([&] { scaler.update(); }).find("no inf checks") != std::string::npos);
  CHECK(error_text([&] { scaler.scale(from_vector({1}, {1}, DType::I64)); }).find("floating") != std::string::npos);
  CHECK(error_text([] { optim::GradScaler s({.growth_factor = 0.5}); }).find("growth_factor") != std::string::npos);
  CHECK(error_text([] { optim::GradScaler s({.init_scale = -1}); }).find("init_scale") != std::string::npos);
  CHECK(error_text([&] { scaler.update(0.0); }).find("must be positive") != std::string::npos);
  CHECK(error_text([] { optim::GradScaler s({.init_scale = 1e39}); }).find("fit in F32") != std::string::npos);
  CHECK(error_text([&] { scaler.update(NAN); }).find("must be positive") != std::string::npos);

  optim::GradScaler off({.enabled = false});
  Tensor loss = sum(w * w);
  CHECK(off.scale(loss).impl() == loss.impl());
  CHECK(off.get_scale() == 1.0);
  CHECK(off.state_dict().empty());
}

TEST_CASE("GradScaler: accumulation over micro-batches, clipping after unscale_, parameter groups") {
  Tensor a = param({1, -2, 3}, {3});
  Tensor b = param({0.5, 0.25}, {2});
  optim::SGD opt({{"a", a}}, {.lr = 0.1});
  opt.add_param_group({{"b", b}}, {.lr = 0.01});
  optim::GradScaler scaler({.init_scale = 1024});
  for (int micro = 0; micro < 3; ++micro) scaler.scale(sum(a * a) + sum(b)).backward();
  scaler.unscale_(opt);
  // Unscaled: 3 micro-batches of 2a and 1.
  CHECK(a.grad().to_vector<double>() == std::vector<double>{6, -12, 18});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{3, 3});
  const double norm = optim::clip_grad_norm_({a, b}, 1.0);
  CHECK(norm == doctest::Approx(std::sqrt(36 + 144 + 324 + 9 + 9)));
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(b.to_vector<double>()[0] == doctest::Approx(0.5 - 0.01 * 3 / norm));
}

TEST_CASE("GradScaler: a skipped step names the parameters whose gradients overflowed") {
  nn::Sequential model{std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Linear>(2, 1)};
  optim::SGD opt(model.named_parameters(), {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 1e30});  // so large that every scaled gradient overflows
  auto& second = dynamic_cast<nn::Linear&>(*model[1]);
  NoGradGuard no_grad;
  second.parameter("weight").fill_(1e10);
  {
    GradModeGuard grad(true);
    Tensor loss = sum(model(from_vector({1, 1}, {1, 2})));
    scaler.scale(loss).backward();
  }
  CHECK_FALSE(scaler.step(opt));
  const optim::Overflow& o = scaler.last_overflow();
  CHECK(o.scale == 1e30f);
  // 0.weight's gradient is 1e10 * 1e30 (overflows); 1.weight's is the activations * 1e30 (finite).
  CHECK(std::find(o.params.begin(), o.params.end(), "0.weight") != o.params.end());
  CHECK(std::find(o.params.begin(), o.params.end(), "0.bias") != o.params.end());
  CHECK(std::find(o.params.begin(), o.params.end(), "1.weight") == o.params.end());
  scaler.update();
  CHECK(scaler.get_scale() == double(float(1e30 * 0.5)));
}

TEST_CASE("GradScaler: state round trip, corrupt states refused, checkpoint resume is bit-identical") {
  optim::GradScaler a({.init_scale = 256, .growth_interval = 2});
  Tensor w = param({1, 2}, {2});
  optim::SGD opt({{"w", w}}, {.lr = 0.1});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    a.scale(sum(w * w)).backward();
    a.step(opt);
    a.update();
  }
  optim::GradScaler b({.init_scale = 256, .growth_interval = 2});
  b.load_state_dict(a.state_dict());
  CHECK(b.get_scale() == a.get_scale());
  CHECK(b.growth_tracker() == a.growth_tracker());
  optim::Scalars bad = a.state_dict();
  bad["scale"] = NAN;
  CHECK(error_text([&] { b.load_state_dict(bad); }).find("'scale' must be positive") != std::string::npos);
  bad["scale"] = 1e300;  // would be inf in the F32 scale
  CHECK(error_text([&] { b.load_state_dict(bad); }).find("fit in F32") != std::string::npos);
  bad = a.state_dict();
  bad["_growth_tracker"] = 2.5;
  CHECK(!error_text([&] { b.load_state_dict(bad); }).empty());
  bad = a.state_dict();
  bad.erase("growth_interval");
  CHECK(error_text([&] { b.load_state_dict(bad); }).find("missing key 'growth_interval'") != std::string::npos);
  bad = a.state_dict();
  bad["extra"] = 1;
  CHECK(error_text([&] { b.load_state_dict(bad); }).find("unexpected key 'extra'") != std::string::npos);

  // Checkpoint: save mid-run, run on; a fresh run resumed from the file ends the same, bit for bit.
  const fs::path dir = fs::temp_directory_path() / "brisk_test_amp";
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.safetensors").string();
  auto run = [](nn::Linear& m, optim::SGD& o, optim::GradScaler& s, int steps, int first) {
    for (int i = first; i < first + steps; ++i) {
      o.zero_grad();
      const double big = i == first + 1 ? 1e38 : 1.0;  // one overflow in every stretch
      Tensor x = from_vector({big, 0.5, -1}, {1, 3});
      s.scale(sum(m(x))).backward();
      s.step(o);
      s.update();
    }
  };
  manual_seed(1);
  nn::Linear m1(3, 2);
  optim::SGD o1(m1.named_parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler s1({.init_scale = 1024, .growth_interval = 3});
  run(m1, o1, s1, 4, 0);
  training::TrainingState st1{.model = &m1, .optimizer = &o1, .scaler = &s1};
  training::save_checkpoint(path, st1);
  run(m1, o1, s1, 5, 4);
  manual_seed(2);
  nn::Linear m2(3, 2);
  optim::SGD o2(m2.named_parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler s2;
  training::TrainingState st2{.model = &m2, .optimizer = &o2, .scaler = &s2};
  training::load_checkpoint(path, st2);
  CHECK(s2.get_scale() == 512);  // 1024, backed off at step 1, two finite steps since
  run(m2, o2, s2, 5, 4);
  CHECK(s2.get_scale() == s1.get_scale());
  CHECK(s2.skipped_steps() == s1.skipped_steps());
  CHECK(m2.weight().to_vector<double>() == m1.weight().to_vector<double>());
  fs::remove_all(dir);
}

TEST_CASE("GradScaler: BF16 and F64 gradients unscale in their dtype; integer gradients are refused") {
  Tensor h = param({1, 2}, {2}, DType::BF16);
  Tensor d = param({1, 2}, {2}, DType::F64);
  optim::SGD opt({h, d}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 8});
  scaler.scale(sum(cast(h, DType::F32)) + sum(d)).backward();
  CHECK(h.grad().to_vector<double>() == std::vector<double>{8, 8});
  scaler.unscale_(opt);
  CHECK(h.grad().dtype() == DType::BF16);
  CHECK(h.grad().to_vector<double>() == std::vector<double>{1, 1});
  CHECK(d.grad().to_vector<double>() == std::vector<double>{1, 1});
  scaler.update();
  // A gradient of an integer dtype (set by hand) is named in the error.
  Tensor i = from_vector({1, 2}, {2});
  i.requires_grad_(true);
  optim::SGD opt2({{"counts", i}}, {.lr = 0.1});
  i.set_grad(from_vector({1, 1}, {2}, DType::I32));
  const std::string e = error_text([&] { scaler.unscale_(opt2); });
  CHECK(e.find("GradScaler.unscale_: the gradient of 'counts' is") != std::string::npos);
  CHECK(e.find("floating gradients only") != std::string::npos);
}

// ---- overflow provenance

namespace {
struct TwoBlocks : nn::Module {
  TwoBlocks() : nn::Module("TwoBlocks") {
    auto b1 = std::make_shared<nn::Sequential>();
    b1->push_back("conv1", std::make_shared<nn::Conv2d>(1, 2, 3, nn::ConvOptions{.padding = {1, 1}}));
    auto b2 = std::make_shared<nn::Sequential>();
    b2->push_back("conv1", std::make_shared<nn::Conv2d>(2, 2, 3, nn::ConvOptions{.padding = {1, 1}}));
    layer = std::make_shared<nn::Sequential>();
    layer->push_back(b1);
    layer->push_back(b2);
    register_module("layer2", layer);
  }
  Tensor forward(const Tensor& x) override { return (*layer)(x); }
  std::shared_ptr<nn::Sequential> layer;
};
}  // namespace

TEST_CASE("provenance: the watch names the module and phase of the first non-finite value") {
  manual_seed(5);
  TwoBlocks model;
  auto& conv = dynamic_cast<nn::Conv2d&>(model.submodule("layer2.1.conv1"));
  Tensor x = randn({1, 1, 4, 4});
  {  // forward: a weight of 1e38 overflows in layer2.1.conv1's conv2d
    NoGradGuard no_grad;
    conv.parameter("weight").fill_(1e38);
  }
  NonfiniteWatch watch;
  Tensor y = model(x);
  REQUIRE(watch.found());
  CHECK(watch.first().describe() == "layer2.1.conv1 (conv2d forward)");
  CHECK(watch.first().scope == "layer2.1.conv1");
  CHECK_FALSE(watch.first().backward);
  // backward: a finite forward (tiny activations times huge weights), then a scaled gradient
  // that overflows in layer2.1.conv1's input gradient (huge weights times a large gradient).
  {
    NoGradGuard no_grad;
    conv.parameter("weight").fill_(1e30);
    conv.parameter("bias").fill_(0);
    auto& first = dynamic_cast<nn::Conv2d&>(model.submodule("layer2.0.conv1"));
    first.parameter("weight").fill_(1.0);
    first.parameter("bias").fill_(0);
  }
  watch.reset();
  Tensor loss = sum(model(full({1, 1, 4, 4}, 1e-30))) * 1e9;
  CHECK_FALSE(watch.found());
  CHECK(std::isfinite(loss.item<double>()));
  loss.backward();
  REQUIRE(watch.found());
  CHECK(watch.first().describe() == "layer2.1.conv1 (conv2d backward)");
  CHECK(watch.first().backward);
  CHECK(watch.first().inner == "conv2d_backward_input");
}

TEST_CASE("provenance: anomaly mode names the module path; no watch, no scopes") {
  TwoBlocks model;
  {
    NoGradGuard no_grad;
    dynamic_cast<nn::Conv2d&>(model.submodule("layer2.0.conv1")).parameter("weight").fill_(NAN);
  }
  {
    AnomalyGuard anomaly;
    const std::string e = error_text([&] { model(full({1, 1, 4, 4}, 1.0)); });
    CHECK(e.find("anomaly: layer2.0.conv1 (conv2d forward)") != std::string::npos);
  }
  CHECK_FALSE(scopes_tracked());
  CHECK(current_scope().empty());
  CHECK(all_finite(from_vector({1, 2}, {2})));
  CHECK_FALSE(all_finite(from_vector({1, INFINITY}, {2}, DType::BF16)));
  CHECK_FALSE(all_finite(slice(from_vector({NAN, 1, 2, 3}, {4}), 0, 0, 4, 2)));
}
