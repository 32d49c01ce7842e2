// engine/gradcheck.cpp: finite-difference gradient check (see gradcheck.h).
#include "engine/gradcheck.h"

#include <cmath>
#include <random>

#include "engine/autograd.h"
#include "engine/functions.h"

namespace brisk {

namespace {

// Address of the k-th element (row-major order) of a CPU F64 tensor of any strides.
double* element(const Tensor& t, int64_t k) {
  int64_t off = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    int64_t n = t.sizes()[d];
    off += (k % n) * t.strides()[d];
    k /= n;
  }
  return static_cast<double*>(t.data_ptr()) + off;
}

double project(const Tensor& out, const std::vector<double>& v) {
  std::vector<double> y = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * v[i];
  return s;
}

}  // namespace

bool gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<Tensor> wrt;
  std::vector<size_t> wrt_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    BRISK_CHECK(inputs[i].dtype() == DType::F64 && inputs[i].device().is_cpu(), "gradcheck: input ", i, " is ",
                inputs[i].str(), "; inputs that require grad must be F64 on the CPU");
    BRISK_CHECK(inputs[i].is_leaf(), "gradcheck: input ", i, " must be a leaf");
    wrt.push_back(inputs[i]);
    wrt_index.push_back(i);
  }
  BRISK_CHECK(!wrt.empty(), "gradcheck: no input requires grad");

  Tensor out = f(inputs);
  BRISK_CHECK(out.defined() && is_floating(out.dtype()), "gradcheck: the function must return a floating tensor");
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<double> v(size_t(out.numel()));
  for (double& x : v) x = (rng() & 1 ? 1.0 : -1.0) * dist(rng);

  std::vector<Tensor> analytic;
  if (out.requires_grad()) {
    Tensor vt = from_vector(v, out.sizes(), out.dtype(), out.device());
    Tensor outs[1] = {out};
    Tensor grads[1] = {vt};
    analytic = grad(outs, wrt, grads, false, false, /*allow_unused=*/true);
  } else {
    analytic.resize(wrt.size());  // the output does not depend on the inputs: all zeros
  }

  for (size_t w = 0; w < wrt.size(); ++w) {
    const Tensor& x = wrt[w];
    std::vector<double> a =
        analytic[w].defined() ? analytic[w].to_vector<double>() : std::vector<double>(size_t(x.numel()), 0.0);
    for (int64_t k = 0; k < x.numel(); ++k) {
      double* p = element(x, k);
      double orig = *p;
      double plus, minus;
      {
        NoGradGuard ng;
        *p = orig + opt.eps;
        plus = project(f(inputs), v);
        *p = orig - opt.eps;
        minus = project(f(inputs), v);
        *p = orig;
      }
      double numeric = (plus - minus) / (2 * opt.eps);
      double err = std::fabs(a[size_t(k)] - numeric);
      if (!(err <= opt.atol + opt.rtol * std::fabs(numeric))) {
        if (!opt.raise) return false;
        BRISK_FAIL("gradcheck: input ", wrt_index[w], " ", x.str(), ", element ", k, ": backward gives ", a[size_t(k)],
                   ", finite differences give ", numeric, " (error ", err, ")");
      }
    }
  }
  return true;
}

}  // namespace brisk
