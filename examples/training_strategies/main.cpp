// examples/training_strategies/main.cpp: one small model (MLP 784-256-128-10 by default) trained
// on a Fashion-MNIST subset with each optimizer and learning-rate schedule of brisk::optim
// (strategies.h), from the same initial weights and in the same data order, for a few epochs.
// Prints a table (strategy | optimizer | schedule | train loss | val loss | test acc | time) and
// each non-constant learning-rate curve as a character plot; writes <out>/lr_curves.svg (all
// curves), <out>/results.csv and <out>/results.json (the table, with every curve per step).
// It also checks two equivalences: fused and unfused Adam end with bit-identical weights, and
// 4 accumulated micro-batches of B/4 give the update of one batch of B.
// `training_strategies --help` lists the options. Not here: the optimizers and schedules
// themselves (optim/), or a long training run (examples/fashion_mnist).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "examples/fashion_mnist/evaluate.h"
#include "examples/fashion_mnist/progress.h"
#include "examples/fashion_mnist/report.h"
#include "examples/training_strategies/lr_plot.h"
#include "examples/training_strategies/strategies.h"
#include "nn/models/simple.h"
#include "optim/optim.h"

using namespace brisk;
using namespace training_strategies;
using fashion_mnist::EvalResult;
using fashion_mnist::evaluate;

