// examples/bench/bench_init.cpp: random initialization against PyTorch's CPU generator, in the
// same run: randn of GPT-2's token embedding (50257 x 768), normal_ / uniform_ in place,
// nn::init::kaiming_uniform_ of a 3072 x 768 weight, and building GPT-2 124M (every weight
// initialized: brisk's GPT2 with Hugging Face's init, PyTorch's the same architecture written out
// with its modules' default inits), on 1 and 2 threads. Prints ms per call and brisk / PyTorch
// (< 1: brisk faster). brisk's values do not depend on the thread count (Note [Random streams]
// in engine/ops/random.cpp); PyTorch's CPU generator is one sequential stream. Last, building
// GPT-2 124M without initializing it (nn::init::skip_init) and loading its safetensors (500 MB,
// in the page cache), against reading the same file's bytes into memory.
// Asserts nothing; a benchmark, not a test.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/threads.h"
#include "examples/bench/bench_common.h"
#include "nn/init.h"
#include "nn/models/gpt2.h"
#include "nn/serialize_module.h"

using namespace brisk;

namespace {

const char* kTorch = R"PY(
import torch.nn as nn
class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
class GPT2(nn.Module):
    def __init__(self, vocab=50257, positions=1024, d=768, layers=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.h = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
e = torch.empty(50257, 768)
w = torch.empty(3072, 768)
print(0, "randn", per_call_ms(lambda: torch.randn(50257, 768), 3))
print(1, "normal_", per_call_ms(lambda: e.normal_(0, 0.02), 3))
print(2, "uniform_", per_call_ms(lambda: e.uniform_(-0.1, 0.1), 3))
print(3, "kaiming_uniform_", per_call_ms(lambda: nn.init.kaiming_uniform_(w, a=5 ** 0.5), 10))
print(4, "gpt2_124m", per_call_ms(lambda: GPT2(), 1, 3))
)PY";

}  // namespace

int main() {
  std::printf("bench_init: random initialization, brisk vs PyTorch (ms per call, median; ratio < 1: brisk faster)\n");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::string which;
    const auto torch = bench::torch_times(kTorch, threads, which);
    Tensor e = empty({50257, 768});
    Tensor w = empty({3072, 768});
    const double ms[] = {
        1e3 * bench::seconds_per_call(
                  [&] {
                    bench::keep(randn({50257, 768}));
                  },
                  3),
        1e3 * bench::seconds_per_call([&] { nn::init::normal_(e, 0, 0.02); }, 3),
        1e3 * bench::seconds_per_call([&] { nn::init::uniform_(e, -0.1, 0.1); }, 3),
        1e3 * bench::seconds_per_call([&] { nn::init::kaiming_uniform_(w, std::sqrt(5.0)); }, 10),
        1e3 * bench::seconds_per_call([&] { bench::keep(nn::models::GPT2()); }, 1, 3),
    };
    const char* names[] = {"randn", "normal_", "uniform_", "kaiming_uniform_", "gpt2_124m"};
    const char* shapes[] = {"(50257, 768)", "(50257, 768)", "(50257, 768)", "(3072, 768)", "124M values"};
    std::printf("\n%d thread%s (PyTorch: %s)\n%-18s %-14s %10s %10s %8s\n", threads, threads > 1 ? "s" : "",
                which.c_str(), "case", "shape", "brisk ms", "torch ms", "ratio");
    for (int i = 0; i < 5; ++i) {
      const auto it = torch.find(std::to_string(i) + " " + names[i]);
      const double t = it == torch.end() ? 0 : it->second;
      std::printf("%-18s %-14s %10.1f %10.1f %8s\n", names[i], shapes[i], ms[i], t,
                  t > 0 ? (std::to_string(ms[i] / t).substr(0, 4)).c_str() : "-");
    }
  }
  // skip_init + load against the file's read time (1 thread).
  set_num_threads(1);
  const std::string path = (std::filesystem::temp_directory_path() / "bench_init_gpt2.safetensors").string();
  nn::save_module(nn::models::GPT2(), path);
  const auto bytes = std::filesystem::file_size(path);
  std::vector<char> buffer(bytes);
  const double read_ms = 1e3 * bench::seconds_per_call(
                                   [&] {
                                     std::ifstream in(path, std::ios::binary);
                                     in.read(buffer.data(), std::streamsize(bytes));
                                   },
                                   1, 5);
  const double load_ms = 1e3 * bench::seconds_per_call(
                                   [&] {
                                     auto m = nn::init::skip_init<nn::models::GPT2>();
                                     nn::load_module(*m, path);
                                   },
                                   1, 5);
  std::printf(
      "\nGPT-2 124M from safetensors (%.0f MB, 1 thread): skip_init + load_module %.1f ms, reading the file "
      "%.1f ms: %.2fx the read\n",
      double(bytes) / 1e6, load_ms, read_ms, load_ms / read_ms);
  std::filesystem::remove(path);
  return 0;
}
