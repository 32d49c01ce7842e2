// examples/speedup_report/main.cpp: what each of the guide's speed techniques buys on this
// machine, measured in one run. The Fashion-MNIST CNN and the MLP are trained for a fixed budget
// with a baseline configuration (every technique off: Config in run.h), then with each technique
// switched on alone (a row of techniques(): a delta over the baseline, or a small function for
// rows that are not a training run), then with the best combination of the rows that paid.
// Each row gets samples/s, seconds per epoch, the allocator's peak, test accuracy and the
// change against its reference row. Rows that need a GPU or mpirun say "not run (...)" where
// there is none. Writes <out>/report.md (table + environment report), results.csv,
// results.json, speedup.svg and env.txt.
//   speedup_report [--quick] [--models cnn,mlp] [--train-size N] [--epochs N] ...  (--help)
// Not here: the techniques themselves (data/, optim/, engine/autocast.h, nn/, dist/); a
// statistically careful benchmark (one run per row: see docs/SPEEDUP.md for the noise).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "compress/distill.h"
#include "compress/prune_channels.h"
#include "compress/quantize.h"
#include "engine/env.h"
#include "examples/speedup_report/report.h"
#include "examples/speedup_report/run.h"
#include "kernels/cpu/gemm_i8.h"
#include "train/batch_size.h"
#ifdef SPEEDUP_WITH_DIST
#include "dist/ddp.h"
#endif

using namespace brisk;
using namespace speedup;

