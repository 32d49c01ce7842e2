// examples/gpt/main.cpp: a GPT trained on real text, end to end. The corpus is Debian's
// `fortunes` package (/usr/share/games/fortunes: ~2.5 MB of quotations, jokes and poems, one
// fortune per "%"-separated record; every 20th fortune is held out for validation). The
// program trains a byte-level BPE tokenizer on the training fortunes (text/bpe.h), writes
// both splits as llm.c-format token files (text/token_file.h), then trains GPT-2's
// architecture (nn::models::GPT2; default 6 layers, d 384, 6 heads, T 256) with AdamW (weight
// decay on matrices only), linear warm-up then cosine decay, gradient clipping, gradient
// accumulation and BF16 autocast where the CPU has BF16 instructions; it evaluates the
// validation loss and perplexity every --eval-every steps, checkpoints (--resume continues),
// and ends with a sample. Everything lands in --out:
//   tokenizer/{vocab.json,merges.txt,tokenizer.json}  train.bin  val.bin
//   init.safetensors (the initial weights) + config.json (Hugging Face's GPT-2 config)
//   order.txt (the window indices of every micro-batch)   run.json (this run's settings)
//   log.jsonl  loss.svg  tensorboard/  checkpoint.safetensors  model/ (config.json +
//   model.safetensors: GPT2::from_pretrained and transformers read it)  sample.txt
// examples/gpt/twin.py is the PyTorch twin: transformers' GPT2LMHeadModel from the same
// init.safetensors, the same token files and order.txt, the same optimizer and schedule.
//
// Usage: gpt [--out DIR] [--quick] [--steps N] [--batch B] [--accum A] [--block T]
//            [--layers L] [--d D] [--heads H] [--vocab V] [--lr LR] [--warmup W]
//            [--eval-every E] [--eval-windows N] [--bf16 auto|on|off] [--seed S] [--threads N]
//            [--corpus DIR] [--resume] [--ddp] [--sample-tokens N]
//   --quick: a 2-layer d 64 model, vocab 512, T 64, 30 steps on a tenth of the corpus (the
//            smoke test); --ddp: under mpirun, each rank takes batch / ranks of every step.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "kernels/cpu/gemm_bf16.h"
#include "text/bpe.h"
#include "text/token_file.h"
#include "train/checkpoint.h"
#include "train/tensorboard.h"
#ifdef BRISK_GPT_DDP
#include "dist/ddp.h"
#include "dist/process_group.h"
#endif

using namespace brisk;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string out = "gpt_out";
  std::string corpus = "/usr/share/games/fortunes";
  int64_t steps = 300, batch = 16, accum = 1, block = 256;
  int64_t layers = 6, d = 384, heads = 6, vocab = 4096;
  double lr = 1e-3, min_lr_ratio = 0.1, weight_decay = 0.1, clip = 1.0;
  int64_t warmup = 30, eval_every = 50, eval_windows = 64, sample_tokens = 120;
  std::string bf16 = "auto";
  uint64_t seed = 1337;
  int threads = 0;
  bool quick = false, resume = false, ddp = false;
  double corpus_fraction = 1.0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--quick") {
      a.quick = true;
      a.steps = 30, a.batch = 8, a.block = 64, a.layers = 2, a.d = 64, a.heads = 2, a.vocab = 512;
      a.warmup = 5, a.eval_every = 10, a.eval_windows = 16, a.sample_tokens = 40, a.corpus_fraction = 0.1;
      continue;
    }
    if (k == "--resume") {
      a.resume = true;
      continue;
    }
    if (k == "--ddp") {
      a.ddp = true;
      continue;
    }
    if (i + 1 >= argc) throw Error("gpt: " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--out")
      a.out = v;
    else if (k == "--corpus")
      a.corpus = v;
    else if (k == "--steps")
      a.steps = std::stoll(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--accum")
      a.accum = std::stoll(v);
    else if (k == "--block")
      a.block = std::stoll(v);
    else if (k == "--layers")
      a.layers = std::stoll(v);
    else if (k == "--d")
      a.d = std::stoll(v);
    else if (k == "--heads")
      a.heads = std::stoll(v);
    else if (k == "--vocab")
      a.vocab = std::stoll(v);
    else if (k == "--lr")
      a.lr = std::stod(v);
    else if (k == "--warmup")
      a.warmup = std::stoll(v);
    else if (k == "--eval-every")
      a.eval_every = std::stoll(v);
    else if (k == "--eval-windows")
      a.eval_windows = std::stoll(v);
    else if (k == "--sample-tokens")
      a.sample_tokens = std::stoll(v);
    else if (k == "--bf16")
      a.bf16 = v;
    else if (k == "--seed")
      a.seed = std::stoull(v);
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else
      throw Error("gpt: unknown option " + k);
  }
  if (a.bf16 != "auto" && a.bf16 != "on" && a.bf16 != "off") throw Error("gpt: --bf16 is auto, on or off");
  if (a.batch <= 0 || a.accum <= 0 || a.steps <= 0 || a.block <= 0) throw Error("gpt: sizes must be > 0");
  return a;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The fortunes: every regular file of the folder without an extension (the .dat / .u8 files are
// strfile's indexes and links), in name order, split at lines that are a lone "%".
std::vector<std::string> read_fortunes(const std::string& dir, double fraction) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension().empty()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw Error("gpt: no fortune files in " + dir + " (apt install fortunes)");
  std::vector<std::string> out;
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    std::string line, cur;
    auto flush = [&] {
      while (!cur.empty() && (cur.back() == '\n' || cur.back() == ' ')) cur.pop_back();
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    };
    while (std::getline(f, line)) {
      if (line == "%")
        flush();
      else
        cur += line + "\n";
    }
    flush();
  }
  if (fraction < 1.0) out.resize(std::max<size_t>(40, size_t(double(out.size()) * fraction)));
  return out;
}

