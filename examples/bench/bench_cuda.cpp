// examples/bench/bench_cuda.cpp: speed of the CUDA backend on one GPU: matmul TFLOP/s (F32,
// TF32, BF16 at 4096 and 8192, beside torch.matmul when python3 can import torch), device-to-
// device copy GB/s, host-to-device GB/s from pinned memory, and the per-op host overhead of
// a + b on 16 floats with and without requires_grad. Prints one table; never asserts speed.
// Exit codes: 0 done (or built without CUDA: "skipped"), 2 no CUDA device. --quick, --probe.
// Not here: correctness (tests/test_cuda.cpp).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#endif

#ifndef BRISK_WITH_CUDA
int main() {
  std::printf("bench_cuda: skipped: built without CUDA\n");
  return 0;
}
#else

using namespace brisk;

namespace {

struct Row {
  std::string what;
  double brisk;
  double torch;  // < 0: not measured
  std::string unit;
};

// Median-free and simple: total time of `iters` runs between two events, after `warmup`.
template <class F>
double time_ms(F&& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  cuda::Event start(true), stop(true);
  start.record();
  for (int i = 0; i < iters; ++i) f();
  stop.record();
  stop.synchronize();
  return start.elapsed_ms(stop) / iters;
}

// torch.matmul TFLOP/s for "dtype n" lines, from python3 if torch imports (else empty).
std::vector<std::pair<std::string, double> > torch_matmul(const std::vector<int>& sizes) {
  std::string ns;
  for (int n : sizes) ns += (ns.empty() ? "" : ",") + std::to_string(n);
  const std::string script =
      "import torch,sys\n"
      "if not torch.cuda.is_available(): sys.exit(1)\n"
      "for name,dt,tf in [('F32',torch.float32,False),('TF32',torch.float32,True),('BF16',torch.bfloat16,False)]:\n"
      "  torch.backends.cuda.matmul.allow_tf32=tf\n"
      "  for n in [" +
      ns +
      "]:\n"
      "    a=torch.rand(n,n,device='cuda',dtype=dt);b=torch.rand(n,n,device='cuda',dtype=dt)\n"
      "    for _ in range(3): a@b\n"
      "    s=torch.cuda.Event(enable_timing=True);e=torch.cuda.Event(enable_timing=True)\n"
      "    it=10;s.record()\n"
      "    for _ in range(it): a@b\n"
      "    e.record();e.synchronize();ms=s.elapsed_time(e)/it\n"
      "    print(name,n,2*n**3/ms/1e9,flush=True)\n";
  std::vector<std::pair<std::string, double> > out;
  const std::string cmd = "python3 -c \"" + [&] {
    std::string s;
    for (char c : script) {
      if (c == '"' || c == '\\' || c == '$' || c == '`') s += '\\';
      s += c;
    }
    return s;
  }() + "\" 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char name[16];
  int n = 0;
  double tflops = 0;
  while (std::fscanf(p, "%15s %d %lf", name, &n, &tflops) == 3)
    out.push_back({std::string(name) + " " + std::to_string(n), tflops});
  pclose(p);
  return out;
}

}  // namespace

// Options: --quick (small sizes, for a smoke run), --probe (print the device count and exit).
int main(int argc, char** argv) {
  const std::string opt = argc > 1 ? argv[1] : "";
  const int devices = cuda::device_count();
  if (devices == 0) {
    std::fprintf(stderr, "bench_cuda: no CUDA device (no driver or no GPU on this machine)\n");
    return 2;
  }
  if (opt == "--probe") {
    std::printf("bench_cuda: %d CUDA device%s\n", devices, devices == 1 ? "" : "s");
    return 0;
  }
  const bool quick = opt == "--quick";
  const Device gpu = Device::cuda(0);
  std::vector<Row> rows;
  std::vector<int> sizes = quick ? std::vector<int>{1024} : std::vector<int>{4096, 8192};
  auto torch = torch_matmul(sizes);
  auto torch_of = [&](const std::string& key) {
    for (auto& [k, v] : torch) {
      if (k == key) return v;
    }
    return -1.0;
  };

  // ---- matmul
  struct Kind {
    const char* name;
    DType dtype;
    bool tf32;
  };
  for (Kind k : {Kind{"F32", DType::F32, false}, Kind{"TF32", DType::F32, true}, Kind{"BF16", DType::BF16, false}}) {
    cuda::set_allow_tf32(k.tf32);
    for (int n : sizes) {
      Tensor a = rand({n, n}, k.dtype, gpu), b = rand({n, n}, k.dtype, gpu);
      Tensor c;
      NoGradGuard ng;
      const double ms = time_ms([&] { c = matmul(a, b); }, 3, n >= 8192 ? 5 : 10);
      const std::string key = std::string(k.name) + " " + std::to_string(n);
      rows.push_back({"matmul " + key, 2.0 * double(n) * n * n / ms / 1e9, torch_of(key), "TFLOP/s"});
    }
  }
  cuda::set_allow_tf32(false);

  // ---- copies
  {
    NoGradGuard ng;
    const int64_t n = int64_t(64) << 20;  // 256 MB of F32
    Tensor x = rand({n}, DType::F32, gpu);
    Tensor y = empty({n}, DType::F32, gpu);
    const double ms = time_ms([&] { y.copy_(x); }, 2, 10);
    rows.push_back({"copy device->device (read + write)", 2.0 * double(n) * 4 / ms / 1e6, -1, "GB/s"});
    Tensor h = rand({n}, DType::F32).pin_memory();
    Tensor d;
    const double ms2 = time_ms([&] { d = h.to(gpu, /*non_blocking=*/true); }, 1, 5);
    rows.push_back({"copy pinned host->device", double(n) * 4 / ms2 / 1e6, -1, "GB/s"});
  }

  // ---- per-op overhead: host time per op (median of repeats); the GPU runs each 16-element
  // kernel faster than the host issues it, so this is brisk's dispatch + launch cost.
  for (bool grad : {false, true}) {
    Tensor a = rand({16}, DType::F32, gpu), b = rand({16}, DType::F32, gpu);
    if (grad) a.requires_grad_();
    const double s = bench::seconds_per_call(
        [&] {
          Tensor c = a + b;
          bench::keep(c);
        },
        quick ? 1000 : 5000);
    cuda::synchronize();
    rows.push_back({std::string("a + b on 16 floats") + (grad ? ", requires_grad" : ""), s * 1e6, -1, "us/op"});
  }

  const AllocatorStats s = cuda::memory_stats(0);
  std::printf("\nbench_cuda (device 0 of %d; torch %s)\n", devices, torch.empty() ? "not available" : "via python3");
  std::printf("%-42s %12s %12s  %s\n", "what", "brisk", "torch", "unit");
  for (const Row& r : rows) {
    char t[32] = "-";
    if (r.torch >= 0) std::snprintf(t, sizeof t, "%.1f", r.torch);
    std::printf("%-42s %12.2f %12s  %s\n", r.what.c_str(), r.brisk, t, r.unit.c_str());
  }
  std::printf("allocator: peak %.1f MB, cudaMalloc calls %llu, cache hits %llu\n", double(s.peak) / 1e6,
              (unsigned long long)s.system_allocs, (unsigned long long)s.cache_hits);
  return 0;
}

#endif  // BRISK_WITH_CUDA
