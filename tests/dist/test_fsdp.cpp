// tests/dist/test_fsdp.cpp: FullyShardedDataParallel (dist/fsdp.h) on 2 ranks (the suite) and
// 4 (tests/dist/run.sh and tests/dist/gloo.sh run `fsdp:*` again with -np 4): equal to DDP +
// AdamW over 20 steps with gradient accumulation (F64, 1e-12), the units' parameters freed
// outside their forward and backward, prefetch used, a weight two units share kept in the root
// (SGD with momentum against one process), memory per rank against 1/N of DDP's, a
// sharded checkpoint loaded at half (and back at the full) world size, and the errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "dist/ddp.h"
#include "dist/fsdp.h"
#include "dist/process_group.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;

namespace {

dist::ProcessGroupPtr pg() { return dist::world(); }

// A root parameter (scale) around a body whose Linear layers are the units: 8 -> width,
// `depth` of width -> width, width -> 4, with Tanh between.
class Net : public nn::Module {
 public:
  Net(int64_t width, int depth) : nn::Module("Net") {
    body = register_module("body", std::make_shared<nn::Sequential>());
    body->push_back(std::make_shared<nn::Linear>(8, width));
    for (int k = 0; k < depth; ++k) {
      body->push_back(std::make_shared<nn::Tanh>());
      body->push_back(std::make_shared<nn::Linear>(width, width));
    }
    body->push_back(std::make_shared<nn::Tanh>());
    body->push_back(std::make_shared<nn::Linear>(width, 4));
    register_parameter("scale", full({4}, 1.5));
  }
  Tensor forward(const Tensor& x) override { return (*body)(x)*parameter("scale"); }
  std::shared_ptr<nn::Sequential> body;
};

std::vector<std::string> linear_units(int depth) {  // "body.0", "body.2", ...
  std::vector<std::string> out;
  for (int k = 0; k < depth + 2; ++k) out.push_back("body." + std::to_string(2 * k));
  return out;
}
const std::vector<std::string> kUnits = linear_units(1);

std::shared_ptr<Net> make_net(int64_t width, int depth = 1) {
  manual_seed(42);  // the same weights in every replica
  auto m = std::make_shared<Net>(width, depth);
  m->to(DType::F64);
  return m;
}

optim::AdamWOptions adamw() { return {.lr = 1e-2, .weight_decay = 0.1}; }

double max_diff(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].first == b[i].first);
    const auto va = a[i].second.to_vector<double>(), vb = b[i].second.to_vector<double>();
    REQUIRE(va.size() == vb.size());
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]) / (1 + std::abs(vb[k])));
  }
  return worst;
}

int64_t bytes_of(const nn::NamedTensors& ts) {
  int64_t b = 0;
  for (const auto& [k, t] : ts) b += t.defined() ? t.numel() * int64_t(t.element_size()) : 0;
  return b;
}

}  // namespace

