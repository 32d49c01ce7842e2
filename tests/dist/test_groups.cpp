// tests/dist/test_groups.cpp: sub-groups and the 2-D mesh (dist::new_group,
// dist::init_device_mesh) on whatever the world is: 2 ranks in the suite, 4 in the runs that
// select `groups:*` (tests/dist/run.sh with mpirun -np 4, tests/dist/gloo.sh with brisk-run).
// A group's ranks in its order, a rank outside it getting an error that names it, calls on a
// group that never wait for ranks outside it, bad rank lists, and on 4 ranks data x pipeline
// parallelism (2 replicas x 2 stages, GPipe and 1F1B) against one process on the whole batch
// (F64 to 1e-12).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dist/pipeline.h"
#include "dist/process_group.h"
#include "engine/functions.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;

namespace {

dist::ProcessGroupPtr pg() { return dist::world(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("groups: a sub-group has its members in the given order; outsiders get a clear error") {
  const int me = pg()->rank(), n = pg()->size();
  // The world reversed: group rank i is world rank n - 1 - i.
  std::vector<int> reversed;
  for (int r = n - 1; r >= 0; --r) reversed.push_back(r);
  dist::ProcessGroupPtr rev = dist::new_group(reversed);
  CHECK(rev->rank() == n - 1 - me);
  CHECK(rev->size() == n);
  CHECK(std::string(rev->backend()) == pg()->backend());
  Tensor t = from_vector({double(me)}, {1}, DType::F64);
  rev->broadcast(t, 0)->wait();  // group rank 0 is world rank n - 1
  CHECK(t.item<double>() == n - 1);

  // A group of world rank 0 alone: rank 0 uses it while the others never call it.
  dist::ProcessGroupPtr solo = dist::new_group({0});
  CHECK(solo->options().name == "group(0)");
  Tensor x = ones({3});
  if (me == 0) {
    CHECK(solo->rank() == 0);
    for (int i = 0; i < 3; ++i) solo->allreduce(x)->wait();
    CHECK(x.to_vector<double>() == std::vector<double>(3, 1.0));
  } else {
    CHECK(solo->rank() == -1);
    const std::string e = error_text([&] { solo->allreduce(x); });
    CHECK(
        contains(e, "allreduce: rank " + std::to_string(me) + " is not a member of group 'group(0)' (world ranks 0)"));
    CHECK(contains(error_text([&] { solo->barrier(); }), "barrier: rank"));
  }
  pg()->barrier()->wait();
}

TEST_CASE("groups: bad rank lists are errors on every rank, before any communication") {
  const int n = pg()->size();
  CHECK(contains(error_text([] { dist::new_group({}); }), "new_group: no ranks for group"));
  CHECK(contains(error_text([] { dist::new_group({0, 0}); }), "rank 0 appears twice in group 'group(0,0)'"));
  CHECK(contains(error_text([n] { dist::new_group({n}); }),
                 "rank " + std::to_string(n) + " of group 'group(" + std::to_string(n) + ")' is outside the world"));
  CHECK(contains(error_text([n] { dist::init_device_mesh(3, n); }), "needs " + std::to_string(3 * n) + " ranks"));
  // The world still works (nothing was started).
  CHECK(pg()->barrier()->wait());
}

TEST_CASE("groups: a mesh's rows and columns; a row's collective does not wait for other rows") {
  const int me = pg()->rank(), n = pg()->size();
  const int rows = n / 2, cols = 2;  // n = 2: one row; n = 4: two rows
  dist::DeviceMesh m = dist::init_device_mesh(rows, cols);
  CHECK(m.row == me / cols);
  CHECK(m.col == me % cols);
  CHECK(m.row_group->rank() == m.col);
  CHECK(m.row_group->size() == cols);
  CHECK(m.col_group->rank() == m.row);
  CHECK(m.col_group->size() == rows);
  CHECK(m.row_group->options().name == "mesh.row" + std::to_string(m.row));
  // Row 0 runs 20 allreduces while the other rows wait for it on the world only at the end:
  // had a row's collective involved them, it could not complete.
  Tensor t = from_vector({double(me)}, {1}, DType::F64);
  if (m.row == 0) {
    for (int i = 0; i < 20; ++i) m.row_group->allreduce(t, dist::ReduceOp::Max)->wait();
    CHECK(t.item<double>() == cols - 1);
  }
  pg()->barrier()->wait();
  Tensor s = from_vector({double(me)}, {1}, DType::F64);
  m.col_group->allreduce(s)->wait();  // the column of col c: ranks c, c + cols, ...
  double want = 0;
  for (int i = 0; i < rows; ++i) want += i * cols + m.col;
  CHECK(s.item<double>() == want);
}

namespace {

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(42);  // the same weights on every rank and in the reference
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 4)});
  m->to(DType::F64);
  return m;
}

