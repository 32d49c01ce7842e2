// examples/bench/bench_models.cpp: the model zoo against PyTorch, step by step. For every model
// (ResNet-18 and -50 at 32x32 and 224x224, VGG-11, MobileNetV2, an LSTM and a GRU language
// model, a TransformerEncoder, a GPT-2 decoder), every thread count and both modes (a training
// step: forward, loss, backward, optimizer; an inference step: forward under no_grad in eval
// mode) it times brisk and PyTorch (examples/bench/bench_models.py, the same models written out
// in plain torch.nn) on the same shapes in the same run, each case in a fresh child process so
// that its peak RSS is its own. Prints one table: ms/step (median of the timed steps after the
// warm-up), brisk / PyTorch (< 1: brisk is faster), the step's GEMM FLOPs and the fraction of
// the machine's F32 FMA peak on as many threads, peak RSS of both; then brisk's profiler top-5
// ops (self time) of each model's training step on the most threads.
//
// Usage: bench_models [--models a,b,..] [--threads 1,2] [--modes train,infer] [--steps N]
//                     [--warmup N] [--no-torch] [--no-profile] [--top N] [--by-shape]
// (--top: profiler rows per model, default 5; --by-shape: grouped by input shapes too.)
// Models: resnet18_32 resnet18_224 resnet50_32 resnet50_224 vgg11_32 mobilenet_v2_32
//         mobilenet_v2_224 lstm_lm gru_lm transformer gpt2 (default: all).
// FLOPs: 2 x multiply-adds of the Conv2d, Linear, LSTM/GRU and attention products; a training
// step counts 3x its forward (forward, input gradient, weight gradient). Not a test: it
// asserts nothing. The Python: $TORCH_PYTHON, else the venv beside the checkout (see
// bench_common.h); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for it and
// OMP_WAIT_POLICY=passive is set for both (as compare_pytorch.sh).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "engine/profiler.h"
#include "engine/threads.h"
#include "examples/bench/bench_common.h"
#include "nn/models/gpt2.h"
#include "nn/models/vision.h"
#include "nn/recurrent.h"
#include "nn/transformer.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace brisk;

namespace {

// One model of the zoo: how it is built, what it eats, how its loss is made, its optimizer.
struct Case {
  std::string name, what;
  int64_t train_batch, infer_batch;
};

const std::vector<Case>& zoo() {
  static const std::vector<Case> cases = {
      {"resnet18_32", "ResNet-18, 3x32x32, 10 classes, SGD momentum", 32, 64},
      {"resnet18_224", "ResNet-18, 3x224x224, 1000 classes, SGD momentum", 4, 8},
      {"resnet50_32", "ResNet-50, 3x32x32, 10 classes, SGD momentum", 16, 32},
      {"resnet50_224", "ResNet-50, 3x224x224, 1000 classes, SGD momentum", 2, 4},
      {"vgg11_32", "VGG-11, 3x32x32, 10 classes, SGD momentum", 16, 32},
      {"mobilenet_v2_32", "MobileNetV2, 3x32x32, 10 classes, SGD momentum", 32, 64},
      {"mobilenet_v2_224", "MobileNetV2, 3x224x224, 1000 classes, SGD momentum", 4, 8},
      {"lstm_lm", "Embedding 96->256, 2-layer LSTM 512, seq 64, Adam", 32, 32},
      {"gru_lm", "Embedding 96->256, 2-layer GRU 512, seq 64, Adam", 32, 32},
      {"transformer", "TransformerEncoder 4 layers, d 256, 4 heads, ff 1024, T 128, Adam", 16, 16},
      {"gpt2", "GPT-2 decoder 4 layers, d 256, 4 heads, T 128, vocab 50257, AdamW", 16, 16},
      {"gpt_layers", "the same decoder from nn::TransformerEncoderLayer (pre-norm, GELU, causal), AdamW", 16, 16},
  };
  return cases;
}

// A recurrent language model: embedding, 2-layer LSTM or GRU (batch first), linear head.
class RecurrentLM : public nn::Module {
 public:
  explicit RecurrentLM(bool lstm) : Module("RecurrentLM"), lstm_(lstm) {
    register_module("embed", std::make_shared<nn::Embedding>(96, 256));
    const nn::RNNOptions o{.num_layers = 2, .batch_first = true};
    if (lstm) {
      register_module("rnn", std::make_shared<nn::LSTM>(256, 512, o));
    } else {
      register_module("rnn", std::make_shared<nn::GRU>(256, 512, o));
    }
    register_module("head", std::make_shared<nn::Linear>(512, 96));
  }
  Tensor forward(const Tensor& idx) override { return (*child("head"))((*child("rnn"))((*child("embed"))(idx))); }

