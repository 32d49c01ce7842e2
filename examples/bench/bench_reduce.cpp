// examples/bench/bench_reduce.cpp: time of the reductions that training runs most (sum over
// all, over the rows and over the columns of a matrix; softmax and log_softmax of rows;
// cross-entropy forward and backward) on realistic F32 sizes, each against a plain
// single-threaded loop over the same data measured in the same run. Prints microseconds per
// call and the ratio brisk / loop, one line per case. Threads: OMP_NUM_THREADS.
// Not a test: correctness is opcheck/specs_reduce.cpp's job; the loops here only set the pace.
#include <cmath>
#include <cstdio>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

void report(const char* name, double t_brisk, double t_loop) {
  std::printf("%-40s brisk %10.1f us  loop %10.1f us  brisk/loop %5.2f\n", name, t_brisk * 1e6, t_loop * 1e6,
              t_brisk / t_loop);
}

int iters_for(int64_t numel) { return numel >= (1 << 20) ? 20 : 200; }

// x: (rows, cols) F32. Sums over everything, over dim 0 and over dim 1.
void bench_sums(int64_t rows, int64_t cols) {
  Tensor x = randn({rows, cols});
  const float* p = x.data<float>();
  const int iters = iters_for(rows * cols);
  char name[64];
  std::snprintf(name, sizeof(name), "sum (%lld, %lld) all", (long long)rows, (long long)cols);
  double tb = bench::seconds_per_call([&] { bench::keep(sum(x)); }, iters);
  double tl = bench::seconds_per_call(
      [&] {
        double s = 0;
        for (int64_t i = 0; i < rows * cols; ++i) s += p[i];
        bench::keep(s);
      },
      iters);
  report(name, tb, tl);
  std::vector<float> out(size_t(std::max(rows, cols)));
  std::snprintf(name, sizeof(name), "sum (%lld, %lld) dim 0", (long long)rows, (long long)cols);
  tb = bench::seconds_per_call([&] { bench::keep(sum(x, {0})); }, iters);
  tl = bench::seconds_per_call(
      [&] {
        std::fill(out.begin(), out.begin() + cols, 0.0f);
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) out[size_t(j)] += p[i * cols + j];
        }
        bench::keep(out);
      },
      iters);
  report(name, tb, tl);
  std::snprintf(name, sizeof(name), "sum (%lld, %lld) dim 1", (long long)rows, (long long)cols);
  tb = bench::seconds_per_call([&] { bench::keep(sum(x, {1})); }, iters);
  tl = bench::seconds_per_call(
      [&] {
        for (int64_t i = 0; i < rows; ++i) {
          float s = 0;
          for (int64_t j = 0; j < cols; ++j) s += p[i * cols + j];
          out[size_t(i)] = s;
        }
        bench::keep(out);
      },
      iters);
  report(name, tb, tl);
}

// The loop's softmax of one row: max, sum of exp(x - max), scale.
void loop_softmax_row(const float* x, float* y, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  float s = 0;
  for (int64_t j = 0; j < n; ++j) {
    y[j] = std::exp(x[j] - m);
    s += y[j];
  }
  for (int64_t j = 0; j < n; ++j) y[j] /= s;
}

void bench_softmax(int64_t rows, int64_t cols) {
  Tensor x = randn({rows, cols});
  const float* p = x.data<float>();
  std::vector<float> y(size_t(rows * cols));
  const int iters = iters_for(rows * cols);
  auto loop = [&] {
    for (int64_t i = 0; i < rows; ++i) loop_softmax_row(p + i * cols, y.data() + i * cols, cols);
    bench::keep(y);
  };
  const double tl = bench::seconds_per_call(loop, iters);
  char name[64];
  std::snprintf(name, sizeof(name), "softmax (%lld, %lld) dim 1", (long long)rows, (long long)cols);
  report(name, bench::seconds_per_call([&] { bench::keep(softmax(x, 1)); }, iters), tl);
  std::snprintf(name, sizeof(name), "log_softmax (%lld, %lld) dim 1", (long long)rows, (long long)cols);
  report(name, bench::seconds_per_call([&] { bench::keep(log_softmax(x, 1)); }, iters), tl);
}

// Cross-entropy of logits (rows, classes) with a mean: forward, and forward + backward. The
// loop does one softmax per row either way (the backward's gradient is softmax - onehot).
void bench_cross_entropy(int64_t rows, int64_t classes) {
  Tensor x = randn({rows, classes});
  Tensor t = randint(0, classes, {rows});
  const float* p = x.data<float>();
  const int64_t* tp = t.data<int64_t>();
  std::vector<float> y(size_t(rows * classes));
  const int iters = iters_for(rows * classes);
  auto loop = [&] {
    double total = 0;
    for (int64_t i = 0; i < rows; ++i) {
      loop_softmax_row(p + i * classes, y.data() + i * classes, classes);
      total -= std::log(y[size_t(i * classes + tp[i])]);
    }
    bench::keep(total);
  };
  const double tl = bench::seconds_per_call(loop, iters);
  char name[64];
  std::snprintf(name, sizeof(name), "cross_entropy (%lld, %lld) forward", (long long)rows, (long long)classes);
  report(name, bench::seconds_per_call([&] { bench::keep(cross_entropy(x, t)); }, iters), tl);
  Tensor leaf = x.detach().requires_grad_();
  std::snprintf(name, sizeof(name), "cross_entropy (%lld, %lld) fwd+bwd", (long long)rows, (long long)classes);
  auto both = [&] {
    leaf.set_grad(Tensor());
    cross_entropy(leaf, t).backward();
    bench::keep(leaf.grad());
  };
  report(name, bench::seconds_per_call(both, iters), tl);
}

}  // namespace

int main() {
  manual_seed(0);
  bench_sums(1024, 1024);
  bench_sums(128, 784);
  bench_softmax(128, 10);
  bench_softmax(1024, 1000);
  bench_cross_entropy(128, 10);
  bench_cross_entropy(4096, 1000);
  return 0;
}