namespace {

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST pixel statistics

struct Args {
  std::string model = "mlp";
  int64_t epochs = 5;
  int64_t batch_size = 128;
  int64_t train_size = 10000;
  int64_t val_size = 2000;
  int64_t test_size = 10000;
  uint64_t seed = 0;
  std::vector<std::string> only;  // empty: every strategy
  bool list = false;
  int threads = 0;  // 0: all cores
  int workers = 1;
  int plot_width = 60, plot_height = 10;
  std::string data = data::FashionMNIST::kDefaultRoot;
  std::string out = "runs/training_strategies";
};

void usage() {
  std::printf(
      "usage: training_strategies [options]   (--key value or --key=value)\n"
      "  --model mlp|cnn          MLP 784-256-128-10 (default) or the small CNN\n"
      "  --epochs N               epochs per strategy (default 5)\n"
      "  --batch-size N           batch size (default 128; gradient accumulation uses 4 slices of it)\n"
      "  --train-size N           training samples: the first N of the training set (default 10000)\n"
      "  --val-size N             validation samples, the N after them (plateau, early stopping; default 2000)\n"
      "  --test-size N            test samples: the first N of the test set (default 10000)\n"
      "  --seed N                 initial weights and data order, the same for every strategy (default 0)\n"
      "  --only NAME[,NAME...]    run these strategies only (--list shows the names)\n"
      "  --list                   list the strategies and exit\n"
      "  --threads N              OpenMP compute threads (default: all cores)\n"
      "  --workers N              data-loader worker threads (default 1)\n"
      "  --plot-width N, --plot-height N   size of the character plots (default 60 x 10)\n"
      "  --data DIR               Fashion-MNIST IDX files (default %s)\n"
      "  --out DIR                outputs: lr_curves.svg, results.csv, results.json (default %s)\n",
      data::FashionMNIST::kDefaultRoot, "runs/training_strategies");
}

int64_t parse_int(const std::string& key, const std::string& text, int64_t min) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || v < min) {
    throw std::runtime_error(key + ": expected an integer >= " + std::to_string(min) + ", got '" + text + "'");
  }
  return v;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    std::string inline_value;
    bool has_inline = false;
    if (k.rfind("--", 0) == 0 && k.find('=') != std::string::npos) {
      inline_value = k.substr(k.find('=') + 1);
      k = k.substr(0, k.find('='));
      has_inline = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    auto no_value = [&]() {
      if (has_inline) throw std::runtime_error(k + " takes no value");
    };
    if (k == "--help" || k == "-h") {
      usage();
      std::exit(0);
    } else if (k == "--model") {
      a.model = value();
    } else if (k == "--epochs") {
      a.epochs = parse_int(k, value(), 1);
    } else if (k == "--batch-size") {
      a.batch_size = parse_int(k, value(), 1);
    } else if (k == "--train-size") {
      a.train_size = parse_int(k, value(), 1);
    } else if (k == "--val-size") {
      a.val_size = parse_int(k, value(), 1);
    } else if (k == "--test-size") {
      a.test_size = parse_int(k, value(), 1);
    } else if (k == "--seed") {
      a.seed = uint64_t(parse_int(k, value(), 0));
    } else if (k == "--only") {
      a.only = split_commas(value());
      if (a.only.empty()) throw std::runtime_error("--only: expected strategy names (see --list)");
    } else if (k == "--list") {
      no_value();
      a.list = true;
    } else if (k == "--threads") {
      a.threads = int(parse_int(k, value(), 0));
    } else if (k == "--workers") {
      a.workers = int(parse_int(k, value(), 0));
    } else if (k == "--plot-width") {
      a.plot_width = int(parse_int(k, value(), 10));
    } else if (k == "--plot-height") {
      a.plot_height = int(parse_int(k, value(), 3));
    } else if (k == "--data") {
      a.data = value();
    } else if (k == "--out") {
      a.out = value();
      if (a.out.empty()) throw std::runtime_error("--out: expected a directory");
    } else {
      throw std::runtime_error("unknown option " + k + " (see --help)");
    }
  }
  if (a.model != "mlp" && a.model != "cnn") {
    throw std::runtime_error("--model: unknown value '" + a.model + "' (mlp or cnn)");
  }
  return a;
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "cnn") return std::make_shared<nn::models::SmallCNN>();
  return std::make_shared<nn::models::MLP>(std::vector<int64_t>{784, 256, 128, 10});
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string num(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The data every strategy sees: the same subsets, the same loaders (set_epoch(e) replays the
// same order for each strategy, since the order depends only on (seed, epoch)).
struct Data {
  std::unique_ptr<data::DataLoader> train, val, test;
};

Data load_data(const Args& a) {
  auto full_train = std::make_shared<data::FashionMNIST>(a.data, /*train=*/true);
  auto full_test = std::make_shared<data::FashionMNIST>(a.data, /*train=*/false);
  if (a.train_size + a.val_size > full_train->size()) {
    throw std::runtime_error("--train-size " + std::to_string(a.train_size) + " + --val-size " +
                             std::to_string(a.val_size) + " exceed the " + std::to_string(full_train->size()) +
                             " training samples");
  }
  auto range = [](const data::DatasetPtr& base, int64_t first, int64_t count) {
    std::vector<int64_t> idx(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) idx[size_t(i)] = first + i;
    return std::make_shared<data::Subset>(base, std::move(idx));
  };
  const int64_t test_n = std::min(a.test_size, full_test->size());

  data::LoaderOptions train_opts;
  train_opts.batch_size = a.batch_size;
  train_opts.shuffle = true;
  train_opts.seed = a.seed;
  train_opts.num_workers = a.workers;
  train_opts.persistent_workers = true;
  train_opts.transform = data::Compose({data::to_tensor(), data::normalize({kMean}, {kStd})});
  data::LoaderOptions eval_opts = train_opts;
  eval_opts.shuffle = false;
  eval_opts.batch_size = 500;

  Data d;
  d.train = std::make_unique<data::DataLoader>(range(full_train, 0, a.train_size), train_opts);
  d.val = std::make_unique<data::DataLoader>(range(full_train, a.train_size, a.val_size), eval_opts);
  d.test = std::make_unique<data::DataLoader>(range(full_test, 0, test_n), eval_opts);
  return d;
}

struct RunResult {
  double train_loss = 0;  // mean cross-entropy over the last epoch trained (penalties excluded)
  double val_loss = 0, val_acc = 0, test_acc = 0;
  double seconds = 0;  // training, including the per-epoch validation
  int64_t epochs_run = 0;
  std::vector<double> lr;        // per optimizer step, the rate that step used
  std::vector<double> momentum;  // per step: SGD/RMSprop momentum or Adam's beta1 (empty if none)
  std::vector<Tensor> weights;   // final parameters (for the same_as comparisons)
  std::string notes;
};

void add_note(std::string& notes, const std::string& note) {
  if (!notes.empty()) notes += "; ";
  notes += note;
}

// The largest |a - b| over matching tensors, and the largest |a|.
double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double out = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    BRISK_CHECK(a[i].numel() == b[i].numel(), "training_strategies: comparing tensors of different shapes ",
                a[i].sizes(), " vs ", b[i].sizes());
    const std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (size_t j = 0; j < x.size(); ++j) out = std::max(out, std::abs(x[j] - y[j]));
  }
  return out;
}

