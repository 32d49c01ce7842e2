// examples/bench/bench_matmul.cpp: brisk's F32 GEMM (kernels/cpu/gemm.h) against the machine's
// measured F32 FMA peak (an AVX-512 FMA loop: ground truth that needs no other library), against
// brisk's Eigen path (BRISK_GEMM=eigen, switched in this run) and, given a Python with PyTorch,
// against torch.mm measured in the same run (a child process, OPENBLAS_CORETYPE and
// OPENBLAS_L2_SIZE unset, torch.set_num_threads as here). Square n = 128..2048 and the
// Fashion-MNIST MLP's products (forward and both backward products, with their transposed
// operands), on 1 and 2 threads. Each figure is the best of several timed batches: the machine is
// shared, and other load only ever slows a run down. A benchmark, never a test.
// Usage: bench_matmul [--torch PYTHON] [--quick] [--rounds N] [--only n512,fc1.fwd,...]
// [--cpu-time]
// (also BRISK_BENCH_TORCH=PYTHON)
// Not here: F64/BF16 (bench_amp), batched products, correctness (tests/test_gemm_f32.cpp).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_f32.h"

namespace {

namespace cpu = brisk::kernels::cpu;

// One product: c (m, n) = a (m, k) @ b (k, n); a_t / b_t: the operand is a transposed view of a
// row-major buffer (as linear's weight is in x @ W^T).
struct Shape {
  const char* name;
  int64_t m, n, k;
  bool a_t, b_t;
};

// With --cpu-time, the clock is the process's CPU time divided by the threads: it ignores time
// the machine gave to other processes (for tuning on a loaded machine; it also ignores time
// spent waiting at barriers, so it flatters multi-threaded runs).
bool g_cpu_time = false;
int g_threads = 1;

// This thread's CPU time (--cpu-time) or the wall clock.
double thread_clock_s() {
  if (!g_cpu_time) return bench::now_s();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double clock_s() {
  if (!g_cpu_time) return bench::now_s();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / g_threads;
}

// Best GFLOP/s over `repeats` timed batches of calls, each batch >= ~20 ms.
template <class F>
double best_gflops(double flops, int repeats, F&& f) {
  f();
  const double t0 = clock_s();
  f();
  const double once = std::max(clock_s() - t0, 1e-7);
  const int iters = std::max(1, int(0.02 / once));
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t1 = clock_s();
    for (int i = 0; i < iters; ++i) f();
    best = std::max(best, flops * iters / (clock_s() - t1) * 1e-9);
  }
  return best;
}

// torch.mm on the same shapes, in a child Python: one "name threads gflops" line per shape.
const char* kTorchScript = R"PY(
import sys, time, torch
threads = int(sys.argv[1]); repeats = int(sys.argv[2])
torch.set_num_threads(threads)
for spec in sys.argv[3:]:
    name, m, n, k, at, bt = spec.split(":")
    m, n, k = int(m), int(n), int(k)
    a = torch.rand(k, m).t() if at == "1" else torch.rand(m, k)
    b = torch.rand(n, k).t() if bt == "1" else torch.rand(k, n)
    c = torch.empty(m, n)
    torch.mm(a, b, out=c)
    t0 = time.perf_counter(); torch.mm(a, b, out=c); once = max(time.perf_counter() - t0, 1e-7)
    iters = max(1, int(0.02 / once)); best = 0.0
    for r in range(repeats):
        t1 = time.perf_counter()
        for i in range(iters): torch.mm(a, b, out=c)
        best = max(best, 2.0 * m * n * k * iters / (time.perf_counter() - t1) * 1e-9)
    print(name, threads, best, flush=True)
)PY";

std::string spec_of(const Shape& s) {
  return std::string(s.name) + ":" + std::to_string(s.m) + ":" + std::to_string(s.n) + ":" + std::to_string(s.k) + ":" +
         (s.a_t ? "1" : "0") + ":" + (s.b_t ? "1" : "0");
}

// (name, threads) -> GFLOP/s of torch.mm; empty when no Python was given or it failed.
std::map<std::pair<std::string, int>, double> torch_gflops(const char* python, const std::vector<Shape>& shapes,
                                                           int repeats) {
  std::map<std::pair<std::string, int>, double> out;
  if (!python) return out;
  std::string script_path = "/tmp/brisk_bench_matmul_torch.py";
  if (FILE* f = std::fopen(script_path.c_str(), "w")) {
    std::fputs(kTorchScript, f);
    std::fclose(f);
  } else {
    return out;
  }
  for (int threads : {1, 2}) {
    std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=" + std::to_string(threads) + " " +
                      python + " " + script_path + " " + std::to_string(threads) + " " + std::to_string(repeats);
    for (const Shape& s : shapes) cmd += " " + spec_of(s);
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) continue;
    char name[64];
    int t = 0;
    double g = 0;
    while (std::fscanf(p, "%63s %d %lf", name, &t, &g) == 3) out[{name, t}] = g;
    pclose(p);
  }
  return out;
}