Tensor mse(const Tensor& out, const Tensor& target) { return mse_loss(out, target); }

}  // namespace

TEST_CASE("groups: data x pipeline parallelism on 4 ranks (2 replicas x 2 stages) equals one process (F64 1e-12)") {
  if (pg()->size() != 4) {
    MESSAGE("skipped: needs 4 ranks (tests/dist/run.sh and gloo.sh run `groups:*` on 4)");
    return;
  }
  const int64_t batch = 24;
  for (dist::Schedule sched : {dist::Schedule::GPipe, dist::Schedule::OneFOneB}) {
    const std::string name = dist::schedule_name(sched);
    CAPTURE(name);
    const int64_t m = 3;                                   // micro-batches per replica
    dist::DeviceMesh mesh = dist::init_device_mesh(2, 2);  // rows: replicas, columns: stages
    auto model = make_model();
    auto ref = make_model();
    dist::Pipeline pipe(model, mesh.row_group, {.schedule = sched, .micro_batches = m, .split_points = {3}});
    CHECK(pipe.stage() == mesh.col);
    optim::SGD opt(pipe.named_parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt_ref(ref->named_parameters(), {.lr = 0.1, .momentum = 0.9});
    manual_seed(7);
    for (int step = 0; step < 6; ++step) {
      Tensor x = cast(randn({batch, 8}), DType::F64), y = cast(randn({batch, 4}), DType::F64);
      // The reference: the whole batch as 2m micro-batches, each loss / 2m, accumulated.
      opt_ref.zero_grad();
      double want = 0;
      const int64_t rows = batch / (2 * m);
      for (int64_t k = 0; k < 2 * m; ++k) {
        Tensor l = mse((*ref)(narrow(x, 0, k * rows, rows)), narrow(y, 0, k * rows, rows));
        want += l.item<double>() / double(2 * m);
        (l * (1.0 / double(2 * m))).backward();
      }
      opt_ref.step();
      // Replica r takes rows [r * batch / 2, +batch / 2) through its pipeline, then the replicas
      // of each stage average their gradients (and the loss) over the mesh's column.
      const int64_t half = batch / 2;
      opt.zero_grad();
      Tensor loss = pipe.train_step(narrow(x, 0, mesh.row * half, half), narrow(y, 0, mesh.row * half, half), mse);
      for (Tensor& p : pipe.parameters()) {
        Tensor g = p.grad();
        mesh.col_group->allreduce(g, dist::ReduceOp::Avg)->wait();
      }
      mesh.col_group->allreduce(loss, dist::ReduceOp::Avg)->wait();
      opt.step();
      REQUIRE(std::abs(loss.item<double>() - want) < 1e-12 * (1 + std::abs(want)));
    }
    std::map<std::string, Tensor> want;
    for (auto& [k, t] : ref->named_parameters()) want[k] = t;
    double worst = 0;
    for (const auto& [k, t] : pipe.named_parameters()) {
      const auto a = t.to_vector<double>(), b = want[k].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
    }
    MESSAGE("rank " << pg()->rank() << " (" << name << "): max weight difference " << worst);
    CHECK(worst < 1e-12);
  }
}