 private:
  bool lstm_;
};

// A classifier head over a TransformerEncoder of token embeddings (a BERT-style encoder).
class EncoderLM : public nn::Module {
 public:
  EncoderLM() : Module("EncoderLM") {
    register_module("embed", std::make_shared<nn::Embedding>(1000, 256));
    register_module("encoder", std::make_shared<nn::TransformerEncoder>(
                                   256, 4, 4, nn::TransformerOptions{.dim_feedforward = 1024, .batch_first = true}));
    register_module("head", std::make_shared<nn::Linear>(256, 1000));
  }
  Tensor forward(const Tensor& idx) override { return (*child("head"))((*child("encoder"))((*child("embed"))(idx))); }
};

// The GPT decoder as a PyTorch user writes it from the library's layers: token and position
// embeddings, a TransformerEncoder of pre-norm GELU TransformerEncoderLayers called with the
// causal mask and is_causal, a final LayerNorm, the head tied to the token embedding.
class LayersGPT : public nn::Module {
 public:
  LayersGPT() : Module("LayersGPT") {
    wte_ = register_module("wte", std::make_shared<nn::Embedding>(50257, 256));
    // GPT-2's N(0, 0.02), as the twin: Embedding's default N(0, 1) makes the tied head's logits
    // so spread that most softmax gradients are denormal floats, which slow every GEMM over
    // them (both engines' backward took 1.7-2x as long).
    nn::init::normal_(wte_->parameter("weight"), 0, 0.02);
    register_module("wpe", std::make_shared<nn::Embedding>(128, 256));
    register_module("drop", std::make_shared<nn::Dropout>(0.1));
    const nn::TransformerOptions o{
        .dim_feedforward = 1024, .dropout = 0.1, .activation = "gelu", .batch_first = true, .norm_first = true};
    encoder_ =
        register_module("encoder", std::make_shared<nn::TransformerEncoder>(nn::TransformerEncoderLayer(256, 4, o), 4,
                                                                            std::make_shared<nn::LayerNorm>(256)));
  }
  Tensor forward(const Tensor& idx) override {
    const int64_t T = idx.size(1);
    const Tensor x = (*child("drop"))((*wte_)(idx) + (*child("wpe"))(arange(T, DType::I64)));
    const Tensor h = (*encoder_)(x, nn::generate_square_subsequent_mask(T), Tensor(), true);
    return matmul(h, transpose(wte_->parameter("weight"), 0, 1));
  }

 private:
  std::shared_ptr<nn::Embedding> wte_;
  std::shared_ptr<nn::TransformerEncoder> encoder_;
};

struct Built {
  std::shared_ptr<nn::Module> model;
  Tensor x, target;  // target: class ids (B) or token ids (B, T)
  bool tokens = false;
  std::unique_ptr<optim::Optimizer> opt;
};

Built build(const std::string& name, int64_t batch) {
  Built b;
  auto image = [&](std::shared_ptr<nn::Module> m, int64_t side, int64_t classes) {
    b.model = std::move(m);
    b.x = randn({batch, 3, side, side});
    b.target = randint(0, classes, {batch});
  };
  auto text = [&](std::shared_ptr<nn::Module> m, int64_t vocab, int64_t T) {
    b.model = std::move(m);
    b.x = randint(0, vocab, {batch, T});
    b.target = randint(0, vocab, {batch, T});
    b.tokens = true;
  };
  if (name == "resnet18_32") image(nn::models::resnet18(10), 32, 10);
  if (name == "resnet18_224") image(nn::models::resnet18(1000), 224, 1000);
  if (name == "resnet50_32") image(nn::models::resnet50(10), 32, 10);
  if (name == "resnet50_224") image(nn::models::resnet50(1000), 224, 1000);
  if (name == "vgg11_32") image(nn::models::vgg11(10), 32, 10);
  if (name == "mobilenet_v2_32") image(std::make_shared<nn::models::MobileNetV2>(10), 32, 10);
  if (name == "mobilenet_v2_224") image(std::make_shared<nn::models::MobileNetV2>(1000), 224, 1000);
  if (name == "lstm_lm") text(std::make_shared<RecurrentLM>(true), 96, 64);
  if (name == "gru_lm") text(std::make_shared<RecurrentLM>(false), 96, 64);
  if (name == "transformer") text(std::make_shared<EncoderLM>(), 1000, 128);
  if (name == "gpt2") {
    nn::models::GPT2Config c{.n_positions = 128, .n_embd = 256, .n_layer = 4, .n_head = 4};
    text(std::make_shared<nn::models::GPT2>(c), c.vocab_size, 128);
  }
  if (name == "gpt_layers") text(std::make_shared<LayersGPT>(), 50257, 128);
  if (!b.model) throw Error("bench_models: unknown model '" + name + "'");
  const NamedTensors params = b.model->named_parameters();
  if (name.rfind("resnet", 0) == 0 || name.rfind("vgg", 0) == 0 || name.rfind("mobilenet", 0) == 0) {
    b.opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  } else if (name == "gpt2" || name == "gpt_layers") {
    b.opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-4});
  } else {
    b.opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-3});
  }
  return b;
}

