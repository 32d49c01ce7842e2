// examples/pipeline/main.cpp: Fashion-MNIST trained as a 2-stage pipeline (dist::Pipeline), one
// stage per rank, under mpirun:
//   mpirun -np 2 build/examples/pipeline [--model mlp|cnn] [--limit N] [--batch-size B]
//       [--micro-batches 1,2,4,8] [--balance parameters|time] [--quick] [--no-baseline]
// For each schedule (GPipe, 1F1B) and each micro-batch count m, the model starts from the same
// weights and trains one pass over the first N training images (Adam, the same batches on every
// run); rank 0 prints the throughput, each stage's measured bubble (1 - compute / step) beside
// the theory (p - 1) / (m + p - 1), each stage's peak memory in a train_step (the CPU allocator's
// high-water mark above the step's start, gradients already allocated: the activations kept
// for backward and backward's temporaries; the optimizer's step is outside) and the mean loss,
// which is the same for both schedules. The baseline is the whole model on rank 0 alone (one
// thread) on the same batches. mlp (default) is 784-512-512-512-512-10, balanced by parameters;
// cnn is the examples' SmallCNN as one Sequential, balanced by measured time. Not here: data
// parallelism (examples/ddp), the design (docs/PIPELINE.md).
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "brisk.h"
#include "data/readers.h"
#include "dist/pipeline.h"
#include "engine/allocator.h"
#include "optim/optim.h"

using namespace brisk;

namespace {

struct Args {
  std::string model = "mlp", data = data::FashionMNIST::kDefaultRoot, balance = "";
  int64_t limit = 16384, batch_size = 1024;
  std::vector<int64_t> micro = {1, 2, 4, 8};
  bool baseline = true;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") {
      a.model = next();
    } else if (k == "--data") {
      a.data = next();
    } else if (k == "--limit") {
      a.limit = std::stoll(next());
    } else if (k == "--batch-size") {
      a.batch_size = std::stoll(next());
    } else if (k == "--micro-batches") {
      a.micro = parse_list(next());
    } else if (k == "--balance") {
      a.balance = next();
    } else if (k == "--quick") {
      a.limit = 4096;
      a.micro = {1, 4};
    } else if (k == "--no-baseline") {
      a.baseline = false;
    } else {
      throw std::runtime_error("unknown option " + k);
    }
  }
  if (a.model != "cnn" && a.model != "mlp") throw std::runtime_error("--model: cnn or mlp");
  if (a.balance.empty()) a.balance = a.model == "cnn" ? "time" : "parameters";
  if (a.balance != "parameters" && a.balance != "time") throw std::runtime_error("--balance: parameters or time");
  if (a.limit < a.batch_size || a.batch_size < 1 || a.micro.empty())
    throw std::runtime_error("--limit must be at least --batch-size, --micro-batches a list like 1,2,4");
  for (int64_t m : a.micro) {
    if (m < 1 || a.batch_size % m != 0) throw std::runtime_error("--micro-batches: each must divide --batch-size");
  }
  return a;
}

std::shared_ptr<nn::Sequential> make_model(const std::string& kind) {
  manual_seed(0);  // the same weights on both ranks and in every run
  auto m = std::make_shared<nn::Sequential>();
  if (kind == "mlp") {
    const std::vector<int64_t> sizes = {784, 512, 512, 512, 512, 10};
    for (size_t i = 0; i + 1 < sizes.size(); ++i) {
      if (i > 0) m->push_back(std::make_shared<nn::ReLU>());
      m->push_back(std::make_shared<nn::Linear>(sizes[i], sizes[i + 1]));
    }
  } else {  // SmallCNN's layers (nn/models/simple.h) in one Sequential
    m->push_back(std::make_shared<nn::Conv2d>(1, 32, 3, nn::ConvOptions{.padding = {1, 1}}));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Conv2d>(32, 64, 3, nn::ConvOptions{.padding = {1, 1}}));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10));
  }
  return m;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target) { return cross_entropy(logits, target); }

