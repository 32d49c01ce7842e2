// tests/dist/test_pipeline.cpp: dist::Pipeline on 2 ranks (tests/dist/run.sh): GPipe and 1F1B
// against the same model trained in one process on the same micro-batches (F64 to 1e-12), a
// rank that holds placeholders for the other stage, 1F1B's activation memory below GPipe's
// (the allocator's peak), the balancers, and the errors: bad options on one or all ranks, a
// batch that does not split, a stage that cannot take its input's shape, a bad target, each an
// error on both ranks at once that leaves the group usable. The dead-rank case is a process of
// its own (tests/dist/fault_child.cpp, `pipeline_kill`).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "dist/pipeline.h"
#include "dist/process_group.h"
#include "engine/allocator.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;

namespace {

dist::ProcessGroupPtr pg() { return dist::world(); }

std::shared_ptr<nn::Sequential> make_model(DType dt = DType::F64) {
  manual_seed(42);  // the same weights on every rank and in the reference
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 4)});
  m->to(dt);
  return m;
}

Tensor mse(const Tensor& out, const Tensor& target) { return mse_loss(out, target); }

// The reference: one process, the same micro-batches, each loss / m, accumulated, then a step.
double reference_step(nn::Sequential& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y, int64_t m) {
  opt.zero_grad();
  const int64_t rows = x.size(0) / m;
  double loss = 0;
  for (int64_t k = 0; k < m; ++k) {
    Tensor l = mse(model(narrow(x, 0, k * rows, rows)), narrow(y, 0, k * rows, rows));
    loss += l.item<double>();
    (l * (1.0 / double(m))).backward();
  }
  opt.step();
  return loss / double(m);
}

double rel(double a, double b) { return std::abs(a - b) / (1 + std::abs(b)); }

// Largest difference between the named tensors of `got` and the same names in `want`.
double max_diff(const nn::NamedTensors& got, nn::Module& want) {
  std::map<std::string, Tensor> ref;
  for (auto& [k, t] : want.named_parameters()) ref[k] = t;
  double worst = 0;
  for (const auto& [k, t] : got) {
    REQUIRE(ref.count(k) == 1);
    const auto a = t.to_vector<double>(), b = ref[k].to_vector<double>();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, rel(a[i], b[i]));
  }
  return worst;
}

// Trains `pipe` and the reference side by side for `steps` steps; returns the largest weight
// difference on this rank's stage and checks the reported losses.
double train_both(dist::Pipeline& pipe, nn::Sequential& ref, int steps, int64_t batch) {
  optim::SGD opt(pipe.named_parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_ref(ref.named_parameters(), {.lr = 0.1, .momentum = 0.9});
  manual_seed(7);
  for (int step = 0; step < steps; ++step) {
    Tensor x = cast(randn({batch, 8}), DType::F64), y = cast(randn({batch, 4}), DType::F64);
    const double want = reference_step(ref, opt_ref, x, y, pipe.options().micro_batches);
    opt.zero_grad();
    const Tensor loss = pipe.train_step(x, y, mse);
    opt.step();
    REQUIRE(loss.dim() == 0);
    REQUIRE(loss.dtype() == DType::F64);
    REQUIRE(rel(loss.item<double>(), want) < 1e-12);  // on every rank, not only the last stage
  }
  return max_diff(pipe.named_parameters(), ref);
}

// What every rank saw: true when `ok` holds on all of them.
bool all_ranks(bool ok) {
  Tensor t = from_vector({ok ? 1.0 : 0.0}, {1}, DType::I32);
  pg()->allreduce(t, dist::ReduceOp::Min)->wait();
  return t.item<int>() == 1;
}

}  // namespace

