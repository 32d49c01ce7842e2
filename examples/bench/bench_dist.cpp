// examples/bench/bench_dist.cpp: dist/ measured in one 2-rank run (start it with
// `mpirun -np 2 --oversubscribe --bind-to none build/examples/bench/bench_dist`; options
// --allreduce-only, --sharded-only (section 5 alone), --max-bytes B, --batch B):
//   1. allreduce (sum, F32) of 4 KB to 64 MB through ProcessGroup (MPI) and a Gloo group of the
//      same ranks against raw MPI_Allreduce on a duplicate of the same communicator, median of
//      several calls, with bus bandwidth;
//   2. scaling: SmallCNN training steps of the total batch B on rank 0 alone (rank 1 idle) vs
//      2-rank DDP with B / 2 per rank, one thread per rank; efficiency = T1 / (2 T2) (1.0: twice
//      the throughput on two cores; the goal is at least 0.85);
//   3. a bucket-size sweep of the DDP step: what overlapping communication with backward buys;
//   4. ZeRO-1 over Adam on the SmallCNN: optimizer state bytes per rank vs unsharded Adam;
//   5. DDP vs ZeRO-1 vs ZeRO-2 vs FSDP (ZeRO-3, every layer with parameters a unit) on the
//      SmallCNN: step time and the bytes a rank holds (run it with -np 4 too for N = 4).
// Not a test: it asserts nothing (tests/dist/test_dist.cpp checks the values).
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <vector>

#include "dist/ddp.h"
#include "dist/fsdp.h"
#include "dist/process_group.h"
#include "dist/zero.h"
#include "engine/functions.h"
#include "examples/bench/bench_common.h"
#include "nn/models/simple.h"
#include "optim/adam.h"

using namespace brisk;