// Hugging Face's config.json for the model (what GPT2::from_pretrained and transformers read).
nlohmann::json hf_config(const nn::models::GPT2Config& c, int64_t eot) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.n_positions},
          {"n_embd", c.n_embd},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"layer_norm_epsilon", c.layer_norm_eps},
          {"initializer_range", 0.02},
          {"bos_token_id", eot},
          {"eos_token_id", eot},
          {"tie_word_embeddings", true}};
}

void write_text(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

// Mean loss over the first `windows` validation windows, batch by batch.
double evaluate(nn::Module& model, const text::TokenDataset& val, int64_t windows, int64_t batch, bool bf16) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t n = std::min(windows, val.size());
  double sum = 0;
  int64_t count = 0;
  for (int64_t at = 0; at < n; at += batch) {
    const int64_t b = std::min(batch, n - at);
    std::vector<Tensor> xs, ys;
    for (int64_t i = 0; i < b; ++i) {
      data::Example e = val.get(at + i);
      xs.push_back(e.input);
      ys.push_back(e.target);
    }
    Tensor x = stack(xs, 0), y = stack(ys, 0);
    AutocastGuard ac(DeviceType::CPU, DType::BF16, bf16);
    Tensor logits = model(x);
    Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(DType::F32), y.reshape({-1}));
    sum += loss.item<double>() * double(b);
    count += b;
  }
  model.train();
  return sum / double(count);
}

