// nn/init.cpp: the initializers of nn/init.h.
#include "nn/init.h"

#include <cmath>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  BRISK_CHECK(w.dim() >= 2, "init: fan in/out needs a tensor with at least 2 dims, got ", w.sizes());
  int64_t receptive = 1;
  for (int d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  BRISK_FAIL("init: unknown nonlinearity '", nl, "'");
}

namespace {
thread_local int t_skip_depth = 0;
}  // namespace

SkipInitGuard::SkipInitGuard() { ++t_skip_depth; }
SkipInitGuard::~SkipInitGuard() { --t_skip_depth; }
bool init_skipped() { return t_skip_depth > 0; }

namespace {
// Writes `values` into t in place, unrecorded (t may be a leaf that requires grad).
void assign(Tensor& t, const Tensor& values) {
  NoGradGuard ng;
  t.copy_(values);
}
}  // namespace

// Floating tensors are filled in place (no temporary of the parameter's size); others get F64
// values rounded by the copy.
void uniform_(Tensor& t, double low, double high, Generator* gen) {
  if (init_skipped()) return;
  if (t.defined() && is_floating(t.dtype())) return fill_uniform_(t, low, high, gen);
  assign(t, uniform(t.sizes(), low, high, DType::F64, t.device(), gen));
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  if (init_skipped()) return;
  if (t.defined() && is_floating(t.dtype())) return fill_normal_(t, mean, std, gen);
  assign(t, normal(t.sizes(), mean, std, DType::F64, t.device(), gen));
}

void constant_(Tensor& t, double value) {
  if (init_skipped()) return;
  NoGradGuard ng;
  t.fill_(value);
}
void zeros_(Tensor& t) { constant_(t, 0); }
void ones_(Tensor& t) { constant_(t, 1); }

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fan_in, fan_out] = fans(t);
  double a = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  uniform_(t, -a, a, gen);
}

void xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [fan_in, fan_out] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / double(fan_in + fan_out)), gen);
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, const std::string& nl) {
  auto [fan_in, fan_out] = fans(t);
  int64_t fan = mode == FanMode::FanIn ? fan_in : fan_out;
  BRISK_CHECK(fan > 0, "init: kaiming init of a tensor with zero fan, shape ", t.sizes());
  return calculate_gain(nl, a) / std::sqrt(double(fan));
}
}  // namespace

void kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nl, Generator* gen) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nl, Generator* gen) {
  normal_(t, 0, kaiming_std(t, a, mode, nl), gen);
}

void trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  if (init_skipped()) return;
  // Inverse CDF: u ~ U(Phi(a'), Phi(b')), x = mean + std * sqrt(2) * erfinv(2u - 1).
  auto phi = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); };
  double lo = phi((a - mean) / std), hi = phi((b - mean) / std);
  std::vector<double> u =
      uniform(t.sizes(), 2 * lo - 1, 2 * hi - 1, DType::F64, Device::cpu(), gen).to_vector<double>();
  for (double& v : u) {
    // erfinv by Newton iterations on erf (precise to double for |v| < 1).
    double x = 0;
    for (int it = 0; it < 60; ++it) {
      double err = std::erf(x) - v;
      x -= err / (2 / std::sqrt(M_PI) * std::exp(-x * x));
      if (std::fabs(err) < 1e-15) break;
    }
    v = std::clamp(mean + std * std::sqrt(2.0) * x, a, b);
  }
  assign(t, from_vector(u, t.sizes(), t.dtype(), t.device()));
}

void orthogonal_(Tensor& t, double gain, Generator* gen) {
  if (init_skipped()) return;
  BRISK_CHECK(t.dim() >= 2, "init: orthogonal_ needs at least 2 dims, got ", t.sizes());
  int64_t rows = t.size(0), cols = t.numel() / rows;
  bool transposed = rows < cols;
  int64_t m = transposed ? cols : rows, n = transposed ? rows : cols;  // m >= n
  std::vector<double> a = normal({m, n}, 0, 1, DType::F64, Device::cpu(), gen).to_vector<double>();
  // Modified Gram-Schmidt on the columns of a (m x n), giving Q with orthonormal columns; the
  // sign fix of PyTorch (multiply by sign(diag(R))) is implied: Gram-Schmidt gives R > 0.
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += a[size_t(i * n + k)] * a[size_t(i * n + j)];
      for (int64_t i = 0; i < m; ++i) a[size_t(i * n + j)] -= dot * a[size_t(i * n + k)];
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += a[size_t(i * n + j)] * a[size_t(i * n + j)];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < m; ++i) a[size_t(i * n + j)] /= norm;
  }
  std::vector<double> q(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      q[size_t(r * cols + c)] = gain * (transposed ? a[size_t(c * n + r)] : a[size_t(r * n + c)]);
    }
  }
  assign(t, from_vector(q, t.sizes(), t.dtype(), t.device()));
}

void linear_default_(Tensor& weight, Tensor& bias, Generator* gen) {
  kaiming_uniform_(weight, std::sqrt(5.0), FanMode::FanIn, "leaky_relu", gen);
  if (bias.defined()) {
    int64_t fan_in = fans(weight).first;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    uniform_(bias, -bound, bound, gen);
  }
}

}  // namespace brisk::nn::init