double max_abs(const std::vector<Tensor>& a) {
  double out = 0;
  for (const Tensor& t : a)
    for (double v : t.to_vector<double>()) out = std::max(out, std::abs(v));
  return out;
}

// Gradient accumulation: backward of each of `parts` slices of the batch, each slice's summed
// loss divided by the whole batch size B (not by its own size), so the gradients add up to the
// full batch's mean gradient even when B % parts != 0. Returns the batch's mean loss (detached).
Tensor accumulate_grads(nn::Module& model, const data::Batch& batch, int64_t micro_batches) {
  const int64_t B = batch.target.size(0), parts = std::min(micro_batches, B);
  Tensor total = zeros({}, DType::F32);
  for (int64_t k = 0; k < parts; ++k) {
    const int64_t begin = k * B / parts, len = (k + 1) * B / parts - begin;
    Tensor loss =
        cross_entropy(model(batch.input.narrow(0, begin, len)), batch.target.narrow(0, begin, len), Reduction::Sum) /
        double(B);
    loss.backward();
    NoGradGuard no_grad;
    total.add_(loss.detach());
  }
  return total;
}

// Computes one batch's gradient both ways, in eval mode (dropout would draw other masks for the
// slices than for the whole batch), and says how far apart they are; leaves no gradient behind
// and draws nothing from the random stream, so the run itself is unchanged.
std::string accumulation_check(nn::Module& model, optim::Optimizer& opt, const std::vector<Tensor>& params,
                               const data::Batch& batch, int64_t micro_batches) {
  model.eval();
  opt.zero_grad();
  cross_entropy(model(batch.input), batch.target).backward();
  std::vector<Tensor> full, accumulated;
  for (const Tensor& p : params) full.push_back(p.grad());
  opt.zero_grad();
  accumulate_grads(model, batch, micro_batches);
  for (const Tensor& p : params) accumulated.push_back(p.grad());
  opt.zero_grad();
  model.train();
  return "1st-step grad vs full batch: " + num("%.1e", max_abs_diff(accumulated, full)) +
         " (|g| <= " + num("%.2g", max_abs(full)) + ")";
}

