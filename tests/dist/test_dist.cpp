// tests/dist/test_dist.cpp: dist/ on 2 ranks (tests/dist/run.sh starts it with mpirun -np 2,
// tests/dist/gloo.sh with brisk-run over Gloo; every rank runs every case, and a failure on any
// rank fails the run). Every collective and dtype against the arithmetic, the errors users meet,
// DDP against one process on the full batch (F64 and F32), overlap from recorded timestamps,
// no_sync against accumulation, unused parameters, ZeRO-1 against plain Adam, ZeRO-2 against
// DDP, and ZeRO's sharded checkpoints across world sizes. The fault and mismatch cases are
// processes of their own (tests/dist/fault_child.cpp).
#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dist/ddp.h"
#include "dist/process_group.h"
#include "dist/zero.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/dist/values.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::rank_tensor;
using brisk::test::reduced_value;

namespace {

dist::ProcessGroupPtr pg() { return dist::world(); }
bool on_gloo() { return std::string(pg()->backend()) == "gloo"; }

}  // namespace

TEST_CASE("dist: the world has 2 ranks") {
  CHECK(pg()->size() == 2);
  CHECK(pg()->rank() == dist::launch_info().rank);
  const char* want = std::getenv("BRISK_TEST_BACKEND");
  CHECK(std::string(pg()->backend()) == (want && *want ? want : "mpi"));
  if (on_gloo()) {  // started by brisk-run: MPI never ran in this process
    int mpi_started = 1;
    MPI_Initialized(&mpi_started);
    CHECK(mpi_started == 0);
  }
}

TEST_CASE("dist: allreduce of every op and dtype equals the arithmetic") {
  const int me = pg()->rank(), n = pg()->size();
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Min, dist::ReduceOp::Max,
                              dist::ReduceOp::Product}) {
      if (op == dist::ReduceOp::Avg && !is_floating(dt)) continue;
      CAPTURE(dt);
      CAPTURE(dist::reduce_op_name(op));
      Tensor t = rank_tensor(dt, 1000, me);
      dist::WorkPtr w = pg()->allreduce(t, op);
      CHECK(w->wait());
      CHECK(w->is_completed());
      const std::vector<double> got = t.to_vector<double>();
      for (int64_t i = 0; i < 1000; ++i) REQUIRE(got[size_t(i)] == reduced_value(op, i, n));
    }
  }
}

TEST_CASE("dist: broadcast, allgather, reduce_scatter, barrier, send and recv") {
  const int me = pg()->rank(), n = pg()->size();
  Tensor b = rank_tensor(DType::F32, 7, me);
  pg()->broadcast(b, 1)->wait();
  CHECK(b.to_vector<double>() == rank_tensor(DType::F32, 7, 1).to_vector<double>());

  std::vector<Tensor> list;
  for (int r = 0; r < n; ++r) list.push_back(zeros({3}, DType::I64));
  pg()->allgather(list, rank_tensor(DType::I64, 3, me))->wait();
  for (int r = 0; r < n; ++r)
    CHECK(list[size_t(r)].to_vector<double>() == rank_tensor(DType::I64, 3, r).to_vector<double>());
  Tensor all = zeros({n, 3}, DType::BF16);
  pg()->allgather_into_tensor(all, rank_tensor(DType::BF16, 3, me))->wait();
  CHECK(all.to_vector<double>() == std::vector<double>{1, 2, 3, 2, 4, 6});

  Tensor out = zeros({4}, DType::F64);
  pg()->reduce_scatter(out, rank_tensor(DType::F64, 8, me), dist::ReduceOp::Sum)->wait();
  for (int64_t i = 0; i < 4; ++i)
    CHECK(out.to_vector<double>()[size_t(i)] == reduced_value(dist::ReduceOp::Sum, 4 * me + i, n));

  CHECK(pg()->barrier()->wait());

  // Both ranks send first, then receive: sends do not block the receive behind them.
  Tensor mine = rank_tensor(DType::F32, 100000, me), theirs = zeros({100000});
  const int peer = 1 - me;
  dist::WorkPtr s = pg()->send(mine, peer, 7);
  dist::WorkPtr r = pg()->recv(theirs, peer, 7);
  r->wait();
  s->wait();
  CHECK(theirs.to_vector<double>() == rank_tensor(DType::F32, 100000, peer).to_vector<double>());
}