namespace {

struct Args {
  std::vector<std::string> models = {"cnn", "mlp"};
  int64_t train_size = 15000, test_size = 10000, epochs = 3, batch = 128;
  int64_t mlp_scale = 5;           // the MLP, ~30x cheaper per image, trains on 5x the images
  int64_t memory_budget_mb = 256;  // the batch-size finder's budget
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores
  std::string mode = "full";
  std::string data = data::FashionMNIST::kDefaultRoot;
  std::string out = "runs/speedup_report";
  bool ddp_child = false;  // internal: one rank of the data-parallel row, under mpirun
  std::string result{};    // internal: where rank 0 of the child writes its numbers
};

void usage() {
  std::printf(
      "usage: speedup_report [options]\n"
      "  --quick               6000 training images (MLP 30000) x 2 epochs, 2000 test images (~4 minutes)\n"
      "  --tiny                512 x 1 epoch, batch 64, 256 test images (the smoke test)\n"
      "  --models LIST         cnn,mlp (default both)\n"
      "  --train-size N        training images of the CNN: the first N (default 15000)\n"
      "  --mlp-scale N         the MLP trains on N times as many (at most 60000; default 5)\n"
      "  --test-size N         test images: the first N (default 10000)\n"
      "  --epochs N            epochs per training row (default 3)\n"
      "  --batch-size N        the baseline's batch (default 128)\n"
      "  --memory-budget-mb N  the batch-size finder's budget (default 256)\n"
      "  --seed N              initial weights and batch order, the same in every row (default 0)\n"
      "  --threads N           OpenMP compute threads (default: all cores)\n"
      "  --data DIR            Fashion-MNIST IDX files (default %s)\n"
      "  --out DIR             outputs (default runs/speedup_report)\n",
      data::FashionMNIST::kDefaultRoot);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    auto count = [&](int64_t min) {
      const std::string v = value();
      size_t used = 0;
      int64_t n = 0;
      try {
        n = std::stoll(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || v.empty() || n < min) {
        throw std::runtime_error(k + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
      }
      return n;
    };
    if (k == "--help" || k == "-h") {
      usage();
      std::exit(0);
    } else if (k == "--quick") {
      a.mode = "quick";
      a.train_size = 6000, a.test_size = 2000, a.epochs = 2;
    } else if (k == "--tiny") {
      a.mode = "tiny";
      a.train_size = 512, a.test_size = 256, a.epochs = 1, a.batch = 64;
    } else if (k == "--models") {
      a.models.clear();
      std::stringstream list(value());
      for (std::string m; std::getline(list, m, ',');) {
        if (m != "cnn" && m != "mlp") throw std::runtime_error("--models: unknown model '" + m + "' (cnn, mlp)");
        a.models.push_back(m);
      }
    } else if (k == "--train-size") {
      a.train_size = count(64);
    } else if (k == "--mlp-scale") {
      a.mlp_scale = count(1);
    } else if (k == "--test-size") {
      a.test_size = count(1);
    } else if (k == "--epochs") {
      a.epochs = count(1);
    } else if (k == "--batch-size") {
      a.batch = count(4);
    } else if (k == "--memory-budget-mb") {
      a.memory_budget_mb = count(1);
    } else if (k == "--seed") {
      a.seed = uint64_t(count(0));
    } else if (k == "--threads") {
      a.threads = int(count(0));
    } else if (k == "--data") {
      a.data = value();
    } else if (k == "--out") {
      a.out = value();
    } else if (k == "--ddp-child") {
      a.ddp_child = true;
    } else if (k == "--result") {
      a.result = value();
    } else {
      throw std::runtime_error("unknown option " + k + " (see --help)");
    }
  }
  return a;
}

int64_t train_size_of(const Args& a, const std::string& model) {
  return model == "mlp" ? std::max(a.train_size, std::min<int64_t>(60000, a.train_size * a.mlp_scale)) : a.train_size;
}

Data load_data(const Args& a, int64_t train_size) {
  auto first = [](data::DatasetPtr set, int64_t n) -> data::DatasetPtr {
    if (n >= set->size()) return set;
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i;
    return std::make_shared<data::Subset>(set, std::move(idx));
  };
  Data d;
  d.train = first(std::make_shared<data::FashionMNIST>(a.data, true), train_size);
  d.test = first(std::make_shared<data::FashionMNIST>(a.data, false), a.test_size);
  d.epochs = a.epochs;
  d.seed = a.seed;
  return d;
}

// ---- rows that are not a plain training run

// What the rows of one model share: the baseline's trained model (the inference rows use it),
// the batch-size finder's answer (the combination reuses it).
struct Context {
  const Args* args = nullptr;
  Data* data = nullptr;
  std::string model;
  Config baseline{};
  std::shared_ptr<nn::Module> trained{};
  int64_t found_batch = 0;
  double found_lr_scale = 1;
};

using LossOf = std::function<Tensor(const data::Batch&)>;

// A short Adam (fused, lr 1e-3) training of `params` with loss_of, on the training set.
void fit(const optim::NamedTensors& params, const Context& ctx, int64_t epochs, const LossOf& loss_of) {
  Config c = ctx.baseline;
  c.fused_transform = true;
  auto loader = make_loader(ctx.data->train, c, ctx.data->seed);
  optim::Adam opt(params, {.lr = 1e-3});
  for (int64_t e = 0; e < epochs; ++e) {
    loader->set_epoch(e);
    while (auto b = loader->next()) {
      opt.zero_grad();
      loss_of(*b).backward();
      opt.step();
    }
  }
}

std::shared_ptr<nn::Module> copy_of_trained(const Context& ctx) {
  std::shared_ptr<nn::Module> m = make_model(ctx.model);
  m->load_state_dict(ctx.trained->state_dict());
  return m;
}

Measured batch_finder_row(Context& ctx) {
  const Args& a = *ctx.args;
  Config c = ctx.baseline;
  const double t0 = now_s();
  training::BatchSizeSearch s;
  s.memory_budget = size_t(a.memory_budget_mb) << 20;
  s.initial = 16;
  s.max_batch = std::min<int64_t>(1024, ctx.data->train->size() / 4);
  s.base_lr = c.lr;
  s.base_batch = c.batch;
  s.scaling = training::LrScaling::Sqrt;  // Adam
  training::BatchSizeResult found = training::find_batch_size(
      [&](int64_t b) {
        manual_seed(ctx.data->seed);
        std::shared_ptr<nn::Module> m = make_model(c.model);
        auto opt = make_optimizer(c, m->named_parameters());
        opt->zero_grad();
        cross_entropy((*m)(randn({b, 1, 28, 28})), zeros({b}, DType::I64)).backward();
        opt->step();
      },
      s);
  const double finder_s = now_s() - t0;
  BRISK_CHECK(found.batch_size > 0, "batch-size finder: not even batch ", s.initial, " fits in ", a.memory_budget_mb,
              " MiB");
  ctx.found_batch = found.batch_size;
  ctx.found_lr_scale = found.lr / c.lr;
  c.batch = found.batch_size;
  c.lr_scale = ctx.found_lr_scale;
  Measured m = train_run(c, *ctx.data);
  m.note = "batch " + std::to_string(found.batch_size) + " (largest in " + std::to_string(a.memory_budget_mb) +
           " MiB, max " + std::to_string(s.max_batch) + "), lr " + fmt("%.2g", found.lr) + " (sqrt rule); " +
           std::to_string(found.probes.size()) + " probes in " + fmt("%.1f", finder_s) + " s, not counted";
  return m;
}

Measured eval_row(Context& ctx, bool no_grad) { return infer_run(*ctx.trained, *ctx.data, no_grad); }

Measured int8_row(Context& ctx) {
  namespace q = nn::quantize;
  std::shared_ptr<nn::Module> m = copy_of_trained(ctx);
  std::string note;
  if (ctx.model == "cnn") {  // static PTQ: observers on 8 training batches, then int8 conv/linear
    q::prepare(m, q::get_default_qconfig("fbgemm"));
    Config c = ctx.baseline;
    c.fused_transform = true;
    auto loader = make_loader(ctx.data->train, c, ctx.data->seed);
    NoGradGuard no_grad;
    for (int i = 0; i < 8; ++i) {
      auto b = loader->next();
      if (!b) break;
      (*m)(b->input);
    }
    q::convert(m);
    note = "static PTQ, 8 calibration batches";
  } else {
    m = q::quantize_dynamic(m);
    note = "dynamic int8 Linear";
  }
  Measured r = infer_run(*m, *ctx.data);
  r.note = note + ", " + kernels::cpu::i8_gemm_path_name(kernels::cpu::i8_gemm_path()) + " GEMM; latency " +
           fmt("%.2f", r.latency_ms) + " ms / 128";
  return r;
}

Measured pruned_row(Context& ctx) {
  std::shared_ptr<nn::Module> m = copy_of_trained(ctx);
  Tensor example = randn({16, 1, 28, 28});
  const nn::prune::ChannelPlan plan = nn::prune::prune_channels(*m, {.amount = 0.5, .norm = 1}, example);
  const double before = infer_run(*m, *ctx.data).test_acc;
  fit(m->named_parameters(), ctx, 1, [&](const data::Batch& b) { return cross_entropy((*m)(b.input), b.target); });
  Measured r = infer_run(*m, *ctx.data);
  r.note = "50% of conv channels removed (L1), " + fmt("%.2f%%", 100 * before) + " before a 1-epoch fine-tune; " +
           std::to_string(m->num_parameters()) + " parameters; latency " + fmt("%.2f", r.latency_ms) + " ms / 128";
  return r;
}

Measured distilled_row(Context& ctx) {
  manual_seed(ctx.data->seed + 1);
  auto student = std::make_shared<TinyCNN>();
  {
    nn::distill::Distiller distiller(ctx.trained, student, {.temperature = 4, .alpha = 0.9});
    fit(distiller.named_parameters(), ctx, ctx.data->epochs,
        [&](const data::Batch& b) { return distiller(b.input, b.target).total; });
  }
  Measured r = infer_run(*student, *ctx.data);
  r.note = "TinyCNN (" + std::to_string(student->num_parameters()) + " parameters) distilled, T 4, alpha 0.9, " +
           std::to_string(ctx.data->epochs) + " epochs; latency " + fmt("%.2f", r.latency_ms) + " ms / 128";
  return r;
}

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// The data-parallel row: this program again under mpirun, 2 ranks of 1 thread each, the
// baseline's total batch split between them; rank 0 writes its numbers to a file read here.
Measured ddp_row(Context& ctx, std::string& status) {
#ifndef SPEEDUP_WITH_DIST
  status = "not run (built without brisk::dist)";
  return {};
#else
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    status = "not run (no mpirun)";
    return {};
  }
  const Args& a = *ctx.args;
  const std::string result = a.out + "/ddp_" + ctx.model + ".txt", log = a.out + "/ddp_" + ctx.model + ".log";
  std::filesystem::remove(result);
  const std::string cmd =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "
      "mpirun --oversubscribe --bind-to none -np 2 '" +
      self_path() + "' --ddp-child --models " + ctx.model + " --train-size " + std::to_string(ctx.data->train->size()) +
      " --test-size " + std::to_string(a.test_size) + " --epochs " + std::to_string(a.epochs) + " --batch-size " +
      std::to_string(a.batch) + " --seed " + std::to_string(a.seed) + " --data '" + a.data + "' --result '" + result +
      "' >'" + log + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  Measured m;
  std::ifstream in(result);
  if (rc != 0 || !(in >> m.samples_per_s >> m.seconds >> m.peak_mib >> m.test_acc)) {
    status = "failed (mpirun exit " + std::to_string(rc) + ", see " + log + ")";
    return {};
  }
  m.note = "2 processes x 1 thread, batch " + std::to_string(a.batch / 2) + " each, vs 1 process x " +
           std::to_string(omp_get_max_threads()) + " threads; peak of rank 0";
  return m;
#endif
}

int ddp_child(const Args& a) {
#ifndef SPEEDUP_WITH_DIST
  (void)a;
  throw std::runtime_error("--ddp-child: built without brisk::dist");
#else
  dist::ProcessGroupPtr pg = dist::init_process_group();
  omp_set_num_threads(1);
  Data d = load_data(a, a.train_size);
  Config c;
  c.model = a.models.at(0);
  c.batch = a.batch / pg->size();
  Hooks h;
  h.sampler = std::make_shared<data::DistributedSampler>(d.train->size(), pg->size(), pg->rank(), true, a.seed);
  h.wrap = [&](std::shared_ptr<nn::Module> m) { return std::make_shared<dist::DistributedDataParallel>(m, pg); };
  h.finish = [&] { pg->barrier()->wait(); };
  Measured m = train_run(c, d, h);
  if (pg->rank() == 0) {
    std::ofstream out(a.result);
    out << m.samples_per_s * double(pg->size()) << " " << m.seconds << " " << m.peak_mib << " " << m.test_acc << "\n";
  }
  pg->barrier()->wait();
  dist::destroy_process_group();
  return 0;
#endif
}

// ---- the table of techniques

// A row: a delta over the baseline (apply) or a function of its own (measure). `slot` names
// what it would change in the best combination ("" when it takes no part): speed slots take the
// fastest row with speedup >= 1.05 and at most 1 point of accuracy lost; accuracy slots the most
// accurate with a gain of >= 0.5 points at >= 0.9x the speed. One row per slot.
struct Technique {
  std::string group{}, name{};
  std::string reference = "baseline";
  std::string kind = "train";
  bool cuda = false;
  bool cnn_only = false;
  std::string slot{};
  bool speed_slot = true;
  std::function<void(Config&)> apply{};
  std::function<Measured(Context&)> measure{};
};

std::vector<Technique> techniques() {
  std::vector<Technique> t;
  // Returns the new row, valid until the next one is added.
  auto delta = [&](std::string group, std::string name, std::function<void(Config&)> f, std::string slot = "",
                   bool speed = true) {
    Technique x;
    x.group = std::move(group);
    x.name = std::move(name);
    x.apply = std::move(f);
    x.slot = std::move(slot);
    x.speed_slot = speed;
    t.push_back(x);
    return &t.back();
  };
  auto cuda = [](Config& c) { c.device = Device::cuda(); };
  delta("baseline", "baseline", [](Config&) {})->reference = "";
  delta("device", "baseline (CUDA)", cuda)->cuda = true;

  delta(
      "data loading", "1 worker", [](Config& c) { c.workers = 1; }, "workers");
  delta(
      "data loading", "2 workers", [](Config& c) { c.workers = 2; }, "workers");
  delta(
      "data loading", "2 workers, prefetch 1", [](Config& c) { c.workers = 2, c.prefetch = 1; }, "workers");
  delta(
      "data loading", "2 workers, prefetch 8", [](Config& c) { c.workers = 2, c.prefetch = 8; }, "workers");
  delta(
      "data loading", "fused transforms", [](Config& c) { c.fused_transform = true; }, "transform");
  Technique* pinned = delta("data loading", "pinned memory + non_blocking", [](Config& c) {
    c.device = Device::cuda();
    c.workers = 2;
    c.pin_memory = true;
  });
  pinned->cuda = true;
  pinned->reference = "baseline (CUDA)";

  Technique finder;
  finder.group = "batch size";
  finder.name = "finder's batch, sqrt-scaled lr";
  finder.measure = batch_finder_row;
  finder.slot = "batch";
  t.push_back(finder);

  delta(
      "optimizer", "fused step", [](Config& c) { c.fused_step = true; }, "step");
  delta(
      "optimizer", "SGD nesterov lr 0.05", [](Config& c) { c.optimizer = "sgd", c.lr = 0.05; }, "optimizer", false);
  delta(
      "optimizer", "AdamW lr 1e-3 wd 0.01", [](Config& c) { c.optimizer = "adamw"; }, "optimizer", false);

  delta(
      "LR schedule", "warm-up (10% of steps)", [](Config& c) { c.schedule = "warmup"; }, "schedule", false);
  delta(
      "LR schedule", "one-cycle (max 3x lr)", [](Config& c) { c.schedule = "onecycle"; }, "schedule", false);
  delta(
      "LR schedule", "cyclic (triangular2)", [](Config& c) { c.schedule = "cyclic"; }, "schedule", false);

  delta(
      "mixed precision", "BF16 autocast", [](Config& c) { c.amp = DType::BF16; }, "precision");
  for (DType dt : {DType::F16, DType::BF16}) {
    Technique* x =
        delta("mixed precision", dt == DType::F16 ? "F16 autocast + GradScaler (CUDA)" : "BF16 autocast (CUDA)",
              [dt](Config& c) {
                c.device = Device::cuda();
                c.amp = dt;
              });
    x->cuda = true;
    x->reference = "baseline (CUDA)";
  }

  Technique eval_tape;
  eval_tape.group = "evaluation";
  eval_tape.name = "tape recorded";
  eval_tape.kind = "inference";
  eval_tape.reference = "";
  eval_tape.measure = [](Context& ctx) { return eval_row(ctx, false); };
  t.push_back(eval_tape);
  Technique eval_nograd = eval_tape;
  eval_nograd.name = "no_grad";
  eval_nograd.reference = "tape recorded";
  eval_nograd.measure = [](Context& ctx) { return eval_row(ctx, true); };
  t.push_back(eval_nograd);

  delta("gradient accumulation", "4 micro-batches", [](Config& c) { c.micro_batches = 4; });
  delta("gradient checkpointing", "first block recomputed", [](Config& c) { c.checkpointing = true; });

  Technique ddp;
  ddp.group = "data parallel";
  ddp.name = "2 ranks (MPI)";
  t.push_back(ddp);  // measured by ddp_row (it needs the status)

  for (const char* name : {"int8", "pruned 50% channels", "distilled student"}) {
    Technique x;
    x.group = "compression";
    x.name = name;
    x.kind = "inference";
    x.reference = "no_grad";
    x.cnn_only = std::string(name) != "int8";
    x.measure = !x.cnn_only ? int8_row : (name[0] == 'p' ? pruned_row : distilled_row);
    t.push_back(x);
  }

  Technique* eager = delta("graph capture", "SGD eager (CUDA)", [](Config& c) {
    c.device = Device::cuda();
    c.optimizer = "sgd", c.lr = 0.05, c.drop_last = true;
  });
  eager->cuda = true;
  eager->reference = "baseline (CUDA)";
  Technique* graph = delta("graph capture", "CUDA graph (SGD)", [](Config& c) {
    c.device = Device::cuda();
    c.optimizer = "sgd", c.lr = 0.05, c.drop_last = true, c.graph = true;
  });
  graph->cuda = true;
  graph->reference = "SGD eager (CUDA)";
  return t;
}

const Row* find_row(const std::vector<Row>& rows, const std::string& model, const std::string& name) {
  for (const Row& r : rows)
    if (r.model == model && r.name == name) return &r;
  return nullptr;
}

void compare(Row& r, const std::vector<Row>& rows) {
  if (!r.ok() || r.reference.empty()) return;
  const Row* ref = find_row(rows, r.model, r.reference);
  if (!ref || !ref->ok() || ref->m.samples_per_s <= 0) return;
  r.compared = true;
  r.speedup = r.m.samples_per_s / ref->m.samples_per_s;
  r.dacc = 100 * (r.m.test_acc - ref->m.test_acc);
}

Row measure_row(const Technique& t, Context& ctx, const std::vector<Row>& done) {
  Row r;
  r.model = ctx.model;
  r.group = t.group;
  r.name = t.name;
  r.kind = t.kind;
  r.reference = t.reference;
  Config c = ctx.baseline;
  if (t.apply) t.apply(c);
  r.device = c.device.str();
  if (t.cuda && !gpu_available()) {
    r.device = "cuda";
    r.status = "not run (no GPU)";
    return r;
  }
  try {
    if (t.group == "data parallel") {
      r.m = ddp_row(ctx, r.status);
      r.device = "cpu x 2 ranks";
    } else if (t.measure) {
      r.m = t.measure(ctx);
    } else {
      r.m = train_run(c, *ctx.data, {}, t.name == "baseline" ? &ctx.trained : nullptr);
    }
  } catch (const std::exception& e) {
    r.status = std::string("failed: ") + e.what();
  }
  compare(r, done);
  return r;
}

// Makes the baseline row the median of `runs` (by samples/s; accuracy is the same in each, as
// every run starts from the same weights and batches) and compares the model's rows again.
void settle_baseline(std::vector<Row>& rows, size_t first, std::vector<Measured> runs) {
  Row* base = nullptr;
  for (size_t i = first; i < rows.size(); ++i)
    if (rows[i].name == "baseline" && rows[i].ok()) base = &rows[i];
  if (!base || runs.empty()) return;
  std::sort(runs.begin(), runs.end(),
            [](const Measured& x, const Measured& y) { return x.samples_per_s < y.samples_per_s; });
  std::string each;
  for (const Measured& m : runs) each += (each.empty() ? "" : " / ") + fmt("%.0f", m.samples_per_s);
  const double lo = runs.front().samples_per_s, hi = runs.back().samples_per_s;
  const Measured median = runs[runs.size() / 2];
  base->m.samples_per_s = median.samples_per_s;
  base->m.seconds = median.seconds;
  base->m.peak_mib = median.peak_mib;
  base->m.note = "median of " + std::to_string(runs.size()) + " runs (first, middle, last row): " + each +
                 " samples/s, spread " + fmt("%.0f%%", 100 * (hi - lo) / median.samples_per_s);
  for (size_t i = first; i < rows.size(); ++i) {
    rows[i].compared = false;
    compare(rows[i], rows);
  }
}

// The best combination: per slot, the row that paid most (see Technique), applied together.
Row combination_row(const std::vector<Technique>& table, Context& ctx, const std::vector<Row>& rows) {
  std::map<std::string, std::pair<const Technique*, const Row*>> best;
  for (const Technique& t : table) {
    if (t.slot.empty()) continue;
    const Row* r = find_row(rows, ctx.model, t.name);
    if (!r || !r->compared) continue;
    const bool pays = t.speed_slot ? r->speedup >= 1.05 && r->dacc >= -1.0 : r->dacc >= 0.5 && r->speedup >= 0.9;
    if (!pays) continue;
    auto& b = best[t.slot];
    const bool better = !b.second || (t.speed_slot ? r->speedup > b.second->speedup : r->dacc > b.second->dacc);
    if (better) b = {&t, r};
  }
  Config c = ctx.baseline;
  std::string chosen;
  for (const Technique& t : table) {  // in table order
    auto it = best.find(t.slot);
    if (t.slot.empty() || it == best.end() || it->second.first != &t) continue;
    if (t.slot == "batch") {
      c.batch = ctx.found_batch;
      c.lr_scale = ctx.found_lr_scale;
    } else {
      t.apply(c);
    }
    chosen += (chosen.empty() ? "" : " + ") + t.name;
  }
  Row r;
  r.model = ctx.model;
  r.group = "best combination";
  r.name = "best combination";
  r.reference = "baseline";
  try {
    r.m = train_run(c, *ctx.data);
    r.m.note = chosen.empty() ? "no row paid: the baseline again" : chosen;
  } catch (const std::exception& e) {
    r.status = std::string("failed: ") + e.what();
  }
  compare(r, rows);
  return r;
}

std::string utc_now() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

int run(const Args& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const std::string probe = a.data + "/train-images-idx3-ubyte";
  if (!std::filesystem::exists(probe) && !std::filesystem::exists(probe + ".gz")) {
    std::printf("SKIP: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)\n", a.data.c_str());
    return 77;
  }
  if (a.ddp_child) return ddp_child(a);
  std::filesystem::create_directories(a.out);
  const double start = now_s();
  const EnvReport env = env_report({.libraries = false});
  const std::string date = utc_now();
  const int64_t test_size = std::min<int64_t>(a.test_size, 10000);
  std::string budget;
  for (const std::string& model : a.models) {
    budget += (budget.empty() ? "" : ", ") + model + " " + std::to_string(train_size_of(a, model));
  }
  budget += " training images x " + std::to_string(a.epochs) + " epochs, batch " + std::to_string(a.batch) + ", " +
            std::to_string(test_size) + " test images";
  std::fprintf(stderr, "speedup_report (%s): %s, %d threads\n%s\n", a.mode.c_str(), budget.c_str(),
               omp_get_max_threads(), env.summary().c_str());

  const std::vector<Technique> table = techniques();
  std::vector<Row> rows;
  for (const std::string& model : a.models) {
    Data d = load_data(a, train_size_of(a, model));
    Context ctx;
    ctx.args = &a;
    ctx.data = &d;
    ctx.model = model;
    ctx.baseline.model = model;
    ctx.baseline.batch = a.batch;
    {  // warm-up, not reported: the first run of a process pays page faults and cold caches
      const double t0 = now_s();
      train_run(ctx.baseline, d);
      std::fprintf(stderr, "[%5.0f s] %s: warm-up run of the baseline (%.1f s, not reported)\n", now_s() - start,
                   model.c_str(), now_s() - t0);
    }
    // The reference: the median of three baseline runs, at the start, the middle and the end of
    // the model's rows (the machine's load drifts; one run is a noisy yardstick).
    const size_t first = rows.size();
    std::vector<Measured> baselines;
    auto baseline_again = [&] {
      try {
        baselines.push_back(train_run(ctx.baseline, d));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: a repeat of the baseline failed: %s\n", model.c_str(), e.what());
      }
    };
    for (size_t i = 0; i < table.size(); ++i) {
      const Technique& t = table[i];
      if (t.cnn_only && model != "cnn") continue;
      if (t.kind == "inference" && !ctx.trained) continue;  // the baseline failed
      if (i == table.size() / 2) baseline_again();
      const double t0 = now_s();
      rows.push_back(measure_row(t, ctx, rows));
      const Row& r = rows.back();
      if (t.name == "baseline" && r.ok()) baselines.push_back(r.m);
      std::fprintf(
          stderr, "[%5.0f s] %s: %s: %s: %s\n", now_s() - start, model.c_str(), t.group.c_str(), t.name.c_str(),
          r.ok() ? (fmt("%.0f samples/s, ", r.m.samples_per_s) + fmt("%.2f%%", 100 * r.m.test_acc) +
                    (r.compared ? fmt(", %.2fx the first baseline", r.speedup) : "") + fmt(" (%.1f s)", now_s() - t0))
                       .c_str()
                 : r.status.c_str());
    }
    baseline_again();
    settle_baseline(rows, first, baselines);
    rows.push_back(combination_row(table, ctx, rows));
    std::fprintf(stderr, "[%5.0f s] %s: best combination %.2fx (%s)\n", now_s() - start, model.c_str(),
                 rows.back().speedup, rows.back().m.note.c_str());
  }
  const double wall = now_s() - start;

  const std::string cpu = env.find("cpu", "model") ? *env.find("cpu", "model") : "unknown CPU";
  const std::string machine = cpu + ", " + std::to_string(omp_get_num_procs()) + " cores, " +
                              std::to_string(omp_get_max_threads()) + " threads" +
                              (gpu_available() ? ", GPU" : ", no GPU");
  const std::string table_md = markdown_table(rows);
  std::string md = "# Speedup report (" + a.mode + ")\n\n" + date + "; " + machine + "; " + budget + "; " +
                   fmt("%.0f", wall) + " s wall.\n\n" + table_md +
                   "\nBaseline: 0 workers, step-by-step transforms, Adam lr 1e-3 (reference step), constant lr, F32, "
                   "no accumulation or checkpointing, 1 process. Each row changes one thing (the best combination: "
                   "the rows that paid). speedup: samples/s over the reference row's; acc change: test accuracy "
                   "minus the reference's, in points. peak MiB: the allocator's high-water mark beyond what was "
                   "held before the row (datasets excluded). The baseline is the median of three runs spread over the "
                   "model's rows; their spread, in its notes, is the noise to read the ratios against.\n\n"
                   "## Environment\n\n```\n" +
                   env.to_string() + "```\n";
  std::printf("\n%s: %s; %s\n\n%s\n", date.c_str(), machine.c_str(), budget.c_str(), table_md.c_str());
  const nlohmann::json header = {{"date", date},
                                 {"machine", machine},
                                 {"mode", a.mode},
                                 {"budget", budget},
                                 {"cnn_train_size", a.train_size},
                                 {"mlp_train_size", train_size_of(a, "mlp")},
                                 {"test_size", test_size},
                                 {"epochs", a.epochs},
                                 {"batch", a.batch},
                                 {"threads", omp_get_max_threads()},
                                 {"wall_s", wall},
                                 {"env", env.summary()}};
  write_file_atomic(a.out + "/report.md", md);
  write_file_atomic(a.out + "/results.csv", results_csv(rows));
  write_file_atomic(a.out + "/results.json", results_json(rows, header));
  write_file_atomic(a.out + "/speedup.svg",
                    speedup_svg(rows, "brisk speedup report: Fashion-MNIST, each technique vs its reference",
                                date + "; " + machine + "; " + budget));
  write_file_atomic(a.out + "/env.txt", env.to_string());
  std::printf("%zu rows in %.0f s; wrote %s/{report.md,results.csv,results.json,speedup.svg,env.txt}\n", rows.size(),
              wall, a.out.c_str());
  for (const Row& r : rows)
    if (r.status.rfind("failed", 0) == 0) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "speedup_report: error: %s\n", e.what());
    return 1;
  }
}