RunResult run_strategy(const Strategy& s, const Args& a, Data& d, const std::string& label) {
  // Same seed, same construction order: every strategy starts from the same weights.
  manual_seed(a.seed);
  std::shared_ptr<nn::Module> model = make_model(a.model);
  std::unique_ptr<optim::Optimizer> opt = s.make_optimizer(model->named_parameters());
  Schedule sched;
  if (s.make_schedule) sched = s.make_schedule(*opt);
  std::unique_ptr<optim::EarlyStopping> stopper;
  if (s.early_stop_patience > 0) {
    stopper = std::make_unique<optim::EarlyStopping>(
        optim::EarlyStoppingOptions{.patience = s.early_stop_patience, .min_delta = s.early_stop_min_delta});
  }
  const std::string momentum_key = opt->has_option("beta1") ? "beta1" : (opt->has_option("momentum") ? "momentum" : "");
  const std::vector<Tensor> params = model->parameters();

  RunResult r;
  const int64_t steps_per_epoch = d.train->num_batches();
  fashion_mnist::ProgressBar bar(label, a.epochs * steps_per_epoch);
  const double t0 = now_s();
  int64_t done = 0;
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    d.train->set_epoch(epoch);
    model->train();
    Tensor loss_sum = zeros({}, DType::F32);
    int64_t samples = 0;
    while (auto batch = d.train->next()) {
      r.lr.push_back(opt->lr(0));
      if (!momentum_key.empty()) r.momentum.push_back(opt->get(0, momentum_key));
      const int64_t B = batch->target.size(0);
      opt->zero_grad();
      if (s.micro_batches <= 1) {
        Tensor loss = cross_entropy((*model)(batch->input), batch->target);
        Tensor total = s.l1 > 0 ? loss + optim::l1_penalty(params) * s.l1 : loss;
        total.backward();
        NoGradGuard no_grad;
        loss_sum.add_(loss.detach(), double(B));
      } else {
        if (done == 0) add_note(r.notes, accumulation_check(*model, *opt, params, *batch, s.micro_batches));
        Tensor loss = accumulate_grads(*model, *batch, s.micro_batches);
        NoGradGuard no_grad;
        loss_sum.add_(loss, double(B));
      }
      opt->step();
      if (sched.per_step) sched.per_step->step();
      samples += B;
      ++done;
      if (bar.due(done)) bar.update(done, samples, loss_sum.item<double>() / double(samples));
    }
    r.train_loss = loss_sum.item<double>() / double(samples);
    r.epochs_run = epoch + 1;
    const EvalResult val = evaluate(*model, *d.val);
    r.val_loss = val.loss;
    r.val_acc = val.acc;
    if (sched.plateau) {
      const double before = opt->lr(0);
      sched.plateau->step(val.loss);
      if (opt->lr(0) < before) {
        add_note(r.notes, "lr " + num("%.3g", opt->lr(0)) + " after epoch " + std::to_string(epoch + 1));
      }
    }
    if (stopper && stopper->step(val.loss, model.get())) {
      add_note(r.notes, "stopped after epoch " + std::to_string(epoch + 1));
      break;
    }
  }
  if (stopper && stopper->has_best_state()) {
    stopper->restore_best(*model);
    const EvalResult best = evaluate(*model, *d.val);
    r.val_loss = best.loss;
    r.val_acc = best.acc;
    add_note(r.notes, "epoch " + std::to_string(stopper->best_epoch() + 1) + " weights restored");
  }
  r.seconds = now_s() - t0;
  if (isatty(fileno(stderr))) std::fputs("\r\x1b[K", stderr);
  r.test_acc = evaluate(*model, *d.test).acc;
  if (!r.momentum.empty()) {
    const auto [lo, hi] = std::minmax_element(r.momentum.begin(), r.momentum.end());
    if (*hi > *lo) add_note(r.notes, momentum_key + " " + num("%.2f", *lo) + ".." + num("%.2f", *hi));
  }
  if (!std::isfinite(r.train_loss)) add_note(r.notes, "diverged");
  for (const Tensor& p : params) r.weights.push_back(p.detach().contiguous().clone());
  return r;
}

// "bit-identical" or the largest |difference| between two runs' final weights.
std::string compare_weights(const std::vector<Tensor>& a, const std::vector<Tensor>& b, bool* identical) {
  *identical = a.size() == b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    BRISK_CHECK(a[i].numel() == b[i].numel() && a[i].dtype() == b[i].dtype(),
                "training_strategies: final weights of different shapes or dtypes ", a[i].sizes(), " ", a[i].dtype(),
                " vs ", b[i].sizes(), " ", b[i].dtype());
    if (std::memcmp(a[i].data_ptr(), b[i].data_ptr(), size_t(a[i].numel()) * a[i].element_size()) != 0) {
      *identical = false;
    }
  }
  return *identical ? "bit-identical" : "max |dw| " + num("%.2g", max_abs_diff(a, b));
}