TEST_CASE("dist: bad tensors and arguments are clear errors") {
  Tensor strided = slice(zeros({8}), 0, 0, 8, 2);
  CHECK(error_text([&] { pg()->allreduce(strided); }).find("is not contiguous") != std::string::npos);
  Tensor u8 = zeros({4}, DType::U8);
  CHECK(error_text([&] {
          pg()->allreduce(u8);
        }).find(on_gloo() ? "the Gloo backend has no dtype U8" : "the MPI backend has no dtype U8") !=
        std::string::npos);
  Tensor i32 = zeros({4}, DType::I32);
  CHECK(error_text([&] { pg()->allreduce(i32, dist::ReduceOp::Avg); }).find("avg needs a floating dtype") !=
        std::string::npos);
  Tensor f = zeros({4});
  CHECK(error_text([&] { pg()->broadcast(f, 5); }).find("root rank 5 is outside the group 'world' of 2") !=
        std::string::npos);
  std::vector<Tensor> one = {zeros({4})};
  CHECK(error_text([&] { pg()->allgather(one, f); }).find("1 output tensors for a group of 2") != std::string::npos);
  Tensor wrong = zeros({3});
  CHECK(error_text([&] { pg()->reduce_scatter(wrong, f); }).find("needs 2 x 3 elements") != std::string::npos);
  CHECK(error_text([] {
          dist::init_process_group(dist::Backend::Mpi, Device::cuda());
        }).find(on_gloo() ? "joined its job through init_from_env" : "takes CPU tensors") != std::string::npos);
  if (on_gloo()) {
    CHECK(error_text([] {
            dist::init_from_env(dist::Backend::Gloo, Device::cuda());
          }).find("the Gloo backend takes CPU tensors") != std::string::npos);
    CHECK(error_text([] { dist::init_from_env(dist::Backend::Mpi); }).find("joins its job through mpirun") !=
          std::string::npos);
  } else {
    CHECK(error_text([] { dist::init_from_env(); }).find("already started MPI") != std::string::npos);
  }
}

TEST_CASE("dist: init_process_group(Gloo) gives a Gloo group of the world (beside MPI's under mpirun)") {
  if (!dist::is_gloo_available()) return;
  const int me = pg()->rank(), n = pg()->size();
  dist::ProcessGroupPtr g = dist::init_process_group(dist::Backend::Gloo);
  CHECK(std::string(g->backend()) == "gloo");
  CHECK(g->rank() == me);
  CHECK(g->size() == n);
  Tensor t = rank_tensor(DType::F64, 100, me);
  g->allreduce(t)->wait();
  for (int64_t i = 0; i < 100; ++i)
    REQUIRE(t.to_vector<double>()[size_t(i)] == reduced_value(dist::ReduceOp::Sum, i, n));
  g->shutdown();
}

// ---- DDP

namespace {

std::shared_ptr<nn::Sequential> make_mlp(DType dt) {
  manual_seed(42);  // the same weights in every replica and in the reference
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 4)});
  m->to(dt);
  return m;
}

double max_diff(nn::Module& a, nn::Module& b) {
  double worst = 0;
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].second.to_vector<double>(), vb = pb[i].second.to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]) / (1 + std::abs(vb[k])));
  }
  return worst;
}

}  // namespace

