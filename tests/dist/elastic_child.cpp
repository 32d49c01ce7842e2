// tests/dist/elastic_child.cpp OUT STEPS [KILL_STEP [REFERENCE]]: the program of the elastic-restart test
// (tests/dist/gloo.sh, under `brisk-run --max-restarts 1`): 2 ranks over Gloo train an MLP with
// DDP and SGD with momentum for STEPS steps, a checkpoint every 2 steps. A checkpoint is each
// rank's own file OUT/step_<n>/rank<r>.safetensors (written atomically), then a barrier, then
// rank 0 points OUT/latest at n (written atomically): `latest` only ever names a complete set.
// A run starts from the step `latest` names, if any. With KILL_STEP, in the first attempt
// (BRISK_RESTART_COUNT 0), rank 1 dies by SIGKILL in the middle of writing checkpoint KILL_STEP
// (half a file at its final path, as a non-atomic writer would leave it); rank 0 reports the
// error and exits. Rank 0 writes OUT/final.safetensors at the end: the test compares it, byte
// for byte, with an uninterrupted run's. A restart may have fewer ranks (brisk-run --min-ranks):
// DDP's state is the same on every rank, so a rank without a file of its own loads rank 0's,
// and each step's batch is re-split over the ranks there are; given REFERENCE (another run's
// final.safetensors) rank 0 prints the largest difference of its weights to it. Every event
// is a line "t=<ms since the epoch> ...".
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "dist/ddp.h"
#include "dist/process_group.h"
#include "engine/functions.h"
#include "engine/serialize.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "train/checkpoint.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

template <class... A>
void say(const char* fmt, A... a) {
  std::printf("t=%lld ", now_ms());
  std::printf(fmt, a...);
  std::printf("\n");
  std::fflush(stdout);
}

// Atomic small text file: temp, fsync (by closing a flushed stream), rename.
void write_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: elastic_child OUT STEPS [KILL_STEP]\n");
    return 2;
  }
  const fs::path out = argv[1];
  const int64_t steps = std::atoll(argv[2]), kill_step = argc > 3 ? std::atoll(argv[3]) : -1;
  const char* rc = std::getenv("BRISK_RESTART_COUNT");
  const int attempt = rc ? std::atoi(rc) : 0;
  dist::GroupOptions o;
  o.timeout = std::chrono::seconds(10);
  dist::ProcessGroupPtr pg = dist::init_from_env(dist::Backend::Gloo, Device::cpu(), o);
  const int me = pg->rank(), n = pg->size();
  manual_seed(42);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 4)});
  model->to(DType::F64);
  dist::DistributedDataParallel ddp(model, pg);
  optim::SGD opt(ddp.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  training::TrainingState st{.model = &ddp, .optimizer = &opt, .rng = false};
  int64_t start = 0;
  fs::create_directories(out);
  if (fs::exists(out / "latest")) {
    std::ifstream f(out / "latest");
    f >> start;
    const fs::path dir = out / ("step_" + std::to_string(start));
    fs::path file = dir / ("rank" + std::to_string(me) + ".safetensors");
    if (!fs::exists(file)) file = dir / "rank0.safetensors";  // a larger world saved it
    training::load_checkpoint(file.string(), st);
    say("rank %d attempt %d: resumed from the checkpoint of step %lld (%d ranks)", me, attempt, (long long)start, n);
  } else {
    say("rank %d attempt %d: starts at step 0", me, attempt);
  }
  int64_t step = start;
  try {
    const int64_t rows = 16 / n;
    for (; step < steps; ++step) {
      manual_seed(uint64_t(1000 + step));  // the step's batch, the same in every attempt
      Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
      opt.zero_grad();
      mse_loss(ddp(narrow(x, 0, me * rows, rows)), narrow(y, 0, me * rows, rows)).backward();
      opt.step();
      const int64_t done = step + 1;
      if (done % 2 != 0 || done == steps) continue;
      const fs::path dir = out / ("step_" + std::to_string(done));
      fs::create_directories(dir);
      const fs::path mine = dir / ("rank" + std::to_string(me) + ".safetensors");
      if (attempt == 0 && me == 1 && done == kill_step) {
        std::ofstream(mine) << "{\"half a checkpoint";  // a torn file where a checkpoint goes
        say("rank 1 attempt 0: killed (SIGKILL) while writing the checkpoint of step %lld", (long long)done);
        kill(getpid(), SIGKILL);
      }
      st.step = done;
      training::save_checkpoint(mine.string(), st);
      pg->barrier()->wait();  // every rank's file of this step is complete
      if (me == 0) write_atomic(out / "latest", std::to_string(done));
    }
  } catch (const Error& e) {
    say("rank %d attempt %d: error at step %lld: %s", me, attempt, (long long)step, e.what());
    return 3;
  }
  if (me == 0) {
    st.step = steps;
    training::save_checkpoint((out / "final.safetensors").string(), st);
    if (argc > 4) {
      double worst = 0;
      std::map<std::string, Tensor> mine;
      for (const auto& [k, t] : ddp.named_parameters()) mine["model." + k] = t;
      for (const auto& [k, t] : load_safetensors(argv[4]).tensors) {
        if (!mine.count(k)) continue;
        const auto a = t.to_vector<double>(), b = mine[k].to_vector<double>();
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1 + std::abs(a[i])));
      }
      say("rank 0: max difference to the reference: %.3g", worst);
    }
  }
  say("rank %d attempt %d: finished %lld steps", me, attempt, (long long)steps);
  return 0;
}
