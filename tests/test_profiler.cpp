// tests/test_profiler.cpp: the profiler (engine/profiler.h) on one known training step: every
// op of the step is recorded with its shapes, dtypes and device; backward nodes are linked to
// the forward ops that made them; user ranges nest the ops they contain and self times add
// up; the Chrome trace JSON has the structure Perfetto reads (complete events with
// name/ph/ts/dur/pid/tid, flow pairs); no events are recorded outside a run; one run at a time;
// the fused optimizer step, the gradient unscale and the int8 ops are op events like any other.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "brisk.h"
#include "compress/quantize.h"
#include "engine/profiler.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/models/simple.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"

using namespace brisk;
namespace prof = brisk::profiler;

namespace {

struct Step {
  nn::Linear fc{8, 4};
  std::unique_ptr<optim::SGD> opt = std::make_unique<optim::SGD>(fc.parameters(), optim::SGDOptions{.lr = 0.1});
  Tensor x = randn({16, 8});
  Tensor y = zeros({16}, DType::I64);
  void run() {
    Tensor loss;
    {
      prof::RecordFunction r("forward");
      loss = nn::functional::cross_entropy(fc.forward(x), y);
    }
    {
      prof::RecordFunction r("backward");
      opt->zero_grad();
      loss.backward();
    }
    prof::RecordFunction r("optimizer");
    opt->step();
  }
};

// The names of the events of one kind, with repeats.
std::multiset<std::string> names_of(const prof::Profile& p, prof::EventKind kind) {
  std::multiset<std::string> out;
  for (const auto& e : p.events()) {
    if (e.kind == kind) out.insert(e.name);
  }
  return out;
}

}  // namespace

TEST_CASE("profiler: a training step's ops, ranges and backward links") {
  Step step;
  step.run();  // warm: optimizer state and caches
  prof::Profiler profiler;
  step.run();
  prof::Profile p = profiler.stop();
  REQUIRE(!p.events().empty());

  auto ranges = names_of(p, prof::EventKind::Range);
  CHECK(ranges == std::multiset<std::string>{"backward", "forward", "optimizer"});
  // Linear's matmul and cross-entropy run in the forward range; their backward nodes later.
  const prof::Event* forward = nullptr;
  for (const auto& e : p.events()) {
    if (e.kind == prof::EventKind::Range && e.name == "forward") forward = &e;
  }
  REQUIRE(forward);
  CHECK(forward->depth == 0);
  int ops_in_forward = 0;
  bool saw_matmul_shapes = false;
  for (const auto& e : p.events()) {
    if (e.kind != prof::EventKind::Op || e.thread != forward->thread) continue;
    if (e.start_ns >= forward->start_ns && e.end_ns <= forward->end_ns) {
      ++ops_in_forward;
      CHECK(e.depth >= 1);
      CHECK(e.device == Device::cpu());
      CHECK(!e.dtypes.empty());
      if (e.shapes.find("[16, 8]") != std::string::npos) saw_matmul_shapes = true;
    }
  }
  CHECK(ops_in_forward >= 2);
  CHECK(saw_matmul_shapes);
  // Self time of the range = its duration minus the ops directly inside it.
  CHECK(forward->self_ns >= 0);
  CHECK(forward->self_ns <= forward->duration_ns());

  // Every backward node links to a forward op with the same sequence number, and ops that
  // recorded a node have one backward each (the fc weight, bias and the loss all need grads).
  std::map<int64_t, const prof::Event*> fwd;
  for (const auto& e : p.events()) {
    if (e.kind == prof::EventKind::Op && e.sequence_nr >= 0) fwd[e.sequence_nr] = &e;
  }
  int linked = 0;
  for (const auto& e : p.events()) {
    if (e.kind != prof::EventKind::Backward || e.name == "AccumulateGrad") continue;
    REQUIRE(e.sequence_nr >= 0);
    auto it = fwd.find(e.sequence_nr);
    REQUIRE(it != fwd.end());
    CHECK(e.name == it->second->name + " backward");
    CHECK(it->second->end_ns <= e.start_ns);
    ++linked;
  }
  CHECK(linked == int(fwd.size()));
  CHECK(linked >= 2);
  CHECK(names_of(p, prof::EventKind::Backward).count("AccumulateGrad") == 2);  // weight and bias

  // The table: sorted by self time, with the header.
  auto rows = p.key_averages();
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].self_ns >= rows[i].self_ns);
  int64_t self_sum = 0, dur_top = 0;
  for (const auto& e : p.events()) {
    self_sum += e.self_ns;
    if (e.depth == 0) dur_top += e.duration_ns();
  }
  CHECK(self_sum == dur_top);  // self times partition the top-level events' time
  std::string table = p.table();
  CHECK(table.find("self%") != std::string::npos);
  CHECK(table.find("forward") != std::string::npos);
}

