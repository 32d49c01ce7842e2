// examples/ddp/main.cpp: the Fashion-MNIST trainer, data-parallel. Start it with mpirun, one
// process per core (CPU, MPI) or per GPU (NCCL):
//   mpirun --mca orte_abort_on_non_zero_status 0 -np 2 build/examples/ddp [--model cnn|mlp] [--epochs N] ...
//   (that mca setting lets survivors of a dead rank report; docs/distributed.md, "When a rank dies")
// Each rank trains a replica on its shard of the data (data::DistributedSampler) with
// B / world_size samples per step, so the total batch, the learning rate and the accuracy are
// those of one process with batch B; dist::DistributedDataParallel averages the gradients
// during backward. Every rank writes its own checkpoint (<out>/checkpoint.rank<r>.safetensors:
// its generator drives its own dropout masks), so a resumed run continues bit for bit with the
// same number of ranks; rank 0 alone prints, evaluates and writes log.jsonl and the best model.
// Not here: the single-process trainer with all its options (examples/fashion_mnist).
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "dist/ddp.h"
#include "examples/fashion_mnist/checkpoint.h"
#include "examples/fashion_mnist/evaluate.h"
#include "examples/fashion_mnist/report.h"
#include "nn/models/simple.h"
#include "nn/serialize_module.h"
#include "optim/optim.h"

using namespace brisk;
using namespace fashion_mnist;

namespace {

struct Args {
  std::string model = "cnn", data = data::FashionMNIST::kDefaultRoot, out = "runs/ddp";
  int64_t epochs = 5, batch_size = 128, limit = 0;
  bool resume = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--model")
      a.model = next();
    else if (k == "--data")
      a.data = next();
    else if (k == "--out")
      a.out = next();
    else if (k == "--epochs")
      a.epochs = std::stoll(next());
    else if (k == "--batch-size")
      a.batch_size = std::stoll(next());
    else if (k == "--limit")
      a.limit = std::stoll(next());
    else if (k == "--resume")
      a.resume = true;
    else
      throw std::runtime_error("unknown option " + k);
  }
  if (a.model != "cnn" && a.model != "mlp") throw std::runtime_error("--model: cnn or mlp");
  if (a.epochs < 1 || a.batch_size < 1 || a.limit < 0) throw std::runtime_error("--epochs, --batch-size: positive");
  return a;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int run(const Args& a) {
  dist::ProcessGroupPtr pg = dist::init_process_group();
  const int rank = pg->rank(), world = pg->size();
  if (a.batch_size % world != 0) throw std::runtime_error("--batch-size must be a multiple of the number of ranks");
  omp_set_num_threads(1);  // one core per rank
  std::filesystem::create_directories(a.out);
  const std::string ckpt = a.out + "/checkpoint.rank" + std::to_string(rank) + ".safetensors";

  auto full = std::make_shared<data::FashionMNIST>(a.data, /*train=*/true);
  data::DatasetPtr train = full;
  if (a.limit > 0 && a.limit < full->size()) {
    std::vector<int64_t> first(size_t(a.limit));
    for (int64_t i = 0; i < a.limit; ++i) first[size_t(i)] = i;
    train = std::make_shared<data::Subset>(full, first);
  }
  data::LoaderOptions o;
  o.batch_size = a.batch_size / world;
  o.sampler = std::make_shared<data::DistributedSampler>(train->size(), world, rank, /*shuffle=*/true, /*seed=*/0);
  o.num_workers = 1;
  o.persistent_workers = true;
  o.transform = data::Compose({data::to_tensor(), data::normalize({0.2860}, {0.3530})});
  data::DataLoader loader(train, o);
  data::LoaderOptions eo = o;
  eo.sampler = nullptr;
  eo.batch_size = 256;
  data::DataLoader test(std::make_shared<data::FashionMNIST>(a.data, /*train=*/false), eo);

  manual_seed(0);  // the same initial weights everywhere (DDP broadcasts rank 0's anyway)
  std::shared_ptr<nn::Module> model;
  if (a.model == "cnn") {
    model = std::make_shared<nn::models::SmallCNN>();
  } else {
    model = std::make_shared<nn::models::MLP>(std::vector<int64_t>{784, 256, 128, 10});
  }
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, pg);
  optim::Adam opt(ddp->named_parameters(), {.lr = 1e-3});
  optim::GradScaler scaler({.enabled = false});
  manual_seed(1000 + uint64_t(rank));  // each rank's own dropout stream
  TrainState st;
  st.config = {{"model", a.model}, {"batch_size", std::to_string(a.batch_size)}, {"world", std::to_string(world)}};
  if (a.resume) st = load_checkpoint(ckpt, *ddp, opt, nullptr, scaler, loader, st.config);
  if (rank == 0) {
    std::printf("ddp: %s on %d ranks, batch %lld (%lld per rank), %lld train samples%s\n", a.model.c_str(), world,
                (long long)a.batch_size, (long long)o.batch_size, (long long)train->size(),
                a.resume ? ", resumed" : "");
  }
  while (st.epochs_done < a.epochs) {
    const double t0 = now_s();
    double loss_sum = 0;
    int64_t batches = 0;
    ddp->train();
    while (auto b = loader.next()) {
      Tensor loss = cross_entropy((*ddp)(b->input), b->target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    Tensor mean = from_vector({loss_sum / double(batches)}, {1}, DType::F64);
    pg->allreduce(mean, dist::ReduceOp::Avg)->wait();
    pg->barrier()->wait();
    EpochRecord r;
    r.epoch = ++st.epochs_done;
    r.seconds = now_s() - t0;
    r.train_loss = mean.item<double>();
    r.samples_per_s = double(train->size()) / r.seconds;
    r.lr = opt.lr(0);
    if (rank == 0) {
      const EvalResult ev = evaluate(*ddp, test);
      r.test_loss = ev.loss;
      r.test_acc = ev.acc;
      if (ev.acc > st.best_acc) {
        st.best_acc = ev.acc;
        nn::save_module(*model, a.out + "/best.safetensors", {{"model", a.model}});
      }
      std::printf("epoch %lld: train loss %.4f | test accuracy %.2f%% | %.1f s, %.0f samples/s\n", (long long)r.epoch,
                  r.train_loss, 100 * r.test_acc, r.seconds, r.samples_per_s);
      std::fflush(stdout);
    }
    st.history.push_back(r);
    save_checkpoint(ckpt, *ddp, opt, nullptr, scaler, loader, st);
    if (rank == 0) write_file_atomic(a.out + "/log.jsonl", log_jsonl(st.history));
    pg->barrier()->wait();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int rc = run(parse(argc, argv));
    dist::destroy_process_group();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp: error: %s\n", e.what());
    return 1;
  }
}
