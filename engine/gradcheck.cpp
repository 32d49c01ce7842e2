// engine/gradcheck.cpp: finite-difference gradient check (see gradcheck.h).
#include "engine/gradcheck.h"

#include <cmath>
#include <random>
#include <sstream>

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

// The inputs that gradcheck differentiates: F64 CPU leaves that require grad.
std::vector<size_t> checked_inputs(const char* who, const std::vector<Tensor>& inputs) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    BRISK_CHECK(inputs[i].dtype() == DType::F64 && inputs[i].device().is_cpu(), who, ": input ", i, " is ",
                inputs[i].str(), "; inputs that require grad must be F64 on the CPU");
    BRISK_CHECK(inputs[i].is_leaf(), who, ": input ", i, " must be a leaf");
    idx.push_back(i);
  }
  BRISK_CHECK(!idx.empty(), who, ": no input requires grad");
  return idx;
}

// f(inputs) with no graph, flattened.
std::vector<double> evaluate(const TensorFn& f, const std::vector<Tensor>& inputs) {
  NoGradGuard ng;
  return f(inputs).to_vector<double>();
}

// "[i, j]" for the flat row-major index k of a tensor of `sizes`.
std::string index_str(const Shape& sizes, int64_t k) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = k % sizes[d];
    k /= sizes[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s.append(d ? ", " : "").append(std::to_string(idx[d]));
  return s + "]";
}

struct Checker {
  const GradcheckOptions& opt;
  GradcheckReport& report;
  Shape out_sizes;
  void compare(size_t input, const Shape& in_sizes, int64_t element, int64_t output, double analytic, double numeric) {
    ++report.checked;
    const double err = std::fabs(analytic - numeric);
    if (err <= opt.atol + opt.rtol * std::fabs(numeric)) return;  // NaN fails
    ++report.num_mismatches;
    report.ok = false;
    if (int64_t(report.mismatches.size()) < opt.max_reported)
      report.mismatches.push_back({input, element, output, analytic, numeric, index_str(in_sizes, element),
                                   output >= 0 ? index_str(out_sizes, output) : std::string()});
  }
};

}  // namespace

std::string GradcheckReport::str() const {
  std::ostringstream os;
  if (ok) {
    os << check << ": all " << checked << " values agree";
    return os.str();
  }
  os << check << ": " << num_mismatches << " of " << checked << " values disagree";
  if (num_mismatches > int64_t(mismatches.size())) os << " (the first " << mismatches.size() << " listed)";
  for (const GradcheckMismatch& m : mismatches) {
    os << "\n  input " << m.input << " element " << m.element_index;
    if (m.output >= 0) os << ", output element " << m.output_index;
    os << ": backward gives " << m.analytic << ", finite differences give " << m.numeric << " (error "
       << std::fabs(m.analytic - m.numeric) << ")";
  }
  return os.str();
}