Tensor loss_of(const Built& b, const Tensor& out) {
  if (!b.tokens) return nn::functional::cross_entropy(out, b.target);
  const int64_t V = out.size(-1);
  return nn::functional::cross_entropy(out.reshape({-1, V}), b.target.reshape({-1}));
}

// FLOPs (2 x multiply-adds) of one forward pass: Conv2d and Linear from their outputs and
// weights (forward hooks), LSTM / GRU and attention products from the layers' sizes.
double forward_flops(const std::string& name, nn::Module& model, const Tensor& x) {
  std::vector<std::pair<nn::Module*, int>> hooks;
  double total = 0;
  for (auto& [n, m] : model.named_modules()) {
    const std::string& t = m->type_name();
    if (t != "Conv2d" && t != "Linear" && t != "Conv1D") continue;  // Conv1D: GPT-2's HFConv1D
    hooks.emplace_back(m, m->register_forward_hook([&total](nn::Module& mod, const Tensor&, Tensor& out) {
      const Tensor& w = mod.parameter("weight");  // per output: Linear in, Conv2d in / groups * kh * kw
      const double per_output = mod.type_name() == "Conv1D" ? double(w.size(0)) : double(w.numel() / w.size(0));
      total += 2.0 * double(out.numel()) * per_output;
    }));
  }
  {
    NoGradGuard no_grad;
    model(x);
  }
  for (auto& [m, h] : hooks) m->remove_hook(h);
  const double B = double(x.size(0));
  if (name == "lstm_lm" || name == "gru_lm") {  // per layer: input and recurrent products, G gates
    const double G = name == "lstm_lm" ? 4 : 3, T = 64, H = 512;
    total += 2.0 * B * T * G * H * ((256 + H) + (H + H));
  }
  if (name == "transformer" || name == "gpt2" || name == "gpt_layers") {  // Q K^T and P V per layer
    const double T = 128, d = 256, layers = 4;
    total += layers * 2.0 * 2.0 * B * T * T * d;
  }
  if (name == "gpt2" || name == "gpt_layers") total += 2.0 * B * 128 * 256 * 50257;  // the head tied to wte
  return total;
}