TEST_CASE("fsdp: equals DDP + AdamW over 20 steps (F64 1e-12), each unit's parameters freed outside its passes") {
  const int me = pg()->rank(), n = pg()->size();
  auto ddp_model = make_net(16);
  auto f_model = make_net(16);
  {  // a different local init: the constructor must replace it with rank 0's
    NoGradGuard no_grad;
    if (me == 1) f_model->body->named_parameters()[0].second.fill_(0.123);
  }
  dist::DistributedDataParallel ddp(ddp_model, pg());
  optim::AdamW adam(ddp.named_parameters(), adamw());
  dist::FSDP fsdp(f_model, pg(), {.units = kUnits});
  REQUIRE(fsdp.num_units() == 4);
  CHECK(fsdp.unit_name(0) == "");  // the root: "scale"
  CHECK(fsdp.unit_numel(0) == 4);
  CHECK(fsdp.unit_name(2) == "body.2");
  CHECK(fsdp.unit_numel(2) == 16 * 16 + 16);
  CHECK(fsdp.named_parameters().size() == 4);  // the shards, all the optimizer sees
  optim::AdamW f_adam(fsdp.named_parameters(), adamw());
  const int64_t rows = 16 / n;
  manual_seed(13);
  for (int step = 0; step < 20; ++step) {
    Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
    Tensor xs = narrow(x, 0, me * rows, rows), ys = narrow(y, 0, me * rows, rows);
    adam.zero_grad();
    mse_loss(ddp(xs), ys).backward();
    adam.step();
    f_adam.zero_grad();
    // Two half micro-batches, loss / 2 each: the shards' gradients accumulate over both.
    for (int k = 0; k < 2; ++k) {
      Tensor loss = mse_loss(fsdp(narrow(xs, 0, k * rows / 2, rows / 2)), narrow(ys, 0, k * rows / 2, rows / 2)) * 0.5;
      // Between forward and backward the units hold no bytes; the root stays gathered.
      for (const auto& [name, p] : f_model->body->named_parameters()) REQUIRE(p.storage()->bytes == 0);
      REQUIRE(f_model->parameter("scale").storage()->bytes > 0);
      loss.backward();
      const dist::FSDPMemory mem = fsdp.memory();
      REQUIRE(mem.gathered_params == 0);
      REQUIRE(mem.full_grads == 0);
      for (const auto& [name, p] : f_model->named_parameters()) REQUIRE(!p.grad().defined());
    }
    f_adam.step();
  }
  const double diff = max_diff(fsdp.full_state_dict(), ddp_model->state_dict());
  MESSAGE("FSDP against DDP on " << n << " ranks (" << std::string(pg()->backend()) << "): max weight difference "
                                 << diff << ", gathers prefetched " << fsdp.prefetched());
  CHECK(diff < 1e-12);
  // Forward: the gathers of units 2 and 3 (of 3) start early, backward: units 2 and 1; not in
  // the first forward, which has no order to follow yet.
  CHECK(fsdp.prefetched() == 20 * 2 * 4 - 2);
  {  // evaluation without gradients: the same outputs as DDP's model, nothing left gathered
    NoGradGuard no_grad;
    Tensor x = cast(randn({4, 8}), DType::F64);
    const Tensor a = fsdp(x), b = (*ddp_model)(x);
    CHECK(max(abs(a - b)).item<double>() < 1e-12);
    CHECK(fsdp.memory().gathered_params == 0);
  }
  // full_state_dict leaves every unit as it found it.
  for (const auto& [name, p] : f_model->body->named_parameters()) CHECK(p.storage()->bytes == 0);
  CHECK(fsdp.full_state_dict(true).empty() == (me != 0));
}

TEST_CASE("fsdp: parameters + gradients + AdamW state per rank within 1.1x of 1/N of DDP's") {
  const int me = pg()->rank(), n = pg()->size();
  auto ddp_model = make_net(128, 6);
  auto f_model = make_net(128, 6);
  dist::DistributedDataParallel ddp(ddp_model, pg());
  optim::AdamW adam(ddp.named_parameters(), adamw());
  dist::FSDP fsdp(f_model, pg(), {.units = linear_units(6)});
  optim::AdamW f_adam(fsdp.named_parameters(), adamw());
  manual_seed(3);
  for (int step = 0; step < 2; ++step) {
    Tensor x = cast(randn({8, 8}), DType::F64), y = cast(randn({8, 4}), DType::F64);
    adam.zero_grad();
    mse_loss(ddp(x), y).backward();
    adam.step();
    f_adam.zero_grad();
    fsdp.reset_peak();
    mse_loss(fsdp(x), y).backward();
    f_adam.step();
  }
  nn::NamedTensors grads;
  for (const auto& [k, p] : ddp_model->named_parameters()) grads.push_back({k, p.grad()});
  const int64_t d_params = bytes_of(ddp_model->named_parameters()), d_grads = bytes_of(grads),
                d_state = bytes_of(adam.state_dict().tensors);
  const int64_t d_total = d_params + d_grads + d_state;
  const dist::FSDPMemory m = fsdp.memory();
  const int64_t f_state = bytes_of(f_adam.state_dict().tensors);
  const int64_t f_total = m.shard_params + m.shard_grads + f_state + m.gathered_params + m.full_grads + m.replicated;
  const double ratio = double(f_total) / (double(d_total) / n);
  MESSAGE("rank " << me << " of " << n << ": FSDP holds " << f_total << " B (params " << m.shard_params << ", grads "
                  << m.shard_grads << ", AdamW state " << f_state << "), DDP " << d_total
                  << " B; ratio to 1/N: " << ratio << "; transient peak in a step " << m.peak_transient
                  << " B (a hidden unit: " << fsdp.unit_numel(2) * 8 << " B)");
  CHECK(m.gathered_params == 0);
  CHECK(m.full_grads == 0);
  CHECK(ratio <= 1.1);
  CHECK(ratio >= 1.0);
  // A step holds about three units' worth at a time (one gathered, its gradients, the next
  // gathered ahead), not the model's 8 units (6 of them the big ones).
  CHECK(m.peak_transient <= 3 * fsdp.unit_numel(2) * 8 + 2 * (fsdp.unit_numel(1) + fsdp.unit_numel(0)) * 8);
  CHECK(m.peak_transient < d_params / 2);
  CHECK(m.peak_transient > 0);
}