std::string table(const std::vector<Strategy>& rows, const std::vector<RunResult>& results) {
  std::vector<std::vector<std::string>> cells = {
      {"strategy", "optimizer", "schedule", "train loss", "val loss", "test acc", "time s", "notes"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const RunResult& r = results[i];
    cells.push_back({rows[i].name, rows[i].optimizer, rows[i].schedule, num("%.4f", r.train_loss),
                     num("%.4f", r.val_loss), num("%.2f%%", 100 * r.test_acc), num("%.1f", r.seconds), r.notes});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool numeric = c >= 3 && c <= 6;
      const std::string pad(width[c] - row[c].size(), ' ');
      out += numeric ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      if (c + 1 < row.size()) out += " | ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(cells[0]);
  for (size_t c = 0; c < width.size(); ++c) out += std::string(width[c], '-') + (c + 1 < width.size() ? "-+-" : "\n");
  for (size_t i = 1; i < cells.size(); ++i) out += line(cells[i]);
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double v, const char* format = "%.6g") { return std::isfinite(v) ? num(format, v) : "null"; }

std::string results_csv(const std::vector<Strategy>& rows, const std::vector<RunResult>& results) {
  std::string out = "strategy,optimizer,schedule,train_loss,val_loss,val_acc,test_acc,seconds,epochs_run,notes\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RunResult& r = results[i];
    out += csv_field(rows[i].name) + "," + csv_field(rows[i].optimizer) + "," + csv_field(rows[i].schedule) + "," +
           num("%.6f", r.train_loss) + "," + num("%.6f", r.val_loss) + "," + num("%.4f", r.val_acc) + "," +
           num("%.4f", r.test_acc) + "," + num("%.3f", r.seconds) + "," + std::to_string(r.epochs_run) + "," +
           csv_field(r.notes) + "\n";
  }
  return out;
}

std::string results_json(const Args& a, int64_t steps_per_epoch, const std::vector<Strategy>& rows,
                         const std::vector<RunResult>& results) {
  auto series = [](const std::vector<double>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_number(v[i]);
    return out + "]";
  };
  std::string out =
      "{\n  \"config\": {\"model\": " + json_string(a.model) + ", \"epochs\": " + std::to_string(a.epochs) +
      ", \"batch_size\": " + std::to_string(a.batch_size) + ", \"train_size\": " + std::to_string(a.train_size) +
      ", \"val_size\": " + std::to_string(a.val_size) + ", \"test_size\": " + std::to_string(a.test_size) +
      ", \"seed\": " + std::to_string(a.seed) + ", \"steps_per_epoch\": " + std::to_string(steps_per_epoch) +
      ", \"threads\": " + std::to_string(omp_get_max_threads()) + "},\n  \"strategies\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RunResult& r = results[i];
    out += "    {\"name\": " + json_string(rows[i].name) + ", \"optimizer\": " + json_string(rows[i].optimizer) +
           ", \"schedule\": " + json_string(rows[i].schedule) + ", \"train_loss\": " + json_number(r.train_loss) +
           ", \"val_loss\": " + json_number(r.val_loss) + ", \"val_acc\": " + json_number(r.val_acc) +
           ", \"test_acc\": " + json_number(r.test_acc) + ", \"seconds\": " + json_number(r.seconds, "%.3f") +
           ", \"epochs_run\": " + std::to_string(r.epochs_run) + ", \"notes\": " + json_string(r.notes) +
           ",\n     \"lr\": " + series(r.lr) + ",\n     \"momentum\": " + series(r.momentum) + "}" +
           (i + 1 < rows.size() ? ",\n" : "\n");
  }
  return out + "  ]\n}\n";
}