// What one run measured on this rank.
struct Run {
  double seconds = 0;  // the timed steps: all but the first, which allocates the gradients
  double compute_s = 0, step_s = 0;
  double peak_bytes = 0;  // the largest step's, the first excluded
  double loss = 0;        // mean over the steps
  int64_t in_flight = 0;
};

struct Data {
  Tensor x, y;
  int64_t steps = 0;
};

Run train_pipeline(const Args& a, const Data& d, dist::Schedule sched, int64_t m, const std::vector<int64_t>& points,
                   const dist::ProcessGroupPtr& pg) {
  auto model = make_model(a.model);
  dist::Pipeline pipe(model, pg, {.schedule = sched, .micro_batches = m, .split_points = points});
  optim::Adam opt(pipe.named_parameters(), {.lr = 1e-3});
  Run r;
  double t0 = 0;
  for (int64_t s = 0; s < d.steps; ++s) {
    if (s == 1) {
      pg->barrier()->wait();
      t0 = now_s();
    }
    const Tensor x = narrow(d.x, 0, s * a.batch_size, a.batch_size), y = narrow(d.y, 0, s * a.batch_size, a.batch_size);
    opt.zero_grad(/*set_to_none=*/false);  // gradients stay allocated: the peak below is the step's own
    cpu_allocator().reset_peak();
    const size_t base = cpu_allocator().stats().allocated;
    const Tensor loss = pipe.train_step(x, y, cross_entropy_loss);
    if (s >= 1) r.peak_bytes = std::max(r.peak_bytes, double(cpu_allocator().stats().peak - base));
    opt.step();
    r.loss += loss.item<double>() / double(d.steps);
    if (s >= 1) {
      r.compute_s += pipe.last_stats().compute_s;
      r.step_s += pipe.last_stats().step_s;
    }
    r.in_flight = std::max(r.in_flight, pipe.last_stats().max_in_flight);
  }
  pg->barrier()->wait();
  r.seconds = now_s() - t0;
  return r;
}

// The whole model in this process (rank 0), on the same batches.
Run train_alone(const Args& a, const Data& d) {
  auto model = make_model(a.model);
  optim::Adam opt(model->named_parameters(), {.lr = 1e-3});
  Run r;
  double t0 = 0;
  for (int64_t s = 0; s < d.steps; ++s) {
    if (s == 1) t0 = now_s();
    const Tensor x = narrow(d.x, 0, s * a.batch_size, a.batch_size), y = narrow(d.y, 0, s * a.batch_size, a.batch_size);
    opt.zero_grad(/*set_to_none=*/false);
    cpu_allocator().reset_peak();
    const size_t base = cpu_allocator().stats().allocated;
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    if (s >= 1) r.peak_bytes = std::max(r.peak_bytes, double(cpu_allocator().stats().peak - base));
    opt.step();
    r.loss += loss.item<double>() / double(d.steps);
  }
  r.seconds = now_s() - t0;
  return r;
}