GradcheckReport gradcheck_report(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  BRISK_CHECK(f, "gradcheck: no function");
  BRISK_CHECK(opt.eps > 0 && opt.max_reported >= 0, "gradcheck: eps must be > 0 and max_reported >= 0, got eps ",
              opt.eps, ", max_reported ", opt.max_reported);
  const std::vector<size_t> wrt_index = checked_inputs("gradcheck", inputs);
  std::vector<Tensor> wrt;
  for (size_t i : wrt_index) wrt.push_back(inputs[i]);

  Tensor out = f(inputs);
  BRISK_CHECK(out.defined() && is_floating(out.dtype()), "gradcheck: the function must return a floating tensor");
  const int64_t m = out.numel();
  GradcheckReport report;
  Checker check{opt, report, out.sizes()};

  // Central differences of the flattened output along input element k.
  auto column = [&](const Tensor& x, int64_t k) {
    double* p = element(x, k);
    const double orig = *p;
    *p = orig + opt.eps;
    std::vector<double> plus = evaluate(f, inputs);
    *p = orig - opt.eps;
    std::vector<double> minus = evaluate(f, inputs);
    *p = orig;
    for (size_t j = 0; j < plus.size(); ++j) plus[j] = (plus[j] - minus[j]) / (2 * opt.eps);
    return plus;
  };
  // Gradients of <out, v> with respect to every checked input (zeros where out is unrelated).
  auto vjp = [&](const std::vector<double>& v, bool retain) {
    std::vector<std::vector<double>> g(wrt.size());
    std::vector<Tensor> a;
    if (out.requires_grad()) {
      Tensor outs[1] = {out};
      Tensor grads[1] = {from_vector(v, out.sizes(), out.dtype(), out.device())};
      a = grad(outs, wrt, grads, retain, false, /*allow_unused=*/true);
    }
    for (size_t w = 0; w < wrt.size(); ++w)
      g[w] = w < a.size() && a[w].defined() ? a[w].to_vector<double>() : std::vector<double>(size_t(wrt[w].numel()), 0);
    return g;
  };

  if (!opt.jacobians) {
    std::mt19937_64 rng(opt.seed);
    std::uniform_real_distribution<double> dist(0.5, 1.5);
    std::vector<double> v(static_cast<size_t>(m));
    for (double& x : v) x = (rng() & 1 ? 1.0 : -1.0) * dist(rng);
    std::vector<std::vector<double>> analytic = vjp(v, false);
    for (size_t w = 0; w < wrt.size(); ++w) {
      for (int64_t k = 0; k < wrt[w].numel(); ++k) {
        const std::vector<double> col = column(wrt[w], k);
        double numeric = 0;
        for (size_t j = 0; j < col.size(); ++j) numeric += col[j] * v[j];
        check.compare(wrt_index[w], wrt[w].sizes(), k, -1, analytic[w][size_t(k)], numeric);
      }
    }
    return report;
  }

  // Jacobian mode: row j of the analytic Jacobian is the gradient for the one-hot v = e_j.
  std::vector<std::vector<double>> jn(wrt.size()), ja(wrt.size());
  for (size_t w = 0; w < wrt.size(); ++w) {
    const size_t n = size_t(wrt[w].numel());
    jn[w].assign(size_t(m) * n, 0);
    ja[w].assign(size_t(m) * n, 0);
    for (size_t k = 0; k < n; ++k) {
      const std::vector<double> col = column(wrt[w], int64_t(k));
      for (size_t j = 0; j < size_t(m); ++j) jn[w][j * n + k] = col[j];
    }
  }
  for (int64_t j = 0; j < m; ++j) {
    std::vector<double> e(size_t(m), 0);
    e[size_t(j)] = 1;
    std::vector<std::vector<double>> row = vjp(e, /*retain=*/j + 1 < m);
    for (size_t w = 0; w < wrt.size(); ++w)
      std::copy(row[w].begin(), row[w].end(), ja[w].begin() + j * int64_t(row[w].size()));
  }
  for (size_t w = 0; w < wrt.size(); ++w) {
    const int64_t n = wrt[w].numel();
    for (int64_t j = 0; j < m; ++j)
      for (int64_t k = 0; k < n; ++k)
        check.compare(wrt_index[w], wrt[w].sizes(), k, j, ja[w][size_t(j * n + k)], jn[w][size_t(j * n + k)]);
    report.numeric_jacobians.push_back(from_vector(jn[w], {m, n}, DType::F64));
    report.analytic_jacobians.push_back(from_vector(ja[w], {m, n}, DType::F64));
  }
  return report;
}

bool gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  GradcheckReport r = gradcheck_report(f, inputs, opt);
  if (!r.ok && opt.raise) BRISK_FAIL(r.str());
  return r.ok;
}

GradcheckReport gradgradcheck_report(const TensorFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& opt) {
  BRISK_CHECK(f, "gradgradcheck: no function");
  const std::vector<size_t> wrt_index = checked_inputs("gradgradcheck", inputs);
  Shape out_sizes;
  {
    Tensor out = f(inputs);
    BRISK_CHECK(out.defined() && out.dtype() == DType::F64 && out.device().is_cpu(),
                "gradgradcheck: the function must return an F64 CPU tensor, got ", out.defined() ? out.str() : "none");
    BRISK_CHECK(out.requires_grad(), "gradgradcheck: the function's output does not depend on its inputs");
    out_sizes = out.sizes();
  }
  // The grad_output v is one more input, so d/dv of the first derivatives is checked too.
  std::mt19937_64 rng(opt.seed + 1);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(size_t(out_sizes.numel()));
  for (double& x : values) x = dist(rng);
  std::vector<Tensor> all = inputs;
  all.push_back(from_vector(values, out_sizes, DType::F64).requires_grad_());
  const size_t n = inputs.size();
  TensorFn first_derivatives = [&f, wrt_index, n](const std::vector<Tensor>& in) {
    GradModeGuard on(true);  // gradcheck evaluates with grad mode off: the inner grad needs it
    std::vector<Tensor> xs(in.begin(), in.begin() + int64_t(n)), wrt;
    for (size_t i : wrt_index) wrt.push_back(in[i]);
    Tensor outs[1] = {f(xs)};
    Tensor grads[1] = {in[n]};
    std::vector<Tensor> g = grad(outs, wrt, grads, false, /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (size_t w = 0; w < wrt.size(); ++w)
      flat.push_back(g[w].defined() ? g[w].reshape({wrt[w].numel()}) : zeros({wrt[w].numel()}, DType::F64));
    return cat(flat, 0);
  };
  GradcheckReport r = gradcheck_report(first_derivatives, all, opt);
  r.check = "gradgradcheck";
  return r;
}

bool gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  GradcheckReport r = gradgradcheck_report(f, inputs, opt);
  if (!r.ok && opt.raise) BRISK_FAIL(r.str());
  return r.ok;
}

}  // namespace brisk
