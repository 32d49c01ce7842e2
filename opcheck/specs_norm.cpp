// opcheck/specs_norm.cpp: specs of the normalization ops (engine/ops/norm.cpp) through their
// public forms layer_norm, rms_norm, batch_norm and group_norm (nn/functional.h), and their
// fused backwards called directly: 1-D to 4-D inputs,
// with and without affine, batch norm in training and eval, against plain F64 loops;
// F32/F16/BF16 against F64, gradcheck in F64.
// Not here: running statistics, eval after training, errors (tests/test_norm.cpp).
#include <cmath>
#include <functional>
#include <sstream>

#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/op_params.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using V = std::vector<double>;

constexpr double kEps = 1e-5;

// Trailing `nd` sizes of `s`.
Shape trailing(const Shape& s, int nd) {
  Shape t;
  for (int d = s.size() - nd; d < s.size(); ++d) t.push_back(s[d]);
  return t;
}

// ---- plain references
// Normalizes `groups` groups of `n` values of x, element i of group g at x[index(g, i)]: two
// passes, the mean, then the biased variance.
V normalize_groups(const V& x, int64_t groups, const std::function<int64_t(int64_t g, int64_t i)>& index, int64_t n,
                   double eps) {
  V y(x.size());
  for (int64_t g = 0; g < groups; ++g) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m += x[size_t(index(g, i))];
    m /= double(n);
    double v = 0;
    for (int64_t i = 0; i < n; ++i) v += (x[size_t(index(g, i))] - m) * (x[size_t(index(g, i))] - m);
    v /= double(n);
    const double rs = 1 / std::sqrt(v + eps);
    for (int64_t i = 0; i < n; ++i) y[size_t(index(g, i))] = (x[size_t(index(g, i))] - m) * rs;
  }
  return y;
}

// x (R, N): each row normalized, then * w[j] + b[j].
Tensor layer_norm_ref(const Tensor& x, int nd, const Tensor& w, const Tensor& b) {
  const int64_t n = trailing(x.sizes(), nd).numel();
  const int64_t rows = n ? x.numel() / n : 0;
  V y = normalize_groups(
      x.to_vector<double>(), rows, [n](int64_t g, int64_t i) { return g * n + i; }, n, kEps);
  const V wv = w.defined() ? w.to_vector<double>() : V(size_t(n), 1.0);
  const V bv = b.defined() ? b.to_vector<double>() : V(size_t(n), 0.0);
  for (size_t k = 0; k < y.size(); ++k) y[k] = y[k] * wv[k % size_t(n)] + bv[k % size_t(n)];
  return from_vector(y, x.sizes(), DType::F64);
}

// x (B, C, S): channel c normalized over (B, S) with the given statistics or its own.
Tensor batch_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv) {
  const int64_t batch = x.sizes()[0], channels = x.sizes()[1];
  int64_t spatial = 1;
  for (int d = 2; d < x.dim(); ++d) spatial *= x.sizes()[d];
  const V xv = x.to_vector<double>();
  auto at = [=](int64_t c, int64_t i) { return ((i / spatial) * channels + c) * spatial + i % spatial; };
  V y;
  if (rm.defined()) {
    const V m = rm.to_vector<double>(), v = rv.to_vector<double>();
    y = xv;
    for (size_t k = 0; k < y.size(); ++k) {
      const size_t c = size_t((int64_t(k) / spatial) % channels);
      y[k] = (xv[k] - m[c]) / std::sqrt(v[c] + kEps);
    }
  } else {
    y = normalize_groups(xv, channels, at, batch * spatial, kEps);
  }
  const V wv = w.defined() ? w.to_vector<double>() : V(size_t(channels), 1.0);
  const V bv = b.defined() ? b.to_vector<double>() : V(size_t(channels), 0.0);
  for (size_t k = 0; k < y.size(); ++k) {
    const size_t c = size_t((int64_t(k) / spatial) % channels);
    y[k] = y[k] * wv[c] + bv[c];
  }
  return from_vector(y, x.sizes(), DType::F64);
}

// x (B, C, *) in G groups of C / G channels, per-channel affine.
Tensor group_norm_ref(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b) {
  const int64_t batch = x.sizes()[0], channels = x.sizes()[1];
  const int64_t spatial = x.numel() / (batch * channels);
  const int64_t n = channels / groups * spatial;
  V y = normalize_groups(
      x.to_vector<double>(), batch * groups, [n](int64_t g, int64_t i) { return g * n + i; }, n, kEps);
  const V wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t k = 0; k < y.size(); ++k) {
    const size_t c = size_t((int64_t(k) / spatial) % channels);
    y[k] = y[k] * wv[c] + bv[c];
  }
  return from_vector(y, x.sizes(), DType::F64);
}

