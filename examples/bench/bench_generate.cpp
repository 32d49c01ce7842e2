// examples/bench/bench_generate.cpp: tokens per second of greedy generation with GPT-2 (random
// weights), with the KV cache and without it (every step recomputes the whole sequence), beside
// Hugging Face transformers' generate(use_cache=True / False) on the same configuration in the
// same run (a Python with torch and transformers: $TORCH_PYTHON, else the venv; skipped with a
// note when there is none). Batch 1, a prompt of --prompt tokens, --new tokens; F32.
//
// Usage: bench_generate [--model small|124m] [--prompt 32] [--new 256] [--threads N]
//   small: 6 layers, d 384, 6 heads (examples/gpt's size), vocab 50257, 1024 positions
//   124m:  GPT-2 124M (12 layers, d 768, 12 heads)
// Prints one line per engine and mode, then the cache's speed-up for each.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "brisk.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

int main(int argc, char** argv) {
  std::string which_model = "small";
  int64_t prompt = 32, fresh = 256;
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      which_model = v;
    else if (a == "--prompt")
      prompt = std::stoll(v);
    else if (a == "--new")
      fresh = std::stoll(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else {
      std::fprintf(stderr, "bench_generate: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (threads > 0) set_num_threads(threads);
  nn::models::GPT2Config c{.dropout = 0.0};
  if (which_model == "small") {
    c.n_embd = 384;
    c.n_layer = 6;
    c.n_head = 6;
  } else if (which_model != "124m") {
    std::fprintf(stderr, "bench_generate: --model is small or 124m\n");
    return 2;
  }
  manual_seed(0);
  auto gpt = std::make_shared<nn::models::GPT2>(c);
  gpt->eval();
  Tensor ids = randint(0, c.vocab_size, {1, prompt}, DType::I64);

  std::printf(
      "bench_generate: GPT-2 %s (%lld layers, d %lld), batch 1, prompt %lld, %lld new tokens, greedy, %d threads\n",
      which_model.c_str(), (long long)c.n_layer, (long long)c.n_embd, (long long)prompt, (long long)fresh,
      get_num_threads());
  // Warm-up (allocator, thread pool), then one timed run per mode: a run is seconds long.
  gpt->generate(ids, {.max_new_tokens = 8});
  double tps[2] = {0, 0};
  for (int cache = 1; cache >= 0; --cache) {
    const double t0 = bench::now_s();
    Tensor out = gpt->generate(ids, {.max_new_tokens = fresh, .use_cache = bool(cache)});
    const double dt = bench::now_s() - t0;
    bench::keep(out);
    tps[cache] = double(fresh) / dt;
    std::printf("  brisk         %-8s %8.1f tokens/s (%.2f s)\n", cache ? "cache" : "no cache", tps[cache], dt);
  }

  const std::string body = R"PY(
from transformers import GPT2Config, GPT2LMHeadModel
L, D, H, P, N = [int(x) for x in sys.argv[2:7]]
torch.manual_seed(0)
m = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=D, n_head=H, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
ids = torch.randint(0, 50257, (1, P))
with torch.no_grad():
    m.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    for i, cache in enumerate([True, False]):
        t0 = time.perf_counter()
        m.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, use_cache=cache, pad_token_id=0)
        print(i, "cache" if cache else "nocache", (time.perf_counter() - t0) * 1e3, flush=True)
)PY";
  // torch_times passes the thread count as argv[1]; the rest follow it.
  std::string which;
  const std::string args = std::to_string(c.n_layer) + " " + std::to_string(c.n_embd) + " " + std::to_string(c.n_head) +
                           " " + std::to_string(prompt) + " " + std::to_string(fresh);
  const auto pt = bench::torch_times(body, get_num_threads(), which, args);
  double pt_tps[2] = {0, 0};
  if (pt.count("0 cache") && pt.count("1 nocache")) {
    pt_tps[1] = double(fresh) / (pt.at("0 cache") / 1e3);
    pt_tps[0] = double(fresh) / (pt.at("1 nocache") / 1e3);
    for (int cache = 1; cache >= 0; --cache)
      std::printf("  transformers  %-8s %8.1f tokens/s (%.2f s)\n", cache ? "cache" : "no cache", pt_tps[cache],
                  double(fresh) / pt_tps[cache]);
  } else {
    std::printf("  transformers: not run (%s has no torch + transformers)\n", which.c_str());
  }
  std::printf("the cache's speed-up: brisk %.1fx", tps[1] / tps[0]);
  if (pt_tps[0] > 0)
    std::printf(", transformers %.1fx; brisk / transformers tokens/s: cache %.2f, no cache %.2f", pt_tps[1] / pt_tps[0],
                tps[1] / pt_tps[1], tps[0] / pt_tps[0]);
  std::printf("\n");
  return 0;
}