TEST_CASE("pipeline: GPipe and 1F1B on 2 ranks train to one process's weights (F64 to 1e-12)") {
  const int me = pg()->rank();
  for (dist::Schedule sched : {dist::Schedule::GPipe, dist::Schedule::OneFOneB}) {
    for (int64_t m : {1, 3, 4}) {
      const std::string name = dist::schedule_name(sched);
      CAPTURE(name);
      CAPTURE(m);
      auto model = make_model();
      auto ref = make_model();
      const auto initial = make_model()->named_parameters();
      dist::Pipeline pipe(model, pg(), {.schedule = sched, .micro_batches = m, .split_points = {3}});
      CHECK(pipe.num_stages() == 2);
      CHECK(pipe.stage() == me);
      CHECK(pipe.first_layer() == (me == 0 ? 0 : 3));
      CHECK(pipe.end_layer() == (me == 0 ? 3 : 5));
      // This stage's parameters only, named as in the whole model.
      const auto named = pipe.named_parameters();
      REQUIRE(named.size() == (me == 0 ? 4u : 2u));
      CHECK(named[0].first == (me == 0 ? "0.weight" : "4.weight"));
      CHECK(train_both(pipe, *ref, 8, 12) < 1e-12);
      // The other stage's layers are never touched on this rank.
      const auto now = model->named_parameters();
      for (size_t i = 0; i < now.size(); ++i) {
        const bool local = now[i].first[0] - '0' >= pipe.first_layer() && now[i].first[0] - '0' < pipe.end_layer();
        const bool same = now[i].second.to_vector<double>() == initial[i].second.to_vector<double>();
        CHECK(same == !local);
      }
      const dist::PipelineStats& s = pipe.last_stats();
      CHECK(s.compute_s > 0);
      CHECK(s.step_s >= s.compute_s);
      CHECK(s.bubble() >= 0);
      CHECK(s.bubble() < 1);
      const int64_t want_in_flight = sched == dist::Schedule::GPipe ? m : std::min<int64_t>(m, 2 - me);
      CHECK(s.max_in_flight == want_in_flight);
    }
  }
}

TEST_CASE("pipeline: a rank may hold placeholders for the other stage's layers") {
  const int me = pg()->rank();
  auto full = make_model();
  auto ref = make_model();
  // Rank 0 keeps layers 0-1, rank 1 layers 2-4; the rest are Identity (no parameters).
  std::vector<nn::ModulePtr> layers;
  for (size_t i = 0; i < full->size(); ++i) {
    const bool local = me == 0 ? i < 2 : i >= 2;
    layers.push_back(local ? (*full)[i] : std::make_shared<nn::Identity>());
  }
  auto partial = std::make_shared<nn::Sequential>(layers);
  dist::Pipeline pipe(partial, pg(), {.micro_batches = 2, .split_points = {2}});
  CHECK(train_both(pipe, *ref, 5, 8) < 1e-12);
}

TEST_CASE("pipeline: 1F1B holds fewer micro-batches' activations than GPipe (allocator peak)") {
  const int me = pg()->rank();
  const int64_t m = 8, batch = 256;
  std::map<dist::Schedule, size_t> peak;
  for (dist::Schedule sched : {dist::Schedule::GPipe, dist::Schedule::OneFOneB}) {
    manual_seed(1);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(32, 1024), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(1024, 32)});
    model->to(DType::F64);
    dist::Pipeline pipe(model, pg(), {.schedule = sched, .micro_batches = m, .split_points = {2}});
    manual_seed(2);
    Tensor x = cast(randn({batch, 32}), DType::F64), y = cast(randn({batch, 32}), DType::F64);
    pipe.train_step(x, y, mse);  // gradients exist from here on: both runs count the same
    cpu_allocator().reset_peak();
    const size_t base = cpu_allocator().stats().allocated;
    pipe.train_step(x, y, mse);
    peak[sched] = cpu_allocator().stats().peak - base;
    CHECK(pipe.last_stats().max_in_flight == (sched == dist::Schedule::GPipe ? m : 2 - me));
  }
  MESSAGE("rank ", me, ": activation peak GPipe ", peak[dist::Schedule::GPipe] / 1024, " KiB, 1F1B ",
          peak[dist::Schedule::OneFOneB] / 1024, " KiB");
  // A micro-batch of 32 rows keeps one 1024-wide activation of 256 KiB (F64) per stage (Tanh's
  // output on stage 0, the received input on stage 1) until its backward; GPipe keeps 8, 1F1B
  // 2 on stage 0 and 1 on stage 1. The rest of the peak (backward's temporaries, the weight
  // gradients) is the same in both, so the difference is at least most of the 6 or 7 saved.
  const size_t act = 32 * 1024 * 8, saved = size_t(m - (2 - me)) * act;
  CHECK(peak[dist::Schedule::OneFOneB] < peak[dist::Schedule::GPipe]);
  CHECK(peak[dist::Schedule::GPipe] - peak[dist::Schedule::OneFOneB] >= saved * 3 / 4);
}