int run(const Args& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const int64_t steps_per_epoch = (a.train_size + a.batch_size - 1) / a.batch_size;
  std::vector<Strategy> all = make_strategies({a.epochs, steps_per_epoch});
  if (a.list) {
    for (const Strategy& s : all) {
      std::printf("%-20s %-36s %s\n", s.name.c_str(), s.optimizer.c_str(), s.schedule.c_str());
    }
    return 0;
  }
  std::vector<Strategy> rows;
  if (a.only.empty()) {
    rows = all;
  } else {
    std::set<std::string> wanted(a.only.begin(), a.only.end());
    std::string known;
    for (const Strategy& s : all) known += (known.empty() ? "" : ", ") + s.name;
    for (const std::string& name : wanted) {
      bool found = false;
      for (const Strategy& s : all) found = found || s.name == name;
      if (!found) throw std::runtime_error("--only: no strategy named '" + name + "' (known: " + known + ")");
    }
    for (const Strategy& s : all)
      if (wanted.count(s.name)) rows.push_back(s);
  }

  Data d = load_data(a);
  BRISK_CHECK(d.train->num_batches() == steps_per_epoch, "training_strategies: expected ", steps_per_epoch,
              " batches per epoch, the loader has ", d.train->num_batches());
  std::filesystem::create_directories(a.out);
  {
    manual_seed(a.seed);
    const int64_t params = make_model(a.model)->num_parameters();
    std::fprintf(stderr,
                 "training_strategies: %s (%lld parameters), %zu strategies x %lld epochs of %lld steps (batch %lld), "
                 "%lld train / %lld val / %lld test samples, %d compute threads, %d workers\n",
                 a.model.c_str(), (long long)params, rows.size(), (long long)a.epochs, (long long)steps_per_epoch,
                 (long long)a.batch_size, (long long)a.train_size, (long long)a.val_size,
                 (long long)d.test->dataset_size(), omp_get_max_threads(), a.workers);
  }

  const double start = now_s();
  std::vector<RunResult> results;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(rows.size()) + "] " + rows[i].name;
    results.push_back(run_strategy(rows[i], a, d, label));
    const RunResult& r = results.back();
    std::fprintf(stderr, "%s: train loss %.4f, val loss %.4f, test accuracy %.2f%%, %.1f s\n", label.c_str(),
                 r.train_loss, r.val_loss, 100 * r.test_acc, r.seconds);
  }

  // Rows that must match another row: compare the final weights.
  std::vector<std::string> equivalences;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].same_as.empty()) continue;
    for (size_t j = 0; j < rows.size(); ++j) {
      if (rows[j].name != rows[i].same_as) continue;
      bool identical = false;
      const std::string verdict = compare_weights(results[i].weights, results[j].weights, &identical);
      add_note(results[i].notes, verdict + " vs " + rows[j].name);
      equivalences.push_back(rows[i].name + " vs " + rows[j].name + ": final weights " + verdict +
                             (identical ? ""
                                        : " (the same updates up to float rounding, compounded over the steps" +
                                              std::string(a.model == "cnn" ? "; and other dropout masks)" : ")")));
    }
  }

  std::printf("\nFashion-MNIST %s, %lld epochs x %lld steps, batch %lld, %lld train / %lld test samples, seed %llu\n\n",
              a.model.c_str(), (long long)a.epochs, (long long)steps_per_epoch, (long long)a.batch_size,
              (long long)a.train_size, (long long)d.test->dataset_size(), (unsigned long long)a.seed);
  std::printf("%s", table(rows, results).c_str());
  std::printf(
      "train loss: mean cross-entropy over the last epoch trained (penalties excluded); val loss: on the %lld "
      "validation samples at the end (early stopping: of the restored weights); time: training + validation\n",
      (long long)a.val_size);
  for (const std::string& e : equivalences) std::printf("%s\n", e.c_str());

  // A character plot per distinct non-constant curve; constant ones are listed in one line.
  std::string constant;
  std::vector<size_t> plotted;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<double>& lr = results[i].lr;
    if (lr.empty()) continue;
    if (std::all_of(lr.begin(), lr.end(), [&](double v) { return v == lr.front(); })) {
      constant += (constant.empty() ? "" : ", ") + rows[i].name + " " + num("%g", lr.front());
      continue;
    }
    std::string same;
    for (size_t j : plotted)
      if (results[j].lr == lr) same = rows[j].name;
    if (!same.empty()) {
      std::printf("\n%s: same learning-rate curve as %s\n", rows[i].name.c_str(), same.c_str());
      continue;
    }
    plotted.push_back(i);
    std::printf("\n%s: %s (learning rate per step)\n%s", rows[i].name.c_str(), rows[i].schedule.c_str(),
                ascii_plot(lr, a.plot_width, a.plot_height, steps_per_epoch).c_str());
  }
  if (!constant.empty()) std::printf("\nconstant learning rate: %s\n", constant.c_str());

  std::vector<Curve> curves;
  for (size_t i = 0; i < rows.size(); ++i) curves.push_back({rows[i].name, results[i].lr});
  const std::string title =
      "brisk: learning rate per step, Fashion-MNIST " + a.model + ", " + std::to_string(a.epochs) + " epochs";
  fashion_mnist::write_file_atomic(a.out + "/lr_curves.svg", lr_curves_svg(curves, steps_per_epoch, title));
  fashion_mnist::write_file_atomic(a.out + "/results.csv", results_csv(rows, results));
  fashion_mnist::write_file_atomic(a.out + "/results.json", results_json(a, steps_per_epoch, rows, results));
  std::printf("\n%zu strategies in %.1f s; wrote %s/{lr_curves.svg,results.csv,results.json}\n", rows.size(),
              now_s() - start, a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "training_strategies: error: %s\n", e.what());
    return 1;
  }
}