int64_t peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// The child: one model, mode and thread count; prints "RESULT ms=.. flops=.. rss_mb=..".
int run_child(const std::string& name, const std::string& mode, int threads, int steps, int warmup, bool profile,
              int top, bool by_shape) {
  set_num_threads(threads);
  manual_seed(0);
  const Case* c = nullptr;
  for (const Case& k : zoo()) {
    if (k.name == name) c = &k;
  }
  if (!c) throw Error("bench_models: unknown model '" + name + "'");
  const bool train = mode == "train";
  Built b = build(name, train ? c->train_batch : c->infer_batch);
  b.model->train(train);
  const double flops = forward_flops(name, *b.model, b.x) * (train ? 3 : 1);
  std::vector<double> phase[3];  // forward (with the loss), backward, optimizer (zero_grad and step)
  auto step = [&] {
    if (train) {
      const double t0 = bench::now_s();
      b.opt->zero_grad();
      Tensor loss = loss_of(b, (*b.model)(b.x));
      const double t1 = bench::now_s();
      loss.backward();
      const double t2 = bench::now_s();
      b.opt->step();
      bench::keep(loss.item<float>());
      const double t3 = bench::now_s();
      phase[0].push_back(t1 - t0);
      phase[1].push_back(t2 - t1);
      phase[2].push_back(t3 - t2);
    } else {
      NoGradGuard no_grad;
      Tensor out = (*b.model)(b.x);
      bench::keep(out.data_ptr());
    }
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const double t0 = bench::now_s();
    step();
    t.push_back(bench::now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  std::printf("RESULT ms=%.3f flops=%.6g rss_mb=%lld\n", 1e3 * t[t.size() / 2], flops, (long long)peak_rss_mb());
  if (train) {
    for (auto& v : phase) std::sort(v.begin(), v.end());
    auto med = [](const std::vector<double>& v) { return 1e3 * v[v.size() / 2]; };
    std::printf("PHASES forward %.1f ms, backward %.1f ms, optimizer %.1f ms (medians over all steps)\n", med(phase[0]),
                med(phase[1]), med(phase[2]));
  }
  if (profile) {
    profiler::Profiler prof(profiler::ProfilerOptions{.record_shapes = by_shape});
    step();
    const profiler::Profile p = prof.stop();
    int shown = 0;
    for (const profiler::OpStats& s : p.key_averages(by_shape)) {
      if (s.kind == profiler::EventKind::Range) continue;
      std::printf("PROFILE %s %s %lld %.3f %.1f%s%s\n", s.name.c_str(), profiler::event_kind_name(s.kind),
                  (long long)s.count, 1e-6 * double(s.self_ns), 100.0 * double(s.self_ns) / double(p.wall_ns()),
                  by_shape ? " " : "", s.shapes.c_str());
      if (++shown == top) break;
    }
  }
  std::fflush(stdout);
  return 0;
}

// Runs `cmd` and returns its stdout.
std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The directory of this executable's source, for bench_models.py: $BRISK_ROOT, else the
// source tree this binary was configured from.
std::string script_path() {
  const char* root = std::getenv("BRISK_ROOT");
  return std::string(root ? root : BRISK_SOURCE_DIR) + "/examples/bench/bench_models.py";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models, modes = {"train", "infer"};
  std::vector<int> threads = {1, 2};
  int steps = 5, warmup = 2;
  bool torch = true, profile = true, by_shape = false;
  int top = 5;
  for (const Case& c : zoo()) models.push_back(c.name);
  std::string child_model, child_mode;
  int child_threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("bench_models: " + k + " needs a value");
      return argv[++i];
    };
    if (k == "--models") {
      models = bench::split(value());
    } else if (k == "--threads") {
      threads.clear();
      for (const std::string& t : bench::split(value())) threads.push_back(std::stoi(t));
    } else if (k == "--modes") {
      modes = bench::split(value());
    } else if (k == "--steps") {
      steps = std::max(1, std::stoi(value()));
    } else if (k == "--warmup") {
      warmup = std::max(0, std::stoi(value()));
    } else if (k == "--no-torch") {
      torch = false;
    } else if (k == "--no-profile") {
      profile = false;
    } else if (k == "--top") {
      top = std::max(1, std::stoi(value()));
    } else if (k == "--by-shape") {
      by_shape = true;
    } else if (k == "--child") {  // internal: --child MODEL MODE THREADS
      child_model = value();
      child_mode = value();
      child_threads = std::stoi(value());
    } else {
      std::fprintf(stderr, "bench_models: unknown option %s (see the header of examples/bench/bench_models.cpp)\n",
                   k.c_str());
      return 2;
    }
  }
  if (!child_model.empty())
    return run_child(child_model, child_mode, child_threads, steps, warmup, profile, top, by_shape);

  setenv("OMP_WAIT_POLICY", std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "passive", 1);
  const std::string py = torch ? bench::python_for_torch() : "";
  std::string torch_version = "not run";
  if (!py.empty()) torch_version = capture(py + " -c 'import torch; print(torch.__version__, end=\"\")'");
  const int max_threads = *std::max_element(threads.begin(), threads.end());
  std::map<int, double> peak;
  for (int t : threads) peak[t] = bench::fma_peak(t);
  std::printf("bench_models: %d steps after %d warm-up, median; %ld cores; PyTorch %s%s; OMP_WAIT_POLICY=%s\n", steps,
              warmup, sysconf(_SC_NPROCESSORS_ONLN), torch_version.c_str(),
              py.empty() ? "" : (" (" + py + ", OPENBLAS_* unset)").c_str(), std::getenv("OMP_WAIT_POLICY"));
  for (int t : threads) std::printf("F32 FMA peak, %d thread(s): %.0f GFLOP/s\n", t, peak[t]);
  std::printf(
      "\n| model | mode | batch | thr | brisk ms | PyTorch ms | brisk/PT | GFLOP | brisk %%peak | PT %%peak | RSS MB "
      "brisk / PT |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::fflush(stdout);
  std::string exe(4096, '\0');
  exe.resize(size_t(std::max<ssize_t>(0, readlink("/proc/self/exe", exe.data(), exe.size()))));
  std::vector<std::string> profiles;
  for (const std::string& m : models) {
    const Case* c = nullptr;
    for (const Case& k : zoo()) {
      if (k.name == m) c = &k;
    }
    if (!c) {
      std::fprintf(stderr, "bench_models: unknown model '%s'\n", m.c_str());
      return 2;
    }
    for (const std::string& mode : modes) {
      for (int t : threads) {
        const bool prof = profile && mode == "train" && t == max_threads;
        const std::string args = " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                                 " --top " + std::to_string(top) + (by_shape ? " --by-shape" : "");
        const std::string mine = capture(exe + " --child " + m + " " + mode + " " + std::to_string(t) + args +
                                         (prof ? "" : " --no-profile"));
        std::string theirs;
        if (!py.empty()) {
          theirs = capture("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=" + std::to_string(t) + " " +
                           py + " " + script_path() + " " + m + " " + mode + " " + std::to_string(t) + " " +
                           std::to_string(steps) + " " + std::to_string(warmup) + " 2>&1");
        }
        const double ms = bench::tagged_field(mine, "RESULT", "ms"),
                     flops = bench::tagged_field(mine, "RESULT", "flops");
        const double tms = bench::tagged_field(theirs, "RESULT", "ms");
        const double rss = bench::tagged_field(mine, "RESULT", "rss_mb"),
                     trss = bench::tagged_field(theirs, "RESULT", "rss_mb");
        const int64_t batch = mode == "train" ? c->train_batch : c->infer_batch;
        auto pct = [&](double t_ms) {
          return t_ms > 0 && peak[t] > 0 ? 100.0 * flops / (t_ms * 1e-3) / (peak[t] * 1e9) : -1.0;
        };
        auto num = [](double v, const char* fmt) {
          if (v < 0) return std::string("n/a");
          char buf[64];
          std::snprintf(buf, sizeof buf, fmt, v);
          return std::string(buf);
        };
        std::printf("| %s | %s | %lld | %d | %s | %s | %s | %s | %s | %s | %s / %s |\n", m.c_str(), mode.c_str(),
                    (long long)batch, t, num(ms, "%.1f").c_str(), num(tms, "%.1f").c_str(),
                    num(ms > 0 && tms > 0 ? ms / tms : -1, "%.2f").c_str(), num(flops * 1e-9, "%.1f").c_str(),
                    num(pct(ms), "%.0f").c_str(), num(pct(tms), "%.0f").c_str(), num(rss, "%.0f").c_str(),
                    num(trss, "%.0f").c_str());
        std::fflush(stdout);
        if (ms < 0)
          std::fprintf(stderr, "bench_models: brisk %s %s failed:\n%s\n", m.c_str(), mode.c_str(), mine.c_str());
        if (!py.empty() && tms < 0) {
          std::fprintf(stderr, "bench_models: PyTorch %s %s failed:\n%s\n", m.c_str(), mode.c_str(), theirs.c_str());
        }
        if (prof) {
          std::string lines = "\n" + m + ", training step on " + std::to_string(t) + " thread(s): ";
          const size_t ph = mine.find("PHASES ");
          if (ph != std::string::npos) lines += mine.substr(ph + 7, mine.find('\n', ph) - ph - 7);
          lines += "; brisk's top ops by self time:\n";
          std::stringstream in(mine);
          std::string line;
          while (std::getline(in, line)) {
            if (line.rfind("PROFILE ", 0) != 0) continue;
            char name[256], kind[32];
            long long calls = 0;
            double self_ms = 0, share = 0;
            int used = 0;
            if (std::sscanf(line.c_str(), "PROFILE %255s %31s %lld %lf %lf%n", name, kind, &calls, &self_ms, &share,
                            &used) == 5) {
              char buf[512];
              std::snprintf(buf, sizeof buf, "  %-34s %-8s %6lld calls %9.2f ms %5.1f%%", name, kind, calls, self_ms,
                            share);
              lines += buf + line.substr(size_t(used)) + "\n";
            }
          }
          profiles.push_back(lines);
        }
      }
    }
  }
  for (const std::string& p : profiles) std::printf("%s", p.c_str());
  return 0;
}