TEST_CASE("pipeline: the balancers split contiguously and minimize the largest stage") {
  CHECK(dist::balance({1, 1, 1, 1}, 2) == std::vector<int64_t>{2});
  CHECK(dist::balance({10, 1, 1, 1, 1, 1}, 2) == std::vector<int64_t>{1});
  CHECK(dist::balance({1, 2, 3, 4, 5, 6}, 3) == std::vector<int64_t>{3, 5});  // 6 | 9 | 6
  CHECK(dist::balance({5, 5}, 1).empty());
  CHECK(error_text([] {
          dist::balance({1, 1}, 3);
        }).find("2 layers cannot make 3 non-empty stages") != std::string::npos);
  CHECK(error_text([] { dist::balance({1, -1}, 2); }).find("layer 1 has a negative cost") != std::string::npos);
  // Parameters of make_model: 144 | 0 | 272 | 0 | 68 (+1 each): {Linear, Tanh} | {Linear, Tanh, Linear}.
  CHECK(dist::balance_by_parameters(*make_model(), 2) == std::vector<int64_t>{2});
  // By time: one heavy layer first; it gets a stage of its own, the same on both ranks.
  manual_seed(3);
  nn::Sequential timed({std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::Tanh>(),
                        std::make_shared<nn::Linear>(512, 4), std::make_shared<nn::Tanh>(),
                        std::make_shared<nn::Linear>(4, 4)});
  const std::vector<int64_t> points = dist::balance_by_time(timed, randn({128, 512}), 2, *pg());
  CHECK(points == std::vector<int64_t>{1});
  for (const Tensor& p : timed.parameters()) CHECK(!p.grad().defined());  // the timing leaves no gradients
  // A Pipeline without split points balances by parameters.
  dist::Pipeline pipe(make_model(), pg());
  CHECK(pipe.split_points() == std::vector<int64_t>{2});
  CHECK(dist::bubble_theory(2, 4) == doctest::Approx(0.2));
  CHECK(dist::bubble_theory(4, 1) == doctest::Approx(0.75));
}

TEST_CASE("pipeline: bad options are clear errors on every rank") {
  const int me = pg()->rank();
  auto e = [&](dist::PipelineOptions o) { return error_text([&] { dist::Pipeline(make_model(), pg(), o); }); };
  CHECK(e({.micro_batches = 0}).find("micro_batches must be >= 1, got 0") != std::string::npos);
  CHECK(e({.split_points = {1, 3}}).find("2 split points {1, 3} make 3 stages, but the group 'world' has 2 ranks") !=
        std::string::npos);
  CHECK(e({.split_points = {0}}).find("split points {0} must increase strictly within [1, 4]") != std::string::npos);
  CHECK(e({.split_points = {5}}).find("split points {5} must increase strictly within [1, 4]") != std::string::npos);
  CHECK(error_text([] {
          dist::Pipeline(std::make_shared<nn::Sequential>(
                             std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(2, 2)}),
                         pg());
        }).find("a Sequential of 1 layers cannot make 2 stages") != std::string::npos);
  // Ranks that disagree: both fail, each naming the other.
  const std::string d = e({.micro_batches = 3 + me});
  CHECK(d.find("disagree on micro_batches") != std::string::npos);
  // Only rank 1's options are bad: rank 0 learns it too instead of waiting.
  const std::string one = e({.split_points = {me == 1 ? int64_t(9) : int64_t(2)}});
  if (me == 1) CHECK(one.find("split points {9} must increase strictly") != std::string::npos);
  if (me == 0) CHECK(one.find("rank 1 of group 'world' rejected its options") != std::string::npos);
  CHECK(error_text([] { dist::Pipeline(nullptr, pg()); }).find("the model is null") != std::string::npos);
}