// Running statistics for the eval cases: fixed values made the same way by the op under test
// and the reference (as inputs they would be gradchecked, but they take no gradient).
Tensor eval_mean(int64_t c, DType t, Device d = Device::cpu()) {
  return cast(uniform_values({c}, -0.5, 0.5, 91), t).to(d);
}
Tensor eval_var(int64_t c, DType t, Device d = Device::cpu()) {
  return cast(uniform_values({c}, 0.5, 1.5, 92), t).to(d);
}

// ---- cases
// x of `shape` (spread around a nonzero mean), with affine params of its trailing `nd` dims.
OpCase ln_case(const Shape& shape, int nd, bool affine, uint64_t seed) {
  OpCase c{"", {uniform_values(shape, -1, 2, seed)}};
  std::ostringstream label;
  label << shape << " over " << nd << (affine ? " dims, affine" : " dims");
  c.label = label.str();
  if (affine) {
    c.inputs.push_back(uniform_values(trailing(shape, nd), 0.5, 1.5, seed + 1));
    c.inputs.push_back(uniform_values(trailing(shape, nd), -0.5, 0.5, seed + 2));
  }
  return c;
}

OpCase bn_case(const Shape& shape, bool affine, uint64_t seed) {
  OpCase c{"", {uniform_values(shape, -1, 2, seed)}};
  std::ostringstream label;
  label << shape << (affine ? ", affine" : "");
  c.label = label.str();
  if (affine) {
    c.inputs.push_back(uniform_values({shape[1]}, 0.5, 1.5, seed + 1));
    c.inputs.push_back(uniform_values({shape[1]}, -0.5, 0.5, seed + 2));
  }
  return c;
}

Tensor opt(const std::vector<Tensor>& in, size_t i) { return i < in.size() ? in[i] : Tensor(); }

OpSpec norm_spec(const std::string& name, OpId id) {
  OpSpec s;
  s.name = name;
  s.covers = {id};
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

// batch_norm_backward on (gy, x, w) with x's batch statistics (training) or eval_mean /
// eval_var's, in the statistics dtype; (gx, gw, gb) flattened and joined.
Tensor batch_norm_backward_of(const std::vector<Tensor>& in, bool training) {
  const Tensor &gy = in[0], &x = in[1], &w = in[2];
  const int64_t c = x.sizes()[1];
  const DType st = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Shape dims{0}, keep = Shape::filled(x.dim(), 1);
  keep[1] = c;
  for (int d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Tensor xs = cast(x, st);
  Tensor m, var;
  if (training) {
    m = mean(xs, dims);
    var = mean((xs - m.reshape(keep)) * (xs - m.reshape(keep)), dims);
  } else {
    m = eval_mean(c, st, x.device());
    var = eval_var(c, st, x.device());
  }
  const Tensor rstd = rsqrt(var + kEps);
  Attrs a;
  a.flag = training;
  const Tensor ops_in[5] = {gy, x, w, m, rstd};
  Tensor out[3];
  call(OpId::BatchNormBackward, ops_in, a, out);
  return cat({out[0].reshape({-1}), out[1], out[2]}, 0);
}

// The same from the formula of Note [Normalization backward], in plain F64 loops.
Tensor batch_norm_backward_ref(const std::vector<Tensor>& in, bool training) {
  const V gy = in[0].detach().to_vector<double>(), x = in[1].detach().to_vector<double>();
  const V w = in[2].detach().to_vector<double>();
  const int64_t B = in[1].sizes()[0], C = in[1].sizes()[1], S = B * C == 0 ? 0 : in[1].numel() / (B * C);
  const V em = eval_mean(C, DType::F64).to_vector<double>(), ev = eval_var(C, DType::F64).to_vector<double>();
  V gx(x.size()), gw(static_cast<size_t>(C)), gb(static_cast<size_t>(C));
  auto at = [&](int64_t b, int64_t c, int64_t s) { return size_t((b * C + c) * S + s); };
  const double n = double(B * S);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    if (training) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) m += x[at(b, c, s)];
      m /= n;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) v += (x[at(b, c, s)] - m) * (x[at(b, c, s)] - m);
      v /= n;
    } else {
      m = em[size_t(c)];
      v = ev[size_t(c)];
    }
    const double r = 1 / std::sqrt(v + kEps);
    double sg = 0, sgx = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        sg += gy[at(b, c, s)];
        sgx += gy[at(b, c, s)] * (x[at(b, c, s)] - m) * r;
      }
    gw[size_t(c)] = sgx;
    gb[size_t(c)] = sg;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const double xhat = (x[at(b, c, s)] - m) * r, g = gy[at(b, c, s)] * w[size_t(c)];
        gx[at(b, c, s)] = training ? r * (g - w[size_t(c)] * sg / n - xhat * w[size_t(c)] * sgx / n) : g * r;
      }
  }
  V all = gx;
  all.insert(all.end(), gw.begin(), gw.end());
  all.insert(all.end(), gb.begin(), gb.end());
  return from_vector(all, {int64_t(all.size())}, DType::F64);
}