TEST_CASE("ddp: 2 ranks over 20 steps equal 1 process on the full batch (F64 to 1e-12, F32 to 1e-6)") {
  const int me = pg()->rank(), n = pg()->size();
  for (DType dt : {DType::F64, DType::F32}) {
    CAPTURE(dt);
    auto ref = make_mlp(dt);
    auto replica = make_mlp(dt);
    {  // a different local init: the constructor's broadcast must replace it
      NoGradGuard no_grad;
      if (me == 1) replica->named_parameters()[0].second.fill_(0.123);
    }
    dist::DistributedDataParallel ddp(replica, pg(), {.bucket_cap_mb = 0.0005});  // several buckets
    CHECK(ddp.num_buckets() > 1);
    CHECK(ddp.state_dict()[0].first == "0.weight");  // the module's own names
    optim::SGD opt_ref(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    manual_seed(7);
    for (int step = 0; step < 20; ++step) {
      Tensor x = cast(randn({16, 8}), dt), y = cast(randn({16, 4}), dt);
      opt_ref.zero_grad();
      mse_loss((*ref)(x), y).backward();
      opt_ref.step();
      opt.zero_grad();
      const int64_t half = 16 / n;
      mse_loss(ddp(narrow(x, 0, me * half, half)), narrow(y, 0, me * half, half)).backward();
      opt.step();
    }
    const double diff = max_diff(*replica, *ref);
    MESSAGE("ddp " << (dt == DType::F64 ? "F64" : "F32") << " on " << n << " ranks (" << std::string(pg()->backend())
                   << "): max weight difference " << diff);
    CHECK(diff < (dt == DType::F64 ? 1e-12 : 1e-6));
    // Overlap: the first bucket was started before backward had finished.
    const dist::SyncStats& s = ddp.last_sync();
    REQUIRE(s.bucket_launch_ns.size() == ddp.num_buckets());
    CHECK(s.bucket_launch_ns.front() < s.backward_end_ns);
    CHECK(s.backward_end_ns <= s.synced_ns);
  }
}

TEST_CASE("ddp: no_sync then a synced backward equals accumulating the full batch") {
  const int me = pg()->rank();
  auto ref = make_mlp(DType::F64);
  auto replica = make_mlp(DType::F64);
  dist::DistributedDataParallel ddp(replica, pg());
  manual_seed(3);
  Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
  // Reference: 2 micro-batches of 8 on one process, loss / 2 each, accumulated.
  for (int k = 0; k < 2; ++k) (mse_loss((*ref)(narrow(x, 0, 8 * k, 8)), narrow(y, 0, 8 * k, 8)) * 0.5).backward();
  // DDP: each rank's micro-batch k is rows [8k + 4 me, +4); the first under no_sync.
  {
    auto guard = ddp.no_sync();
    (mse_loss(ddp(narrow(x, 0, 4 * me, 4)), narrow(y, 0, 4 * me, 4)) * 0.5).backward();
  }
  (mse_loss(ddp(narrow(x, 0, 8 + 4 * me, 4)), narrow(y, 0, 8 + 4 * me, 4)) * 0.5).backward();
  const auto a = ddp.named_parameters(), b = ref->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const auto ga = a[i].second.grad().to_vector<double>(), gb = b[i].second.grad().to_vector<double>();
    for (size_t k = 0; k < ga.size(); ++k) REQUIRE(std::abs(ga[k] - gb[k]) < 1e-12 * (1 + std::abs(gb[k])));
  }
}

TEST_CASE("ddp: a parameter without a gradient is named, or zero with find_unused_parameters") {
  struct TwoHeads : nn::Module {
    TwoHeads() : nn::Module("TwoHeads") {
      a = register_module("used", std::make_shared<nn::Linear>(4, 2));
      b = register_module("unused", std::make_shared<nn::Linear>(4, 2));
    }
    Tensor forward(const Tensor& x) override { return (*a)(x); }
    std::shared_ptr<nn::Linear> a, b;
  };
  {
    dist::DistributedDataParallel ddp(std::make_shared<TwoHeads>(), pg());
    const std::string e = error_text([&] { sum(ddp(ones({3, 4}))).backward(); });
    CHECK(e.find("'unused.weight'") != std::string::npos);
    CHECK(e.find("find_unused_parameters") != std::string::npos);
  }
  CHECK(error_text([] {
          dist::DistributedDataParallel(std::make_shared<TwoHeads>(), pg(), {.bucket_cap_mb = 1e300});
        }).find("bucket_cap_mb must be in (0, 1e6]") != std::string::npos);
  pg()->barrier()->wait();
  auto model = std::make_shared<TwoHeads>();
  dist::DistributedDataParallel ddp(model, pg(), {.find_unused_parameters = true});
  sum(ddp(ones({3, 4}))).backward();
  CHECK(model->b->weight().grad().defined());
  CHECK(sum(abs(model->b->weight().grad())).item<double>() == 0);
  CHECK(model->a->weight().grad().to_vector<double>()[0] == doctest::Approx(3.0));
}