std::string torch_version(const char* python) {
  if (!python) return "";
  std::string cmd = std::string(python) + " -c 'import torch; print(torch.__version__)' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[64] = {};
  if (!std::fgets(buf, sizeof buf, p)) buf[0] = 0;
  pclose(p);
  std::string v(buf);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const char* python = std::getenv("BRISK_BENCH_TORCH");
  bool quick = false;
  int rounds = 0;    // 0: the default (1 with --quick, else 2)
  std::string only;  // comma-separated shape names; empty: all
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--torch") && i + 1 < argc) python = argv[++i];
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--cpu-time")) g_cpu_time = true;
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  const int repeats = quick ? 3 : 7;
  if (rounds == 0) rounds = quick ? 1 : 2;

  std::vector<Shape> shapes = {
      {"n128", 128, 128, 128, false, false},
      {"n256", 256, 256, 256, false, false},
      {"n512", 512, 512, 512, false, false},
      {"n1024", 1024, 1024, 1024, false, false},
      {"n2048", 2048, 2048, 2048, false, false},
      // The MLP 784-256-128-10 at batch 128: y = x @ W^T, dx = dy @ W, dW = dy^T @ x.
      {"fc1.fwd", 128, 256, 784, false, true},
      {"fc1.dx", 128, 784, 256, false, false},
      {"fc1.dW", 256, 784, 128, true, false},
      {"fc2.fwd", 128, 128, 256, false, true},
      {"fc2.dx", 128, 256, 128, false, false},
      {"fc2.dW", 128, 256, 128, true, false},
  };

  if (!only.empty()) {
    std::erase_if(shapes, [&](const Shape& s) {
      return ("," + only + ",").find("," + std::string(s.name) + ",") == std::string::npos;
    });
  }
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  std::printf(
      "bench_matmul: C = A @ B, F32, row-major C; GFLOP/s = 2 M N K / seconds, best of %d batches x %d rounds\n",
      repeats, rounds);
  std::printf("cores: %d; OMP_WAIT_POLICY=%s; brisk F32 path: %s (the Eigen column forces BRISK_GEMM=eigen)\n",
              omp_get_num_procs(), wait ? wait : "(unset)", cpu::f32_gemm_path_name(cpu::f32_gemm_path()));
  double peak[3] = {0, 0, 0};  // by threads, the best of each round's measurement

  // Rounds: the whole table (torch pass, then brisk and Eigen) is measured `rounds` times and
  // each figure keeps its best, so that a busy spell of the machine does not decide a column.
  std::map<std::pair<std::string, int>, double> torch, g_brisk, g_eigen;
  const cpu::F32GemmPath native = cpu::f32_gemm_path();
  for (int round = 0; round < rounds; ++round) {
    for (int t : {1, 2}) peak[t] = std::max(peak[t], bench::fma_peak(t, thread_clock_s));
    for (const auto& [key, g] : torch_gflops(python, shapes, repeats)) torch[key] = std::max(torch[key], g);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (const Shape& s : shapes) {
      std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
      for (float& x : a) x = dist(rng);
      for (float& x : b) x = dist(rng);
      // A transposed view reads a (k, m) (or (n, k)) row-major buffer with strides (1, m).
      const cpu::MatrixRef<const float> ma = s.a_t ? cpu::MatrixRef<const float>{a.data(), s.m, s.k, 1, s.m}
                                                   : cpu::MatrixRef<const float>{a.data(), s.m, s.k, s.k, 1};
      const cpu::MatrixRef<const float> mb = s.b_t ? cpu::MatrixRef<const float>{b.data(), s.k, s.n, 1, s.k}
                                                   : cpu::MatrixRef<const float>{b.data(), s.k, s.n, s.n, 1};
      const cpu::MatrixRef<float> mc{c.data(), s.m, s.n, s.n, 1};
      const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
      const int reps = s.m * s.n * s.k >= (int64_t(1) << 30) ? std::max(3, repeats / 2) : repeats;
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        g_threads = threads;
        const std::pair<std::string, int> key{s.name, threads};
        // threads = 0: gemm picks, as the matmul kernel does (small products stay on one thread).
        cpu::set_f32_gemm_path(native);
        g_brisk[key] = std::max(g_brisk[key], best_gflops(flops, reps, [&] { cpu::gemm<float>(ma, mb, mc); }));
        cpu::set_f32_gemm_path(cpu::F32GemmPath::Eigen);
        g_eigen[key] = std::max(g_eigen[key], best_gflops(flops, reps, [&] { cpu::gemm<float>(ma, mb, mc); }));
        cpu::set_f32_gemm_path(native);
      }
    }
  }
  std::printf("F32 FMA peak (AVX-512 FMA loop): %.1f GFLOP/s on 1 thread, %.1f on 2\n", peak[1], peak[2]);
  if (!python) {
    std::printf("PyTorch: not asked for (--torch PYTHON or BRISK_BENCH_TORCH); its columns are empty\n");
  } else {
    std::printf("PyTorch %s (%s), OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, torch.mm(out=)%s\n",
                torch_version(python).c_str(), python, torch.empty() ? ": FAILED to run" : "");
  }

  std::printf("\n%-8s %5s %5s %5s %3s %7s %8s %6s %8s %8s %7s %8s\n", "shape", "M", "N", "K", "thr", "op", "brisk",
              "%peak", "Eigen", "torch", "%peak", "b/torch");
  for (const Shape& s : shapes) {
    const std::string op = std::string(s.a_t ? "A^T" : "A") + (s.b_t ? "B^T" : "B");
    for (int threads : {1, 2}) {
      const std::pair<std::string, int> key{s.name, threads};
      const double gb = g_brisk[key];
      std::printf("%-8s %5lld %5lld %5lld %3d %7s %8.1f %5.0f%% %8.1f ", s.name, (long long)s.m, (long long)s.n,
                  (long long)s.k, threads, op.c_str(), gb, 100 * gb / peak[threads], g_eigen[key]);
      const auto it = torch.find(key);
      if (it != torch.end()) {
        std::printf("%8.1f %6.0f%% %8.2f\n", it->second, 100 * it->second / peak[threads], gb / it->second);
      } else {
        std::printf("%8s %7s %8s\n", "-", "-", "-");
      }
    }
  }
  std::printf(
      "(%%peak: of the FMA peak on as many threads; b/torch: brisk / torch.mm GFLOP/s, > 1 is brisk faster;"
      "\n the machine is shared, so figures are the best of repeated batches)\n");
  return 0;
}