// The loss plot: train loss per step (thin) and validation loss at each evaluation (dots).
std::string loss_svg(const std::vector<std::pair<int64_t, double>>& train,
                     const std::vector<std::pair<int64_t, double>>& val, const std::string& title) {
  const double W = 640, H = 360, L = 50, R = 20, T = 30, B = 40;
  double lo = 1e300, hi = -1e300;
  int64_t last = 1;
  for (const auto* s : {&train, &val})
    for (const auto& [x, y] : *s) lo = std::min(lo, y), hi = std::max(hi, y), last = std::max(last, x);
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  auto px = [&](double x) { return L + (W - L - R) * x / double(last); };
  auto py = [&](double y) { return T + (H - T - B) * (hi - y) / (hi - lo); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n<text x='" << L << "' y='18'>" << title << "</text>\n"
    << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='black'/>\n"
    << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='black'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = lo + (hi - lo) * i / 4;
    s << "<text x='4' y='" << py(y) + 4 << "'>" << std::round(y * 100) / 100 << "</text>\n";
  }
  s << "<text x='" << W - R - 60 << "' y='" << H - 10 << "'>step " << last
    << "</text>\n<polyline fill='none' stroke='#1f77b4' points='";
  for (const auto& [x, y] : train) s << px(double(x)) << "," << py(y) << " ";
  s << "'/>\n";
  for (const auto& [x, y] : val)
    s << "<circle cx='" << px(double(x)) << "' cy='" << py(y) << "' r='3' fill='#d62728'/>\n";
  s << "<text x='" << W - R - 200 << "' y='" << T + 12 << "' fill='#1f77b4'>train</text><text x='" << W - R - 150
    << "' y='" << T + 12 << "' fill='#d62728'>validation</text>\n</svg>\n";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) try {
  Args a = parse(argc, argv);
  int rank = 0, world = 1;
#ifdef BRISK_GPT_DDP
  dist::ProcessGroupPtr pg;
  if (a.ddp) {
    pg = dist::init_process_group();
    rank = pg->rank();
    world = pg->size();
    omp_set_num_threads(1);  // one core per rank
  }
#else
  if (a.ddp) throw Error("gpt: --ddp needs brisk built with dist/ (MPI)");
#endif
  if (a.threads > 0) set_num_threads(a.threads);
  if (a.batch % world != 0) throw Error("gpt: --batch must be a multiple of the number of ranks");
  const int64_t micro = a.batch / world;
  const bool bf16 = a.bf16 == "on" || (a.bf16 == "auto" && kernels::cpu::bf16_gemm_native());
  fs::create_directories(a.out);
  const std::string out = a.out;
  const bool lead = rank == 0;

  // ---- data: tokenizer and token files (made once; a resumed run reuses them)
  const std::string tok_dir = out + "/tokenizer";
  if (!a.resume && lead) {
    const double t0 = now_s();
    std::vector<std::string> fortunes = read_fortunes(a.corpus, a.corpus_fraction);
    std::vector<std::string> train_text, val_text;
    for (size_t i = 0; i < fortunes.size(); ++i) (i % 20 == 19 ? val_text : train_text).push_back(fortunes[i]);
    text::ByteLevelBPE tok = text::train_bpe_from_texts(
        train_text, {.vocab_size = a.vocab, .min_frequency = 2, .special_tokens = {"<|endoftext|>"}});
    fs::create_directories(tok_dir);
    tok.save(tok_dir + "/vocab.json", tok_dir + "/merges.txt");
    tok.save_tokenizer_json(tok_dir + "/tokenizer.json");
    const int32_t eot = tok.token_to_id("<|endoftext|>");
    size_t bytes = 0;
    for (const auto* split : {&train_text, &val_text}) {
      std::vector<int64_t> ids;
      for (const std::string& f : *split) {
        bytes += f.size();
        for (int32_t id : tok.encode(f)) ids.push_back(id);
        ids.push_back(eot);
      }
      text::write_token_file(out + (split == &train_text ? "/train.bin" : "/val.bin"), ids);
    }
    std::fflush(stderr);
    std::printf("gpt: %zu fortunes (%.1f MB) from %s; BPE vocab %lld trained and applied in %.1f s\n", fortunes.size(),
                double(bytes) / 1e6, a.corpus.c_str(), (long long)tok.vocab_size(), now_s() - t0);
    std::fflush(stdout);
  }
#ifdef BRISK_GPT_DDP
  if (pg) pg->barrier()->wait();
#endif
  text::ByteLevelBPE tok = text::ByteLevelBPE::from_tokenizer_json(tok_dir + "/tokenizer.json");
  const int64_t eot = tok.token_to_id("<|endoftext|>");
  auto train_file = text::TokenFile::open(out + "/train.bin"), val_file = text::TokenFile::open(out + "/val.bin");
  auto train_ds = std::make_shared<text::TokenDataset>(train_file, a.block);
  text::TokenDataset val_ds(val_file, a.block);

  // ---- model, with its initial weights written for the twin
  nn::models::GPT2Config cfg{.vocab_size = tok.vocab_size(),
                             .n_positions = a.block,
                             .n_embd = a.d,
                             .n_layer = a.layers,
                             .n_head = a.heads,
                             .dropout = 0.0};
  manual_seed(a.seed);
  auto model = std::make_shared<nn::models::GPT2>(cfg);
  if (!a.resume && lead) {
    save_safetensors(out + "/init.safetensors", model->state_dict());
    write_text(out + "/config.json", hf_config(cfg, eot).dump(1) + "\n");
  }
  std::shared_ptr<nn::Module> net = model;
#ifdef BRISK_GPT_DDP
  if (pg) net = std::make_shared<dist::DistributedDataParallel>(model, pg);
#endif

  // ---- the order of the windows: the loader's sampler, written out for the twin
  const int64_t per_epoch = train_ds->size() / micro;  // drop_last
  if (per_epoch == 0) throw Error("gpt: fewer training windows than one micro-batch");
  data::SamplerPtr sampler = std::make_shared<data::RandomSampler>(train_ds->size(), a.seed);
#ifdef BRISK_GPT_DDP
  if (pg) sampler = std::make_shared<data::DistributedSampler>(train_ds->size(), world, rank, true, a.seed, true);
#endif
  data::DataLoader loader(
      train_ds, {.batch_size = micro, .sampler = sampler, .num_workers = 1, .drop_last = true, .seed = a.seed});
  if (!a.resume && lead && world == 1) {
    std::ostringstream order;
    int64_t written = 0;
    for (int64_t epoch = 0; written < a.steps * a.accum; ++epoch) {
      const std::vector<int64_t> idx = sampler->indices(epoch);
      for (int64_t b = 0; b < per_epoch && written < a.steps * a.accum; ++b, ++written) {
        for (int64_t i = 0; i < micro; ++i) order << (i ? " " : "") << idx[size_t(b * micro + i)];
        order << "\n";
      }
    }
    write_text(out + "/order.txt", order.str());
  }

  // ---- optimizer: AdamW, decay on matrices only; warm-up then cosine to min_lr_ratio * lr
  NamedTensors decay, no_decay;
  for (auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).emplace_back(name, p);
  optim::AdamW opt(decay, {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = a.weight_decay});
  opt.add_param_group(no_decay, {.weight_decay = 0.0});
  const int64_t warm = std::max<int64_t>(1, std::min(a.warmup, a.steps - 1));
  auto warmup = std::make_shared<optim::LinearLR>(opt, 1.0 / double(warm), 1.0, warm);
  auto cosine =
      std::make_shared<optim::CosineAnnealingLR>(opt, std::max<int64_t>(1, a.steps - warm), a.lr * a.min_lr_ratio);
  optim::SequentialLR sched(opt, {warmup, cosine}, {warm});

  const std::string ckpt = out + "/checkpoint" + (world > 1 ? ".rank" + std::to_string(rank) : "") + ".safetensors";
  training::TrainingState st{.model = model.get(), .optimizer = &opt, .scheduler = &sched, .loader = &loader};
  if (a.resume) training::load_checkpoint(ckpt, st);
  std::vector<std::pair<int64_t, double>> train_curve, val_curve;
  std::string log;
  if (a.resume && fs::exists(out + "/log.jsonl")) {
    std::ifstream f(out + "/log.jsonl");
    for (std::string line; std::getline(f, line);) {
      auto j = nlohmann::json::parse(line);
      if (j["step"].get<int64_t>() > st.step) break;
      log += line + "\n";
      val_curve.emplace_back(j["step"].get<int64_t>(), j["val_loss"].get<double>());
    }
  }
  if (lead) {
    write_text(out + "/run.json", nlohmann::json{{"steps", a.steps},
                                                 {"batch", a.batch},
                                                 {"accum", a.accum},
                                                 {"block", a.block},
                                                 {"lr", a.lr},
                                                 {"min_lr_ratio", a.min_lr_ratio},
                                                 {"weight_decay", a.weight_decay},
                                                 {"clip", a.clip},
                                                 {"warmup", warm},
                                                 {"eval_every", a.eval_every},
                                                 {"eval_windows", a.eval_windows},
                                                 {"bf16", bf16},
                                                 {"seed", a.seed},
                                                 {"world", world}}
                                          .dump(1) +
                                      "\n");
    std::printf(
        "gpt: GPT-2 %lld layers, d %lld, %lld heads, T %lld, vocab %lld (%.2fM parameters); %lld train / %lld val "
        "tokens; batch %lld x %lld accum%s, %s, %d threads x %d ranks%s\n",
        (long long)a.layers, (long long)a.d, (long long)a.heads, (long long)a.block, (long long)cfg.vocab_size,
        double(model->num_parameters()) / 1e6, (long long)train_file->size(), (long long)val_file->size(),
        (long long)micro * world, (long long)a.accum, "", bf16 ? "BF16 autocast" : "F32", get_num_threads(), world,
        a.resume ? (", resumed at step " + std::to_string(st.step)).c_str() : "");
    std::fflush(stdout);
  }
  std::unique_ptr<training::SummaryWriter> tb;
  if (lead) tb = std::make_unique<training::SummaryWriter>(out + "/tensorboard");

  // ---- training
  net->train();
  const bool tty = isatty(fileno(stderr)) != 0;
  double t_start = now_s(), last_draw = -1e9, tokens_done = 0, last_loss = 0, eval_time = 0;  // tokens/s: training only
  const int64_t tokens_per_step = a.batch * a.accum * a.block;
  while (st.step < a.steps) {
    double step_loss = 0;
    opt.zero_grad();
    for (int64_t m = 0; m < a.accum; ++m) {
      std::optional<data::Batch> b = loader.next();
      if (!b) b = loader.next();  // the next epoch
      auto micro_step = [&] {
        AutocastGuard ac(DeviceType::CPU, DType::BF16, bf16);
        Tensor logits = (*net)(b->input);
        Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(DType::F32),
                                                    b->target.reshape({-1}));
        return loss;
      };
      Tensor loss;
#ifdef BRISK_GPT_DDP
      if (pg && m + 1 < a.accum) {
        auto guard = std::static_pointer_cast<dist::DistributedDataParallel>(net)->no_sync();
        loss = micro_step();
        (loss / double(a.accum)).backward();
      } else
#endif
      {
        loss = micro_step();
        (loss / double(a.accum)).backward();
      }
      step_loss += loss.item<double>() / double(a.accum);
    }
#ifdef BRISK_GPT_DDP
    if (pg) {  // the logged loss is the mean over ranks (the gradients already are)
      Tensor l = from_vector({step_loss}, {1}, DType::F64);
      pg->allreduce(l, dist::ReduceOp::Avg)->wait();
      step_loss = l.item<double>();
    }
#endif
    optim::clip_grad_norm_(model->parameters(), a.clip);
    opt.step();
    sched.step();
    ++st.step;
    tokens_done += double(tokens_per_step);
    last_loss = step_loss;
    if (lead) {
      train_curve.emplace_back(st.step, step_loss);
      tb->add_scalar("train/loss", step_loss, st.step);
      tb->add_scalar("train/lr", opt.lr(0), st.step);
      const double t = now_s();
      if (t - last_draw >= (tty ? 0.2 : 10.0) || st.step == a.steps) {
        last_draw = t;
        const double tps = tokens_done / (t - t_start - eval_time);
        const int width = 30, filled = int(width * st.step / a.steps);
        std::fprintf(stderr, "%s[%s%s] step %lld/%lld  loss %.4f  %.0f tokens/s  lr %.2e%s", tty ? "\r" : "",
                     std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
                     (long long)st.step, (long long)a.steps, step_loss, tps, opt.lr(0), tty ? "" : "\n");
        std::fflush(stderr);
      }
    }
    if (st.step % a.eval_every == 0 || st.step == a.steps) {
      const double e0 = now_s();
      if (lead) {
        const double tps = tokens_done / (e0 - t_start - eval_time);
        const double vl = evaluate(*model, val_ds, a.eval_windows, micro, bf16);
        val_curve.emplace_back(st.step, vl);
        const nlohmann::json rec = {{"step", st.step}, {"train_loss", last_loss},
                                    {"val_loss", vl},  {"val_perplexity", std::exp(vl)},
                                    {"lr", opt.lr(0)}, {"tokens_per_s", tps}};
        log += rec.dump() + "\n";
        write_text(out + "/log.jsonl", log);
        write_text(out + "/loss.svg", loss_svg(train_curve, val_curve, "GPT on fortunes: loss"));
        tb->add_scalar("val/loss", vl, st.step);
        tb->add_scalar("val/perplexity", std::exp(vl), st.step);
        if (tty) std::fputc('\n', stderr);
        std::printf("step %lld: train loss %.4f, val loss %.4f, perplexity %.2f, %.0f tokens/s\n", (long long)st.step,
                    last_loss, vl, std::exp(vl), tps);
        std::fflush(stdout);
      }
      training::save_checkpoint(ckpt, st);
      eval_time += now_s() - e0;
    }
  }

  // ---- the trained model in Hugging Face's layout, and a sample
  if (lead) {
    fs::create_directories(out + "/model");
    save_safetensors(out + "/model/model.safetensors", model->state_dict());
    write_text(out + "/model/config.json", hf_config(cfg, eot).dump(1) + "\n");
    model->eval();
    // Three fortunes, each from the end-of-text token to the next one.
    Tensor prompt = full({3, 1}, double(eot), DType::I64);
    Tensor ids = model->generate(prompt, {.max_new_tokens = std::min(a.sample_tokens, a.block - 1),
                                          .do_sample = true,
                                          .temperature = 0.8,
                                          .top_k = 40,
                                          .top_p = 0.95,
                                          .pad_token_id = eot,
                                          .stop_tokens = {eot},
                                          .seed = a.seed});
    std::string sample;
    for (int64_t r = 0; r < ids.size(0); ++r) {
      std::vector<int32_t> v;
      for (int64_t id : ids.narrow(0, r, 1).to_vector<int64_t>()) v.push_back(int32_t(id));
      sample += (r ? "%\n" : "") + tok.decode(v, /*skip_special_tokens=*/true) + "\n";
    }
    write_text(out + "/sample.txt", sample);
    std::printf("samples:\n%s", sample.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt: %s\n", e.what());
  return 1;
}