// x (R, N) rows: x * rstd * w[j], rstd = 1 / sqrt(mean(x^2) + eps).
Tensor rms_norm_ref(const Tensor& x, int nd, const Tensor& w, double eps) {
  const int64_t n = trailing(x.sizes(), nd).numel();
  const int64_t rows = n ? x.numel() / n : 0;
  V y = x.to_vector<double>();
  const V wv = w.defined() ? w.to_vector<double>() : V(size_t(n), 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < n; ++j) ms += y[size_t(r * n + j)] * y[size_t(r * n + j)];
    const double rs = 1 / std::sqrt(ms / double(n) + eps);
    for (int64_t j = 0; j < n; ++j) y[size_t(r * n + j)] *= rs * wv[size_t(j)];
  }
  return from_vector(y, x.sizes(), DType::F64);
}

// layer_norm_backward / rms_norm_backward called directly on (gy, x, w) over the last dim, with
// x's statistics computed here in the statistics dtype; (gx, gw[, gb]) flattened and joined.
Tensor norm_backward_of(const std::vector<Tensor>& in, bool rms) {
  const Tensor &gy = in[0], &x = in[1], &w = in[2];
  const DType st = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor xs = cast(x, st);
  const int64_t last = x.dim() - 1;
  Attrs a;
  LayerNormParams{.normalized_dims = 1, .eps = kEps}.store(a);
  const Tensor ms = mean(xs * xs, {last}, true);
  if (rms) {
    const Tensor ops_in[4] = {gy, x, w, rsqrt(ms + kEps)};
    Tensor out[2];
    call(OpId::RmsNormBackward, ops_in, a, out);
    return cat({out[0].reshape({-1}), out[1]}, 0);
  }
  const Tensor m = mean(xs, {last}, true);
  const Tensor var = mean((xs - m) * (xs - m), {last}, true);
  const Tensor ops_in[5] = {gy, x, w, m, rsqrt(var + kEps)};
  Tensor out[3];
  call(OpId::LayerNormBackward, ops_in, a, out);
  return cat({out[0].reshape({-1}), out[1], out[2]}, 0);
}

// The same from the formulas (Note [Normalization backward], rms_norm's in engine/ops/norm.cpp)
// in plain F64 loops.
Tensor norm_backward_ref(const std::vector<Tensor>& in, bool rms) {
  const V gy = in[0].detach().to_vector<double>(), x = in[1].detach().to_vector<double>();
  const V w = in[2].detach().to_vector<double>();
  const int64_t n = in[2].numel(), rows = n ? in[1].numel() / n : 0;
  V gx(x.size()), gw(size_t(n), 0.0), gb(size_t(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    auto at = [&](int64_t j) { return size_t(r * n + j); };
    double m = 0, v = 0;
    if (!rms) {
      for (int64_t j = 0; j < n; ++j) m += x[at(j)];
      m /= double(n);
    }
    for (int64_t j = 0; j < n; ++j) v += (x[at(j)] - m) * (x[at(j)] - m);
    v /= double(n);
    const double rs = 1 / std::sqrt(v + kEps);
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (x[at(j)] - m) * rs, g = gy[at(j)] * w[size_t(j)];
      s1 += g;
      s2 += g * xhat;
      gw[size_t(j)] += gy[at(j)] * xhat;
      gb[size_t(j)] += gy[at(j)];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (x[at(j)] - m) * rs, g = gy[at(j)] * w[size_t(j)];
      gx[at(j)] = rs * (g - (rms ? 0.0 : s1 / double(n)) - xhat * s2 / double(n));
    }
  }
  V all = gx;
  all.insert(all.end(), gw.begin(), gw.end());
  if (!rms) all.insert(all.end(), gb.begin(), gb.end());
  return from_vector(all, {int64_t(all.size())}, DType::F64);
}