TEST_CASE("pipeline: a failure in a stage is an error on both ranks at once and the group stays usable") {
  using namespace std::chrono;
  for (dist::Schedule sched : {dist::Schedule::GPipe, dist::Schedule::OneFOneB}) {
    const std::string name = dist::schedule_name(sched);
    CAPTURE(name);
    manual_seed(5);
    Tensor x = cast(randn({8, 8}), DType::F64), y = cast(randn({8, 4}), DType::F64);
    auto timed_error = [&](auto&& f) {
      const auto t0 = steady_clock::now();
      const std::string msg = error_text(f);
      CHECK(duration<double>(steady_clock::now() - t0).count() < 5);  // not the group's 10-minute timeout
      return msg;
    };

    // Stage 1 expects 12 features; stage 0 sends 16.
    manual_seed(6);
    auto bad = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(12, 4)});
    bad->to(DType::F64);
    dist::Pipeline wrong(bad, pg(), {.schedule = sched, .micro_batches = 4, .split_points = {2}});
    const std::string shape = timed_error([&] { wrong.train_step(x, y, mse); });
    CHECK(
        shape.find("pipeline: stage 1 of 2 (rank 1) failed in the forward of micro-batch 0 on its input F64 (2, 16)") !=
        std::string::npos);
    CHECK(shape.find("Linear: input (2, 16) does not end in in_features 12") != std::string::npos);
    CHECK(all_ranks(!shape.empty()));

    dist::Pipeline pipe(make_model(), pg(), {.schedule = sched, .micro_batches = 4, .split_points = {3}});
    // A batch that does not split: stage 0 finds it, stage 1 hears of it.
    const std::string split = timed_error([&] { pipe.train_step(narrow(x, 0, 0, 6), y, mse); });
    CHECK(split.find("stage 0 of 2 (rank 0): the batch of 6 rows does not split into 4 equal micro-batches") !=
          std::string::npos);
    // A target that does not match the output: the last stage's loss fails, stage 0 hears of it.
    const Tensor y12 = cast(randn({12, 4}), DType::F64);  // 3 rows per micro-batch against 2
    const std::string target = timed_error([&] { pipe.train_step(x, y12, mse); });
    CHECK(target.find("stage 1 of 2 (rank 1) failed in the forward of micro-batch 0") != std::string::npos);
    CHECK(target.find("mse_loss") != std::string::npos);
    const std::string scalar =
        timed_error([&] { pipe.train_step(x, y, [](const Tensor& o, const Tensor&) { return o; }); });
    CHECK(scalar.find("the loss function returned Tensor(F64, cpu, (2, 4)), not a scalar") != std::string::npos);
    CHECK(all_ranks(!split.empty() && !target.empty() && !scalar.empty()));

    // Nothing was left in flight: the next step (and a collective) on the same group work.
    auto ref = make_model();
    optim::SGD opt_ref(ref->named_parameters(), {.lr = 0.1});
    const double want = reference_step(*ref, opt_ref, x, y, 4);
    CHECK(rel(pipe.train_step(x, y, mse).item<double>(), want) < 1e-12);
    CHECK(pg()->barrier()->wait());
  }
}