TEST_CASE("fsdp: a sharded checkpoint saved on N ranks loads on N/2, and one saved on N/2 loads on N (F64 1e-12)") {
  const int me = pg()->rank(), n = pg()->size();
  Tensor id = from_vector({double(getpid())}, {1}, DType::I64);
  pg()->broadcast(id, 0)->wait();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("brisk_fsdp_ckpt_" + std::to_string(id.item<int64_t>()));
  // Step s of a run on `ranks` ranks, this rank being `r` of them: its rows of batch s.
  auto train = [](dist::FSDP& f, optim::Optimizer& opt, int from, int to, int r, int ranks) {
    for (int s = from; s < to; ++s) {
      manual_seed(uint64_t(500 + s));
      Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
      const int64_t rows = 16 / ranks;
      opt.zero_grad();
      mse_loss(f(narrow(x, 0, r * rows, rows)), narrow(y, 0, r * rows, rows)).backward();
      opt.step();
    }
  };
  // A: n ranks, 20 steps, a sharded checkpoint after 10.
  dist::FSDP fa(make_net(16), pg(), {.units = kUnits});
  optim::AdamW oa(fa.named_parameters(), adamw());
  train(fa, oa, 0, 10, me, n);
  fa.save_sharded((dir / "a").string(), &oa);
  train(fa, oa, 10, 20, me, n);
  const nn::NamedTensors want = fa.full_state_dict();
  // B: the first half of the ranks resume A's checkpoint of step 10, save their own at 15.
  const int half = std::max(1, n / 2);
  std::vector<int> members;
  for (int r = 0; r < half; ++r) members.push_back(r);
  dist::ProcessGroupPtr sub = dist::new_group(members);
  if (me < half) {
    auto net = make_net(16);
    {  // other weights: the checkpoint must replace them
      NoGradGuard no_grad;
      for (Tensor& p : net->parameters()) p.fill_(0.5);
    }
    dist::FSDP fb(net, sub, {.units = kUnits});
    optim::AdamW ob(fb.named_parameters(), adamw());
    fb.load_sharded((dir / "a").string(), &ob);
    train(fb, ob, 10, 15, me, half);
    fb.save_sharded((dir / "b").string(), &ob);
    train(fb, ob, 15, 20, me, half);
    const double diff_b = max_diff(fb.full_state_dict(), want);
    MESSAGE("FSDP resumed " << n << " -> " << half << " ranks: max weight difference " << diff_b);
    CHECK(diff_b < 1e-12);
  }
  pg()->barrier()->wait();
  // C: n ranks resume B's checkpoint of step 15.
  dist::FSDP fc(make_net(16), pg(), {.units = kUnits});
  optim::AdamW oc(fc.named_parameters(), adamw());
  fc.load_sharded((dir / "b").string(), &oc);
  train(fc, oc, 15, 20, me, n);
  const double diff_c = max_diff(fc.full_state_dict(), want);
  MESSAGE("FSDP resumed " << n << " -> " << half << " -> " << n << " ranks: max weight difference " << diff_c);
  CHECK(diff_c < 1e-12);
  CHECK(error_text([&] { fc.load_sharded((dir / "nothing").string(), &oc); }).find("fsdp.rank0.safetensors") !=
        std::string::npos);
  pg()->barrier()->wait();
  if (me == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("fsdp: a weight two units share lives in the root; SGD with momentum equals one process (F64 1e-12)") {
  const int me = pg()->rank(), n = pg()->size();
  auto tied = [] {  // body.4's weight is body.2's
    auto m = make_net(16, 2);
    nn::Module& b4 = m->body->submodule("4");
    b4.remove_parameter("weight");
    b4.register_parameter("weight", m->body->submodule("2").parameter("weight"));
    return m;
  };
  auto ref = tied();
  auto f_model = tied();
  dist::FSDP fsdp(f_model, pg(), {.units = linear_units(2)});
  REQUIRE(fsdp.num_units() == 5);
  CHECK(fsdp.unit_numel(0) == 4 + 16 * 16);  // scale and the shared weight
  CHECK(fsdp.unit_name(2) == "body.2");
  CHECK(fsdp.unit_numel(2) == 16);  // its bias alone
  optim::SGD opt_ref(ref->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt(fsdp.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  const int64_t rows = 16 / n;
  manual_seed(17);
  for (int step = 0; step < 20; ++step) {
    Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
    opt_ref.zero_grad();
    mse_loss((*ref)(x), y).backward();
    opt_ref.step();
    opt.zero_grad();
    mse_loss(fsdp(narrow(x, 0, me * rows, rows)), narrow(y, 0, me * rows, rows)).backward();
    opt.step();
  }
  const double diff = max_diff(fsdp.full_state_dict(), ref->state_dict());
  MESSAGE("FSDP with a shared weight, SGD momentum, against one process: max weight difference " << diff);
  CHECK(diff < 1e-12);
}

TEST_CASE("fsdp: without prefetch nothing is gathered ahead and the weights are the same, bit for bit") {
  const int me = pg()->rank(), n = pg()->size();
  dist::FSDP a(make_net(16), pg(), {.units = kUnits});
  dist::FSDP b(make_net(16), pg(), {.units = kUnits, .prefetch = false});
  optim::AdamW oa(a.named_parameters(), adamw()), ob(b.named_parameters(), adamw());
  const int64_t rows = 16 / n;
  manual_seed(19);
  for (int step = 0; step < 3; ++step) {
    Tensor x = cast(randn({16, 8}), DType::F64), y = cast(randn({16, 4}), DType::F64);
    for (auto [f, o] : {std::pair{&a, &oa}, std::pair{&b, &ob}}) {
      o->zero_grad();
      mse_loss((*f)(narrow(x, 0, me * rows, rows)), narrow(y, 0, me * rows, rows)).backward();
      o->step();
    }
  }
  CHECK(a.prefetched() > 0);
  CHECK(b.prefetched() == 0);
  CHECK(max_diff(a.full_state_dict(), b.full_state_dict()) == 0);
}

TEST_CASE("fsdp: units that nest or do not exist are errors naming them") {
  CHECK(error_text([] {
          dist::FSDP(make_net(4), pg(), {.units = {"body", "body.2"}});
        }).find("unit 'body.2' is inside unit 'body'") != std::string::npos);
  CHECK(error_text([] { dist::FSDP(make_net(4), pg(), {.units = {"body.9"}}); }).find("no submodule 'body.9'") !=
        std::string::npos);
  // The default policy: every child holding parameters ("body"; "scale" is the root's).
  dist::FSDP f(make_net(4), pg());
  REQUIRE(f.num_units() == 2);
  CHECK(f.unit_name(1) == "body");
}