int run(const Args& a) {
  dist::ProcessGroupPtr pg = dist::init_process_group();
  const int rank = pg->rank(), p = pg->size();
  omp_set_num_threads(1);  // one core per stage
  data::FashionMNIST train(a.data, /*train=*/true);
  const int64_t n = std::min(a.limit, train.size()) / a.batch_size * a.batch_size;
  Data d;
  d.steps = n / a.batch_size;
  d.x = (cast(narrow(train.images(), 0, 0, n), DType::F32) * (1.0 / 255) - 0.2860) * (1.0 / 0.3530);
  if (a.model == "mlp") d.x = d.x.reshape({n, 784});
  d.y = narrow(train.labels(), 0, 0, n);

  auto probe = make_model(a.model);
  std::vector<int64_t> points;
  if (a.balance == "time") {
    points = dist::balance_by_time(*probe, narrow(d.x, 0, 0, a.batch_size / a.micro.back()), p, *pg);
  } else {
    points = dist::balance_by_parameters(*probe, p);
  }
  if (rank == 0) {
    std::printf("pipeline: %s on %d stages, %lld samples, batch %lld, %lld steps per run, split by %s at",
                a.model.c_str(), p, (long long)n, (long long)a.batch_size, (long long)d.steps, a.balance.c_str());
    for (int64_t x : points) std::printf(" %lld", (long long)x);
    std::printf("\n");
    for (int s = 0; s < p; ++s) {
      const int64_t b = s == 0 ? 0 : points[size_t(s) - 1], e = s == p - 1 ? int64_t(probe->size()) : points[size_t(s)];
      int64_t params = 0;
      for (int64_t i = b; i < e; ++i) params += (*probe)[size_t(i)]->num_parameters();
      std::printf("  stage %d (rank %d): layers [%lld, %lld), %lld parameters\n", s, s, (long long)b, (long long)e,
                  (long long)params);
    }
    std::printf("\n%-9s %3s %10s %8s", "schedule", "m", "samples/s", "step ms");
    for (int s = 0; s < p; ++s) std::printf(" %9s", ("bubble s" + std::to_string(s)).c_str());
    std::printf(" %7s %7s", "mean", "theory");
    for (int s = 0; s < p; ++s) std::printf(" %10s", ("act MiB s" + std::to_string(s)).c_str());
    std::printf(" %9s %7s\n", "in-flight", "loss");
  }
  for (dist::Schedule sched : {dist::Schedule::GPipe, dist::Schedule::OneFOneB}) {
    for (int64_t m : a.micro) {
      const Run r = train_pipeline(a, d, sched, m, points, pg);
      // Every stage's numbers to rank 0: bubble, peak, in-flight.
      Tensor mine = from_vector({1 - r.compute_s / r.step_s, r.peak_bytes, double(r.in_flight)}, {3}, DType::F64);
      Tensor all = zeros({3 * int64_t(p)}, DType::F64);
      pg->allgather_into_tensor(all, mine)->wait();
      if (rank != 0) continue;
      const std::vector<double> v = all.to_vector<double>();
      const double timed = double((d.steps - 1) * a.batch_size);
      std::printf("%-9s %3lld %10.0f %8.1f", dist::schedule_name(sched), (long long)m, timed / r.seconds,
                  1e3 * r.seconds / double(d.steps - 1));
      double mean = 0;
      for (int s = 0; s < p; ++s) {
        std::printf(" %9.3f", v[size_t(3 * s)]);
        mean += v[size_t(3 * s)] / p;
      }
      std::printf(" %7.3f %7.3f", mean, dist::bubble_theory(p, m));
      for (int s = 0; s < p; ++s) std::printf(" %10.2f", v[size_t(3 * s + 1)] / (1 << 20));
      std::string flight;
      for (int s = 0; s < p; ++s) flight += (s ? "/" : "") + std::to_string(int64_t(v[size_t(3 * s + 2)]));
      std::printf(" %9s %7.4f\n", flight.c_str(), r.loss);
      std::fflush(stdout);
    }
  }
  if (a.baseline) {
    if (rank == 0) {
      const Run r = train_alone(a, d);
      std::printf(
          "\n1 process (rank 0 alone, 1 thread, the whole model): %.0f samples/s, %.1f ms per step, peak %.2f MiB, "
          "loss %.4f\n",
          double((d.steps - 1) * a.batch_size) / r.seconds, 1e3 * r.seconds / double(d.steps - 1),
          r.peak_bytes / (1 << 20), r.loss);
    }
    pg->barrier()->wait();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (!std::filesystem::exists(a.data)) {
      std::fprintf(stderr, "pipeline: no Fashion-MNIST at %s (apt-get install dataset-fashion-mnist); skipped\n",
                   a.data.c_str());
      return 77;
    }
    const int rc = run(a);
    dist::destroy_process_group();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline: error: %s\n", e.what());
    return 1;
  }
}