namespace {

// Median seconds of fn over `reps` calls, every rank starting together.
template <class F>
double timed(dist::ProcessGroup& pg, int reps, F&& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    pg.barrier()->wait();
    const double t0 = bench::now_s();
    fn();
    t.push_back(bench::now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void allreduce_section(dist::ProcessGroup& pg, int64_t max_bytes) {
  // Raw MPI on its own communicator; the group's thread is idle between its timed calls. A
  // Gloo group of the same ranks beside it (its rendezvous over MPI) where the build has Gloo.
  MPI_Comm raw;
  pg.barrier()->wait();
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  dist::ProcessGroupPtr gloo;
  if (dist::is_gloo_available()) gloo = dist::init_process_group(dist::Backend::Gloo);
  const int n_ranks = pg.size();
  if (pg.rank() == 0) {
    std::printf("== allreduce (sum, F32), %d ranks: ProcessGroup (MPI) and Gloo vs raw MPI_Allreduce, median ms;\n",
                n_ranks);
    std::printf("   bus bandwidth GB/s = bytes * 2 (n - 1) / n / time\n");
    std::printf("%10s %10s %10s %10s %8s %8s %9s %9s\n", "bytes", "group", "raw MPI", "gloo", "grp/raw", "gloo/raw",
                "busbw MPI", "busbw gloo");
  }
  for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = bytes / 4;
    Tensor t = ones({n}), u = ones({n});
    std::vector<float> buf(size_t(n), 1.0f);
    const int reps = bytes >= (int64_t(16) << 20) ? 5 : 21;
    const double g = timed(pg, reps, [&] { pg.allreduce(t)->wait(); });
    const double m = timed(pg, reps, [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, raw); });
    const double gl = gloo ? timed(pg, reps, [&] { gloo->allreduce(u)->wait(); }) : 0;
    const double bus = double(bytes) * 2 * (n_ranks - 1) / n_ranks / 1e9;
    if (pg.rank() == 0) {
      std::printf("%10lld %10.3f %10.3f %10.3f %8.2f %8.2f %9.3f %9.3f\n", (long long)bytes, 1e3 * g, 1e3 * m, 1e3 * gl,
                  g / m, gl / m, bus / m, gl > 0 ? bus / gl : 0.0);
    }
  }
  if (gloo) gloo->shutdown();
  MPI_Comm_free(&raw);
}

// Median seconds of one training step of `model` on (x, y).
double step_time(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y, int reps,
                 dist::ProcessGroup* pg) {
  auto step = [&] {
    Tensor loss = cross_entropy(model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  step();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    if (pg) pg->barrier()->wait();
    const double t0 = bench::now_s();
    step();
    t.push_back(bench::now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void scaling_section(const dist::ProcessGroupPtr& pg, int64_t batch) {
  const int rank = pg->rank(), world = pg->size();
  manual_seed(0);
  Tensor x = randn({batch, 1, 28, 28});
  Tensor y = randint(0, 10, {batch});
  double t1 = 0;
  if (rank == 0) {  // one process, the whole batch, one thread; the other rank waits
    auto m = std::make_shared<nn::models::SmallCNN>();
    optim::Adam opt(m->named_parameters(), {.lr = 1e-3});
    t1 = step_time(*m, opt, x, y, 9, nullptr);
  }
  pg->barrier()->wait();
  const int64_t local = batch / world;
  Tensor xs = narrow(x, 0, rank * local, local), ys = narrow(y, 0, rank * local, local);
  if (rank == 0) {
    std::printf("\n== SmallCNN step, total batch %lld, one thread per rank, median ms\n", (long long)batch);
    std::printf("%-28s %10s %12s\n", "", "ms/step", "efficiency");
    std::printf("%-28s %10.1f %12s\n", "1 rank, whole batch", 1e3 * t1, "");
  }
  for (double cap : {25.0, 1.0, 0.25, 0.05}) {
    manual_seed(0);
    auto m = std::make_shared<nn::models::SmallCNN>();
    dist::DistributedDataParallel ddp(m, pg, {.bucket_cap_mb = cap});
    optim::Adam opt(ddp.named_parameters(), {.lr = 1e-3});
    const double t2 = step_time(ddp, opt, xs, ys, 9, pg.get());
    const dist::SyncStats& s = ddp.last_sync();
    const double waited_ms = 1e-6 * double(s.synced_ns - s.backward_end_ns);
    if (rank == 0) {
      char label[64];
      std::snprintf(label, sizeof label, "2-rank DDP, bucket %g MB (%zu)", cap, ddp.num_buckets());
      std::printf("%-28s %10.1f %12.2f   (after backward: %.2f ms waiting for allreduce)\n", label, 1e3 * t2,
                  t1 / (world * t2), waited_ms);
    }
  }
}

void zero_section(const dist::ProcessGroupPtr& pg) {
  manual_seed(0);
  auto m = std::make_shared<nn::models::SmallCNN>();
  dist::DistributedDataParallel ddp(m, pg);
  optim::Adam full(ddp.named_parameters(), {.lr = 1e-3});
  dist::ZeroRedundancyOptimizer zero(ddp.named_parameters(), pg, [](optim::NamedTensors p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-3});
  });
  Tensor x = randn({8, 1, 28, 28}), y = randint(0, 10, {8});
  cross_entropy(ddp(x), y).backward();
  full.step();
  zero.step();
  int64_t full_bytes = 0;
  for (const auto& [k, t] : full.state_dict().tensors) full_bytes += t.numel() * int64_t(t.element_size());
  std::vector<Tensor> all;
  for (int r = 0; r < pg->size(); ++r) all.push_back(zeros({1}, DType::F64));
  Tensor one = from_vector({double(zero.local_state_bytes())}, {1}, DType::F64);
  pg->allgather(all, one)->wait();
  if (pg->rank() == 0) {
    std::printf("\n== ZeRO-1 over Adam, SmallCNN: optimizer state per rank\n");
    std::printf("unsharded Adam: %.2f MB on every rank; ZeRO-1:", double(full_bytes) / 1e6);
    for (int r = 0; r < pg->size(); ++r) {
      const double b = all[size_t(r)].item<double>();
      std::printf(" rank %d %.2f MB (%.0f%%)", r, b / 1e6, 100 * b / double(full_bytes));
    }
    std::printf("\n");
  }
}

// One SmallCNN training step (median ms) and the bytes a rank holds between steps (parameters +
// gradients + Adam's state) for DDP + Adam, ZeRO-1 (DDP + sharded Adam), ZeRO-2 (sharded
// gradients too, no DDP) and FSDP (ZeRO-3: parameters sharded too, every layer with parameters a
// unit), on the same per-rank batch. The variants' steps take turns, round after round, so that
// a busy machine slows them alike (the median of 15 rounds each).
void zero2_section(const dist::ProcessGroupPtr& pg, int64_t batch) {
  const int rank = pg->rank(), world = pg->size();
  manual_seed(0);
  const int64_t local = batch / world;
  Tensor x = randn({local, 1, 28, 28}), y = randint(0, 10, {local});
  auto adam = [](optim::NamedTensors p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-3});
  };
  auto bytes = [](const std::vector<Tensor>& ts) {
    int64_t b = 0;
    for (const Tensor& t : ts) {
      if (t.defined()) b += t.numel() * int64_t(t.element_size());
    }
    return b;
  };
  auto state_bytes = [&](const optim::Optimizer& opt) {
    std::vector<Tensor> state;
    for (const auto& [k, t] : opt.state_dict().tensors) state.push_back(t);
    return bytes(state);
  };
  struct Variant {
    const char* name = "";
    std::function<void()> step{};
    std::function<std::array<int64_t, 3>()> held{};  // params, gradients, optimizer state
    std::vector<double> ms{};
  };
  std::vector<Variant> variants;
  // DDP + Adam
  auto m_ddp = std::make_shared<nn::models::SmallCNN>();
  dist::DistributedDataParallel ddp(m_ddp, pg);
  optim::Adam opt_ddp(ddp.named_parameters(), {.lr = 1e-3});
  variants.push_back({"DDP + Adam",
                      [&] {
                        opt_ddp.zero_grad();
                        cross_entropy(ddp(x), y).backward();
                        opt_ddp.step();
                      },
                      [&] {
                        std::vector<Tensor> grads;
                        for (const Tensor& p : m_ddp->parameters()) grads.push_back(p.grad());
                        return std::array<int64_t, 3>{bytes(m_ddp->parameters()), bytes(grads), state_bytes(opt_ddp)};
                      }});
  // ZeRO-1 and ZeRO-2
  std::vector<std::shared_ptr<nn::models::SmallCNN>> zm;
  std::vector<std::shared_ptr<dist::DistributedDataParallel>> zddp;
  std::vector<std::unique_ptr<dist::ZeroRedundancyOptimizer>> zero;
  for (int stage : {1, 2}) {
    zm.push_back(std::make_shared<nn::models::SmallCNN>());
    if (stage == 1) zddp.push_back(std::make_shared<dist::DistributedDataParallel>(zm.back(), pg));
    nn::Module* model = stage == 1 ? static_cast<nn::Module*>(zddp.back().get()) : zm.back().get();
    zero.push_back(std::make_unique<dist::ZeroRedundancyOptimizer>(model->named_parameters(), pg, adam,
                                                                   dist::ZeroOptions{.stage = stage}));
    dist::ZeroRedundancyOptimizer* z = zero.back().get();
    nn::models::SmallCNN* m = zm.back().get();
    variants.push_back(
        {stage == 1 ? "ZeRO-1 (DDP + sharded Adam)" : "ZeRO-2 (no DDP)",
         [=, &x, &y] {
           z->zero_grad();
           cross_entropy((*model)(x), y).backward();
           z->step();
         },
         [=, &bytes] {
           return std::array<int64_t, 3>{bytes(m->parameters()), z->local_grad_bytes(), z->local_state_bytes()};
         }});
  }
  // FSDP, every layer with parameters a unit
  auto m_fsdp = std::make_shared<nn::models::SmallCNN>();
  std::vector<std::string> units;
  for (auto& [path, mod] : m_fsdp->named_modules()) {
    if (!path.empty() && !mod->named_parameters(false).empty()) units.push_back(path);
  }
  dist::FSDP fsdp(m_fsdp, pg, {.units = units});
  optim::Adam opt_fsdp(fsdp.named_parameters(), {.lr = 1e-3});
  variants.push_back({"FSDP (ZeRO-3, per layer)",
                      [&] {
                        opt_fsdp.zero_grad();
                        cross_entropy(fsdp(x), y).backward();
                        opt_fsdp.step();
                      },
                      [&] {
                        const dist::FSDPMemory mem = fsdp.memory();
                        return std::array<int64_t, 3>{mem.shard_params + mem.gathered_params + mem.replicated,
                                                      mem.shard_grads + mem.full_grads, state_bytes(opt_fsdp)};
                      }});
  for (Variant& v : variants) v.step();  // warm-up, and the optimizers' state exists
  fsdp.reset_peak();
  for (int round = 0; round < 15; ++round) {
    for (Variant& v : variants) {
      pg->barrier()->wait();
      const double t0 = bench::now_s();
      v.step();
      v.ms.push_back(1e3 * (bench::now_s() - t0));
    }
  }
  if (rank == 0) {
    std::printf(
        "\n== SmallCNN step, batch %lld per rank, %d ranks: DDP vs ZeRO-1 vs ZeRO-2 vs FSDP (rank 0's bytes between "
        "steps; the steps interleaved)\n",
        (long long)local, world);
    std::printf("%-28s %9s %7s %10s %10s %10s %10s %7s\n", "", "ms/step", "vs DDP", "params MB", "grads MB", "state MB",
                "total MB", "vs DDP");
    double ddp_ms = 0, ddp_total = 0;
    for (Variant& v : variants) {
      std::sort(v.ms.begin(), v.ms.end());
      const double ms = v.ms[v.ms.size() / 2];
      const std::array<int64_t, 3> h = v.held();
      const double total = double(h[0] + h[1] + h[2]);
      if (ddp_ms == 0) {
        ddp_ms = ms;
        ddp_total = total;
      }
      std::printf("%-28s %9.1f %7.2f %10.2f %10.2f %10.2f %10.2f %7.2f\n", v.name, ms, ms / ddp_ms, double(h[0]) / 1e6,
                  double(h[1]) / 1e6, double(h[2]) / 1e6, total / 1e6, total / ddp_total);
    }
    std::printf(
        "(1/N of DDP: %.3f; FSDP's transient peak within a step, gathered layers and gradient staging: %.2f MB)\n",
        1.0 / world, double(fsdp.memory().peak_transient) / 1e6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::ProcessGroupPtr pg = dist::init_process_group();
  omp_set_num_threads(1);
  int64_t batch = 128, max_bytes = int64_t(64) << 20;
  bool only_allreduce = false, only_sharded = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) batch = std::stoll(argv[++i]);
    if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::stoll(argv[++i]);
    if (a == "--allreduce-only") only_allreduce = true;
    if (a == "--sharded-only") only_sharded = true;  // section 5 alone
  }
  if (pg->size() != 2 && pg->rank() == 0) std::printf("note: written for 2 ranks, running on %d\n", pg->size());
  if (only_sharded) {
    zero2_section(pg, batch);
  } else {
    allreduce_section(*pg, max_bytes);
    if (!only_allreduce) {
      scaling_section(pg, batch);
      zero_section(pg);
      zero2_section(pg, batch);
    }
  }
  pg.reset();
  dist::destroy_process_group();
  return 0;
}