void add_specs(std::vector<OpSpec>& specs) {
  // layer_norm: the number of normalized dims is the spec's; inputs (x) or (x, w, b).
  for (int nd : {1, 2}) {
    OpSpec s = norm_spec("layer_norm over the last " + std::to_string(nd) + " dims", OpId::LayerNorm);
    s.fn = [nd](const std::vector<Tensor>& in) {
      return layer_norm(in[0], trailing(in[0].sizes(), nd), opt(in, 1), opt(in, 2), kEps);
    };
    s.reference = [nd](const std::vector<Tensor>& in) { return layer_norm_ref(in[0], nd, opt(in, 1), opt(in, 2)); };
    s.cases = [nd] {
      std::vector<OpCase> cases;
      if (nd == 1) cases.push_back(ln_case({5}, 1, true, 1));
      cases.push_back(ln_case({3, 4}, nd, true, 4));
      cases.push_back(ln_case({3, 4}, nd, false, 7));
      cases.push_back(ln_case({2, 3, 4}, nd, true, 10));
      cases.push_back(ln_case({2, 2, 3, 3}, nd, true, 13));
      cases.push_back(ln_case({2, 2, 3, 3}, nd, false, 16));
      cases.push_back(ln_case({0, 3, 4}, nd, true, 19));
      return cases;
    };
    specs.push_back(s);
  }

  // rms_norm (torch.nn.functional.rms_norm): inputs (x) or (x, w); the gradchecks run the fused
  // rms_norm_backward in F64.
  for (int nd : {1, 2}) {
    OpSpec s = norm_spec("rms_norm over the last " + std::to_string(nd) + " dims", OpId::RmsNorm);
    s.covers = {OpId::RmsNorm, OpId::RmsNormBackward};
    s.fn = [nd](const std::vector<Tensor>& in) {
      return rms_norm(in[0], trailing(in[0].sizes(), nd), opt(in, 1), kEps);
    };
    s.reference = [nd](const std::vector<Tensor>& in) { return rms_norm_ref(in[0], nd, opt(in, 1), kEps); };
    s.cases = [nd] {
      std::vector<OpCase> cases;
      for (OpCase c : {ln_case({3, 4}, nd, true, 64), ln_case({3, 4}, nd, false, 67), ln_case({2, 3, 5}, nd, true, 70),
                       ln_case({2, 2, 3, 3}, nd, true, 73), ln_case({0, 3, 4}, nd, true, 76)}) {
        if (c.inputs.size() == 3) c.inputs.pop_back();  // rms_norm has no bias
        cases.push_back(c);
      }
      return cases;
    };
    specs.push_back(s);
  }
  // layer_norm_backward and rms_norm_backward (Note [Fused layer norm backward]) called directly
  // on (gy, x, w): 41 rows crosses the kernel's blocks of 32 rows. The gradchecks of the
  // layer_norm and rms_norm specs run them too, in F64.
  for (bool rms : {false, true}) {
    OpSpec s = norm_spec(rms ? "rms_norm_backward" : "layer_norm_backward",
                         rms ? OpId::RmsNormBackward : OpId::LayerNormBackward);
    s.fn = [rms](const std::vector<Tensor>& in) { return norm_backward_of(in, rms); };
    s.reference = [rms](const std::vector<Tensor>& in) { return norm_backward_ref(in, rms); };
    s.cases = [] {
      const auto vals = [](const Shape& shape, uint64_t seed) { return uniform_values(shape, -1, 1, seed); };
      return std::vector<OpCase>{{"(4, 3)", {vals({4, 3}, 81), vals({4, 3}, 82), vals({3}, 83)}},
                                 {"(41, 19)", {vals({41, 19}, 84), vals({41, 19}, 85), vals({19}, 86)}},
                                 {"(2, 3, 5)", {vals({2, 3, 5}, 87), vals({2, 3, 5}, 88), vals({5}, 89)}},
                                 {"(0, 3): no rows", {vals({0, 3}, 90), vals({0, 3}, 91), vals({3}, 92)}}};
    };
    s.grad = false;  // not differentiable: double backward takes the formula
    s.dtypes = {DType::F32};
    specs.push_back(s);
  }

  // batch_norm in training, running statistics untracked: inputs (x) or (x, w, b).
  {
    OpSpec s = norm_spec("batch_norm training", OpId::BatchNorm);
    s.fn = [](const std::vector<Tensor>& in) {
      return batch_norm(in[0], {}, {}, opt(in, 1), opt(in, 2), true, 0.1, kEps);
    };
    s.reference = [](const std::vector<Tensor>& in) { return batch_norm_ref(in[0], opt(in, 1), opt(in, 2), {}, {}); };
    s.cases = [] {
      return std::vector<OpCase>{bn_case({4, 3}, true, 1),        bn_case({4, 3}, false, 4),
                                 bn_case({2, 3, 5}, true, 7),     bn_case({2, 3, 5}, false, 10),
                                 bn_case({2, 3, 2, 3}, true, 13), bn_case({1, 2, 2, 2}, true, 16)};
    };
    specs.push_back(s);
    // The same with tracked running statistics (fresh each call): y does not depend on them,
    // but the update runs in every dtype.
    s.name = "batch_norm training, tracked running statistics";
    s.fn = [](const std::vector<Tensor>& in) {
      const int64_t c = in[0].sizes()[1];
      Tensor rm = zeros({c}, in[0].dtype(), in[0].device()), rv = ones({c}, in[0].dtype(), in[0].device());
      return batch_norm(in[0], rm, rv, opt(in, 1), opt(in, 2), true, 0.1, kEps);
    };
    specs.push_back(s);
  }

  // batch_norm in eval: the fixed running statistics of eval_mean / eval_var.
  {
    OpSpec s = norm_spec("batch_norm eval", OpId::BatchNorm);
    s.fn = [](const std::vector<Tensor>& in) {
      const int64_t c = in[0].sizes()[1];
      const DType t = in[0].dtype();
      const Device d = in[0].device();
      return batch_norm(in[0], eval_mean(c, t, d), eval_var(c, t, d), opt(in, 1), opt(in, 2), false, 0.1, kEps);
    };
    s.reference = [](const std::vector<Tensor>& in) {
      const int64_t c = in[0].sizes()[1];
      return batch_norm_ref(in[0], opt(in, 1), opt(in, 2), eval_mean(c, DType::F64), eval_var(c, DType::F64));
    };
    s.cases = [] {
      return std::vector<OpCase>{bn_case({4, 3}, true, 21), bn_case({1, 3}, true, 24), bn_case({2, 3, 5}, false, 27),
                                 bn_case({2, 3, 2, 3}, true, 30), bn_case({0, 3, 2}, true, 33)};
    };
    specs.push_back(s);
  }

  // batch_norm_backward (Note [Fused batch norm backward]), called directly: inputs (gy, x, w),
  // the statistics of x in training (or eval_mean / eval_var), output (gx, gw, gb) joined. The
  // gradchecks of the batch_norm specs above run it too, in F64.
  for (bool training : {true, false}) {
    OpSpec s =
        norm_spec(training ? "batch_norm_backward training" : "batch_norm_backward eval", OpId::BatchNormBackward);
    s.fn = [training](const std::vector<Tensor>& in) { return batch_norm_backward_of(in, training); };
    s.reference = [training](const std::vector<Tensor>& in) { return batch_norm_backward_ref(in, training); };
    s.cases = [] {
      const auto vals = [](const Shape& shape, uint64_t seed) { return uniform_values(shape, -1, 1, seed); };
      return std::vector<OpCase>{{"(4, 3)", {vals({4, 3}, 51), vals({4, 3}, 52), vals({3}, 53)}},
                                 {"(2, 3, 5)", {vals({2, 3, 5}, 54), vals({2, 3, 5}, 55), vals({3}, 56)}},
                                 {"(2, 3, 2, 3)", {vals({2, 3, 2, 3}, 57), vals({2, 3, 2, 3}, 58), vals({3}, 59)}},
                                 {"(0, 3, 2): no samples", {vals({0, 3, 2}, 60), vals({0, 3, 2}, 61), vals({3}, 62)}}};
    };
    s.grad = false;  // not differentiable: double backward takes batch_norm's formula
    s.dtypes = {DType::F32};
    specs.push_back(s);
  }

  // group_norm: a composite over the layer_norm op.
  {
    OpSpec s = norm_spec("group_norm", OpId::LayerNorm);
    s.fn = [](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2], kEps); };
    s.reference = [](const std::vector<Tensor>& in) { return group_norm_ref(in[0], 2, in[1], in[2]); };
    s.cases = [] {
      return std::vector<OpCase>{bn_case({3, 4}, true, 41), bn_case({2, 4, 3}, true, 44),
                                 bn_case({2, 6, 2, 2}, true, 47)};
    };
    specs.push_back(s);
  }
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_norm_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