TEST_CASE("zero: ZeRO-1 over Adam ends with plain Adam's weights, each rank holding about half the state") {
  const int me = pg()->rank(), n = pg()->size();
  auto ref = make_mlp(DType::F64);
  auto replica = make_mlp(DType::F64);
  dist::DistributedDataParallel ddp(replica, pg());
  optim::Adam plain(ref->named_parameters(), {.lr = 1e-2});
  dist::ZeroRedundancyOptimizer zero(ddp.named_parameters(), pg(), [](optim::NamedTensors p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-2});
  });
  manual_seed(11);
  for (int step = 0; step < 10; ++step) {
    Tensor x = cast(randn({8, 8}), DType::F64), y = cast(randn({8, 4}), DType::F64);
    plain.zero_grad();
    mse_loss((*ref)(x), y).backward();
    plain.step();
    zero.zero_grad();
    mse_loss(ddp(narrow(x, 0, 4 * me, 4)), narrow(y, 0, 4 * me, 4)).backward();
    zero.step();
  }
  CHECK(max_diff(*replica, *ref) < 1e-12);
  int64_t full = 0;
  for (const auto& [k, t] : plain.state_dict().tensors) full += t.numel() * int64_t(t.element_size());
  Tensor mine = from_vector({double(zero.local_state_bytes())}, {1}, DType::F64);
  pg()->allreduce(mine, dist::ReduceOp::Sum)->wait();
  // Each rank holds half of the (padded) flat state: 212 elements, 106 per rank.
  CHECK(mine.item<double>() == double(full));
  CHECK(zero.local_state_bytes() * n == full);
  CHECK(zero.owner("0.weight") != zero.owner("2.weight"));  // the two big matrices split
}

TEST_CASE("zero: ZeRO-2 over Adam equals DDP + Adam over 20 steps (F64 1e-12), holding 1/N of gradients and state") {
  const int me = pg()->rank(), n = pg()->size();
  auto ddp_model = make_mlp(DType::F64);
  auto z_model = make_mlp(DType::F64);
  {  // a different local init: ZeRO-2's constructor must replace it with rank 0's, as DDP does
    NoGradGuard no_grad;
    if (me == 1) z_model->named_parameters()[0].second.fill_(0.123);
  }
  dist::DistributedDataParallel ddp(ddp_model, pg());
  optim::Adam adam(ddp.named_parameters(), {.lr = 1e-2});
  dist::ZeroRedundancyOptimizer zero(
      z_model->named_parameters(), pg(),
      [](optim::NamedTensors p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-2}); },
      {.stage = 2});
  CHECK(zero.stage() == 2);
  const int64_t rows = 16 / n;
  manual_seed(13);
  for (int step = 0; step < 20; ++step) {
    Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
    Tensor xs = narrow(x, 0, me * rows, rows), ys = narrow(y, 0, me * rows, rows);
    adam.zero_grad();
    mse_loss(ddp(xs), ys).backward();
    adam.step();
    zero.zero_grad();
    // Two half micro-batches, loss / 2 each: the shard accumulates over both backwards.
    for (int k = 0; k < 2; ++k) {
      (mse_loss((*z_model)(narrow(xs, 0, k * rows / 2, rows / 2)), narrow(ys, 0, k * rows / 2, rows / 2)) * 0.5)
          .backward();
      // After each backward only the shard is left: the parameters' gradients were freed.
      for (const auto& [name, p] : z_model->named_parameters()) REQUIRE(!p.grad().defined());
    }
    zero.step();
  }
  const double diff = max_diff(*z_model, *ddp_model);
  MESSAGE("ZeRO-2 against DDP on " << n << " ranks: max weight difference " << diff);
  CHECK(diff < 1e-12);
  // Memory per rank: parameters + gradients + optimizer state, against DDP's (unsharded).
  int64_t params = 0, ddp_grads = 0, ddp_state = 0;
  for (const auto& [k, p] : ddp_model->named_parameters()) {
    params += p.numel() * 8;
    ddp_grads += p.grad().numel() * 8;
  }
  for (const auto& [k, t] : adam.state_dict().tensors) ddp_state += t.numel() * int64_t(t.element_size());
  const int64_t z_total = params + zero.local_grad_bytes() + zero.local_state_bytes();
  const int64_t d_total = params + ddp_grads + ddp_state;
  MESSAGE("rank " << me << " of " << n << ": params " << params << " B, gradients " << zero.local_grad_bytes()
                  << " B (DDP " << ddp_grads << "), optimizer state " << zero.local_state_bytes() << " B (DDP "
                  << ddp_state << "): " << z_total << " B against " << d_total << " B");
  const int64_t shard_elems = (params / 8 + n - 1) / n;
  CHECK(zero.local_grad_bytes() == shard_elems * 8);                  // the shard only
  CHECK(zero.local_state_bytes() * n <= ddp_state + 2 * 8 * n + 64);  // 1/N of Adam's state (padding aside)
  CHECK(error_text([] {
          dist::ZeroRedundancyOptimizer(make_mlp(DType::F64)->named_parameters(), pg(), nullptr, {.stage = 3});
        }).find("stage must be 1 or 2, got 3") != std::string::npos);
}