TEST_CASE("profiler: the Chrome trace's structure") {
  Step step;
  step.run();
  prof::Profile p;
  {
    prof::Profiler profiler;
    step.run();
    p = profiler.stop();
  }
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("brisk_trace_" + std::to_string(::getpid()) + ".json");
  p.export_chrome_trace(path.string());
  std::ifstream f(path);
  nlohmann::json doc = nlohmann::json::parse(f);
  fs::remove(path);
  REQUIRE(doc.contains("traceEvents"));
  const auto& events = doc["traceEvents"];
  REQUIRE(events.is_array());
  size_t complete = 0, starts = 0, finishes = 0;
  std::set<std::string> names;
  for (const auto& e : events) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("ts"));
    REQUIRE(e.contains("pid"));
    REQUIRE(e.contains("tid"));
    std::string ph = e["ph"];
    if (ph == "X") {
      ++complete;
      CHECK(e["dur"].get<double>() >= 0);
      CHECK(e.contains("name"));
      CHECK(e.contains("cat"));
      names.insert(e["name"].get<std::string>());
    } else if (ph == "s") {
      ++starts;
    } else if (ph == "f") {
      ++finishes;
      CHECK(e["bp"] == "e");
    } else {
      FAIL("unexpected phase " << ph);
    }
  }
  CHECK(complete == p.events().size());
  CHECK(starts == finishes);
  CHECK(starts >= 2);
  for (const auto& e : p.events()) CHECK(names.count(e.name) == 1);
}

TEST_CASE("profiler: nothing is recorded outside a run; one run at a time") {
  Step step;
  step.run();
  CHECK_FALSE(prof::is_active());
  {
    prof::RecordFunction r("outside");  // no run: records nothing
  }
  prof::Profiler profiler;
  CHECK(prof::is_active());
  CHECK_THROWS_WITH_AS(prof::Profiler(), doctest::Contains("already active"), Error);
  prof::Profile p = profiler.stop();
  CHECK_FALSE(prof::is_active());
  CHECK(p.events().empty());  // nothing ran inside it, and the earlier step is not there
  CHECK_THROWS_WITH_AS(profiler.stop(), doctest::Contains("already stopped"), Error);
  step.run();  // after the run: nothing recorded, and a new run starts empty
  prof::Profiler again;
  CHECK(again.stop().events().empty());
}

TEST_CASE("profiler: fused optimizer steps, the gradient unscale and int8 inference are op events") {
  Tensor w = randn({4, 8}).requires_grad_(true);
  optim::Adam opt(std::vector<Tensor>{w}, optim::AdamOptions{.lr = 1e-3});  // fused by default
  optim::GradScaler scaler;
  auto mlp = std::make_shared<nn::models::MLP>(std::vector<int64_t>{8, 4});
  mlp->eval();
  nn::ModulePtr q = nn::quantize::quantize_dynamic(mlp);
  prof::Profiler profiler;
  scaler.scale((w * w).sum()).backward();
  CHECK(scaler.step(opt));
  scaler.update();
  {
    NoGradGuard no_grad;
    (*q)(randn({2, 8}));
  }
  const std::multiset<std::string> ops = names_of(profiler.stop(), prof::EventKind::Op);
  CHECK(ops.count("amp_unscale") == 1);
  CHECK(ops.count("fused_adam") == 1);
  CHECK(ops.count("int8_linear") == 1);
}
