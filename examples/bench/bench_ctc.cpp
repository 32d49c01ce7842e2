// examples/bench/bench_ctc.cpp: ctc_loss (nn/ctc.h), milliseconds per call of forward and of
// forward + backward through log_softmax, beside torch.nn.functional.ctc_loss timed in the same
// run with the same thread count (the venv's PyTorch at /work/venv-torch/bin/python when
// present, else Debian's /usr/bin/python3; "n/a" without torch). brisk's loss is a composite
// of ops, one small step per frame (Note [CTC as a composite] in nn/ctc.cpp); PyTorch has a
// dedicated kernel, so this shows what the composite costs. Threads: OMP_NUM_THREADS.
// Not a test: it asserts nothing.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"

using namespace brisk;
namespace F = brisk::nn::functional;

namespace {

struct Case {
  int64_t T, N, C, S;
};

const std::vector<Case> kCases = {{50, 16, 20, 10}, {100, 32, 30, 30}, {200, 8, 80, 60}};

std::map<std::string, double> torch_times(int threads, std::string& which) {
  std::string script = R"PY(
def run(i, T, N, C, S):
    x = torch.randn(T, N, C, requires_grad=True)
    tgt = torch.randint(1, C, (N, S))
    il = torch.full((N,), T)
    tl = torch.full((N,), S)
    def fwd():
        with torch.no_grad():
            F.ctc_loss(x.log_softmax(2), tgt, il, tl)
    def fb():
        F.ctc_loss(x.log_softmax(2), tgt, il, tl).backward()
        x.grad = None
    print(i, 'forward', per_call_ms(fwd, 10), flush=True)
    print(i, 'forward+backward', per_call_ms(fb, 5), flush=True)
)PY";
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    script += "run(" + std::to_string(i) + ", " + std::to_string(c.T) + ", " + std::to_string(c.N) + ", " +
              std::to_string(c.C) + ", " + std::to_string(c.S) + ")\n";
  }
  return bench::torch_times(script, threads, which);
}

}  // namespace

int main() {
  const int threads = omp_get_max_threads();
  std::string which;
  const std::map<std::string, double> torch = torch_times(threads, which);
  std::printf("ctc_loss, F32, %d thread(s); ms per call (median of 7); reference: %s\n", threads, which.c_str());
  std::printf("%-22s %-17s %9s %9s %7s\n", "T, N, C, S", "what", "brisk", "pytorch", "ratio");
  manual_seed(0);
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    const Tensor x = randn({c.T, c.N, c.C}).requires_grad_();
    const Tensor targets = randint(1, c.C, {c.N, c.S});
    const std::vector<int64_t> il(size_t(c.N), c.T);
    const std::vector<int64_t> tl(size_t(c.N), c.S);
    std::map<std::string, double> ms;
    ms["forward"] = 1e3 * bench::seconds_per_call(
                              [&] {
                                NoGradGuard ng;
                                bench::keep(F::ctc_loss(log_softmax(x, 2), targets, il, tl));
                              },
                              10);
    ms["forward+backward"] = 1e3 * bench::seconds_per_call(
                                       [&] {
                                         F::ctc_loss(log_softmax(x, 2), targets, il, tl).backward();
                                         x.zero_grad();
                                       },
                                       5);
    const std::string name =
        std::to_string(c.T) + ", " + std::to_string(c.N) + ", " + std::to_string(c.C) + ", " + std::to_string(c.S);
    for (const char* what : {"forward", "forward+backward"}) {
      auto it = torch.find(std::to_string(i) + " " + what);
      if (it != torch.end()) {
        std::printf("%-22s %-17s %9.3f %9.3f %7.2f\n", name.c_str(), what, ms[what], it->second, ms[what] / it->second);
      } else {
        std::printf("%-22s %-17s %9.3f %9s %7s\n", name.c_str(), what, ms[what], "n/a", "n/a");
      }
    }
  }
  return 0;
}