TEST_CASE("zero: a sharded checkpoint saved on N ranks loads on 1 rank, and one saved on 1 loads on N (F64 1e-12)") {
  const int me = pg()->rank(), n = pg()->size();
  // One folder for every rank: rank 0's process id names it.
  Tensor id = from_vector({double(getpid())}, {1}, DType::I64);
  pg()->broadcast(id, 0)->wait();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("brisk_zero_ckpt_" + std::to_string(id.item<int64_t>()));
  auto make_zero = [](nn::Module& m, dist::ProcessGroupPtr g) {
    return std::make_unique<dist::ZeroRedundancyOptimizer>(
        m.named_parameters(), g,
        [](optim::NamedTensors p) {
          return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-2});
        },
        dist::ZeroOptions{.stage = 2});
  };
  // Step s of a run on `ranks` ranks, this rank being `r` of them: its rows of batch s.
  auto train = [](nn::Module& m, dist::ZeroRedundancyOptimizer& z, int from, int to, int r, int ranks) {
    for (int s = from; s < to; ++s) {
      manual_seed(uint64_t(500 + s));
      Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
      const int64_t rows = 16 / ranks;
      z.zero_grad();
      mse_loss(m(narrow(x, 0, r * rows, rows)), narrow(y, 0, r * rows, rows)).backward();
      z.step();
    }
  };
  auto copy_params = [](nn::Module& to, const std::vector<Tensor>& from) {
    NoGradGuard no_grad;
    auto p = to.parameters();
    for (size_t i = 0; i < p.size(); ++i) p[i].copy_(from[i]);
  };
  auto snapshot = [](nn::Module& m) {
    std::vector<Tensor> out;
    for (const Tensor& p : m.parameters()) out.push_back(p.clone());
    return out;
  };
  // A: n ranks, 20 steps, a sharded checkpoint after 10.
  auto a = make_mlp(DType::F64);
  auto za = make_zero(*a, pg());
  train(*a, *za, 0, 10, me, n);
  za->save_sharded((dir / "a").string());
  const std::vector<Tensor> w10 = snapshot(*a);
  train(*a, *za, 10, 20, me, n);
  // B: rank 0 alone (a group of one) resumes A's checkpoint of step 10, saves its own at 15.
  dist::ProcessGroupPtr solo = dist::new_group({0});
  std::vector<Tensor> w15;
  auto b = make_mlp(DType::F64);
  if (me == 0) {
    copy_params(*b, w10);
    auto zb = make_zero(*b, solo);
    zb->load_sharded((dir / "a").string());
    train(*b, *zb, 10, 15, 0, 1);
    zb->save_sharded((dir / "b").string());
    w15 = snapshot(*b);
    train(*b, *zb, 15, 20, 0, 1);
    CHECK(max_diff(*b, *a) < 1e-12);
  }
  pg()->barrier()->wait();
  // C: n ranks resume B's one-rank checkpoint of step 15 (its weights from rank 0).
  auto c = make_mlp(DType::F64);
  if (me == 0) copy_params(*c, w15);
  for (Tensor& p : c->parameters()) pg()->broadcast(p, 0)->wait();
  auto zc = make_zero(*c, pg());
  zc->load_sharded((dir / "b").string());
  train(*c, *zc, 15, 20, me, n);
  const double diff_c = max_diff(*c, *a);
  MESSAGE("ZeRO-2 resumed " << n << " -> 1 -> " << n << " ranks: max weight difference " << diff_c);
  CHECK(diff_c < 1e-12);
  CHECK(error_text([&] { zc->load_sharded((dir / "nothing").string()); }).find("zero.rank0.safetensors") !=
        std::string::npos);
  pg()->barrier()->wait();
  if (me == 0) std::filesystem::remove_all(dir);
}
